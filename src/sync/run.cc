// Sync as the commands use it (sync.h): the source from the options, the report per host.
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "msrun_ssh/command.h"
#include "msrun_ssh/sync.h"

namespace msrun_ssh {
namespace {

// `text` as a gitignore pattern that matches it literally, but for each of `fields` in it, which
// matches any name ("*").
std::string literal_pattern(std::string_view text,
                            std::initializer_list<std::string_view> fields = {}) {
  std::string out;
  while (!text.empty()) {
    auto field = std::find_if(fields.begin(), fields.end(),
                              [&](std::string_view f) { return text.starts_with(f); });
    if (field != fields.end()) {
      out += '*';
      text.remove_prefix(field->size());
      continue;
    }
    char c = text.front();
    if (c == '*' || c == '?' || c == '[' || c == '\\') out += '\\';
    out += c;
    text.remove_prefix(1);
  }
  return out;
}

}  // namespace

std::vector<std::string> launcher_file_rules(const std::string& sync_dir, const Options& options) {
  namespace fs = std::filesystem;
  std::vector<std::string> rules{std::string(kDetachedStateDir) + "/"};
  std::error_code ec;
  fs::path top = fs::weakly_canonical(sync_dir, ec);
  if (ec) top = fs::path(sync_dir).lexically_normal();
  fs::path logs = fs::weakly_canonical(absolute_path(options.log_dir, options.launcher_cwd), ec);
  if (ec) logs = fs::path(absolute_path(options.log_dir, options.launcher_cwd)).lexically_normal();
  fs::path rel = logs.lexically_relative(top);
  if (rel.empty() || *rel.begin() == "..") return rules;  // outside the synced directory
  std::string at = "/";
  if (rel != ".") at += literal_pattern(rel.generic_string()) + "/";
  for (const char* name :
       {"msrun-ssh.log", "summary.json", "scheduler.log", "scheduler.attempt*.log", "stacks-*.txt"})
    rules.push_back(at + name);
  rules.push_back(at + literal_pattern(options.worker_log_name, {"{ip}", "{hostname}"}) + "_*.log");
  return rules;
}

SyncSource make_sync_source(const Options& options, const std::vector<std::string>& workdirs) {
  std::string script = options.command == Command::kSync ? "" : options.task_script;
  SyncWhere where =
      sync_where(options.launcher_cwd, options.sync_dir, options.sync_dest, script, workdirs);
  SyncSource source;
  source.dir = where.dir;
  source.dests = where.dests;
  source.rules =
      sync_rules(where.dir, options.sync_excludes, launcher_file_rules(where.dir, options));
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
