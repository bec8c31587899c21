#include "msrun_ssh/command.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "remote/programs.h"

namespace msrun_ssh {
namespace {

std::string seconds(double s) { return fmt::format("{:.3f}", std::max(s, 0.001)); }

int grace_steps(double s) { return static_cast<int>(std::ceil(std::max(s, 0.0) * 5)); }

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

std::string watchdog_command(const std::string& job_id, double timeout_s, double grace_s) {
  // After losing the launcher the whole teardown must fit in 3x the heartbeat; the caller passes
  // 2x as `timeout_s`, so the grace is capped at a quarter of it.
  double lost_grace = std::min(grace_s, timeout_s / 4);
  std::string script = fmt::format("{}{}", remote::kSweepSh, remote::kWatchdogSh);
  return fmt::format("exec sh -c {} msrun-ssh-watchdog {} {} {} {}", shell_quote(script),
                     shell_quote(job_id), seconds(timeout_s), grace_steps(grace_s),
                     grace_steps(lost_grace));
}

std::string stop_command(const std::string& job_id, double grace_s) {
  std::string script = fmt::format("{}{}", remote::kSweepSh, remote::kStopSh);
  return fmt::format("exec sh -c {} msrun-ssh-stop {} {}", shell_quote(script), shell_quote(job_id),
                     grace_steps(grace_s));
}

}  // namespace msrun_ssh
