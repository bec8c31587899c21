// The launch plan (SPEC §4): a pure function from the options and the cluster to every process of
// the job — which host runs it, its role, global rank, DEVICE_ID, full environment, log file name,
// working directory and argv. No I/O happens here; name resolution and CPU allocation come in as
// parameters so that tests can give exact answers.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "msrun_ssh/hostfile.h"
#include "msrun_ssh/options.h"

namespace msrun_ssh {

enum class Role { kScheduler, kWorker };

struct Process {
  Role role = Role::kWorker;
  int rank = 0;           // global rank; 0 for the scheduler, as msrun
  int local_index = -1;   // worker index on its host; -1 for the scheduler
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

  std::string label() const;  // "scheduler" or "rank 3"
};

// With --max_restarts, every process learns its attempt (1, 2, ...) from this variable, so that a
// script can resume from its checkpoint.
inline constexpr const char* kAttemptVariable = "MSRUN_SSH_ATTEMPT";

// The token of --worker_log_name that stands for the host's own name (msrun: socket.gethostname()
// on that node), which the launcher learns only from the host at start-up.
inline constexpr std::string_view kHostnameToken = "{hostname}";

// `log_name` with kHostnameToken replaced by `hostname` ('/' made '_'; empty: left as is).
std::string with_hostname(std::string log_name, std::string_view hostname);

struct HostPlan {
  int node_rank = 0;
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
  std::string master_ip;
  int master_port = 0;
  std::vector<HostPlan> hosts;

  const Process* find_rank(int rank) const;  // the worker of that global rank, or nullptr
};

// Turns a name into an IPv4 address; returns "" when it cannot. main() passes getaddrinfo.
using Resolver = std::function<std::string(const std::string&)>;

// Chooses CPU / NUMA binding for the processes of one host once its topology is known; may throw
// InputError naming the host. Null means: leave auto binding pending (dry runs, no topology yet).
using BindingHook = std::function<void(HostPlan&)>;

// Builds the plan. Throws InputError on: --worker_num different from the host file's sum; a
// --master_addr that names no host; --sim_rank_id out of range; --tail_worker_log ranks out of
// range; bad environment names; a bind_core dict that lacks a worker's key.
Plan make_plan(const Options& options, const Cluster& cluster, const Resolver& resolve);

// Applies binding: manual dicts directly (validated CPU lists), auto through `hook`. Fills cpus,
// numa_nodes, MSRUN_CPU_LIST and the argv prefix of every process of `host`.
void apply_binding(HostPlan& host, const Options& options);

// Recomputes argv from the task and the process's binding (taskset / numactl prefix).
std::vector<std::string> process_argv(const Process& process, const Options& options,
                                      const HostPlan& host);

// The interpreter/program rule of SPEC §4: ".py" scripts run under python, "python", "python3" and
// "pytest" are the program, anything else is executed as given.
std::vector<std::string> task_argv(const Options& options, const Host& host);

}  // namespace msrun_ssh
