// The binding step (plan.h): every process's CPUs and NUMA nodes, from the binding in effect on its
// host and, once it is known, the host's topology.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "msrun_ssh/error.h"
#include "msrun_ssh/plan.h"

namespace msrun_ssh {
namespace {

bool env_set(const EnvList& env, std::string_view name) {
  return std::any_of(env.begin(), env.end(),
                     [&](const auto& kv) { return kv.first == name && !kv.second.empty(); });
}

// What the processes see of the user's environment: a worker's env, else the host's.
const EnvList& host_env(const HostPlan& host) {
  for (const auto& p : host.processes)
    if (p.role == Role::kWorker) return p.env;
  return host.host.env;
}

std::vector<int> sorted_unique(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// What the manual dicts give one process; auto modes leave it pending.
Binding planned_binding(const BindRequest& request, const HostPlan& host, const Process& p) {
  Binding b;
  if (request.core.mode == BindCore::Mode::kManual) {
    std::string what = fmt::format("bind_core for host {}", host.host.address);
    auto it = request.core.ranges.find(p.bind_key);
    if (it != request.core.ranges.end()) {
      if (!it->second.empty())
        b.cpus = parse_cpu_list(fmt::format("{}", fmt::join(it->second, ",")), what);
    } else if (p.role == Role::kWorker)
      throw InputError(fmt::format(
          "{}: no entry \"{}\" for {} (keys are \"scheduler\" and \"device<physical id>\")", what,
          p.bind_key, p.label()));
  }
  if (request.numa.mode == BindNuma::Mode::kManual) {
    auto it = request.numa.nodes.find(p.bind_key);
    if (it != request.numa.nodes.end()) b.numa_nodes = sorted_unique(it->second);
  }
  b.pending =
      request.core.mode == BindCore::Mode::kAuto || request.numa.mode == BindNuma::Mode::kAuto;
  return b;
}

void check_cpus(const Binding& b, const Process& p, const Topology& topo, const HostPlan& host) {
  for (int cpu : b.cpus)
    if (!std::binary_search(topo.allowed_cpus.begin(), topo.allowed_cpus.end(), cpu))
      throw InputError(fmt::format(
          "bind_core for host {} key {}: CPU {} is not available on this host (allowed: {})",
          host.host.address, p.bind_key, cpu, format_cpu_list(topo.allowed_cpus)));
}

void check_nodes(const Binding& b, const Process& p, const Topology& topo, const HostPlan& host) {
  std::vector<int> ids;
  for (const auto& n : topo.numa_nodes) ids.push_back(n.id);
  for (int node : b.numa_nodes)
    if (!std::binary_search(ids.begin(), ids.end(), node))
      throw InputError(fmt::format(
          "bind_numa for host {} key {}: NUMA node {} does not exist on this host (nodes: {})",
          host.host.address, p.bind_key, node, format_cpu_list(ids)));
}

std::vector<int> nodes_of(const Topology& topo, const std::vector<int>& cpus) {
  std::vector<int> nodes;
  for (int cpu : cpus)
    if (int n = topo.numa_node_of(cpu); n >= 0) nodes.push_back(n);
  return sorted_unique(std::move(nodes));
}

// `allowed_nodes`: the nodes of the host's allowed CPUs (nodes_of), ascending.
std::vector<int> auto_nodes(const Topology& topo, const HostProcesses& host,
                            const ProcessSlot& slot, const Binding& b,
                            const std::vector<int>& would_get,
                            const std::vector<int>& allowed_nodes) {
  if (!b.cpus.empty()) return nodes_of(topo, b.cpus);
  // The device's node, unless none of its CPUs may be used here (a container's cpuset on the other
  // socket: numactl --cpunodebind would fail at every start); then where its CPUs would be.
  int node = device_numa_node(topo, host, slot);
  if (node >= 0 && std::ranges::binary_search(allowed_nodes, node)) return {node};
  return nodes_of(topo, would_get);
}

// Completes the planned bindings from the host's topology (rules: decide_binding in plan.h).
void complete_from_topology(std::vector<Binding>& bindings, const BindRequest& request,
                            const HostPlan& host, const Topology& topo) {
  BindCore::Mode core = request.core.mode;
  BindNuma::Mode numa = request.numa.mode;
  HostProcesses slots = host_processes(host);
  std::vector<std::vector<int>> auto_cpus(bindings.size());
  if (core == BindCore::Mode::kAuto || numa == BindNuma::Mode::kAuto) {
    if (topo.allowed_cpus.empty())
      throw InputError(fmt::format("bind_core for host {}: no CPU is available on this host",
                                   host.host.address));
    auto_cpus = allocate_cpus(topo, slots);
  }
  const std::vector<int> allowed_nodes =
      numa == BindNuma::Mode::kAuto ? nodes_of(topo, topo.allowed_cpus) : std::vector<int>{};
  for (size_t i = 0; i < bindings.size(); ++i) {
    Binding& b = bindings[i];
    const Process& p = host.processes[i];
    if (core == BindCore::Mode::kAuto) b.cpus = auto_cpus[i];
    if (core == BindCore::Mode::kManual) check_cpus(b, p, topo, host);
    if (numa == BindNuma::Mode::kAuto)
      b.numa_nodes = auto_nodes(topo, slots, slots.processes[i], b, auto_cpus[i], allowed_nodes);
    if (numa == BindNuma::Mode::kManual) check_nodes(b, p, topo, host);
    b.pending = false;
  }
}

}  // namespace

BindRequest binding_in_effect(const Options& options, const Host& host) {
  return binding_in_effect(BindRequest{options.bind_core, options.bind_numa},
                           BindRequest{host.bind_core, host.bind_numa});
}

HostProcesses host_processes(const HostPlan& host) {
  HostProcesses out;
  for (const auto& p : host.processes) {
    bool scheduler = p.role == Role::kScheduler;
    out.processes.push_back({scheduler, scheduler ? -1 : device_number(p.bind_key).value_or(-1)});
  }
  const EnvList& env = host_env(host);
  out.device_kind = env_set(env, "ASCEND_RT_VISIBLE_DEVICES") ? "npu"
                    : env_set(env, "CUDA_VISIBLE_DEVICES")    ? "gpu"
                                                              : "";
  return out;
}

std::vector<Binding> decide_binding(const HostPlan& host, const Options& options,
                                    const Topology* topology) {
  BindRequest request = binding_in_effect(options, host.host);
  std::vector<Binding> bindings;
  bindings.reserve(host.processes.size());
  for (const auto& p : host.processes) bindings.push_back(planned_binding(request, host, p));
  if (topology) complete_from_topology(bindings, request, host, *topology);
  return bindings;
}

void apply_binding(HostPlan& host, const std::vector<Binding>& bindings, const Options& options) {
  for (size_t i = 0; i < host.processes.size(); ++i) {
    Process& p = host.processes[i];
    p.cpus = bindings.at(i).cpus;
    p.numa_nodes = bindings.at(i).numa_nodes;
    p.bind_pending = bindings.at(i).pending;
    if (!p.cpus.empty()) set_env(p.env, "MSRUN_CPU_LIST", msrun_cpu_list_value(p.cpus));
    p.argv = process_argv(p, options, host);
  }
}

}  // namespace msrun_ssh
