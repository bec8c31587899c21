// Reading topologies (src/topology/hwloc.cc, probe.cc, model.cc): hwloc XML exports standing for
// real servers (tests/data/topology, made by generate.py with hwloc's own lstopo), the sysfs probe
// format on a captured and a generated sample, the probe command run for real on this machine,
// and the local hwloc topology.
#include "msrun_ssh/topology.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "msrun_ssh/binding.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/error.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

using test::cpus;
using test::error_of;
using test::topology_file;

std::vector<std::string> bus_ids(const Topology& t) {
  std::vector<std::string> out;
  for (const auto& d : t.devices) out.push_back(d.pci_bus_id);
  return out;
}

std::vector<int> device_nodes(const Topology& t) {
  std::vector<int> out;
  for (const auto& d : t.devices) out.push_back(d.numa_node);
  return out;
}

std::vector<int> affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> out;
  for (int i = 0; i < CPU_SETSIZE; ++i)
    if (CPU_ISSET(i, &set)) out.push_back(i);
  return out;
}

// Runs `command` under /bin/sh with PATH set to `path` (empty: unchanged) and returns stdout; the
// test fails unless it exits 0.
std::string run(const std::string& command, const std::string& path = "") {
  int status = -1;
  std::string out =
      test::shell_output(path.empty() ? command : "PATH=" + path + " " + command, &status);
  EXPECT_EQ(status, 0) << command;
  return out;
}

// The bus ids of the eight NPUs of both 4-node samples, two per node.
const std::vector<std::string> kEightNpuBusIds = {"0000:01:00.0", "0000:02:00.0", "0000:41:00.0",
                                                  "0000:42:00.0", "0000:81:00.0", "0000:82:00.0",
                                                  "0000:c1:00.0", "0000:c2:00.0"};

// ---- hwloc XML ----------------------------------------------------------------------------------

TEST(Topology, XmlNpuServer) {
  Topology t = topology_from_hwloc_xml(topology_file("npu_2s4n_96c192t.xml"), {});
  EXPECT_EQ(t.source, "hwloc-xml");
  EXPECT_EQ(t.allowed_cpus, cpus("0-191"));
  ASSERT_EQ(t.cores.size(), 96u);
  EXPECT_EQ(t.cores[0], (Core{0, 0, {0, 96}}));
  EXPECT_EQ(t.cores[30], (Core{0, 1, {30, 126}}));
  EXPECT_EQ(t.cores[95], (Core{1, 3, {95, 191}}));
  ASSERT_EQ(t.numa_nodes.size(), 4u);
  EXPECT_EQ(t.numa_nodes[1], (NumaNode{1, cpus("24-47,120-143")}));
  EXPECT_EQ(t.numa_nodes[3], (NumaNode{3, cpus("72-95,168-191")}));
  // The NIC on node 0 is not a device.
  EXPECT_EQ(bus_ids(t), kEightNpuBusIds);
  EXPECT_EQ(device_nodes(t), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(t.devices[6], (Device{"npu", "0000:c1:00.0", 0x19e5, 0x1200, 3}));
  EXPECT_EQ(t.devices_of_kind("npu").size(), 8u);
  EXPECT_TRUE(t.devices_of_kind("gpu").empty());
  EXPECT_EQ(t.numa_node_of(120), 1);
  EXPECT_EQ(t.numa_node_of(500), -1);
}

TEST(Topology, XmlAllowedListNarrowsTheXmlSet) {
  Topology t = topology_from_hwloc_xml(topology_file("npu_2s4n_96c192t.xml"), cpus("4-11,300"));
  EXPECT_EQ(t.allowed_cpus, cpus("4-11"));  // 300 is no PU of the host
  EXPECT_EQ(t.cores.size(), 96u);           // the model keeps the whole machine
}

TEST(Topology, XmlContainerKeepsDisallowedObjectsAndTheirDevices) {
  Topology t = topology_from_hwloc_xml(topology_file("npu_2s2n_48c96t_container.xml"), {});
  EXPECT_EQ(t.allowed_cpus, cpus("4-11,52-59"));  // the XML's allowed_cpuset
  EXPECT_EQ(t.cores.size(), 48u);
  EXPECT_EQ(t.numa_nodes.size(), 2u);
  EXPECT_EQ(t.numa_nodes[1].pus, cpus("24-47,72-95"));
  // Node 1 is disallowed, its NPUs still say where they are.
  EXPECT_EQ(device_nodes(t), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
}

TEST(Topology, XmlGpuServer) {
  Topology t = topology_from_hwloc_xml(topology_file("gpu_2s2n_64c128t.xml"), {});
  EXPECT_EQ(t.cores.size(), 64u);
  EXPECT_EQ(t.cores[32], (Core{1, 1, {32, 96}}));
  EXPECT_EQ(t.devices.size(), 8u);
  EXPECT_EQ(t.devices[4], (Device{"gpu", "0000:87:00.0", 0x10de, 0x0302, 1}));
  EXPECT_EQ(device_nodes(t), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
}

TEST(Topology, XmlErrors) {
  EXPECT_EQ(error_of([] {
              topology_from_hwloc_xml(topology_file("vm_1n_4c8t.xml"), {500, 501});
            }),
            "hwloc XML: none of the allowed CPUs (500-501) is a PU of the topology");
  EXPECT_THAT(error_of([] { topology_from_hwloc_xml("<topology>not quite", {}); }),
              StartsWith("hwloc XML: hwloc cannot load it (19 bytes, starting \"<topology>"));
  EXPECT_THAT(error_of([] { topology_from_hwloc_xml("", {}); }),
              StartsWith("hwloc XML: hwloc cannot load it (0 bytes"));
}

// ---- the sysfs probe format ---------------------------------------------------------------------

TEST(Topology, SysfsKunpengSample) {
  Topology t = topology_from_sysfs_probe(topology_file("sysfs_kunpeng_4n_192c_8npu.txt"));
  EXPECT_EQ(t.source, "sysfs");
  EXPECT_EQ(t.allowed_cpus, cpus("0-191"));
  ASSERT_EQ(t.cores.size(), 192u);
  EXPECT_EQ(t.cores[0], (Core{0, 0, {0}}));
  EXPECT_EQ(t.cores[100], (Core{2, 2, {100}}));
  ASSERT_EQ(t.numa_nodes.size(), 4u);
  EXPECT_EQ(t.numa_nodes[3], (NumaNode{3, cpus("144-191")}));
  // Sorted by bus id; the Huawei NIC (class 0x0200) is no device.
  EXPECT_EQ(bus_ids(t), kEightNpuBusIds);
  EXPECT_EQ(device_nodes(t), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(t.devices[0], (Device{"npu", "0000:01:00.0", 0x19e5, 0x1200, 0}));
}

TEST(Topology, SysfsCapturedOnThisVm) {
  Topology t = parse_probe_output(topology_file("sysfs_captured_vm.txt"));
  EXPECT_EQ(t.allowed_cpus, cpus("0-1"));
  EXPECT_EQ(t.cores, (std::vector<Core>{{0, 0, {0}}, {0, 0, {1}}}));
  EXPECT_EQ(t.numa_nodes, (std::vector<NumaNode>{{0, {0, 1}}}));
  EXPECT_TRUE(t.devices.empty());
}

// Two packages of two cores with two threads, numbered as Linux does on such a machine.
TEST(Topology, SysfsHyperThreadsShareTheirPackageAndCoreId) {
  std::string text = "allowed: 0-7\n/sys/devices/system/cpu/online:0-7\n";
  for (int cpu = 0; cpu < 8; ++cpu)
    text += "/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
            "/topology/core_id:" + std::to_string(cpu % 2) + "\n";
  for (int cpu = 0; cpu < 8; ++cpu)
    text += "/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
            "/topology/physical_package_id:" + std::to_string(cpu / 2 % 2) + "\n";
  text +=
      "/sys/devices/system/node/node0/cpulist:0-1,4-5\n"
      "/sys/devices/system/node/node1/cpulist:2-3,6-7\n"
      "/sys/devices/system/node/node2/cpulist:\n";  // a memory-only node
  Topology t = topology_from_sysfs_probe(text);
  EXPECT_EQ(t.cores,
            (std::vector<Core>{{0, 0, {0, 4}}, {0, 0, {1, 5}}, {1, 1, {2, 6}}, {1, 1, {3, 7}}}));
  EXPECT_EQ(t.numa_nodes, (std::vector<NumaNode>{{0, {0, 1, 4, 5}}, {1, {2, 3, 6, 7}}, {2, {}}}));
}

TEST(Topology, SysfsWithoutNodeDirectoryIsOneNode) {
  Topology t = topology_from_sysfs_probe(
      "allowed: 0-3\nformat: sysfs\n"
      "/sys/devices/system/cpu/online:0-1\n"
      "/sys/devices/system/cpu/cpu0/topology/core_id:0\n"
      "/sys/devices/system/cpu/cpu1/topology/core_id:1\n"
      "/sys/bus/pci/devices/0000:3B:00.0/vendor:0x10de\n"
      "/sys/bus/pci/devices/0000:3B:00.0/class:0x030200\n"
      "/sys/bus/pci/devices/0000:3B:00.0/numa_node:-1\n");
  EXPECT_EQ(t.allowed_cpus, cpus("0-1"));  // the allowed set, within the online CPUs
  EXPECT_EQ(t.cores, (std::vector<Core>{{-1, 0, {0}}, {-1, 0, {1}}}));
  EXPECT_EQ(t.numa_nodes, (std::vector<NumaNode>{{0, {0, 1}}}));
  EXPECT_EQ(t.devices, (std::vector<Device>{{"gpu", "0000:3b:00.0", 0x10de, 0x0302, 0}}));
}

TEST(Topology, SysfsOnlineCpusWithoutTopologyAreCoresOfTheirOwn) {
  Topology t = topology_from_sysfs_probe("/sys/devices/system/cpu/online:0-2\n");
  EXPECT_EQ(t.allowed_cpus, cpus("0-2"));  // no "allowed:" line: the online CPUs
  EXPECT_EQ(t.cores.size(), 3u);
}

TEST(Topology, ProbeOutputErrors) {
  EXPECT_EQ(error_of([] { parse_probe_output("Welcome to node07\nformat: sysfs\n"); }),
            "topology probe: no \"allowed:\" line in the output (it starts: \"Welcome to node07 "
            "format: sysfs \")");
  EXPECT_EQ(error_of([] { parse_probe_output("allowed: 0-3\nformat: json\n{}"); }),
            "topology probe: unknown format line \"format: json\" (expected \"format: "
            "hwloc-xml\" or \"format: sysfs\")");
  EXPECT_EQ(error_of([] { parse_probe_output("allowed: \nformat: hwloc-xml\n<x/>"); }),
            "topology probe: the \"allowed:\" line lists no CPU");
  EXPECT_EQ(error_of([] {
              parse_probe_output(
                  "allowed: 0\nformat: sysfs\n/sys/devices/system/cpu/cpu0/topology/core_id:x\n");
            }),
            "topology probe: bad line \"/sys/devices/system/cpu/cpu0/topology/core_id:x\"");
  EXPECT_EQ(
      error_of([] { parse_probe_output("allowed: 0\nformat: sysfs\nbash: grep: not found\n"); }),
      "topology probe: unexpected line \"bash: grep: not found\"");
  EXPECT_EQ(error_of([] { parse_probe_output("allowed: 0-x\nformat: sysfs\n"); }),
            "topology probe: line \"allowed: 0-x\": bad CPU range \"0-x\"");
  EXPECT_EQ(error_of([] {
              parse_probe_output(
                  "allowed: 8\nformat: sysfs\n"
                  "/sys/devices/system/cpu/online:0-3\n");
            }),
            "topology probe: no allowed CPU is online (allowed: 8, online: 0-3)");
}

TEST(Topology, ProbeOutputSkipsLoginNoiseAndReadsXml) {
  Topology t =
      parse_probe_output("Last login: yesterday\nallowed: 4-11,52-59\nformat: hwloc-xml\n" +
                         topology_file("npu_2s2n_48c96t_container.xml"));
  EXPECT_EQ(t.source, "hwloc-xml");
  EXPECT_EQ(t.allowed_cpus, cpus("4-11,52-59"));
  EXPECT_EQ(t.devices.size(), 8u);
}

// ---- the probe command --------------------------------------------------------------------------

TEST(Topology, ProbeCommandIsOneLineAnyShellPassesOn) {
  std::string cmd = topology_probe_command();
  EXPECT_THAT(cmd, StartsWith("sh -c '"));
  EXPECT_EQ(cmd.back(), '\'');
  std::string script = cmd.substr(7, cmd.size() - 8);
  EXPECT_EQ(script.find_first_of("'\\!\n"), std::string::npos) << script;
  EXPECT_THAT(script, HasSubstr("lstopo-no-graphics"));
}

TEST(Topology, ProbeFoundToolReadsOnlyTheLinesBeforeTheProbe) {
  std::string xml_mentions =
      "allowed: 0-3\nformat: hwloc-xml\n<info value=\"/usr/bin/numactl\"/>\n";
  EXPECT_TRUE(probe_found_tool("/usr/bin/taskset\n/usr/bin/numactl\n" + xml_mentions, "taskset"));
  EXPECT_TRUE(probe_found_tool("/usr/bin/taskset\n/usr/bin/numactl\n" + xml_mentions, "numactl"));
  EXPECT_TRUE(probe_found_tool("/bin/taskset\n" + xml_mentions, "taskset"));
  EXPECT_FALSE(probe_found_tool("/bin/taskset\n" + xml_mentions, "numactl"));
  EXPECT_FALSE(probe_found_tool(xml_mentions, "numactl"));
  EXPECT_FALSE(probe_found_tool("/opt/mytaskset\n" + xml_mentions, "taskset"));
  EXPECT_FALSE(probe_found_tool("taskset\n" + xml_mentions, "taskset"));  // a shell function
  EXPECT_FALSE(probe_found_tool("", "taskset"));
}

TEST(Topology, BindingProbeRunsHere) {
  std::string out = run("/bin/sh -c " + shell_quote(binding_probe_command()));
  EXPECT_EQ(probe_found_tool(out, "taskset"), access("/usr/bin/taskset", X_OK) == 0);
  EXPECT_EQ(probe_found_tool(out, "numactl"), access("/usr/bin/numactl", X_OK) == 0);
  EXPECT_EQ(parse_probe_output(out).allowed_cpus, affinity());
}

TEST(Topology, ProbeRunsHereAndMatchesHwloc) {
  Topology probed = parse_probe_output(run("/bin/sh -c " + shell_quote(topology_probe_command())));
  Topology local = load_local_topology();
  EXPECT_EQ(probed.allowed_cpus, affinity());
  EXPECT_EQ(probed.cores, local.cores);
  EXPECT_EQ(probed.numa_nodes, local.numa_nodes);
  EXPECT_EQ(probed.devices, local.devices);
}

TEST(Topology, ProbeReportsTheAffinityOfWhatItStarts) {
  if (access("/usr/bin/taskset", X_OK) != 0 || affinity().size() < 2) GTEST_SKIP();
  int last = affinity().back();
  std::string out = run("/usr/bin/taskset -c " + std::to_string(last) + " /bin/sh -c " +
                        shell_quote(topology_probe_command()));
  Topology probed = parse_probe_output(out);
  EXPECT_EQ(probed.allowed_cpus, std::vector<int>{last});
  EXPECT_EQ(probed.cores, load_local_topology().cores);  // the whole machine still
}

// The sysfs branch, forced by a PATH that holds the tools it needs and no lstopo.
TEST(Topology, ProbeWithoutHwlocToolsReadsSysfs) {
  test::TempDir tmp;
  const std::string& dir = tmp.path();
  for (const char* tool : {"sh", "sed", "cat", "grep"})
    for (const char* bin : {"/bin/", "/usr/bin/"})
      if (std::string path = std::string(bin) + tool; access(path.c_str(), X_OK) == 0) {
        std::filesystem::create_symlink(path, dir + "/" + tool);
        break;
      }
  std::string out = run("/bin/sh -c " + shell_quote(topology_probe_command()), dir);
  // The same PATH has neither taskset nor numactl: the binding probe says so.
  std::string with_tools = run("/bin/sh -c " + shell_quote(binding_probe_command()), dir);
  EXPECT_FALSE(probe_found_tool(with_tools, "taskset")) << with_tools.substr(0, 200);
  EXPECT_FALSE(probe_found_tool(with_tools, "numactl"));
  EXPECT_EQ(parse_probe_output(with_tools).source, "sysfs");
  EXPECT_THAT(out, HasSubstr("\nformat: sysfs\n"));
  Topology probed = parse_probe_output(out);
  Topology local = load_local_topology();
  EXPECT_EQ(probed.source, "sysfs");
  EXPECT_EQ(probed.allowed_cpus, affinity());
  ASSERT_EQ(probed.cores.size(), local.cores.size());
  for (size_t i = 0; i < local.cores.size(); ++i)
    EXPECT_EQ(probed.cores[i].pus, local.cores[i].pus);
  EXPECT_EQ(probed.numa_nodes, local.numa_nodes);
}

// ---- this machine, and the model ----------------------------------------------------------------

TEST(Topology, LocalTopologyHonoursTheAffinityMask) {
  Topology t = load_local_topology();
  EXPECT_EQ(t.source, "hwloc");
  EXPECT_EQ(t.allowed_cpus, affinity());
  EXPECT_FALSE(t.cores.empty());
  EXPECT_FALSE(t.numa_nodes.empty());
  for (int cpu : t.allowed_cpus) EXPECT_GE(t.numa_node_of(cpu), 0) << cpu;
}

TEST(Topology, DeviceKinds) {
  EXPECT_EQ(device_kind(0x19e5, 0x1200), "npu");
  EXPECT_EQ(device_kind(0x19e5, 0x0200), "");  // Huawei NIC
  EXPECT_EQ(device_kind(0x10de, 0x0302), "gpu");
  EXPECT_EQ(device_kind(0x10de, 0x0300), "gpu");
  EXPECT_EQ(device_kind(0x1002, 0x0380), "gpu");
  EXPECT_EQ(device_kind(0x1002, 0x0403), "");  // AMD HDMI audio
  EXPECT_EQ(device_kind(0x10de, 0x0680), "");  // NVSwitch bridge
  EXPECT_EQ(device_kind(0x8086, 0x0300), "");
}

TEST(Topology, NormalizeSortsAndFillsIn) {
  Topology t;
  t.allowed_cpus = {9, 3, 1, 3, 0};
  t.cores = {{0, -1, {3, 1}}, {0, -1, {2, 0}}, {0, -1, {}}};
  t.devices = {{"gpu", "0000:41:00.0", 0x10de, 0x0302, -1},
               {"gpu", "0000:01:00.0", 0x10de, 0x0302, -1}};
  normalize_topology(t);
  EXPECT_EQ(t.allowed_cpus, cpus("0-1,3"));  // 9 is no PU
  EXPECT_EQ(t.cores, (std::vector<Core>{{0, 0, {0, 2}}, {0, 0, {1, 3}}}));
  EXPECT_EQ(t.numa_nodes, (std::vector<NumaNode>{{0, {0, 1, 2, 3}}}));
  EXPECT_EQ(bus_ids(t), (std::vector<std::string>{"0000:01:00.0", "0000:41:00.0"}));
  EXPECT_EQ(device_nodes(t), (std::vector<int>{0, 0}));  // the only node
}

TEST(Topology, MsrunCpuListIsAPythonList) {
  EXPECT_EQ(msrun_cpu_list_value({4, 5, 6, 96}), "[4, 5, 6, 96]");
  EXPECT_EQ(msrun_cpu_list_value({7}), "[7]");
  EXPECT_EQ(msrun_cpu_list_value({}), "[]");
}

}  // namespace
}  // namespace msrun_ssh
