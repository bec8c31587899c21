// CPU / NUMA allocation from a host's topology (src/topology/allocate.cc, src/plan/bind.cc), on
// hwloc XML topologies that stand for real servers (tests/data/topology, see generate.py) and on
// small models built here. Every expectation is an exact CPU list, worked out from the rules in
// topology.h. Linux numbering throughout: core c of an N-core server has PUs c and c+N.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "msrun_ssh/binding.h"
#include "msrun_ssh/plan.h"
#include "msrun_ssh/topology.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

using Argv = std::vector<std::string>;
using Lists = std::vector<std::string>;

using test::cpus;
using test::env_of;

Topology xml(const std::string& name, const std::string& allowed = "") {
  return topology_from_hwloc_xml(test::topology_file(name),
                                 allowed.empty() ? std::vector<int>{} : cpus(allowed));
}

// A model: `nodes` NUMA nodes of `cores` single-threaded cores, numbered in order.
Topology model(int nodes, int cores, std::vector<Device> devices = {}) {
  Topology t;
  for (int n = 0; n < nodes; ++n) {
    NumaNode node{n, {}};
    for (int c = n * cores; c < (n + 1) * cores; ++c) {
      t.cores.push_back(Core{n, n, {c}});
      node.pus.push_back(c);
      t.allowed_cpus.push_back(c);
    }
    t.numa_nodes.push_back(node);
  }
  t.devices = std::move(devices);
  normalize_topology(t);
  return t;
}

Device npu(const std::string& bus, int node) { return Device{"npu", bus, 0x19e5, 0x1200, node}; }
Device gpu(const std::string& bus, int node) { return Device{"gpu", bus, 0x10de, 0x0302, node}; }

Lists lists(const std::vector<std::vector<int>>& v) {
  Lists out;
  for (const auto& l : v) out.push_back(format_cpu_list(l));
  return out;
}

class Allocate : public ::testing::Test {
 protected:
  Allocate() {
    options.task_script = "train.py";
    options.job_id = "20261129-160000-abcdef";
    options.launcher_cwd = "/work";
    options.bind_core = parse_bind_core("True", "test");
  }

  // The plan of host node01 running `workers` workers; the scheduler too when `master` (it is
  // then the first process).
  HostPlan host(int workers, bool master, EnvList env = {}) {
    Cluster c;
    c.path = "h.toml";
    if (!master) c.hosts.push_back(make_host("node00", 1, {}));
    c.hosts.push_back(make_host("node01", workers, std::move(env)));
    return make_plan(options, c, [](const std::string&) { return std::string(); }).hosts.back();
  }

  // The same host as allocation sees it.
  HostProcesses slots(int workers, bool master, EnvList env = {}) {
    return host_processes(host(workers, master, std::move(env)));
  }

  HostPlan bound(const Topology& topo, int workers, bool master, EnvList env = {}) {
    HostPlan h = host(workers, master, std::move(env));
    bind(h, topo);
    return h;
  }

  // The binding step with the host's topology, as at start-up.
  void bind(HostPlan& h, const Topology& topo) const {
    apply_binding(h, decide_binding(h, options, &topo), options);
  }

  std::string error(const Topology& topo, int workers, bool master) {
    return test::error_of([&] { bound(topo, workers, master); });
  }

  static Host make_host(const std::string& address, int workers, EnvList env) {
    Host h = test::host(address, workers, std::move(env));
    h.bind_core = host_bind_core;
    return h;
  }

  Options options;
  static inline BindCore host_bind_core;
};

// What allocation sees of a plan's host: the scheduler, each worker's physical device (from its
// bind key), the device kind the environment names.
TEST_F(Allocate, HostProcessesOfAPlan) {
  // CUDA numbers the visible GPUs in the order written: worker 0 drives GPU 5.
  HostProcesses h = slots(2, true, {{"CUDA_VISIBLE_DEVICES", "5,4"}});
  EXPECT_EQ(h.processes, (std::vector<ProcessSlot>{{true, -1}, {false, 5}, {false, 4}}));
  EXPECT_EQ(h.device_kind, "gpu");
  EXPECT_EQ(slots(1, false, {{"ASCEND_RT_VISIBLE_DEVICES", "3"}}).device_kind, "npu");
  EXPECT_EQ(slots(1, false).device_kind, "");
  EXPECT_EQ(slots(1, false).processes, (std::vector<ProcessSlot>{{false, 0}}));
  // A visible device that is no number gives its worker no device.
  EXPECT_EQ(slots(1, false, {{"CUDA_VISIBLE_DEVICES", "GPU-8f3a"}}).processes,
            (std::vector<ProcessSlot>{{false, -1}}));
}

// ---- (a) NPU server: 2 sockets x 2 NUMA nodes x 24 cores x 2 threads, 2 NPUs per node -----------

TEST_F(Allocate, NpuServerEightWorkersAndScheduler) {
  Topology t = xml("npu_2s4n_96c192t.xml");
  EXPECT_EQ(lists(allocate_cpus(t, slots(8, true))),
            (Lists{"191", "0-11,96-107", "12-23,108-119", "24-35,120-131", "36-47,132-143",
                   "48-59,144-155", "60-71,156-167", "72-83,168-179", "84-95,180-190"}));
}

TEST_F(Allocate, BindingSetsArgvAndMsrunCpuList) {
  HostPlan h = bound(xml("npu_2s4n_96c192t.xml"), 8, true);
  const Process& sched = h.processes[0];
  EXPECT_EQ(sched.cpus, (std::vector<int>{191}));
  EXPECT_EQ(sched.argv, (Argv{"taskset", "-c", "191", "python3", "train.py"}));
  EXPECT_EQ(*env_of(sched, "MSRUN_CPU_LIST"), "[191]");
  const Process& w1 = h.processes[2];
  EXPECT_EQ(w1.bind_key, "device1");
  EXPECT_EQ(w1.argv, (Argv{"taskset", "-c", "12-23,108-119", "python3", "train.py"}));
  EXPECT_EQ(*env_of(w1, "MSRUN_CPU_LIST"),
            "[12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 108, 109, 110, 111, 112, 113, 114, "
            "115, 116, 117, 118, 119]");
  for (const auto& p : h.processes) {
    EXPECT_FALSE(p.bind_pending) << p.label();
    EXPECT_TRUE(p.numa_nodes.empty()) << p.label();
  }
}

// Devices 4-7 belong to another job: their nodes (2, 3) are left alone.
TEST_F(Allocate, NpuServerIdleDevicesKeepTheirNodes) {
  Topology t = xml("npu_2s4n_96c192t.xml");
  EXPECT_EQ(lists(allocate_cpus(t, slots(4, false, {{"ASCEND_RT_VISIBLE_DEVICES", "0,1,2,3"}}))),
            (Lists{"0-11,96-107", "12-23,108-119", "24-35,120-131", "36-47,132-143"}));
}

TEST_F(Allocate, NpuServerOneDevicePerNodeGetsTheWholeNode) {
  Topology t = xml("npu_2s4n_96c192t.xml");
  EXPECT_EQ(lists(allocate_cpus(t, slots(4, true, {{"ASCEND_RT_VISIBLE_DEVICES", "6,4,2,0"}}))),
            (Lists{"191", "0-23,96-119", "24-47,120-143", "48-71,144-167", "72-95,168-190"}));
}

// Workers 8 and 9 have no device: q = 96/10 = 9 cores each, slices are capped at 9, the two take
// what the slices left on nodes 0-2, and node 3's rest goes to its own workers.
TEST_F(Allocate, MoreWorkersThanDevices) {
  Topology t = xml("npu_2s4n_96c192t.xml");
  EXPECT_EQ(lists(allocate_cpus(t, slots(10, false))),
            (Lists{"0-8,96-104", "9-17,105-113", "24-32,120-128", "33-41,129-137", "48-56,144-152",
                   "57-65,153-161", "72-80,90-92,168-176,186-188", "81-89,93-95,177-185,189-191",
                   "18-23,42-44,114-119,138-140", "45-47,66-71,141-143,162-167"}));
}

// ---- (b) a container: cgroup cpuset 4-11,52-59 on a 2-node, 8-NPU server ------------------------

TEST_F(Allocate, ContainerSplitsItsCpuset) {
  Topology t = xml("npu_2s2n_48c96t_container.xml");
  EXPECT_EQ(lists(allocate_cpus(t, slots(2, true, {{"ASCEND_RT_VISIBLE_DEVICES", "0,1"}}))),
            (Lists{"59", "4-7,52-55", "8-11,56-58"}));
}

// Its NPUs sit on node 1, which the cgroup does not allow: node 0's CPUs are all there is.
TEST_F(Allocate, ContainerWhoseDevicesSitOnADisallowedNode) {
  Topology t = xml("npu_2s2n_48c96t_container.xml");
  EXPECT_EQ(lists(allocate_cpus(t, slots(2, false, {{"ASCEND_RT_VISIBLE_DEVICES", "4,5"}}))),
            (Lists{"4-7,52-55", "8-11,56-59"}));
}

// An Atlas 800T A2 numbers its NPUs out of PCI order (npu-smi: NPU 0 at C1, 1 at 01, 2 at C2, 3
// at 02, 4 at 81, 5 at 41, 6 at 82, 7 at 42): DEVICE_ID 0 drives the NPU at C1, on node 3. The
// workers were bound by PCI order, 6 of 8 on another node than their NPU's.
TEST_F(Allocate, NpusAreTakenInNpuSmisLogicOrder) {
  const char* buses[] = {"C1", "01", "C2", "02", "81", "41", "82", "42"};
  std::string npu;
  for (int i = 0; i < 8; ++i) {
    npu += fmt::format("npu-info: | {}     910B2               | OK            | 93.6  40  |\n", i);
    npu += fmt::format("npu-info: | 0                         | 0000:{}:00.0  | 0     0   |\n",
                       buses[i]);
    npu += "npu-info: +===========================+===============+===========+\n";
  }
  npu += "npu-map:         NPU ID      Chip ID     Chip Logic ID     Chip Name\n";
  for (int i = 0; i < 8; ++i)
    npu += fmt::format(
        "npu-map:         {}           0           {}                 Ascend 910B2\n"
        "npu-map:         {}           1           -                 Mcu\n",
        i, i, i);
  Topology t = parse_probe_output(npu + "allowed: 0-191\nformat: hwloc-xml\n" +
                                  test::topology_file("npu_2s4n_96c192t.xml"));
  ASSERT_EQ(t.npu_logic_order.size(), 8u);
  EXPECT_EQ(t.npu_logic_order[0], "0000:c1:00.0");
  EXPECT_EQ(t.npu_logic_order[1], "0000:01:00.0");
  auto lists_of = allocate_cpus(t, slots(8, false));
  ASSERT_EQ(lists_of.size(), 8u);
  Topology pci_order = xml("npu_2s4n_96c192t.xml");
  for (int i = 0; i < 8; ++i) {
    int home = -1;
    for (const auto& d : pci_order.devices)
      if (d.pci_bus_id == t.npu_logic_order[static_cast<size_t>(i)]) home = d.numa_node;
    ASSERT_GE(home, 0);
    for (int cpu : lists_of[static_cast<size_t>(i)])
      EXPECT_EQ(t.numa_node_of(cpu), home) << "worker " << i << " CPU " << cpu;
  }
  EXPECT_EQ(t.numa_node_of(lists_of[0].front()), 3);  // C1's node
  // npu-smi's map missing a logic id, or naming a bus the topology lacks: PCI order.
  EXPECT_TRUE(npu_logic_order_of("npu-map: 0 0 1 x\n").empty());
  Topology odd = parse_probe_output(npu.substr(0, npu.find("npu-map")) +
                                    "npu-map: 0 0 0 x\nallowed: 0-191\nformat: hwloc-xml\n" +
                                    test::topology_file("npu_2s4n_96c192t.xml"));
  EXPECT_EQ(odd.npu_logic_order, (std::vector<std::string>{"0000:c1:00.0"}));
  EXPECT_EQ(odd.devices_of_kind("npu"), pci_order.devices_of_kind("npu"));
}

// An Atlas A3 shows two chips per NPU, each with its Phy-ID and Bus-Id; the logic ids count chips.
TEST(NpuSmi, TwoChipsPerNpuAreTwoDevices) {
  std::string out =
      "npu-info: | NPU   Name                | Health        | Power(W)    Temp(C)    |\n"
      "npu-info: | Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory     |\n"
      "npu-info: +===========================+===============+============+\n"
      "npu-info: | 0     Ascend910           | OK            | 162.6       34         |\n"
      "npu-info: | 0     0                   | 0000:9D:00.0  | 0           0    / 0   |\n"
      "npu-info: +---------------------------------------------------------+\n"
      "npu-info: | 0     Ascend910           | OK            | -           34         |\n"
      "npu-info: | 1     1                   | 0000:9F:00.0  | 0           0    / 0   |\n"
      "npu-info: +===========================+===============+============+\n"
      "npu-info: | 1     Ascend910           | OK            | 186.3       36         |\n"
      "npu-info: | 0     2                   | 0000:99:00.0  | 0           0    / 0   |\n"
      "npu-info: | NPU     Chip              | Process id    | Process name           |\n"
      "npu-info: | No running processes found in NPU 0                              |\n"
      "npu-map:   NPU ID   Chip ID   Chip Logic ID   Chip Phy-ID   Chip Name\n"
      "npu-map:   0        0         0               0             Ascend910\n"
      "npu-map:   0        1         1               1             Ascend910\n"
      "npu-map:   1        0         2               2             Ascend910\n"
      "allowed: 0-3\n";
  EXPECT_EQ(npu_logic_order_of(out),
            (std::vector<std::string>{"0000:9d:00.0", "0000:9f:00.0", "0000:99:00.0"}));
}

// The probe's allowed line (taskset narrower than the cgroup: first threads only).
TEST_F(Allocate, ContainerNarrowedByTheProbe) {
  Topology t = parse_probe_output("allowed: 4-7\nformat: hwloc-xml\n" +
                                  test::topology_file("npu_2s2n_48c96t_container.xml"));
  EXPECT_EQ(lists(allocate_cpus(t, slots(2, true, {{"ASCEND_RT_VISIBLE_DEVICES", "0,1"}}))),
            (Lists{"7", "4-5", "6"}));
}

// ---- (c) more processes than cores: a 4-core, 8-thread VM ---------------------------------------

TEST_F(Allocate, AsManyWorkersAsCores) {
  EXPECT_EQ(lists(allocate_cpus(xml("vm_1n_4c8t.xml"), slots(4, true))),
            (Lists{"7", "0,4", "1,5", "2,6", "3"}));
}

// Workers 0 and 4 share core 0, 1 and 5 core 1; core 2's second thread is left over and stays
// with worker 2, the last one goes to the scheduler.
TEST_F(Allocate, MoreWorkersThanCoresShareHyperThreads) {
  EXPECT_EQ(lists(allocate_cpus(xml("vm_1n_4c8t.xml"), slots(6, true))),
            (Lists{"7", "0", "1", "2,6", "3", "4", "5"}));
}

TEST_F(Allocate, AsManyWorkersAsThreads) {
  EXPECT_EQ(lists(allocate_cpus(xml("vm_1n_4c8t.xml"), slots(8, false))),
            (Lists{"0", "1", "2", "3", "4", "5", "6", "7"}));
}

TEST_F(Allocate, MoreWorkersThanThreadsOverlap) {
  EXPECT_EQ(lists(allocate_cpus(xml("vm_1n_4c8t.xml"), slots(10, true))),
            (Lists{"2", "0", "1", "2", "3", "4", "5", "6", "7", "0", "1"}));
}

// ---- (d) GPU server: 2 sockets x 32 cores x 2 threads, 4 GPUs per socket ------------------------

TEST_F(Allocate, GpuServerWithCudaVisibleDevices) {
  HostPlan h = host(4, true, {{"CUDA_VISIBLE_DEVICES", "4,5,6,7"}});
  EXPECT_EQ(h.processes[1].bind_key, "device4");
  EXPECT_EQ(lists(allocate_cpus(xml("gpu_2s2n_64c128t.xml"), host_processes(h))),
            (Lists{"127", "32-39,96-103", "40-47,104-111", "48-55,112-119", "56-63,120-126"}));
}

TEST_F(Allocate, GpuServerAllDevices) {
  EXPECT_EQ(lists(allocate_cpus(xml("gpu_2s2n_64c128t.xml"), slots(8, false))),
            (Lists{"0-7,64-71", "8-15,72-79", "16-23,80-87", "24-31,88-95", "32-39,96-103",
                   "40-47,104-111", "48-55,112-119", "56-63,120-127"}));
}

// ---- (e) no devices: msrun's equal contiguous split ---------------------------------------------

TEST_F(Allocate, NoDevicesEqualSplit) {
  EXPECT_EQ(lists(allocate_cpus(xml("cpu_2s2n_32c64t.xml"), slots(4, false))),
            (Lists{"0-7,32-39", "8-15,40-47", "16-23,48-55", "24-31,56-63"}));
}

TEST_F(Allocate, NoDevicesSchedulerTakesTheLastCoreLeftOver) {
  EXPECT_EQ(lists(allocate_cpus(xml("cpu_2s2n_32c64t.xml"), slots(3, true))),
            (Lists{"31,63", "0-10,32-42", "11-20,43-52", "21-30,53-62"}));
}

TEST_F(Allocate, NoDevicesFirstSharesTakeTheRemainder) {
  EXPECT_EQ(lists(allocate_cpus(xml("cpu_2s2n_32c64t.xml"), slots(3, false))),
            (Lists{"0-10,32-42", "11-21,43-53", "22-31,54-63"}));
}

TEST_F(Allocate, DevicesOfUnknownLocalityMeanAnEqualSplit) {
  Topology t = model(2, 4, {npu("0000:01:00.0", -1), npu("0000:02:00.0", -1)});
  EXPECT_EQ(lists(allocate_cpus(t, slots(2, false))), (Lists{"0-3", "4-7"}));
}

// ---- models -------------------------------------------------------------------------------------

// msrun's top-up: devices on nodes 0 and 1 only; nodes 2 and 3 feed both workers.
TEST_F(Allocate, TopsUpFromNodesWithoutDevices) {
  Topology t = model(4, 4, {npu("0000:01:00.0", 0), npu("0000:41:00.0", 1)});
  EXPECT_EQ(lists(allocate_cpus(t, slots(2, false))), (Lists{"0-3,8-11", "4-7,12-15"}));
  // No SMT: the scheduler's CPU is a whole core taken from the last worker.
  EXPECT_EQ(lists(allocate_cpus(t, slots(2, true))), (Lists{"15", "0-3,8-11", "4-7,12-14"}));
}

TEST_F(Allocate, DeviceKindFollowsTheVisibleDevicesVariable) {
  Topology t = model(2, 2, {gpu("0000:01:00.0", 0), npu("0000:81:00.0", 1)});
  // NPUs first: device0 is the NPU on node 1, device1 drives nothing.
  EXPECT_EQ(lists(allocate_cpus(t, slots(2, false))), (Lists{"2-3", "0-1"}));
  EXPECT_EQ(lists(allocate_cpus(t, slots(2, false, {{"CUDA_VISIBLE_DEVICES", "0,1"}}))),
            (Lists{"0-1", "2-3"}));
}

TEST_F(Allocate, SchedulerAloneGetsEveryAllowedCpu) {
  HostPlan h;
  h.host.address = "node01";
  Process s;
  s.role = Role::kScheduler;
  s.bind_key = "scheduler";
  h.processes = {s};
  EXPECT_EQ(lists(allocate_cpus(xml("cpu_2s2n_32c64t.xml", "8-15"), host_processes(h))),
            (Lists{"8-15"}));
}

TEST_F(Allocate, NoAllowedCpu) {
  Topology t = model(1, 2);
  t.allowed_cpus.clear();
  EXPECT_EQ(lists(allocate_cpus(t, slots(2, false))), (Lists{"", ""}));
  EXPECT_EQ(error(t, 2, false), "bind_core for host node01: no CPU is available on this host");
}

TEST_F(Allocate, HostFileBindCore) {
  options.bind_core = BindCore{};  // unset: the host decides
  host_bind_core = parse_bind_core("true", "h.toml");
  HostPlan h = bound(xml("cpu_2s2n_32c64t.xml"), 2, false);
  host_bind_core = BindCore{};
  EXPECT_EQ(h.processes[0].cpus, cpus("0-15,32-47"));
  EXPECT_EQ(h.processes[1].cpus, cpus("16-31,48-63"));
}

// ---- (f) manual dicts ---------------------------------------------------------------------------

TEST_F(Allocate, ManualCpusMustBeAllowed) {
  Topology t = xml("cpu_2s2n_32c64t.xml", "0-47");
  options.bind_core = parse_bind_core(
      R"({"scheduler":["0"],"device0":["1-3"],"device1":["4"],"device2":["5"],"device3":["99"]})",
      "--bind_core");
  EXPECT_EQ(error(t, 4, true),
            "bind_core for host node01 key device3: CPU 99 is not available on this host "
            "(allowed: 0-47)");
  options.bind_core = parse_bind_core(R"({"scheduler":["47-48"],"device0":["1"]})", "--bind_core");
  EXPECT_EQ(error(t, 1, true),
            "bind_core for host node01 key scheduler: CPU 48 is not available on this host "
            "(allowed: 0-47)");
}

TEST_F(Allocate, ManualCpusAreKeptAndExported) {
  options.bind_core = parse_bind_core(R"({"device0":["1-3"],"device1":["40"]})", "--bind_core");
  HostPlan planned = host(2, true);
  ASSERT_EQ(*env_of(planned.processes[1], "MSRUN_CPU_LIST"), "[1, 2, 3]");
  HostPlan h = planned;
  bind(h, xml("cpu_2s2n_32c64t.xml"));
  EXPECT_TRUE(h.processes[0].cpus.empty());  // no "scheduler" key
  EXPECT_EQ(env_of(h.processes[0], "MSRUN_CPU_LIST"), nullptr);
  EXPECT_EQ(h.processes[1].cpus, cpus("1-3"));
  EXPECT_EQ(h.processes[1].argv, (Argv{"taskset", "-c", "1-3", "python3", "train.py"}));
  EXPECT_EQ(*env_of(h.processes[1], "MSRUN_CPU_LIST"), "[1, 2, 3]");
  EXPECT_EQ(h.processes[1].env.size(), planned.processes[1].env.size());  // replaced in place
  EXPECT_EQ(*env_of(h.processes[2], "MSRUN_CPU_LIST"), "[40]");
}

TEST_F(Allocate, ManualNumaNodesMustExist) {
  options.bind_core = BindCore{};
  options.bind_numa = parse_bind_numa(R"({"device0": 1, "device1": [0, 7]})", "--bind_numa");
  EXPECT_EQ(error(xml("cpu_2s2n_32c64t.xml"), 2, false),
            "bind_numa for host node01 key device1: NUMA node 7 does not exist on this host "
            "(nodes: 0-1)");
  options.bind_numa = parse_bind_numa(R"({"device0": 1, "device1": [0, 1]})", "--bind_numa");
  HostPlan h = bound(xml("cpu_2s2n_32c64t.xml"), 2, false);
  EXPECT_EQ(h.processes[1].argv,
            (Argv{"numactl", "--cpunodebind=0-1", "--membind=0-1", "python3", "train.py"}));
}

// ---- (g) bind_numa ------------------------------------------------------------------------------

TEST_F(Allocate, AutoCoreAndNumaUsePhyscpubind) {
  options.bind_numa = parse_bind_numa("True", "--bind_numa");
  HostPlan h = bound(xml("npu_2s4n_96c192t.xml"), 8, true);
  EXPECT_EQ(h.processes[0].numa_nodes, (std::vector<int>{3}));  // CPU 191
  EXPECT_EQ(h.processes[3].numa_nodes, (std::vector<int>{1}));
  EXPECT_EQ(h.processes[3].argv,
            (Argv{"numactl", "--physcpubind=24-35,120-131", "--membind=1", "python3", "train.py"}));
}

TEST_F(Allocate, AutoNumaAloneFollowsTheDevice) {
  options.bind_core = BindCore{};
  options.bind_numa = parse_bind_numa("True", "--bind_numa");
  HostPlan h = bound(xml("npu_2s4n_96c192t.xml"), 8, true);
  const Process& w3 = h.processes[4];
  EXPECT_EQ(w3.bind_key, "device3");
  EXPECT_TRUE(w3.cpus.empty());
  EXPECT_EQ(env_of(w3, "MSRUN_CPU_LIST"), nullptr);
  EXPECT_EQ(w3.argv, (Argv{"numactl", "--cpunodebind=1", "--membind=1", "python3", "train.py"}));
  EXPECT_EQ(h.processes[0].numa_nodes, (std::vector<int>{3}));  // where its CPU would be
}

// A container whose cpuset lies on node 0 while its NPUs sit on node 1: --bind_numa alone bound to
// the device's node, and numactl --cpunodebind=1 failed at every start. Where the worker's CPUs
// would be instead.
TEST_F(Allocate, AutoNumaAloneAvoidsANodeWithoutAllowedCpus) {
  options.bind_core = BindCore{};
  options.bind_numa = parse_bind_numa("True", "--bind_numa");
  HostPlan planned = host(2, false, {{"ASCEND_RT_VISIBLE_DEVICES", "4,5"}});
  HostPlan h = planned;
  bind(h, xml("npu_2s2n_48c96t_container.xml"));
  for (const auto& p : h.processes)
    EXPECT_EQ(p.argv, (Argv{"numactl", "--cpunodebind=0", "--membind=0", "python3", "train.py"}));
}

TEST_F(Allocate, AutoNumaWithoutDevicesFollowsTheSplit) {
  options.bind_core = BindCore{};
  options.bind_numa = parse_bind_numa("True", "--bind_numa");
  HostPlan h = bound(xml("cpu_2s2n_32c64t.xml"), 3, true);
  std::vector<std::vector<int>> nodes;
  for (const auto& p : h.processes) nodes.push_back(p.numa_nodes);
  // Shares 31,63 / 0-10,32-42 / 11-20,43-52 / 21-30,53-62: the second one spans both nodes.
  EXPECT_EQ(nodes, (std::vector<std::vector<int>>{{1}, {0}, {0, 1}, {1}}));
}

TEST_F(Allocate, ManualCoreWithAutoNuma) {
  options.bind_core = parse_bind_core(R"({"device0":["16-17"]})", "--bind_core");
  options.bind_numa = parse_bind_numa("True", "--bind_numa");
  HostPlan h = bound(xml("cpu_2s2n_32c64t.xml"), 1, false);
  EXPECT_EQ(h.processes[0].argv,
            (Argv{"numactl", "--physcpubind=16-17", "--membind=1", "python3", "train.py"}));
}

}  // namespace
}  // namespace msrun_ssh
