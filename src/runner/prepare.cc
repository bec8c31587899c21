// Everything before a process starts, attached or detached: connecting every host (phase one),
// the sync, binding from the hosts' topologies, the torch master port, the hosts' own names.
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "internal.h"
#include "msrun_ssh/base.h"
#include "msrun_ssh/batch.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/runner.h"
#include "msrun_ssh/ssh_settings.h"
#include "msrun_ssh/sync.h"
#include "msrun_ssh/topology.h"

namespace msrun_ssh::runner_detail {
namespace {

bool needs_topology(const HostPlan& h) {
  for (const auto& p : h.processes)
    if (p.bind_pending || !p.cpus.empty() || !p.numa_nodes.empty()) return true;
  return false;
}

// Binding from each host's real topology (decide_binding, plan.h): one probe per host, all hosts
// at once, then the binding step; the same round trip tells whether the host has the taskset /
// numactl the bound commands start with.
// Returns false (after printing why) when a host could not be probed, or silently when
// `keep_waiting` ended the wait (a signal: the caller says so); bad binding input throws
// InputError naming the host.
bool bind_from_topologies(Transport& pool, Plan& plan, const Options& options,
                          const std::function<bool()>& keep_waiting) {
  std::vector<size_t> hosts;
  for (size_t h = 0; h < plan.hosts.size(); ++h)
    if (needs_topology(plan.hosts[h])) hosts.push_back(h);
  if (hosts.empty()) return true;
  // npu-smi, asked on Ascend hosts, may take up to 2 x 5 s (topology.sh).
  double timeout = std::max(20.0, options.connect_timeout);
  auto probes =
      exited_output(run_batch(pool, hosts, binding_probe_command(), timeout, keep_waiting));
  if (!keep_waiting()) return false;
  bool ok = true;
  for (size_t i = 0; i < hosts.size(); ++i) {
    HostPlan& hp = plan.hosts[hosts[i]];
    if (!probes[i]) {
      std::fprintf(stderr, "msrun-ssh: %s: cannot read the host's topology\n",
                   host_key(hp.host).c_str());
      ok = false;
      continue;
    }
    try {
      Topology topo = parse_probe_output(*probes[i]);
      apply_binding(hp, decide_binding(hp, options, &topo), options);
    } catch (const InputError& e) {
      throw InputError(fmt::format("host {}: {}", host_key(hp.host), e.what()));
    }
    for (const auto& p : hp.processes) {
      if (p.argv.empty()) continue;
      const std::string& tool = p.argv[0];
      if ((tool == "taskset" || tool == "numactl") && !probe_found_tool(*probes[i], tool))
        throw InputError(fmt::format("host {}: binding needs {}, which is not installed there",
                                     host_key(hp.host), tool));
    }
  }
  return ok;
}

// The torch contract's rendezvous (rank 0's TCPStore) listens on MASTER_PORT on the master; a port
// already listened on is the most common rendezvous failure, so it is checked before anything
// starts: one read of the master's /proc/net/tcp and tcp6 (no program but awk needed).
enum class PortCheck { kFree, kTaken, kNoAnswer };

PortCheck master_port_free(Transport& t, const Plan& plan, double timeout_s,
                           const std::function<bool()>& keep_waiting) {
  if (plan.contract != Contract::kTorch) return PortCheck::kFree;
  size_t master = 0;
  while (master < plan.hosts.size() && !plan.hosts[master].is_master) ++master;
  std::string cmd = fmt::format(
      "awk 'FNR > 1 && $4 == \"0A\" {{ n = split($2, a, \":\"); if (a[n] == \"{:04X}\") f = 1 }} "
      "END {{ print (f ? \"taken\" : \"free\") }}' /proc/net/tcp /proc/net/tcp6 2>/dev/null",
      plan.master_port);
  auto got = exited_output(run_batch(t, {master}, cmd, timeout_s, keep_waiting));
  if (!keep_waiting()) return PortCheck::kNoAnswer;  // a signal: the caller says so
  std::string answer = got[0].value_or("");
  if (answer.rfind("free", 0) == 0) return PortCheck::kFree;
  const std::string host = host_key(plan.hosts[master].host);
  if (answer.rfind("taken", 0) == 0) {
    std::fprintf(stderr,
                 "msrun-ssh: error: --master_port=%d is taken on the master %s (a process "
                 "listens there); choose another port or end what holds it\n",
                 plan.master_port, host.c_str());
    return PortCheck::kTaken;
  }
  // The host, not the user's input: its connection or its session ended before it answered.
  std::fprintf(stderr,
               "msrun-ssh: the master %s did not answer whether --master_port=%d is free (its "
               "connection or session ended); nothing was started\n",
               host.c_str(), plan.master_port);
  return PortCheck::kNoAnswer;
}

// The processes earlier attempts left on the hosts lost during them (their connection cut, or
// the host down and up again): their watchdog ends them only once it has missed the launcher for
// two heartbeats and the grace, and until then they may hold what the new attempt needs (the
// devices, the torch master's port, the files). Ended first, over the new connections, as
// `msrun-ssh stop` ends a job (SIGTERM, the grace, SIGKILL); each process ended is named. False
// when a host did not answer. A signal (`keep_waiting` false) ends the grace at once: SIGKILL, as
// a second Ctrl-C does in a teardown, kKillNowWaitMs for the hosts to confirm; then false too,
// the caller saying why.
bool end_earlier_attempts(Transport& t, const Plan& plan, const EarlierAttempts& earlier,
                          const Options& options, const std::function<bool()>& keep_waiting) {
  if (earlier.hosts.empty() || earlier.attempts < 1) return true;
  auto ended =
      stop_processes(t, earlier.hosts, earlier.job_id, options.kill_grace, earlier.attempts,
                     options.kill_grace + std::max(10.0, options.connect_timeout), keep_waiting);
  bool ok = keep_waiting();
  for (size_t i = 0; i < earlier.hosts.size(); ++i) {
    const std::string host = host_key(plan.hosts[earlier.hosts[i]].host);
    if (!ended[i] && !ok) {
      std::fprintf(stderr,
                   "msrun-ssh: %s: interrupted before the end of what an earlier attempt left "
                   "there was confirmed; it may still run there\n",
                   host.c_str());
      continue;
    }
    if (!ended[i]) {
      std::fprintf(stderr,
                   "msrun-ssh: %s: cannot end what an earlier attempt left there (lost with the "
                   "host); nothing was started\n",
                   host.c_str());
      ok = false;
      continue;
    }
    for (const auto& process : *ended[i])
      std::fprintf(stderr, "msrun-ssh: %s: killed %s, left by an earlier attempt\n", host.c_str(),
                   process.c_str());
  }
  return ok;
}

}  // namespace

std::vector<std::optional<std::vector<std::string>>> stop_processes(
    Transport& t, const std::vector<size_t>& hosts, const std::string& job, double grace,
    int attempts, double timeout_s, const std::function<bool()>& keep_waiting) {
  Batch batch(t);
  const std::string command = stop_command(job, grace, attempts);
  for (size_t h : hosts) batch.start(h, command);
  // Cut short: 'K' on its stdin ends each stop's grace at once (sweep.sh's teardown).
  batch.wait_or_tell(t.now_ms() + timeout_s * 1000, keep_waiting, "K", kKillNowWaitMs);
  std::vector<std::optional<std::vector<std::string>>> ended;
  for (const auto& answer : exited_output(batch.results())) {
    ended.emplace_back();
    if (!answer) continue;
    ended.back().emplace();
    for (std::string_view line : split_lines(*answer))
      if (auto swept = parse_swept_line(line)) ended.back()->push_back(describe_swept(*swept));
  }
  return ended;
}

bool connect(HostTransport& pool, const std::vector<const Host*>& hosts,
             const std::vector<int>& connections, StatusLine* status,
             std::map<std::string, std::string>* failed_hosts) {
  auto results = pool.connect_all(connections);
  if (status) status->hide();
  for (const auto& w : pool.warnings())
    std::fprintf(stderr, "msrun-ssh: warning: %s: %s\n", host_key(*hosts[w.host]).c_str(),
                 w.message.c_str());
  size_t failed = 0;
  for (size_t h = 0; h < results.size(); ++h)
    if (results[h]) {
      ++failed;
      std::fprintf(stderr, "msrun-ssh: %s: %s\n", host_key(*hosts[h]).c_str(),
                   results[h]->reason.c_str());
      if (failed_hosts) (*failed_hosts)[host_key(*hosts[h])] = results[h]->reason;
    }
  if (failed == 0) return true;
  std::fprintf(stderr, "msrun-ssh: %zu of %zu hosts failed; nothing was started\n", failed,
               hosts.size());
  pool.disconnect_all();
  return false;
}

std::vector<std::string> host_names(Transport& t, const Plan& plan, double timeout_s) {
  std::vector<std::string> names;
  bool wanted = false;
  for (const auto& h : plan.hosts) {
    names.push_back(h.host.address);
    for (const auto& p : h.processes)
      wanted = wanted || p.log_name.find(kHostnameToken) != std::string::npos;
  }
  if (!wanted) return names;
  std::vector<size_t> all;
  for (size_t h = 0; h < plan.hosts.size(); ++h) all.push_back(h);
  auto got = exited_output(run_batch(t, all, "uname -n", timeout_s));
  for (size_t h = 0; h < got.size(); ++h) {
    std::string n = got[h].value_or("");
    while (!n.empty() && (n.back() == '\n' || n.back() == '\r')) n.pop_back();
    if (!n.empty()) names[h] = n;
  }
  return names;
}

JobHosts job_hosts(const Plan& plan) {
  JobHosts j;
  for (const auto& h : plan.hosts) {
    j.hosts.push_back(&h.host);
    j.endpoints.push_back(endpoint_of(h.host));
    int channels = static_cast<int>(h.processes.size()) + 1;  // + the watchdog
    j.connections.push_back((channels + kChannelsPerConnection - 1) / kChannelsPerConnection);
  }
  return j;
}

int wait_for_signal(int sfd, double seconds) {
  double deadline = monotonic_ms() + seconds * 1000;
  for (;;) {
    double left = deadline - monotonic_ms();
    pollfd p{sfd, POLLIN, 0};
    int ready = ::poll(&p, 1, left > 0 ? static_cast<int>(std::ceil(left)) : 0);
    if (ready > 0 && (p.revents & POLLIN) == 0) return 0;  // POLLNVAL, POLLERR: no signal to read
    if (ready <= 0) {
      if (left <= 0) return 0;
      continue;
    }
    signalfd_siginfo info{};
    if (::read(sfd, &info, sizeof info) != static_cast<ssize_t>(sizeof info) ||
        info.ssi_signo == SIGQUIT || info.ssi_signo == SIGCONT)
      continue;
    if (info.ssi_signo == SIGTSTP) {  // Ctrl-Z: nothing runs on the hosts; the launcher stops
      ::kill(::getpid(), SIGSTOP);
      continue;
    }
    return exit_status_of_signal(static_cast<int>(info.ssi_signo));
  }
}

std::optional<PrepareFailure> prepare_hosts(HostTransport& pool, Transport& commands, Plan& plan,
                                            const JobHosts& jh, const Options& options,
                                            bool report_bindings, StatusLine* status,
                                            std::map<std::string, std::string>* unreachable,
                                            bool interruptible, const EarlierAttempts* earlier) {
  std::optional<SyncSource> sync;
  std::vector<std::string> addresses, workdirs;
  for (const auto& h : plan.hosts) {
    addresses.push_back(host_key(h.host));
    workdirs.push_back(h.host.workdir);
  }
  if (options.sync) sync = make_sync_source(options, workdirs);
  // Reading a signalfd takes only the signals of its own mask: the others stay queued.
  int sfd = interruptible ? signal_fd({SIGINT, SIGTERM, SIGHUP}) : -1;
  struct Close {
    int fd;
    ~Close() {
      if (fd >= 0) ::close(fd);
    }
  } close_sfd{sfd};
  int signal = 0;  // the exit status of a signal to the launcher, once one came
  auto signalled = [&] {
    if (signal == 0 && sfd >= 0) signal = wait_for_signal(sfd, 0);
    return signal != 0;
  };
  auto interrupted = [&] {
    std::fprintf(stderr, "msrun-ssh: interrupted while preparing the hosts; nothing was started\n");
    return PrepareFailure{signal, "interrupted before anything started", true};
  };
  // A step that failed while a signal came: the signal is the verdict (it may be the cause).
  auto failed = [&](int status, const char* why) {
    return signalled() ? interrupted() : PrepareFailure{status, why};
  };
  if (!connect(pool, jh.hosts, jh.connections, status, unreachable))
    return failed(kExitHostFailure, "a host could not be reached");
  if (signalled()) return interrupted();
  auto not_signalled = [&] { return !signalled(); };
  if (earlier && !end_earlier_attempts(commands, plan, *earlier, options, not_signalled))
    return failed(kExitHostFailure, "what an earlier attempt left could not be ended");
  if (signalled()) return interrupted();
  if (sync && !sync_and_report(commands, *sync, addresses, stderr, signalled)) {
    if (signalled()) return interrupted();
    std::fprintf(stderr, "msrun-ssh: the sync failed; nothing was started\n");
    return PrepareFailure{kExitHostFailure, "the sync failed"};
  }
  if (signalled()) return interrupted();
  if (!bind_from_topologies(commands, plan, options, not_signalled))
    return failed(kExitHostFailure, "a host's topology could not be read");
  if (signalled()) return interrupted();
  switch (master_port_free(commands, plan, options.connect_timeout, not_signalled)) {
    case PortCheck::kFree:
      break;
    case PortCheck::kTaken:
      return failed(kExitUsage, "the master port is taken");
    case PortCheck::kNoAnswer:
      return failed(kExitHostFailure, "the master did not answer");
  }
  if (signalled()) return interrupted();
  if (report_bindings) std::fputs(describe_bindings(plan).c_str(), stderr);
  return std::nullopt;
}

}  // namespace msrun_ssh::runner_detail
