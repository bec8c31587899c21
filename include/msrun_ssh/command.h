// The remote stanza: the exact command strings sent to a host's sshd, which hands them to the
// user's login shell as `$SHELL -c STRING`. Everything a user supplies is single-quoted so that a
// POSIX shell (sh, dash, bash, ksh, zsh) passes it on byte-exact: nothing is ever re-interpreted.
//
// Per job and host there are two kinds of command:
//  - one watchdog (control channel; src/remote/sweep.sh and watchdog.sh), started first: it reads
//    one byte at a time from the launcher, echoing heartbeats. 'h' is a heartbeat, 'q' ends a
//    finished job, 'k' asks for a teardown (SIGTERM, grace, SIGKILL), 'K' for an immediate SIGKILL,
//    'a' for a teardown that first makes every Python process of the job print its stacks (SIGABRT
//    with PYTHONFAULTHANDLER=1). When no byte arrives for the deadline or stdin closes (the
//    launcher died or the host was cut off) it tears the job down by itself. A teardown kills every
//    process whose environment carries MSRUN_SSH_JOB=<job id>, found in /proc/*/environ, which
//    reaches grandchildren that left the process group too.
//  - one command per process: cd to the workdir, then exec env with the full environment and argv.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "msrun_ssh/plan.h"

namespace msrun_ssh {

// The environment variable that marks every process of a job on its hosts.
inline constexpr const char* kJobMarker = "MSRUN_SSH_JOB";

// Quotes one word for a POSIX shell: 'it'\''s' style. The empty string becomes ''.
std::string shell_quote(std::string_view word);

// Joins words, each quoted, with single spaces.
std::string shell_join(const std::vector<std::string>& words);

// Whether `process` reads the launcher's stdin: the workers that --tail_worker_log names (pdb).
bool stdin_from_launcher(const Options& options, const Process& process);

// The command that runs `process` of job `job_id` (attached: output through the channel). Its
// stdin is /dev/null unless `stdin_from_launcher` (--tail_worker_log ranks get the launcher's).
std::string process_command(const Process& process, const std::string& job_id,
                            bool stdin_from_launcher = false);

// Same, detached (--join=False): the process survives the launcher, its stdin is /dev/null and its
// output goes to `remote_log` on the host (directories created, file 0600).
std::string detached_command(const Process& process, const std::string& job_id,
                             const std::string& remote_log);

// The watchdog of job `job_id`. `timeout_s`: silence after which it tears down; `grace_s`: time
// between SIGTERM and SIGKILL. Prints "msrun-ssh-watchdog: ready" when started, and a line
// "killed PID COMMAND" per process it killed.
std::string watchdog_command(const std::string& job_id, double timeout_s, double grace_s);

// Ends a detached job (src/remote/sweep.sh and stop.sh): SIGTERM, grace, SIGKILL of every process
// marked with `job_id`; prints "killed PID COMMAND" per process and exits 0 (also when nothing was
// running).
std::string stop_command(const std::string& job_id, double grace_s);

// The heartbeat / control bytes understood by the watchdog.
inline constexpr char kBeat = 'h';
inline constexpr char kQuit = 'q';
inline constexpr char kTeardown = 'k';
inline constexpr char kKillNow = 'K';
inline constexpr char kStacksThenTeardown = 'a';  // SIGABRT to Python processes, then 'k'

}  // namespace msrun_ssh
