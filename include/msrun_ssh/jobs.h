// Jobs you can find again (docs/jobs.md): every run that starts processes leaves a record in
// ${XDG_STATE_HOME:-$HOME/.local/state}/msrun-ssh/jobs/<ID>.json, and `msrun-ssh list`, `status
// --job ID`, `logs --job ID` and `stop --job ID` work from it: the hosts, how to reach them and
// where each process's log is. The state of a detached job comes from its hosts (src/remote/
// job_state.sh: the pid and exit files its processes' keepers write, see detached_command in
// command.h); an attached job's from its record.
#pragma once

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "msrun_ssh/batch.h"
#include "msrun_ssh/options.h"
#include "msrun_ssh/output.h"
#include "msrun_ssh/plan.h"
#include "msrun_ssh/ssh.h"
#include "msrun_ssh/transport.h"

namespace msrun_ssh {

// ---- Records
// -------------------------------------------------------------------------------------

// A host of a job: how to reach it again, its node rank and workdir.
struct JobHost {
  SshEndpoint endpoint;
  int node_rank = 0;
  std::string workdir;
  // Another entry of the job (host or spare, recorded or not) has its address: the host is
  // named with its port (host_key), as the run named it.
  bool shares_address = false;
};

// The name of a recorded host as the run gave it: its address, and its port when it shared the
// address with another entry of the job.
std::string host_key(const JobHost& host);

// A process of a job. `log`: for a detached job the path on its host (the workdir-relative
// --log_dir resolved), for an attached one the path on the launcher's machine.
struct JobProcess {
  int rank = -1;  // global rank; -1: the scheduler
  int node_rank = 0;
  size_t host = 0;  // index into JobRecord::hosts
  std::string log;
};

// The SSH options the job was started with (ssh_settings.h), to reach its hosts again.
struct JobSsh {
  std::string ssh_config;
  std::optional<HostKeyPolicy> strict_host_key_checking;
  double connect_timeout = 10;
  int fanout = 64;
  int jump_fanout = 8;
};

struct JobRecord {
  std::string id;
  std::string hostfile;           // absolute, or a host source's name ("slurm")
  std::vector<std::string> argv;  // the launcher's whole command line
  std::string cwd;                // the launcher's working directory
  std::string started;            // UTC, ISO 8601 (format_timestamp, output.h)
  bool detached = false;
  // A detached job's record is written before its start and again once the start is over: true
  // in between, while its launcher starts it (that launcher then owns the job, as an attached
  // job's does).
  bool starting = false;
  long launcher_pid = 0;
  // When the launcher started (/proc/PID/stat's starttime, clock ticks after boot), so that a
  // later process of that pid (the pid reused, the machine rebooted) is not taken for it; 0 in a
  // record of an older launcher.
  long long launcher_start = 0;
  std::string launcher_host;  // the launcher's machine (uname -n); "" in a record of an older one
  JobSsh ssh;
  std::vector<JobHost> hosts;
  // An attached job's spares that a restart took in (node_rank: the one each took), so that
  // `stop` and `stack` reach them; under their own key, which a record's older readers pass over.
  std::vector<JobHost> spares;
  std::vector<JobProcess> processes;  // in plan order
  std::optional<int> exit_status;     // an attached job's, once it ended
  std::string ended;                  // when it ended (UTC, ISO 8601), "" while it runs
};

// Reads a variable of the launcher's environment; nullptr when unset.
using EnvLookup = std::function<const char*(const char*)>;

// Where records live: $XDG_STATE_HOME/msrun-ssh/jobs when XDG_STATE_HOME is an absolute path, else
// $HOME/.local/state/msrun-ssh/jobs; "" when neither is set.
std::string jobs_dir(const EnvLookup& getenv);

// The record of a job about to run: `logs` holds each process's log path, in plan order (see
// JobProcess::log). `started` is now; the launcher's pid is this process's.
JobRecord make_job_record(const Options& options, const Plan& plan,
                          const std::vector<std::string>& logs, bool detached);

// A record's host: where `host` is reached, its node rank and its workdir.
JobHost job_host(const Host& host, int node_rank, const std::string& workdir);

nlohmann::json record_json(const JobRecord& record);
// Throws InputError (naming `origin`) when `j` is not a record.
JobRecord record_from_json(const nlohmann::json& j, const std::string& origin);

// Writes `record` to DIR/<id>.json (directories made 0700, through a temporary name); on failure
// prints a warning to `err` and returns false. Never throws.
bool write_job_record(const std::string& dir, const JobRecord& record, std::FILE* err);

// The record of job `id` in `dir`. Throws InputError "no job ID in DIR" (or naming a broken file).
JobRecord load_job_record(const std::string& dir, const std::string& id);

// Every readable record in `dir`, newest first (start time, then id); broken files are skipped
// with a warning to `err`.
std::vector<JobRecord> load_job_records(const std::string& dir, std::FILE* err);

// ---- What the hosts say ------------------------------------------------------------------------

// One line "proc ..." of job_state.sh.
struct RemoteProcess {
  std::string rank_word;  // "sched" or the rank
  std::optional<long> pid;
  std::string state;  // "alive", "ended", "unknown"
  std::optional<int> status;
  std::optional<long> ticks;
  std::string last_line;
};

struct RemoteState {
  long hz = 100;
  long alive = 0;  // processes of the job alive on the host, of any kind
  std::vector<RemoteProcess> processes;
};

// The command that asks a host about the processes of `record` on host `host`.
std::string job_state_command(const JobRecord& record, size_t host);

// Parses job_state.sh's answer; nullopt when it is not one.
std::optional<RemoteState> parse_job_state(std::string_view text);

// The command that prints the log of process `process` of `record` (follow: until the job has
// ended on that host).
std::string job_logs_command(const JobRecord& record, size_t process, bool follow);

// The status of one process, as `status` shows it.
struct ProcessStatus {
  int rank = -1;
  std::string host;
  std::optional<long> pid;
  // "alive", "exited", "killed" (status 128+N: signal N), "unknown" (no state file: never
  // started, or ended without its keeper), "unreachable" (its host did not answer)
  std::string state;
  std::optional<int> status;
  std::string signal;  // for "killed": "TERM", ...
  std::optional<double> cpu_s;
  std::string last_line;
  std::string why;  // for "unreachable"
};

// Runs job_state_command on every host of `record` that `reached` says is connected (one batch,
// `timeout_s`), and makes one ProcessStatus per process of the record, in its order.
// `unreachable[h]` is why host h could not be connected ("" when it was).
std::vector<ProcessStatus> query_processes(Transport& transport, const JobRecord& record,
                                           const std::vector<std::string>& unreachable,
                                           double timeout_s);

// The table of `status` (a header, one line per process; last lines capped) and its JSON.
std::string format_status(const JobRecord& record, const std::vector<ProcessStatus>& rows);
nlohmann::json status_json(const JobRecord& record, const std::vector<ProcessStatus>& rows);

// The one-word-or-so state `list` shows for a job: for a detached job from `rows` ("running
// (3/4 alive)", "ended (all exit 0)", "ended (2 failed)", "unknown (host X unreachable)"), for an
// attached one from the record ("ended (exit S)", "running" while `launcher_alive`, else "ended
// (launcher gone)").
std::string job_state(const JobRecord& record, const std::vector<ProcessStatus>& rows,
                      bool launcher_alive);

struct JobListing {
  JobRecord record;
  std::string state;
};

// The table of `list` and its JSON.
std::string format_job_list(const std::vector<JobListing>& jobs);
nlohmann::json job_list_json(const std::vector<JobListing>& jobs);

// `logs` on hosts already connected: one channel per log of `record` (only rank `rank` when
// given; -1: the scheduler), each line printed through `output` with the prefix an attached run
// gives it ("3@HOST", "sched@HOST"). Ends when every channel has closed, or when `interrupted`
// (checked at least once a second) returns a signal's exit status: then every channel still open
// is killed and that status is returned. Returns 0, or kExitHostFailure when a host did not
// answer; hosts with `unreachable[h]` non-empty are skipped (named on `err`).
int logs_on_hosts(Transport& transport, const JobRecord& record,
                  const std::vector<std::string>& unreachable, std::optional<int> rank, bool follow,
                  Output& output, const std::function<int()>& interrupted, std::FILE* err);

// ---- The subcommands, over SSH -----------------------------------------------------------------

// `msrun-ssh list`, `status`, `logs`: exit status as docs/jobs.md says.
int list_jobs(const Options& options);
int show_job_status(const Options& options);
int show_job_logs(const Options& options);

// This machine's name (uname -n), as a record's launcher_host holds it.
std::string this_machine();

// What /proc/PID/stat says of process `pid`: its command name, its state letter ('Z': a zombie)
// and when it started (starttime: clock ticks after boot). Nothing when it cannot be read (no
// such process).
struct ProcessStat {
  std::string comm;
  char state = '?';
  long long start_ticks = 0;
};
std::optional<ProcessStat> process_stat(long pid);

// When process `pid` started (process_stat's start_ticks); 0 when it cannot be read.
long long process_start_ticks(long pid);

// `stop --job ID` of an attached job whose launcher still runs on this machine, or of a detached
// job whose launcher is still starting it: SIGTERM to the launcher, which ends the job everywhere
// as on `kill` (exit 143, docs/life-cycle.md), then a bounded wait (--kill_grace +
// --connect_timeout + 30 s) for it to end. Says on `out` what it did. False when there was no such
// launcher (a detached job started, one that ended, one launched on another machine): the sweep of
// the hosts, which follows in any case, is all `stop` does then.
bool stop_attached_launcher(const JobRecord& record, const Options& options, std::FILE* out);

// Whether the record's launcher is a running msrun-ssh on this machine.
bool launcher_runs_here(const JobRecord& record);

// The hosts of a record, connected as far as they could be (the SSH options from the record,
// those on the command line winning: options_from_record).
struct Reached {
  std::unique_ptr<HostTransport> pool;
  std::vector<std::string> unreachable;  // per host: why it could not be connected ("" when it was)
  bool all() const;
};
Reached reach(const JobRecord& record, const Options& options);

// The options `stop --job ID` without --hostfile runs with: the record's SSH options where the
// command line left them unset, and its hosts (then the spares a restart took in) as the cluster
// to stop.
Cluster cluster_of(const JobRecord& record);
Options options_from_record(Options options, const JobRecord& record);

}  // namespace msrun_ssh
