#include "msrun_ssh/command.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "msrun_ssh/base.h"
#include "remote/programs.h"

namespace msrun_ssh {
namespace {

int grace_steps(double s) {
  return static_cast<int>(std::ceil(std::max(s, 0.0) * (1 / kWatchdogGraceStepS)));
}

// Everything of a watchdog command before its arguments: `exec sh -c SCRIPT msrun-ssh-watchdog `.
// SCRIPT makes the job's stack-dump directory (S: stack_site.py's text) before the ready line.
// The same for every host: built once (quoting its kilobytes per host was most of the
// launcher's own CPU in the house's before/after benchmark, #39).
const std::string& watchdog_program() {
  static const std::string script =
      fmt::format("{}{}S={}\n{}", remote::kSweepSh, remote::kStackDirSh,
                  shell_quote(remote::kStackSitePy), remote::kWatchdogSh);
  return script;
}

const std::string& watchdog_head() {
  static const std::string head =
      fmt::format("exec sh -c {} msrun-ssh-watchdog ", shell_quote(watchdog_program()));
  return head;
}

// The word shell_quote made of `quoted`, or nothing when `quoted` is not such a word.
std::optional<std::string> shell_unquote(std::string_view quoted) {
  if (quoted.size() < 2 || quoted.front() != '\'' || quoted.back() != '\'') return std::nullopt;
  std::string_view body = quoted.substr(1, quoted.size() - 2);
  std::string word;
  word.reserve(body.size());
  // Each '\'' stands for one quote; built by appending (GCC 12 warns on replace() here).
  for (size_t at = 0; at < body.size();) {
    size_t q = body.find("'\\''", at);
    word.append(body.substr(at, q == std::string_view::npos ? body.size() - at : q - at));
    if (q == std::string_view::npos) break;
    word += '\'';
    at = q + 4;
  }
  if (shell_quote(word) != quoted) return std::nullopt;
  return word;
}

// The word shell_quote made at the start of `s` ('...' with '\'' for each quote), taken off `s`;
// nothing when `s` does not start with such a word.
std::optional<std::string> take_quoted_word(std::string_view& s) {
  if (!s.starts_with('\'')) return std::nullopt;
  for (size_t at = 1;;) {
    size_t q = s.find('\'', at);
    if (q == std::string_view::npos) return std::nullopt;
    if (s.substr(q).starts_with("'\\''")) {
      at = q + 4;
      continue;
    }
    std::optional<std::string> word = shell_unquote(s.substr(0, q + 1));
    s.remove_prefix(q + 1);
    return word;
  }
}

// `env -- ENV... ARGV...`, every word quoted: env's words for the environment `env` (NAME=VALUE
// words), then ARGV, through stack_site.sh (with `site_text` as its first argument) when
// `stack_site`.
std::string env_words(const std::vector<std::string>& env, bool stack_site,
                      std::string_view site_text, const std::vector<std::string>& argv) {
  std::vector<std::string> words{"env", "--"};
  words.insert(words.end(), env.begin(), env.end());
  if (stack_site)
    words.insert(words.end(),
                 {"sh", "-c", stack_site_script(), "msrun-ssh-stacks", std::string(site_text)});
  // env takes every leading word with a '=' for an assignment, a program named "./a=b" too: such a
  // program is started through `sh -c 'exec "$@"'`, which passes its words on unchanged.
  if (!argv.empty() && argv[0].find('=') != std::string::npos)
    words.insert(words.end(), {"sh", "-c", "exec \"$@\"", "sh"});
  words.insert(words.end(), argv.begin(), argv.end());
  return shell_join(words);
}

// `env -- MSRUN_SSH_JOB=ID NAME=VALUE... ARGV...`; with stack dumps (stacks.h), ARGV runs
// through stack_site.sh; with defaults (Process::env_defaults), through env_defaults.sh, which
// passes a program whose name holds a '=' on unchanged.
// `site_made`: the job's stack-dump directory is made on the host before the process starts (an
// attached run's watchdog makes it): stack_site.py's text (~2 KB) is not sent with every process,
// unless the process has a TMPDIR of its own (its directory is then not the watchdog's).
// Without `marker` the MSRUN_SSH_JOB word is left out (detached.sh's keeper sets it: a bare
// MSRUN_SSH_JOB=ID word on the keeper's own command line made the sweep take the keeper for a
// process of the job, and SIGKILL it before it wrote the status).
std::string exec_env(const Process& process, const std::string& job_id, bool site_made,
                     bool marker = true) {
  std::vector<std::string> env;
  if (marker) env.push_back(fmt::format("{}={}", kJobMarker, job_id));
  for (const auto& [n, v] : process.env) {
    env.push_back(fmt::format("{}={}", n, v));
    if (n == "TMPDIR") site_made = false;
  }
  const std::string_view site =
      site_made ? std::string_view() : std::string_view(remote::kStackSitePy);
  if (process.env_defaults.empty()) return env_words(env, process.stack_dumps, site, process.argv);
  std::vector<std::string> argv{"sh", "-c", std::string(remote::kEnvDefaultsSh),
                                "msrun-ssh-defaults"};
  for (const auto& [n, v] : process.env_defaults) argv.push_back(fmt::format("{}={}", n, v));
  argv.emplace_back("--");
  argv.insert(argv.end(), process.argv.begin(), process.argv.end());
  return env_words(env, process.stack_dumps, site, argv);
}

constexpr std::string_view kStdinNull = " < /dev/null";

std::string render_launch(const ProcessLaunch& l) {
  return fmt::format("cd -- {} && exec {}{}", shell_quote(l.workdir),
                     env_words(l.env, l.stack_site, {}, l.argv), l.stdin_null ? kStdinNull : "");
}

// Whether `words` continues at `at` with exactly `expected`; then `at` goes past them.
bool take_words(const std::vector<std::string>& words, size_t& at,
                const std::vector<std::string>& expected) {
  if (words.size() - at < expected.size() ||
      !std::equal(expected.begin(), expected.end(), words.begin() + static_cast<long>(at)))
    return false;
  at += expected.size();
  return true;
}

}  // namespace

const std::string& stack_site_script() {
  // Made once: every process command holds it, and the launch agent's reading of one looks for it.
  static const std::string script = fmt::format("{}{}", remote::kStackDirSh, remote::kStackSiteSh);
  return script;
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

std::optional<ProcessLaunch> process_launch_of(std::string_view command) {
  constexpr std::string_view kCd = "cd -- ";
  constexpr std::string_view kExec = " && exec ";
  const std::string_view whole = command;
  if (!command.starts_with(kCd)) return std::nullopt;
  command.remove_prefix(kCd.size());
  ProcessLaunch l;
  std::optional<std::string> workdir = take_quoted_word(command);
  if (!workdir || !command.starts_with(kExec)) return std::nullopt;
  l.workdir = std::move(*workdir);
  command.remove_prefix(kExec.size());
  l.stdin_null = command.ends_with(kStdinNull);
  if (l.stdin_null) command.remove_suffix(kStdinNull.size());
  std::vector<std::string> words;
  while (!command.empty()) {
    if (!words.empty() && !command.starts_with(' ')) return std::nullopt;
    if (!words.empty()) command.remove_prefix(1);
    std::optional<std::string> word = take_quoted_word(command);
    if (!word || word->find('\0') != std::string::npos) return std::nullopt;
    words.push_back(std::move(*word));
  }
  size_t at = 0;
  if (!take_words(words, at, {"env", "--"})) return std::nullopt;
  // env's own reading: every word with a '=' is an assignment, up to the first without.
  while (at < words.size() && words[at].find('=') != std::string::npos)
    l.env.push_back(words[at++]);
  l.stack_site = take_words(words, at, {"sh", "-c", stack_site_script(), "msrun-ssh-stacks", ""});
  take_words(words, at, {"sh", "-c", "exec \"$@\"", "sh"});
  l.argv.assign(words.begin() + static_cast<long>(at), words.end());
  if (l.argv.empty() || l.env.empty() || !l.env[0].starts_with(fmt::format("{}=", kJobMarker)))
    return std::nullopt;
  // Exactly what process_command makes of these parts, or it is not a process command.
  if (render_launch(l) != whole) return std::nullopt;
  return l;
}

std::string process_command(const Process& process, const std::string& job_id,
                            bool stdin_from_launcher) {
  // /dev/null here rather than an EOF sent on the channel: one packet less per process.
  return fmt::format("cd -- {} && exec {}{}", shell_quote(process.workdir),
                     exec_env(process, job_id, true), stdin_from_launcher ? "" : kStdinNull);
}

std::string detached_command(const Process& process, const std::string& job_id,
                             const std::string& remote_log) {
  size_t slash = remote_log.rfind('/');
  std::string dir = slash == std::string::npos ? std::string(".") : remote_log.substr(0, slash + 1);
  std::string stem = detached_state_stem(
      remote_log, job_id, rank_word(process.role == Role::kScheduler ? -1 : process.rank));
  std::string state_dir = stem.substr(0, stem.rfind('/'));
  std::string keeper =
      shell_join({"sh", "-c", std::string(remote::kDetachedSh), "msrun-ssh-job", stem});
  // The log path is relative to the workdir, like --log_dir is relative to the launcher's cwd.
  // The log is opened once before the start: a redirection that fails in the background would
  // fail only there, and the start would say "started" for a process that never ran.
  return fmt::format(
      "cd -- {0} && umask 077 && mkdir -p -- {1} {2} && true >> {5} && {{ setsid {3} {4} < "
      "/dev/null > {5} 2>&1 & }} && echo \"msrun-ssh: started $!\"",
      shell_quote(process.workdir), shell_quote(dir), shell_quote(state_dir), keeper,
      exec_env(process, job_id, false, false), shell_quote(remote_log));
}

std::string rank_word(int rank) { return rank < 0 ? "sched" : std::to_string(rank); }

std::string detached_state_stem(std::string_view log_path, std::string_view job_id,
                                std::string_view rank_word) {
  size_t slash = log_path.rfind('/');
  std::string_view dir = slash == std::string_view::npos ? "." : log_path.substr(0, slash);
  return fmt::format("{}/{}/{}/{}", dir, kDetachedStateDir, job_id, rank_word);
}

std::string watchdog_ready_line(long pid, std::string_view host) {
  return fmt::format("{}{} {}", kWatchdogReady, pid, host);
}

std::optional<SweptProcess> parse_swept_line(std::string_view line) {
  constexpr std::string_view kKilled = "killed ";
  if (!line.starts_with(kKilled)) return std::nullopt;
  line.remove_prefix(kKilled.size());
  size_t sp = line.find(' ');
  if (sp == std::string_view::npos) return std::nullopt;
  SweptProcess p;
  auto [end, ec] = std::from_chars(line.data(), line.data() + sp, p.pid);
  if (ec != std::errc() || end != line.data() + sp || p.pid <= 0) return std::nullopt;
  line.remove_prefix(sp + 1);
  sp = line.find(' ');
  p.signal = line.substr(0, sp);
  if (!p.signal.starts_with("SIG") || p.signal.size() < 4) return std::nullopt;
  p.argv = sp == std::string_view::npos ? "" : line.substr(sp + 1);
  return p;
}

std::string describe_swept(const SweptProcess& p) {
  return std::string(trim(fmt::format("{} {} {}", p.pid, p.signal, p.argv), " "));
}

WatchdogArgs watchdog_args(const std::string& job_id, double timeout_s, double grace_s) {
  return WatchdogArgs{job_id, std::max(timeout_s, 0.001), grace_steps(grace_s),
                      grace_steps(std::min(grace_s, timeout_s / 4))};
}

std::string watchdog_command(const WatchdogArgs& args) {
  return fmt::format("{}{} {:.3f} {} {} {}", watchdog_head(), shell_quote(args.job_id),
                     args.silence_s, args.grace_steps, args.lost_grace_steps,
                     shell_quote(args.workdir));
}

std::string watchdog_command(const std::string& job_id, double timeout_s, double grace_s,
                             const std::string& workdir) {
  WatchdogArgs args = watchdog_args(job_id, timeout_s, grace_s);
  args.workdir = workdir;
  return watchdog_command(args);
}

std::string_view watchdog_stack_site() { return remote::kStackSitePy; }

std::vector<std::string> watchdog_words(const WatchdogArgs& args) {
  return {args.job_id, fmt::format("{:.3f}", args.silence_s), std::to_string(args.grace_steps),
          std::to_string(args.lost_grace_steps), args.workdir};
}

std::string_view sampler_command_head() {
  static const std::string head = fmt::format("exec perl -e {} ", shell_quote(remote::kSamplerPl));
  return head;
}

std::string_view sampler_program() { return remote::kSamplerPl; }

std::optional<std::string> sampler_words_of(std::string_view command) {
  if (!command.starts_with(sampler_command_head())) return std::nullopt;
  // 'JOB' INTERVAL 'RANKS'
  std::string_view rest = command.substr(sampler_command_head().size());
  std::optional<std::string> job = take_quoted_word(rest);
  size_t end = rest.find(' ', 1);
  if (!job || !rest.starts_with(' ') || end == std::string_view::npos || end == 1)
    return std::nullopt;
  std::string_view interval = rest.substr(1, end - 1);
  rest.remove_prefix(end + 1);
  std::optional<std::string> ranks = take_quoted_word(rest);
  if (!ranks || !rest.empty()) return std::nullopt;
  std::string words = *job + '\0' + std::string(interval) + '\0' + *ranks + '\0';
  if (std::count(words.begin(), words.end(), '\0') != 3) return std::nullopt;
  return words;
}

std::optional<WatchdogArgs> watchdog_args_of(std::string_view command) {
  const std::string& head = watchdog_head();
  if (!command.starts_with(head)) return std::nullopt;
  // 'JOB' T G L 'WORKDIR'
  std::string_view rest = command.substr(head.size());
  std::optional<std::string> job = take_quoted_word(rest);
  if (!job) return std::nullopt;
  // " T G L " (numbers: no quote, no blank in them), then the workdir's word.
  std::string numbers;
  for (int i = 0; i < 3; ++i) {
    size_t end = rest.find(' ', 1);
    if (!rest.starts_with(' ') || end == std::string_view::npos) return std::nullopt;
    numbers.append(rest.substr(0, end));
    rest.remove_prefix(end);
  }
  rest.remove_prefix(1);
  std::optional<std::string> workdir = take_quoted_word(rest);
  if (!workdir || !rest.empty()) return std::nullopt;
  WatchdogArgs args{*job};
  args.workdir = *workdir;
  std::istringstream in{numbers};
  if (!(in >> args.silence_s >> args.grace_steps >> args.lost_grace_steps)) return std::nullopt;
  // Exactly what watchdog_command makes of them, or it is not a watchdog command.
  if (watchdog_command(args) != command) return std::nullopt;
  return args;
}

std::string leftovers_command(const Process& process, const std::string& job_id, double grace_s) {
  std::string script = fmt::format("{}{}", remote::kSweepSh, remote::kLeftoversSh);
  std::string words;
  for (const auto& [name, value] : process.env)
    if (name == "MS_ROLE" || name == "RANK_ID" || name == "RANK")
      words += fmt::format(" {}", shell_quote(fmt::format("{}={}", name, value)));
  return fmt::format("exec sh -c {} msrun-ssh-leftovers {} {}{}", shell_quote(script),
                     shell_quote(job_id), grace_steps(grace_s), words);
}

std::string stop_command(const std::string& job_id, double grace_s, int attempts) {
  std::string script = fmt::format("{}{}", remote::kSweepSh, remote::kStopSh);
  return fmt::format("exec sh -c {} msrun-ssh-stop {} {} {}", shell_quote(script),
                     shell_quote(job_id), grace_steps(grace_s), std::max(attempts, 1));
}

}  // namespace msrun_ssh
