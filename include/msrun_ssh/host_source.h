// Host sources (docs/slurm.md): inside a batch allocation the host list comes from the
// variables the resource manager sets, instead of from a host file.
//
//   --hostfile slurm  SLURM_JOB_NODELIST (node sets, comma-separated); local_worker_num per host
//                     from SLURM_TASKS_PER_NODE ("2(x3),1"), else SLURM_NTASKS_PER_NODE ("2")
//   --hostfile pbs    the file PBS_NODEFILE names: one host per line, repeated once per slot;
//                     hosts in the order of their first line, local_worker_num = their line count
//   --hostfile lsf    LSB_MCPU_HOSTS: "host1 4 host2 4", host and slot count pairs
//   --hostfile auto   the first of slurm, pbs, lsf whose host variable is set
//
// Nothing is picked without being named: without --hostfile a run still fails. A TOML host file
// with the top-level key `source = "slurm"` (or pbs, lsf, auto) and no [[hosts]] takes its hosts
// from that source, and its [defaults] (python, workdir, env, binding, ...) apply to each of them.
// The allocation's slot counts apply to hosts whose [defaults] give no local_worker_num, and only
// when --local_worker_num was not given.
//
// Every error throws InputError naming the variable (or file and line) and the value at fault.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "msrun_ssh/hostfile.h"

namespace msrun_ssh {

// What a source found in the environment, in the allocation's order.
struct Allocation {
  std::vector<std::string> addresses;  // valid host names, each once
  std::vector<int> slots;              // one count per address (0..1024), or empty: none given
  std::string hosts_from;              // "SLURM_JOB_NODELIST=node[1-3]"
  std::string slots_from;              // "SLURM_TASKS_PER_NODE=2(x3)"; empty when no slots
};

// True for the names of the host sources: "slurm", "pbs", "lsf", "auto". A file of that name is
// read as a host file when written with a directory: "./slurm".
bool is_host_source(std::string_view name);

// The hosts of `source` (one of is_host_source's names) from the variables `getenv` reads.
Allocation read_allocation(std::string_view source, const GetEnv& getenv);

// The hosts --hostfile names: a host source, or a host file (load_hostfile) whose `source` key
// names one. `local_worker_num`: the command line's --local_worker_num, when given (then the
// allocation's slot counts are not used). The Cluster's hosts_from says where the hosts came from.
Cluster load_hosts(const std::string& hostfile, const GetEnv& getenv,
                   std::optional<int> local_worker_num);

// ---- the parsers, pure
// ---------------------------------------------------------------------------

// Slurm's compressed per-node counts ("2(x3),1" -> 2 2 2 1), as in SLURM_TASKS_PER_NODE and
// SLURM_JOB_CPUS_PER_NODE. Counts are 0..1024, at most 16384 in all. Throws InputError (message
// without the variable).
std::vector<int> expand_slurm_counts(std::string_view value);

// A Slurm node list: comma-separated node sets ("node[1-3,5],gpu01") expanded in order. Throws
// InputError (message without the variable) on a malformed set, an empty item, a name that is no
// host name, a host listed twice or more than 16384 hosts.
std::vector<std::string> expand_node_list(std::string_view value);

// The hosts of a Slurm allocation: SLURM_JOB_NODELIST, with SLURM_TASKS_PER_NODE (else
// SLURM_NTASKS_PER_NODE) for the slots, whose count of hosts must match the node list.
Allocation slurm_allocation(const GetEnv& getenv);

// A PBS node file's text (`path` for messages): blank lines skipped, a line holding more than one
// word is an error "PATH:LINE: ...".
Allocation parse_pbs_nodefile(std::string_view text, const std::string& path);

// LSB_MCPU_HOSTS's value: whitespace-separated "HOST SLOTS" pairs, SLOTS 1..1024.
Allocation parse_lsf_hosts(std::string_view value);

}  // namespace msrun_ssh
