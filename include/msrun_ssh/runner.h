// The job's life cycle (docs/life-cycle.md) once every host is connected:
// start the watchdogs, start every process, relay output, and end the job the same way whatever
// happens — first failure, signal to the launcher, lost host — with a teardown on every host. Talks
// to hosts only through Transport, so tests drive it with a fake.
#pragma once

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "msrun_ssh/batch.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/events.h"
#include "msrun_ssh/options.h"
#include "msrun_ssh/output.h"
#include "msrun_ssh/plan.h"
#include "msrun_ssh/status_line.h"
#include "msrun_ssh/transport.h"
#include "msrun_ssh/watch.h"

namespace msrun_ssh {

// One in-place restart of a worker (--restart_policy process): the n-th of the job, and why.
// A straggler the job had (watch.h): a host and its ranks, from `since` to `until` (seconds
// after the processes started; until < 0 while it lasts), the demand that raised it.
struct StragglerRecord {
  std::string host;
  std::vector<std::string> ranks;
  double since = 0;
  double until = -1;
  double demand = 0;
  double median = 0;
};

struct ProcessRestart {
  int number = 0;       // 1, 2, ... within the job (counted against --max_restarts)
  std::string host;     // its host's address
  std::string process;  // "rank 3"
  int rank = -1;
  std::string cause;  // "rank 3 on node1 failed: exit 3"
};

// The lines of the end-of-job summary that list the in-place restarts ("" when there was none):
// "process restarts (2 of --max_restarts=3):" and one line per restart with its cause.
std::string format_process_restarts(const std::vector<ProcessRestart>& restarts, int max_restarts);

class Runner {
 public:
  // `signal_fd`: a signalfd for SIGINT/SIGTERM/SIGHUP and SIGQUIT (or -1); `stdin_fd`: the
  // launcher's stdin, forwarded to the ranks of --tail_worker_log when it names some (or -1).
  Runner(const Plan& plan, const Options& options, Transport& transport, Output& output,
         int signal_fd = -1, int stdin_fd = -1);

  // Runs the attached job to its end; returns its exit status (error.h).
  int run();

  // Ends the job with `status` and `why` at the next turn of run()'s loop, as a failure would:
  // for what happens outside the runner's own handlers (a log that cannot be written, with
  // --on_log_error=stop). The first failure still decides the status.
  void fail_soon(int status, std::string why) {
    if (!pending_fail_) pending_fail_.emplace(status, std::move(why));
  }

  // Reacts as if the launcher had received `signo` (what the signalfd delivers). SIGQUIT (Ctrl-\\)
  // asks for every process's stack while the job goes on (stacks.h): stack.sh runs on every host
  // still in the job, on the job's own connections; when all have answered (at most
  // kStackBatchSeconds) the report goes to the console and <log_dir>/stacks-<UTC time>.txt. One
  // dump at a time; none once the job is ending.
  void on_signal(int signo);

  // SIGTSTP (Ctrl-Z): every process of the job is stopped on every host (the watchdogs' 'z'),
  // then the launcher stops itself; once continued (`fg`, `bg`: SIGCONT) the processes continue
  // and the job goes on. The time suspended counts toward no limit and no host's silence. Before
  // the processes have started the suspension waits for them; while the job ends it is refused.
  // A launcher stopped otherwise (SIGSTOP, a debugger) or starved says how long it stood still;
  // that time counts toward no host's silence.
  //
  // How the launcher stops itself (tests replace it; default: SIGSTOP to itself).
  void set_stop_self(std::function<void()> stop_self) { stop_self_ = std::move(stop_self); }

  // Numbers the attempt (--max_restarts): from attempt 2 on, console prefixes read "3@host a2".
  void set_attempt(int attempt) { attempt_ = attempt; }

  // Where the job's events go (--events; docs/events.md): watchdog_ready, process_started,
  // process_ended, host_lost, teardown. May stay unset.
  void set_events(EventLog* events) { events_ = events; }

  // The terminal's status row (status_line.h): `start` shows the watchdogs and the process
  // starts, then disappears; `running` (--status_line; null: none) shows the processes running,
  // exited and failed, the output rate and the time since the start, updated every second.
  void set_status(StartView* start, StatusLine* running) {
    start_view_ = start;
    running_line_ = running;
  }

  // What ended the job when it did not end well: the first failure, signal or lost host, as the
  // console said it ("rank 3 on node1 failed: exit 3"); "" while nothing went wrong.
  const std::string& cause() const { return cause_; }

  // Whether a signal to the launcher (SIGINT, SIGTERM, SIGHUP) started the teardown.
  bool interrupted() const { return interrupted_; }
  // The hosts did not confirm the end of every process (kExitUnconfirmed): some may still run.
  bool unconfirmed() const { return unconfirmed_; }
  // Nothing was started because the logs could not be made: no restart would do better.
  bool logs_failed() const { return logs_failed_; }
  // A host's watchdog found no workdir there (exit 2, nothing started): a restart would meet it
  // again.
  bool workdir_missing() const { return workdir_missing_; }

  // The log file names the processes got (with {hostname} resolved), in plan order; valid after
  // run() for the processes that were started.
  std::vector<std::string> log_names() const;

  // The hosts lost during the run (host_key each, as messages name them; in plan order).
  std::vector<std::string> lost_hosts() const;

  // The host (host_key, as messages name it) whose process's failure started the teardown ("" when
  // none did).
  std::string root_cause_host() const;

  // The host's own name as its watchdog reported it ("" before that).
  const std::string& reported_name(size_t host) const { return hosts_[host].name; }

  // One row per process, in plan order; valid after run().
  std::vector<SummaryRow> summary() const;

  // --restart_policy process (docs/restarts.md): a worker that exits non-zero or by a signal
  // while nothing else ends the job, and while --max_restarts allows another restart, is not a
  // failure of the job: once its channel has closed, its command (the same, with the same
  // environment) runs again on its host, its output goes on in the same log after a separator
  // line, and every other process runs on untouched. The scheduler's failure, a lost host, a
  // process that cannot be started again, a worker failing with no restart left, a signal to the
  // launcher or a time limit end the job as under the job policy. The restarts so far, in order:
  const std::vector<ProcessRestart>& process_restarts() const { return restarts_; }
  const std::vector<StragglerRecord>& stragglers() const { return stragglers_; }
  // With --watch: where `msrun-ssh top` finds the job, rewritten once a second (watch.h).
  void set_top_file(std::string path) { top_file_ = std::move(path); }

 private:
  struct Proc {
    size_t host = 0;
    const Process* spec = nullptr;
    ChannelId channel = -1;
    int out = -1;
    bool done = false;
    bool exited = false;
    int status = 0;
    std::string signal;
    double start_ms = 0;
    double end_ms = 0;
    std::string note;           // how it ended when not by itself
    std::string restart_cause;  // not empty: it failed and starts again once its channel closed
                                // and what its failed run left has been ended (`leftovers`)
    ChannelId leftovers = -1;   // the command ending what the failed run left, while it runs
    bool closed = false;        // its channel closed while `leftovers` still ran
    double restart_wait_until_ms = -1;  // leftovers done, its channel still open: given up then
    std::string log_name;               // its log file, {hostname} resolved (empty: never started)
  };
  struct HostState {
    std::string label;  // host_key: the address, with the port when another entry shares it
    ChannelId watchdog = -1;
    bool ready = false;
    bool lost = false;
    bool watchdog_closed = false;
    // It said its teardown is over (kWatchdogDone), or that it SIGKILLs what is left itself
    // (kWatchdogTerminated: a batch system ending its step, which ends the step's processes too).
    bool watchdog_done = false;
    // `msrun-ssh stop`'s program sweeping the host in place of a watchdog that ended before its
    // time, while it runs: the launcher waits for it (its exit would cut the sweep short).
    ChannelId sweep = -1;
    bool paused = false;  // its watchdog stopped the job's processes (Ctrl-Z)
    // The launcher stood still longer than the watchdog waits, and no heartbeat came back since.
    bool may_have_given_up = false;
    double last_echo_ms = 0;
    // How long the host may be silent before it is lost, and its watchdog waits for a silent
    // launcher: 2 heartbeats, or what its ssh config's ServerAlive* say (see the constructor).
    double silence_ms = 0;
    std::string name;  // the host's own name (uname -n), from the watchdog's ready line
    LineFramer framer{4096};
  };

  bool start_watchdogs();
  bool all_waiting_hosts_ack() const;
  // Every process's log, made before any process starts: a log that cannot be made (a
  // directory or another user's file of its name in --log_dir, no descriptor left) fails the run
  // with exit 2 and nothing started. False then.
  bool make_logs();
  void start_processes();
  void exec_process(size_t index);
  bool restarts_in_place(const Proc& p);
  void restart_process(size_t index);
  void promise_no_more_channels();
  // Once every channel of the start is open: the promise, unless an in-place restart may come.
  void promise_channels_after_start();
  void handle(const TransportEvent& e);
  void handle_watchdog(size_t host, const TransportEvent& e);
  void watchdog_line(size_t host, std::string_view line);
  void handle_process(size_t index, const TransportEvent& e);
  void finish_process(Proc& p, const std::string& note);
  SummaryRow row_of(size_t index) const;
  void read_stdin();
  bool stdin_backlogged() const;
  void watch_stdin_again();
  void read_signals();
  void beat();
  void start_samplers();  // the straggler watch's, one per live host; then no more channels
  void check_heartbeats(double now);
  double starved_limit_ms() const;
  void lose_host(size_t host, const std::string& why);
  // Ends the job with `status` (the first call decides it); `how`: the watchdogs' teardown byte.
  void fail(int status, const std::string& why, char how = kTeardown);
  void teardown(char how);
  void kill_channels();
  void give_up();
  void check_time_limits(double now);
  void check_restart_waits(double now);
  void send_all(char byte);
  bool processes_done() const;
  bool processes_ended() const;
  bool watchdogs_done() const;
  int timeout_ms(double now) const;
  const std::string& host_name(size_t host) const;  // HostState::label

  // t_.poll for `wait_ms`, then what the launcher itself stood still beyond it (stopped, a
  // debugger, starved of CPU) is taken out of every host's silence (excuse_stall).
  void poll_for(int wait_ms);
  void excuse_stall(double stuck_ms);
  void suspend_job();
  bool finish_suspend(double now);  // whether the launcher was suspended (and is back)
  void resume_job(double suspended_ms);
  size_t live_watchdogs(bool paused_only) const;
  // "it heard nothing from the launcher for ..", of host `host`'s watchdog.
  std::string watchdog_gave_up_why(size_t host) const;

  void update_status(double now);
  void request_stacks();
  void check_stacks(double now);

  EventLog* events_ = nullptr;
  StartView* start_view_ = nullptr;
  StatusLine* running_line_ = nullptr;
  double status_at_ms_ = -1;  // when the running status was last drawn
  size_t status_bytes_ = 0;   // output bytes then
  const Plan& plan_;
  const Options& options_;
  Transport& t_;
  Output& out_;
  int signal_fd_;
  int stdin_fd_;
  std::vector<Proc> procs_;
  std::vector<HostState> hosts_;
  std::vector<int> proc_of_channel_;    // channel id -> proc index (-1: none)
  std::vector<int> host_of_watchdog_;   // channel id -> host index (-1: none)
  std::vector<int> proc_of_leftovers_;  // channel id -> proc index (-1: none)
  std::vector<int> host_of_sweep_;      // channel id -> host index (-1: none); HostState::sweep
  std::vector<ChannelId> stdin_targets_;
  // The launcher's stdin is its terminal and it runs in the background (`&`, `bg`): the terminal's
  // input is the shell's, and reading it would stop the launcher (SIGTTIN) and with it the job
  // (its watchdogs would hear nothing). It is not watched until the launcher is in the
  // foreground again (looked at every second).
  bool stdin_in_background_ = false;
  // A tailed rank holds more than kStdinBacklog bytes of stdin not sent yet (a file, a fast pipe,
  // /dev/zero): stdin is not read until it drains, as ssh's channel window holds a writer back.
  bool stdin_held_ = false;
  int exit_code_ = -1;  // set once, by the first failure / signal / lost host
  // The job's life cycle. It only moves forward (enter), and a teardown takes over a quit.
  enum class Phase {
    kStarting,     // the watchdogs, then the processes, are being started
    kRunning,      // every process was started: time limits, restarts in place, Ctrl-Z, stacks
    kQuitting,     // every process ended by itself: the watchdogs sweep what is left, and end
    kTearingDown,  // a failure, signal or lost host: the watchdogs end every process (grace)
    kKillingNow,   // the hosts were too slow, or a second Ctrl-C: SIGKILL now, then give up
  };
  Phase phase_ = Phase::kStarting;
  void enter(Phase next) { phase_ = std::max(phase_, next); }
  bool ending() const { return phase_ >= Phase::kQuitting; }
  bool tearing_down() const { return phase_ >= Phase::kTearingDown; }
  bool channels_killed_ = false;  // the open process channels got an SSH "signal" KILL
  bool interrupted_ = false;
  bool late_signal_ = false;  // a signal came once every process had ended (on_signal)
  // Every process ended by itself (kQuitting was entered): the job's outcome stands, also once
  // the hosts, too slow to confirm the sweep, are killed now (kKillingNow).
  bool outcome_stands_ = false;
  bool unconfirmed_ = false;  // give_up named processes that may still run
  bool logs_failed_ = false;  // make_logs failed: nothing started, and a restart would fail alike
  bool workdir_missing_ = false;  // a host has no workdir: the same
  int attempt_ = 1;
  std::optional<std::pair<int, std::string>> pending_fail_;  // fail_soon's, not yet failed
  int root_cause_ = -1;         // the process whose failure started the teardown (-1: none)
  double started_ms_ = -1;      // when the processes were started (-1: not yet)
  double last_output_ms_ = -1;  // the last byte any process printed (or the start)
  std::string teardown_note_ = "ended by teardown";  // how the summary names a torn-down end
  std::string cause_;                                // what ended the job (cause())
  bool no_more_channels_ = false;                    // Transport::no_more_channels was called
  std::vector<ProcessRestart> restarts_;  // the in-place restarts (--restart_policy process)
  std::vector<size_t> restart_waits_;     // procs whose failed run's channel outlives its leftovers
  double deadline_ms_ = 0;  // when waiting for the hosts stops (during a teardown / the end)
  double next_beat_ms_ = 0;
  double heartbeat_ms_;  // how often heartbeats go out (--heartbeat, or a shorter ServerAlive)
  enum class Suspension {
    kNone,
    kPending,   // Ctrl-Z before the processes started: suspended once they have
    kStopping,  // 'z' sent: the launcher stops itself once the watchdogs paused
  };
  Suspension suspension_ = Suspension::kNone;
  double suspend_deadline_ms_ = 0;
  double stalled_ms_ = 0;  // how long the launcher stood still in all (excuse_stall)
  std::function<void()> stop_self_;
  std::unique_ptr<Batch> stacks_;  // the stack dump SIGQUIT asked for, while it runs
  double stacks_deadline_ms_ = 0;
  std::unique_ptr<JobWatch> watch_;  // the hosts' samplers (--watch), while the job runs
  double samplers_at_ms_ = -1;       // when the samplers start (start_samplers); -1: not to come
  std::vector<StragglerRecord> stragglers_;
  void on_straggler(const StragglerChange& change);
  std::string top_file_;
  std::unique_ptr<TopTracker> top_;
  double top_at_ms_ = -1;
  void write_top(double now);
};

// --- Restarts (--max_restarts) ------------------------------------------------------------------
// After a failure the job is torn down everywhere as always, then started again as attempt 2, 3,
// ... up to max_restarts more times, after a back-off that doubles from `backoff_s` (capped at
// kMaxRestartBackoff). Never restarted: success, a signal to the launcher, an unconfirmed
// teardown (254), or an attempt that says `final` (hosts unreachable at a restart).

inline constexpr double kMaxRestartBackoff = 300;

struct AttemptResult {
  int status = 0;
  bool interrupted = false;  // a signal to the launcher ended it
  bool final = false;        // must not be followed by another attempt whatever the status
  std::string cause;         // what ended it, "" for success
  std::vector<std::string> lost_hosts;  // the hosts lost during the attempt (Runner::lost_hosts)
  std::string root_cause_host;          // Runner::root_cause_host
  std::vector<ProcessRestart> process_restarts;  // Runner::process_restarts
  std::vector<StragglerRecord> stragglers;       // Runner::stragglers
  std::string torch_error;  // --contract torch, failed: torchelastic_error of its summary
};

// The whole-job restarts --max_restarts allows: all of them under --restart_policy job, none under
// process (there the budget is spent on in-place restarts; whatever cannot be recovered in place
// ends the job).
int job_restarts(const Options& options);

struct RestartHistory {
  std::vector<AttemptResult> attempts;
  int status = 0;  // the job's exit status: the last attempt's, or a signal's during a back-off
};

// Whether attempt `attempt` (1-based) with result `r` is followed by another one.
bool should_restart(const AttemptResult& r, int attempt, int max_restarts);

// Seconds to wait before attempt `attempt` (2, 3, ...): backoff_s, 2*backoff_s, ..., capped.
double restart_backoff(double backoff_s, int attempt);

// Runs attempt 1, and more while should_restart says so: `run_attempt(k)` runs attempt k to its
// end; `wait(seconds)` waits out a back-off and returns 0, or the exit status of a signal that
// arrived meanwhile (which ends everything at once); `say` tells the user what happens.
RestartHistory run_with_restarts(int max_restarts, double backoff_s,
                                 const std::function<AttemptResult(int)>& run_attempt,
                                 const std::function<int(double)>& wait,
                                 const std::function<void(const std::string&)>& say);

// The end-of-job lines for a job that had more than one attempt: one line per attempt.
std::string format_attempts(const RestartHistory& history);

// --- Spare hosts (--spares, `spare = true`; docs/restarts.md) ------------------------------------
// Which hosts run the job from one attempt to the next. A host leaves at a restart when it was
// lost during the attempt, when it cannot be reached as the next attempt connects, or when it
// failed --host_failures_to_exclude attempts (an attempt fails a host when the host was lost or
// ran the process whose failure started the teardown); the first free spare takes its place
// (replace_hosts, apply_replacements of plan.h). A plan without spares never changes: its
// restarts run on the same hosts, as without this roster.

class HostRoster {
 public:
  using Say = std::function<void(const std::string&)>;

  // `say` tells the user each replacement and a move of the master.
  HostRoster(Plan plan, const Options& options, Say say);

  const Plan& plan() const { return plan_; }
  bool has_spares() const { return has_spares_; }
  // Gives the plan away (its job id stays), for a job whose one attempt has no spare to call on:
  // the plan is then held once, not once here and once for the attempt.
  Plan take_plan();

  // After attempt `result` failed, before the next one: counts its failures and replaces the hosts
  // that leave. Returns "" when the next attempt can run, else why not ("cannot restart: no spare
  // host is left to replace node1 (node rank 1, lost: ...)").
  std::string after_attempt(const AttemptResult& result);

  // When the next attempt could not reach `unreachable` (host_key -> why): replaces those hosts.
  // Returns "" or why the attempt cannot run, as after_attempt.
  std::string replace_unreachable(const std::map<std::string, std::string>& unreachable);

  // Told of each spare taken in (its host as the plan now has it, node rank included), before an
  // attempt runs on it: the job's record lists it then (jobs.h).
  void on_spare_taken(std::function<void(const HostPlan&)> taken) { taken_ = std::move(taken); }

  // The hosts (host_key) lost during an attempt so far: what that attempt started there may still
  // run, until its watchdog misses the launcher. The next attempts end it before they start.
  const std::set<std::string>& lost_before() const { return lost_before_; }

 private:
  std::string replace(const std::map<std::string, std::string>& unusable);

  Plan plan_;
  const Options& options_;
  Say say_;
  bool has_spares_;
  std::map<std::string, int> failures_;  // host_key -> attempts it failed
  std::set<std::string> lost_before_;
  std::function<void(const HostPlan&)> taken_;
};

// The attached or detached run of a whole job, on SSH: connects, starts, waits. Returns the exit
// status (error.h; docs/command-line.md).
// `plan` is taken: the job keeps it (moved from).
int run_job(const Options& options, Plan& plan);

// run_job with the launcher's console — file descriptors 1 and 2: the processes' lines, the
// launcher's messages, the summary — written to the file `console` (created 0600) for its
// duration, for a caller that prints a report of its own (check --net=collective). Throws
// InputError when the file cannot be created.
int run_job_quietly(const Options& options, Plan& plan, const std::string& console);

// A detached start (--join=False) on hosts connected through `t` (their agents): the job's record
// first (marked as starting: a launcher killed half-way leaves a job that `stop --job ID` finds),
// then every process at once; prints the job id on stdout and returns 0. A failed start, or
// SIGINT, SIGTERM or SIGHUP (read on the signalfd `sfd`) before it is over, stops what did start
// on every host (a signal during that stop ends its grace at once) and names each host whose stop
// did not finish: its processes may still run. Returns then the signal's status, else
// kExitHostFailure.
int start_detached(const Options& options, const Plan& plan, Transport& t, int sfd);

// `msrun-ssh stop`: on every host of `cluster`, signals the processes of the detached job
// options.job (stop_command of command.h) and prints each one signalled. Returns 0, or
// kExitHostFailure when a host could not be reached or did not finish.
int stop_job(const Options& options, const Cluster& cluster);

// `msrun-ssh sync`: connects every host of `cluster` and syncs options.sync_dir to each (sync.h),
// printing one line per host. Returns 0, or kExitHostFailure when a host could not be reached or
// its sync failed. Throws InputError for what is wrong before connecting (sync_where, symlinks).
int sync_job(const Options& options, const Cluster& cluster);

// `msrun-ssh stop` on hosts connected through `transport` (its host i is addresses[i];
// unreached[i], when given and not empty, says why host i could not be connected to): runs the stop
// command of job `options.job` (and its attempts up to options.attempts) on every connected host at
// once, prints one line "ADDRESS: killed PID COMMAND" per process signalled and then "job ID: N
// signals sent on M hosts" ("on K of M hosts" when some were not reached) to `out`, and to `err`
// "msrun-ssh: ADDRESS: WHY: not stopped there ..." for each host not reached and "msrun-ssh:
// ADDRESS: stop did not finish" for each host that did not answer within --kill_grace +
// --connect_timeout + 5 s. Returns 0, or kExitHostFailure when a host was not reached or did not
// finish.
int stop_on_hosts(Transport& transport, const std::vector<std::string>& addresses,
                  const Options& options, std::FILE* out, std::FILE* err,
                  const std::vector<std::string>& unreached = {});

}  // namespace msrun_ssh
