// Connection verdicts (from SshPool's failures and warnings) and the master-port test of
// `msrun-ssh check`.
#include <fmt/format.h>

#include <cmath>

#include "msrun_ssh/check.h"
#include "msrun_ssh/command.h"

namespace msrun_ssh {
namespace {

CheckResult make(std::string name, CheckStatus status, std::string detail, std::string value = "") {
  return CheckResult{std::move(name), status, std::move(detail), std::move(value)};
}

// The listener: REUSEADDR as the scheduler's own listener would, so a TIME_WAIT left by an earlier
// job does not count as "in use" while a live listener does. It ends on EOF of stdin (the launcher
// is done or gone) or after argv[2] seconds, whichever comes first.
constexpr const char* kListenerPy = R"PY(import errno, os, select, socket, sys, time
port, limit = int(sys.argv[1]), float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("0.0.0.0", port))
    s.listen(128)
except OSError as e:
    word = "in_use" if e.errno == errno.EADDRINUSE else "bind_error"
    print(word + " " + (e.strerror or str(e)), flush=True)
    sys.exit(3)
print("listening", flush=True)
end = time.monotonic() + limit
n = 0
while True:
    left = end - time.monotonic()
    if left <= 0:
        break
    r = select.select([s, 0], [], [], left)[0]
    if s in r:
        c, _ = s.accept()
        c.close()
        n += 1
    if 0 in r and not os.read(0, 4096):
        break
print("accepted %d" % n, flush=True)
)PY";

constexpr const char* kConnectPy = R"PY(import socket, sys
ip, port, t = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
try:
    socket.create_connection((ip, port), timeout=t).close()
    print("reach=ok")
except socket.timeout:
    print("reach=fail timed out after %g s" % t)
except OSError as e:
    print("reach=fail " + (e.strerror or str(e)))
)PY";

// Runs python code ($C) with the first interpreter found among "$@", under timeout when the host
// has it. Variables: L (timeout of the whole command, s), C (code); A B D: its three arguments.
constexpr const char* kRunPython = R"SH(for p in "$@"; do
  command -v "$p" >/dev/null 2>&1 || continue
  if command -v timeout >/dev/null 2>&1; then exec timeout -k 2 "$L" "$p" -c "$C" "$A" "$B" "$D"; fi
  exec "$p" -c "$C" "$A" "$B" "$D"
done
)SH";

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

std::vector<CheckResult> classify_connect_failure(const ConnectFailure& failure) {
  const std::string& r = failure.reason;
  std::string not_tried = "not attempted: the connection failed before";
  switch (failure.kind) {
    case ConnectError::kHostKeyUnknown:
    case ConnectError::kHostKeyChanged:
    case ConnectError::kHostKeyUnverifiable:
      return {make("reachable", CheckStatus::kPass, "the SSH server answered"),
              make("authenticated", CheckStatus::kSkip, "not attempted: host key not verified"),
              make("host_key", CheckStatus::kFail, r)};
    case ConnectError::kIdentityUnreadable:
    case ConnectError::kAuthDenied:
    case ConnectError::kAuthTimedOut:
      return {make("reachable", CheckStatus::kPass, "the SSH server answered"),
              make("authenticated", CheckStatus::kFail, r),
              make("host_key", CheckStatus::kPass, "host key verified")};
    case ConnectError::kUnreachable:
    case ConnectError::kRefused:
    case ConnectError::kTimedOut:
    case ConnectError::kOther:
      break;
  }
  return {make("reachable", CheckStatus::kFail, r),
          make("authenticated", CheckStatus::kSkip, not_tried),
          make("host_key", CheckStatus::kSkip, not_tried)};
}

std::vector<CheckResult> connected_checks(size_t host,
                                          const std::vector<ConnectWarning>& warnings) {
  CheckResult key = make("host_key", CheckStatus::kPass, "host key verified (known_hosts)", "");
  for (const auto& w : warnings) {
    if (w.host != host) continue;
    switch (w.kind) {
      case ConnectWarningKind::kHostKeyNotVerified:
      case ConnectWarningKind::kHostKeyAdded:
        key = make("host_key", CheckStatus::kWarn, w.message);
        break;
    }
  }
  return {make("reachable", CheckStatus::kPass, "the SSH server answered"),
          make("authenticated", CheckStatus::kPass, "public key accepted"), key};
}

std::string listener_command(const std::string& python, int port, double limit_s) {
  std::string script =
      std::string("L=$1 C=$2 A=$3 B=$4 D=$5; shift 5\n") + kRunPython + "echo no_python\nexit 4\n";
  std::vector<std::string> words{"/bin/sh",
                                 "-c",
                                 script,
                                 "msrun-ssh-listen",
                                 int_seconds(limit_s + 5),
                                 kListenerPy,
                                 std::to_string(port),
                                 fmt::format("{:g}", limit_s),
                                 ""};
  for (const auto& p : interpreters(python)) words.push_back(p);
  return "exec " + shell_join(words);
}

std::string connect_command(const std::string& python, const std::string& ip, int port,
                            double timeout_s) {
  // Without python, bash's /dev/tcp does the same (its messages end in ": REASON").
  std::string script = std::string("L=$1 C=$2 A=$3 B=$4 D=$5; shift 5\n") + kRunPython + R"SH(
if command -v bash >/dev/null 2>&1 && command -v timeout >/dev/null 2>&1; then
  e=$(timeout "$D" bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$A" "$B" 2>&1); r=$?
  if [ "$r" = 0 ]; then echo "reach=ok"
  elif [ "$r" = 124 ]; then echo "reach=fail timed out after $D s"
  else echo "reach=fail $(printf '%s\n' "$e" | tail -n 1 | sed 's/.*: //')"; fi
  exit 0
fi
echo "reach=untested no python or bash on this host"
)SH";
  std::vector<std::string> words{"/bin/sh",
                                 "-c",
                                 script,
                                 "msrun-ssh-connect",
                                 int_seconds(timeout_s + 5),
                                 kConnectPy,
                                 ip,
                                 std::to_string(port),
                                 int_seconds(timeout_s)};
  for (const auto& p : interpreters(python)) words.push_back(p);
  return "exec " + shell_join(words);
}

CheckResult port_result(const std::string& master, const std::optional<std::string>& output,
                        bool is_master) {
  std::string free = is_master ? "port free on the master; " : "";
  if (!output)
    return make("master_port", CheckStatus::kFail,
                fmt::format("{}no answer from the connection test to {}", free, master));
  ProbeFacts f = parse_probe(*output);
  std::string r = f.get("reach");
  if (r == "ok")
    return make("master_port", CheckStatus::kPass,
                fmt::format("{}{} accepts connections", free, master), "ok");
  if (r.rfind("fail", 0) == 0)
    return make("master_port", CheckStatus::kFail,
                fmt::format("{}cannot connect to {}: {}", free, master,
                            r.size() > 5 ? r.substr(5) : "unknown error"));
  if (r.rfind("untested", 0) == 0)
    return make("master_port", CheckStatus::kWarn,
                fmt::format("{}cannot test {}: {}", free, master,
                            r.size() > 9 ? r.substr(9) : "unknown reason"));
  return make("master_port", CheckStatus::kFail,
              fmt::format("{}the connection test to {} printed nothing useful", free, master));
}

}  // namespace msrun_ssh
