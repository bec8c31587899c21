// Stacks on demand (docs/hangs-and-stacks.md): `msrun-ssh stack --job ID` shows where every
// process of a running job is — its Python stack, else its native stack, and its state and wait
// channel from /proc — without stopping it, and groups identical stacks under their rank set.
//
// How a Python process can dump its stack and go on: every process of a job starts through
// src/remote/stack_site.sh (process_command, command.h, when Process::stack_dumps), which installs
// src/remote/stack_site.py as sitecustomize.py in the job's directory on the host
// (${TMPDIR:-/tmp}/msrun-ssh-stacks-<job id>, 0700) and puts that directory first on PYTHONPATH
// (what the process's environment had there follows it). On import it registers
// Python's faulthandler on SIGUSR2 (kStackSignalName) for a file of its own in that directory,
// then runs the user's own sitecustomize, if any. SIGUSR2 is therefore taken in the job's Python
// processes; a program that installs its own SIGUSR2 handler later replaces ours (its processes
// then dump no Python stack: they get a native one).
//
// Per host, one command (stack_command: src/remote/stack.sh) finds the job's processes by their
// environment (as the sweep does), signals those that can dump, waits for the dumps (at most
// `wait_s`), takes a native backtrace with gdb of the others where gdb is installed (each bounded
// by `gdb_s`), and prints one record per process (the grammar: below). Nothing is stopped or
// ended; gdb attaches for the moment of its backtrace.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "msrun_ssh/batch.h"
#include "msrun_ssh/hostfile.h"
#include "msrun_ssh/options.h"
#include "msrun_ssh/transport.h"

namespace msrun_ssh {

// The signal a Python process of a job dumps its stacks on (stack_site.py) and goes on.
inline constexpr std::string_view kStackSignalName = "SIGUSR2";

// What stack.sh prints on one host, one line each:
//   host NAME                           the host's own name (uname -n)
//   gdb yes|no                          whether native backtraces can be taken there
//   proc PID RANK STATE WCHAN COMMAND   per process of the job: RANK "sched", the global rank or
//                                       "-" (none in its environment); STATE the letter of
//                                       /proc/PID/stat; WCHAN the kernel function it sleeps in
//                                       or "-"; COMMAND /proc/PID/comm (may hold spaces)
//   py LINE                             a line of the latest process's Python stack
//   native LINE                         a line of its native stack (gdb's "Thread" and "#N" lines)
//   note TEXT                           why it has no stack of a kind
//   end                                 the answer is complete
// Anything else (a login script's noise) is ignored.
struct StackProcess {
  long pid = 0;
  std::optional<int> rank;  // -1: the scheduler; nullopt: no rank in its environment
  std::string state;        // "S", "D", ...
  std::string wchan;        // "-": none
  std::string command;
  std::vector<std::string> python;  // faulthandler's lines: "Thread 0x...", "  File ..."
  std::vector<std::string> native;  // gdb's lines
  std::vector<std::string> notes;   // "no Python stack: ...", "no native stack tool ..."
};

// One host's answer.
struct HostStacks {
  std::string address;  // as the host file names it
  std::string name;     // what the host calls itself; "" when it did not say
  bool gdb = false;
  std::vector<StackProcess> processes;  // as the host listed them (stack.sh: by pid)
  bool complete = false;                // the "end" line came
  std::string trouble;  // why there is no complete answer (unreachable, timed out, ...); "" if none
};

// The command that prints the stacks of job `job_id` on a host (stack.sh): Python dumps waited
// for at most `wait_s`, each gdb run bounded by `gdb_s`.
std::string stack_command(const std::string& job_id, double wait_s, double gdb_s);

// Reads stack.sh's output (address and trouble are left to the caller).
HostStacks parse_stacks(std::string_view output);

// The report of `stack`:
//   stacks of job ID: N processes on M hosts
//   host ADDRESS (NAME): K processes[, no native stack tool]     or: host ADDRESS: TROUBLE
//     LABEL pid PID STATE (WHAT) wchan WCHAN COMMAND: Python stack | native stack | no stack
//         [(NOTES; ...)]
//   ...
//   --- Python stacks of LABELS ---   (format_stack_groups, output.h: identical stacks of many
//   ...                                ranks once, under their rank set; LABEL "rank 3 (pid 77)")
//   --- native stacks of LABELS ---
// A process without a rank in its environment is shown alone ("pid 77"). With no process at all:
// "stacks of job ID: no process of the job on these hosts".
std::string format_stack_report(const std::string& job_id, const std::vector<HostStacks>& hosts);

// How long a batch of stack commands may take (stack_command waits 2 s for the Python dumps and
// bounds each gdb run by 10 s; the rest is room for gdb's own end and the round trips).
inline constexpr double kStackBatchSeconds = 20;

// Starts stack_command (wait 2 s, gdb 10 s) of job `job_id` in `batch` on each of `hosts`.
void start_stacks(Batch& batch, const std::vector<size_t>& hosts, const std::string& job_id);

// The answers of a batch of start_stacks, once it is over: one HostStacks per entry of
// `addresses` (in order), `trouble` set for the hosts whose `unreachable` entry is not "" and
// those that gave no complete answer.
std::vector<HostStacks> collect_stacks(const std::vector<BatchResult>& results,
                                       const std::vector<std::string>& addresses,
                                       const std::vector<std::string>& unreachable);

// Runs stack_command on every host of `transport` whose `unreachable` entry is "" (one batch,
// bounded by kStackBatchSeconds); the answers as collect_stacks gives them.
std::vector<HostStacks> stacks_on_hosts(Transport& transport,
                                        const std::vector<std::string>& addresses,
                                        const std::vector<std::string>& unreachable,
                                        const std::string& job_id);

// `msrun-ssh stack`: connects every host of `cluster` (those that cannot be reached are named in
// the report), prints the report of job options.job to stdout and writes it to
// <options.log_dir>/stacks-<UTC time>.txt. Returns 0 when every host answered, else
// kExitHostFailure.
int stack_job(const Options& options, const Cluster& cluster);

// Writes `stacks` (a grouped stack report) to <log_dir>/stacks-<UTC time>[-a<attempt>].txt (the
// suffix from attempt 2 on); returns its path. Warns on stderr, naming the file, when it cannot be
// written, and returns "" then or when `stacks` is empty (nothing is written).
std::string write_stacks_file(const std::string& log_dir, const std::string& stacks, int attempt);

}  // namespace msrun_ssh
