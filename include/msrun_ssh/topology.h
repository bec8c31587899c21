// The topology room: what a host's CPUs, NUMA nodes and accelerators look like, and how CPUs are
// shared out among the processes of one host (docs/binding.md).
//
// A Topology is read in one of three ways, all giving the same model:
//   - load_local_topology(): this machine, through the hwloc API;
//   - topology_from_hwloc_xml(): an hwloc XML export (`lstopo --of xml`) made on another host;
//   - parse_probe_output(): what topology_probe_command() printed on a remote host: hwloc XML
//     where hwloc's tools are installed, a compact sysfs dump otherwise.
// A remote host needs nothing but a POSIX sh (hwloc's lstopo is optional). Allocation happens on
// the launcher, as a pure function of the Topology and plain values describing the processes
// (HostProcesses), so tests and --dry_run see the exact CPU lists every process gets. This room
// knows nothing of plans: the plan's binding step (decide_binding in plan.h) describes a host's
// processes to it and turns the CPU lists into bindings.
//
// Errors: every function throws InputError (error.h) whose message names what was wrong. Messages
// about probe output or XML start with "topology probe: " / "hwloc XML: " and do not know the
// host; callers that do should prefix it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace msrun_ssh {

// One physical core. `pus` are OS CPU ids in ascending order: pus[0] stands for the whole core,
// the others are its hyper-threads. Lists every PU of the core, allowed or not.
struct Core {
  int package = -1;    // physical package (socket) id; -1 when unknown
  int numa_node = -1;  // NUMA node holding pus[0]; -1 when unknown
  std::vector<int> pus;
  bool operator==(const Core&) const = default;
};

struct NumaNode {
  int id = 0;            // OS index, as numactl takes it
  std::vector<int> pus;  // ascending; empty for memory-only nodes (HBM, CXL)
  bool operator==(const NumaNode&) const = default;
};

// An accelerator: an NPU (Huawei vendor 0x19e5, PCI class 0x12xx "processing accelerator") or a
// GPU (NVIDIA 0x10de or AMD 0x1002, class 0x03xx "display / 3D controller"). Other PCI functions
// are not kept.
struct Device {
  std::string kind;        // "npu" or "gpu"
  std::string pci_bus_id;  // "0000:c1:00.0", lowercase hex, fixed width
  int vendor = 0;          // PCI vendor id
  int pci_class = 0;       // PCI class and subclass, e.g. 0x1200, 0x0302
  int numa_node = -1;      // NUMA node it is attached to; -1 when unknown
  bool operator==(const Device&) const = default;
};

struct Topology {
  // The CPUs processes started on the host may use: its cgroup cpuset and affinity mask (a
  // subset of the PUs below). Ascending, never empty for a loaded topology.
  std::vector<int> allowed_cpus;
  std::vector<Core> cores;           // ascending by pus[0]
  std::vector<NumaNode> numa_nodes;  // ascending by id; at least one
  std::vector<Device> devices;       // ascending by PCI bus id
  std::string source;                // "hwloc", "hwloc-xml" or "sysfs", for messages
  // The NPUs' PCI bus ids (as `devices` spells them) by logic id, as npu-smi tells them: element N
  // is the NPU that DEVICE_ID N and ASCEND_RT_VISIBLE_DEVICES's N name. Empty when npu-smi did not
  // say. Ascend servers do not number their NPUs in PCI order (an Atlas 800T A2: NPU 0 at C1, 1
  // at 01, 2 at C2, 3 at 02, ...), and msrun maps them through npu-smi too.
  std::vector<std::string> npu_logic_order;

  // The NUMA node of `cpu` (the lowest-numbered node listing it), or -1.
  int numa_node_of(int cpu) const;
  // The devices of one kind: index N of this list is physical device N. NPUs in npu_logic_order
  // when it names every NPU of `devices` once, else (and GPUs) in PCI bus order.
  std::vector<Device> devices_of_kind(std::string_view kind) const;
  bool operator==(const Topology&) const = default;
};

// ---- loading ------------------------------------------------------------------------------------

// This machine, through hwloc (PCI devices included). allowed_cpus is hwloc's allowed cpuset (the
// cgroup) intersected with this process's sched_getaffinity mask. Throws InputError when hwloc
// fails.
Topology load_local_topology();

// An hwloc XML export (hwloc 1.x or 2.x format). Objects the exporting host disallowed are kept
// (export with `lstopo --disallowed` to keep the NUMA locality of every device right inside a
// cgroup). allowed_cpus, when not empty, is the host's allowed set as the probe saw it; it is
// intersected with the PUs of the XML. When empty, the XML's own allowed cpuset is used. Throws
// InputError on XML hwloc cannot load, or when no allowed CPU is left.
Topology topology_from_hwloc_xml(std::string_view xml, const std::vector<int>& allowed_cpus);

// One command, run on a remote host through its login shell (`$SHELL -c COMMAND`), that prints
// the host's topology. It is `sh -c '...'` around src/remote/topology.sh made one line, a POSIX sh
// script with no single quote, backslash, `!` or newline inside, so sh, bash, dash, zsh, ksh, fish
// and csh all pass it to sh unchanged, and it may be quoted once more by the caller. It needs sh,
// sed, cat and grep; it exits 0. Output:
//   allowed: <cpu list>     Cpus_allowed_list of the probe itself (the cgroup and affinity of
//                           what the login shell starts), else the online CPUs
// then, when lstopo-no-graphics, hwloc-ls or lstopo runs,
//   format: hwloc-xml
//   <its `--disallowed --of xml -` output: every object, PCI devices included>
// else
//   format: sysfs
//   /sys/devices/system/cpu/online:<cpu list>        and more lines of `grep -H`: PATH:VALUE,
//   /sys/devices/system/cpu/cpuN/topology/core_id:K  physical_package_id likewise, per CPU
//   /sys/devices/system/node/nodeN/cpulist:<list>    per NUMA node (none without that directory)
//   /sys/bus/pci/devices/BUS/vendor:0x19e5           vendor, class and numa_node of each PCI
//                                                    function of vendor 0x19e5, 0x10de, 0x1002
// Anything printed before the "allowed:" line (a chatty .bashrc) is ignored by the parser.
std::string topology_probe_command();

// The NPUs' PCI bus ids by logic id (Topology::npu_logic_order) from the probe's "npu-info: "
// lines (npu-smi info: each NPU's row, then a row per chip with its Bus-Id) and "npu-map: " lines
// (npu-smi info -m: NPU ID, Chip ID, Chip Logic ID per chip, "-" for a chip without one, the MCU).
// Bus ids lowercase; empty when a logic id from 0 up is missing or names a chip without a Bus-Id.
std::vector<std::string> npu_logic_order_of(std::string_view probe_output);

// What runs once per host before binding, in one round trip: the paths of taskset and numactl as
// `command -v` prints them (one line each, only those that exist), then topology_probe_command().
std::string binding_probe_command();

// Whether the output of binding_probe_command() shows `tool` ("taskset" or "numactl") installed;
// only the lines before the probe's "allowed:" line count.
bool probe_found_tool(std::string_view output, std::string_view tool);

// Parses the whole output of topology_probe_command(), dispatching on its "format:" line.
// Throws InputError naming the problem (no "allowed:" line, unknown format, bad XML, bad line).
Topology parse_probe_output(std::string_view text);

// Parses probe output in the sysfs format (the "allowed:" and "format:" lines may be present).
// Without "node" lines the host has one NUMA node 0 holding every online CPU. A device whose
// numa_node is -1 on a single-node host is placed on that node.
Topology topology_from_sysfs_probe(std::string_view text);

// Which accelerator a PCI function is: "npu", "gpu", or "" for anything else (see Device).
std::string device_kind(int vendor, int pci_class);

// Puts a topology built by hand, or by a loader, in canonical form: sorts every list, fills
// Core::numa_node from the nodes' PU lists, adds node 0 holding every PU when there is no node,
// puts devices of unknown locality on the only node of a single-node host, and intersects
// allowed_cpus with the PUs the cores list.
void normalize_topology(Topology& topo);

// ---- allocation ---------------------------------------------------------------------------------

// One process of a host, as allocation sees it.
struct ProcessSlot {
  bool scheduler = false;  // the scheduler; else a worker
  int device = -1;  // the physical device N a worker drives (its bind key device<N>); -1: none
  bool operator==(const ProcessSlot&) const = default;
};

// The processes of one host, as allocation sees them.
struct HostProcesses {
  std::vector<ProcessSlot> processes;  // in the host's order (workers by rank)
  // The kind of device the workers drive: "npu", "gpu", or "" (NPUs when the host has any, else
  // GPUs). The plan asks for "npu" when the processes' environment sets ASCEND_RT_VISIBLE_DEVICES,
  // "gpu" when it sets CUDA_VISIBLE_DEVICES.
  std::string device_kind;
};

// Automatic CPU allocation (--bind_core=True or a host's `bind_core = true`) for the processes of
// one host. Deterministic: the same topology and processes always give the same lists.
//
// Units. Only allowed CPUs are handed out, a core at a time: a process gets whole cores (the
// core's allowed PUs: its first PU and its hyper-threads), and no core is split between processes
// (but see "more workers than allowed cores" below). Cores are taken in NUMA order (node by node,
// each node's cores by first PU), so consecutive cores stay on as few NUMA nodes as possible.
//
// Workers, when the host shows devices. The devices of one kind are used (HostProcesses::
// device_kind). The worker with device N drives physical device N: for NPUs the one npu-smi gives
// logic id N (Topology::npu_logic_order: Ascend servers do not number them in bus order), else,
// and for GPUs, the N-th device of that kind in PCI bus order (nvidia-smi's order). A worker whose
// N is not a device with a known NUMA node has no affinity. Then (msrun's affinity pools):
//   1. NUMA nodes are "active" (a worker's device is on them), "foreign" (devices are on them but
//      no worker of this job drives one: another job's CPUs, never used) or "free" (no device).
//      When active and free nodes together have fewer cores than there are workers, foreign
//      nodes count as free.
//   2. q = (cores on active and free nodes) / workers, rounded down: every worker's target.
//   3. Each active node's cores are split into equal consecutive slices among the workers whose
//      device is on it (in device order; the first ones get one more when it does not divide),
//      each slice capped at q.
//   4. Workers below q (in rank order; workers without affinity start at zero) are topped up
//      from the free nodes, then from cores left on active nodes.
//   5. The scheduler takes the last core left over (in NUMA order, never a foreign one). The
//      other cores left over are shared out node by node among the workers holding cores of that
//      node (else among all workers): each core to the one with the fewest cores (lowest rank on
//      ties), then given as consecutive runs in rank order.
// Without device information (no devices, or no worker maps to one), msrun's equal split: the
// allowed cores are cut into consecutive shares of q = cores / workers in rank order; the
// scheduler takes the last core left over, the other cores left over make the first shares one
// core larger.
//
// The scheduler (on the master host) thus gets one core, one nobody else needs. When the split
// leaves nothing over, it takes the highest-numbered CPU any worker holds, away from that worker
// (with Linux numbering on SMT machines a hyper-thread, so the worker keeps all its cores); when
// that is the worker's only CPU, the two share it. (msrun leaves its scheduler unbound; binding it
// keeps it off the workers' CPUs at the price of at most one hyper-thread.) A scheduler alone on
// its host gets every allowed CPU.
//
// More workers than allowed cores: the PUs become the units, in thread order (the first PU of
// every core, node by node, then the second PUs, ...): worker i gets the i-th, the scheduler the
// last PU left over; other PUs left over go to the worker holding their core's first PU. More
// workers than allowed PUs: the only case with overlap besides the scheduler's: worker i gets the
// (i mod PUs)-th PU of that order, the scheduler the (workers mod PUs)-th. Device affinity plays
// no part in these two cases.
//
// Returns one CPU list (ascending) per process of host.processes, in the same order; empty lists
// for a host with no allowed CPU. `topo` must be in canonical form, as the loaders return it
// (normalize_topology() for one built by hand).
std::vector<std::vector<int>> allocate_cpus(const Topology& topo, const HostProcesses& host);

// The NUMA node of the device `process` drives (see above: device N of the host's device kind),
// or -1: the scheduler, no device, a device the host does not have, a device of unknown locality.
int device_numa_node(const Topology& topo, const HostProcesses& host, const ProcessSlot& process);

}  // namespace msrun_ssh
