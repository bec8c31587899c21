// Sync as the commands use it (sync.h): the source from the options, the report per host.
#include <unistd.h>

#include "msrun_ssh/sync.h"

namespace msrun_ssh {

SyncSource make_sync_source(const Options& options, const std::vector<std::string>& workdirs) {
  std::string script = options.command == Command::kSync ? "" : options.task_script;
  SyncWhere where =
      sync_where(options.launcher_cwd, options.sync_dir, options.sync_dest, script, workdirs);
  SyncSource source;
  source.dir = where.dir;
  source.dests = where.dests;
  source.rules = sync_rules(where.dir, options.sync_excludes);
  std::vector<std::string> skipped;
  source.local = local_manifest(where.dir, source.rules, &skipped);
  for (const auto& s : skipped)
    std::fprintf(stderr,
                 "msrun-ssh: warning: sync: %s/%s is not a file, directory or symlink: left out\n",
                 where.dir.c_str(), s.c_str());
  return source;
}

bool sync_and_report(Transport& transport, const SyncSource& source,
                     const std::vector<std::string>& addresses, std::FILE* out,
                     const std::function<bool()>& stop) {
  SyncSettings settings;
  settings.progress = isatty(2) ? stderr : nullptr;
  settings.stop = stop;
  auto results = sync_hosts(transport, source, settings);
  bool ok = true;
  for (size_t h = 0; h < results.size(); ++h) {
    ok = ok && results[h].error.empty();
    std::fprintf(out, "%s\n", sync_result_line(addresses, results, h).c_str());
  }
  std::fflush(out);
  return ok;
}

}  // namespace msrun_ssh
