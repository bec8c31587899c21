// Host sources (src/hostfile/source.cc): Slurm's node list and compressed counts, PBS node files,
// LSF's pairs, `auto`, a TOML file's `source` with its [defaults], and every error with its exact
// message. The environment is a map handed in as GetEnv: the process's own is never touched.
#include "msrun_ssh/host_source.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "test_util.h"

namespace msrun_ssh {
namespace {

using Names = std::vector<std::string>;
using Counts = std::vector<int>;
using Vars = std::map<std::string, std::string>;

// A GetEnv that reads `vars` (kept alive by the caller).
GetEnv env_of(const Vars& vars) {
  return [&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string error_of_source(std::string_view source, const Vars& vars) {
  return test::error_of([&] { read_allocation(source, env_of(vars)); });
}

// ---- Slurm's compressed counts
// -------------------------------------------------------------------

TEST(SlurmCounts, CompressedFormExpands) {
  EXPECT_EQ(expand_slurm_counts("2(x3),1"), (Counts{2, 2, 2, 1}));
  EXPECT_EQ(expand_slurm_counts("4"), (Counts{4}));
  EXPECT_EQ(expand_slurm_counts("1,3(x2),0"), (Counts{1, 3, 3, 0}));
  EXPECT_EQ(expand_slurm_counts("72(x2)"), (Counts{72, 72}));  // SLURM_JOB_CPUS_PER_NODE's form
}

TEST(SlurmCounts, MalformedCountsAreNamed) {
  const std::vector<test::Case> cases = {
      {"", "\"\" is not a count N or N(xM) with N 0..1024 and M 1..16384"},
      {"2,", "\"\" is not a count N or N(xM) with N 0..1024 and M 1..16384"},
      {"2(x)", "\"2(x)\" is not a count N or N(xM) with N 0..1024 and M 1..16384"},
      {"2(x0)", "\"2(x0)\" is not a count N or N(xM) with N 0..1024 and M 1..16384"},
      {"2(3)", "\"2(3)\" is not a count N or N(xM) with N 0..1024 and M 1..16384"},
      {"-1", "\"-1\" is not a count N or N(xM) with N 0..1024 and M 1..16384"},
      {"1025", "\"1025\" is not a count N or N(xM) with N 0..1024 and M 1..16384"},
      {"2(x3", "\"2(x3\" is not a count N or N(xM) with N 0..1024 and M 1..16384"},
      {"1(x16384),1", "more than 16384 counts"},
  };
  for (const auto& c : cases)
    EXPECT_EQ(test::error_of([&] { expand_slurm_counts(c.input); }), c.expected) << c.input;
  EXPECT_EQ(expand_slurm_counts("1(x16384)").size(), 16384u);
}

// ---- Slurm's node list
// ---------------------------------------------------------------------------

TEST(SlurmNodeList, CommaSeparatedNodeSetsInOrder) {
  EXPECT_EQ(expand_node_list("node[1-3]"), (Names{"node1", "node2", "node3"}));
  EXPECT_EQ(expand_node_list("gpu[01-02,05],cpu7"), (Names{"gpu01", "gpu02", "gpu05", "cpu7"}));
  EXPECT_EQ(expand_node_list("b,a"), (Names{"b", "a"}));
}

TEST(SlurmNodeList, ErrorsNameTheFault) {
  const std::vector<test::Case> cases = {
      {"", "no hosts"},
      {"a,,b", "empty item in the node list"},
      {"a,", "empty item in the node list"},
      {"n[3-1]", "bad node set range \"3-1\": reversed"},
      {"n[1-2", "unmatched \"[\" in node set"},
      {"a,b,a", "host \"a\" is listed twice"},
      {"n[1-2],n2", "host \"n2\" is listed twice"},
      {"a b", "\"a b\" is not a host name"},
      // Checked as the host file checks its names.
      {"n1:22",
       "\"n1:22\" has a \":\" but is no IPv6 address: a port goes in its own key (port = "
       "N; in the plain format, in the ssh config), and the plain format's workers in "
       "slots=N"},
      {"-F", "\"-F\" begins with \"-\": no host name does (ssh would read it as an option)"},
      {"n[1-16384],m", "more than 16384 hosts"},
  };
  for (const auto& c : cases)
    EXPECT_EQ(test::error_of([&] { expand_node_list(c.input); }), c.expected) << c.input;
}

// ---- the slurm source
// ----------------------------------------------------------------------------

TEST(SlurmSource, HostsAndTasksPerNode) {
  Vars vars{{"SLURM_JOB_NODELIST", "node[1-3],gpu1"},
            {"SLURM_TASKS_PER_NODE", "2(x3),1"},
            {"SLURM_NTASKS", "7"}};
  Allocation a = read_allocation("slurm", env_of(vars));
  EXPECT_EQ(a.addresses, (Names{"node1", "node2", "node3", "gpu1"}));
  EXPECT_EQ(a.slots, (Counts{2, 2, 2, 1}));
  EXPECT_EQ(a.hosts_from, "SLURM_JOB_NODELIST=node[1-3],gpu1");
  EXPECT_EQ(a.slots_from, "SLURM_TASKS_PER_NODE=2(x3),1");
}

TEST(SlurmSource, NtasksPerNodeWhenTasksPerNodeIsUnset) {
  Vars vars{{"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_NTASKS_PER_NODE", "4"}};
  Allocation a = read_allocation("slurm", env_of(vars));
  EXPECT_EQ(a.slots, (Counts{4, 4}));
  EXPECT_EQ(a.slots_from, "SLURM_NTASKS_PER_NODE=4");
  // SLURM_TASKS_PER_NODE, per node, comes first.
  vars["SLURM_TASKS_PER_NODE"] = "3,1";
  EXPECT_EQ(read_allocation("slurm", env_of(vars)).slots, (Counts{3, 1}));
}

// Without a task count asked for (salloc -N3, sbatch -N3 --gres=gpu:8), Slurm fills
// SLURM_TASKS_PER_NODE with each node's CPUs: that is no worker count, and the default applies
// (192 workers were planned on 3 nodes of 64 CPUs).
TEST(SlurmSource, TasksPerNodeCountsOnlyWhenTasksWereAskedFor) {
  Vars vars{{"SLURM_JOB_NODELIST", "node[1-3]"},
            {"SLURM_TASKS_PER_NODE", "64(x3)"},
            {"SLURM_JOB_CPUS_PER_NODE", "64(x3)"}};
  Allocation a = read_allocation("slurm", env_of(vars));
  EXPECT_TRUE(a.slots.empty());
  for (const char* asked : {"SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE"}) {
    Vars with = vars;
    with[asked] = "64";
    EXPECT_EQ(read_allocation("slurm", env_of(with)).slots, (Counts{64, 64, 64})) << asked;
  }
}

// A heterogeneous job has no SLURM_JOB_NODELIST; inside a job step the counts are the step's.
TEST(SlurmSource, HeterogeneousJobsAndJobStepsAreNamed) {
  EXPECT_EQ(error_of_source("slurm", {{"SLURM_JOB_NODELIST_HET_GROUP_0", "nid00001"},
                                      {"SLURM_JOB_NODELIST_HET_GROUP_1", "nid[00011-00012]"}}),
            "a heterogeneous Slurm job (SLURM_JOB_NODELIST_HET_GROUP_0, ...): the host source "
            "slurm reads the hosts of a job of one component; give the hosts in a host file");
  EXPECT_EQ(error_of_source("slurm", {{"SLURM_JOB_NODELIST", "node[1-3]"},
                                      {"SLURM_TASKS_PER_NODE", "1"},
                                      {"SLURM_NTASKS", "1"},
                                      {"SLURM_STEP_ID", "0"}}),
            "SLURM_TASKS_PER_NODE=1: counts for 1 hosts, but SLURM_JOB_NODELIST=node[1-3] has 3 "
            "(inside job step SLURM_STEP_ID=0, whose counts these are: start msrun-ssh in the "
            "job's own shell or batch script, not under srun)");
}

TEST(SlurmSource, NoCountsLeaveTheSlotsEmpty) {
  Vars vars{{"SLURM_JOB_NODELIST", "n1"}};
  Allocation a = read_allocation("slurm", env_of(vars));
  EXPECT_EQ(a.addresses, Names{"n1"});
  EXPECT_TRUE(a.slots.empty());
  EXPECT_EQ(a.slots_from, "");
}

TEST(SlurmSource, ErrorsNameTheVariableAndValue) {
  EXPECT_EQ(error_of_source("slurm", {}),
            "SLURM_JOB_NODELIST is not set: the host source slurm reads the hosts of the Slurm job "
            "it runs in");
  EXPECT_EQ(error_of_source("slurm", {{"SLURM_JOB_NODELIST", ""}}),
            "SLURM_JOB_NODELIST=\"\": no hosts");
  EXPECT_EQ(error_of_source("slurm", {{"SLURM_JOB_NODELIST", "n[2-1]"}}),
            "SLURM_JOB_NODELIST=n[2-1]: bad node set range \"2-1\": reversed");
  EXPECT_EQ(
      error_of_source("slurm", {{"SLURM_JOB_NODELIST", "n[1-3]"},
                                {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                                {"SLURM_NTASKS", "7"}}),
      "SLURM_TASKS_PER_NODE=2(x3),1: counts for 4 hosts, but SLURM_JOB_NODELIST=n[1-3] has 3");
  EXPECT_EQ(error_of_source("slurm", {{"SLURM_JOB_NODELIST", "n[1-3]"},
                                      {"SLURM_TASKS_PER_NODE", "2(x2"},
                                      {"SLURM_NTASKS", "4"}}),
            "SLURM_TASKS_PER_NODE=2(x2: \"2(x2\" is not a count N or N(xM) with N 0..1024 and M "
            "1..16384");
  EXPECT_EQ(
      error_of_source("slurm", {{"SLURM_JOB_NODELIST", "n1"}, {"SLURM_NTASKS_PER_NODE", "two"}}),
      "SLURM_NTASKS_PER_NODE=two: not a count 0..1024");
  EXPECT_EQ(error_of_source("slurm", {{"SLURM_JOB_NODELIST", "a b"}}),
            "SLURM_JOB_NODELIST=\"a b\": \"a b\" is not a host name");
}

// ---- PBS
// -----------------------------------------------------------------------------------------

TEST(PbsNodefile, RepeatedLinesCountSlotsInOrderOfFirstAppearance) {
  Allocation a = parse_pbs_nodefile("n2\nn1\nn2\nn1\nn3\nn2\n", "/pbs/nodes");
  EXPECT_EQ(a.addresses, (Names{"n2", "n1", "n3"}));
  EXPECT_EQ(a.slots, (Counts{3, 2, 1}));
  EXPECT_EQ(a.hosts_from, "PBS_NODEFILE=/pbs/nodes");
}

TEST(PbsNodefile, BlankLinesAndSurroundingSpaceAreSkipped) {
  Allocation a = parse_pbs_nodefile("\n  n1\r\n\t\nn1  \n", "f");
  EXPECT_EQ(a.addresses, Names{"n1"});
  EXPECT_EQ(a.slots, Counts{2});
}

TEST(PbsNodefile, ErrorsNameTheFileAndLine) {
  const std::vector<test::Case> cases = {
      {"", "f: no hosts in the file (PBS_NODEFILE)"},
      {"\n \n", "f: no hosts in the file (PBS_NODEFILE)"},
      {"n1\nn1 n2\n", "f:2: \"n1 n2\" is not one host name (PBS_NODEFILE has one per line)"},
      {"n1\nn2 4\n", "f:2: \"n2 4\" is not one host name (PBS_NODEFILE has one per line)"},
      {"n1\nn[1]\n", "f:2: \"n[1]\" is not a host name"},
  };
  for (const auto& c : cases)
    EXPECT_EQ(test::error_of([&] { parse_pbs_nodefile(c.input, "f"); }), c.expected) << c.input;
  std::string many;
  for (int i = 0; i < 1025; ++i) many += "n\n";
  EXPECT_EQ(test::error_of([&] { parse_pbs_nodefile(many, "f"); }),
            "f:1025: host \"n\" has more than 1024 lines (slots)");
  EXPECT_EQ(parse_pbs_nodefile(many.substr(2), "f").slots, Counts{1024});
}

class PbsSource : public test::TempDirTest {
 protected:
  std::string path = dir_ + "/nodefile";
};

TEST_F(PbsSource, ReadsTheFileThatPbsNodefileNames) {
  write("nodefile", "a\nb\na\nb\n");
  Vars vars{{"PBS_NODEFILE", path}};
  Allocation a = read_allocation("pbs", env_of(vars));
  EXPECT_EQ(a.addresses, (Names{"a", "b"}));
  EXPECT_EQ(a.slots, (Counts{2, 2}));
}

TEST_F(PbsSource, UnsetUnreadableAndEmpty) {
  EXPECT_EQ(error_of_source("pbs", {}),
            "PBS_NODEFILE is not set: the host source pbs reads the hosts of the PBS/Torque job it "
            "runs in");
  EXPECT_EQ(error_of_source("pbs", {{"PBS_NODEFILE", path}}),
            "PBS_NODEFILE=" + path + ": cannot read the file: No such file or directory");
  write("nodefile", "");
  EXPECT_EQ(error_of_source("pbs", {{"PBS_NODEFILE", path}}),
            path + ": no hosts in the file (PBS_NODEFILE)");
}

// ---- LSF
// -----------------------------------------------------------------------------------------

TEST(LsfHosts, Pairs) {
  Allocation a = parse_lsf_hosts("host1 4 host2 2");
  EXPECT_EQ(a.addresses, (Names{"host1", "host2"}));
  EXPECT_EQ(a.slots, (Counts{4, 2}));
  EXPECT_EQ(a.hosts_from, "LSB_MCPU_HOSTS=\"host1 4 host2 2\"");
  EXPECT_EQ(parse_lsf_hosts("  h 1\n").addresses, Names{"h"});
}

TEST(LsfHosts, ErrorsNameTheVariableAndValue) {
  const std::vector<test::Case> cases = {
      {"", "LSB_MCPU_HOSTS=\"\": no hosts"},
      {"h1 4 h2",
       "LSB_MCPU_HOSTS=\"h1 4 h2\": host \"h2\" has no slot count (expected HOST SLOTS "
       "pairs)"},
      {"h1 x", "LSB_MCPU_HOSTS=\"h1 x\": slot count \"x\" of host \"h1\" is not a number 1..1024"},
      {"h1 0", "LSB_MCPU_HOSTS=\"h1 0\": slot count \"0\" of host \"h1\" is not a number 1..1024"},
      {"h1 2 h1 2", "LSB_MCPU_HOSTS=\"h1 2 h1 2\": host \"h1\" is listed twice"},
      {"h/1 2", "LSB_MCPU_HOSTS=\"h/1 2\": \"h/1\" is not a host name"},
  };
  for (const auto& c : cases)
    EXPECT_EQ(test::error_of([&] { parse_lsf_hosts(c.input); }), c.expected) << c.input;
  EXPECT_EQ(
      error_of_source("lsf", {}),
      "LSB_MCPU_HOSTS is not set: the host source lsf reads the hosts of the LSF job it runs in");
}

// ---- auto and the names
// --------------------------------------------------------------------------

TEST(HostSource, Names) {
  for (const char* name : {"slurm", "pbs", "lsf", "auto"}) EXPECT_TRUE(is_host_source(name));
  for (const char* name : {"", "Slurm", "./slurm", "hosts.toml", "slurm.toml"})
    EXPECT_FALSE(is_host_source(name)) << name;
}

TEST(HostSource, AutoTakesTheFirstAllocationFound) {
  Vars vars{{"LSB_MCPU_HOSTS", "l1 1"}};
  EXPECT_EQ(read_allocation("auto", env_of(vars)).addresses, Names{"l1"});
  vars["SLURM_JOB_NODELIST"] = "s1";
  EXPECT_EQ(read_allocation("auto", env_of(vars)).addresses, Names{"s1"});
  // The source found is the one used: its errors are reported, never skipped.
  vars["SLURM_JOB_NODELIST"] = "s[";
  EXPECT_EQ(error_of_source("auto", vars), "SLURM_JOB_NODELIST=s[: unmatched \"[\" in node set");
}

TEST(HostSource, AutoOutsideAnAllocationNamesTheVariables) {
  EXPECT_EQ(error_of_source("auto", {{"SLURM_JOB_ID", "1"}}),
            "the host source auto found no Slurm, PBS or LSF allocation: none of "
            "SLURM_JOB_NODELIST, PBS_NODEFILE, LSB_MCPU_HOSTS is set");
  EXPECT_EQ(error_of_source("sge", {}), "\"sge\" is not a host source (slurm, pbs, lsf, auto)");
}

// ---- a TOML file's source key
// --------------------------------------------------------------------

TEST(TomlSource, KeepsTheDefaultsForTheSourcedHosts) {
  Cluster c =
      parse_toml_hostfile("source = \"auto\"\n[defaults]\nuser = \"ms\"\nport = 2222\n", "a.toml");
  EXPECT_EQ(c.source, "auto");
  EXPECT_TRUE(c.hosts.empty());
  EXPECT_EQ(c.defaults.user, "ms");
  EXPECT_EQ(c.defaults.port, 2222);
  EXPECT_EQ(parse_toml_hostfile("source = \"pbs\"\n", "a.toml").source, "pbs");
}

TEST(TomlSource, Errors) {
  auto error = [](const std::string& text) {
    return test::error_of([&] { parse_toml_hostfile(text, "a.toml"); });
  };
  EXPECT_EQ(error("source = \"sge\"\n"),
            "a.toml:1:10: source \"sge\" is not slurm, pbs, lsf or auto");
  EXPECT_EQ(error("source = 1\n"), "a.toml:1:10: key \"source\" must be a string");
  EXPECT_EQ(error("source = \"slurm\"\n[[hosts]]\naddress = \"a\"\n"),
            "a.toml:1:10: source = \"slurm\" and [[hosts]] exclude each other: the hosts come "
            "from one or the other");
  EXPECT_EQ(error("[defaults]\nsource = \"slurm\"\n"),
            "a.toml:2:10: unknown key \"source\" in [defaults] (expected one of: user, port, "
            "identity_file, known_hosts, python, workdir, local_worker_num, env, bind_core, "
            "bind_numa, contract)");
}

// ---- load_hosts: the cluster, the defaults file, the counts' precedence
// --------------------------

TEST(LoadHosts, SourceGivesTheClusterWithSlots) {
  Vars vars{{"SLURM_JOB_NODELIST", "node[1-3]"},
            {"SLURM_TASKS_PER_NODE", "2(x3)"},
            {"SLURM_NTASKS", "6"}};
  Cluster c = load_hosts("slurm", env_of(vars), std::nullopt);
  EXPECT_EQ(c.path, "slurm");
  ASSERT_EQ(c.hosts.size(), 3u);
  EXPECT_EQ(c.hosts[2].address, "node3");
  EXPECT_EQ(c.hosts[2].local_worker_num, 2);
  EXPECT_EQ(c.hosts[0].origin, "SLURM_JOB_NODELIST=node[1-3]");
  EXPECT_EQ(c.hosts_from,
            "3 from SLURM_JOB_NODELIST=node[1-3], local_worker_num from "
            "SLURM_TASKS_PER_NODE=2(x3)");
}

TEST(LoadHosts, CommandLineCountWins) {
  Vars vars{{"LSB_MCPU_HOSTS", "a 4 b 4"}};
  Cluster c = load_hosts("lsf", env_of(vars), 2);
  EXPECT_FALSE(c.hosts[0].local_worker_num.has_value());  // the plan takes --local_worker_num
  EXPECT_EQ(c.hosts_from,
            "2 from LSB_MCPU_HOSTS=\"a 4 b 4\", local_worker_num from --local_worker_num=2 (not "
            "LSB_MCPU_HOSTS)");
}

TEST(LoadHosts, WithoutCountsNothingIsSaidOfThem) {
  Vars vars{{"SLURM_JOB_NODELIST", "n1"}};
  Cluster c = load_hosts("auto", env_of(vars), std::nullopt);
  EXPECT_FALSE(c.hosts[0].local_worker_num.has_value());
  EXPECT_EQ(c.hosts_from, "1 from SLURM_JOB_NODELIST=n1");
}

class LoadHostsFile : public test::TempDirTest {
 protected:
  std::string path = dir_ + "/alloc.toml";
  void write_toml(const std::string& text) const { write("alloc.toml", text); }
};

TEST_F(LoadHostsFile, DefaultsApplyToEverySourcedHost) {
  write_toml(
      "source = \"slurm\"\n"
      "[defaults]\n"
      "python = \"/opt/py/bin/python\"\n"
      "workdir = \"/data/job\"\n"
      "env = { NCCL_SOCKET_IFNAME = \"ib0\" }\n"
      "bind_core = true\n");
  Vars vars{
      {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_TASKS_PER_NODE", "1,3"}, {"SLURM_NTASKS", "4"}};
  Cluster c = load_hosts(path, env_of(vars), std::nullopt);
  ASSERT_EQ(c.hosts.size(), 2u);
  for (const Host& h : c.hosts) {
    EXPECT_EQ(h.python, "/opt/py/bin/python");
    EXPECT_EQ(h.workdir, "/data/job");
    EXPECT_EQ(h.env, (EnvList{{"NCCL_SOCKET_IFNAME", "ib0"}}));
    EXPECT_EQ(h.bind_core.mode, BindCore::Mode::kAuto);
  }
  EXPECT_EQ(c.hosts[0].address, "n1");
  EXPECT_EQ(c.hosts[0].local_worker_num, 1);
  EXPECT_EQ(c.hosts[1].local_worker_num, 3);
  EXPECT_EQ(c.path, path);
  EXPECT_EQ(c.hosts_from, "2 from SLURM_JOB_NODELIST=n[1-2] with the [defaults] of " + path +
                              ", local_worker_num from SLURM_TASKS_PER_NODE=1,3");
}

TEST_F(LoadHostsFile, DefaultsCountWinsOverTheAllocation) {
  write_toml("source = \"pbs\"\n[defaults]\nlocal_worker_num = 1\ncontract = \"torch\"\n");
  std::string nodes = write("nodes", "a\na\n");
  Vars vars{{"PBS_NODEFILE", nodes}};
  Cluster c = load_hosts(path, env_of(vars), std::nullopt);
  EXPECT_EQ(c.hosts[0].local_worker_num, 1);
  EXPECT_EQ(c.contract, "torch");
  EXPECT_EQ(c.hosts_from, "1 from PBS_NODEFILE=" + nodes + " with the [defaults] of " + path +
                              ", local_worker_num from the [defaults] of " + path +
                              " (not the lines per host of PBS_NODEFILE)");
}

TEST_F(LoadHostsFile, DefaultsCountWinsOverTheCommandLineToo) {
  // As in every host file, its count beats --local_worker_num; the hosts: line says which counted.
  write_toml("source = \"slurm\"\n[defaults]\nlocal_worker_num = 2\n");
  Vars vars{
      {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_TASKS_PER_NODE", "4(x2)"}, {"SLURM_NTASKS", "8"}};
  Cluster c = load_hosts(path, env_of(vars), 3);
  EXPECT_EQ(c.hosts[0].local_worker_num, 2);
  EXPECT_EQ(c.hosts[1].local_worker_num, 2);
  EXPECT_EQ(c.hosts_from, "2 from SLURM_JOB_NODELIST=n[1-2] with the [defaults] of " + path +
                              ", local_worker_num from the [defaults] of " + path +
                              " (not --local_worker_num=3, not SLURM_TASKS_PER_NODE=4(x2))");
}

TEST_F(LoadHostsFile, AFileWithoutSourceIsAHostFile) {
  write_toml("[[hosts]]\naddress = \"x\"\n");
  Cluster c = load_hosts(path, env_of({}), std::nullopt);
  ASSERT_EQ(c.hosts.size(), 1u);
  EXPECT_EQ(c.hosts[0].address, "x");
  EXPECT_EQ(c.hosts_from, "");
}

TEST_F(LoadHostsFile, SourceErrorsAreTheSources) {
  write_toml("source = \"lsf\"\n");
  EXPECT_EQ(
      test::error_of([&] { load_hosts(path, env_of({}), std::nullopt); }),
      "LSB_MCPU_HOSTS is not set: the host source lsf reads the hosts of the LSF job it runs in");
}

}  // namespace
}  // namespace msrun_ssh
