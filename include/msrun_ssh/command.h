// The remote stanza: the exact command strings sent to a host's sshd, which hands them to the
// user's login shell as `$SHELL -c STRING`. Everything a user supplies is single-quoted so that a
// POSIX shell (sh, dash, bash, ksh, zsh) passes it on byte-exact: nothing is ever re-interpreted.
//
// Per job and host there are two kinds of command:
//  - one watchdog (control channel; src/remote/sweep.sh and watchdog.sh), started first: it
//    reads one byte at a time from the launcher, echoing heartbeats (the control bytes and the
//    lines it prints: "The watchdog's protocol" below). When no byte arrives for the deadline or
//    stdin closes (the launcher died or the host was cut off) it tears the job down by itself. A
//    teardown kills every process whose environment carries MSRUN_SSH_JOB=<job id>, found in
//    /proc/*/environ, which reaches grandchildren that left the process group too.
//  - one command per process: cd to the workdir, then exec env with the full environment and argv.
// Over the launch agent (agent.h) the watchdog runs under /bin/sh -c on the host instead of the
// login shell, and a process's command is taken apart (process_launch_of) and started by the agent
// itself, with no shell; the strings are the same either way.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "msrun_ssh/base.h"
#include "msrun_ssh/plan.h"

namespace msrun_ssh {

// The environment variable that marks every process of a job on its hosts.
inline constexpr const char* kJobMarker = "MSRUN_SSH_JOB";

// Joins words, each quoted, with single spaces.
std::string shell_join(const std::vector<std::string>& words);

// The shell program that starts each process of a job when it dumps its stacks on demand
// (stacks.h): stack_dir.sh's function, then stack_site.sh. Its arguments: stack_site.py's text,
// then the command.
const std::string& stack_site_script();

// Whether `process` reads the launcher's stdin: the workers that --tail_worker_log names (pdb).
bool stdin_from_launcher(const Options& options, const Process& process);

// The command that runs `process` of job `job_id` (attached: output through the channel). Its
// stdin is /dev/null unless `stdin_from_launcher` (--tail_worker_log ranks get the launcher's).
std::string process_command(const Process& process, const std::string& job_id,
                            bool stdin_from_launcher = false);

// A process_command taken apart, for the launch agent, which starts such a process itself: cd,
// the environment, the stack-dump step, /dev/null for stdin and exec, with no shell and no env
// program in between (each cost the host about a millisecond per process). `env`: NAME=VALUE
// words, the job's marker first; `stack_site`: the process goes through stack_site.sh with the
// directory already made (an attached run's processes: its watchdog made it).
struct ProcessLaunch {
  std::string workdir;
  std::vector<std::string> env;
  bool stack_site = false;
  std::vector<std::string> argv;
  bool stdin_null = true;
  bool operator==(const ProcessLaunch&) const = default;
};

// The parts of `command` when it is exactly what process_command makes of them (checked by
// making it again), else nothing: the agent then runs the command with /bin/sh -c.
std::optional<ProcessLaunch> process_launch_of(std::string_view command);

// Same, detached (--join=False): the process survives the launcher, its stdin is /dev/null and its
// output goes to `remote_log` on the host (directories created, file 0600). It runs under a keeper
// (src/remote/detached.sh) that writes the process's pid to STEM.pid and, once it ended, its exit
// status (128+N after signal N) to STEM.exit, STEM being detached_state_stem(remote_log, ...).
std::string detached_command(const Process& process, const std::string& job_id,
                             const std::string& remote_log);

// A process's word in state files: "sched" for the scheduler (rank < 0), else its global rank.
std::string rank_word(int rank);

// The directory, beside a detached job's logs, of its processes' state files.
inline constexpr const char* kDetachedStateDir = ".msrun-ssh";
// Where a detached process of job `job_id` keeps its state files, next to its log:
// "<log's directory>/.msrun-ssh/<job id>/<rank word>" (relative when the log path is).
std::string detached_state_stem(std::string_view log_path, std::string_view job_id,
                                std::string_view rank_word);

// ---- The watchdog's protocol -------------------------------------------------------------------
//
// The launcher writes one control byte at a time:
//   'h' (kBeat)               a heartbeat; the watchdog answers with a line "h"
//   'q' (kQuit)               the job is over: sweep what it left behind (SIGTERM, grace, SIGKILL)
//   'k' (kTeardown)           tear the job down: SIGTERM, grace, SIGKILL
//   'K' (kKillNow)            SIGKILL at once, also in the middle of a teardown's grace
//   'a' (kStacksThenTeardown) SIGABRT to each Python process of the job that leads its process
//                             group (its stacks, with PYTHONFAULTHANDLER=1), a second, then as 'k'
//   'z' (kSuspend)            SIGSTOP to every process of the job (Ctrl-Z on the launcher); the
//                             watchdog then waits for the next byte with no time limit and sends
//                             SIGCONT to them before it handles that byte
//   'r' (kResume)             after 'z': the job goes on
// Any other byte, no byte for the silence time, or the end of stdin: the launcher is lost.
//
// The watchdog prints, one line each:
//   "msrun-ssh-watchdog: ready PID HOSTNAME"  once started: its pid and the host's uname -n
//   "msrun-ssh-watchdog: no workdir"          instead, when it cannot enter the workdir; it ends
//   "h"                                       per heartbeat
//   "killed PID SIGNAL ARGV"                  per signal a sweep sent: SIGTERM or SIGKILL, then
//                                             the process's command line, every word followed by
//                                             a space ("killed 77 SIGTERM sleep 30 ")
//   "msrun-ssh-watchdog: launcher lost"       before the teardown it does by itself
//   "msrun-ssh-watchdog: done"                when the teardown the launcher asked for is over
//   "msrun-ssh-watchdog: paused" / "resumed"  after 'z' (the processes stopped) / after 'r'
//                                             (while paused, 'h' is answered: the job stays so)
//   "msrun-ssh-watchdog: terminated"          at a SIGTERM to the watchdog itself (Slurm
//                                             ending its step): it then SIGKILLs every process
//                                             of the job on its host, and ends
// and exits 0 after its teardown (after losing the launcher it sweeps four more times over a
// second first).
inline constexpr char kBeat = 'h';
inline constexpr char kQuit = 'q';
inline constexpr char kTeardown = 'k';
inline constexpr char kKillNow = 'K';
inline constexpr char kStacksThenTeardown = 'a';
inline constexpr char kSuspend = 'z';
inline constexpr char kResume = 'r';

inline constexpr std::string_view kWatchdogReady = "msrun-ssh-watchdog: ready ";
inline constexpr std::string_view kWatchdogLost = "msrun-ssh-watchdog: launcher lost";
inline constexpr std::string_view kWatchdogDone = "msrun-ssh-watchdog: done";
inline constexpr std::string_view kWatchdogPaused = "msrun-ssh-watchdog: paused";
inline constexpr std::string_view kWatchdogResumed = "msrun-ssh-watchdog: resumed";
inline constexpr std::string_view kWatchdogTerminated = "msrun-ssh-watchdog: terminated";
// Instead of the ready line, when the host's workdir is not a directory it can enter; the
// watchdog then ends.
inline constexpr std::string_view kWatchdogNoWorkdir = "msrun-ssh-watchdog: no workdir";

// The watchdog's grace is counted in steps of this many seconds.
inline constexpr double kWatchdogGraceStepS = 0.2;

// The ready line (without its newline) of the watchdog with pid `pid` on the host named `host`.
std::string watchdog_ready_line(long pid, std::string_view host);

// A signal a sweep sent (its line "killed PID SIGNAL ARGV", from the watchdog or from stop's
// program): the process, the signal's name ("SIGTERM") and the command line.
struct SweptProcess {
  long pid = 0;
  std::string signal;
  std::string argv;  // its words, each followed by a space, as the sweep prints them
};
// The sweep's line read back; nullopt for any other line.
std::optional<SweptProcess> parse_swept_line(std::string_view line);
// "PID SIGNAL ARGV" without the trailing space: how the launcher names the process to the user.
std::string describe_swept(const SweptProcess& p);

// What a watchdog is started with: its job and its times, as the script gets them, and the
// host's workdir, which it checks before it is ready.
struct WatchdogArgs {
  std::string job_id;
  double silence_s = 0;      // no byte for that long: the launcher is lost (given to the ms)
  int grace_steps = 0;       // SIGTERM to SIGKILL of a teardown the launcher asked for
  int lost_grace_steps = 0;  // the same for the teardown after losing the launcher
  std::string workdir;       // "": none to check

  double grace_s() const { return grace_steps * kWatchdogGraceStepS; }
  double lost_grace_s() const { return lost_grace_steps * kWatchdogGraceStepS; }
  bool operator==(const WatchdogArgs&) const = default;
};

// The arguments of the watchdog of job `job_id` that gives up on a launcher silent for
// `timeout_s` and waits `grace_s` between SIGTERM and SIGKILL: the grace rounded up to whole steps,
// the grace after losing the launcher capped at a quarter of `timeout_s` (so that the whole
// teardown fits in 3 heartbeats when `timeout_s` is 2 heartbeats).
WatchdogArgs watchdog_args(const std::string& job_id, double timeout_s, double grace_s);

// The watchdog command: `exec sh -c SCRIPT msrun-ssh-watchdog 'JOB' T G L 'WORKDIR'`.
std::string watchdog_command(const WatchdogArgs& args);
std::string watchdog_command(const std::string& job_id, double timeout_s, double grace_s,
                             const std::string& workdir = {});

// For the launch agent, which is the job's watchdog itself (agent.h): the text of the stack-dump
// directory's sitecustomize.py that the watchdog writes, of static storage (sent without a copy
// per host), and the watchdog's arguments as the script reads them (J T G L W).
std::string_view watchdog_stack_site();
std::vector<std::string> watchdog_words(const WatchdogArgs& args);
// The first bytes of every sampler command (watch.h), `exec perl -e 'SAMPLER' `, of static
// storage and the same for every host: a transport may send them without a copy per host.
std::string_view sampler_command_head();
// For the launch agent, which runs the sampler inside itself (agent.h): sampler.pl's text, of
// static storage, and a sampler command's arguments (JOB INTERVAL RANKS), each followed by a NUL,
// when `command` is one (exactly as sampler_command makes it), else nothing.
std::string_view sampler_program();
std::optional<std::string> sampler_words_of(std::string_view command);

// The arguments `command` was made from when it is a watchdog command (exactly what
// watchdog_command makes of them), else nothing. For stand-ins of a host, which see commands only.
std::optional<WatchdogArgs> watchdog_args_of(std::string_view command);

// Ends a detached job: SIGTERM, grace, SIGKILL of every process marked with `job_id`, or with the
// id of any of its attempts 2..`attempts` (ID-2, ...). Prints a line "killed PID SIGNAL ARGV" per
// signal sent (as the watchdog does: a process that outlives its SIGTERM has two), then
// "msrun-ssh-stop: done", and exits 0 (also when nothing was running).
std::string stop_command(const std::string& job_id, double grace_s, int attempts = 1);

// Ends what a failed run of `process` left on its host before it is started again in place
// (leftovers.sh): SIGTERM, grace, SIGKILL of every process of the job whose environment holds the
// run's own words (MS_ROLE, RANK_ID, RANK as the plan set them). Prints "killed ..." lines as
// stop_command does, then "msrun-ssh-leftovers: done".
std::string leftovers_command(const Process& process, const std::string& job_id, double grace_s);

}  // namespace msrun_ssh
