// Spare hosts in the plan (src/plan/spares.cc): which hosts leave at a restart (lost, unreachable,
// failed --host_failures_to_exclude attempts), which spare takes each place, and the plan with the
// spares in: node rank, ranks, devices, their own environment, and the master's move.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "msrun_ssh/plan.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

using test::env_of;
using test::host;

const std::map<std::string, std::string> kIps{{"alpha", "198.18.0.1"},
                                              {"beta", "198.18.0.2"},
                                              {"spare1", "198.18.0.11"},
                                              {"spare2", "198.18.0.12"}};

std::string fake_dns(const std::string& name) {
  auto it = kIps.find(name);
  return it == kIps.end() ? "" : it->second;
}

class Spares : public ::testing::Test {
 protected:
  Spares() {
    cluster.path = "h.toml";
    cluster.hosts = {host("alpha", 2), host("beta", 1)};
    cluster.spares = {host("spare1", 4, {{"NCCL_IB_HCA", "mlx5_1"}}), host("spare2", {})};
    options.task_script = "train.py";
    options.job_id = "job";
    options.launcher_cwd = "/job";
  }
  Plan plan() { return make_plan(options, cluster, fake_dns); }

  static std::vector<int> ranks(const HostPlan& h) {
    std::vector<int> r;
    for (const auto& p : h.processes) r.push_back(p.rank);
    return r;
  }

  Options options;
  Cluster cluster;
};

TEST_F(Spares, MakePlanKeepsSparesApartWithTheirIps) {
  Plan p = plan();
  ASSERT_EQ(p.hosts.size(), 2u);
  EXPECT_EQ(p.worker_num, 3);
  ASSERT_EQ(p.spares.size(), 2u);
  EXPECT_EQ(p.spares[0].host.address, "spare1");
  EXPECT_EQ(p.spares[0].node_rank, -1);
  EXPECT_EQ(p.spares[0].ip, "198.18.0.11");
  EXPECT_TRUE(p.spares[0].processes.empty());
  EXPECT_EQ(p.spares[1].host.workdir, "/job");
}

TEST_F(Spares, ALostHostTakesTheFirstSpare) {
  SpareDecision d = replace_hosts(plan(), {{"beta", "lost: connection reset"}}, {}, 2);
  EXPECT_EQ(d.error, "");
  EXPECT_EQ(d.replacements,
            (std::vector<Replacement>{{1, "beta", "spare1", "lost: connection reset"}}));
}

TEST_F(Spares, AHostIsExcludedAfterKFailedAttempts) {
  Plan p = plan();
  EXPECT_TRUE(replace_hosts(p, {}, {{"alpha", 1}, {"beta", 1}}, 2).replacements.empty());
  SpareDecision d = replace_hosts(p, {}, {{"alpha", 1}, {"beta", 2}}, 2);
  EXPECT_EQ(d.replacements, (std::vector<Replacement>{{1, "beta", "spare1", "failed 2 attempts"}}));
  // K = 1: the first failure excludes; hosts go in node-rank order, spares in theirs.
  d = replace_hosts(p, {{"beta", "unreachable: timeout"}}, {{"alpha", 1}}, 1);
  EXPECT_EQ(d.replacements,
            (std::vector<Replacement>{{0, "alpha", "spare1", "failed 1 attempts"},
                                      {1, "beta", "spare2", "unreachable: timeout"}}));
}

TEST_F(Spares, NoSpareLeftIsAnErrorNamingTheHost) {
  cluster.spares.pop_back();
  SpareDecision d =
      replace_hosts(plan(), {{"alpha", "lost: reset"}, {"beta", "lost: reset"}}, {}, 2);
  EXPECT_EQ(d.error, "no spare host is left to replace beta (node rank 1, lost: reset)");
  EXPECT_TRUE(d.replacements.empty());
  cluster.spares.clear();
  EXPECT_EQ(replace_hosts(plan(), {}, {{"alpha", 2}}, 2).error,
            "no spare host is left to replace alpha (node rank 0, failed 2 attempts)");
}

// Entries on one address with ports of their own (the sshds of containers on one machine) are
// told apart by host_key: losing one replaces that one only, and a spare on the same address
// takes its place by its own port.
TEST_F(Spares, EntriesOnOneAddressAreToldApartByTheirPorts) {
  cluster.hosts = {host("alpha", 1), host("alpha", 1)};
  cluster.hosts[0].port = 2201;
  cluster.hosts[1].port = 2202;
  cluster.spares = {host("alpha", 1), host("alpha", 1)};
  cluster.spares[0].port = 2203;
  cluster.spares[1].port = 2204;
  Plan before = plan();
  EXPECT_EQ(host_key(before.hosts[1].host), "alpha:2202");
  SpareDecision d = replace_hosts(before, {{"alpha:2202", "lost: connection reset"}}, {}, 2);
  EXPECT_EQ(d.error, "");
  EXPECT_EQ(d.replacements,
            (std::vector<Replacement>{{1, "alpha:2202", "alpha:2203", "lost: connection reset"}}));
  // Attempts failed count per entry too: the one that failed K times leaves, not its neighbour.
  d = replace_hosts(before, {}, {{"alpha:2201", 2}, {"alpha", 2}}, 2);
  EXPECT_EQ(d.replacements,
            (std::vector<Replacement>{{0, "alpha:2201", "alpha:2203", "failed 2 attempts"}}));
  Plan p = apply_replacements(before, {{1, "alpha:2202", "alpha:2204", "lost"}}, options);
  EXPECT_EQ(p.hosts[0].host.port, 2201);
  EXPECT_EQ(p.hosts[1].host.port, 2204);
  ASSERT_EQ(p.spares.size(), 1u);
  EXPECT_EQ(p.spares[0].host.port, 2203);
  // Without a port the key is the address; an IPv6 address's port is set apart by brackets.
  EXPECT_EQ(host_key(host("alpha", 1)), "alpha");
  Host v6 = host("fe80::1", 1);
  v6.port = 2222;
  v6.shares_address = true;
  EXPECT_EQ(host_key(v6), "[fe80::1]:2222");
}

// The host file's entries are marked as they are loaded (load_cluster), so that the commands
// that make no plan (stop, sync) name them as a run does: each entry that shares its address
// with another, host or spare, with its port.
TEST(SharedAddresses, EachEntryOfASharedAddressIsMarkedHostOrSpare) {
  Cluster c;
  c.hosts = {host("alpha", 1), host("box", 1), host("gamma", 1)};
  c.hosts[1].port = 2202;
  c.spares = {host("box", 1), host("delta", 1)};
  c.spares[0].port = 2203;
  c.spares[1].port = 2204;
  EXPECT_EQ(shared_addresses(c), (std::set<std::string>{"box"}));
  mark_shared_addresses(c);
  std::vector<std::string> keys;
  for (const auto* entries : {&c.hosts, &c.spares})
    for (const Host& h : *entries) keys.push_back(host_key(h));
  EXPECT_EQ(keys, (std::vector<std::string>{"alpha", "box:2202", "gamma", "box:2203", "delta"}));
  c.spares.clear();  // a mark once made stays
  mark_shared_addresses(c);
  EXPECT_EQ(host_key(c.hosts[1]), "box:2202");
}

// An entry whose address no other entry has is named by its address alone, and one that shared
// its address keeps its port in the plan remade once its neighbour left (its lost and failed
// attempts stay counted under one name).
TEST_F(Spares, AnAddressOfItsOwnIsNamedWithoutItsPort) {
  cluster.hosts = {host("alpha", 1), host("alpha", 1)};
  cluster.hosts[0].port = 2201;
  cluster.hosts[1].port = 2202;
  cluster.spares = {host("beta", 1)};
  cluster.spares[0].port = 2203;
  Plan before = plan();
  EXPECT_EQ(host_key(before.spares[0].host), "beta");
  Plan p = apply_replacements(before, {{1, "alpha:2202", "beta", "lost"}}, options);
  EXPECT_EQ(host_key(p.hosts[0].host), "alpha:2201");
  EXPECT_EQ(host_key(p.hosts[1].host), "beta");
}

// The master is an entry, not an address: --master_addr may name one of several entries on one
// address by its port, and a restart that replaces another host keeps the master where it was
// (the first entry of its address would be a spare that took an earlier node rank).
TEST_F(Spares, TheMasterStaysOnItsEntryWhenAnotherSharesItsAddress) {
  cluster.hosts = {host("beta", 1), host("alpha", 1), host("alpha", 1)};
  cluster.hosts[1].port = 2201;
  cluster.hosts[2].port = 2202;
  cluster.spares = {host("alpha", 1)};
  cluster.spares[0].port = 2203;
  options.master_addr = "alpha";
  Plan before = plan();
  ASSERT_TRUE(before.hosts[1].is_master);
  Plan p = apply_replacements(before, {{0, "beta", "alpha:2203", "lost"}}, options);
  EXPECT_EQ(p.hosts[0].host.port, 2203);
  EXPECT_FALSE(p.hosts[0].is_master);
  EXPECT_TRUE(p.hosts[1].is_master);
  EXPECT_EQ(p.hosts[1].processes[0].role, Role::kScheduler);
  options.master_addr = "alpha:2202";
  EXPECT_TRUE(plan().hosts[2].is_master);
  // The address alone is the first entry of it, also when a later one has no port of its own.
  cluster.hosts[2].port.reset();
  options.master_addr = "alpha";
  EXPECT_TRUE(plan().hosts[1].is_master);
}

TEST_F(Spares, TheSpareTakesTheNodeRankRanksAndDevicesWithItsOwnEnvironment) {
  Plan before = plan();
  Plan p = apply_replacements(before, {{1, "beta", "spare1", "lost"}}, options);
  ASSERT_EQ(p.hosts.size(), 2u);
  const HostPlan& h = p.hosts[1];
  EXPECT_EQ(h.host.address, "spare1");
  EXPECT_EQ(h.node_rank, 1);
  EXPECT_FALSE(h.host.spare);
  EXPECT_EQ(ranks(h), (std::vector<int>{2}));  // beta's one worker, not spare1's four
  EXPECT_EQ(*env_of(h.processes[0], "MS_NODE_RANK"), "1");
  EXPECT_EQ(*env_of(h.processes[0], "RANK_ID"), "2");
  EXPECT_EQ(*env_of(h.processes[0], "DEVICE_ID"), "0");
  EXPECT_EQ(*env_of(h.processes[0], "NCCL_IB_HCA"), "mlx5_1");
  EXPECT_EQ(h.processes[0].log_name, "worker_2.log");
  // The master stays where it was.
  EXPECT_TRUE(p.hosts[0].is_master);
  EXPECT_EQ(p.master_ip, "198.18.0.1");
  EXPECT_EQ(*env_of(h.processes[0], "MS_SCHED_HOST"), "198.18.0.1");
  EXPECT_EQ(p.hosts[0].processes.size(), before.hosts[0].processes.size());
  // The spare taken is no longer free.
  ASSERT_EQ(p.spares.size(), 1u);
  EXPECT_EQ(p.spares[0].host.address, "spare2");
  EXPECT_EQ(p.job_id, "job");
}

TEST_F(Spares, ReplacingTheMasterMovesTheSchedulerAndMsSchedHost) {
  options.master_addr = "198.18.0.1";  // given as an IP: the master is replaced all the same
  Plan p = apply_replacements(plan(), {{0, "alpha", "spare2", "lost"}}, options);
  EXPECT_EQ(p.hosts[0].host.address, "spare2");
  EXPECT_TRUE(p.hosts[0].is_master);
  EXPECT_FALSE(p.hosts[1].is_master);
  EXPECT_EQ(p.master_ip, "198.18.0.12");
  EXPECT_EQ(p.hosts[0].processes[0].role, Role::kScheduler);
  EXPECT_EQ(ranks(p.hosts[0]), (std::vector<int>{0, 0, 1}));  // scheduler, ranks 0 and 1
  for (const auto& h : p.hosts)
    for (const auto& proc : h.processes)
      EXPECT_EQ(*env_of(proc, "MS_SCHED_HOST"), "198.18.0.12") << proc.label();
}

TEST_F(Spares, TorchMasterAddrMovesToo) {
  options.contract = Contract::kTorch;
  Plan p = apply_replacements(plan(), {{0, "alpha", "spare1", "lost"}}, options);
  EXPECT_EQ(*env_of(p.hosts[1].processes[0], "MASTER_ADDR"), "198.18.0.11");
  EXPECT_EQ(p.contract, Contract::kTorch);
}

TEST_F(Spares, ASpareWhoseBindingDoesNotFitIsAnInputError) {
  cluster.spares[0].bind_core.mode = BindCore::Mode::kManual;
  cluster.spares[0].bind_core.ranges["device7"] = {"0-3"};
  EXPECT_NE(test::error_of([&] {
              apply_replacements(plan(), {{1, "beta", "spare1", "lost"}}, options);
            }).find("bind_core for host spare1"),
            std::string::npos);
}

}  // namespace
}  // namespace msrun_ssh
