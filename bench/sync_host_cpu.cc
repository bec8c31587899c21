// The host side of `msrun-ssh sync` without a cluster: the real launcher code (sync_hosts) syncs
// DIR to each DEST, one "host" per DEST, over ProcessTransport, which runs each command as
// `/bin/sh -c COMMAND` in a child of this process, as sshd runs it (without the login shell's
// rc). Every host's commands, their stdin and the order of the exchanges are the launcher's own.
// Prints one line: the hosts, the channels opened, the files written, and the CPU time (user +
// sys) of the children per host — what each host's CPU pays for its sync. Exits 1 unless every
// host synced.
// Used by bench/sync_host_cpu.sh, which sets up a re-sync after one changed file.
//
//   cmake --build build --target sync_host_cpu      # not part of `all`
//   build/bench/sync_host_cpu DIR DEST...
#include <sys/resource.h>

#include <cstdio>
#include <string>
#include <vector>

#include "msrun_ssh/process.h"
#include "msrun_ssh/sync.h"

namespace {

namespace ms = msrun_ssh;

// Counts the channels it opens.
class CountingTransport : public ms::ProcessTransport {
 public:
  ms::ChannelId exec(size_t host, const std::string& command) override {
    ++channels;
    return ProcessTransport::exec(host, command);
  }
  size_t channels = 0;
};

double children_cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_CHILDREN, &u);
  auto ms_of = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
  return ms_of(u.ru_utime) + ms_of(u.ru_stime);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DIR DEST...\n", argv[0]);
    return 2;
  }
  ms::SyncSource source;
  source.dir = argv[1];
  source.dests.assign(argv + 2, argv + argc);
  source.rules = ms::sync_rules(source.dir, {});
  source.local = ms::local_manifest(source.dir, source.rules);
  std::vector<std::string> names(source.dests.size(), "host");
  double before = children_cpu_ms();
  std::vector<ms::SyncHostResult> results;
  size_t channels = 0;
  {
    CountingTransport t;
    results = ms::sync_hosts(t, source, ms::SyncSettings{});
    channels = t.channels;
  }  // every child reaped
  double per_host = (children_cpu_ms() - before) / static_cast<double>(source.dests.size());
  bool ok = true;
  size_t files = 0;
  for (size_t h = 0; h < results.size(); ++h) {
    ok = ok && results[h].error.empty();
    files += results[h].files;
    std::fprintf(stderr, "%s\n", ms::sync_result_line(names, results, h).c_str());
  }
  std::printf("hosts %zu channels %zu files %zu cpu_ms_per_host %.1f\n", source.dests.size(),
              channels, files, per_host);
  return ok ? 0 : 1;
}
