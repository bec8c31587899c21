// The --dry_run text (src/cli/dry_run.cc): the whole plan, exactly, for a small job; detached
// commands, simulation and bindings in their short forms.
#include "msrun_ssh/dry_run.h"

#include <gtest/gtest.h>

#include <string>

#include "msrun_ssh/command.h"
#include "msrun_ssh/plan.h"
#include "remote/programs.h"

namespace msrun_ssh {
namespace {

// IP literals resolve to themselves; nothing else resolves.
std::string literal_only(const std::string& name) {
  return name.rfind("198.18.", 0) == 0 ? name : "";
}

class DryRun : public ::testing::Test {
 protected:
  DryRun() {
    Host a;
    a.address = "198.18.0.1";
    a.user = "ms";
    a.port = 2222;
    a.local_worker_num = 1;
    a.env = {{"GLOO_SOCKET_IFNAME", "eth0"}};
    cluster.path = "h.toml";
    cluster.hosts = {a};
    options.task_script = "train.py";
    options.task_args = {"--lr", "0.1"};
    options.job_id = "20261129-154501-3fa9c2";
    options.launcher_cwd = "/job";
    options.log_dir = "logs";
    options.env = {{"X", "a b'c"}};
  }
  std::string text() { return describe_plan(make_plan(options, cluster, literal_only), options); }

  Options options;
  Cluster cluster;
};

TEST_F(DryRun, WholePlanExactly) {
  const std::string common =
      "    GLOO_SOCKET_IFNAME='eth0'\n"
      "    X='a b'\\''c'\n"
      "    MS_SCHED_HOST='198.18.0.1'\n"
      "    MS_SCHED_PORT='8118'\n"
      "    MS_TOPO_TIMEOUT='600'\n";
  const std::string cmd_head =
      "    command: cd -- '/job' && exec 'env' '--' 'MSRUN_SSH_JOB=20261129-154501-3fa9c2' "
      "'GLOO_SOCKET_IFNAME=eth0' 'X=a b'\\''c' 'MS_SCHED_HOST=198.18.0.1' 'MS_SCHED_PORT=8118' "
      "'MS_TOPO_TIMEOUT=600' ";
  // Every process starts through stack_site.sh (stack dumps on demand, stacks.h), in the
  // directory the watchdog made (no text of its own).
  const std::string site = shell_join({"sh", "-c", stack_site_script(), "msrun-ssh-stacks", ""});
  EXPECT_EQ(text(),
            "job 20261129-154501-3fa9c2: 1 hosts, 1 workers, scheduler at 198.18.0.1:8118\n"
            "logs: logs\n"
            "\n"
            "host 198.18.0.1 (node rank 0) [master]: ms@198.18.0.1:2222, workdir /job\n"
            "  scheduler: DEVICE_ID=- cpus - log scheduler.log\n" +
                common +
                "    MS_ROLE='MS_SCHED'\n"
                "    MS_WORKER_NUM='1'\n"
                "    RANK_SIZE='1'\n"
                "    RANK_ID='0'\n"
                "    PYTHONUNBUFFERED='1'\n" +
                cmd_head +
                "'MS_ROLE=MS_SCHED' 'MS_WORKER_NUM=1' 'RANK_SIZE=1' 'RANK_ID=0' "
                "'PYTHONUNBUFFERED=1' " +
                site +
                " 'python3' 'train.py' '--lr' '0.1' < /dev/null\n"
                "  rank 0: DEVICE_ID=0 cpus - log worker_0.log\n" +
                common +
                "    MS_ROLE='MS_WORKER'\n"
                "    MS_WORKER_NUM='1'\n"
                "    RANK_SIZE='1'\n"
                "    MS_NODE_RANK='0'\n"
                "    RANK_ID='0'\n"
                "    MS_NODE_ID='0'\n"
                "    DEVICE_ID='0'\n"
                "    PYTHONUNBUFFERED='1'\n" +
                cmd_head +
                "'MS_ROLE=MS_WORKER' 'MS_WORKER_NUM=1' 'RANK_SIZE=1' 'MS_NODE_RANK=0' 'RANK_ID=0' "
                "'MS_NODE_ID=0' 'DEVICE_ID=0' 'PYTHONUNBUFFERED=1' " +
                site + " 'python3' 'train.py' '--lr' '0.1' < /dev/null\n");
}

TEST_F(DryRun, SaysWhereAHostSourcesHostsCameFrom) {
  Plan plan = make_plan(options, cluster, literal_only);
  const std::string from =
      "1 from SLURM_JOB_NODELIST=n1, local_worker_num from SLURM_TASKS_PER_NODE=1";
  EXPECT_NE(describe_plan(plan, options, from)
                .find("\nlogs: logs\nhosts: " + from + "\n\nhost 198.18.0.1 (node rank 0)"),
            std::string::npos)
      << describe_plan(plan, options, from);
  EXPECT_EQ(describe_plan(plan, options).find("hosts:"), std::string::npos);
}

TEST_F(DryRun, TailedRanksKeepTheLaunchersStdin) {
  options.tail_worker_log = {0};
  std::string out = text();
  EXPECT_NE(out.find("'MS_ROLE=MS_SCHED'"), std::string::npos) << out;
  // The scheduler reads /dev/null, the tailed rank 0 the launcher's stdin (for pdb).
  EXPECT_EQ(out.find("'--lr' '0.1'\n  rank 0:"), std::string::npos) << out;
  EXPECT_NE(out.find("'--lr' '0.1' < /dev/null\n  rank 0:"), std::string::npos) << out;
  EXPECT_TRUE(out.ends_with("'--lr' '0.1'\n")) << out;
}

TEST_F(DryRun, OtherHostsShowTheirAddress) {
  Host b;
  b.address = "node2";
  b.local_worker_num = 1;
  cluster.hosts.push_back(b);
  std::string t = text();
  EXPECT_NE(t.find("\nhost node2 (node rank 1): node2, workdir /job\n  rank 1: DEVICE_ID=0 cpus - "
                   "log worker_1.log\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("job 20261129-154501-3fa9c2: 2 hosts, 2 workers"), std::string::npos);
}

TEST_F(DryRun, SparesComeLastAndStartNothing) {
  Host s;
  s.address = "198.18.0.9";
  s.user = "ms";
  s.spare = true;
  cluster.spares.push_back(s);
  std::string t = text();
  EXPECT_TRUE(
      t.ends_with("\nspare host 198.18.0.9: ms@198.18.0.9, workdir /job\n  starts nothing; "
                  "at a restart it replaces a host lost, unreachable or failed "
                  "--host_failures_to_exclude=2 times\n"))
      << t;
  EXPECT_NE(t.find("1 hosts, 1 workers"), std::string::npos) << t;
}

TEST_F(DryRun, DetachedCommands) {
  options.join = false;
  Plan plan = make_plan(options, cluster, literal_only);
  std::string t = describe_plan(plan, options);
  const Process& w = plan.hosts[0].processes[1];
  EXPECT_NE(t.find("    command: " + detached_command(w, plan.job_id, "logs/worker_0.log") + "\n"),
            std::string::npos)
      << t;
  EXPECT_EQ(t.find("exec 'env'"), std::string::npos);
}

TEST_F(DryRun, Simulation) {
  options.sim_level = 2;
  std::string t = text();
  // No scheduler runs, and no process is told an address.
  EXPECT_EQ(t.rfind("job 20261129-154501-3fa9c2: 1 hosts, 1 workers, no scheduler (simulation "
                    "level 2)\n",
                    0),
            0u)
      << t;
  EXPECT_EQ(t.find("8118"), std::string::npos) << t;
  EXPECT_EQ(t.find("scheduler:"), std::string::npos);
  EXPECT_NE(t.find("    MS_SIMULATION_LEVEL='2'\n"), std::string::npos);
}

TEST_F(DryRun, Bindings) {
  cluster.hosts[0].local_worker_num = 2;
  options.bind_core =
      parse_bind_core(R"({"scheduler":["0-1"],"device0":["2-3"],"device1":["4"]})", "x");
  options.bind_numa = parse_bind_numa(R"({"device1": 1})", "x");
  std::string t = text();
  EXPECT_NE(t.find("  scheduler: DEVICE_ID=- cpus 0-1 log scheduler.log\n"), std::string::npos)
      << t;
  EXPECT_NE(t.find("  rank 0: DEVICE_ID=0 cpus 2-3 log worker_0.log\n"), std::string::npos) << t;
  EXPECT_NE(t.find("  rank 1: DEVICE_ID=1 cpus 4 numa 1 log worker_1.log\n"), std::string::npos)
      << t;
  EXPECT_NE(t.find("'numactl' '--physcpubind=4' '--membind=1' 'python3'"), std::string::npos) << t;
  EXPECT_NE(t.find("'taskset' '-c' '2-3' 'python3'"), std::string::npos) << t;
}

TEST_F(DryRun, AutoBindingIsShownPending) {
  options.bind_core = parse_bind_core("True", "x");
  std::string t = text();
  EXPECT_NE(t.find("  rank 0: DEVICE_ID=0 cpus auto (from the host's topology at start-up) log "
                   "worker_0.log\n"),
            std::string::npos)
      << t;
}

TEST_F(DryRun, DescribeBindings) {
  cluster.hosts[0].local_worker_num = 2;
  options.bind_core =
      parse_bind_core(R"({"scheduler":["0-1"],"device0":["2-3"],"device1":["4"]})", "x");
  options.bind_numa = parse_bind_numa(R"({"device1": 1})", "x");
  EXPECT_EQ(describe_bindings(make_plan(options, cluster, literal_only)),
            "node   0  198.18.0.1       scheduler  DEVICE_ID=-   cpus 0-1\n"
            "node   0  198.18.0.1       rank 0     DEVICE_ID=0   cpus 2-3\n"
            "node   0  198.18.0.1       rank 1     DEVICE_ID=1   cpus 4 numa 1\n");
}

}  // namespace
}  // namespace msrun_ssh

namespace msrun_ssh {
namespace {

// With OpenSSH's answers: each host line says where ssh connects, and one section per group of
// hosts that share them the identities, jump, known_hosts and host key checking; a host ssh gave
// no answer for says why.
TEST_F(DryRun, ShowsTheSshSettingsOpensshGives) {
  Host b = cluster.hosts[0];
  b.address = "198.18.0.2";
  Host c = cluster.hosts[0];
  c.address = "198.18.0.3";
  cluster.hosts.push_back(b);
  cluster.hosts.push_back(c);
  Plan plan = make_plan(options, cluster, literal_only);
  SshHostConfig via;
  via.hostname = "10.0.0.1";
  via.port = 2200;
  via.user = "bob";
  via.identities_only = true;
  via.identity_files = {"/nonexistent/id", "/dev/null"};
  via.proxy_jump = "j0,j1";
  via.user_known_hosts_files = {"/k1", "/k2"};
  via.host_key_alias = "alias";
  via.strict_host_key_checking = HostKeyPolicy::kAcceptNew;
  SshHostConfig other = via;
  other.hostname = "10.0.0.2";
  std::vector<SshResolution> ssh{
      {via, "", ""}, {other, "", ""}, {std::nullopt, "no such file", ""}};
  std::string out = describe_plan(plan, options, {}, &ssh);
  EXPECT_NE(out.find("host 198.18.0.1 (node rank 0) [master]: bob@10.0.0.1:2200, workdir"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("host 198.18.0.2 (node rank 1): bob@10.0.0.2:2200, workdir"),
            std::string::npos);
  EXPECT_NE(out.find("host 198.18.0.3 (node rank 2): ssh config: no such file, workdir"),
            std::string::npos);
  EXPECT_NE(out.find("\nssh settings (as OpenSSH reads the ssh config: ssh -G):\n"
                     "  198.18.0.[1-2]:\n"
                     "    identities: /dev/null\n"
                     "    jump: j0,j1\n"
                     "    known_hosts: /k1 /k2 (under HostKeyAlias alias)\n"
                     "    host key checking: accept-new\n"),
            std::string::npos)
      << out;
  options.strict_host_key_checking = HostKeyPolicy::kNo;  // the option wins over the config
  EXPECT_NE(describe_plan(plan, options, {}, &ssh).find("host key checking: no\n"),
            std::string::npos);
  // With an agent to ask: under IdentitiesOnly only its copies of the listed keys, else all.
  for (auto& r : ssh)
    if (r.config) r.config->identity_agent = "/run/agent.sock";
  out = describe_plan(plan, options, {}, &ssh);
  EXPECT_NE(out.find("    identities: the agent's copies of these keys, then /dev/null\n"),
            std::string::npos)
      << out;
  for (auto& r : ssh)
    if (r.config) r.config->identities_only = false;
  out = describe_plan(plan, options, {}, &ssh);
  EXPECT_NE(out.find("    identities: the agent's keys, then /dev/null\n"), std::string::npos)
      << out;
}

// torchrun's contract has no scheduler and no DEVICE_ID: the text says what it has.
TEST_F(DryRun, TorchContractShowsTheRendezvousAndNoDeviceId) {
  options.contract = Contract::kTorch;
  std::string t = text();
  EXPECT_EQ(t.rfind("job 20261129-154501-3fa9c2: 1 hosts, 1 workers, rendezvous (MASTER_ADDR:"
                    "MASTER_PORT, RANK 0's store) at 198.18.0.1:8118\n",
                    0),
            0u)
      << t;
  EXPECT_NE(t.find("  rank 0: cpus - log worker_0.log\n"), std::string::npos) << t;
  EXPECT_EQ(t.find("DEVICE_ID"), std::string::npos) << t;
  EXPECT_EQ(t.find("scheduler"), std::string::npos) << t;
  // torchrun's defaults, which a value of the host's own environment keeps.
  EXPECT_NE(t.find("    NCCL_ASYNC_ERROR_HANDLING='1' (unless the host's environment sets it)\n"
                   "    TORCH_NCCL_ASYNC_ERROR_HANDLING=$NCCL_ASYNC_ERROR_HANDLING (unless the "
                   "host's environment sets it)\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("'msrun-ssh-defaults' 'NCCL_ASYNC_ERROR_HANDLING=1'"), std::string::npos) << t;
}

}  // namespace
}  // namespace msrun_ssh
