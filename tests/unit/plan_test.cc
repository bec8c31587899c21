// The launch plan (src/plan/plan.cc): ranks and the master on uneven hosts, the environment
// contract, simulation, log names, devices, the interpreter rule and manual / auto binding.
// Names are never resolved for real: every test passes a fake Resolver.
#include "msrun_ssh/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "msrun_ssh/base.h"
#include "msrun_ssh/command.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

using Argv = std::vector<std::string>;
using ::testing::ElementsAre;

using test::env_of;
using test::host;

// A fake DNS that knows three hosts (and an alias of gamma) and records every lookup.
struct FakeDns {
  std::map<std::string, std::string> table{{"alpha", "198.18.0.1"},
                                           {"beta", "198.18.0.2"},
                                           {"gamma", "198.18.0.3"},
                                           {"gamma.example", "198.18.0.3"}};
  std::vector<std::string> asked;
  Resolver resolver() {
    return [this](const std::string& name) {
      asked.push_back(name);
      auto it = table.find(name);
      return it == table.end() ? std::string() : it->second;
    };
  }
};

class MakePlan : public ::testing::Test {
 protected:
  MakePlan() {
    cluster.path = "h.toml";
    cluster.hosts = {host("alpha", 3), host("beta", 1), host("gamma", 4)};
    options.task_script = "train.py";
    options.task_args = {"--lr", "0.1"};
    options.job_id = "20261129-154501-3fa9c2";
    options.launcher_cwd = "/home/u/job";
  }
  Plan plan() { return make_plan(options, cluster, dns.resolver()); }
  std::string error() {
    return test::error_of([&] { plan(); });
  }
  static std::vector<int> worker_ranks(const HostPlan& h) {
    std::vector<int> r;
    for (const auto& p : h.processes)
      if (p.role == Role::kWorker) r.push_back(p.rank);
    return r;
  }

  Options options;
  Cluster cluster;
  FakeDns dns;
};

// ---- ranks and master -------------------------------------------------------------------------

TEST_F(MakePlan, RanksAreContiguousPerHost) {
  Plan p = plan();
  EXPECT_EQ(p.job_id, "20261129-154501-3fa9c2");
  EXPECT_EQ(p.worker_num, 8);
  EXPECT_EQ(p.master_port, 8118);
  ASSERT_EQ(p.hosts.size(), 3u);
  EXPECT_EQ(worker_ranks(p.hosts[0]), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(worker_ranks(p.hosts[1]), (std::vector<int>{3}));
  EXPECT_EQ(worker_ranks(p.hosts[2]), (std::vector<int>{4, 5, 6, 7}));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(p.hosts[i].node_rank, i);
  EXPECT_EQ(p.hosts[2].host.address, "gamma");
  // Local indexes restart on every host.
  EXPECT_EQ(p.hosts[2].processes[0].local_index, 0);
  EXPECT_EQ(p.hosts[2].processes[3].local_index, 3);
}

TEST_F(MakePlan, MasterDefaultsToTheFirstHostAndOnlyItIsResolved) {
  Plan p = plan();
  EXPECT_TRUE(p.hosts[0].is_master);
  EXPECT_FALSE(p.hosts[1].is_master);
  EXPECT_FALSE(p.hosts[2].is_master);
  EXPECT_EQ(p.master_ip, "198.18.0.1");
  EXPECT_EQ(p.hosts[0].ip, "198.18.0.1");
  EXPECT_EQ(p.hosts[1].ip, "");
  EXPECT_EQ(p.hosts[2].ip, "");
  EXPECT_EQ(dns.asked, (std::vector<std::string>{"alpha"}));
}

TEST_F(MakePlan, MasterOnEachHostByAddress) {
  const char* names[] = {"alpha", "beta", "gamma"};
  const char* ips[] = {"198.18.0.1", "198.18.0.2", "198.18.0.3"};
  for (int m = 0; m < 3; ++m) {
    options.master_addr = names[m];
    Plan p = plan();
    EXPECT_EQ(p.master_ip, ips[m]);
    int schedulers = 0;
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(p.hosts[i].is_master, i == m) << names[m];
      for (const auto& proc : p.hosts[i].processes)
        if (proc.role == Role::kScheduler) {
          ++schedulers;
          EXPECT_EQ(i, m);
        }
    }
    EXPECT_EQ(schedulers, 1);
    // The scheduler comes first on the master; ranks do not move with the master.
    const HostPlan& mh = p.hosts[m];
    ASSERT_FALSE(mh.processes.empty());
    EXPECT_EQ(mh.processes[0].role, Role::kScheduler);
    EXPECT_EQ(worker_ranks(p.hosts[0]), (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(worker_ranks(p.hosts[1]), (std::vector<int>{3}));
    EXPECT_EQ(worker_ranks(p.hosts[2]), (std::vector<int>{4, 5, 6, 7}));
    EXPECT_EQ(mh.processes.size(), static_cast<size_t>(mh.host.local_worker_num.value() + 1));
    // Every process points at the master.
    for (const auto& h : p.hosts)
      for (const auto& proc : h.processes) EXPECT_EQ(*env_of(proc, "MS_SCHED_HOST"), ips[m]);
  }
}

TEST_F(MakePlan, MasterOnEachHostByResolvedIp) {
  const char* ips[] = {"198.18.0.1", "198.18.0.2", "198.18.0.3"};
  for (int m = 0; m < 3; ++m) {
    options.master_addr = ips[m];
    Plan p = plan();
    for (int i = 0; i < 3; ++i) EXPECT_EQ(p.hosts[i].is_master, i == m) << ips[m];
    EXPECT_EQ(p.master_ip, ips[m]);
    EXPECT_EQ(p.hosts[m].processes[0].role, Role::kScheduler);
  }
}

TEST_F(MakePlan, MasterByAnotherNameOfTheSameIp) {
  options.master_addr = "gamma.example";
  Plan p = plan();
  EXPECT_TRUE(p.hosts[2].is_master);
  EXPECT_EQ(p.master_ip, "198.18.0.3");
}

TEST_F(MakePlan, MasterAddrMatchesAnIpLiteralInTheHostFile) {
  cluster.hosts = {host("198.18.0.7", 1), host("198.18.0.8", 1)};
  options.master_addr = "198.18.0.8";
  Plan p = plan();
  EXPECT_TRUE(p.hosts[1].is_master);
  EXPECT_EQ(p.master_ip, "198.18.0.8");  // unresolvable here: the address itself
}

TEST_F(MakePlan, UnknownMasterAddr) {
  options.master_addr = "nowhere";
  EXPECT_EQ(error(),
            "--master_addr=nowhere: no host of the host file has this address, name or IP "
            "(nowhere)");
  dns.table["elsewhere"] = "198.18.9.9";
  options.master_addr = "elsewhere";
  EXPECT_EQ(error(),
            "--master_addr=elsewhere: no host of the host file has this address, name or "
            "IP (198.18.9.9)");
  // A spare is in the file, but runs nothing: said so.
  Host spare = host("delta", 1);
  spare.spare = true;
  spare.origin = "h.toml:7";
  cluster.spares = {spare};
  options.master_addr = "delta";
  EXPECT_EQ(error(),
            "--master_addr=delta: delta is a spare host (marked spare at h.toml:7), which starts "
            "nothing until it replaces a lost one; the master must be one of the hosts that run "
            "the job");
  // take_spares puts the hosts --spares keeps aside after those the file marks.
  Host kept = host("epsilon", 1);
  kept.spare = true;
  cluster.spares.push_back(kept);
  options.spares = 1;
  EXPECT_EQ(error(),
            "--master_addr=delta: delta is a spare host (marked spare at h.toml:7), which starts "
            "nothing until it replaces a lost one; the master must be one of the hosts that run "
            "the job");
  options.master_addr = "epsilon";
  EXPECT_EQ(error(),
            "--master_addr=epsilon: epsilon is a spare host (one of the last 1 hosts, which "
            "--spares=1 keeps aside), which starts nothing until it replaces a lost one; the "
            "master must be one of the hosts that run the job");
}

// Entries on one address told apart by their ports (host_key): a spare named with its port is
// said to be a spare, and named so.
TEST_F(MakePlan, AMasterAddrNamingASpareByItsPortSaysItIsASpare) {
  cluster.hosts = {host("box", 1), host("alpha", 1)};
  cluster.hosts[0].port = 2202;
  Host spare = host("box", 1);
  spare.port = 2203;
  spare.spare = true;
  spare.origin = "h.toml:9";
  cluster.spares = {spare};
  options.master_addr = "box:2203";
  EXPECT_EQ(error(),
            "--master_addr=box:2203: box:2203 is a spare host (marked spare at h.toml:9), which "
            "starts nothing until it replaces a lost one; the master must be one of the hosts "
            "that run the job");
  options.master_addr = "box:2202";
  EXPECT_TRUE(plan().hosts[0].is_master);
  // Alone on its address, a spare is named by its address.
  cluster.hosts[0].address = "beta";
  options.master_addr = "box";
  EXPECT_EQ(error(),
            "--master_addr=box: box is a spare host (marked spare at h.toml:9), which starts "
            "nothing until it replaces a lost one; the master must be one of the hosts that run "
            "the job");
}

TEST_F(MakePlan, SchedulerEnvironment) {
  options.master_addr = "beta";
  Plan p = plan();
  const Process& s = p.hosts[1].processes[0];
  EXPECT_EQ(s.role, Role::kScheduler);
  EXPECT_EQ(s.rank, 0);
  EXPECT_EQ(s.local_index, -1);
  EXPECT_EQ(s.device_id, "");
  EXPECT_EQ(s.bind_key, "scheduler");
  EXPECT_EQ(s.label(), "scheduler");
  EXPECT_EQ(s.log_name, "scheduler.log");
  EXPECT_EQ(s.env, (EnvList{{"MS_SCHED_HOST", "198.18.0.2"},
                            {"MS_SCHED_PORT", "8118"},
                            {"MS_TOPO_TIMEOUT", "600"},
                            {"MS_ROLE", "MS_SCHED"},
                            {"MS_WORKER_NUM", "8"},
                            {"RANK_SIZE", "8"},
                            {"RANK_ID", "0"},
                            {"PYTHONUNBUFFERED", "1"}}));
  EXPECT_EQ(env_of(s, "MS_NODE_RANK"), nullptr);  // as msrun
  EXPECT_EQ(env_of(s, "MS_NODE_ID"), nullptr);
  EXPECT_EQ(env_of(s, "DEVICE_ID"), nullptr);
}

TEST_F(MakePlan, EveryProcessCanDumpItsStacks) {
  Plan p = plan();
  for (const auto& h : p.hosts)
    for (const auto& proc : h.processes) EXPECT_TRUE(proc.stack_dumps) << proc.label();
  EXPECT_FALSE(Process().stack_dumps);
}

TEST_F(MakePlan, WorkerEnvironmentExactly) {
  cluster.hosts[2].env = {{"A", "host"}, {"B", "host"}, {"MS_ROLE", "bogus"}};
  options.env = {{"B", "cli"}, {"C", "cli"}, {"RANK_ID", "99"}};
  options.master_port = 9000;
  options.cluster_time_out = 30;
  Plan p = plan();
  const Process& w = p.hosts[2].processes[1];
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.label(), "rank 5");
  EXPECT_EQ(w.env, (EnvList{{"A", "host"},
                            {"B", "cli"},
                            {"MS_ROLE", "MS_WORKER"},
                            {"C", "cli"},
                            {"RANK_ID", "5"},
                            {"MS_SCHED_HOST", "198.18.0.1"},
                            {"MS_SCHED_PORT", "9000"},
                            {"MS_TOPO_TIMEOUT", "30"},
                            {"MS_WORKER_NUM", "8"},
                            {"RANK_SIZE", "8"},
                            {"MS_NODE_RANK", "2"},
                            {"MS_NODE_ID", "5"},
                            {"DEVICE_ID", "1"},
                            {"PYTHONUNBUFFERED", "1"}}));
  // Other hosts do not get gamma's env.
  EXPECT_EQ(env_of(p.hosts[0].processes[1], "A"), nullptr);
  EXPECT_EQ(*env_of(p.hosts[0].processes[1], "C"), "cli");
}

TEST_F(MakePlan, UserPythonUnbufferedIsKept) {
  cluster.hosts[0].env = {{"PYTHONUNBUFFERED", "0"}};
  options.env = {{"PYTHONUNBUFFERED", "x"}};
  Plan p = plan();
  EXPECT_EQ(*env_of(p.hosts[0].processes[1], "PYTHONUNBUFFERED"), "x");
  EXPECT_EQ(*env_of(p.hosts[1].processes[0], "PYTHONUNBUFFERED"), "x");
  options.env.clear();
  p = plan();
  EXPECT_EQ(*env_of(p.hosts[0].processes[1], "PYTHONUNBUFFERED"), "0");
  EXPECT_EQ(*env_of(p.hosts[1].processes[0], "PYTHONUNBUFFERED"), "1");
}

TEST_F(MakePlan, ProcessRestartPolicyExportsMindSporesRecoveryVariables) {
  Plan p = plan();  // the job policy: neither variable
  EXPECT_EQ(env_of(p.hosts[0].processes[0], "MS_ENABLE_RECOVERY"), nullptr);
  EXPECT_EQ(env_of(p.hosts[0].processes[1], "MS_RECOVERY_PATH"), nullptr);
  options.restart_policy = RestartPolicy::kProcess;
  cluster.hosts[1].workdir = "/data/job";
  p = plan();
  for (const auto& h : p.hosts)
    for (const auto& proc : h.processes) EXPECT_EQ(*env_of(proc, "MS_ENABLE_RECOVERY"), "1");
  // The scheduler too; each host's own workdir (the launcher's cwd when the host file says none).
  EXPECT_EQ(*env_of(p.hosts[0].processes[0], "MS_RECOVERY_PATH"),
            "/home/u/job/msrun-ssh-recovery/20261129-154501-3fa9c2");
  EXPECT_EQ(*env_of(p.hosts[1].processes[0], "MS_RECOVERY_PATH"),
            "/data/job/msrun-ssh-recovery/20261129-154501-3fa9c2");
  options.recovery_path = "/scratch/rec";
  EXPECT_EQ(*env_of(plan().hosts[1].processes[0], "MS_RECOVERY_PATH"),
            "/scratch/rec/20261129-154501-3fa9c2");
  // The user's own values win.
  cluster.hosts[2].env = {{"MS_RECOVERY_PATH", "/mine"}};
  options.env = {{"MS_ENABLE_RECOVERY", "0"}};
  p = plan();
  EXPECT_EQ(*env_of(p.hosts[2].processes[0], "MS_RECOVERY_PATH"), "/mine");
  EXPECT_EQ(*env_of(p.hosts[2].processes[0], "MS_ENABLE_RECOVERY"), "0");
  EXPECT_EQ(*env_of(p.hosts[0].processes[1], "MS_ENABLE_RECOVERY"), "0");
}

TEST_F(MakePlan, LocalWorkerNumFillsHostsThatDoNotSay) {
  cluster.hosts[1].local_worker_num.reset();
  options.local_worker_num = 2;
  Plan p = plan();
  EXPECT_EQ(p.worker_num, 9);
  EXPECT_EQ(worker_ranks(p.hosts[1]), (std::vector<int>{3, 4}));
  EXPECT_EQ(worker_ranks(p.hosts[2]), (std::vector<int>{5, 6, 7, 8}));
}

TEST_F(MakePlan, HostWithoutWorkersStillRunsTheScheduler) {
  cluster.hosts[0].local_worker_num = 0;
  Plan p = plan();
  ASSERT_EQ(p.hosts[0].processes.size(), 1u);
  EXPECT_EQ(p.hosts[0].processes[0].role, Role::kScheduler);
  EXPECT_EQ(worker_ranks(p.hosts[1]), (std::vector<int>{0}));
}

TEST_F(MakePlan, NoWorkersAtAll) {
  for (auto& h : cluster.hosts) h.local_worker_num = 0;
  EXPECT_EQ(error(), "h.toml: the job has no workers");
}

TEST_F(MakePlan, WorkerNumMatches) {
  options.worker_num = 8;
  EXPECT_EQ(plan().worker_num, 8);
}

TEST_F(MakePlan, WorkerNumMismatch) {
  options.worker_num = 9;
  EXPECT_EQ(error(), "--worker_num=9 but the host file h.toml gives 8 workers (3+1+4)");
}

TEST_F(MakePlan, FindRank) {
  Plan p = plan();
  ASSERT_NE(p.find_rank(4), nullptr);
  EXPECT_EQ(p.find_rank(4), &p.hosts[2].processes[0]);
  EXPECT_EQ(p.find_rank(0), &p.hosts[0].processes[1]);  // not the scheduler
  EXPECT_EQ(p.find_rank(8), nullptr);
  EXPECT_EQ(p.find_rank(-1), nullptr);
}

// ---- simulation, rank table, tail ---------------------------------------------------------------

TEST_F(MakePlan, SimulationHasNoSchedulerNorSchedulerVariables) {
  options.sim_level = 1;
  Plan p = plan();
  for (const auto& h : p.hosts)
    for (const auto& proc : h.processes) {
      EXPECT_EQ(proc.role, Role::kWorker);
      for (const char* name : {"MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_TOPO_TIMEOUT"})
        EXPECT_EQ(env_of(proc, name), nullptr) << name;
      EXPECT_EQ(*env_of(proc, "MS_SIMULATION_LEVEL"), "1");
    }
  EXPECT_EQ(p.hosts[0].processes.size(), 3u);
  EXPECT_EQ(p.hosts[2].processes[2].env, (EnvList{{"MS_WORKER_NUM", "8"},
                                                  {"RANK_SIZE", "8"},
                                                  {"MS_NODE_RANK", "2"},
                                                  {"RANK_ID", "6"},
                                                  {"MS_NODE_ID", "6"},
                                                  {"DEVICE_ID", "2"},
                                                  {"MS_SIMULATION_LEVEL", "1"},
                                                  {"PYTHONUNBUFFERED", "1"}}));
}

TEST_F(MakePlan, SimulationLevelZeroCounts) {
  options.sim_level = 0;
  Plan p = plan();
  EXPECT_EQ(*env_of(p.hosts[0].processes[0], "MS_SIMULATION_LEVEL"), "0");
  EXPECT_EQ(p.hosts[0].processes[0].role, Role::kWorker);
}

TEST_F(MakePlan, SimRankIdRunsExactlyOneProcessOnItsHost) {
  options.sim_level = 1;
  for (int r = 0; r < 8; ++r) {
    options.sim_rank_id = r;
    Plan p = plan();
    int host_of = r < 3 ? 0 : r < 4 ? 1 : 2;
    int local = r < 3 ? r : r < 4 ? 0 : r - 4;
    size_t total = 0;
    for (const auto& h : p.hosts) total += h.processes.size();
    EXPECT_EQ(total, 1u) << r;
    ASSERT_EQ(p.hosts[host_of].processes.size(), 1u) << r;
    const Process& proc = p.hosts[host_of].processes[0];
    EXPECT_EQ(proc.rank, r);
    EXPECT_EQ(proc.local_index, local);
    // As msrun (msrun-notes.md): DEVICE_ID 0 and no MS_NODE_ID for the one process.
    EXPECT_EQ(proc.device_id, "0");
    EXPECT_EQ(*env_of(proc, "DEVICE_ID"), "0");
    EXPECT_EQ(env_of(proc, "MS_NODE_ID"), nullptr);
    EXPECT_EQ(*env_of(proc, "RANK_ID"), std::to_string(r));
    EXPECT_EQ(*env_of(proc, "MS_NODE_RANK"), std::to_string(host_of));
    EXPECT_EQ(*env_of(proc, "RANK_SIZE"), "8");
    EXPECT_EQ(proc.log_name, "worker_" + std::to_string(r) + ".log");
  }
}

// In msrun's simulation the bind keys are the logical ids (visible devices left aside):
// --sim_rank_id's one process is device0, as its DEVICE_ID says. It asked for the key of its
// rank's index on its host, or of a physical id.
TEST_F(MakePlan, SimulationBindsByTheLogicalDeviceId) {
  options.sim_level = 1;
  options.sim_rank_id = 5;
  options.bind_core = parse_bind_core(R"({"device0":["0-3"]})", "x");
  Plan p = plan();
  ASSERT_EQ(p.hosts[2].processes.size(), 1u);
  EXPECT_EQ(p.hosts[2].processes[0].cpus, (std::vector<int>{0, 1, 2, 3}));
  options.sim_rank_id = -1;
  cluster.hosts = {host("alpha", 2, {{"ASCEND_RT_VISIBLE_DEVICES", "4,5"}})};
  options.bind_core = parse_bind_core(R"({"device0":["0-3"],"device1":["4-7"]})", "x");
  p = plan();
  ASSERT_EQ(p.hosts[0].processes.size(), 2u);
  EXPECT_EQ(p.hosts[0].processes[1].cpus, (std::vector<int>{4, 5, 6, 7}));
}

TEST_F(MakePlan, SimRankIdOutOfRange) {
  options.sim_level = 1;
  options.sim_rank_id = 8;
  EXPECT_EQ(error(), "--sim_rank_id: rank 8 does not exist (the job has ranks 0..7)");
}

TEST_F(MakePlan, SimRankIdNeedsSimLevel) {
  options.sim_rank_id = 2;
  EXPECT_EQ(error(), "--sim_rank_id needs --sim_level");
}

TEST_F(MakePlan, RankTableFile) {
  options.rank_table_file = "/etc/hccl.json";
  Plan p = plan();
  for (const auto& h : p.hosts)
    for (const auto& proc : h.processes)
      EXPECT_EQ(*env_of(proc, "RANK_TABLE_FILE"), "/etc/hccl.json");
  EXPECT_EQ(p.hosts[0].processes[0].env[7],
            (std::pair<std::string, std::string>{"RANK_TABLE_FILE", "/etc/hccl.json"}));
}

TEST_F(MakePlan, NoRankTableFileByDefault) {
  EXPECT_EQ(env_of(plan().hosts[0].processes[1], "RANK_TABLE_FILE"), nullptr);
}

TEST_F(MakePlan, TailWorkerLogInRange) {
  options.tail_worker_log = {0, 7};
  EXPECT_NO_THROW(plan());
}

TEST_F(MakePlan, TailWorkerLogOutOfRange) {
  options.tail_worker_log = {0, 8};
  EXPECT_EQ(error(), "--tail_worker_log: rank 8 does not exist (the job has ranks 0..7)");
}

// ---- log names, workdir
// ---------------------------------------------------------------------------

TEST_F(MakePlan, LogNames) {
  Plan p = plan();
  EXPECT_EQ(p.hosts[0].processes[0].log_name, "scheduler.log");
  EXPECT_EQ(p.hosts[0].processes[1].log_name, "worker_0.log");
  EXPECT_EQ(p.hosts[2].processes[3].log_name, "worker_7.log");
}

TEST_F(MakePlan, WorkerLogNameWithIpAndHostname) {
  options.worker_log_name = "w-{hostname}-{ip}-{ip}";
  Plan p = plan();
  EXPECT_EQ(p.hosts[0].processes[0].log_name, "scheduler.log");
  // {hostname} is the host's own name, known only at start-up: it stays for with_hostname.
  EXPECT_EQ(p.hosts[0].processes[1].log_name, "w-{hostname}-198.18.0.1-198.18.0.1_0.log");
  EXPECT_EQ(p.hosts[1].processes[0].log_name, "w-{hostname}-198.18.0.2-198.18.0.2_3.log");
  EXPECT_EQ(p.hosts[2].processes[0].log_name, "w-{hostname}-198.18.0.3-198.18.0.3_4.log");
  EXPECT_EQ(p.hosts[2].ip, "198.18.0.3");  // {ip} makes every host resolve
}

TEST_F(MakePlan, WorkerLogNameHostnameOnlyResolvesNothingMore) {
  options.worker_log_name = "{hostname}";
  Plan p = plan();
  EXPECT_EQ(p.hosts[1].processes[0].log_name, "{hostname}_3.log");
  EXPECT_EQ(dns.asked, (std::vector<std::string>{"alpha"}));
}

TEST(WithHostname, ReplacesEveryTokenWithTheHostsOwnName) {
  EXPECT_EQ(with_hostname("w-{hostname}-{hostname}_3.log", "node0"), "w-node0-node0_3.log");
  EXPECT_EQ(with_hostname("worker_3.log", "node0"), "worker_3.log");
  EXPECT_EQ(with_hostname("{hostname}_3.log", "a/b"), "a_b_3.log");  // never a path
  // What a host answers is not trusted: no control characters, blanks or '..' paths, 253 bytes.
  EXPECT_EQ(with_hostname("{hostname}_3.log", "n\n\x1b[2Jx y"), "n___2Jx_y_3.log");
  EXPECT_EQ(with_hostname("{hostname}_3.log", std::string(300, 'h')),
            std::string(253, 'h') + "_3.log");
  EXPECT_EQ(with_hostname("{hostname}_3.log", ""), "{hostname}_3.log");
}

TEST_F(MakePlan, UnresolvableHostUsesItsAddressForIp) {
  cluster.hosts.push_back(host("delta", 1));
  options.worker_log_name = "{ip}";
  Plan p = plan();
  EXPECT_EQ(p.hosts[3].processes[0].log_name, "delta_8.log");
}

TEST_F(MakePlan, WorkdirDefaultsToTheLauncherCwd) {
  cluster.hosts[1].workdir = "/data/job";
  Plan p = plan();
  EXPECT_EQ(p.hosts[0].host.workdir, "/home/u/job");
  for (const auto& proc : p.hosts[0].processes) EXPECT_EQ(proc.workdir, "/home/u/job");
  EXPECT_EQ(p.hosts[1].processes[0].workdir, "/data/job");
}

// ---- devices
// -------------------------------------------------------------------------------------

TEST_F(MakePlan, DeviceIdIsTheLocalIndex) {
  Plan p = plan();
  EXPECT_EQ(p.hosts[2].processes[3].device_id, "3");
  EXPECT_EQ(p.hosts[2].processes[3].bind_key, "device3");
}

TEST_F(MakePlan, BindKeysUsePhysicalIdsFromAscendVisibleDevices) {
  cluster.hosts[2].env = {{"ASCEND_RT_VISIBLE_DEVICES", "7,5,6,4"},
                          {"CUDA_VISIBLE_DEVICES", "0,1,2,3"}};
  Plan p = plan();
  std::vector<std::string> keys, ids;
  for (const auto& proc : p.hosts[2].processes) {
    keys.push_back(proc.bind_key);
    ids.push_back(*env_of(proc, "DEVICE_ID"));
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"device4", "device5", "device6", "device7"}));
  EXPECT_EQ(ids, (std::vector<std::string>{"0", "1", "2", "3"}));
  EXPECT_EQ(p.hosts[0].processes[1].bind_key, "device0");  // other hosts unaffected
}

// CUDA numbers the visible GPUs in the order written (CUDA_VISIBLE_DEVICES=10,2,9: DEVICE_ID 0 is
// GPU 10); only ASCEND_RT_VISIBLE_DEVICES is sorted, as msrun sorts it. They were sorted: rank 0
// was bound by GPU 2's key and NUMA node while it drove GPU 10.
TEST_F(MakePlan, BindKeysUsePhysicalIdsFromCudaVisibleDevicesInTheirOrder) {
  cluster.hosts[0].env = {{"CUDA_VISIBLE_DEVICES", "10,2,9"}};
  Plan p = plan();
  EXPECT_EQ(p.hosts[0].processes[1].bind_key, "device10");
  EXPECT_EQ(p.hosts[0].processes[1].device_id, "0");
  EXPECT_EQ(p.hosts[0].processes[2].bind_key, "device2");
  EXPECT_EQ(p.hosts[0].processes[3].bind_key, "device9");
  EXPECT_EQ(p.hosts[0].processes[3].device_id, "2");
}

TEST_F(MakePlan, AMasterThisMachineResolvesToLoopbackIsRefusedWhenOthersAreElsewhere) {
  // The launcher runs on the first host, whose /etc/hosts gives its own name as 127.0.1.1.
  dns.table["alpha"] = "127.0.1.1";
  EXPECT_EQ(error(),
            "the master \"alpha\" resolves to 127.0.1.1 on this machine, a loopback address, which "
            "host \"beta\" (198.18.0.2) cannot reach: every process would wait for the master "
            "there until its timeout. Give the master as an address the other hosts reach (in the "
            "host file, or put such a host first), or make this machine resolve its name to that "
            "address (/etc/hosts)");
  options.contract = Contract::kTorch;  // MASTER_ADDR alike
  EXPECT_NE(error().find("a loopback address"), std::string::npos);
  // Every host on this machine (a local test cluster), or the others not known here: kept.
  options.contract.reset();
  dns.table["beta"] = "127.0.0.1";
  dns.table.erase("gamma");
  EXPECT_EQ(plan().master_ip, "127.0.1.1");
}

TEST_F(MakePlan, BindKeysReadTheVisibleDevicesAsNumbersAsMsrun) {
  // msrun: int() of each item, then sorted by value.
  cluster.hosts[2].env = {{"ASCEND_RT_VISIBLE_DEVICES", " 7, 05,6 ,+4"}};
  options.bind_core = parse_bind_core("True", "x");
  Plan p = plan();
  std::vector<std::string> keys;
  for (const auto& proc : p.hosts[2].processes) keys.push_back(proc.bind_key);
  EXPECT_EQ(keys, (std::vector<std::string>{"device4", "device5", "device6", "device7"}));
}

TEST_F(MakePlan, BindingRefusesMoreWorkersThanVisibleDevicesAsMsrun) {
  cluster.hosts = {host("alpha", 4, {{"ASCEND_RT_VISIBLE_DEVICES", "1,2"}})};
  Plan unbound = plan();  // no binding: nothing is keyed by the device, nothing to refuse
  EXPECT_EQ(unbound.hosts[0].processes.size(), 5u);
  options.bind_core = parse_bind_core("True", "x");
  EXPECT_EQ(
      error(),
      "host \"alpha\": 4 workers, but ASCEND_RT_VISIBLE_DEVICES=\"1,2\" makes 2 devices "
      "visible: with bind_core / bind_numa msrun refuses it (\"Device id exceeds the number of "
      "available devices\"); give the host at most 2 workers or more devices");
  options.bind_core = {};
  options.bind_numa = parse_bind_numa("True", "x");
  EXPECT_NE(error().find("4 workers, but"), std::string::npos) << error();
  cluster.hosts[0].env = {{"ASCEND_RT_VISIBLE_DEVICES", "0,x"}};
  EXPECT_EQ(error(),
            "host \"alpha\": ASCEND_RT_VISIBLE_DEVICES=\"0,x\": \"x\" is no device number, and "
            "bind_core / bind_numa key each worker by its device's (msrun reads the list as whole "
            "numbers)");
}

TEST_F(MakePlan, BindKeysFollowVisibleDevicesGivenWithEnv) {
  // --env sets the variable for every process: the processes see these devices, so the bind keys
  // must follow them too.
  options.env = {{"ASCEND_RT_VISIBLE_DEVICES", "4,5,6,7"}};
  Plan p = plan();
  EXPECT_EQ(p.hosts[1].processes[0].bind_key, "device4");
  EXPECT_EQ(p.hosts[2].processes[3].bind_key, "device7");
  EXPECT_EQ(p.hosts[2].processes[3].device_id, "3");
}

// ---- task argv
// -----------------------------------------------------------------------------------

// The task's argv for `script` and `args`, with --python `option_python` and the host file's
// `host_python` ("": not given).
Argv argv_of(const std::string& script, const Argv& args, const std::string& option_python,
             const std::string& host_python) {
  Options o;
  o.task_script = script;
  o.task_args = args;
  o.python = option_python;
  Host h;
  h.python = host_python;
  return task_argv(o, h);
}

TEST(TaskArgv, PythonScriptUnderPython3ByDefault) {
  EXPECT_EQ(argv_of("train.py", {"--lr", "0.1"}, "", ""),
            (Argv{"python3", "train.py", "--lr", "0.1"}));
}

TEST(TaskArgv, HostPythonBeatsPython3) {
  EXPECT_EQ(argv_of("dir/train.py", {}, "", "/opt/conda/bin/python"),
            (Argv{"/opt/conda/bin/python", "dir/train.py"}));
}

TEST(TaskArgv, OptionPythonBeatsHostPython) {
  EXPECT_EQ(argv_of("train.py", {}, "/usr/bin/python3.11", "/opt/conda/bin/python"),
            (Argv{"/usr/bin/python3.11", "train.py"}));
}

TEST(TaskArgv, PythonPytestAndOtherProgramsRunAsGiven) {
  for (const char* prog :
       {"python", "python3", "pytest", "./run.sh", "/bin/echo", "train.pyc", "train.PY", "py"})
    EXPECT_EQ(argv_of(prog, {"-m", "x.py"}, "/usr/bin/python3.11", "/opt/conda/bin/python"),
              (Argv{prog, "-m", "x.py"}))
        << prog;
}

TEST_F(MakePlan, ProcessArgvIsTheTask) {
  cluster.hosts[1].python = "/venv/bin/python";
  Plan p = plan();
  EXPECT_EQ(p.hosts[0].processes[0].argv, (Argv{"python3", "train.py", "--lr", "0.1"}));
  EXPECT_EQ(p.hosts[1].processes[0].argv, (Argv{"/venv/bin/python", "train.py", "--lr", "0.1"}));
  EXPECT_TRUE(p.hosts[1].processes[0].cpus.empty());
  EXPECT_FALSE(p.hosts[1].processes[0].bind_pending);
}

// ---- binding
// -------------------------------------------------------------------------------------

TEST_F(MakePlan, ManualBindCore) {
  cluster.hosts = {host("alpha", 2)};
  options.bind_core =
      parse_bind_core(R"({"scheduler":["0-1"],"device0":["2-3"],"device1":["4","6-7"]})", "x");
  Plan p = plan();
  const auto& procs = p.hosts[0].processes;
  ASSERT_EQ(procs.size(), 3u);
  EXPECT_EQ(procs[0].cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(procs[0].argv, (Argv{"taskset", "-c", "0-1", "python3", "train.py", "--lr", "0.1"}));
  EXPECT_EQ(*env_of(procs[0], "MSRUN_CPU_LIST"), "[0, 1]");
  EXPECT_EQ(procs[2].cpus, (std::vector<int>{4, 6, 7}));
  EXPECT_EQ(procs[2].argv, (Argv{"taskset", "-c", "4,6-7", "python3", "train.py", "--lr", "0.1"}));
  EXPECT_EQ(procs[2].env.back(),
            (std::pair<std::string, std::string>{"MSRUN_CPU_LIST", "[4, 6, 7]"}));
  EXPECT_FALSE(procs[2].bind_pending);
  EXPECT_TRUE(procs[2].numa_nodes.empty());
}

TEST_F(MakePlan, ManualBindCoreWithoutSchedulerKeyLeavesItUnbound) {
  cluster.hosts = {host("alpha", 1)};
  options.bind_core = parse_bind_core(R"({"device0":["2-3"]})", "x");
  Plan p = plan();
  EXPECT_TRUE(p.hosts[0].processes[0].cpus.empty());
  EXPECT_EQ(env_of(p.hosts[0].processes[0], "MSRUN_CPU_LIST"), nullptr);
  EXPECT_EQ(p.hosts[0].processes[0].argv[0], "python3");
  EXPECT_EQ(p.hosts[0].processes[1].argv[2], "2-3");
}

// msrun's guide: an empty list skips that process's binding ("若 CPU
// 范围段列表为空，则跳过对该进程的 亲和性设置"), and its example lists every process, [] for those
// not to bind. It was refused.
TEST_F(MakePlan, ManualBindCoreEmptyListLeavesThatProcessUnbound) {
  cluster.hosts = {host("alpha", 2)};
  options.bind_core =
      parse_bind_core(R"({"scheduler":[], "device0":[], "device1":["20-21", "40"]})", "x");
  Plan p = plan();
  const auto& procs = p.hosts[0].processes;
  for (size_t i : {0, 1}) {
    EXPECT_TRUE(procs[i].cpus.empty()) << i;
    EXPECT_EQ(procs[i].argv[0], "python3") << i;
    EXPECT_EQ(env_of(procs[i], "MSRUN_CPU_LIST"), nullptr) << i;
  }
  EXPECT_EQ(procs[2].cpus, (std::vector<int>{20, 21, 40}));
  cluster.hosts[0].bind_core = parse_bind_core(R"({"device0":[],"device1":[]})", "x");
  options.bind_core = {};
  p = plan();
  EXPECT_EQ(p.hosts[0].processes[2].argv[0], "python3");
}

TEST_F(MakePlan, ManualBindCoreUsesPhysicalDeviceKeys) {
  cluster.hosts = {host("alpha", 2, {{"ASCEND_RT_VISIBLE_DEVICES", "6,7"}})};
  options.bind_core = parse_bind_core(R"({"device6":["0-3"],"device7":["4-7"]})", "x");
  Plan p = plan();
  EXPECT_EQ(p.hosts[0].processes[1].cpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(*env_of(p.hosts[0].processes[2], "MSRUN_CPU_LIST"), "[4, 5, 6, 7]");
  EXPECT_EQ(*env_of(p.hosts[0].processes[2], "DEVICE_ID"), "1");
}

TEST_F(MakePlan, ManualBindCoreMissingDeviceKey) {
  options.bind_core = parse_bind_core(R"({"device0":["0"],"device1":["1"]})", "x");
  EXPECT_EQ(error(),
            "bind_core for host alpha: no entry \"device2\" for rank 2 (keys are "
            "\"scheduler\" and \"device<physical id>\")");
}

TEST_F(MakePlan, HostBindCoreFromTheHostFile) {
  cluster.hosts = {host("alpha", 1)};
  cluster.hosts[0].bind_core = parse_bind_core(R"({"device0":["8-9"]})", "x");
  Plan p = plan();
  EXPECT_EQ(p.hosts[0].processes[1].cpus, (std::vector<int>{8, 9}));
}

TEST_F(MakePlan, CommandLineBindCoreOverridesTheHostFile) {
  cluster.hosts = {host("alpha", 1)};
  cluster.hosts[0].bind_core = parse_bind_core(R"({"device0":["8-9"]})", "x");
  options.bind_core = parse_bind_core("False", "x");
  Plan p = plan();
  EXPECT_TRUE(p.hosts[0].processes[1].cpus.empty());
  EXPECT_EQ(p.hosts[0].processes[1].argv[0], "python3");
}

TEST_F(MakePlan, ManualBindNuma) {
  cluster.hosts = {host("alpha", 2)};
  options.bind_numa = parse_bind_numa(R"({"device0": 0, "device1": [1, 0, 1]})", "x");
  Plan p = plan();
  const auto& procs = p.hosts[0].processes;
  EXPECT_TRUE(procs[0].numa_nodes.empty());  // no "scheduler" key
  EXPECT_EQ(procs[0].argv[0], "python3");
  EXPECT_EQ(procs[1].numa_nodes, (std::vector<int>{0}));
  EXPECT_EQ(procs[1].argv, (Argv{"numactl", "--cpunodebind=0", "--membind=0", "python3", "train.py",
                                 "--lr", "0.1"}));
  EXPECT_EQ(procs[2].numa_nodes, (std::vector<int>{0, 1}));
  EXPECT_EQ(procs[2].argv, (Argv{"numactl", "--cpunodebind=0-1", "--membind=0-1", "python3",
                                 "train.py", "--lr", "0.1"}));
  EXPECT_EQ(env_of(procs[2], "MSRUN_CPU_LIST"), nullptr);
}

TEST_F(MakePlan, ManualBindCoreAndNumaUsePhyscpubind) {
  cluster.hosts = {host("alpha", 1)};
  options.bind_core = parse_bind_core(R"({"scheduler":["0"],"device0":["4-7"]})", "x");
  options.bind_numa = parse_bind_numa(R"({"scheduler": 0, "device0": 1})", "x");
  Plan p = plan();
  EXPECT_EQ(p.hosts[0].processes[0].argv, (Argv{"numactl", "--physcpubind=0", "--membind=0",
                                                "python3", "train.py", "--lr", "0.1"}));
  EXPECT_EQ(p.hosts[0].processes[1].argv, (Argv{"numactl", "--physcpubind=4-7", "--membind=1",
                                                "python3", "train.py", "--lr", "0.1"}));
  EXPECT_EQ(*env_of(p.hosts[0].processes[1], "MSRUN_CPU_LIST"), "[4, 5, 6, 7]");
}

TEST_F(MakePlan, AutoBindingIsPending) {
  options.bind_core = parse_bind_core("True", "x");
  Plan p = plan();
  for (const auto& h : p.hosts)
    for (const auto& proc : h.processes) {
      EXPECT_TRUE(proc.bind_pending);
      EXPECT_TRUE(proc.cpus.empty());
      EXPECT_EQ(proc.argv[0], "python3");
    }
}

TEST_F(MakePlan, AutoNumaIsPending) {
  cluster.hosts[1].bind_numa = parse_bind_numa("true", "x");
  Plan p = plan();
  EXPECT_FALSE(p.hosts[0].processes[1].bind_pending);
  EXPECT_TRUE(p.hosts[1].processes[0].bind_pending);
}

// The binding step is a pure value: without a topology the manual dict's CPUs and a pending auto
// mode, with it the NUMA nodes too; the plan it reads is left as it was.
TEST_F(MakePlan, DecideBindingIsAPureValue) {
  cluster.hosts = {host("alpha", 1)};
  options.bind_core = parse_bind_core(R"({"scheduler":["0"],"device0":["2-3"]})", "x");
  cluster.hosts[0].bind_numa = parse_bind_numa("true", "x");
  Plan p = plan();
  const HostPlan planned = p.hosts[0];
  EXPECT_EQ(decide_binding(p.hosts[0], options, nullptr),
            (std::vector<Binding>{{{0}, {}, true}, {{2, 3}, {}, true}}));
  Topology t;
  t.cores = {Core{0, 0, {0}}, Core{0, 0, {1}}, Core{0, 1, {2}}, Core{0, 1, {3}}};
  t.numa_nodes = {NumaNode{0, {0, 1}}, NumaNode{1, {2, 3}}};
  t.allowed_cpus = {0, 1, 2, 3};
  normalize_topology(t);
  EXPECT_EQ(decide_binding(p.hosts[0], options, &t),
            (std::vector<Binding>{{{0}, {0}, false}, {{2, 3}, {1}, false}}));
  EXPECT_EQ(p.hosts[0].processes[1].argv, planned.processes[1].argv);
  EXPECT_TRUE(p.hosts[0].processes[1].bind_pending);
}

TEST_F(MakePlan, ApplyBindingRecomputesArgv) {
  cluster.hosts = {host("alpha", 1)};
  Plan p = plan();
  options.bind_core = parse_bind_core(R"({"device0":["3"]})", "x");
  apply_binding(p.hosts[0], decide_binding(p.hosts[0], options, nullptr), options);
  EXPECT_EQ(p.hosts[0].processes[1].argv,
            (Argv{"taskset", "-c", "3", "python3", "train.py", "--lr", "0.1"}));
  EXPECT_EQ(process_argv(p.hosts[0].processes[1], options, p.hosts[0]),
            p.hosts[0].processes[1].argv);
}

}  // namespace
// ---- the torch contract ------------------------------------------------------------------------

// torchrun's variables (torch.distributed.run, "Environment Variables"), exactly, for init_method
// env://: no scheduler, no MS_* variable.
TEST_F(MakePlan, TorchContractGivesTorchrunsVariablesAndNoScheduler) {
  options.contract = Contract::kTorch;
  Plan p = plan();
  EXPECT_EQ(p.contract, Contract::kTorch);
  ASSERT_EQ(p.hosts[0].processes.size(), 3u);  // alpha: 3 workers, no scheduler
  for (const auto& h : p.hosts)
    for (const auto& proc : h.processes) EXPECT_EQ(proc.role, Role::kWorker);
  const Process& r4 = p.hosts[2].processes[0];  // gamma: node rank 2, global ranks 4..7
  EXPECT_EQ(r4.rank, 4);
  EnvList want = {{"MASTER_ADDR", "198.18.0.1"},
                  {"MASTER_PORT", "8118"},
                  {"WORLD_SIZE", "8"},
                  {"ROLE_WORLD_SIZE", "8"},
                  {"RANK", "4"},
                  {"ROLE_RANK", "4"},
                  {"LOCAL_RANK", "0"},
                  {"LOCAL_WORLD_SIZE", "4"},
                  {"GROUP_RANK", "2"},
                  {"NODE_RANK", "2"},
                  {"ROLE_NAME", "default"},
                  {"TORCHELASTIC_RUN_ID", "20261129-154501-3fa9c2"},
                  {"TORCHELASTIC_RESTART_COUNT", "0"},
                  {"TORCHELASTIC_MAX_RESTARTS", "0"},
                  {"TORCHELASTIC_USE_AGENT_STORE", "False"},
                  {"GROUP_WORLD_SIZE", "3"},
                  {"TORCHELASTIC_ERROR_FILE", "@msrun-ssh-job-dir@/error-rank4.json"},
                  {"PYTHONUNBUFFERED", "1"}};
  EXPECT_EQ(r4.env, want);
  // torchrun's defaults: set on the host only where its own environment has none.
  EnvList defaults{{"NCCL_ASYNC_ERROR_HANDLING", "1"},
                   {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "$NCCL_ASYNC_ERROR_HANDLING"},
                   {"OMP_NUM_THREADS", "1"}};
  EXPECT_EQ(r4.env_defaults, defaults);
  EXPECT_EQ(p.hosts[2].processes[3].log_name, "worker_7.log");
  EXPECT_EQ(*env_of(p.hosts[2].processes[3], "LOCAL_RANK"), "3");
}

// RANK 0's process serves the rendezvous store (env://): MASTER_ADDR is its host, the first with
// workers; a host of none is no node (torchrun refuses --nproc_per_node 0).
TEST_F(MakePlan, TorchContractMasterIsRankZerosHostAndNodesRunWorkers) {
  options.contract = Contract::kTorch;
  cluster.hosts = {host("alpha", 0), host("beta", 2), host("gamma", 0), host("gamma.example", 1)};
  Plan p = plan();
  EXPECT_TRUE(p.hosts[1].is_master);
  EXPECT_EQ(p.master_ip, "198.18.0.2");
  const Process& r0 = p.hosts[1].processes[0];
  EXPECT_EQ(r0.rank, 0);
  EXPECT_EQ(*env_of(r0, "MASTER_ADDR"), "198.18.0.2");
  EXPECT_EQ(*env_of(r0, "GROUP_RANK"), "0");
  EXPECT_EQ(*env_of(r0, "GROUP_WORLD_SIZE"), "2");
  const Process& r2 = p.hosts[3].processes[0];
  EXPECT_EQ(*env_of(r2, "GROUP_RANK"), "1");
  EXPECT_EQ(*env_of(r2, "NODE_RANK"), "1");
  options.master_addr = "beta";
  EXPECT_TRUE(plan().hosts[1].is_master);
  options.master_addr = "gamma.example";
  EXPECT_EQ(error(),
            "--master_addr=gamma.example: under --contract torch the master is the host of RANK "
            "0, whose process serves the rendezvous (MASTER_ADDR): here beta, the first host of "
            "h.toml with workers; put gamma.example first in the host file, or leave "
            "--master_addr out");
  // The master named has no worker: putting it first would not help (review of 2026-12-07).
  options.master_addr = "alpha";
  EXPECT_EQ(error(),
            "--master_addr=alpha: under --contract torch the master is the host of RANK 0, whose "
            "process serves the rendezvous (MASTER_ADDR): here beta, the first host of h.toml "
            "with workers; alpha runs no worker: give it workers, or leave --master_addr out");
  options.master_addr = "gamma.example";
  // msrun's contract keeps its scheduler where --master_addr says.
  options.contract = Contract::kMsrun;
  EXPECT_TRUE(plan().hosts[3].is_master);
}

// Refused before it is planned in gigabytes: 16384 hosts of 1024 workers took 3 GB and 43 s.
TEST_F(MakePlan, MoreThan262144WorkersAreRefusedNamingTheHost) {
  cluster.hosts.clear();
  for (int i = 0; i < 257; ++i) cluster.hosts.push_back(host(fmt::format("n{}", i), 1024));
  cluster.hosts.back().origin = "h.toml:771";
  EXPECT_EQ(error(), "h.toml: more than 262144 workers in the job (at host n256, h.toml:771)");
}

namespace {
// The value of a name in `env_defaults`, or nullptr.
const std::string* default_of(const Process& p, const std::string& name) {
  for (const auto& [n, v] : p.env_defaults)
    if (n == name) return &v;
  return nullptr;
}
}  // namespace

TEST_F(MakePlan, TorchContractKeepsTheUsersOmpNumThreads) {
  options.contract = Contract::kTorch;
  options.env = {{"OMP_NUM_THREADS", "8"}};
  Plan p = plan();
  const Process& r0 = p.hosts[0].processes[0];
  EXPECT_EQ(*env_of(r0, "OMP_NUM_THREADS"), "8");
  EXPECT_EQ(default_of(r0, "OMP_NUM_THREADS"), nullptr);
}

// torchrun sets OMP_NUM_THREADS=1 only when a node runs more than one process, and only where
// the node's own environment does not set it.
TEST_F(MakePlan, TorchContractLeavesOmpNumThreadsUnsetForOneProcessPerHost) {
  options.contract = Contract::kTorch;
  Plan p = plan();
  const Process& beta = p.hosts[1].processes[0];  // beta: 1 worker
  EXPECT_EQ(env_of(beta, "OMP_NUM_THREADS"), nullptr);
  EXPECT_EQ(default_of(beta, "OMP_NUM_THREADS"), nullptr);
  EXPECT_EQ(env_of(p.hosts[0].processes[0], "OMP_NUM_THREADS"), nullptr);
  EXPECT_EQ(*default_of(p.hosts[0].processes[0], "OMP_NUM_THREADS"), "1");
}

// As torchrun's agent: the user's NCCL_ASYNC_ERROR_HANDLING stays; newer torch's name follows it
// (on the host, where the first may come from its own environment).
TEST_F(MakePlan, TorchContractKeepsTheUsersNcclAsyncErrorHandling) {
  options.contract = Contract::kTorch;
  options.env = {{"NCCL_ASYNC_ERROR_HANDLING", "0"}};
  Plan p = plan();
  const Process& r0 = p.hosts[0].processes[0];
  EXPECT_EQ(*env_of(r0, "NCCL_ASYNC_ERROR_HANDLING"), "0");
  EXPECT_EQ(default_of(r0, "NCCL_ASYNC_ERROR_HANDLING"), nullptr);
  EXPECT_EQ(*default_of(r0, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "$NCCL_ASYNC_ERROR_HANDLING");
  options.env = {{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}};
  Plan with_torch_name = plan();
  const Process& again = with_torch_name.hosts[0].processes[0];
  EXPECT_EQ(*env_of(again, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "3");
  EXPECT_EQ(default_of(again, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), nullptr);
  EXPECT_EQ(*default_of(again, "NCCL_ASYNC_ERROR_HANDLING"), "1");
  // msrun's contract has none.
  options.contract = Contract::kMsrun;
  EXPECT_TRUE(plan().hosts[0].processes[0].env_defaults.empty());
}

// torchrun's own error file wins over one the user set: the launcher reads it back.
TEST_F(MakePlan, TorchContractErrorFileIsPerRankInTheJobsDirectory) {
  options.contract = Contract::kTorch;
  options.env = {{"TORCHELASTIC_ERROR_FILE", "/mine.json"}};
  Plan p = plan();
  EXPECT_EQ(*env_of(p.hosts[2].processes[3], "TORCHELASTIC_ERROR_FILE"),
            std::string(kJobDirToken) + "/error-rank7.json");
}

TEST_F(MakePlan, ContractComesFromTheHostFileUnlessTheCommandLineSaysOtherwise) {
  cluster.contract = "torch";
  EXPECT_EQ(plan().contract, Contract::kTorch);
  options.contract = Contract::kMsrun;
  EXPECT_EQ(plan().contract, Contract::kMsrun);
  EXPECT_EQ(plan().hosts[0].processes[0].role, Role::kScheduler);
}

TEST_F(MakePlan, TorchContractRefusesMsrunsSimulation) {
  options.contract = Contract::kTorch;
  options.sim_level = 1;
  EXPECT_EQ(error(), "--sim_level is msrun's simulation; it does not go with --contract torch");
}

// torchrun has no per-process restart: a rank started again alone cannot rejoin its group.
TEST_F(MakePlan, TorchContractRefusesMindSporesInPlaceRecovery) {
  options.contract = Contract::kTorch;
  options.restart_policy = RestartPolicy::kProcess;
  EXPECT_EQ(error().rfind("--restart_policy process is MindSpore's in-place recovery; it does not "
                          "go with --contract torch",
                          0),
            0u);
}

// torchrun's ${local_rank} macro (string.Template's safe_substitute): in the script's words and
// its own, under the torch contract only; the differential test against torchrun is
// test_torch.py's.
TEST_F(MakePlan, TorchContractSubstitutesTorchrunsLocalRankMacroInTheTasksWords) {
  options.task_script = "run_${local_rank}.py";
  options.task_args = {"--out=dev${local_rank}", "$local_rank", "a$$b",         "${other}",
                       "$local_ranks",           "x$",          "${local_rank", "$LOCAL_RANK",
                       "$local_rank}",           "$$local_rank"};
  options.contract = Contract::kTorch;
  Plan p = plan();
  const Process& w = p.hosts[0].processes[1];
  ASSERT_EQ(w.local_index, 1);
  std::vector<std::string> want{"python3",      "run_1.py",    "--out=dev1",   "1",
                                "a$b",          "${other}",    "$local_ranks", "x$",
                                "${local_rank", "$LOCAL_RANK", "1}",           "$local_rank"};
  EXPECT_EQ(w.argv, want);
  options.contract = Contract::kMsrun;  // msrun's words stay as given
  Plan m = plan();
  std::vector<std::string> as_given{"python3", options.task_script};
  as_given.insert(as_given.end(), options.task_args.begin(), options.task_args.end());
  EXPECT_EQ(m.hosts[0].processes[1].argv, as_given);
}

}  // namespace msrun_ssh

namespace msrun_ssh {
namespace {

// docs/remote.md's table of msrun's contract, as the plan gives it: every variable it lists for
// workers or the scheduler is there (unless "when" something else, or set by the command:
// MSRUN_SSH_JOB), a "—" is not, and no MS_*, RANK_*, DEVICE_ID or PYTHON* variable is set that
// the table does not list.
TEST_F(MakePlan, MsrunContractTableHolds) {
  std::string doc = test::source_file("docs/remote.md");
  size_t at = doc.find("| variable | workers | scheduler |");
  ASSERT_NE(at, std::string::npos);
  Plan p = plan();
  const Process& worker = p.hosts[0].processes[1];
  const Process& scheduler = p.hosts[0].processes[0];
  ASSERT_EQ(scheduler.role, Role::kScheduler);
  std::set<std::string> listed;
  int rows = 0;
  for (size_t pos = doc.find('\n', at) + 1; doc.compare(pos, 1, "|") == 0;) {
    size_t end = doc.find('\n', pos);
    std::string row = doc.substr(pos, end - pos);
    pos = end + 1;
    std::vector<std::string> cells;
    for (size_t c = 1, next; (next = row.find(" |", c)) != std::string::npos; c = next + 2)
      cells.push_back(std::string(trim(row.substr(c, next - c))));
    if (cells.size() != 3 || cells[0].starts_with("---")) continue;
    ++rows;
    for (size_t b = cells[0].find('`'); b != std::string::npos; b = cells[0].find('`', b + 1)) {
      size_t e = cells[0].find('`', b + 1);
      std::string name = cells[0].substr(b + 1, e - b - 1);
      b = e;
      listed.insert(name);
      if (name == kJobMarker) continue;
      for (auto [proc, cell] : {std::pair{&worker, cells[1]}, std::pair{&scheduler, cells[2]}}) {
        if (cell == "—") {
          EXPECT_EQ(env_of(*proc, name), nullptr) << name << " on the " << proc->label();
        } else if (cell.find("when") == std::string::npos) {
          EXPECT_NE(env_of(*proc, name), nullptr) << name << " on the " << proc->label();
        }
      }
    }
  }
  EXPECT_GE(rows, 10);
  for (const Process* proc : {&worker, &scheduler})
    for (const auto& [name, value] : proc->env)
      if (name.starts_with("MS_") || name.starts_with("RANK") || name == "DEVICE_ID" ||
          name.starts_with("PYTHON")) {
        EXPECT_TRUE(listed.count(name)) << name << " is set but not in docs/remote.md";
      }
}

// ---- a host listed twice --------------------------------------------------------------------

// OpenSSH's answer for a host: where it connects.
SshResolution answer(const std::string& hostname, int port, const std::string& jump = "") {
  SshResolution r;
  r.config.emplace();
  r.config->hostname = hostname;
  r.config->port = port;
  r.config->proxy_jump = jump;
  return r;
}

Host at(const std::string& address, const std::string& origin, std::optional<int> port = {}) {
  Host h = host(address, 1);
  h.origin = origin;
  h.port = port;
  return h;
}

TEST(CheckSshAnswers, AnUnsetPortAndPort22AreOneHost) {
  Cluster c;
  c.hosts = {at("node1", "h.toml:4"), at("node2", "h.toml:7"), at("node1", "h.toml:10", 22)};
  EXPECT_EQ(test::error_of([&] {
              check_ssh_answers(c, {answer("node1", 22), answer("node2", 22), answer("node1", 22)});
            }),
            "h.toml:10: host \"node1\" is listed twice: h.toml:4 has it already as \"node1\", "
            "and ssh sends both to node1 port 22 (a host runs one node's processes; list it once)");
  // The ssh config's Port for the unset one: another sshd of that machine, not the same host.
  EXPECT_NO_THROW(
      check_ssh_answers(c, {answer("node1", 2222), answer("node2", 22), answer("node1", 22)}));
}

TEST(CheckSshAnswers, TheCaseOfTheLettersAndSparesToo) {
  Cluster c;
  c.hosts = {at("Node1", "h.toml:4")};
  c.spares = {at("node1", "h.toml:9")};
  EXPECT_THAT(test::error_of([&] {
                check_ssh_answers(c, {answer("node1", 22), answer("node1", 22)});
              }),
              ::testing::HasSubstr("h.toml:9: host \"node1\" is listed twice: h.toml:4 has it "
                                   "already as \"Node1\""));
  // ssh matched `Host node1` for one of them only: two ports, two hosts.
  EXPECT_NO_THROW(check_ssh_answers(c, {answer("node1", 22), answer("node1", 2200)}));
}

TEST(CheckSshAnswers, WhatSshRefusesIsAnInputError) {
  Cluster c;
  c.hosts = {at("a", "h.toml:1"), at("b", "h.toml:2")};
  std::vector<SshResolution> answers(2);
  answers[0] = answer("a", 22);
  answers[1].error = "remote username contains invalid characters";
  // Not refused by ssh (it did not answer in time, or could not run): left to the connection.
  EXPECT_NO_THROW(check_ssh_answers(c, answers));
  answers[1].refused = true;
  EXPECT_EQ(test::error_of([&] { check_ssh_answers(c, answers); }),
            "h.toml:2: host \"b\": ssh refuses it: remote username contains invalid characters");
}

TEST(CheckSshAnswers, AliasesJumpsAndHostsWithoutAnAnswerAreLeftAlone) {
  Cluster c;
  c.hosts = {at("a", "h.toml:1"), at("b", "h.toml:2"), at("c", "h.toml:3"),
             at("c", "h.toml:4"), at("d", "h.toml:5"), at("D", "h.toml:6")};
  std::vector<SshResolution> answers = {answer("gpu1", 22),     answer("gpu1", 22),
                                        answer("c", 22),        SshResolution{},
                                        answer("d", 22, "gw1"), answer("d", 22, "gw2")};
  EXPECT_NO_THROW(check_ssh_answers(c, answers));
  answers[5].config->proxy_jump = "gw1";
  EXPECT_THAT(test::error_of([&] { check_ssh_answers(c, answers); }),
              ::testing::HasSubstr("ssh sends both to d port 22 through gw1"));
}

}  // namespace
}  // namespace msrun_ssh
