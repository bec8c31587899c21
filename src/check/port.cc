// Connection verdicts (from SshPool's failures and warnings) and the master-port test of
// `msrun-ssh check`.
#include <fmt/format.h>

#include <cmath>

#include "msrun_ssh/check.h"
#include "msrun_ssh/command.h"
#include "python_command.h"
#include "remote/programs.h"

namespace msrun_ssh {
namespace {

CheckResult port_result(std::string name, CheckStatus status, std::string detail,
                        std::string value = "") {
  return CheckResult{std::move(name), status, std::move(detail), std::move(value)};
}

std::vector<std::string> interpreters(const std::string& python) {
  std::vector<std::string> out{python};
  for (const char* p : {"python3", "python"})
    if (python != p) out.emplace_back(p);
  return out;
}

std::string int_seconds(double s) {
  return std::to_string(std::max(1, static_cast<int>(std::ceil(s))));
}

}  // namespace

std::string python_command(std::string_view tail, const char* name, double limit_s,
                           std::string_view code, const std::vector<std::string>& abd,
                           const std::string& python) {
  std::vector<std::string> words{"/bin/sh",
                                 "-c",
                                 fmt::format("{}{}", remote::kPythonSh, tail),
                                 name,
                                 int_seconds(limit_s + 5),
                                 std::string(code)};
  words.insert(words.end(), abd.begin(), abd.end());
  for (const auto& p : interpreters(python)) words.push_back(p);
  return "exec " + shell_join(words);
}

std::vector<CheckResult> classify_connect_failure(const ConnectFailure& failure) {
  const std::string& r = failure.reason;
  std::string not_tried = "not attempted: the connection failed before";
  switch (failure.kind) {
    case ConnectError::kHostKeyUnknown:
    case ConnectError::kHostKeyChanged:
    case ConnectError::kHostKeyUnverifiable:
      return {
          port_result("reachable", CheckStatus::kPass, "the SSH server answered"),
          port_result("authenticated", CheckStatus::kSkip, "not attempted: host key not verified"),
          port_result("host_key", CheckStatus::kFail, r)};
    case ConnectError::kIdentityUnreadable:
    case ConnectError::kAuthDenied:
    case ConnectError::kAuthTimedOut:
      return {port_result("reachable", CheckStatus::kPass, "the SSH server answered"),
              port_result("authenticated", CheckStatus::kFail, r),
              port_result("host_key", CheckStatus::kPass, "host key verified (known_hosts)")};
    case ConnectError::kUnreachable:
    case ConnectError::kRefused:
    case ConnectError::kTimedOut:
    case ConnectError::kOther:
      break;
  }
  return {port_result("reachable", CheckStatus::kFail, r),
          port_result("authenticated", CheckStatus::kSkip, not_tried),
          port_result("host_key", CheckStatus::kSkip, not_tried)};
}

namespace {

// The host key's check once the key was past: verified, unless a warning says it was accepted
// unverified or added as new.
CheckResult host_key_check(size_t host, const std::vector<ConnectWarning>& warnings) {
  CheckResult key =
      port_result("host_key", CheckStatus::kPass, "host key verified (known_hosts)", "");
  for (const auto& w : warnings) {
    if (w.host != host) continue;
    switch (w.kind) {
      case ConnectWarningKind::kHostKeyNotVerified:
      case ConnectWarningKind::kHostKeyAdded:
        key = port_result("host_key", CheckStatus::kWarn, w.message);
        break;
    }
  }
  return key;
}

}  // namespace

std::vector<CheckResult> connected_checks(size_t host,
                                          const std::vector<ConnectWarning>& warnings) {
  return {port_result("reachable", CheckStatus::kPass, "the SSH server answered"),
          port_result("authenticated", CheckStatus::kPass, "public key accepted"),
          host_key_check(host, warnings)};
}

std::vector<CheckResult> classify_connect_failure(const ConnectFailure& failure, size_t host,
                                                  const std::vector<ConnectWarning>& warnings) {
  std::vector<CheckResult> out = classify_connect_failure(failure);
  for (auto& r : out)
    if (r.name == "host_key" && r.status == CheckStatus::kPass) r = host_key_check(host, warnings);
  return out;
}

std::string listener_command(const std::string& python, int port, double limit_s) {
  return python_command(remote::kListenSh, "msrun-ssh-listen", limit_s, remote::kListenPy,
                        {std::to_string(port), fmt::format("{:g}", limit_s), ""}, python);
}

std::string connect_command(const std::string& python, const std::string& ip, int port,
                            double timeout_s) {
  return python_command(remote::kConnectSh, "msrun-ssh-connect", timeout_s, remote::kConnectPy,
                        {ip, std::to_string(port), int_seconds(timeout_s)}, python);
}

CheckResult port_result(const std::string& master, const std::optional<std::string>& output,
                        bool is_master) {
  std::string free = is_master ? "port free on the master; " : "";
  if (!output)
    return port_result("master_port", CheckStatus::kFail,
                       fmt::format("{}no answer from the connection test to {}", free, master));
  ProbeFacts f = parse_probe(*output);
  std::string r = f.get("reach");
  if (r == "ok")
    return port_result("master_port", CheckStatus::kPass,
                       fmt::format("{}{} accepts connections", free, master), "ok");
  if (r.rfind("fail", 0) == 0)
    return port_result("master_port", CheckStatus::kFail,
                       fmt::format("{}cannot connect to {}: {}", free, master,
                                   r.size() > 5 ? r.substr(5) : "unknown error"));
  if (r.rfind("untested", 0) == 0)
    return port_result("master_port", CheckStatus::kWarn,
                       fmt::format("{}cannot test {}: {}", free, master,
                                   r.size() > 9 ? r.substr(9) : "unknown reason"));
  return port_result(
      "master_port", CheckStatus::kFail,
      fmt::format("{}the connection test to {} printed nothing useful", free, master));
}

}  // namespace msrun_ssh
