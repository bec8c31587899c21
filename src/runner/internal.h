// What the files of the runner room share (src/runner/*.cc): the Runner's time constants, two
// small helpers, and connecting every host (job.cc). Not a header of the room's contract (that
// is include/msrun_ssh/runner.h).
#pragma once

#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>

#include "msrun_ssh/hostfile.h"
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
// (when given) maps each failed host's address to why.
bool connect(HostTransport& pool, const std::vector<const Host*>& hosts,
             const std::vector<int>& connections, StatusLine* status = nullptr,
             std::map<std::string, std::string>* failed_hosts = nullptr);

}  // namespace msrun_ssh::runner_detail
