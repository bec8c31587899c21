// The launch plan (docs/remote.md): a pure function from the options and the
// cluster to every process of the job — which host runs it, its role, global rank, DEVICE_ID, full
// environment, log file name, working directory, binding and argv. No I/O happens here; name
// resolution and hosts' topologies come in as parameters so that tests can give exact answers.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "msrun_ssh/hostfile.h"
#include "msrun_ssh/options.h"
#include "msrun_ssh/ssh_config.h"
#include "msrun_ssh/topology.h"

namespace msrun_ssh {

enum class Role { kScheduler, kWorker };

struct Process {
  Role role = Role::kWorker;
  int rank = 0;          // global rank; 0 for the scheduler, as msrun
  int local_index = -1;  // worker index on its host; -1 for the scheduler
  // Under the torch contract, a worker's local index: torchrun's macro ${local_rank} (also
  // $local_rank; $$ is $) in the task's words takes it. -1: the words stay as given.
  int macro_local_rank = -1;
  std::string device_id;  // DEVICE_ID value; empty for the scheduler
  std::string bind_key;   // "scheduler" or "device<physical id>"
  EnvList env;            // complete environment the process gets on top of the remote login env
  std::string log_name;   // file name inside --log_dir ("worker_3.log", "scheduler.log"); may
                          // hold {hostname}, known only at start-up (see with_hostname)
  std::string workdir;
  std::vector<std::string> argv;  // what runs, binding prefix (taskset/numactl) included
  std::vector<int> cpus;          // bound CPUs; empty: not bound
  std::vector<int> numa_nodes;    // bound NUMA nodes; empty: not bound
  bool bind_pending = false;      // binding asked for, decided from the host's topology at start
  bool stack_dumps = false;       // started through stack_site.sh: its Python processes dump
                                  // their stacks on SIGUSR2 (stacks.h); make_plan sets it
  // Variables it gets only where its host's environment, the login environment included, has
  // none (src/remote/env_defaults.sh): torchrun's NCCL_ASYNC_ERROR_HANDLING and OMP_NUM_THREADS,
  // which torchrun, started on that host, takes from its own environment when set there. A value
  // "$NAME" is NAME's value at that point. Names and references are identifiers.
  EnvList env_defaults;

  std::string label() const;  // "scheduler" or "rank 3"
};

// With --max_restarts, every process learns its attempt (1, 2, ...) from this variable, so that a
// script can resume from its checkpoint.
inline constexpr const char* kAttemptVariable = "MSRUN_SSH_ATTEMPT";

// With --restart_policy process (MindSpore's recovery contract), every process gets
// MS_ENABLE_RECOVERY=1 and MS_RECOVERY_PATH=<workdir>/<--recovery_path>/<job id> (an absolute
// --recovery_path is taken as is), unless the host file or --env already set them.
// A variable's value that starts with this token and a '/' names a file in the job's directory on
// the process's host (${TMPDIR:-/tmp}/msrun-ssh-stacks-JOB, made by the watchdog):
// src/remote/stack_site.sh puts the directory in its place before the process starts, and unsets
// the variable when there is no such directory. --contract torch's TORCHELASTIC_ERROR_FILE.
inline constexpr const char* kJobDirToken = "@msrun-ssh-job-dir@";
inline constexpr const char* kRecoveryVariable = "MS_ENABLE_RECOVERY";
inline constexpr const char* kRecoveryPathVariable = "MS_RECOVERY_PATH";

// The token of --worker_log_name that stands for the host's own name (msrun: socket.gethostname()
// on that node), which the launcher learns only from the host at start-up.
inline constexpr std::string_view kHostnameToken = "{hostname}";

// `log_name` with kHostnameToken replaced by `hostname` (its first 253 bytes, each not a letter,
// digit, '.', '-' or '_' made '_': never a path, nor a control character; empty: left as is).
std::string with_hostname(std::string log_name, std::string_view hostname);

struct HostPlan {
  int node_rank = 0;
  // torchrun's node rank (GROUP_RANK): its place among the hosts that run workers (-1: none).
  int group_rank = -1;
  Host host;
  std::string ip;  // resolved address (or the address itself when it does not resolve here);
                   // empty when nothing needed it (only the master and {ip} log names do)
  bool is_master = false;
  std::vector<Process> processes;  // scheduler first (on the master), then workers by rank
};

struct Plan {
  std::string job_id;
  Contract contract = Contract::kMsrun;  // decided once: --contract, else the host file's
  int worker_num = 0;
  int group_world = 0;  // the hosts that run workers (torchrun's GROUP_WORLD_SIZE)
  std::string master_ip;
  int master_port = 0;
  std::vector<HostPlan> hosts;
  // The spare hosts (docs/restarts.md): no node rank, no process, their IP resolved (any of
  // them may become the master); in the order a restart takes them.
  std::vector<HostPlan> spares;

  const Process* find_rank(int rank) const;  // the worker of that global rank, or nullptr
};

// Turns a name into an IPv4 address; returns "" when it cannot. main() passes getaddrinfo.
using Resolver = std::function<std::string(const std::string&)>;

// What OpenSSH's answers say is wrong in the host file, before anything connects. Refuses a host
// that ssh -G itself refuses (an unreadable --ssh_config, a user or name ssh will not take: its
// own message); and a host listed twice in ways the host file's own check (load_hosts: the same
// address and port as written) cannot see: the same address but for the case of its letters, or one
// port unset and the other given, when OpenSSH sends both to the same HostName, Port and ProxyJump.
// `answers` is OpenSSH's answer for each of cluster.hosts, then each of cluster.spares
// (resolve_with_openssh); a host without an answer is left to the host file's check. Different
// addresses with the same HostName are not refused (ssh config aliases for one machine, each with
// its own user or key, are a user's choice). Throws InputError naming both entries.
void check_ssh_answers(const Cluster& cluster, const std::vector<SshResolution>& answers);

// Builds the plan, each host's binding decided without its topology (decide_binding); the
// cluster's spares become Plan::spares (node rank -1, IP resolved). Throws
// InputError on: --worker_num different from the host file's sum; a --master_addr that names no
// host; --sim_rank_id out of range; --tail_worker_log ranks out of range; bad environment names; a
// bind_core dict that lacks a worker's key.
Plan make_plan(const Options& options, const Cluster& cluster, const Resolver& resolve);

// ---- spare hosts (docs/restarts.md) -------------------------------------------------------------

// A host that leaves the job at a restart, and the spare that takes its place.
struct Replacement {
  int node_rank = 0;
  std::string host;    // the host that leaves (host_key)
  std::string spare;   // the spare that takes its node rank (host_key)
  std::string reason;  // why the host leaves: "lost: ...", "unreachable: ...", "failed 2 attempts"
  bool operator==(const Replacement&) const = default;
};

struct SpareDecision {
  std::vector<Replacement> replacements;  // in node-rank order
  std::string error;  // not empty: a host must leave and no spare is left; names the host and why
};

// Which hosts of `plan` leave and which spares take their places. Pure. A host leaves when
// `unusable` names it (host_key -> why: lost, unreachable) or when `failures` (host_key -> attempts
// it failed) reached `exclude_after` ("failed 2 attempts"); in node-rank order, each takes the
// first spare of plan.spares not yet taken. Without a spare for one of them, `error` reads
// "no spare host is left to replace node1 (node rank 1, lost: connection reset)".
SpareDecision replace_hosts(const Plan& plan, const std::map<std::string, std::string>& unusable,
                            const std::map<std::string, int>& failures, int exclude_after);

// `plan` with `replacements` made (each spare from plan.spares, which loses it): a spare runs the
// node rank, ranks, DEVICE_IDs and log names of the host it replaces (as many workers, whatever
// its own local_worker_num), with its own address, user, port, env, workdir, python and binding
// request; its binding is decided again as make_plan does (pending for automatic modes, decided
// from its own topology at start-up). The master moves only when the master host is replaced:
// then plan.master_ip, and MS_SCHED_HOST / MASTER_ADDR in every process, are the spare's IP.
// Throws InputError when the spare's entry does not fit the job (a bind_core dict without a key).
Plan apply_replacements(const Plan& plan, const std::vector<Replacement>& replacements,
                        const Options& options);

// ---- binding ------------------------------------------------------------------------------------

// What binding the command line and the host file ask of `host`: binding.h's binding_in_effect.
BindRequest binding_in_effect(const Options& options, const Host& host);

// The binding of one process.
struct Binding {
  std::vector<int> cpus;        // ascending; empty: not bound
  std::vector<int> numa_nodes;  // ascending; empty: not bound
  bool pending = false;         // an auto mode waits for the host's topology
  bool operator==(const Binding&) const = default;
};

// The binding step, the one place binding is decided: one Binding per process of `host`, in order,
// for the modes binding_in_effect() gives. Pure.
//   - Without a topology (planning, --dry_run, check): a manual dict gives the CPUs and NUMA nodes
//     of each process's bind_key (a process without a key is not bound, except that a worker
//     without a bind_core key is an InputError "bind_core for host ADDR: no entry "device2" for
//     rank 2 (...)"); an auto mode leaves the process pending.
//   - With the host's topology (at start-up, once it was probed): bind_core auto gives
//     allocate_cpus()'s CPUs; manual CPUs must be in topo.allowed_cpus, else InputError "bind_core
//     for host ADDR key device3: CPU 99 is not available on this host (allowed: 0-47)". bind_numa
//     auto gives the NUMA nodes of the process's CPUs when it has any; else the node of its
//     worker's device (device_numa_node); else the nodes of the CPUs allocate_cpus() would give
//     it. Manual nodes must exist, else InputError "bind_numa for host ADDR key device3: NUMA node
//     7 does not exist on this host (nodes: 0-3)". An auto mode on a host with no allowed CPU is
//     an InputError. Nothing is pending.
std::vector<Binding> decide_binding(const HostPlan& host, const Options& options,
                                    const Topology* topology);

// Writes `bindings` (decide_binding's, one per process) into the processes of `host`: cpus,
// numa_nodes, bind_pending, MSRUN_CPU_LIST (msrun_cpu_list_value(), replaced in place) for every
// process with CPUs, and argv (process_argv(): it may start with taskset or numactl, which the
// caller checks the host has).
void apply_binding(HostPlan& host, const std::vector<Binding>& bindings, const Options& options);

// The processes of `host` as allocation sees them: the scheduler, each worker's device (the N of
// its bind_key "device<N>"), and the device kind its environment names (ASCEND_RT_VISIBLE_DEVICES:
// "npu", else CUDA_VISIBLE_DEVICES: "gpu", else "").
HostProcesses host_processes(const HostPlan& host);

// Recomputes argv from the task and the process's binding (taskset / numactl prefix).
std::vector<std::string> process_argv(const Process& process, const Options& options,
                                      const HostPlan& host);

// The interpreter/program rule: ".py" scripts run under python, "python", "python3" and "pytest"
// are the program, anything else is executed as given.
std::vector<std::string> task_argv(const Options& options, const Host& host);

// A process's CPU binding as text: "4-7", "4-7 numa 0", "-" (none), or "auto (...)" while pending.
std::string describe_binding(const Process& p);

// One line per process, for --report_bindings:
// "node   0  198.18.1.10      rank 3     DEVICE_ID=1   cpus 4-7".
std::string describe_bindings(const Plan& plan);

}  // namespace msrun_ssh
