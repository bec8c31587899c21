// Completing a host's binding from its topology: automatic allocation, manual validation, and the
// environment and argv that follow from the result.
#include <fmt/format.h>

#include <algorithm>

#include "msrun_ssh/error.h"
#include "msrun_ssh/topology.h"

namespace msrun_ssh {
namespace {

// The modes in effect for a host, as apply_binding() decides them: the command line's, else the
// host file's.
BindCore::Mode core_mode(const HostPlan& host, const Options& options) {
  return options.bind_core.mode != BindCore::Mode::kUnset ? options.bind_core.mode
                                                          : host.host.bind_core.mode;
}

BindNuma::Mode numa_mode(const HostPlan& host, const Options& options) {
  return options.bind_numa.mode != BindNuma::Mode::kUnset ? options.bind_numa.mode
                                                          : host.host.bind_numa.mode;
}

void check_cpus(const Process& p, const Topology& topo, const HostPlan& host) {
  for (int cpu : p.cpus)
    if (!std::binary_search(topo.allowed_cpus.begin(), topo.allowed_cpus.end(), cpu))
      throw InputError(fmt::format(
          "bind_core for host {} key {}: CPU {} is not available on this host (allowed: {})",
          host.host.address, p.bind_key, cpu, format_cpu_list(topo.allowed_cpus)));
}

void check_nodes(const Process& p, const Topology& topo, const HostPlan& host) {
  std::vector<int> ids;
  for (const auto& n : topo.numa_nodes) ids.push_back(n.id);
  for (int node : p.numa_nodes)
    if (!std::binary_search(ids.begin(), ids.end(), node))
      throw InputError(fmt::format(
          "bind_numa for host {} key {}: NUMA node {} does not exist on this host (nodes: {})",
          host.host.address, p.bind_key, node, format_cpu_list(ids)));
}

std::vector<int> nodes_of(const Topology& topo, const std::vector<int>& cpus) {
  std::vector<int> nodes;
  for (int cpu : cpus)
    if (int n = topo.numa_node_of(cpu); n >= 0) nodes.push_back(n);
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  return nodes;
}

std::vector<int> auto_nodes(const Topology& topo, const HostPlan& host, const Process& p,
                            const std::vector<int>& would_get) {
  if (!p.cpus.empty()) return nodes_of(topo, p.cpus);
  if (int node = worker_device_node(topo, host, p); node >= 0) return {node};
  return nodes_of(topo, would_get);
}

}  // namespace

void bind_host_from_topology(HostPlan& host, const Topology& topo, const Options& options) {
  BindCore::Mode core = core_mode(host, options);
  BindNuma::Mode numa = numa_mode(host, options);
  std::vector<std::vector<int>> auto_cpus(host.processes.size());
  if (core == BindCore::Mode::kAuto || numa == BindNuma::Mode::kAuto) {
    if (topo.allowed_cpus.empty())
      throw InputError(fmt::format("bind_core for host {}: no CPU is available on this host",
                                   host.host.address));
    auto_cpus = allocate_cpus(topo, host);
  }
  for (size_t i = 0; i < host.processes.size(); ++i) {
    Process& p = host.processes[i];
    if (core == BindCore::Mode::kAuto) p.cpus = auto_cpus[i];
    if (core == BindCore::Mode::kManual) check_cpus(p, topo, host);
    if (numa == BindNuma::Mode::kAuto) p.numa_nodes = auto_nodes(topo, host, p, auto_cpus[i]);
    if (numa == BindNuma::Mode::kManual) check_nodes(p, topo, host);
    p.bind_pending = false;
    if (!p.cpus.empty()) set_env(p.env, "MSRUN_CPU_LIST", msrun_cpu_list_value(p.cpus));
    p.argv = process_argv(p, options, host);
  }
}

}  // namespace msrun_ssh
