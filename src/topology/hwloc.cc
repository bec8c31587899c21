// Topologies through the hwloc API: this machine, or an XML export made on another host.
#include <fmt/format.h>
#include <hwloc.h>
#include <sched.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <string>

#include "msrun_ssh/binding.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/topology.h"

namespace msrun_ssh {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using HwlocTopology = std::unique_ptr<hwloc_topology, TopologyDeleter>;

struct BitmapDeleter {
  void operator()(hwloc_bitmap_s* b) const { hwloc_bitmap_free(b); }
};
using Bitmap = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

std::vector<int> to_list(hwloc_const_bitmap_t set) {
  std::vector<int> out;
  if (set == nullptr || hwloc_bitmap_weight(set) < 0) return out;  // null or infinite
  for (int i = hwloc_bitmap_first(set); i != -1; i = hwloc_bitmap_next(set, i)) out.push_back(i);
  return out;
}

// A topology object set up the same way for every backend: every object, even those the host's
// cgroup disallows (allowed_cpus says what may be used, and I/O objects keep their true NUMA
// locality), and the PCI devices hwloc deems important (accelerators are: class 0x03, 0x12).
HwlocTopology new_topology(std::string_view what) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0)
    throw InputError(fmt::format("{}: hwloc_topology_init failed", what));
  HwlocTopology topo(raw);
  hwloc_topology_set_flags(raw, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  hwloc_topology_set_type_filter(raw, HWLOC_OBJ_OS_DEVICE, HWLOC_TYPE_FILTER_KEEP_NONE);
  return topo;
}

int os_index(hwloc_obj_t obj) {
  return obj == nullptr || obj->os_index == HWLOC_UNKNOWN_INDEX ? -1
                                                                : static_cast<int>(obj->os_index);
}

std::vector<Core> read_cores(hwloc_topology_t topo) {
  std::vector<Core> cores;
  for (hwloc_obj_t pu = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PU, nullptr); pu != nullptr;
       pu = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PU, pu)) {
    hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_CORE, pu);
    // A PU without a Core (some VMs, synthetic descriptions) is a core of its own.
    if (core != nullptr && hwloc_bitmap_first(core->cpuset) != static_cast<int>(pu->os_index))
      continue;  // not the core's first PU: the core was added with it
    Core c;
    c.package = os_index(hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, pu));
    c.pus = core != nullptr ? to_list(core->cpuset) : std::vector<int>{os_index(pu)};
    cores.push_back(std::move(c));
  }
  return cores;
}

std::vector<NumaNode> read_nodes(hwloc_topology_t topo) {
  std::vector<NumaNode> nodes;
  for (hwloc_obj_t n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, nullptr); n != nullptr;
       n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n))
    nodes.push_back(NumaNode{os_index(n), to_list(n->cpuset)});
  return nodes;
}

// The NUMA node an I/O object is attached to: the one node with CPUs in the nodeset of its first
// non-I/O ancestor (memory-only nodes such as HBM may share that nodeset), else -1.
int io_numa_node(hwloc_topology_t topo, hwloc_obj_t obj, const std::vector<NumaNode>& nodes) {
  hwloc_obj_t parent = hwloc_get_non_io_ancestor_obj(topo, obj);
  int found = -1;
  for (int id : to_list(parent != nullptr ? parent->nodeset : nullptr)) {
    auto it =
        std::find_if(nodes.begin(), nodes.end(), [&](const NumaNode& n) { return n.id == id; });
    if (it == nodes.end() || it->pus.empty()) continue;
    if (found >= 0) return -1;
    found = id;
  }
  return found;
}

std::vector<Device> read_devices(hwloc_topology_t topo, const std::vector<NumaNode>& nodes) {
  std::vector<Device> devices;
  for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, nullptr); o != nullptr;
       o = hwloc_get_next_pcidev(topo, o)) {
    const auto& pci = o->attr->pcidev;
    std::string kind = device_kind(pci.vendor_id, pci.class_id);
    if (kind.empty()) continue;
    Device d;
    d.kind = kind;
    d.pci_bus_id = fmt::format("{:04x}:{:02x}:{:02x}.{:x}", pci.domain, pci.bus, pci.dev, pci.func);
    d.vendor = pci.vendor_id;
    d.pci_class = pci.class_id;
    d.numa_node = io_numa_node(topo, o, nodes);
    devices.push_back(std::move(d));
  }
  return devices;
}

Topology read_topology(hwloc_topology_t topo, std::string source) {
  Topology t;
  t.source = std::move(source);
  t.cores = read_cores(topo);
  t.numa_nodes = read_nodes(topo);
  t.devices = read_devices(topo, t.numa_nodes);
  t.allowed_cpus = to_list(hwloc_topology_get_allowed_cpuset(topo));
  return t;
}

std::vector<int> process_affinity() {
  constexpr int kMaxCpus = 8192;
  cpu_set_t* set = CPU_ALLOC(kMaxCpus);
  size_t size = CPU_ALLOC_SIZE(kMaxCpus);
  std::vector<int> cpus;
  if (set != nullptr && sched_getaffinity(0, size, set) == 0)
    for (int i = 0; i < kMaxCpus; ++i)
      if (CPU_ISSET_S(i, size, set)) cpus.push_back(i);
  CPU_FREE(set);
  return cpus;
}

void require_allowed(const Topology& t, std::string_view what, const std::vector<int>& asked) {
  if (!t.allowed_cpus.empty()) return;
  throw InputError(fmt::format("{}: none of the allowed CPUs ({}) is a PU of the topology", what,
                               asked.empty() ? "none" : format_cpu_list(asked)));
}

}  // namespace

Topology load_local_topology() {
  HwlocTopology topo = new_topology("local topology");
  // PCI devices come from sysfs through hwloc's Linux backend; its libpciaccess backend would find
  // the same ones but leaks what it allocates (LeakSanitizer reports it).
  hwloc_topology_set_components(topo.get(), HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
  if (hwloc_topology_load(topo.get()) != 0)
    throw InputError("local topology: hwloc_topology_load failed");
  Topology t = read_topology(topo.get(), "hwloc");
  std::vector<int> affinity = process_affinity();
  if (!affinity.empty()) {
    std::vector<int> both;
    std::set_intersection(t.allowed_cpus.begin(), t.allowed_cpus.end(), affinity.begin(),
                          affinity.end(), std::back_inserter(both));
    t.allowed_cpus = std::move(both);
  }
  normalize_topology(t);
  require_allowed(t, "local topology", affinity);
  return t;
}

Topology topology_from_hwloc_xml(std::string_view xml, const std::vector<int>& allowed_cpus) {
  HwlocTopology topo = new_topology("hwloc XML");
  std::string buffer(xml);  // hwloc wants the length including the terminating NUL
  if (buffer.empty() ||
      hwloc_topology_set_xmlbuffer(topo.get(), buffer.c_str(),
                                   static_cast<int>(buffer.size() + 1)) != 0 ||
      hwloc_topology_load(topo.get()) != 0)
    throw InputError(fmt::format("hwloc XML: hwloc cannot load it ({} bytes, starting \"{}\")",
                                 buffer.size(), buffer.substr(0, buffer.find('\n')).substr(0, 40)));
  Topology t = read_topology(topo.get(), "hwloc-xml");
  if (!allowed_cpus.empty()) t.allowed_cpus = allowed_cpus;
  normalize_topology(t);
  require_allowed(t, "hwloc XML", allowed_cpus);
  return t;
}

}  // namespace msrun_ssh
