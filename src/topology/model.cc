// The Topology model's invariants (normalize_topology) and small shared pieces.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "msrun_ssh/topology.h"

namespace msrun_ssh {
namespace {

constexpr int kHuawei = 0x19e5;
constexpr int kNvidia = 0x10de;
constexpr int kAmd = 0x1002;

void sort_unique(std::vector<int>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

// Every PU any core lists.
std::vector<int> all_pus(const Topology& topo) {
  std::vector<int> pus;
  for (const auto& c : topo.cores) pus.insert(pus.end(), c.pus.begin(), c.pus.end());
  sort_unique(pus);
  return pus;
}

std::vector<int> intersect(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

}  // namespace

int Topology::numa_node_of(int cpu) const {
  for (const auto& n : numa_nodes)
    if (std::binary_search(n.pus.begin(), n.pus.end(), cpu)) return n.id;
  return -1;
}

std::vector<Device> Topology::devices_of_kind(std::string_view kind) const {
  std::vector<Device> out;
  for (const auto& d : devices)
    if (d.kind == kind) out.push_back(d);
  if (kind != "npu" || npu_logic_order.size() != out.size()) return out;
  std::vector<Device> by_logic;
  for (const auto& bus : npu_logic_order) {
    auto it =
        std::find_if(out.begin(), out.end(), [&](const Device& d) { return d.pci_bus_id == bus; });
    if (it == out.end()) return out;  // npu-smi and the topology disagree: PCI order
    by_logic.push_back(*it);
  }
  return by_logic;
}

std::string device_kind(int vendor, int pci_class) {
  int base = pci_class >> 8;
  if (vendor == kHuawei && base == 0x12) return "npu";
  if ((vendor == kNvidia || vendor == kAmd) && base == 0x03) return "gpu";
  return "";
}

void normalize_topology(Topology& topo) {
  for (auto& c : topo.cores) sort_unique(c.pus);
  std::erase_if(topo.cores, [](const Core& c) { return c.pus.empty(); });
  std::sort(topo.cores.begin(), topo.cores.end(),
            [](const Core& a, const Core& b) { return a.pus[0] < b.pus[0]; });
  std::vector<int> pus = all_pus(topo);
  if (topo.numa_nodes.empty()) topo.numa_nodes.push_back(NumaNode{0, pus});
  for (auto& n : topo.numa_nodes) sort_unique(n.pus);
  std::sort(topo.numa_nodes.begin(), topo.numa_nodes.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
  for (auto& c : topo.cores) c.numa_node = topo.numa_node_of(c.pus[0]);
  std::stable_sort(topo.devices.begin(), topo.devices.end(),
                   [](const Device& a, const Device& b) { return a.pci_bus_id < b.pci_bus_id; });
  // On a single-node host every device is local to that node; sysfs says -1 there.
  if (topo.numa_nodes.size() == 1)
    for (auto& d : topo.devices)
      if (d.numa_node < 0) d.numa_node = topo.numa_nodes[0].id;
  sort_unique(topo.allowed_cpus);
  topo.allowed_cpus = intersect(topo.allowed_cpus, pus);
}

}  // namespace msrun_ssh
