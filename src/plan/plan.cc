#include "msrun_ssh/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>

#include "msrun_ssh/base.h"
#include "msrun_ssh/error.h"

namespace msrun_ssh {
namespace {

bool has_env(const EnvList& env, const std::string& name) {
  return std::any_of(env.begin(), env.end(), [&](const auto& kv) { return kv.first == name; });
}

std::string get_env(const EnvList& env, const std::string& name) {
  for (const auto& [n, v] : env)
    if (n == name) return v;
  return "";
}

std::string replace_all(std::string s, std::string_view from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
  return s;
}

// The most workers of one job: 16384 hosts of 8, twice over; each costs the launcher a few KB of
// plan before anything starts.
constexpr int kMaxJobWorkers = 262144;

int workers_of(const Host& host, const Options& options) {
  return host.local_worker_num.value_or(options.local_worker_num);
}

// The host's IPv4 address, resolved on first use only: names are looked up when a result needs them
// (the master's MS_SCHED_HOST, {ip} in log names), never for the others.
const std::string& resolved_ip(HostPlan& hp, const Resolver& resolve) {
  if (hp.ip.empty()) {
    hp.ip = resolve(hp.host.address);
    if (hp.ip.empty()) hp.ip = hp.host.address;
  }
  return hp.ip;
}

bool loopback_ipv4(std::string_view ip) { return ip.substr(0, 4) == "127."; }

// The master's address as this machine resolves it goes to every host (MS_SCHED_HOST,
// MASTER_ADDR). A loopback one (the launcher's own name, which Debian's /etc/hosts gives as
// 127.0.1.1; "localhost") reaches no other machine: their processes would wait out the
// rendezvous. Refused when another host resolves here to an address that is not loopback (the
// others are looked up only then).
void check_master_reachable(Plan& plan, size_t master, const Resolver& resolve) {
  if (!loopback_ipv4(plan.master_ip)) return;
  for (size_t i = 0; i < plan.hosts.size(); ++i) {
    if (i == master) continue;
    std::string ip = resolve(plan.hosts[i].host.address);
    if (ip.empty() || loopback_ipv4(ip)) continue;  // not resolved here, or this machine too
    throw InputError(fmt::format(
        "the master {} resolves to {} on this machine, a loopback address, which host {} ({}) "
        "cannot reach: every process would wait for the master there until its timeout. Give "
        "the master as an address the other hosts reach (in the host file, or put such a host "
        "first), or make this machine resolve its name to that address (/etc/hosts)",
        in_quotes(plan.hosts[master].host.address), plan.master_ip,
        in_quotes(plan.hosts[i].host.address), ip));
  }
}

// Index of the master host: --master_addr matched as "box:2202" names one of several entries on
// one address (host_key), then by address (the first entry of it), then by resolved IP. `shared`:
// the addresses of several entries (shared_addresses), a spare named so too.
size_t find_master(const Options& options, std::vector<HostPlan>& hosts, const Cluster& cluster,
                   const Resolver& resolve, const std::set<std::string>& shared) {
  if (options.master_addr.empty()) return 0;
  for (size_t i = 0; i < hosts.size(); ++i)
    if (host_key(hosts[i].host) != hosts[i].host.address &&
        host_key(hosts[i].host) == options.master_addr)
      return i;
  for (size_t i = 0; i < hosts.size(); ++i)
    if (hosts[i].host.address == options.master_addr) return i;
  std::string ip = resolve(options.master_addr);
  if (ip.empty()) ip = options.master_addr;
  for (size_t i = 0; i < hosts.size(); ++i)
    if (resolved_ip(hosts[i], resolve) == ip) return i;
  // take_spares puts the hosts --spares keeps aside after those the host file marks.
  const size_t marked =
      cluster.spares.size() -
      std::min<size_t>(cluster.spares.size(), static_cast<size_t>(std::max(0, options.spares)));
  for (size_t i = 0; i < cluster.spares.size(); ++i) {
    // A spare named as "box:2203" when another entry, host or spare, is on its address too.
    Host spare = cluster.spares[i];
    spare.shares_address |= shared.contains(spare.address);
    std::string key = host_key(spare);
    if (key != options.master_addr && spare.address != options.master_addr &&
        resolve(spare.address) != ip)
      continue;
    std::string why = "marked spare";
    if (i >= marked)
      why = fmt::format("one of the last {} hosts, which --spares={} keeps aside", options.spares,
                        options.spares);
    else if (!spare.origin.empty())
      why += " at " + spare.origin;
    throw InputError(fmt::format(
        "--master_addr={}: {} is a spare host ({}), which starts nothing until it replaces a "
        "lost one; the master must be one of the hosts that run the job",
        options.master_addr, key, why));
  }
  throw InputError(
      fmt::format("--master_addr={}: no host of the host file has this address, name or IP ({})",
                  options.master_addr, ip));
}

// The devices a host's environment makes visible: ASCEND_RT_VISIBLE_DEVICES, else
// CUDA_VISIBLE_DEVICES, read as msrun reads the first (int() of each comma-separated item, blanks
// around it allowed, sorted by value); CUDA's stay in the order written, as CUDA numbers them
// (CUDA_VISIBLE_DEVICES=4,0: device 0 is GPU 4). `bad`: the first item that is no such number
// ("" when none).
struct VisibleDevices {
  std::string name, value;
  std::vector<std::string> ids;  // each as a number ("05" is "5"), or as written when `bad`
  std::string bad;
};

VisibleDevices visible_devices(const EnvList& env) {
  VisibleDevices v;
  for (const char* name : {"ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}) {
    v.value = get_env(env, name);
    v.name = name;
    if (!v.value.empty()) break;
  }
  std::vector<std::pair<long long, std::string>> ids;
  for (size_t pos = 0; !v.value.empty() && pos <= v.value.size();) {
    size_t comma = v.value.find(',', pos);
    std::string_view item = trim(std::string_view(v.value).substr(pos, comma - pos));
    std::string_view digits = item.substr(!item.empty() && item[0] == '+' ? 1 : 0);
    int number = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), number);
    bool whole = !digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos &&
                 ec == std::errc() && end == digits.data() + digits.size();
    if (!whole && v.bad.empty()) v.bad = item;
    if (!item.empty()) ids.emplace_back(whole ? number : -1, whole ? "" : std::string(item));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (v.name == "ASCEND_RT_VISIBLE_DEVICES")
    std::stable_sort(ids.begin(), ids.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [number, written] : ids)
    v.ids.push_back(number >= 0 ? std::to_string(number) : written);
  return v;
}

// Physical device ids of a host's `n` workers: the visible devices in order, then (more workers
// than visible devices, or none set) their local indices.
std::vector<std::string> physical_devices(const VisibleDevices& visible, int n) {
  std::vector<std::string> ids = visible.ids;
  for (int i = static_cast<int>(ids.size()); i < n; ++i) ids.push_back(std::to_string(i));
  return ids;
}

// Binding keys its workers by their physical device: as msrun, fewer visible devices than workers
// is refused, and so is an ASCEND_RT_VISIBLE_DEVICES item that is no number.
void check_devices_for_binding(const VisibleDevices& visible, const HostPlan& hp, int n) {
  if (visible.ids.empty()) return;
  // CUDA_VISIBLE_DEVICES may name GPUs by UUID (GPU-8f3a...): such a worker has no device number.
  if (!visible.bad.empty() && visible.name == "ASCEND_RT_VISIBLE_DEVICES")
    throw InputError(fmt::format(
        "host {}: {}={}: {} is no device number, and bind_core / bind_numa key each worker by its "
        "device's (msrun reads the list as whole numbers)",
        in_quotes(hp.host.address), visible.name, in_quotes(visible.value),
        in_quotes(visible.bad)));
  if (static_cast<size_t>(n) > visible.ids.size())
    throw InputError(fmt::format(
        "host {}: {} workers, but {}={} makes {} device{} visible: with bind_core / bind_numa "
        "msrun refuses it (\"Device id exceeds the number of available devices\"); give the host "
        "at most {} workers or more devices",
        in_quotes(hp.host.address), n, visible.name, in_quotes(visible.value), visible.ids.size(),
        visible.ids.size() == 1 ? "" : "s", visible.ids.size()));
}

void check_ranks(const std::vector<int>& ranks, int worker_num, std::string_view option) {
  for (int r : ranks)
    if (r < 0 || r >= worker_num)
      throw InputError(fmt::format("{}: rank {} does not exist (the job has ranks 0..{})", option,
                                   r, worker_num - 1));
}

std::string log_name_for(const Options& options, const HostPlan& hp, const Process& p) {
  if (p.role == Role::kScheduler) return "scheduler.log";
  std::string base = replace_all(options.worker_log_name, "{ip}", hp.ip);
  return fmt::format("{}_{}.log", base, p.rank);
}

// A time limit ends the job with every Python process's stacks: faulthandler prints them on the
// SIGABRT the watchdogs send then (command.h), and only on fatal signals otherwise.
bool wants_stacks(const Options& options) {
  return options.timeout > 0 || (options.hang_timeout > 0 && options.hang_kills);
}

int local_workers(const HostPlan& hp) {
  int n = 0;
  for (const auto& q : hp.processes) n += q.role == Role::kWorker ? 1 : 0;
  return n;
}

// torchrun's environment contract (torch.distributed.run, "Environment Variables"; the variables
// and rules of its local elastic agent), so that init_process_group(init_method="env://") works
// unchanged. There is no elastic agent: rank 0's process hosts the TCPStore itself
// (TORCHELASTIC_USE_AGENT_STORE=False), and the restart count follows --max_restarts.
void set_torch_env(EnvList& env, const Options& options, const Plan& plan, const HostPlan& hp,
                   const Process& p) {
  const int local_world = local_workers(hp);
  std::string world = std::to_string(plan.worker_num);
  std::string node = std::to_string(hp.group_rank);
  set_env(env, "MASTER_ADDR", plan.master_ip);
  set_env(env, "MASTER_PORT", std::to_string(plan.master_port));
  set_env(env, "WORLD_SIZE", world);
  set_env(env, "ROLE_WORLD_SIZE", world);
  set_env(env, "RANK", std::to_string(p.rank));
  set_env(env, "ROLE_RANK", std::to_string(p.rank));
  set_env(env, "LOCAL_RANK", std::to_string(p.local_index));
  set_env(env, "LOCAL_WORLD_SIZE", std::to_string(local_world));
  set_env(env, "GROUP_RANK", node);
  set_env(env, "NODE_RANK", node);
  set_env(env, "ROLE_NAME", "default");
  set_env(env, "TORCHELASTIC_RUN_ID", plan.job_id);
  set_env(env, "TORCHELASTIC_RESTART_COUNT", "0");  // the runner numbers restarts
  set_env(env, "TORCHELASTIC_MAX_RESTARTS", std::to_string(options.max_restarts));
  set_env(env, "TORCHELASTIC_USE_AGENT_STORE", "False");
  set_env(env, "GROUP_WORLD_SIZE", std::to_string(plan.group_world));
  // The rank's error file (torch.distributed.elastic's @record writes it), in the job's directory
  // on its host: stack_site.sh puts that directory in place of kJobDirToken (plan.h).
  set_env(env, "TORCHELASTIC_ERROR_FILE",
          fmt::format("{}/error-rank{}.json", kJobDirToken, p.rank));
}

// torchrun's defaults, which it takes from its own environment where that sets them: as
// Process::env_defaults, so that a value of the host's login environment stays, as one of --env
// or the host file's env does. A stuck NCCL collective fails instead of hanging (torch 1.x reads
// the first name, 2.x the second, which follows the first unless set), and OMP_NUM_THREADS=1 only
// where a host runs more than one process.
EnvList torch_env_defaults(const EnvList& env, const HostPlan& hp) {
  EnvList defaults;
  if (!has_env(env, "NCCL_ASYNC_ERROR_HANDLING"))
    defaults.emplace_back("NCCL_ASYNC_ERROR_HANDLING", "1");
  if (!has_env(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING"))
    defaults.emplace_back("TORCH_NCCL_ASYNC_ERROR_HANDLING", "$NCCL_ASYNC_ERROR_HANDLING");
  if (local_workers(hp) > 1 && !has_env(env, "OMP_NUM_THREADS"))
    defaults.emplace_back("OMP_NUM_THREADS", "1");
  return defaults;
}

// msrun's environment contract.
void set_msrun_env(EnvList& env, const Options& options, const Plan& plan, const HostPlan& hp,
                   const Process& p) {
  bool sim = options.sim_level >= 0;
  if (!sim) {
    set_env(env, "MS_SCHED_HOST", plan.master_ip);
    set_env(env, "MS_SCHED_PORT", std::to_string(plan.master_port));
    set_env(env, "MS_TOPO_TIMEOUT", std::to_string(options.cluster_time_out));
    set_env(env, "MS_ROLE", p.role == Role::kScheduler ? "MS_SCHED" : "MS_WORKER");
  }
  set_env(env, "MS_WORKER_NUM", std::to_string(plan.worker_num));
  set_env(env, "RANK_SIZE", std::to_string(plan.worker_num));
  // As msrun: the scheduler gets no MS_NODE_RANK, MS_NODE_ID or DEVICE_ID.
  if (p.role == Role::kWorker) set_env(env, "MS_NODE_RANK", std::to_string(hp.node_rank));
  set_env(env, "RANK_ID", std::to_string(p.rank));
  if (p.role == Role::kWorker) {
    // As msrun's --sim_rank_id: its one process has no MS_NODE_ID.
    if (options.sim_rank_id < 0) set_env(env, "MS_NODE_ID", std::to_string(p.rank));
    set_env(env, "DEVICE_ID", p.device_id);
  }
  if (!options.rank_table_file.empty()) set_env(env, "RANK_TABLE_FILE", options.rank_table_file);
  if (sim) set_env(env, "MS_SIMULATION_LEVEL", std::to_string(options.sim_level));
}

// The environment of a process: the host's env, --env, the contract's variables (which win),
// then what every contract shares.
EnvList process_env(const Options& options, const Plan& plan, const HostPlan& hp,
                    const Process& p) {
  EnvList env = hp.host.env;
  for (const auto& [n, v] : options.env) set_env(env, n, v);
  if (plan.contract == Contract::kTorch)
    set_torch_env(env, options, plan, hp, p);
  else
    set_msrun_env(env, options, plan, hp, p);
  if (!has_env(env, "PYTHONUNBUFFERED")) set_env(env, "PYTHONUNBUFFERED", "1");
  if (options.max_restarts > 0) set_env(env, kAttemptVariable, "1");  // the runner numbers it
  if (options.restart_policy == RestartPolicy::kProcess) {
    if (!has_env(env, kRecoveryVariable)) set_env(env, kRecoveryVariable, "1");
    if (!has_env(env, kRecoveryPathVariable))
      set_env(
          env, kRecoveryPathVariable,
          absolute_path(fmt::format("{}/{}", options.recovery_path, plan.job_id), hp.host.workdir));
  }
  if (wants_stacks(options) && !has_env(env, "PYTHONFAULTHANDLER"))
    set_env(env, "PYTHONFAULTHANDLER", "1");
  env.shrink_to_fit();  // held for every process of the job: no room to grow
  return env;
}

}  // namespace

std::string Process::label() const {
  return role == Role::kScheduler ? "scheduler" : fmt::format("rank {}", rank);
}

const Process* Plan::find_rank(int rank) const {
  for (const auto& h : hosts)
    for (const auto& p : h.processes)
      if (p.role == Role::kWorker && p.rank == rank) return &p;
  return nullptr;
}

namespace {

// torchrun's macro substitution in one word (string.Template's safe_substitute with local_rank
// alone): $$ is $, $local_rank and ${local_rank} are `value`, any other $ stays as it is.
std::string substitute_local_rank(std::string_view word, const std::string& value) {
  auto id_start = [](char c) { return c == '_' || std::isalpha(static_cast<unsigned char>(c)); };
  auto id_char = [&](char c) { return id_start(c) || std::isdigit(static_cast<unsigned char>(c)); };
  constexpr std::string_view kName = "local_rank";
  std::string out;
  for (size_t i = 0; i < word.size(); ++i) {
    if (word[i] != '$' || i + 1 == word.size()) {
      out += word[i];
      continue;
    }
    if (word[i + 1] == '$') {
      out += '$';
      ++i;
      continue;
    }
    size_t start = i + 1 + (word[i + 1] == '{' ? 1 : 0), end = start;
    if (end < word.size() && id_start(word[end]))
      while (end < word.size() && id_char(word[end])) ++end;
    const bool braced = start > i + 1;
    if (end > start && word.substr(start, end - start) == kName &&
        (!braced || (end < word.size() && word[end] == '}'))) {
      out += value;
      i = end - (braced ? 0 : 1);
      continue;
    }
    out += '$';
  }
  return out;
}

}  // namespace

std::vector<std::string> task_argv(const Options& options, const Host& host) {
  std::vector<std::string> argv;
  const std::string& s = options.task_script;
  if (s.ends_with(".py")) {
    argv.push_back(!options.python.empty() ? options.python
                   : !host.python.empty()  ? host.python
                                           : "python3");
  }
  argv.push_back(s);
  argv.insert(argv.end(), options.task_args.begin(), options.task_args.end());
  return argv;
}

std::vector<std::string> process_argv(const Process& p, const Options& options,
                                      const HostPlan& host) {
  std::vector<std::string> argv;
  if (!p.numa_nodes.empty()) {
    std::vector<int> nodes = p.numa_nodes;
    std::string list = format_cpu_list(nodes);
    argv = {"numactl", "--cpunodebind=" + list, "--membind=" + list};
    if (!p.cpus.empty())
      argv = {"numactl", "--physcpubind=" + format_cpu_list(p.cpus), "--membind=" + list};
  } else if (!p.cpus.empty()) {
    argv = {"taskset", "-c", format_cpu_list(p.cpus)};
  }
  std::vector<std::string> task = task_argv(options, host.host);
  if (p.macro_local_rank >= 0) {
    const std::string value = std::to_string(p.macro_local_rank);
    for (size_t i = task.size() - 1 - options.task_args.size(); i < task.size(); ++i)
      task[i] = substitute_local_rank(task[i], value);
  }
  argv.insert(argv.end(), task.begin(), task.end());
  return argv;
}

namespace {

// Every host of the file, its workers counted (their sum checked against --worker_num).
void plan_hosts(Plan& plan, const Options& options, const Cluster& cluster) {
  int total = 0;
  std::vector<int> per_host;
  for (size_t i = 0; i < cluster.hosts.size(); ++i) {
    HostPlan hp;
    hp.node_rank = static_cast<int>(i);
    hp.host = cluster.hosts[i];
    if (hp.host.workdir.empty()) hp.host.workdir = options.launcher_cwd;
    per_host.push_back(workers_of(hp.host, options));
    total += per_host.back();
    // Nodes as torchrun counts them: the hosts that run workers (torchrun refuses a node of none).
    if (per_host.back() > 0) hp.group_rank = plan.group_world++;
    // Checked as it grows: 16384 hosts of 1024 workers would be planned in gigabytes first.
    if (total > kMaxJobWorkers)
      throw InputError(fmt::format("{}: more than {} workers in the job (at host {}, {})",
                                   cluster.path, kMaxJobWorkers, hp.host.address, hp.host.origin));
    plan.hosts.push_back(std::move(hp));
  }
  if (total == 0) throw InputError(fmt::format("{}: the job has no workers", cluster.path));
  if (options.worker_num && *options.worker_num != total) {
    std::string sum = fmt::format("{}", fmt::join(per_host, "+"));
    throw InputError(fmt::format("--worker_num={} but the host file {} gives {} workers ({})",
                                 *options.worker_num, cluster.path, total, sum));
  }
  plan.worker_num = total;
}

// The processes of every host: the scheduler on the master (msrun's contract, no simulation),
// then the workers, global ranks in host-file order.
void plan_processes(Plan& plan, const Options& options) {
  const bool sim = options.sim_level >= 0;
  int rank = 0;
  for (auto& hp : plan.hosts) {
    if (hp.is_master && !sim && plan.contract == Contract::kMsrun) {
      Process s;
      s.role = Role::kScheduler;
      s.rank = 0;
      s.bind_key = "scheduler";
      hp.processes.push_back(std::move(s));
    }
    int n = workers_of(hp.host, options);
    // The devices the processes will see: the host's env, under --env (as in process_env).
    EnvList visible = hp.host.env;
    for (const auto& [name, value] : options.env) set_env(visible, name, value);
    VisibleDevices devs = visible_devices(visible);
    BindRequest binding = binding_in_effect(options, hp.host);
    bool binds = binding.core.mode == BindCore::Mode::kAuto ||
                 binding.core.mode == BindCore::Mode::kManual ||
                 binding.numa.mode == BindNuma::Mode::kAuto ||
                 binding.numa.mode == BindNuma::Mode::kManual;
    if (binds && !sim) check_devices_for_binding(devs, hp, n);
    std::vector<std::string> devices = physical_devices(devs, n);
    for (int i = 0; i < n; ++i, ++rank) {
      if (options.sim_rank_id >= 0 && rank != options.sim_rank_id) continue;
      Process w;
      w.role = Role::kWorker;
      w.rank = rank;
      w.local_index = i;
      // As msrun: --sim_rank_id's one process is device 0 of its host (its log is still
      // worker_<rank>.log: the log's number is the rank's, whatever runs; docs/remote.md).
      w.device_id = options.sim_rank_id >= 0 ? "0" : std::to_string(i);
      // msrun's simulation binds by the logical id, the visible devices left aside (its
      // _get_physical_device_id): device0 for --sim_rank_id's one process.
      w.bind_key = "device" + (sim ? w.device_id : devices[i]);
      hp.processes.push_back(std::move(w));
    }
  }
}

// Marks each of `entries` whose address is one of `shared` (shared_addresses: of several entries
// of the job, hosts and spares): host_key then names it with its port. A mark once made stays (a
// plan remade at a restart keeps its hosts and spares apart as before).
void mark_shared(std::vector<HostPlan>& entries, const std::set<std::string>& shared) {
  for (HostPlan& h : entries)
    if (shared.contains(h.host.address)) h.host.shares_address = true;
}

}  // namespace

void check_ssh_answers(const Cluster& cluster, const std::vector<SshResolution>& answers) {
  std::map<std::tuple<std::string, std::string, int, std::string>, const Host*> seen;
  size_t i = 0;
  for (const auto* hosts : {&cluster.hosts, &cluster.spares}) {
    for (const Host& h : *hosts) {
      const SshResolution* answer = i < answers.size() ? &answers[i] : nullptr;
      ++i;
      if (answer && answer->refused)
        throw InputError(fmt::format("{}: host {}: ssh refuses it: {}", h.origin,
                                     in_quotes(h.address), answer->error));
      if (!answer || !answer->config) continue;
      const SshHostConfig& c = *answer->config;
      auto [it, added] =
          seen.emplace(std::tuple(to_lower(h.address), c.hostname, c.port, c.proxy_jump), &h);
      if (added) continue;
      const Host& first = *it->second;
      throw InputError(fmt::format(
          "{}: host {} is listed twice: {} has it already as {}, and ssh sends both to {} port "
          "{}{} (a host runs one node's processes; list it once)",
          h.origin, in_quotes(h.address), first.origin, in_quotes(first.address), c.hostname,
          c.port, c.proxy_jump.empty() ? "" : fmt::format(" through {}", c.proxy_jump)));
    }
  }
}

Plan make_plan(const Options& options, const Cluster& cluster, const Resolver& resolve) {
  Plan plan;
  plan.job_id = options.job_id;
  plan.master_port = options.master_port;
  plan.contract = options.contract              ? *options.contract
                  : cluster.contract == "torch" ? Contract::kTorch
                                                : Contract::kMsrun;
  if (plan.contract == Contract::kTorch && options.sim_level >= 0)
    throw InputError("--sim_level is msrun's simulation; it does not go with --contract torch");
  if (plan.contract == Contract::kTorch && options.restart_policy == RestartPolicy::kProcess)
    throw InputError(
        "--restart_policy process is MindSpore's in-place recovery; it does not go with "
        "--contract torch, where a rank started again alone cannot rejoin its process group "
        "(torchrun restarts every worker): use --max_restarts with the default policy");
  plan_hosts(plan, options, cluster);
  const std::set<std::string> shared = shared_addresses(cluster);
  mark_shared(plan.hosts, shared);
  check_ranks(options.tail_worker_log, plan.worker_num, "--tail_worker_log");
  if (options.sim_rank_id >= 0) {
    if (options.sim_level < 0) throw InputError("--sim_rank_id needs --sim_level");
    check_ranks({options.sim_rank_id}, plan.worker_num, "--sim_rank_id");
  }
  size_t master = find_master(options, plan.hosts, cluster, resolve, shared);
  if (plan.contract == Contract::kTorch) {
    // RANK 0's process hosts the rendezvous store (env://), so MASTER_ADDR must be its host:
    // the first host with workers, as torchrun's node rank 0 is.
    size_t first = 0;
    while (workers_of(plan.hosts[first].host, options) == 0) ++first;
    if (!options.master_addr.empty() && master != first)
      throw InputError(fmt::format(
          "--master_addr={}: under --contract torch the master is the host of RANK 0, whose "
          "process serves the rendezvous (MASTER_ADDR): here {}, the first host of {} with "
          "workers; {}, or leave --master_addr out",
          options.master_addr, plan.hosts[first].host.address, cluster.path,
          workers_of(plan.hosts[master].host, options) == 0
              ? fmt::format("{} runs no worker: give it workers", options.master_addr)
              : fmt::format("put {} first in the host file", options.master_addr)));
    master = first;
  }
  plan.hosts[master].is_master = true;
  plan.master_ip = resolved_ip(plan.hosts[master], resolve);
  check_master_reachable(plan, master, resolve);
  plan_processes(plan, options);
  for (const Host& spare : cluster.spares) {
    HostPlan sp;
    sp.node_rank = -1;
    sp.host = spare;
    if (sp.host.workdir.empty()) sp.host.workdir = options.launcher_cwd;
    resolved_ip(sp, resolve);
    plan.spares.push_back(std::move(sp));
  }
  mark_shared(plan.spares, shared);
  const bool log_needs_ip = options.worker_log_name.find("{ip}") != std::string::npos;
  for (auto& hp : plan.hosts) {
    if (log_needs_ip) resolved_ip(hp, resolve);
    for (auto& p : hp.processes) {
      p.env = process_env(options, plan, hp, p);
      if (plan.contract == Contract::kTorch) {
        p.env_defaults = torch_env_defaults(p.env, hp);
        p.macro_local_rank = p.local_index;
      }
      p.log_name = log_name_for(options, hp, p);
      p.workdir = hp.host.workdir;
      p.stack_dumps = true;
    }
    apply_binding(hp, decide_binding(hp, options, nullptr), options);
  }
  return plan;
}

std::string with_hostname(std::string log_name, std::string_view hostname) {
  if (hostname.empty()) return log_name;
  // What a host answers is used as a file name only in host name characters: '/', control
  // characters, blanks, anything else become '_', and no more than a host name's 253 bytes.
  std::string name(hostname.substr(0, 253));
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  return replace_all(std::move(log_name), kHostnameToken, name);
}

}  // namespace msrun_ssh
