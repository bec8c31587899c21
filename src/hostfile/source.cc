#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <set>
#include <sstream>

#include "msrun_ssh/error.h"
#include "msrun_ssh/host_source.h"

namespace msrun_ssh {
namespace {

constexpr unsigned long kMaxSlots = 1024;         // as a host file's local_worker_num
constexpr unsigned long kMaxSourceHosts = 16384;  // as a host file

// "NAME=value" for messages; NAME="value" when the value is empty or holds a blank.
std::string shown(std::string_view name, std::string_view value) {
  bool plain = !value.empty() && std::none_of(value.begin(), value.end(), [](char c) {
    return std::isspace(static_cast<unsigned char>(c));
  });
  return plain ? fmt::format("{}={}", name, value) : fmt::format("{}=\"{}\"", name, value);
}

// `f()`, its InputError's message prefixed with "WHERE: ".
template <typename F>
auto located(const std::string& where, F&& f) {
  try {
    return f();
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", where, e.what()));
  }
}

// A whole unsigned decimal number in lo..hi, or nullopt.
std::optional<unsigned long> whole_number(std::string_view s, unsigned long lo, unsigned long hi) {
  unsigned long v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi)
    return std::nullopt;
  return v;
}

// One item of a compressed count list: "2(x3)" -> {2, 3}, "1" -> {1, 1}.
std::pair<int, size_t> count_item(std::string_view item) {
  std::string_view count = item, times = "1";
  if (size_t open = item.find("(x"); open != item.npos && item.ends_with(')')) {
    count = item.substr(0, open);
    times = item.substr(open + 2, item.size() - open - 3);
  }
  auto n = whole_number(count, 0, kMaxSlots);
  auto m = whole_number(times, 1, kMaxSourceHosts);
  if (!n || !m)
    throw InputError(fmt::format("\"{}\" is not a count N or N(xM) with N 0..{} and M 1..{}", item,
                                 kMaxSlots, kMaxSourceHosts));
  return {static_cast<int>(*n), *m};
}

// Appends `name` to `names` (whose names `seen` holds). Refuses a name that is no host name, one
// listed before, and more than kMaxSourceHosts names; the message has no location.
void add_new_host(std::vector<std::string>& names, std::set<std::string>& seen, std::string name) {
  if (!valid_host_name(name)) throw InputError(fmt::format("\"{}\" is not a host name", name));
  if (std::string why = not_a_host(name); !why.empty())
    throw InputError(fmt::format("\"{}\" {}", name, why));
  if (!seen.insert(name).second) throw InputError(fmt::format("host \"{}\" is listed twice", name));
  if (names.size() == kMaxSourceHosts)
    throw InputError(fmt::format("more than {} hosts", kMaxSourceHosts));
  names.push_back(std::move(name));
}

// The value of `variable`, which the host source `source` needs.
const char* required(const GetEnv& getenv, const char* variable, const char* source,
                     const char* manager) {
  const char* value = getenv(variable);
  if (!value)
    throw InputError(
        fmt::format("{} is not set: the host source {} reads the hosts of the {} job it runs in",
                    variable, source, manager));
  return value;
}

Allocation pbs_allocation(const GetEnv& getenv) {
  std::string path = required(getenv, "PBS_NODEFILE", "pbs", "PBS/Torque");
  std::string why;
  // One line per slot: 16384 hosts of 1024 slots with names of 63 bytes fit.
  std::optional<std::string> text = read_whole_file(path, size_t{1} << 30, why);
  if (!text)
    throw InputError(fmt::format("{}: cannot read the file: {}", shown("PBS_NODEFILE", path), why));
  return parse_pbs_nodefile(*text, path);
}

Allocation lsf_allocation(const GetEnv& getenv) {
  return parse_lsf_hosts(required(getenv, "LSB_MCPU_HOSTS", "lsf", "LSF"));
}

struct Source {
  const char* name;
  const char* variable;  // set inside an allocation: what `auto` looks for
  Allocation (*read)(const GetEnv&);
};

constexpr Source kSources[] = {{"slurm", "SLURM_JOB_NODELIST", slurm_allocation},
                               {"pbs", "PBS_NODEFILE", pbs_allocation},
                               {"lsf", "LSB_MCPU_HOSTS", lsf_allocation}};

// --dry_run's "3 from SLURM_JOB_NODELIST=node[1-3], local_worker_num from ...".
std::string describe(const Cluster& cluster, const Allocation& a,
                     std::optional<int> local_worker_num) {
  std::string out = fmt::format("{} from {}", a.addresses.size(), a.hosts_from);
  if (!is_host_source(cluster.path)) out += fmt::format(" with the [defaults] of {}", cluster.path);
  if (a.slots.empty()) return out;
  // As load_hosts counts: the host file's [defaults], else --local_worker_num, else the allocation.
  if (cluster.defaults.local_worker_num)
    return out + fmt::format(", local_worker_num from the [defaults] of {} (not {}{})",
                             cluster.path,
                             local_worker_num
                                 ? fmt::format("--local_worker_num={}, not ", *local_worker_num)
                                 : "",
                             a.slots_from);
  if (local_worker_num)
    return out + fmt::format(", local_worker_num from --local_worker_num={} (not {})",
                             *local_worker_num, a.slots_from);
  return out + ", local_worker_num from " + a.slots_from;
}

}  // namespace

std::vector<int> expand_slurm_counts(std::string_view value) {
  std::vector<int> counts;
  for (std::string_view item : split_node_sets(value)) {
    auto [count, times] = count_item(item);
    if (counts.size() + times > kMaxSourceHosts)
      throw InputError(fmt::format("more than {} counts", kMaxSourceHosts));
    counts.insert(counts.end(), times, count);
  }
  return counts;
}

std::vector<std::string> expand_node_list(std::string_view value) {
  if (value.empty()) throw InputError("no hosts");
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (std::string_view item : split_node_sets(value)) {
    if (item.empty()) throw InputError("empty item in the node list");
    for (auto& name : expand_nodeset(item)) add_new_host(names, seen, std::move(name));
  }
  return names;
}

Allocation slurm_allocation(const GetEnv& getenv) {
  // A heterogeneous job has one node list per component and none for the whole.
  if (!getenv("SLURM_JOB_NODELIST") && getenv("SLURM_JOB_NODELIST_HET_GROUP_0"))
    throw InputError(
        "a heterogeneous Slurm job (SLURM_JOB_NODELIST_HET_GROUP_0, ...): the host source slurm "
        "reads the hosts of a job of one component; give the hosts in a host file");
  const char* list = required(getenv, "SLURM_JOB_NODELIST", "slurm", "Slurm");
  Allocation a;
  a.hosts_from = shown("SLURM_JOB_NODELIST", list);
  a.addresses = located(a.hosts_from, [&] { return expand_node_list(list); });
  // Without a task count asked for (--ntasks, --ntasks-per-node), Slurm fills
  // SLURM_TASKS_PER_NODE with each node's CPUs: no worker count (the default applies).
  const bool tasks_asked =
      getenv("SLURM_NTASKS") || getenv("SLURM_NPROCS") || getenv("SLURM_NTASKS_PER_NODE");
  const char* tasks = getenv("SLURM_TASKS_PER_NODE");
  if (tasks && tasks_asked) {
    a.slots_from = shown("SLURM_TASKS_PER_NODE", tasks);
    a.slots = located(a.slots_from, [&] { return expand_slurm_counts(tasks); });
    if (a.slots.size() != a.addresses.size()) {
      // Inside a job step (srun --pty bash), the counts are the step's, the node list the job's.
      const char* step = getenv("SLURM_STEP_ID");
      throw InputError(fmt::format(
          "{}: counts for {} hosts, but {} has {}{}", a.slots_from, a.slots.size(), a.hosts_from,
          a.addresses.size(),
          step ? fmt::format(" (inside job step {}, whose counts these are: start msrun-ssh in "
                             "the job's own shell or batch script, not under srun)",
                             shown("SLURM_STEP_ID", step))
               : ""));
    }
  } else if (const char* per_node = getenv("SLURM_NTASKS_PER_NODE")) {
    a.slots_from = shown("SLURM_NTASKS_PER_NODE", per_node);
    auto n = whole_number(per_node, 0, kMaxSlots);
    if (!n) throw InputError(fmt::format("{}: not a count 0..{}", a.slots_from, kMaxSlots));
    a.slots.assign(a.addresses.size(), static_cast<int>(*n));
  }
  return a;
}

Allocation parse_pbs_nodefile(std::string_view text, const std::string& path) {
  Allocation a;
  a.hosts_from = shown("PBS_NODEFILE", path);
  a.slots_from = "the lines per host of PBS_NODEFILE";
  std::set<std::string> seen;
  std::map<std::string, size_t> index;  // host -> its position in a.addresses
  std::istringstream in{std::string(text)};
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    constexpr const char* kSpace = " \t\r\v\f";
    size_t begin = line.find_first_not_of(kSpace);
    if (begin == std::string::npos) continue;
    std::string name = line.substr(begin, line.find_last_not_of(kSpace) + 1 - begin);
    std::string where = fmt::format("{}:{}", path, lineno);
    if (name.find_first_of(kSpace) != std::string::npos)
      throw InputError(fmt::format(
          "{}: \"{}\" is not one host name (PBS_NODEFILE has one per line)", where, name));
    if (auto it = index.find(name); it != index.end()) {
      if (++a.slots[it->second] > static_cast<int>(kMaxSlots))
        throw InputError(
            fmt::format("{}: host \"{}\" has more than {} lines (slots)", where, name, kMaxSlots));
      continue;
    }
    located(where, [&] { add_new_host(a.addresses, seen, name); });
    index.emplace(name, a.slots.size());
    a.slots.push_back(1);
  }
  if (a.addresses.empty())
    throw InputError(fmt::format("{}: no hosts in the file (PBS_NODEFILE)", path));
  return a;
}

Allocation parse_lsf_hosts(std::string_view value) {
  Allocation a;
  a.hosts_from = shown("LSB_MCPU_HOSTS", value);
  a.slots_from = "LSB_MCPU_HOSTS";
  std::set<std::string> seen;
  std::istringstream words{std::string(value)};
  std::string host, count;
  while (words >> host) {
    if (!(words >> count))
      throw InputError(fmt::format("{}: host \"{}\" has no slot count (expected HOST SLOTS pairs)",
                                   a.hosts_from, host));
    located(a.hosts_from, [&] { add_new_host(a.addresses, seen, host); });
    auto n = whole_number(count, 1, kMaxSlots);
    if (!n)
      throw InputError(fmt::format("{}: slot count \"{}\" of host \"{}\" is not a number 1..{}",
                                   a.hosts_from, count, host, kMaxSlots));
    a.slots.push_back(static_cast<int>(*n));
  }
  if (a.addresses.empty()) throw InputError(fmt::format("{}: no hosts", a.hosts_from));
  return a;
}

bool is_host_source(std::string_view name) {
  return name == "auto" || std::any_of(std::begin(kSources), std::end(kSources),
                                       [&](const Source& s) { return name == s.name; });
}

Allocation read_allocation(std::string_view source, const GetEnv& getenv) {
  for (const Source& s : kSources)
    if (source == s.name || (source == "auto" && getenv(s.variable))) return s.read(getenv);
  if (source == "auto")
    throw InputError(
        "the host source auto found no Slurm, PBS or LSF allocation: none of SLURM_JOB_NODELIST, "
        "PBS_NODEFILE, LSB_MCPU_HOSTS is set");
  throw InputError(fmt::format("\"{}\" is not a host source (slurm, pbs, lsf, auto)", source));
}

Cluster load_hosts(const std::string& hostfile, const GetEnv& getenv,
                   std::optional<int> local_worker_num) {
  Cluster cluster;
  if (is_host_source(hostfile)) {
    cluster.path = hostfile;
    cluster.source = hostfile;
  } else {
    cluster = load_hostfile(hostfile);
    if (cluster.source.empty()) return cluster;
  }
  Allocation a = read_allocation(cluster.source, getenv);
  bool use_slots = !a.slots.empty() && !local_worker_num && !cluster.defaults.local_worker_num;
  for (size_t i = 0; i < a.addresses.size(); ++i) {
    Host host = cluster.defaults;
    host.address = a.addresses[i];
    host.origin = a.hosts_from;
    if (use_slots) host.local_worker_num = a.slots[i];
    cluster.hosts.push_back(std::move(host));
  }
  cluster.hosts_from = describe(cluster, a, local_worker_num);
  return cluster;
}

}  // namespace msrun_ssh
