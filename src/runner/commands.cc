// The commands besides a run (runner.h): `stop` and `sync` over SSH, and a run whose console goes
// to a file (check --net=collective's job).
#include <fcntl.h>
#include <fmt/format.h>
#include <libssh/libssh.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "internal.h"
#include "msrun_ssh/agent.h"
#include "msrun_ssh/base.h"
#include "msrun_ssh/batch.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/console_sink.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/events.h"
#include "msrun_ssh/jobs.h"
#include "msrun_ssh/keeper.h"
#include "msrun_ssh/mux.h"
#include "msrun_ssh/runner.h"
#include "msrun_ssh/ssh.h"
#include "msrun_ssh/ssh_settings.h"
#include "msrun_ssh/stacks.h"
#include "msrun_ssh/status_line.h"
#include "msrun_ssh/sync.h"
#include "msrun_ssh/topology.h"

namespace msrun_ssh {

using runner_detail::connect;

namespace {

// Points file descriptors 1 and 2 at a file while it lives, then back where they were.
class ConsoleToFile {
 public:
  explicit ConsoleToFile(const std::string& path) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw InputError(fmt::format("cannot create {}: {}", path, std::strerror(errno)));
    console_sink().drain();  // what is queued goes where it was meant to
    std::fflush(stdout);
    std::fflush(stderr);
    for (int i : {1, 2}) {
      saved_[i - 1] = ::fcntl(i, F_DUPFD_CLOEXEC, 3);
      ::dup2(fd, i);
    }
    ::close(fd);
  }
  ~ConsoleToFile() {
    console_sink().drain();
    std::fflush(stdout);
    std::fflush(stderr);
    for (int i : {1, 2})
      if (saved_[i - 1] >= 0) {
        ::dup2(saved_[i - 1], i);
        ::close(saved_[i - 1]);
      }
  }
  ConsoleToFile(const ConsoleToFile&) = delete;
  ConsoleToFile& operator=(const ConsoleToFile&) = delete;

 private:
  int saved_[2] = {-1, -1};
};

}  // namespace

int run_job_quietly(const Options& options, Plan& plan, const std::string& console) {
  ConsoleToFile redirect(console);
  return run_job(options, plan);
}

int stop_on_hosts(Transport& t, const std::vector<std::string>& addresses, const Options& options,
                  std::FILE* out, std::FILE* err, const std::vector<std::string>& unreached) {
  std::vector<size_t> reached;
  int code = kExitOk;
  for (size_t h = 0; h < addresses.size(); ++h) {
    if (h < unreached.size() && !unreached[h].empty()) {
      std::fprintf(err, "msrun-ssh: %s: %s: not stopped there (its processes may still run)\n",
                   addresses[h].c_str(), unreached[h].c_str());
      code = kExitHostFailure;
    } else {
      reached.push_back(h);
    }
  }
  auto ended =
      runner_detail::stop_processes(t, reached, options.job, options.kill_grace, options.attempts,
                                    options.kill_grace + options.connect_timeout + 5);
  size_t killed = 0;
  for (size_t i = 0; i < ended.size(); ++i) {
    const std::string& address = addresses[reached[i]];
    if (!ended[i]) {
      std::fprintf(err, "msrun-ssh: %s: stop did not finish\n", address.c_str());
      code = kExitHostFailure;
      continue;
    }
    for (const auto& process : *ended[i])
      std::fprintf(out, "%s: killed %s\n", address.c_str(), process.c_str());
    killed += ended[i]->size();
  }
  if (reached.size() == addresses.size())
    std::fprintf(out, "job %s: %zu signals sent on %zu hosts\n", options.job.c_str(), killed,
                 addresses.size());
  else
    std::fprintf(out, "job %s: %zu signals sent on %zu of %zu hosts\n", options.job.c_str(), killed,
                 reached.size(), addresses.size());
  return code;
}

int stop_job(const Options& options, const Cluster& cluster) {
  std::vector<const Host*> hosts;
  std::vector<SshEndpoint> endpoints;
  std::vector<std::string> addresses;
  for (const auto& h : cluster.hosts) {
    hosts.push_back(&h);
    endpoints.push_back(endpoint_of(h));
    addresses.push_back(host_key(h));
  }
  auto pool = host_transport(options, std::move(endpoints), ssh_settings(options));
  // Every host it reaches is stopped: a host that died (often why a job is stopped) keeps the
  // others' processes from nothing.
  std::vector<std::string> unreached =
      connect_reaching(*pool, std::vector<int>(hosts.size(), 1), addresses);
  int code = stop_on_hosts(*pool, addresses, options, stdout, stderr, unreached);
  pool->disconnect_all();
  return code;
}

int sync_job(const Options& options, const Cluster& cluster) {
  std::vector<const Host*> hosts;
  std::vector<SshEndpoint> endpoints;
  std::vector<std::string> addresses, workdirs;
  for (const auto& h : cluster.hosts) {
    hosts.push_back(&h);
    endpoints.push_back(endpoint_of(h));
    addresses.push_back(host_key(h));
    workdirs.push_back(h.workdir.empty() ? options.launcher_cwd : h.workdir);
  }
  SyncSource source = make_sync_source(options, workdirs);
  SshSettings settings = ssh_settings(options);
  std::string key, socket;
  if (options.persist > 0 && options.transport == TransportKind::kSsh) {
    key = mux_key(endpoints, settings);
    try {
      socket = mux_socket_path(key);
    } catch (const std::runtime_error& e) {
      std::fprintf(stderr, "msrun-ssh: warning: --persist: %s: connections not kept\n", e.what());
    }
    if (!socket.empty())
      if (auto kept = MuxClient::attach(socket, key, hosts.size(), options.persist)) {
        std::fprintf(stderr, "msrun-ssh: sync: over the connections kept by process %d\n",
                     kept->keeper_pid());
        bool ok = sync_and_report(*kept, source, addresses, stdout);
        kept->disconnect_all();
        return ok ? kExitOk : kExitHostFailure;
      }
  }
  auto pool = host_transport(options, std::move(endpoints), settings);
  if (!connect(*pool, hosts, std::vector<int>(hosts.size(), 1))) return kExitHostFailure;
  bool ok = sync_and_report(*pool, source, addresses, stdout);
  int code = ok ? kExitOk : kExitHostFailure;
  if (ok && !socket.empty()) {
    MuxAhead ahead{may_start_ahead, {}};
    for (size_t h = 0; h < hosts.size(); ++h)
      ahead.now.emplace_back(h, sync_command(source.dests[h], kTokenFromStdin));
    console_sink().stop();  // it forks: no thread of the sink's may be in the middle of a write
    keep_connections(*pool, socket, key, hosts.size(), options.persist, std::move(ahead), code);
  }
  pool->disconnect_all();
  return code;
}

}  // namespace msrun_ssh
