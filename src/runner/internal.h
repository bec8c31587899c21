// What the files of the runner room share (src/runner/*.cc): the Runner's time constants, two
// small helpers, and what comes before a process starts (prepare.cc). Not a header of the room's
// contract (that is include/msrun_ssh/runner.h).
#pragma once

#include <fmt/format.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "msrun_ssh/hostfile.h"
#include "msrun_ssh/plan.h"
#include "msrun_ssh/ssh.h"
#include "msrun_ssh/status_line.h"
#include "msrun_ssh/transport.h"

namespace msrun_ssh::runner_detail {
inline constexpr double kEchoSlackMs =
    2000;  // beyond 2x heartbeat before a silent host counts as lost
inline constexpr double kSuspendWaitMs =
    3000;  // for the watchdogs' "paused", and the console, at Ctrl-Z
inline constexpr double kStallToldMs = 2000;       // a launcher that stood still longer says so
inline constexpr double kTeardownSlackMs = 10000;  // beyond the kill grace before we stop waiting
inline constexpr double kStartedShownMs = 500;  // "started N/N" stays this long on the status row
// The straggler watch's samplers start this long after the processes (Runner::start_samplers).
inline constexpr double kSamplerDelayMs = 1000;
inline constexpr double kKillNowWaitMs = 3000;

template <typename T>
void put(std::vector<T>& v, ChannelId id, T value) {
  if (id < 0) return;
  if (static_cast<size_t>(id) >= v.size()) v.resize(static_cast<size_t>(id) + 1, T(-1));
  v[static_cast<size_t>(id)] = value;
}

template <typename T>
T get(const std::vector<T>& v, ChannelId id) {
  return id >= 0 && static_cast<size_t>(id) < v.size() ? v[static_cast<size_t>(id)] : T(-1);
}

inline std::string describe_status(int status, const std::string& signal) {
  if (!signal.empty()) return fmt::format("killed by SIG{}", signal);
  return fmt::format("exit {}", status);
}

// Phase one. Prints every failed host and returns false when any failed: then every host is
// disconnected (two-phase start: nothing runs anywhere unless every host is ready), and `failed`
// (when given) maps each failed host (host_key) to why.
bool connect(HostTransport& pool, const std::vector<const Host*>& hosts,
             const std::vector<int>& connections, StatusLine* status = nullptr,
             std::map<std::string, std::string>* failed_hosts = nullptr);

// Each host's connections: enough channels for its processes and its watchdog.
struct JobHosts {
  std::vector<const Host*> hosts;
  std::vector<SshEndpoint> endpoints;
  std::vector<int> connections;
};
JobHosts job_hosts(const Plan& plan);

// Each host's own name (uname -n), for {hostname} in log names; one round trip, only when a log
// name asks for it. A host that does not answer keeps its address.
std::vector<std::string> host_names(Transport& t, const Plan& plan, double timeout_s);

// What ended the preparation of the hosts: the exit status, why, and whether it was a signal to
// the launcher.
struct PrepareFailure {
  int status = 0;
  std::string why;
  bool interrupted = false;
};

// What earlier attempts of a restarted job may have left running: its id, how many attempts ran
// before this one, and the hosts of this attempt (plan indexes) lost during one of them.
struct EarlierAttempts {
  std::string job_id;
  int attempts = 0;
  std::vector<size_t> hosts;
};

// Everything before a process starts, attached or detached: connect every host (`pool`), then over
// `commands` (the launch agents, or `pool` itself) end what `earlier` attempts left on the hosts
// lost during them, sync, bind from their topologies, check the torch contract's master port; show
// the bindings when asked. Returns nothing when ready, else the exit status and why (every step
// prints its own details); `unreachable` (when given) gets the hosts that could not be connected,
// with why. `interruptible`: SIGINT, SIGTERM and SIGHUP (which the caller blocks for its signalfd)
// are read, on a signalfd of these three only, after each step and during the waits of the sync,
// the stop of earlier attempts (whose grace then ends at once: SIGKILL), the topology probe and
// the port check, and end the preparation there, nothing started, with the signal's exit
// status. Any other signal (Ctrl-Z, Ctrl-\) stays queued for the Runner, which acts on it once
// the processes run (an agent waiting out a stopped launcher would end itself).
std::optional<PrepareFailure> prepare_hosts(
    HostTransport& pool, Transport& commands, Plan& plan, const JobHosts& jh,
    const Options& options, bool report_bindings, StatusLine* status = nullptr,
    std::map<std::string, std::string>* unreachable = nullptr, bool interruptible = false,
    const EarlierAttempts* earlier = nullptr);

// Runs `stop_command(job, grace, attempts)` on `hosts` (indexes into `t`) for at most `timeout_s`:
// for each host, the processes it ended, as describe_swept says each, or nothing when it did not
// finish (lost, or no answer in time). When `keep_waiting` returns false, each stop still running
// ends its grace at once (SIGKILL) and gets kKillNowWaitMs more to say so.
std::vector<std::optional<std::vector<std::string>>> stop_processes(
    Transport& t, const std::vector<size_t>& hosts, const std::string& job, double grace,
    int attempts, double timeout_s, const std::function<bool()>& keep_waiting = nullptr);

// Waits up to `seconds` (0: only what is pending) on the signalfd `sfd`: 0, or the exit status of
// SIGINT, SIGTERM or SIGHUP when one came. SIGTSTP stops the launcher there (between restart
// attempts nothing runs on the hosts); SIGQUIT (a stack dump: nothing to dump) and SIGCONT pass.
int wait_for_signal(int sfd, double seconds);

}  // namespace msrun_ssh::runner_detail
