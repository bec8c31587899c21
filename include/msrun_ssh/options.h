// Everything the command line says, parsed and validated by the CLI (cli.h) before the host file
// is read; the options room stands below every room that reads them (docs/architecture.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "msrun_ssh/binding.h"
#include "msrun_ssh/hostfile.h"
#include "msrun_ssh/ssh.h"

namespace msrun_ssh {

enum class Command { kRun, kCheck, kStop, kList, kStatus, kLogs, kSync, kStack, kTop };
// Which launcher's environment the processes get: msrun's (scheduler + MS_* variables) or
// torchrun's (no scheduler; RANK, WORLD_SIZE, MASTER_ADDR, ... for init_method env://).
enum class Contract { kMsrun, kTorch };
// Which pairs `check --net` tests (check.h): all pairs, a ring, or all up to 8 hosts and a ring
// above.
enum class NetPairs { kAuto, kAll, kRing };
// How commands reach the hosts (--transport): SSH, or job steps of the Slurm allocation (srun).
enum class TransportKind { kSsh, kSrun };
// What a failure restarts (--restart_policy; runner.h): the whole job, or the failed worker alone
// in place while the others keep running.
enum class RestartPolicy { kJob, kProcess };

// The options, grouped by the concern they configure; each room's interface takes the group it
// reads (ssh_settings.h takes ConnectionOptions), and `Options` holds them all. A field is read
// as before (`options.kill_grace`): the groups are bases of Options.

// How the hosts are reached: the SSH pool's settings (ssh_settings.h) and the transport.
struct ConnectionOptions {
  std::string ssh_config;  // empty: ~/.ssh/config when it exists
  int fanout = 64;
  int jump_fanout = 8;  // of those, through one jump host
  // Given on the command line: else a job record's values decide (stop, stack --job).
  bool fanout_given = false;
  bool jump_fanout_given = false;
  double connect_timeout = 10;
  bool connect_timeout_given = false;  // else a ConnectTimeout in the ssh config decides
  int ssh_debug = -1;  // libssh's log verbosity 0..4 (-1: not given; see set_ssh_log in ssh.h)
  std::optional<HostKeyPolicy> strict_host_key_checking;  // (ssh.h) unset: ssh config, else yes
  TransportKind transport = TransportKind::kSsh;          // --transport ssh|srun
};

// What runs where (plan.h): msrun's options, the contract, the task and its environment.
struct PlanOptions {
  std::string task_script;  // empty only for `check` without a script, and `stop`
  std::vector<std::string> task_args;
  std::optional<int> worker_num;
  int local_worker_num = 8;
  // --local_worker_num was given: a host source's slot counts yield to it (host_source.h).
  bool local_worker_num_given = false;
  std::string master_addr;  // empty: the first host
  int master_port = 8118;
  std::string log_dir = ".";
  bool join = true;
  int cluster_time_out = 600;
  BindCore bind_core;  // kUnset: hosts decide, else off
  BindNuma bind_numa;
  int sim_level = -1;
  int sim_rank_id = -1;
  std::string rank_table_file;
  std::string worker_log_name = "worker";
  std::vector<int> tail_worker_log;  // empty: every rank
  std::optional<Contract> contract;  // unset: the host file's [defaults] contract, else msrun
  EnvList env;                       // --env, resolved against the launcher's environment
  std::string python;
  // --recovery_path: MS_RECOVERY_PATH's base directory under --restart_policy process (relative
  // to each host's workdir); every job gets its own directory in it.
  std::string recovery_path = "msrun-ssh-recovery";
};

// How a running job is watched, ended and restarted (runner.h).
struct LifeCycleOptions {
  double heartbeat = 5;
  double kill_grace = 5;
  double timeout = 0;       // the job's wall-time limit in seconds (0: none)
  double hang_timeout = 0;  // seconds without output from any process that count as a hang (0: off)
  bool hang_kills = true;   // --on_hang=kill (default) or report
  bool log_error_stops = false;  // --on_log_error=stop: a log that cannot be written ends the job
  int max_restarts = 0;          // whole-job restarts after a failure (see runner.h)
  double restart_backoff = 1;    // seconds before the first restart, doubling
  int spares = 0;                // --spares N: the host file's last N hosts are spares (runner.h)
  int host_failures_to_exclude = 2;  // attempts a host may fail before a spare replaces it
  RestartPolicy restart_policy = RestartPolicy::kJob;
  // --agent: one launch agent per host (agent.h) or a channel per command; unset: auto (use_agent)
  std::optional<bool> agent;
  bool watch = true;           // --watch: each host's sampler, the straggler events (watch.h)
  std::string progress_regex;  // --progress_regex: the step in a rank's line ("": the defaults)
};

// What the user sees: the console and the files beside the logs (output.h).
struct OutputOptions {
  bool report_bindings = false;
  bool quiet = false;           // --quiet: no start-up progress (nor status line) on the terminal
  bool status_line = false;     // --status_line: the running job's state on the terminal's last row
  bool output_gather = false;   // --output gather: identical lines of many ranks printed once
  bool timestamps = false;      // --timestamps: console lines carry the launcher's receive time
  bool log_timestamps = false;  // --log_timestamps: so do the lines of the per-rank logs
  std::string events;           // --events FILE: the job's life as JSON Lines ("-": stdout)
};

// Sync (sync.h; docs/sync.md): --sync / `msrun-ssh sync DIR [DEST]`.
struct SyncOptions {
  bool sync = false;
  std::string sync_dir;   // "" : the task script's directory
  std::string sync_dest;  // "" : each host's workdir joined with DIR relative to the launcher's cwd
  std::vector<std::string> sync_excludes;
  double persist = 0;  // sync --persist SECONDS: keep the connections that long (mux.h); 0: not
};

// `msrun-ssh check` (check.h).
struct CheckOptions {
  std::vector<std::string> imports;
  bool net = false;  // check --net: host-to-host bandwidth and RTT
  // check --net=collective: --net, then one all-reduce through a job started as a run starts it
  bool net_collective = false;
  NetPairs net_pairs = NetPairs::kAuto;
  double net_seconds = 1;      // per direction of one pair
  double net_min_ratio = 0.5;  // a host below this fraction of the median fails
  bool perf = false;           // check --perf: each host's CPU, memory, disks and accelerators
  double perf_seconds = 1;     // per measurement
  std::vector<std::string> perf_paths;  // directories timed beside the workdir
  double perf_min_ratio = 0.5;          // a host below this fraction of the median fails
};

// The commands on a job already started (jobs.h, stacks.h; docs/jobs.md).
struct JobOptions {
  std::string job;
  // stop: the attempts whose processes it ends: the job's id, then ID-2 .. ID-N (a job restarted
  // with --max_restarts runs attempt k as ID-k); from the job's record, else 1.
  int attempts = 1;
  std::optional<int> log_rank;  // --rank R: only that rank's log (-1: the scheduler's)
  bool follow = false;          // --follow: until the job has ended
  bool once = false;            // top --once: one screen, then exit
};

struct Options : ConnectionOptions,
                 PlanOptions,
                 LifeCycleOptions,
                 OutputOptions,
                 SyncOptions,
                 CheckOptions,
                 JobOptions {
  Command command = Command::kRun;
  std::string hostfile;
  bool dry_run = false;
  bool json = false;  // check, list, status: JSON instead of the table

  // Set by main, not by the user: the job id and the launcher's working directory.
  std::string job_id;
  std::string launcher_cwd;
  std::vector<std::string> command_line;  // the launcher's argv, for the job record
};

}  // namespace msrun_ssh
