// The srun transport (process.h) on real local processes: SrunTransport runs
// tests/unit/fake_srun.sh in place of Slurm's srun (it checks the options, records its argv and
// runs the step here), so the framing, exit statuses, stdin, signals, start failures, phase one and
// the runner's watchdog protocol are all exercised for real; `--transport srun`'s usage errors
// through the parser.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "channel_recorder.h"
#include "msrun_ssh/agent.h"
#include "msrun_ssh/cli.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/output.h"
#include "msrun_ssh/process.h"
#include "msrun_ssh/runner.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

using Kind = TransportEvent::Kind;
using test::slurp;

const std::string kFakeSrun = std::string(MSRUN_SSH_SOURCE_DIR) + "/tests/unit/fake_srun.sh";

TEST(SrunArgv, OneTaskOnTheNodeOverlappingUnboundUnbufferedQuiet) {
  EXPECT_EQ(
      srun_argv("srun", "node3", "echo hi"),
      (std::vector<std::string>{"srun", "--nodes=1", "--ntasks=1", "--ntasks-per-node=1",
                                "--nodelist=node3", "--overlap", "--cpu-bind=none", "--export=ALL",
                                "--kill-on-bad-exit=1", "--unbuffered", "--quiet", "/bin/sh", "-c",
                                "printf 'msrun-ssh-srun: started\\n'\necho hi"}));
}

TEST(SrunErrors, NodesOutsideTheAllocationOrDownAreUnreachable) {
  EXPECT_EQ(classify_srun_error(
                "srun: error: Unable to create step for job 7: Invalid node name specified"),
            ConnectError::kUnreachable);
  EXPECT_EQ(classify_srun_error("srun: error: Unable to create step for job 7: Requested node "
                                "configuration is not available"),
            ConnectError::kUnreachable);
  EXPECT_EQ(classify_srun_error("msrun-ssh: cannot run srun: No such file or directory"),
            ConnectError::kOther);
}

// What a channel saw.

class SrunOverFake : public test::TempDirTest, public test::ChannelRecorder {
 protected:
  void SetUp() override {
    setenv("SLURM_JOB_ID", "42", 1);
    setenv("FAKE_SRUN_LOG", (dir_ + "/argv").c_str(), 1);
  }
  void TearDown() override {
    unsetenv("SLURM_JOB_ID");
    unsetenv("FAKE_SRUN_LOG");
  }
  SrunSettings settings(std::vector<std::string> nodes) {
    SrunSettings s;
    s.nodes = std::move(nodes);
    s.program = kFakeSrun;
    s.connect_timeout_s = 2;
    return s;
  }
  // The argv of the last srun started, as it recorded it.
  std::vector<std::string> last_argv() const {
    std::string text = slurp(dir_ + "/argv");
    std::vector<std::string> args;
    for (size_t at = 0, nul; (nul = text.find('\0', at)) != std::string::npos; at = nul + 1)
      args.push_back(text.substr(at, nul - at));
    return args;
  }
};

TEST_F(SrunOverFake, OutputExitStatusAndStdinAsOverSsh) {
  SrunTransport t(settings({"node1"}));
  ChannelId a = t.exec(0, "echo out; echo err >&2; printf 'no newline'; exit 3");
  ChannelId b = t.exec(0, "read x; echo \"got $x\"");
  ChannelId c = t.exec(0, "kill -TERM $$");
  t.write(b, "line\n");
  t.send_eof(b);
  run_until(t, closed({a, b, c}));
  EXPECT_EQ(seen[a].out, "out\nno newline") << "the start marker is not output";
  EXPECT_EQ(seen[a].err, "err\n");
  EXPECT_EQ(seen[a].status, 3);
  EXPECT_EQ(seen[a].signal, "");
  EXPECT_EQ(seen[b].out, "got line\n");
  EXPECT_EQ(seen[b].status, 0);
  EXPECT_EQ(seen[c].status, 143);
  EXPECT_EQ(seen[c].signal, "TERM");
}

TEST_F(SrunOverFake, KillEndsTheWholeStepThroughSrun) {
  SrunTransport t(settings({"node1"}));
  ChannelId a = t.exec(0, "echo up; sleep 30 & wait");
  run_until(t, [&] { return seen[a].out == "up\n"; });
  double asked = t.now_ms();
  t.kill(a, "KILL");
  run_until(t, closed({a}));
  EXPECT_LT(t.now_ms() - asked, 5000) << "the sleep went with it: its output closed";
  EXPECT_EQ(seen[a].status, 137);
  EXPECT_EQ(seen[a].signal, "KILL");
  EXPECT_EQ(last_argv(), (std::vector<std::string>{
                             kFakeSrun, "--nodes=1", "--ntasks=1", "--ntasks-per-node=1",
                             "--nodelist=node1", "--overlap", "--cpu-bind=none", "--export=ALL",
                             "--kill-on-bad-exit=1", "--unbuffered", "--quiet", "/bin/sh", "-c",
                             "printf 'msrun-ssh-srun: started\\n'\necho up; "
                             "sleep 30 & wait"}));
}

TEST_F(SrunOverFake, OtherSignalsAreForwardedToTheStep) {
  SrunTransport t(settings({"node1"}));
  ChannelId a = t.exec(0, "trap 'echo usr1; exit 5' USR1; echo up; while :; do sleep 0.05; done");
  run_until(t, [&] { return seen[a].out == "up\n"; });
  t.kill(a, "USR1");
  run_until(t, closed({a}));
  EXPECT_EQ(seen[a].out, "up\nusr1\n");
  EXPECT_EQ(seen[a].status, 5);
}

TEST_F(SrunOverFake, CancelStopsAStepNotStartedYetAndLeavesAStartedOneAlone) {
  SrunTransport t(settings({"slow1", "node1"}));
  ChannelId pending = t.exec(0, "echo never");
  ChannelId running = t.exec(1, "echo up; sleep 0.3; echo done");
  run_until(t, [&] { return seen[running].out == "up\n"; });
  t.cancel(pending);
  t.cancel(running);
  run_until(t, closed({pending, running}));
  EXPECT_EQ(seen[pending].out, "");
  EXPECT_NE(seen[pending].failed, "");
  EXPECT_EQ(seen[running].out, "up\ndone\n");
  EXPECT_EQ(seen[running].status, 0);
}

TEST_F(SrunOverFake, ASrunThatCannotStartTheStepFailsTheChannelWithItsError) {
  SrunTransport t(settings({"down1"}));
  ChannelId a = t.exec(0, "echo never");
  run_until(t, closed({a}));
  EXPECT_EQ(seen[a].failed,
            "srun: error: Unable to create step for job 42: Invalid node name specified");
  EXPECT_EQ(seen[a].status, -1) << "no exit status: the command never ran";
}

TEST_F(SrunOverFake, PhaseOneMapsSrunsFailuresToConnectionFailures) {
  SrunSettings s = settings({"node1", "down1", "slow1"});
  s.connect_timeout_s = 1;
  std::vector<std::pair<size_t, bool>> progress;
  s.on_connect_progress = [&](size_t h, bool ok) {
    if (h != std::string::npos) progress.emplace_back(h, ok);
  };
  SrunTransport t(std::move(s));
  auto failures = t.connect_all({1, 1, 1});
  ASSERT_EQ(failures.size(), 3u);
  EXPECT_FALSE(failures[0]);
  ASSERT_TRUE(failures[1]);
  EXPECT_EQ(failures[1]->kind, ConnectError::kUnreachable);
  EXPECT_EQ(failures[1]->reason,
            "srun: error: Unable to create step for job 42: Invalid node name specified");
  ASSERT_TRUE(failures[2]);
  EXPECT_EQ(failures[2]->kind, ConnectError::kTimedOut);
  EXPECT_EQ(failures[2]->reason, "srun did not start a step within 1 s");
  EXPECT_TRUE(t.warnings().empty());
  std::sort(progress.begin(), progress.end());
  EXPECT_EQ(progress, (std::vector<std::pair<size_t, bool>>{{0, true}, {1, false}}));
}

TEST_F(SrunOverFake, NoSrunFailsEveryHostAsAnOtherFailure) {
  SrunSettings s = settings({"node1"});
  s.program = dir_ + "/no-such-srun";
  SrunTransport t(std::move(s));
  auto failures = t.connect_all({1});
  ASSERT_TRUE(failures[0]);
  EXPECT_EQ(failures[0]->kind, ConnectError::kOther);
  EXPECT_EQ(failures[0]->reason,
            "msrun-ssh: cannot run " + dir_ + "/no-such-srun: No such file or directory");
}

// The runner's whole protocol through srun: a watchdog step per host, a step per process, a failing
// rank, the teardown by the watchdogs' sweep, every step ended.
TEST_F(SrunOverFake, TheRunnerTearsAJobDownThroughItsWatchdogSteps) {
  Plan plan;
  plan.job_id = "srun-test-" + std::to_string(getpid());
  for (int h = 0; h < 2; ++h) {
    HostPlan hp;
    hp.node_rank = h;
    hp.host.address = "node" + std::to_string(h);
    Process p;
    p.rank = h;
    p.local_index = 0;
    p.log_name = "worker_" + std::to_string(h) + ".log";
    p.workdir = dir_;
    p.argv = h == 0 ? std::vector<std::string>{"sleep", "30"}
                    : std::vector<std::string>{"/bin/sh", "-c", "sleep 0.5; echo bye; exit 3"};
    hp.processes.push_back(p);
    plan.hosts.push_back(hp);
  }
  plan.worker_num = 2;
  Options options;
  options.heartbeat = 1;
  options.kill_grace = 1;
  options.connect_timeout = 10;
  options.log_dir = dir_ + "/logs";
  OutputConfig oc;
  oc.log_dir = options.log_dir;
  oc.console_out = ::open((dir_ + "/console.out").c_str(), O_WRONLY | O_CREAT, 0600);
  oc.console_err = ::open((dir_ + "/console.err").c_str(), O_WRONLY | O_CREAT, 0600);
  Output::make_log_dir(oc.log_dir);
  SrunTransport t(settings({"node0", "node1"}));
  int status = -1;
  std::vector<SummaryRow> rows;
  {
    Output out(oc);
    Runner runner(plan, options, t, out, -1, -1);
    status = runner.run();
    rows = runner.summary();
  }
  ::close(oc.console_out);
  ::close(oc.console_err);
  EXPECT_EQ(status, 3);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].status, "exit 3");
  EXPECT_TRUE(rows[0].torn_down) << rows[0].status;
  EXPECT_EQ(slurp(dir_ + "/logs/worker_1.log"), "bye\n");
  // Nothing of the job is left ("[M]": not pgrep's own shell).
  EXPECT_EQ(test::shell_output("pgrep -f '[M]SRUN_SSH_JOB=" + plan.job_id + "' || true"), "");
}

// The launch agent over srun: one step per host carries every command there, its binary frames
// unharmed.
TEST_F(SrunOverFake, TheLaunchAgentRunsAsOneStepPerHost) {
  SrunTransport srun(settings({"node1"}));
  AgentTransport t(srun, 1, agent_command(30));
  ChannelId a = t.exec(0, "printf 'x%.0s' $(seq 1 100000); exit 4");
  ChannelId b = t.exec(0, "read x; echo \"got $x\"");
  t.write(b, "line\n");
  t.send_eof(b);
  run_until(t, closed({a, b}));
  EXPECT_EQ(seen[a].out, std::string(100000, 'x'));
  EXPECT_EQ(seen[a].status, 4);
  EXPECT_EQ(seen[b].out, "got line\n");
  EXPECT_TRUE(t.direct_hosts().empty()) << "python3 is here: the agent ran";
  EXPECT_EQ(last_argv().back().find("printf 'msrun-ssh-srun: started\\n'\nset -- "), 0u);
}

TEST(SrunUsage, NeedsAnAllocationAndSrunOnPath) {
  test::TempDir tmp;
  std::string bin = tmp.path() + "/bin";
  ASSERT_EQ(
      std::system(("mkdir -p " + bin + " && ln -s " + kFakeSrun + " " + bin + "/srun").c_str()), 0);
  auto parse = [](std::map<std::string, std::string> env) {
    return test::error_of([&] {
      parse_args({"--hostfile", "slurm", "--transport", "srun", "train.py"},
                 [env](const char* name) -> const char* {
                   auto it = env.find(name);
                   return it == env.end() ? nullptr : it->second.c_str();
                 });
    });
  };
  EXPECT_EQ(parse({{"PATH", bin}}),
            "--transport srun: not inside a Slurm allocation (SLURM_JOB_ID is not set); start "
            "msrun-ssh under salloc or sbatch");
  EXPECT_EQ(parse({{"SLURM_JOB_ID", "7"}, {"PATH", tmp.path() + ":/nonexistent"}}),
            "--transport srun: srun is not on PATH");
  EXPECT_EQ(parse({{"SLURM_JOB_ID", "7"}, {"PATH", "/nonexistent:" + bin}}), "no error");
  EXPECT_EQ(test::error_of([] {
              parse_args({"--hostfile", "h", "--transport", "rsh", "t.py"},
                         [](const char*) -> const char* { return nullptr; });
            }),
            "--transport=rsh: expects ssh or srun");
}

}  // namespace
}  // namespace msrun_ssh
