#include "msrun_ssh/command.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace msrun_ssh {
namespace {

// Shared by the watchdog and `stop`: finds and signals every process of job $J on this host.
// While waiting out the grace, teardown keeps reading the launcher: 'K' (a second Ctrl-C) ends the
// wait at once, heartbeats are still echoed; once stdin is closed it simply sleeps.
//
// A process of the job is found in either of its two lives (docs/architecture.md, "Teardown"):
//  - started: /proc/PID/environ, the environment it was started with, holds MSRUN_SSH_JOB=$J
//    (grandchildren that left the process group too). grep -z reads it as NUL separated records.
//  - still in the user's login shell (its rc can take seconds: conda, module load), before the
//    `exec env` of its command: the shell has no marker in its environment yet, but its command
//    line holds the command string, and with it 'MSRUN_SSH_JOB=$J' (quoted: the exact spelling of
//    process_command). What the rc started runs in the shell's process group.
// Every pid found is signalled as a process group when it leads one (sshd makes each command a
// session leader, so that reaches the rc's children), else alone. One grep reads both files of
// every process. The [=] keeps the pattern from matching grep's own command line; the watchdog
// and `stop` carry neither spelling; zombies have an empty environ and count as gone.
constexpr const char* kSweepFunctions = R"SH(
pids() {
  grep -lz -e "^MSRUN_SSH_JOB[=]$J\$" -e "'MSRUN_SSH_JOB[=]$J'" \
    /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | sed 's,^/proc/,,;s,/[a-z]*$,,'
}
signal_all() {
  found=1
  for p in $(pids); do
    [ "$p" = "$$" ] && continue
    c=$(tr '\000' ' ' < /proc/$p/cmdline 2>/dev/null)
    { kill -$1 -$p || kill -$1 $p; } 2>/dev/null && { found=0; echo "killed $p SIG$1 $c"; }
  done
  return $found
}
# Every process of the job that leads its process group (what sshd started, not its children)
# and runs Python gets SIGABRT: with PYTHONFAULTHANDLER=1 it prints every thread's stack to its
# stderr and ends. One second for them to write, then the usual teardown.
abort_pythons() {
  for p in $(pids); do
    [ "$p" = "$$" ] && continue
    kill -0 -$p 2>/dev/null || continue
    case "$(readlink /proc/$p/exe 2>/dev/null)" in *python*) kill -ABRT $p 2>/dev/null ;; esac
  done
  sleep 1
}
teardown() {
  signal_all TERM || return 0
  i=0
  while [ $i -lt $1 ] && [ -n "$(pids)" ]; do
    c=$(timeout 0.2 dd bs=1 count=1 2>/dev/null); rc=$?
    case "$c" in
      K) break ;;
      h) echo h ;;
      *) i=$((i+1)); [ $rc -eq 0 ] && sleep 0.2 ;;
    esac
  done
  signal_all KILL || true
}
)SH";

// The watchdog's main loop. $T: silence (seconds) after which the launcher counts as gone; $G and
// $L: grace steps of 0.2 s for a requested teardown and for a teardown after losing the launcher.
// SIGPIPE is ignored so that echoing to a launcher that vanished cannot kill the watchdog first.
// The ready line carries the host's own name (uname -n, read without a fork) for {hostname}.
// After losing the launcher nobody else can end a command whose exec request sshd took just
// before the connection died (its shell may appear after the first sweep): the watchdog sweeps
// four more times over one second before it exits. With the launcher alive, the launcher ends
// such late commands itself (SSH "signal" requests) and waits until every channel has closed.
constexpr const char* kWatchdogLoop = R"SH(
trap '' PIPE HUP
n=; read -r n < /proc/sys/kernel/hostname 2>/dev/null || n=$(uname -n)
echo "msrun-ssh-watchdog: ready $$ $n"
while :; do
  c=$(timeout "$T" dd bs=1 count=1 2>/dev/null) || c=
  case "$c" in
    h) echo h ;;
    q|k) teardown "$G"; echo "msrun-ssh-watchdog: done"; exit 0 ;;
    a) abort_pythons; teardown "$G"; echo "msrun-ssh-watchdog: done"; exit 0 ;;
    K) signal_all KILL; echo "msrun-ssh-watchdog: done"; exit 0 ;;
    *) echo "msrun-ssh-watchdog: launcher lost"; teardown "$L"
       for i in 1 2 3 4; do sleep 0.25; signal_all KILL; done; exit 0 ;;
  esac
done
)SH";

int grace_steps(double s) {
  return static_cast<int>(std::ceil(std::max(s, 0.0) * (1 / kWatchdogGraceStepS)));
}

// Everything of a watchdog command before its arguments: `exec sh -c SCRIPT msrun-ssh-watchdog `.
std::string watchdog_head() {
  std::string script = fmt::format("J=$1 T=$2 G=$3 L=$4\n{}{}", kSweepFunctions, kWatchdogLoop);
  return fmt::format("exec sh -c {} msrun-ssh-watchdog ", shell_quote(script));
}

// The word shell_quote made of `quoted`, or nothing when `quoted` is not such a word.
std::optional<std::string> shell_unquote(std::string_view quoted) {
  if (quoted.size() < 2 || quoted.front() != '\'' || quoted.back() != '\'') return std::nullopt;
  std::string word(quoted.substr(1, quoted.size() - 2));
  for (size_t at = word.find("'\\''"); at != std::string::npos; at = word.find("'\\''", at + 1))
    word.replace(at, 4, "'");
  if (shell_quote(word) != quoted) return std::nullopt;
  return word;
}

// `exec env -- MSRUN_SSH_JOB=ID NAME=VALUE... ARGV...`, every word quoted.
std::string exec_env(const Process& process, const std::string& job_id) {
  std::vector<std::string> words{"env", "--", fmt::format("{}={}", kJobMarker, job_id)};
  for (const auto& [n, v] : process.env) words.push_back(fmt::format("{}={}", n, v));
  // env takes every leading word with a '=' for an assignment, a program named "./a=b" too: such a
  // program is started through `sh -c 'exec "$@"'`, which passes its words on unchanged.
  if (!process.argv.empty() && process.argv[0].find('=') != std::string::npos)
    words.insert(words.end(), {"sh", "-c", "exec \"$@\"", "sh"});
  words.insert(words.end(), process.argv.begin(), process.argv.end());
  return shell_join(words);
}

}  // namespace

std::string shell_quote(std::string_view word) {
  std::string out = "'";
  for (char c : word) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  out += '\'';
  return out;
}

std::string shell_join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += ' ';
    out += shell_quote(w);
  }
  return out;
}

bool stdin_from_launcher(const Options& options, const Process& process) {
  const auto& tailed = options.tail_worker_log;
  return process.role == Role::kWorker &&
         std::find(tailed.begin(), tailed.end(), process.rank) != tailed.end();
}

std::string process_command(const Process& process, const std::string& job_id,
                            bool stdin_from_launcher) {
  // /dev/null here rather than an EOF sent on the channel: one packet less per process.
  return fmt::format("cd -- {} && exec {}{}", shell_quote(process.workdir),
                     exec_env(process, job_id), stdin_from_launcher ? "" : " < /dev/null");
}

std::string detached_command(const Process& process, const std::string& job_id,
                             const std::string& remote_log) {
  size_t slash = remote_log.rfind('/');
  std::string dir = slash == std::string::npos ? std::string(".") : remote_log.substr(0, slash + 1);
  // The log path is relative to the workdir, like --log_dir is relative to the launcher's cwd.
  return fmt::format(
      "cd -- {} && umask 077 && mkdir -p -- {} && {{ setsid {} < /dev/null > {} 2>&1 & }} && "
      "echo \"msrun-ssh: started $!\"",
      shell_quote(process.workdir), shell_quote(dir), exec_env(process, job_id),
      shell_quote(remote_log));
}

std::string watchdog_ready_line(long pid, std::string_view host) {
  return fmt::format("{}{} {}", kWatchdogReady, pid, host);
}

WatchdogArgs watchdog_args(const std::string& job_id, double timeout_s, double grace_s) {
  return WatchdogArgs{job_id, std::max(timeout_s, 0.001), grace_steps(grace_s),
                      grace_steps(std::min(grace_s, timeout_s / 4))};
}

std::string watchdog_command(const WatchdogArgs& args) {
  return fmt::format("{}{} {:.3f} {} {}", watchdog_head(), shell_quote(args.job_id), args.silence_s,
                     args.grace_steps, args.lost_grace_steps);
}

std::string watchdog_command(const std::string& job_id, double timeout_s, double grace_s) {
  return watchdog_command(watchdog_args(job_id, timeout_s, grace_s));
}

std::optional<WatchdogArgs> watchdog_args_of(std::string_view command) {
  static const std::string head = watchdog_head();
  if (!command.starts_with(head)) return std::nullopt;
  // 'JOB' T G L: the job's quoted word ends at the last quote, the numbers hold none.
  std::string_view rest = command.substr(head.size());
  size_t quote = rest.rfind('\'');
  if (quote == std::string_view::npos) return std::nullopt;
  size_t job_end = quote + 1;
  std::optional<std::string> job = shell_unquote(rest.substr(0, job_end));
  if (!job) return std::nullopt;
  WatchdogArgs args{*job};
  std::istringstream numbers{std::string(rest.substr(job_end))};
  if (!(numbers >> args.silence_s >> args.grace_steps >> args.lost_grace_steps))
    return std::nullopt;
  // Exactly what watchdog_command makes of them, or it is not a watchdog command.
  if (watchdog_command(args) != command) return std::nullopt;
  return args;
}

std::string stop_command(const std::string& job_id, double grace_s) {
  std::string script =
      fmt::format("J=$1 G=$2\n{}teardown \"$G\"\necho \"msrun-ssh-stop: done\"\n", kSweepFunctions);
  return fmt::format("exec sh -c {} msrun-ssh-stop {} {}", shell_quote(script), shell_quote(job_id),
                     grace_steps(grace_s));
}

}  // namespace msrun_ssh
