// The job runner (src/runner/runner.cc) against FakeTransport: scripted hosts, a fake clock, no SSH
// and no sleeping. Every test states the exit status, the summary, the bytes each watchdog got and
// when, on the fake clock (ms). Unless a test says otherwise: --heartbeat 5, --kill_grace 5,
// --connect_timeout 10; watchdogs say ready 10 ms after their exec, so processes start at 10 ms and
// the first heartbeat goes at 10 ms; echoes take 1 ms, a teardown 100 ms, a SIGKILL 10 ms.
#include "msrun_ssh/runner.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "fake_transport.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/stacks.h"
#include "test_util.h"

namespace {

namespace ms = msrun_ssh;
namespace fs = std::filesystem;
using ms::fake::FakeTransport;
using ms::fake::HostScript;
using ms::fake::ProcScript;
using Strings = std::vector<std::string>;
using Times = std::vector<double>;

const std::string kTerm = "killed by SIGTERM (ended by teardown)";
const std::string kKill = "killed by SIGKILL (ended by teardown)";

using ms::test::slurp;

// Hosts node0, node1, ... with that many workers each (global ranks in order), and the scheduler
// first on node0 when asked.
ms::Plan make_plan(const std::vector<int>& workers, bool scheduler = false) {
  ms::Plan plan;
  plan.job_id = "job-1";
  int rank = 0;
  for (size_t h = 0; h < workers.size(); ++h) {
    ms::HostPlan hp;
    hp.node_rank = static_cast<int>(h);
    hp.host.address = "node" + std::to_string(h);
    hp.is_master = h == 0;
    auto add = [&](ms::Role role, int r, int local, const std::string& log) {
      ms::Process p;
      p.role = role;
      p.rank = r;
      p.local_index = local;
      p.log_name = log;
      p.workdir = "/w";
      p.argv = {"python3", "train.py"};
      hp.processes.push_back(p);
    };
    if (scheduler && h == 0) add(ms::Role::kScheduler, 0, -1, "scheduler.log");
    for (int i = 0; i < workers[h]; ++i, ++rank)
      add(ms::Role::kWorker, rank, i, "worker_" + std::to_string(rank) + ".log");
    plan.hosts.push_back(std::move(hp));
  }
  plan.worker_num = rank;
  return plan;
}

ProcScript exits(double at, int status = 0) {
  ProcScript p;
  p.exit_at = at;
  p.status = status;
  return p;
}

HostScript host(std::vector<ProcScript> processes = {}) {
  HostScript h;
  h.processes = std::move(processes);
  return h;
}

class Runner : public ms::test::TempDirTest {
 protected:
  void SetUp() override {
    options_.heartbeat = 5;
    options_.kill_grace = 5;
    options_.connect_timeout = 10;
    options_.log_dir = dir_ + "/logs";
    options_.job_id = "job-1";
    options_.watch = false;  // the samplers' channels have a test of their own (Watch*, below)
    console_out_ = ::open((dir_ + "/console.out").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    console_err_ = ::open((dir_ + "/console.err").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(console_out_, 0);
    ASSERT_GE(console_err_, 0);
  }

  void TearDown() override {
    runner_.reset();
    output_.reset();
    ::close(console_out_);
    ::close(console_err_);
  }

  // Builds the runner (scheduled callbacks reach it through runner()), runs it to its end on the
  // fake clock, and keeps the summary and the time it returned.
  int run(FakeTransport& fake, int stdin_fd = -1, int signal_fd = -1, int attempt = 1) {
    ms::OutputConfig oc;
    oc.log_dir = options_.log_dir;
    oc.console_out = console_out_;
    oc.console_err = console_err_;
    ms::Output::make_log_dir(oc.log_dir);
    output_ = std::make_unique<ms::Output>(oc);
    runner_ = std::make_unique<ms::Runner>(plan_, options_, fake, *output_, signal_fd, stdin_fd);
    runner_->set_attempt(attempt);
    if (stop_self_) runner_->set_stop_self(stop_self_);
    if (events_) runner_->set_events(events_.get());
    int code = runner_->run();
    ended_ms_ = fake.now_ms();
    rows_ = runner_->summary();
    output_->flush();
    return code;
  }

  ms::Runner& runner() { return *runner_; }

  Strings statuses() const {
    Strings s;
    for (const auto& r : rows_) s.push_back(r.status);
    return s;
  }
  std::vector<bool> failed() const {
    std::vector<bool> f;
    for (const auto& r : rows_) f.push_back(r.failed);
    return f;
  }
  std::string console_out() const { return slurp(dir_ + "/console.out"); }
  std::string console_err() const { return slurp(dir_ + "/console.err"); }
  std::string log(const std::string& name) const { return slurp(options_.log_dir + "/" + name); }

  // The events of the run (with_events() before run()), one object per line.
  void with_events() { events_ = std::make_unique<ms::EventLog>(dir_ + "/events.jsonl"); }
  std::vector<nlohmann::json> events() const {
    std::vector<nlohmann::json> out;
    std::istringstream in(slurp(dir_ + "/events.jsonl"));
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }
  Strings event_types() const {
    Strings types;
    for (const auto& e : events()) types.push_back(e.at("type"));
    return types;
  }

  ms::Options options_;
  ms::Plan plan_;
  std::unique_ptr<ms::EventLog> events_;
  std::function<void()> stop_self_;  // how the runner stops itself at Ctrl-Z (null: SIGSTOP)
  int console_out_ = -1;
  int console_err_ = -1;
  std::unique_ptr<ms::Output> output_;
  std::unique_ptr<ms::Runner> runner_;
  std::vector<ms::SummaryRow> rows_;
  double ended_ms_ = -1;
};

// --- The straggler watch (--watch; watch.h) -----------------------------------------------------

// A host's sampler (sampler.pl) printing, once a second for `seconds` s, `busy` CPUs of use for
// each of `ranks`.
ProcScript sampler(const Strings& ranks, double busy, int seconds) {
  ProcScript p;
  for (int i = 0; i < seconds; ++i) {
    std::string rs = ms::test::sampler_ranks(ranks, 100 * busy * i, 1, 'S');
    p.output.push_back({0.05 + i, fmt::format("{{\"t\":{},\"hz\":100,\"cpu\":[],\"ranks\":[{}]}}\n",
                                              1000 + i, rs)});
  }
  return p;
}

TEST_F(Runner, WatchNamesTheHostTheOthersWaitForAndEndsItsSamplers) {
  plan_ = make_plan({2, 2});
  options_.watch = true;
  HostScript fast = host({exits(12), exits(12)}), slow = host({exits(12), exits(12)});
  fast.other_commands = {{"exec perl -e", sampler({"0", "1"}, 0.1, 11)}};
  slow.other_commands = {{"exec perl -e", sampler({"2", "3"}, 0.95, 11)}};
  FakeTransport fake({fast, slow});
  with_events();
  EXPECT_EQ(run(fake), 0);
  std::vector<nlohmann::json> raised;
  for (const auto& e : events())
    if (e.at("type") == "straggler") raised.push_back(e);
  ASSERT_EQ(raised.size(), 1u) << console_err();
  EXPECT_EQ(raised[0].at("host"), "node1");
  EXPECT_EQ(raised[0].at("ranks"), (Strings{"2", "3"}));
  EXPECT_NE(console_err().find("straggler: node1 (ranks 2, 3): the others wait for it"),
            std::string::npos)
      << console_err();
  ASSERT_EQ(runner().stragglers().size(), 1u);
  EXPECT_EQ(runner().stragglers()[0].host, "node1");
  EXPECT_LT(runner().stragglers()[0].since, 6);
  // One sampler per host, over the job's own transport; both ended with the job.
  Strings samplers;
  for (const auto& c : fake.channels())
    if (c.command.find("exec perl -e") != std::string::npos) samplers.push_back(c.command);
  ASSERT_EQ(samplers.size(), 2u);
  EXPECT_TRUE(samplers[0].ends_with("'job-1' 1 '0,1'"))
      << samplers[0].substr(samplers[0].size() - 40);
  EXPECT_TRUE(samplers[1].ends_with("'job-1' 1 '2,3'"));
  size_t killed = 0;
  for (const auto& k : fake.kills)
    killed += fake.channels().at(static_cast<size_t>(k.channel)).command.find("exec perl -e") !=
              std::string::npos;
  EXPECT_EQ(killed, 2u);
}

// The samplers start one interval after the processes, on the hosts where one still runs: a job
// that ends sooner starts none.
TEST_F(Runner, WatchStartsTheSamplersASecondAfterTheProcessesAndNotForAShorterJob) {
  plan_ = make_plan({1, 1});
  options_.watch = true;
  auto samplers = [](const FakeTransport& fake) {
    std::vector<double> opened;
    for (const auto& c : fake.channels())
      if (c.command.find("exec perl -e") != std::string::npos) opened.push_back(c.opened_ms);
    return opened;
  };
  HostScript a = host({exits(0.5)}), b = host({exits(0.6)});
  a.other_commands = b.other_commands = {{"exec perl -e", sampler({"0"}, 0.1, 3)}};
  FakeTransport short_job({a, b});
  EXPECT_EQ(run(short_job), 0);
  EXPECT_TRUE(samplers(short_job).empty());

  HostScript c = host({exits(3)}), d = host({exits(3)});
  c.other_commands = d.other_commands = {{"exec perl -e", sampler({"0"}, 0.1, 3)}};
  FakeTransport long_job({c, d});
  EXPECT_EQ(run(long_job), 0);
  double started = 0;
  for (const auto& ch : long_job.channels())
    if (ch.index == 0) started = std::max(started, ch.opened_ms);
  std::vector<double> opened = samplers(long_job);
  ASSERT_EQ(opened.size(), 2u);
  for (double t : opened) {
    EXPECT_GE(t, started + 1000);
    EXPECT_LT(t, started + 1500);
  }

  // A host whose processes have all ended by then gets none: it has nothing to sample.
  HostScript e = host({exits(0.5)}), f = host({exits(3)});
  e.other_commands = f.other_commands = {{"exec perl -e", sampler({"0"}, 0.1, 3)}};
  FakeTransport one_done({e, f});
  EXPECT_EQ(run(one_done), 0);
  std::vector<size_t> on;
  for (const auto& ch : one_done.channels())
    if (ch.command.find("exec perl -e") != std::string::npos) on.push_back(ch.host);
  EXPECT_EQ(on, std::vector<size_t>{1});
}

// --- Normal end ----------------------------------------------------------------------------------

TEST_F(Runner, AllExitZeroSendsQuitAfterTheLastExitAndWaitsForTheWatchdogs) {
  plan_ = make_plan({3, 3});
  FakeTransport fake(
      {host({exits(1), exits(2), exits(3)}), host({exits(1.5), exits(2.5), exits(0.5)})});
  EXPECT_EQ(run(fake), 0);
  EXPECT_EQ(fake.control(0), "hq");
  EXPECT_EQ(fake.control(1), "hq");
  EXPECT_EQ(fake.control_times(0, 'q'), Times{3010});  // the last exit: rank 2 at 10 + 3000
  EXPECT_EQ(fake.control_times(1, 'q'), Times{3010});
  EXPECT_EQ(ended_ms_, 3110);  // both watchdogs swept for 100 ms and closed
  EXPECT_EQ(statuses(), Strings(6, "exit 0"));
  EXPECT_EQ(failed(), std::vector<bool>(6, false));
  EXPECT_DOUBLE_EQ(rows_[0].seconds, 1.0);
  EXPECT_DOUBLE_EQ(rows_[2].seconds, 3.0);
  EXPECT_DOUBLE_EQ(rows_[5].seconds, 0.5);
  EXPECT_EQ(rows_[4].host, "node1");
  EXPECT_EQ(rows_[4].process, "rank 4");
  EXPECT_EQ(console_err(), "");
  EXPECT_TRUE(fake.drops.empty());
}

TEST_F(Runner, WatchdogsStartFirstAndProcessesOnlyWhenAllAreReady) {
  plan_ = make_plan({1, 1});
  HostScript slow = host({exits(1)});
  slow.ready_after = 2;
  FakeTransport fake({host({exits(1)}), slow});
  EXPECT_EQ(run(fake), 0);
  ASSERT_EQ(fake.channels().size(), 4u);
  EXPECT_TRUE(fake.channel(0).watchdog);
  EXPECT_TRUE(fake.channel(1).watchdog);
  EXPECT_NE(fake.channel(0).command.find("msrun-ssh-watchdog 'job-1' 10.000 25 13"),
            std::string::npos);
  EXPECT_EQ(fake.channel(fake.process(0, 0)).opened_ms, 2000);
  EXPECT_EQ(fake.channel(fake.process(1, 0)).opened_ms, 2000);
  EXPECT_EQ(fake.channel(fake.process(0, 0))
                .command.rfind("cd -- '/w' && exec 'env' '--' 'MSRUN_SSH_JOB=job-1' ", 0),
            0u);
}

// A workdir a host does not have: named with the host before any process starts, exit 2.
TEST_F(Runner, AMissingWorkdirIsNamedBeforeAnythingStarts) {
  plan_ = make_plan({1, 1});
  plan_.hosts[1].host.workdir = "/x/y";
  HostScript missing = host({exits(1)});
  missing.no_workdir = true;
  FakeTransport fake({host({exits(1)}), missing});
  EXPECT_EQ(run(fake), 2);
  EXPECT_NE(fake.channel(1).command.find("msrun-ssh-watchdog 'job-1' 10.000 25 13 '/x/y'"),
            std::string::npos);
  EXPECT_EQ(fake.channels().size(), 2u) << "a process started";
  EXPECT_EQ(runner().cause(), "workdir /x/y does not exist on node1 (or cannot be entered)");
  EXPECT_TRUE(runner().workdir_missing());  // no restart: it would meet the same
  EXPECT_NE(console_err().find("workdir /x/y does not exist on node1"), std::string::npos);
}

// A log that cannot be made (here a directory of its name: root opens any file) fails the run
// before any process starts, exit 2, and the watchdogs are told to end.
TEST_F(Runner, ALogThatCannotBeMadeStartsNothing) {
  plan_ = make_plan({1, 1});
  ms::Output::make_log_dir(options_.log_dir);
  ASSERT_EQ(::mkdir((options_.log_dir + "/worker_1.log").c_str(), 0700), 0);
  FakeTransport fake({host({exits(1)}), host({exits(1)})});
  EXPECT_EQ(run(fake), 2);
  EXPECT_EQ(fake.channels().size(), 2u) << "a process started";
  EXPECT_EQ(runner().cause(), "cannot open log file " + options_.log_dir +
                                  "/worker_1.log: Is a directory (nothing was started)");
  EXPECT_EQ(statuses(), (Strings{"not started", "not started"}));
  EXPECT_TRUE(runner().logs_failed());  // final: no restart would do better
}

TEST_F(Runner, LeftoversSweptAfterQuitAreReported) {
  plan_ = make_plan({1});
  HostScript h = host({exits(1)});
  h.sweep_lines = {"killed 4242 SIGTERM python3 stray.py"};
  FakeTransport fake({h});
  EXPECT_EQ(run(fake), 0);
  EXPECT_EQ(console_err(),
            "msrun-ssh: node0: ended a process the job left behind: 4242 SIGTERM python3 "
            "stray.py\n");
}

// --- Failures ------------------------------------------------------------------------------------

TEST_F(Runner, FirstFailureTearsDownEveryHostAndDecidesTheExitStatus) {
  plan_ = make_plan({3, 3});
  ProcScript rank3 = exits(1, 7);
  rank3.errors = {{0.5, "Traceback\nValueError: boom\n"}};
  FakeTransport fake({host(), host({rank3})});
  EXPECT_EQ(run(fake), 7);
  EXPECT_EQ(fake.control(0), "hk");
  EXPECT_EQ(fake.control(1), "hk");
  EXPECT_EQ(fake.control_times(0, 'k'), Times{1010});
  EXPECT_EQ(fake.control_times(1, 'k'), Times{1010});
  EXPECT_EQ(ended_ms_, 1110);
  EXPECT_EQ(statuses(), (Strings{kTerm, kTerm, kTerm, "exit 7", kTerm, kTerm}));
  EXPECT_EQ(failed(), (std::vector<bool>{false, false, false, true, false, false}));
  EXPECT_EQ(rows_[3].last_lines, (Strings{"Traceback", "ValueError: boom"}));
  EXPECT_TRUE(rows_[0].last_lines.empty());
  EXPECT_DOUBLE_EQ(rows_[3].seconds, 1.0);
  EXPECT_DOUBLE_EQ(rows_[0].seconds, 1.1);
  EXPECT_EQ(console_err(),
            "[3@node1 err] Traceback\n[3@node1 err] ValueError: boom\n"
            "msrun-ssh: rank 3 on node1 failed: exit 7; stopping the job on every host\n");
}

TEST_F(Runner, DeathBySignalIsAFailureWithItsStatus) {
  plan_ = make_plan({2});
  ProcScript segv = exits(1, 139);
  segv.signal = "SEGV";
  FakeTransport fake({host({segv})});
  EXPECT_EQ(run(fake), 139);
  EXPECT_EQ(statuses(), (Strings{"killed by SIGSEGV", kTerm}));
  EXPECT_EQ(failed(), (std::vector<bool>{true, false}));
}

TEST_F(Runner, TwoFailuresTheFirstOneWins) {
  plan_ = make_plan({3, 3});
  FakeTransport fake({host({ProcScript{}, exits(1, 3)}), host({ProcScript{}, exits(1.05, 5)})});
  EXPECT_EQ(run(fake), 3);
  EXPECT_EQ(rows_[1].status, "exit 3");
  EXPECT_TRUE(rows_[1].failed);
  EXPECT_EQ(fake.control(0), "hk");
  EXPECT_EQ(console_err(),
            "msrun-ssh: rank 1 on node0 failed: exit 3; stopping the job on every host\n");
}

TEST_F(Runner, TwoFailuresAtTheSameInstantTheFirstReportedWins) {
  plan_ = make_plan({1, 1});
  FakeTransport fake({host({exits(1, 3)}), host({exits(1, 5)})});
  EXPECT_EQ(run(fake), 3);
  EXPECT_EQ(fake.control(0), "hk");
  EXPECT_EQ(fake.control(1), "hk");
}

TEST_F(Runner, ProcessThatCannotStartFailsTheJob) {
  plan_ = make_plan({3, 3});
  ProcScript refused;
  refused.open_error = "administratively prohibited";
  FakeTransport fake({host(), host({ProcScript{}, refused})});
  EXPECT_EQ(run(fake), 255);
  EXPECT_EQ(fake.control(0), "hk");
  EXPECT_EQ(fake.control(1), "hk");
  EXPECT_EQ(fake.control_times(1, 'k'), Times{11});
  EXPECT_EQ(statuses(), (Strings{kTerm, kTerm, kTerm, kTerm,
                                 "not started: administratively prohibited", kTerm}));
  EXPECT_TRUE(rows_[4].failed);
  EXPECT_EQ(console_err(),
            "msrun-ssh: cannot start rank 4 on node1: administratively prohibited; stopping the "
            "job on every host\n");
}

TEST_F(Runner, ChannelClosedWithoutExitStatusIsAFailure) {
  plan_ = make_plan({3});
  ProcScript vanished = exits(1);
  vanished.exit_status = false;
  FakeTransport fake({host({ProcScript{}, ProcScript{}, vanished})});
  EXPECT_EQ(run(fake), 255);
  EXPECT_EQ(fake.control(0), "hk");
  EXPECT_EQ(statuses(), (Strings{kTerm, kTerm, "no exit status"}));
  EXPECT_EQ(failed(), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(console_err(),
            "msrun-ssh: rank 2 on node0 ended without an exit status; stopping the job on every "
            "host\n");
}

TEST_F(Runner, WatchdogEndingUnexpectedlyFailsTheJob) {
  plan_ = make_plan({1, 1});
  HostScript gone = host();
  gone.watchdog_exits_at = 2;
  gone.other_commands = {{"msrun-ssh-stop", ProcScript{.exit_at = 0.05}}};
  FakeTransport fake({host(), gone});
  EXPECT_EQ(run(fake), 255);
  // What the job left on node1 beyond its channels' reach is swept by `stop`'s program at once.
  std::vector<std::string> stops;
  for (msrun_ssh::ChannelId c = 0; c < fake.channel_count(); ++c)
    if (fake.channel(c).command.find("msrun-ssh-stop") != std::string::npos) {
      EXPECT_EQ(fake.channel(c).host, 1u);
      EXPECT_EQ(fake.channel(c).opened_ms, 2000);
      stops.push_back(fake.channel(c).command);
    }
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0], msrun_ssh::stop_command(plan_.job_id, options_.kill_grace));
  EXPECT_EQ(fake.control(0), "hk");
  EXPECT_EQ(fake.control(1), "h");  // nothing is written to a closed watchdog
  EXPECT_EQ(fake.writes_after_close, 0);
  EXPECT_EQ(
      console_err(),
      "msrun-ssh: the watchdog on node1 ended unexpectedly; stopping the job on every host\n");
  // No watchdog is left on node1 to end its process: once node0's watchdog is done (100 ms), the
  // process gets an SSH "signal" KILL through its own channel (10 ms).
  EXPECT_EQ(statuses(), (Strings{kTerm, kKill}));
  ASSERT_EQ(fake.kills.size(), 1u);
  EXPECT_EQ(fake.kills[0].channel, fake.process(1, 0));
  EXPECT_EQ(ended_ms_, 2000 + 100 + 10);
}

// A watchdog that ends in the middle of the teardown, before it said it is done (killed on its
// host), leaves its host to the same sweep: what its processes left there would stay (fault
// campaign seed 20261209, trial 11: a rank's grandchild in a session of its own). One that said
// it is done leaves nothing to sweep.
TEST_F(Runner, AWatchdogEndingInTheMiddleOfTheTeardownIsSweptInItsPlace) {
  plan_ = make_plan({1, 1});
  HostScript dying = host();
  dying.teardown_delay = 0.5;
  dying.watchdog_exits_at = 1.2;  // the teardown began at 1.0; its SIGTERMs were due at 1.5
  dying.other_commands = {{"msrun-ssh-stop", ProcScript{.exit_at = 0.05}}};
  FakeTransport fake({host({exits(1.0, 1)}), dying});
  EXPECT_EQ(run(fake), 1);
  std::vector<std::pair<size_t, double>> stops;
  for (msrun_ssh::ChannelId c = 0; c < fake.channel_count(); ++c)
    if (fake.channel(c).command.find("msrun-ssh-stop") != std::string::npos)
      stops.emplace_back(fake.channel(c).host, fake.channel(c).opened_ms);
  EXPECT_EQ(stops, (std::vector<std::pair<size_t, double>>{{1u, 1200.0}}));
}

// The launcher waits for that sweep: its exit would close the connection under it, and what it was
// to end (a grandchild in a session of its own) would be left there (CI, 2026-12-05).
TEST_F(Runner, TheSweepInPlaceOfAWatchdogIsWaitedFor) {
  plan_ = make_plan({1, 1});
  HostScript gone = host();
  gone.watchdog_exits_at = 2;
  gone.other_commands = {{"msrun-ssh-stop", ProcScript{.exit_at = 1.5}}};
  FakeTransport fake({host(), gone});
  EXPECT_EQ(run(fake), 255);
  msrun_ssh::ChannelId stop = -1;
  for (msrun_ssh::ChannelId c = 0; c < fake.channel_count(); ++c)
    if (fake.channel(c).command.find("msrun-ssh-stop") != std::string::npos) stop = c;
  ASSERT_GE(stop, 0);
  EXPECT_GE(ended_ms_, 2000 + 1500);  // not at 2110, with the sweep still running
  EXPECT_LT(ended_ms_, 2000 + 1500 + 100);
}

TEST_F(Runner, WatchdogEndedBySigtermEndsTheJobAs143NotAsALostHost) {
  // scancel of the allocation: Slurm ends node1's watchdog step before salloc -K's SIGTERM
  // reaches the launcher (if it ever does).
  plan_ = make_plan({1, 1});
  HostScript cancelled = host();
  cancelled.watchdog_terminated_at = 2;
  FakeTransport fake({host(), cancelled});
  EXPECT_EQ(run(fake), 143);
  EXPECT_TRUE(runner().interrupted());  // never restarted
  EXPECT_EQ(console_err(),
            "msrun-ssh: the watchdog on node1 received SIGTERM (the job was ended there from "
            "outside); stopping the job on every host\n");
  EXPECT_EQ(fake.control(0), "hk");
  EXPECT_EQ(statuses(), (Strings{kTerm, kKill}));
  // Its processes are already ended: no `stop` is sent to the host.
  for (msrun_ssh::ChannelId c = 0; c < fake.channel_count(); ++c)
    EXPECT_EQ(fake.channel(c).command.find("msrun-ssh-stop"), std::string::npos);
}

// --- Signals to the launcher ---------------------------------------------------------------------

TEST_F(Runner, SigintTearsDownAndExits130) {
  plan_ = make_plan({2, 2});
  FakeTransport fake({host(), host()});
  fake.at(1, [&] { runner().on_signal(SIGINT); });
  EXPECT_EQ(run(fake), 130);
  EXPECT_EQ(fake.control(0), "hk");
  EXPECT_EQ(fake.control(1), "hk");
  EXPECT_EQ(fake.control_times(1, 'k'), Times{1000});
  EXPECT_EQ(ended_ms_, 1100);
  EXPECT_EQ(statuses(), Strings(4, kTerm));
  EXPECT_EQ(failed(), std::vector<bool>(4, false));
  EXPECT_EQ(console_err(), "msrun-ssh: received SIGINT; stopping the job on every host\n");
}

// --- The launcher's own pauses: Ctrl-Z, SIGSTOP ------------------------------------------------

TEST_F(Runner, CtrlZStopsTheProcessesOnEveryHostThenTheLauncherAndFgResumesTheJob) {
  plan_ = make_plan({1, 1});
  FakeTransport fake({host({exits(30)}), host({exits(30)})});
  double stopped_at = -1;
  stop_self_ = [&] {
    stopped_at = fake.now_ms();
    fake.stand_still(120);  // two minutes until `fg`
  };
  fake.at(2, [&] { runner().on_signal(SIGTSTP); });
  EXPECT_EQ(run(fake), 0) << console_err();
  // 'z' to every watchdog; once both said "paused", the launcher stopped; 'r' at once after.
  EXPECT_EQ(fake.control_times(0, 'z'), Times{2000}) << console_err();
  EXPECT_EQ(fake.control_times(1, 'z'), Times{2000});
  EXPECT_GE(stopped_at, 2000);
  EXPECT_LT(stopped_at, 2100);
  EXPECT_EQ(fake.control_times(0, 'r'), Times{stopped_at + 120000});
  EXPECT_EQ(fake.control_times(1, 'r'), Times{stopped_at + 120000});
  EXPECT_EQ(statuses(), Strings(2, "exit 0"));
  const std::string err = console_err();
  EXPECT_NE(err.find("msrun-ssh: Ctrl-Z: the job is suspended (its processes stopped on 2 of 2 "
                     "hosts); `fg` or `bg` resumes it\n"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("msrun-ssh: resumed after 120.0 s suspended: the job goes on\n"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("lost"), std::string::npos) << err;
  EXPECT_EQ(err.find("stood still"), std::string::npos) << err;
}

TEST_F(Runner, CtrlZWhileTheJobEndsIsRefused) {
  plan_ = make_plan({1});
  FakeTransport fake({host({exits(30)})});
  stop_self_ = [] { FAIL() << "the launcher stopped during a teardown"; };
  fake.at(1, [&] { runner().on_signal(SIGINT); });
  fake.at(1.05, [&] { runner().on_signal(SIGTSTP); });
  EXPECT_EQ(run(fake), 130);
  EXPECT_EQ(fake.control(0).find('z'), std::string::npos);
  EXPECT_NE(console_err().find("Ctrl-Z: the job is ending; it is not suspended"),
            std::string::npos);
}

TEST_F(Runner, ALauncherThatStoodStillBlamesNoHostAndTheJobGoesOn) {
  plan_ = make_plan({1, 1});
  FakeTransport fake({host({exits(30)}), host({exits(30)})});
  // Under the watchdogs' 10 s of silence. It stands still inside a wait for the next heartbeat
  // (due at 5.01 s): what is told is the time beyond that wait.
  fake.at(2, [&] { fake.stand_still(6); });
  EXPECT_EQ(run(fake), 0);
  EXPECT_EQ(statuses(), Strings(2, "exit 0"));
  const std::string err = console_err();
  EXPECT_EQ(err,
            "msrun-ssh: the launcher itself stood still for 3.0 s (stopped by SIGSTOP or a "
            "debugger, or starved of CPU); no host is blamed for it\n");
}

TEST_F(Runner, ALauncherStoppedLongerThanTheWatchdogsWaitSaysSoAndBlamesNoHost) {
  plan_ = make_plan({1, 1});
  FakeTransport fake({host({exits(300)}), host({exits(300)})});
  // SIGSTOP, then SIGCONT a minute later, inside a wait for the heartbeat due at 5.01 s.
  fake.at(2, [&] { fake.stand_still(60); });
  EXPECT_EQ(run(fake), 255);
  const std::string err = console_err();
  EXPECT_NE(err.find("msrun-ssh: the launcher itself stood still for 57.0 s (stopped by SIGSTOP or "
                     "a debugger, or starved of CPU); no host is blamed for it, but the watchdogs "
                     "end the job on their hosts after 10 s without it\n"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("msrun-ssh: the watchdog on node0 ended the job there: it heard nothing from "
                     "the launcher for 10 s (the launcher stood still for 57.0 s); stopping the "
                     "job on every host\n"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("no answer to heartbeats"), std::string::npos) << err;
  EXPECT_EQ(err.find("failed"), std::string::npos) << err;
}

TEST_F(Runner, SecondSigintKillsAtOnce) {
  plan_ = make_plan({2, 2});
  FakeTransport fake({host(), host()});
  fake.at(1, [&] { runner().on_signal(SIGINT); });
  fake.at(1.05, [&] { runner().on_signal(SIGINT); });
  fake.at(1.055, [&] { runner().on_signal(SIGINT); });  // a third changes nothing
  EXPECT_EQ(run(fake), 130);
  EXPECT_EQ(fake.control(0), "hkK");
  EXPECT_EQ(fake.control(1), "hkK");
  EXPECT_EQ(fake.control_times(0, 'K'), Times{1050});
  EXPECT_EQ(ended_ms_, 1060);
  EXPECT_EQ(statuses(), Strings(4, kKill));
  EXPECT_EQ(console_err(),
            "msrun-ssh: received SIGINT; stopping the job on every host\n"
            "msrun-ssh: second interrupt: killing every process now\n");
}

TEST_F(Runner, SigtermExits143AndTheTornDownProcessesAreNotFailures) {
  plan_ = make_plan({2, 2});
  FakeTransport fake({host(), host()});
  fake.at(1, [&] { runner().on_signal(SIGTERM); });
  EXPECT_EQ(run(fake), 143);
  EXPECT_EQ(fake.control(0), "hk");
  EXPECT_EQ(statuses(), Strings(4, kTerm));
  EXPECT_EQ(failed(), std::vector<bool>(4, false));
  EXPECT_EQ(console_err(), "msrun-ssh: received SIGTERM; stopping the job on every host\n");
}

TEST_F(Runner, SighupExits129) {
  plan_ = make_plan({2, 2});
  FakeTransport fake({host(), host()});
  fake.at(1, [&] { runner().on_signal(SIGHUP); });
  EXPECT_EQ(run(fake), 129);
  EXPECT_EQ(fake.control(1), "hk");
  EXPECT_EQ(statuses(), Strings(4, kTerm));
  EXPECT_EQ(console_err(), "msrun-ssh: received SIGHUP; stopping the job on every host\n");
}

TEST_F(Runner, SecondSigtermDoesNotKillAtOnce) {
  plan_ = make_plan({1});
  FakeTransport fake({host()});
  fake.at(1, [&] { runner().on_signal(SIGTERM); });
  fake.at(1.05, [&] { runner().on_signal(SIGTERM); });
  EXPECT_EQ(run(fake), 143);
  EXPECT_EQ(fake.control(0), "hk");
  EXPECT_EQ(console_err(),
            "msrun-ssh: received SIGTERM; stopping the job on every host\n"
            "msrun-ssh: received SIGTERM during the teardown; it goes on\n");
}

TEST_F(Runner, FailureThenSigtermKeepsTheFailuresStatus) {
  plan_ = make_plan({2, 2});
  FakeTransport fake({host(), host({exits(1, 7)})});
  fake.at(1.05, [&] { runner().on_signal(SIGTERM); });
  EXPECT_EQ(run(fake), 7);
  EXPECT_EQ(fake.control(0), "hk");
  EXPECT_EQ(fake.control(1), "hk");
  EXPECT_NE(console_err().find("msrun-ssh: received SIGTERM during the teardown; it goes on\n"),
            std::string::npos)
      << console_err();
}

TEST_F(Runner, FailureThenSigintKillsAtOnceAndKeepsTheFailuresStatus) {
  plan_ = make_plan({2, 2});
  FakeTransport fake({host(), host({exits(1, 7)})});
  fake.at(1.05, [&] { runner().on_signal(SIGINT); });
  EXPECT_EQ(run(fake), 7);
  EXPECT_EQ(fake.control(0), "hkK");
  EXPECT_EQ(fake.control(1), "hkK");
  EXPECT_EQ(statuses(), (Strings{kKill, kKill, "exit 7", kKill}));
}

TEST_F(Runner, SignalsAreReadFromTheSignalFd) {
  plan_ = make_plan({1});
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
  FakeTransport fake({host()});
  fake.at(1, [&] {
    signalfd_siginfo info{};
    info.ssi_signo = SIGHUP;
    ASSERT_EQ(::write(fds[1], &info, sizeof info), static_cast<ssize_t>(sizeof info));
  });
  EXPECT_EQ(run(fake, -1, fds[0]), 129);
  EXPECT_EQ(fake.watched, std::vector<int>{fds[0]});
  EXPECT_EQ(fake.control_times(0, 'k'), Times{1000});
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_F(Runner, SigintBeforeTheWatchdogsAreReadyStartsNothing) {
  plan_ = make_plan({2, 2});
  FakeTransport fake({host(), host()});
  fake.at(0.005, [&] { runner().on_signal(SIGINT); });
  EXPECT_EQ(run(fake), 130);
  EXPECT_EQ(fake.process_execs(), 0u);
  EXPECT_EQ(fake.control(0).substr(0, 1), "k");
  EXPECT_EQ(fake.control_times(0, 'k'), Times{5});
  EXPECT_EQ(statuses(), Strings(4, "not started"));
  EXPECT_EQ(ended_ms_, 110);  // the watchdogs read the 'k' when ready (10 ms), then closed
}

// --- Lost hosts ----------------------------------------------------------------------------------

TEST_F(Runner, SilentHostIsLostAfterTwoHeartbeatsAndTwoSeconds) {
  plan_ = make_plan({2, 2});
  HostScript cut = host();
  cut.silent_from = 1;  // its last echo came at 11 ms
  FakeTransport fake({host(), cut});
  EXPECT_EQ(run(fake), 255);
  ASSERT_EQ(fake.drops.size(), 1u);
  EXPECT_EQ(fake.drops[0].first, 1u);
  double silence = fake.drops[0].second - 11;
  EXPECT_GT(silence, 2 * 5000 + 2000);
  EXPECT_LE(silence, 2 * 5000 + 2000 + 5);
  EXPECT_EQ(fake.control(0), "hhhk");
  EXPECT_EQ(fake.control(1), "hhh");  // 10, 5010, 10010; nothing after the drop
  EXPECT_EQ(fake.control_times(0, 'k'), Times{fake.drops[0].second});
  EXPECT_EQ(fake.writes_after_drop, 0);
  EXPECT_EQ(statuses(), (Strings{kTerm, kTerm, "host lost", "host lost"}));
  EXPECT_EQ(failed(), (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(console_err(),
            "msrun-ssh: host node1 lost: no answer to heartbeats for 12.0 s; stopping the job on "
            "every host\n");
  EXPECT_EQ(ended_ms_, fake.drops[0].second + 100);
}

TEST_F(Runner, ServerAliveInTheSshConfigSetsTheHostsSilenceLimitAsOpenSshDoes) {
  // Host 1's ssh config: ServerAliveInterval 1, ServerAliveCountMax 2. OpenSSH gives that server
  // up after 2 unanswered probes, 1 s apart: so does the launcher, and its watchdog waits 2 s for
  // a silent launcher. Heartbeats go out every second. The other host keeps 2 heartbeats.
  plan_ = make_plan({1, 1});
  HostScript cut = host();
  cut.silent_from = 1;  // its last echo came at 11 ms
  cut.server_alive = msrun_ssh::Transport::ServerAlive{.interval_s = 1, .count_max = 2};
  FakeTransport fake({host(), cut});
  EXPECT_EQ(run(fake), 255);
  ASSERT_EQ(fake.drops.size(), 1u);
  EXPECT_EQ(fake.drops[0].first, 1u);
  double silence = fake.drops[0].second - 11;
  EXPECT_GT(silence, 2 * 1000 + 2000);
  EXPECT_LE(silence, 2 * 1000 + 2000 + 5);
  EXPECT_EQ(fake.channel(0).args.silence_s, 10);  // 2 x --heartbeat 5
  EXPECT_EQ(fake.channel(1).args.silence_s, 2);
  EXPECT_EQ(fake.control_times(0, 'h'), (Times{10, 1010, 2010, 3010, 4010}));
  EXPECT_EQ(console_err(),
            "msrun-ssh: host node1 lost: no answer to heartbeats for 4.0 s; stopping the job on "
            "every host\n");
}

TEST_F(Runner, ALongerServerAliveLetsTheHostBeSilentLongerThanTwoHeartbeats) {
  // ServerAliveInterval 10, ServerAliveCountMax 6: the user tolerates a minute of silence (a
  // flaky link), and so does the launcher, where 2 heartbeats would have been 10 s.
  plan_ = make_plan({1, 1});
  HostScript flaky = host({exits(90)});
  flaky.silent_from = 20;
  flaky.server_alive = msrun_ssh::Transport::ServerAlive{.interval_s = 10, .count_max = 6};
  FakeTransport fake({host({exits(90)}), flaky});
  EXPECT_EQ(run(fake), 255);
  ASSERT_EQ(fake.drops.size(), 1u);
  EXPECT_GT(fake.drops[0].second, 20000 + 60000 - 5000);  // its last echo was before 20 s
  EXPECT_LE(fake.drops[0].second, 20000 + 60000 + 2000 + 5);
  EXPECT_EQ(fake.channel(1).args.silence_s, 60);
  EXPECT_NE(console_err().find("msrun-ssh: host node1 lost: no answer to heartbeats for 6"),
            std::string::npos)
      << console_err();
}

TEST_F(Runner, HostLostEventTearsDownTheOthers) {
  plan_ = make_plan({2, 2});
  HostScript lost = host();
  lost.lost_at = 2;
  FakeTransport fake({host(), lost});
  EXPECT_EQ(run(fake), 255);
  ASSERT_EQ(fake.drops.size(), 1u);
  EXPECT_EQ(fake.drops[0], (std::pair<size_t, double>{1, 2000}));
  EXPECT_EQ(fake.control(0), "hk");
  EXPECT_EQ(fake.control(1), "h");
  EXPECT_EQ(fake.control_times(0, 'k'), Times{2000});
  EXPECT_EQ(fake.writes_after_drop, 0);
  EXPECT_EQ(statuses(), (Strings{kTerm, kTerm, "host lost", "host lost"}));
  EXPECT_EQ(console_err(),
            "msrun-ssh: host node1 lost: connection reset by peer; stopping the job on every "
            "host\n");
  EXPECT_EQ(ended_ms_, 2100);
}

TEST_F(Runner, HostLostAfterEveryProcessEndedKeepsTheJobsStatus) {
  // Every process exited 0; the host goes away while its watchdog sweeps: the job succeeded.
  plan_ = make_plan({1, 1});
  HostScript late = host({exits(1)});
  late.obeys = false;  // its watchdog never confirms the end
  late.lost_at = 3;
  FakeTransport fake({host({exits(1)}), late});
  EXPECT_EQ(run(fake), 0);
  EXPECT_EQ(statuses(), (Strings{"exit 0", "exit 0"}));
  EXPECT_EQ(console_err(),
            "msrun-ssh: warning: host node1 lost after every process had ended: connection reset "
            "by peer\n");
}

// Ctrl-C (or `stop`'s SIGTERM) while the watchdogs sweep after every process exited 0: the job
// succeeded, as when a host is lost then; the sweep goes on.
TEST_F(Runner, ASignalAfterEveryProcessEndedKeepsTheJobsStatus) {
  plan_ = make_plan({1, 1});
  HostScript slow = host({exits(1)});
  slow.teardown_delay = 2;  // its watchdog takes its time over the sweep
  FakeTransport fake({host({exits(1)}), slow});
  fake.at(2, [&] { runner().on_signal(SIGTERM); });
  EXPECT_EQ(run(fake), 0);
  EXPECT_EQ(statuses(), (Strings{"exit 0", "exit 0"}));
  EXPECT_FALSE(runner().interrupted());  // a success, as summary.json says
  EXPECT_EQ(console_err(),
            "msrun-ssh: received SIGTERM after every process had ended; the job's outcome "
            "stands\n");
}

// The same once the hosts, too slow to confirm their sweep, are killed now (the quit's deadline,
// --kill_grace + 10 s): a host lost then, or a third signal, leaves the job's success (it was 255
// and 130; review of 2026-12-07).
TEST_F(Runner, AHostLostOnceTheSlowSweepIsKilledNowKeepsTheJobsStatus) {
  plan_ = make_plan({1, 1});
  HostScript late = host({exits(1)});
  late.obeys = false;  // its watchdog never confirms the end
  late.lost_at = 17;   // after the quit's deadline: 1 + 5 + 10 s
  FakeTransport fake({host({exits(1)}), late});
  EXPECT_EQ(run(fake), 0);
  EXPECT_EQ(statuses(), (Strings{"exit 0", "exit 0"}));
  EXPECT_NE(console_err().find("warning: host node1 lost after every process had ended"),
            std::string::npos)
      << console_err();
  EXPECT_EQ(console_err().find("stopping the job"), std::string::npos) << console_err();
}

TEST_F(Runner, SignalsAfterASecondLateInterruptKeepTheJobsStatus) {
  plan_ = make_plan({1, 1});
  HostScript slow = host({exits(1)});
  slow.obeys = false;
  FakeTransport fake({host({exits(1)}), slow});
  fake.at(2, [&] { runner().on_signal(SIGINT); });
  fake.at(3, [&] { runner().on_signal(SIGINT); });  // kills now
  fake.at(4, [&] { runner().on_signal(SIGINT); });
  fake.at(5, [&] { runner().on_signal(SIGTERM); });
  EXPECT_EQ(run(fake), 0);
  EXPECT_EQ(statuses(), (Strings{"exit 0", "exit 0"}));
  EXPECT_FALSE(runner().interrupted());
  EXPECT_EQ(fake.control_times(1, 'K'), Times{3000});
}

TEST_F(Runner, AStarvedHostWhoseTcpStillAcknowledgesIsNotLost) {
  // The watchdog answers each heartbeat 20 s late (its host has no CPU to spare), but the host's
  // kernel acknowledges everything: slower, not lost (#15).
  plan_ = make_plan({1, 1});
  HostScript starved = host({exits(45)});
  starved.echo_delay = 20;
  starved.tcp_acks = true;
  FakeTransport fake({host({exits(45)}), starved});
  EXPECT_EQ(run(fake), 0);
  EXPECT_EQ(statuses(), Strings(2, "exit 0"));
  EXPECT_EQ(console_err(), "");
}

TEST_F(Runner, AHostThatAcknowledgesButNeverAnswersIsLostAfterTheStarvedLimit) {
  plan_ = make_plan({1, 1});
  HostScript stuck = host({exits(600)});
  stuck.echoes = false;
  stuck.tcp_acks = true;
  FakeTransport fake({host({exits(600)}), stuck});
  EXPECT_EQ(run(fake), 255);
  EXPECT_NE(console_err().find("msrun-ssh: host node1 lost: no answer to heartbeats for 60."),
            std::string::npos)
      << console_err();
  EXPECT_NE(console_err().find("(its TCP still acknowledges: starved or stuck)"),
            std::string::npos);
}

TEST_F(Runner, SlowHostsThatKeepComingUpAreWaitedFor) {
  // Hosts whose watchdogs come up one after another, each within --connect_timeout (10 s) of the
  // one before, but the last 24 s after the start: a slow start, not a failure (#15).
  plan_ = make_plan({1, 1, 1});
  HostScript slow = host({exits(1)}), slower = host({exits(1)});
  slow.ready_after = 8;
  slower.ready_after = 16;
  FakeTransport fake({host({exits(1)}), slow, slower});
  EXPECT_EQ(run(fake), 0);
  EXPECT_EQ(statuses(), Strings(3, "exit 0"));
  EXPECT_EQ(console_err(), "");
}

TEST_F(Runner, TheStartIsBoundedByTheClusterTimeOut) {
  plan_ = make_plan({1, 1});
  options_.cluster_time_out = 12;
  HostScript slow = host({exits(1)}), mute = host({exits(1)});
  slow.ready_after = 8;
  mute.watchdog_answers = false;
  FakeTransport fake({slow, mute});
  EXPECT_EQ(run(fake), 255);
  EXPECT_EQ(fake.control_times(0, 'k'), Times{12000});  // not 8 s + 10 s
}

TEST_F(Runner, HostsAllSlowTogetherButAnsweringTcpAreWaitedFor) {
  plan_ = make_plan({1, 1});
  HostScript a = host({exits(0)}), b = host({exits(0)});
  a.ready_after = b.ready_after = 15;  // past --connect_timeout (10 s), none ready before
  a.tcp_acks = b.tcp_acks = true;
  FakeTransport fake({a, b});
  EXPECT_EQ(run(fake), 0);
  EXPECT_EQ(fake.process_execs(), 2u);
}

TEST_F(Runner, HostsAllSlowTogetherWithoutTcpAnswersFailAtTheConnectTimeout) {
  plan_ = make_plan({1, 1});
  HostScript a = host({exits(0)}), b = host({exits(0)});
  a.ready_after = b.ready_after = 15;
  a.tcp_acks = true;  // b's TCP says nothing
  FakeTransport fake({a, b});
  EXPECT_EQ(run(fake), 255);
  EXPECT_EQ(fake.process_execs(), 0u);
}

TEST_F(Runner, WatchdogThatNeverSaysReadyFailsWithinTheConnectTimeout) {
  plan_ = make_plan({2, 2});
  HostScript mute = host();
  mute.watchdog_answers = false;
  FakeTransport fake({host(), mute});
  EXPECT_EQ(run(fake), 255);
  EXPECT_EQ(fake.process_execs(), 0u);
  // 10 s after the last watchdog that became ready (node0's, at 10 ms).
  EXPECT_EQ(fake.control_times(0, 'k'), Times{10010});
  EXPECT_EQ(statuses(), Strings(4, "not started"));
  EXPECT_EQ(failed(), std::vector<bool>(4, true));
  EXPECT_EQ(console_err(),
            "msrun-ssh: the watchdog on node1 did not start within 10 s of the last host that did "
            "(1 of 2 ready); stopping the job on every host\n");
  // The mute host is given up as lost once silent for 2 heartbeats + 2 s since its exec.
  ASSERT_EQ(fake.drops.size(), 1u);
  EXPECT_EQ(fake.drops[0].first, 1u);
  EXPECT_EQ(fake.drops[0].second, 12001);  // silent since its exec at 0 for more than 12 s
  EXPECT_EQ(ended_ms_, 12001);
}

TEST_F(Runner, HostsThatNeverConfirmTheTeardownAreKilledThroughTheirChannels) {
  plan_ = make_plan({2, 2});
  HostScript stuck = host();
  stuck.obeys = false;  // reads q / k / K, keeps echoing, ends nothing
  FakeTransport fake({host({exits(1, 7)}), stuck});
  EXPECT_EQ(run(fake), 7);
  EXPECT_EQ(fake.control(0), "hk");
  EXPECT_EQ(fake.control(1), "hkhhhK");  // beats at 10, 5010, 10010, 15010
  double k = 1010;
  EXPECT_EQ(fake.control_times(1, 'K'), Times{k + 5000 + 10000});  // --kill_grace + 10 s
  // With the K, an SSH "signal" KILL on every open process channel (never on a watchdog's: it may
  // be in the middle of its sweep).
  ASSERT_EQ(fake.kills.size(), 2u);
  EXPECT_EQ(fake.kills[0].channel, fake.process(1, 0));
  EXPECT_EQ(fake.kills[1].channel, fake.process(1, 1));
  EXPECT_EQ(fake.kills[1].signal, "KILL");
  // The processes end 10 ms later; the stuck watchdog is waited for 3 s more, then left to end
  // with the disconnect: every process was confirmed, so the failure's status stands.
  EXPECT_EQ(ended_ms_, k + 5000 + 10000 + 3000);
  EXPECT_EQ(statuses(), (Strings{"exit 7", kTerm, kKill, kKill}));
  EXPECT_EQ(failed(), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(console_err(),
            "msrun-ssh: rank 0 on node0 failed: exit 7; stopping the job on every host\n"
            "msrun-ssh: hosts did not confirm the end of the job in time; killing what is left\n");
}

// A process's own 254 is a failure like any other, not the launcher's unconfirmed end.
TEST_F(Runner, AProcessThatExits254IsNotAnUnconfirmedEnd) {
  plan_ = make_plan({1, 1});
  FakeTransport fake({host({exits(1, 254)}), host()});
  EXPECT_EQ(run(fake), ms::kExitUnconfirmed);
  EXPECT_FALSE(runner().unconfirmed());
}

TEST_F(Runner, UnconfirmedTeardownNamesHostAndProcessesAndExits254) {
  plan_ = make_plan({2, 2});
  HostScript stuck = host();
  stuck.obeys = false;
  stuck.honours_signals = false;  // an sshd without "signal" requests: nothing ends them
  FakeTransport fake({host({exits(1, 7)}), stuck});
  EXPECT_EQ(run(fake), ms::kExitUnconfirmed);
  EXPECT_TRUE(runner().unconfirmed());  // the attempt is final: no restart meets its processes
  double k = 1010;
  EXPECT_EQ(ended_ms_, k + 5000 + 10000 + 3000);  // K, then 3 s more
  const std::string unconfirmed = "not confirmed ended: may still run";
  EXPECT_EQ(statuses(), (Strings{"exit 7", kTerm, unconfirmed, unconfirmed}));
  EXPECT_EQ(failed(), (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(console_err(),
            "msrun-ssh: rank 0 on node0 failed: exit 7; stopping the job on every host\n"
            "msrun-ssh: hosts did not confirm the end of the job in time; killing what is left\n"
            "msrun-ssh: node1: could not confirm the end of: rank 2, rank 3; they may still run "
            "there\n");
}

TEST_F(Runner, ProcessTheSweepMissesIsKilledThroughItsChannelBeforeTheTeardownEnds) {
  plan_ = make_plan({2});
  ProcScript late;  // its command reached sshd after the watchdog's sweep
  late.seen_by_sweep = false;
  FakeTransport fake({host({ProcScript{}, late})});
  fake.at(1, [&] { runner().on_signal(SIGINT); });
  EXPECT_EQ(run(fake), 130);
  // The watchdog swept (100 ms) and closed at 1100; only then the channel's "signal" KILL.
  ASSERT_EQ(fake.kills.size(), 1u);
  EXPECT_EQ(fake.kills[0].channel, fake.process(0, 1));
  EXPECT_EQ(fake.kills[0].at_ms, 1100);
  EXPECT_EQ(ended_ms_, 1110);
  EXPECT_EQ(statuses(), (Strings{kTerm, kKill}));
  EXPECT_EQ(failed(), (std::vector<bool>{false, false}));
}

TEST_F(Runner, TeardownCancelsCommandsNotYetStarted) {
  plan_ = make_plan({1, 1});
  FakeTransport fake({host(), host()});
  fake.at(1, [&] { runner().on_signal(SIGTERM); });
  EXPECT_EQ(run(fake), 143);
  // Both process channels are told at once; their commands had started, so nothing else happens.
  EXPECT_EQ(fake.cancels, (std::vector<ms::ChannelId>{fake.process(0, 0), fake.process(1, 0)}));
  EXPECT_TRUE(fake.kills.empty());
}

TEST_F(Runner, HostnameInLogNamesIsTheNameTheHostReported) {
  plan_ = make_plan({1, 1});
  plan_.hosts[0].processes[0].log_name = "w-{hostname}_0.log";
  plan_.hosts[1].processes[0].log_name = "w-{hostname}_1.log";
  HostScript named = host({exits(1)});
  named.name = "real-name-0";
  HostScript unnamed = host({exits(1)});  // an old watchdog: no name, the address stands in
  FakeTransport fake({named, unnamed});
  EXPECT_EQ(run(fake), 0);
  EXPECT_EQ(runner().reported_name(0), "real-name-0");
  EXPECT_TRUE(fs::exists(options_.log_dir + "/w-real-name-0_0.log"));
  EXPECT_TRUE(fs::exists(options_.log_dir + "/w-node1_1.log"));
}

TEST_F(Runner, ProcessSurvivingSigtermIsKilledAfterTheGrace) {
  plan_ = make_plan({2});
  ProcScript stubborn;
  stubborn.dies_on_teardown = false;
  FakeTransport fake({host({exits(1, 1), stubborn})});
  EXPECT_EQ(run(fake), 1);
  EXPECT_EQ(statuses(), (Strings{"exit 1", kKill}));
  EXPECT_EQ(ended_ms_, 1010 + 100 + 5000 + 10);  // the watchdog's grace is --kill_grace
}

// --- Heartbeats ----------------------------------------------------------------------------------

TEST_F(Runner, HeartbeatEveryHeartbeatSecondsToEveryLiveWatchdog) {
  plan_ = make_plan({1, 1, 1});
  HostScript lost = host();
  lost.lost_at = 6;
  FakeTransport fake({host({exits(12)}), host({exits(12)}), lost});
  fake.at(11, [&] {});  // nothing: only to show that extra wake-ups do not add beats
  EXPECT_EQ(run(fake), 255);
  EXPECT_EQ(fake.control_times(0, 'h'), (Times{10, 5010}));
  EXPECT_EQ(fake.control_times(2, 'h'), (Times{10, 5010}));
}

TEST_F(Runner, HeartbeatsKeepRunningUntilTheEnd) {
  plan_ = make_plan({1, 1});
  options_.heartbeat = 2;
  FakeTransport fake({host({exits(7)}), host({exits(7)})});
  EXPECT_EQ(run(fake), 0);
  EXPECT_EQ(fake.control_times(0, 'h'), (Times{10, 2010, 4010, 6010}));
  EXPECT_EQ(fake.control_times(1, 'h'), (Times{10, 2010, 4010, 6010}));
  EXPECT_EQ(fake.control(1), "hhhhq");
  EXPECT_TRUE(fake.drops.empty());
}

TEST_F(Runner, HeartbeatsGoOutWhileWaitingForSlowWatchdogs) {
  // node0's watchdog gives up on a silent launcher after 2 heartbeats (10 s); node1 takes 12 s.
  plan_ = make_plan({1, 1});
  options_.connect_timeout = 30;
  HostScript slow = host({exits(1)});
  slow.ready_after = 12;
  FakeTransport fake({host({exits(1)}), slow});
  EXPECT_EQ(run(fake), 0);
  Times beats = fake.control_times(0, 'h');
  ASSERT_GE(beats.size(), 3u);
  EXPECT_EQ(beats[0], 5000);
  EXPECT_EQ(beats[1], 10000);
  EXPECT_EQ(fake.channel(fake.process(0, 0)).opened_ms, 12000);
  EXPECT_EQ(console_err(), "");
}

// --- stdin and the console -----------------------------------------------------------------------

TEST_F(Runner, StdinGoesOnlyToTheTailedRanksAndEofFollowsThePipe) {
  plan_ = make_plan({2, 2}, /*scheduler=*/true);
  options_.tail_worker_log = {1};
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  FakeTransport fake({host({exits(5), exits(5), exits(5)}), host({exits(5), exits(5)})});
  fake.at(1, [&] { ASSERT_EQ(::write(fds[1], "hello\n", 6), 6); });
  fake.at(2, [&] { ASSERT_EQ(::write(fds[1], "world", 5), 5); });
  fake.at(3, [&] { ::close(fds[1]); });
  EXPECT_EQ(run(fake, fds[0]), 0);
  ::close(fds[0]);
  ms::fake::FakeTransport::Channel rank1 = fake.channel(fake.process(0, 2));  // sched, 0, 1
  EXPECT_EQ(fake.written(rank1.id), "hello\nworld");
  ASSERT_EQ(rank1.writes.size(), 2u);
  EXPECT_EQ(rank1.writes[0].at_ms, 1000);
  EXPECT_EQ(rank1.writes[1].at_ms, 2000);
  EXPECT_EQ(rank1.eofs, Times{3000});
  EXPECT_FALSE(rank1.command.ends_with("< /dev/null")) << rank1.command;
  // Every channel was open before the runner promised that no more would be.
  EXPECT_EQ(fake.no_more_channels_at.size(), 1u);
  for (auto [h, i] :
       std::initializer_list<std::pair<size_t, int>>{{0, 0}, {0, 1}, {1, 0}, {1, 1}}) {
    const auto& c = fake.channel(fake.process(h, i));
    EXPECT_EQ(fake.written(c.id), "") << h << "/" << i;
    // The others read /dev/null: nothing to forward, no EOF to send.
    EXPECT_TRUE(c.eofs.empty()) << h << "/" << i;
    EXPECT_TRUE(c.command.ends_with(" < /dev/null")) << c.command;
  }
  EXPECT_EQ(fake.watched, std::vector<int>{fds[0]});
  EXPECT_EQ(fake.unwatched, std::vector<int>{fds[0]});
}

// A file (or /dev/zero) is read no faster than the tailed ranks take it: while a rank's channel
// holds more than 1 MiB of stdin not sent, stdin waits, as ssh's channel window holds a writer
// back. Before, the launcher read it all at once into memory.
TEST_F(Runner, StdinWaitsWhileATailedRankHoldsABacklog) {
  plan_ = make_plan({2});
  options_.tail_worker_log = {1};
  std::string path = write("stdin.bin", std::string(256 * 1024, 'z'));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  FakeTransport fake({host({exits(5), exits(5)})});
  fake.unsent_bytes = [&](ms::ChannelId) -> size_t { return fake.now_ms() < 3000 ? 2 << 20 : 0; };
  EXPECT_EQ(run(fake, fd), 0);
  ::close(fd);
  ms::fake::FakeTransport::Channel rank1 = fake.channel(fake.process(0, 1));
  EXPECT_EQ(fake.written(rank1.id), std::string(256 * 1024, 'z'));
  ASSERT_EQ(rank1.writes.size(), 4u);  // 64 KiB each: one, then the backlog's wait
  EXPECT_LT(rank1.writes[0].at_ms, 3000);
  EXPECT_GE(rank1.writes[1].at_ms, 3000);
  ASSERT_EQ(rank1.eofs.size(), 1u);
  EXPECT_GE(rank1.eofs[0], 3000);
}

TEST_F(Runner, StdinIsNotReadWithoutTailWorkerLog) {
  plan_ = make_plan({2});
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ASSERT_EQ(::write(fds[1], "ignored\n", 8), 8);
  FakeTransport fake({host({exits(1), exits(1)})});
  EXPECT_EQ(run(fake, fds[0]), 0);
  EXPECT_TRUE(fake.watched.empty());
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(fake.written(fake.process(0, i)), "");
    EXPECT_TRUE(fake.channel(fake.process(0, i)).eofs.empty());
    EXPECT_TRUE(fake.channel(fake.process(0, i)).command.ends_with(" < /dev/null"));
  }
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_F(Runner, ConsoleShowsOnlyTheTailedRanksAndLogsGetEverything) {
  plan_ = make_plan({2, 2}, /*scheduler=*/true);
  options_.tail_worker_log = {1};
  auto talk = [](std::vector<std::pair<double, std::string>> out,
                 std::vector<std::pair<double, std::string>> err = {}) {
    ProcScript p = exits(1);
    p.output = std::move(out);
    p.errors = std::move(err);
    return p;
  };
  FakeTransport fake({host({talk({{0.1, "sched line\n"}}), talk({{0.1, "zero\n"}}),
                            talk({{0.1, "one\n"}, {0.3, "tail"}}, {{0.2, "oops\n"}})}),
                      host({talk({{0.1, "two\n"}}, {{0.1, "two err\n"}}), talk({})})});
  EXPECT_EQ(run(fake), 0);
  EXPECT_EQ(console_out(), "[1@node0] one\n[1@node0] tail\n");
  EXPECT_EQ(console_err(), "[1@node0 err] oops\n");
  EXPECT_EQ(log("scheduler.log"), "sched line\n");
  EXPECT_EQ(log("worker_0.log"), "zero\n");
  EXPECT_EQ(log("worker_1.log"), "one\noops\ntail");
  EXPECT_EQ(log("worker_2.log"), "two\ntwo err\n");
  EXPECT_EQ(log("worker_3.log"), "");
  struct stat st {};
  ASSERT_EQ(::stat((options_.log_dir + "/worker_1.log").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(Runner, ConsoleShowsEveryProcessWithoutTailWorkerLog) {
  plan_ = make_plan({1, 1}, /*scheduler=*/true);
  ProcScript s = exits(1), r0 = exits(1), r1 = exits(1);
  s.output = {{0.1, "s\n"}};
  r0.output = {{0.2, "a\n"}};
  r1.output = {{0.3, "b\n"}};
  FakeTransport fake({host({s, r0}), host({r1})});
  EXPECT_EQ(run(fake), 0);
  EXPECT_EQ(console_out(), "[sched@node0] s\n[0@node0] a\n[1@node1] b\n");
}

// --- Restarts ------------------------------------------------------------------------------------

TEST(Restart, OnlyFailuresAreRestartedAndOnlyWhileRestartsAreLeft) {
  ms::AttemptResult failed{3, false, false, "rank 3 failed"};
  EXPECT_TRUE(ms::should_restart(failed, 1, 2));
  EXPECT_TRUE(ms::should_restart(failed, 2, 2));
  EXPECT_FALSE(ms::should_restart(failed, 3, 2));  // attempt 3 was the second restart
  EXPECT_FALSE(ms::should_restart(failed, 1, 0));  // the default: no restart
  EXPECT_FALSE(ms::should_restart({0, false, false, ""}, 1, 2));
  EXPECT_FALSE(ms::should_restart({130, true, false, "SIGINT"}, 1, 2));  // Ctrl-C never restarts
  EXPECT_FALSE(ms::should_restart({255, false, true, "unreachable"}, 1, 2));
  // A process's own exit status 254 (sys.exit(-2)) restarts like any other failure; the
  // launcher's unconfirmed end is a final attempt (review of 2026-12-07).
  EXPECT_TRUE(ms::should_restart({ms::kExitUnconfirmed, false, false, "exit 254"}, 1, 2));
  EXPECT_FALSE(ms::should_restart({ms::kExitUnconfirmed, false, true, "?"}, 1, 2));
}

TEST(Restart, BackoffDoublesAndIsCapped) {
  EXPECT_EQ(ms::restart_backoff(1, 2), 1);
  EXPECT_EQ(ms::restart_backoff(1, 3), 2);
  EXPECT_EQ(ms::restart_backoff(1, 4), 4);
  EXPECT_EQ(ms::restart_backoff(10, 30), ms::kMaxRestartBackoff);
  EXPECT_EQ(ms::restart_backoff(0, 5), 0);
}

struct ScriptedAttempts {
  std::vector<ms::AttemptResult> results;
  std::vector<int> run;        // attempts run, in order
  std::vector<double> waited;  // back-offs waited
  Strings said;
  int signal_during_wait = 0;  // the status wait() returns (0: no signal)

  ms::RestartHistory go(int max_restarts, double backoff) {
    return ms::run_with_restarts(
        max_restarts, backoff,
        [this](int k) {
          run.push_back(k);
          return results.at(static_cast<size_t>(k - 1));
        },
        [this](double s) {
          waited.push_back(s);
          return signal_during_wait;
        },
        [this](const std::string& m) { said.push_back(m); });
  }
};

TEST(Restart, FailingTwiceThenSucceedingRunsThreeAttempts) {
  ScriptedAttempts s{{{3, false, false, "rank 3 failed: exit 3"},
                      {3, false, false, "again"},
                      {0, false, false, ""}}};
  ms::RestartHistory h = s.go(2, 1.5);
  EXPECT_EQ(h.status, 0);
  EXPECT_EQ(s.run, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(s.waited, (std::vector<double>{1.5, 3}));
  EXPECT_EQ(s.said[0],
            "attempt 1 of 3 failed (rank 3 failed: exit 3); restarting the whole job in 1.5 s");
  EXPECT_EQ(ms::format_attempts(h),
            "attempts:\n  attempt 1: exit 3 (rank 3 failed: exit 3)\n  attempt 2: exit 3 "
            "(again)\n  attempt 3: exit 0\nexit status 0\n");
}

TEST(Restart, AlwaysFailingEndsWithTheLastFailuresStatus) {
  ScriptedAttempts s{{{3, false, false, "a"}, {4, false, false, "b"}, {5, false, false, "c"}}};
  ms::RestartHistory h = s.go(2, 1);
  EXPECT_EQ(h.status, 5);
  EXPECT_EQ(h.attempts.size(), 3u);
  EXPECT_EQ(s.said.back(), "attempt 3 failed; no restart left (--max_restarts=2)");
}

TEST(Restart, SignalDuringTheBackoffEndsEverythingWithItsStatus) {
  ScriptedAttempts s{{{3, false, false, "a"}, {0, false, false, ""}}};
  s.signal_during_wait = 130;
  ms::RestartHistory h = s.go(2, 30);
  EXPECT_EQ(h.status, 130);
  EXPECT_EQ(s.run, (std::vector<int>{1}));
  EXPECT_EQ(s.said.back(), "interrupted during the restart back-off: no further attempt");
}

TEST(Restart, InterruptedOrFinalAttemptsAreNotRestarted) {
  ScriptedAttempts s{{{130, true, false, "received SIGINT"}}};
  EXPECT_EQ(s.go(5, 1).status, 130);
  EXPECT_TRUE(s.waited.empty());
  ScriptedAttempts t{{{255, false, true, "a host could not be reached"}}};
  EXPECT_EQ(t.go(5, 1).status, 255);
  EXPECT_EQ(t.run.size(), 1u);
}

// The runner itself in each attempt, on the fake transport: a failure in attempt 1 tears the job
// down as always; attempt 2 runs again from scratch and its console lines say "a2".
TEST_F(Runner, RestartRunsTheJobAgainAfterAFailure) {
  plan_ = make_plan({1, 1});
  std::vector<std::unique_ptr<FakeTransport>> fakes;
  std::vector<double> ended;
  auto attempt = [&](int k) {
    ProcScript out = exits(1);
    out.output = {{0.5, "hello\n"}};
    fakes.push_back(std::make_unique<FakeTransport>(
        k == 1 ? std::vector<HostScript>{host({exits(1, 7)}), host()}
               : std::vector<HostScript>{host({exits(1)}), host({out})}));
    int code = run(*fakes.back(), -1, -1, k);
    ended.push_back(ended_ms_);
    return ms::AttemptResult{code, runner().interrupted(), false, runner().cause()};
  };
  ms::RestartHistory h = ms::run_with_restarts(
      1, 1, attempt, [](double) { return 0; }, [](const std::string&) {});
  ASSERT_EQ(h.attempts.size(), 2u);
  EXPECT_EQ(h.attempts[0].status, 7);
  EXPECT_EQ(h.attempts[0].cause, "rank 0 on node0 failed: exit 7");
  EXPECT_EQ(fakes[0]->control(1), "hk");  // attempt 1 was torn down on every host
  EXPECT_EQ(h.status, 0);
  EXPECT_EQ(statuses(), (Strings{"exit 0", "exit 0"}));
  EXPECT_NE(console_out().find("[1@node1 a2] hello\n"), std::string::npos) << console_out();
}

// --- Spare hosts (HostRoster) between attempts --------------------------------------------------

// Restarts with spares: a real plan (make_plan: scheduler on the master, MS_SCHED_HOST, ...) of
// hosts node0.. and spares spare0.., 198.18.0.1.. and 198.18.0.101.., each attempt run by the
// Runner on its own FakeTransport, the roster deciding the hosts between attempts as run_job does.
class SpareRestart : public Runner {
 protected:
  void plan_hosts(const std::vector<int>& workers, int spares) {
    ms::Cluster cluster;
    cluster.path = "h.toml";
    for (size_t h = 0; h < workers.size(); ++h)
      cluster.hosts.push_back(ms::test::host("node" + std::to_string(h), workers[h]));
    for (int s = 0; s < spares; ++s)
      cluster.spares.push_back(ms::test::host("spare" + std::to_string(s), 1));
    options_.task_script = "train.py";
    options_.launcher_cwd = "/w";
    plan_ = ms::make_plan(options_, cluster, [](const std::string& name) {
      bool spare = name.rfind("spare", 0) == 0;
      return fmt::format("198.18.0.{}", std::stoi(name.substr(spare ? 5 : 4)) + (spare ? 101 : 1));
    });
  }

  // Runs up to options_.max_restarts + 1 attempts; `scripts(k)` scripts attempt k's hosts.
  ms::RestartHistory go(const std::function<std::vector<HostScript>(int)>& scripts) {
    roster_ = std::make_unique<ms::HostRoster>(
        plan_, options_, [this](const std::string& m) { said_.push_back(m); });
    roster_->on_spare_taken([this](const ms::HostPlan& h) {
      taken_.push_back(h.host.address + " node rank " + std::to_string(h.node_rank));
    });
    ms::AttemptResult last;
    auto attempt = [&](int k) {
      std::string cannot = k > 1 ? roster_->after_attempt(last) : "";
      if (!cannot.empty())
        return last = ms::AttemptResult{ms::kExitHostFailure, false, true, cannot};
      plan_ = roster_->plan();
      Strings hosts;
      for (const auto& h : plan_.hosts) hosts.push_back(h.host.address);
      hosts_.push_back(hosts);
      fakes_.push_back(std::make_unique<FakeTransport>(scripts(k)));
      int code = run(*fakes_.back(), -1, -1, k);
      rows_of_.push_back(rows_);
      return last = ms::AttemptResult{code,
                                      runner().interrupted(),
                                      false,
                                      runner().cause(),
                                      runner().lost_hosts(),
                                      runner().root_cause_host()};
    };
    return ms::run_with_restarts(
        options_.max_restarts, 0, attempt, [](double) { return 0; }, [](const std::string&) {});
  }

  // The host that ran `process` ("rank 1", "scheduler") in attempt k.
  std::string host_of(int k, const std::string& process) const {
    for (const auto& r : rows_of_.at(static_cast<size_t>(k - 1)))
      if (r.process == process) return r.host;
    return "";
  }

  std::unique_ptr<ms::HostRoster> roster_;
  std::vector<std::unique_ptr<FakeTransport>> fakes_;
  std::vector<Strings> hosts_;  // per attempt, its hosts in node-rank order
  std::vector<std::vector<ms::SummaryRow>> rows_of_;
  Strings said_;
  Strings taken_;  // the spares taken in, as on_spare_taken told them
};

HostScript lost_at(double at, std::vector<ProcScript> processes) {
  HostScript h = host(std::move(processes));
  h.lost_at = at;
  return h;
}

TEST_F(SpareRestart, ALostHostIsReplacedByTheSpareWithItsNodeRankAndRanks) {
  options_.max_restarts = 1;
  plan_hosts({1, 1}, 1);
  ms::RestartHistory h = go([](int k) {
    // node0: the scheduler and rank 0; node1: rank 1, cut off in attempt 1.
    return k == 1 ? std::vector<HostScript>{host(), lost_at(0.5, {ProcScript{}})}
                  : std::vector<HostScript>{host({exits(1), exits(1)}), host({exits(1)})};
  });
  ASSERT_EQ(h.attempts.size(), 2u);
  EXPECT_EQ(h.attempts[0].status, ms::kExitHostFailure);
  EXPECT_EQ(h.attempts[0].lost_hosts, Strings{"node1"});
  EXPECT_EQ(h.status, 0);
  EXPECT_EQ(hosts_[1], (Strings{"node0", "spare0"}));
  EXPECT_EQ(host_of(2, "rank 1"), "spare0");
  EXPECT_EQ(plan_.hosts[1].node_rank, 1);
  EXPECT_EQ(*ms::test::env_of(plan_.hosts[1].processes[0], "RANK_ID"), "1");
  EXPECT_EQ(*ms::test::env_of(plan_.hosts[1].processes[0], "MS_SCHED_HOST"), "198.18.0.1");
  EXPECT_EQ(said_, Strings{"spare host spare0 replaces node1 as node rank 1 (lost during the "
                           "attempt)"});             // the master did not move
  EXPECT_EQ(taken_, Strings{"spare0 node rank 1"});  // the job's record lists it
}

// Two entries on one address with ports of their own (the sshds of containers on one machine):
// the one lost is the one replaced, named with its port; the other stays.
TEST_F(SpareRestart, EntriesOnOneAddressAreLostAndReplacedApart) {
  options_.max_restarts = 1;
  options_.task_script = "train.py";
  options_.launcher_cwd = "/w";
  ms::Cluster cluster;
  cluster.path = "h.toml";
  for (int port : {2201, 2202, 2203}) {
    ms::Host h = ms::test::host("box", 1);
    h.port = port;
    (port == 2203 ? cluster.spares : cluster.hosts).push_back(h);
  }
  plan_ = ms::make_plan(options_, cluster, [](const std::string&) { return "198.18.0.1"; });
  ms::RestartHistory h = go([](int k) {
    return k == 1 ? std::vector<HostScript>{host(), lost_at(0.5, {ProcScript{}})}
                  : std::vector<HostScript>{host({exits(1), exits(1)}), host({exits(1)})};
  });
  ASSERT_EQ(h.attempts.size(), 2u);
  EXPECT_EQ(h.attempts[0].lost_hosts, Strings{"box:2202"});
  EXPECT_EQ(h.attempts[0].cause.rfind("host box:2202 lost: ", 0), 0u) << h.attempts[0].cause;
  EXPECT_EQ(h.status, 0);
  EXPECT_EQ(plan_.hosts[0].host.port, 2201);
  EXPECT_EQ(plan_.hosts[1].host.port, 2203);
  EXPECT_EQ(said_, Strings{"spare host box:2203 replaces box:2202 as node rank 1 (lost during the "
                           "attempt)"});
}

TEST_F(SpareRestart, AHostIsExcludedAfterFailingKAttemptsAsTheRootCause) {
  options_.max_restarts = 3;
  plan_hosts({1, 1}, 1);
  ms::RestartHistory h = go([](int k) {
    // rank 1 exits 3 on node1 in attempts 1 and 2 (the root cause: node0's processes are only
    // torn down, which fails no host); on the spare it succeeds.
    return k < 3 ? std::vector<HostScript>{host(), host({exits(1, 3)})}
                 : std::vector<HostScript>{host({exits(1), exits(1)}), host({exits(1)})};
  });
  ASSERT_EQ(h.attempts.size(), 3u);
  EXPECT_EQ(h.attempts[0].root_cause_host, "node1");
  EXPECT_EQ(hosts_[1], (Strings{"node0", "node1"}));  // one failure: node1 stays
  EXPECT_EQ(hosts_[2], (Strings{"node0", "spare0"}));
  EXPECT_EQ(h.status, 0);
  EXPECT_EQ(said_, Strings{"spare host spare0 replaces node1 as node rank 1 (failed 2 attempts)"});
}

TEST_F(SpareRestart, KOfOneExcludesAtTheFirstFailure) {
  options_.max_restarts = 1;
  options_.host_failures_to_exclude = 1;
  plan_hosts({1, 1}, 1);
  go([](int k) {
    return k == 1 ? std::vector<HostScript>{host({exits(1), exits(1, 2)}), host()}
                  : std::vector<HostScript>{host({exits(1), exits(1)}), host({exits(1)})};
  });
  EXPECT_EQ(hosts_.at(1), (Strings{"spare0", "node1"}));
}

TEST_F(SpareRestart, ReplacingTheMasterMovesMsSchedHostAndSaysSo) {
  options_.max_restarts = 1;
  plan_hosts({1, 1}, 2);
  ms::RestartHistory h = go([](int k) {
    return k == 1 ? std::vector<HostScript>{lost_at(0.5, {ProcScript{}, ProcScript{}}), host()}
                  : std::vector<HostScript>{host({exits(1), exits(1)}), host({exits(1)})};
  });
  EXPECT_EQ(h.status, 0);
  EXPECT_EQ(hosts_.at(1), (Strings{"spare0", "node1"}));
  EXPECT_EQ(host_of(2, "scheduler"), "spare0");
  EXPECT_EQ(plan_.master_ip, "198.18.0.101");
  for (const auto& host : plan_.hosts)
    for (const auto& p : host.processes)
      EXPECT_EQ(*ms::test::env_of(p, "MS_SCHED_HOST"), "198.18.0.101") << p.label();
  EXPECT_EQ(said_, (Strings{"spare host spare0 replaces node0 as node rank 0 (lost during the "
                            "attempt)",
                            "the master moves from node0 to spare0: MS_SCHED_HOST is now "
                            "198.18.0.101"}));
  EXPECT_EQ(roster_->plan().spares.size(), 1u);  // spare1 is still free
}

TEST_F(SpareRestart, NoSpareLeftEndsTheJobWith255NamingTheHost) {
  options_.max_restarts = 3;
  plan_hosts({1, 1}, 1);
  ms::RestartHistory h = go([](int) {
    // node rank 1 is cut off in every attempt: node1 first, then the spare that replaced it.
    return std::vector<HostScript>{host(), lost_at(0.5, {ProcScript{}})};
  });
  ASSERT_EQ(h.attempts.size(), 3u);  // the third never ran
  EXPECT_EQ(hosts_.size(), 2u);
  EXPECT_EQ(h.status, ms::kExitHostFailure);
  EXPECT_TRUE(h.attempts[2].final);
  EXPECT_EQ(h.attempts[2].cause,
            "cannot restart: no spare host is left to replace spare0 (node rank 1, lost during "
            "the attempt)");
}

TEST_F(SpareRestart, WithoutSparesTheHostsNeverChange) {
  options_.max_restarts = 2;
  options_.host_failures_to_exclude = 1;
  plan_hosts({1, 1}, 0);
  ms::RestartHistory h = go([](int k) {
    return k < 3 ? std::vector<HostScript>{host(), lost_at(0.5, {ProcScript{}})}
                 : std::vector<HostScript>{host({exits(1), exits(1)}), host({exits(1)})};
  });
  EXPECT_EQ(h.status, 0);
  EXPECT_EQ(hosts_, (std::vector<Strings>(3, Strings{"node0", "node1"})));
  EXPECT_TRUE(said_.empty());
}

TEST_F(SpareRestart, UnreachableHostsTakeTheNextSpareUntilNoneIsLeft) {
  plan_hosts({1, 1}, 2);
  ms::HostRoster roster(plan_, options_, [this](const std::string& m) { said_.push_back(m); });
  EXPECT_EQ(roster.replace_unreachable({{"node1", "connection refused"}}), "");
  EXPECT_EQ(roster.plan().hosts[1].host.address, "spare0");
  EXPECT_EQ(roster.replace_unreachable({{"spare0", "timed out"}}), "");
  EXPECT_EQ(roster.plan().hosts[1].host.address, "spare1");
  EXPECT_EQ(roster.replace_unreachable({{"spare1", "timed out"}}),
            "cannot restart: no spare host is left to replace spare1 (node rank 1, unreachable: "
            "timed out)");
  EXPECT_EQ(roster.plan().hosts[1].host.address, "spare1");  // unchanged by a failed decision
  EXPECT_EQ(said_.back(),
            "spare host spare1 replaces spare0 as node rank 1 (unreachable: timed out)");
}

// --- Time limits ---------------------------------------------------------------------------------

const std::string kTimedOut = "killed by SIGTERM (timed out)";

TEST_F(Runner, TimeoutTearsDownAndExits124) {
  plan_ = make_plan({1, 1});
  options_.timeout = 3;
  FakeTransport fake({host(), host()});
  EXPECT_EQ(run(fake), ms::kExitTimeout);
  // 'a': every Python process prints its stacks (SIGABRT), then the teardown.
  EXPECT_EQ(fake.control_times(0, 'a'), Times{10 + 3000});  // processes started at 10 ms
  EXPECT_EQ(statuses(), (Strings{kTimedOut, kTimedOut}));
  // Then what the processes print on their SIGABRT (their stacks), as any output.
  EXPECT_EQ(console_err().rfind(
                "msrun-ssh: timed out: the job ran for its --timeout of 3 s; stopping the job on "
                "every host\n[0@node0 err] Fatal Python error: Aborted\n",
                0),
            0u)
      << console_err();
}

TEST_F(Runner, JobEndingBeforeItsTimeoutIsNotTouched) {
  plan_ = make_plan({1});
  options_.timeout = 3;
  FakeTransport fake({host({exits(2.5)})});
  EXPECT_EQ(run(fake), 0);
  EXPECT_EQ(fake.control(0), "hq");
}

TEST_F(Runner, SilenceLongerThanTheHangTimeoutIsAHang) {
  plan_ = make_plan({1, 1});
  options_.hang_timeout = 2;
  ProcScript chatty;  // prints at 0.5 s and 1.5 s, then nothing
  chatty.output = {{0.5, "a\n"}, {1.5, "b\n"}};
  FakeTransport fake({host({chatty}), host()});
  EXPECT_EQ(run(fake), ms::kExitTimeout);
  EXPECT_EQ(fake.control_times(1, 'a'), Times{10 + 1500 + 2000});  // 2 s after the last line
  EXPECT_EQ(console_err().rfind("msrun-ssh: hang: no process printed anything for 2 s "
                                "(--hang_timeout); stopping the job on every host\n",
                                0),
            0u)
      << console_err();
  EXPECT_EQ(statuses(), (Strings{kTimedOut, kTimedOut}));
  // The stacks each process printed, in the summary rows, grouped by the report.
  EXPECT_EQ(rows_[0].stacks, (Strings{"Current thread 0x7f02 (most recent call first):",
                                      "  File \"t.py\", line 7 in wait_0"}));
  std::string report = ms::format_summary(rows_);
  EXPECT_NE(report.find("--- Python stacks of ranks 0-1 (2 processes), e.g. rank 0 on node0 ---\n"
                        "Current thread 0x7f02 (most recent call first):\n"),
            std::string::npos)
      << report;
}

TEST_F(Runner, OutputOfAnyProcessKeepsTheHangTimeoutAway) {
  plan_ = make_plan({1, 1});
  options_.hang_timeout = 2;
  ProcScript ticking = exits(7);  // a line every 1.5 s from one process, the other silent
  for (double t = 1.5; t < 7; t += 1.5) ticking.output.push_back({t, "tick\n"});
  FakeTransport fake({host({ticking}), host({exits(7)})});
  EXPECT_EQ(run(fake), 0);
  EXPECT_EQ(fake.control(0).find('k'), std::string::npos);
}

TEST_F(Runner, HangReportOnlyReportsAndTheJobGoesOn) {
  plan_ = make_plan({1});
  options_.hang_timeout = 2;
  options_.hang_kills = false;
  FakeTransport fake({host({exits(5)})});
  EXPECT_EQ(run(fake), 0);
  EXPECT_EQ(console_err(),
            "msrun-ssh: hang: no process printed anything for 2 s (--on_hang=report: the job goes "
            "on)\n"
            "msrun-ssh: hang: no process printed anything for 2 s (--on_hang=report: the job goes "
            "on)\n");
  EXPECT_EQ(statuses(), Strings{"exit 0"});
}

// --- Stacks on demand (SIGQUIT, Ctrl-\)
// ------------------------------------------------------------

// What the fake plays for stack.sh (stack_command): a host's answer `after` seconds after its exec.
const std::string kStackKey = "echo \"gdb $g\"";

ProcScript stack_answer(const std::string& host, double after, const std::string& function) {
  ProcScript p = exits(after + 0.01);
  p.output = {{after, "host " + host +
                          "\ngdb no\nproc 100 0 S do_wait python3\n"
                          "py Current thread 0x7f01 (most recent call first):\n"
                          "py   File \"train.py\", line 9 in " +
                          function + "\nend\n"}};
  return p;
}

HostScript host_answering_stacks(std::vector<ProcScript> processes, ProcScript answer) {
  HostScript h = host(std::move(processes));
  h.other_commands = {{kStackKey, std::move(answer)}};
  return h;
}

// The stack commands the fake ran, as (host, time of exec).
std::vector<std::pair<size_t, double>> stack_execs(const FakeTransport& fake) {
  std::vector<std::pair<size_t, double>> out;
  for (const auto& c : fake.channels())
    if (c.other) out.emplace_back(c.host, c.opened_ms);
  return out;
}

TEST_F(Runner, SigquitDumpsEveryHostsStacksAndTheJobGoesOn) {
  ASSERT_NE(ms::stack_command("job-1", 2, 10).find(kStackKey), std::string::npos);
  plan_ = make_plan({1, 1});
  FakeTransport fake({host_answering_stacks({exits(5)}, stack_answer("n0", 0.5, "wait_for_peer")),
                      host_answering_stacks({exits(5)}, stack_answer("n1", 0.7, "allreduce"))});
  fake.at(1, [&] { runner().on_signal(SIGQUIT); });
  EXPECT_EQ(run(fake), 0);
  EXPECT_EQ(statuses(), (Strings{"exit 0", "exit 0"}));  // the job went on to its own end
  EXPECT_EQ(fake.control(0).find('k'), std::string::npos);
  using Exec = std::pair<size_t, double>;
  EXPECT_EQ(stack_execs(fake), (std::vector<Exec>{{0, 1000}, {1, 1000}}));
  std::string err = console_err();
  // The report comes once every host has answered (at 1.71 s), while the job still runs.
  EXPECT_NE(err.find("stacks: asking 2 hosts for every process's stack; the job goes on\n"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("stacks of job job-1: 2 processes on 2 hosts\n"), std::string::npos) << err;
  EXPECT_NE(err.find("line 9 in wait_for_peer"), std::string::npos) << err;
  EXPECT_NE(err.find("line 9 in allreduce"), std::string::npos) << err;
  std::vector<std::string> files;
  for (const auto& f : fs::directory_iterator(options_.log_dir))
    if (f.path().filename().string().rfind("stacks-", 0) == 0) files.push_back(f.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(slurp(files[0]).find("line 9 in wait_for_peer"), std::string::npos);
  EXPECT_NE(err.find("msrun-ssh: the stacks are also in " + files[0] + "\n"), std::string::npos);
}

TEST_F(Runner, OneDumpAtATimeAndNoneOnceTheJobEnds) {
  plan_ = make_plan({1});
  FakeTransport fake({host_answering_stacks({exits(5)}, stack_answer("n0", 1, "f"))});
  fake.at(1, [&] { runner().on_signal(SIGQUIT); });
  fake.at(1.5, [&] { runner().on_signal(SIGQUIT); });  // the first is still under way
  fake.at(3, [&] { runner().on_signal(SIGINT); });
  fake.at(3.01, [&] { runner().on_signal(SIGQUIT); });  // the job is ending
  EXPECT_EQ(run(fake), 130);
  EXPECT_EQ(stack_execs(fake).size(), 1u);
  std::string err = console_err();
  EXPECT_NE(err.find("msrun-ssh: stacks: a dump is already under way\n"), std::string::npos);
  EXPECT_NE(err.find("msrun-ssh: stacks: not now, the job is not running\n"), std::string::npos);
}

TEST_F(Runner, AHostThatDoesNotAnswerTheDumpIsNamedAfterTheBound) {
  plan_ = make_plan({1, 1});
  ProcScript silent;  // never answers, never ends
  FakeTransport fake({host_answering_stacks({exits(60)}, stack_answer("n0", 0.5, "f")),
                      host_answering_stacks({exits(60)}, silent)});
  fake.at(1, [&] { runner().on_signal(SIGQUIT); });
  EXPECT_EQ(run(fake), 0);
  std::string err = console_err();
  EXPECT_NE(err.find("host node1: no complete answer within 20 s"), std::string::npos) << err;
  EXPECT_NE(err.find("line 9 in f"), std::string::npos) << err;
  // The unanswered command was killed at the bound (1 s + 20 s); the job was not touched.
  ms::ChannelId unanswered = -1;
  for (const auto& c : fake.channels())
    if (c.other && c.host == 1) unanswered = c.id;
  std::vector<double> kills;
  for (const auto& k : fake.kills)
    if (k.channel == unanswered) kills.push_back(k.at_ms);
  EXPECT_EQ(kills, Times{21000});
  EXPECT_EQ(fake.control(1).find('k'), std::string::npos);
  EXPECT_EQ(statuses(), (Strings{"exit 0", "exit 0"}));
}

TEST_F(Runner, AJobThatEndsDuringADumpEndsOnTimeWithWhatCame) {
  plan_ = make_plan({1});
  FakeTransport fake({host_answering_stacks({exits(2)}, ProcScript{})});
  fake.at(1, [&] { runner().on_signal(SIGQUIT); });
  EXPECT_EQ(run(fake), 0);
  EXPECT_LT(ended_ms_, 3000);  // not at the dump's bound (21 s)
  EXPECT_NE(console_err().find("host node0: no complete answer within 20 s"), std::string::npos)
      << console_err();
}

// --- Events (--events) ---------------------------------------------------------------------------

TEST_F(Runner, EventsOfAFailingJobNameTheFailureThenTheTeardown) {
  plan_ = make_plan({2, 2});
  FakeTransport fake({host({exits(1, 3), exits(30)}), host({exits(30), exits(30)})});
  with_events();
  EXPECT_EQ(run(fake), 3);
  std::vector<nlohmann::json> ev = events();
  Strings types = event_types();
  ASSERT_GE(ev.size(), 8u);
  EXPECT_EQ(Strings(types.begin(), types.begin() + 6),
            Strings({"watchdog_ready", "watchdog_ready", "process_started", "process_started",
                     "process_started", "process_started"}));
  for (const auto& e : ev) {
    EXPECT_EQ(e.at("version"), ms::EventLog::kVersion);
    EXPECT_TRUE(e.at("time").is_string());
  }
  EXPECT_EQ(ev[0].at("host"), "node0");
  EXPECT_EQ(ev[2].at("process"), "rank 0");
  EXPECT_EQ(ev[2].at("log"), "worker_0.log");
  // The failure first, then the teardown it started, with the job's exit status.
  EXPECT_EQ(types[6], "process_exited");
  EXPECT_EQ(ev[6].at("process"), "rank 0");
  EXPECT_EQ(ev[6].at("exit_status"), 3);
  EXPECT_EQ(types[7], "teardown");
  EXPECT_EQ(ev[7].at("exit_status"), 3);
  EXPECT_NE(ev[7].at("reason").get<std::string>().find("rank 0"), std::string::npos) << ev[7];
  EXPECT_EQ(std::count(types.begin(), types.end(), "teardown"), 1);
  // Every process ends once; only rank 0 failed (the others were ended by the teardown).
  std::map<std::string, bool> ended;
  for (const auto& e : ev)
    if (e.at("type") == "process_ended") ended[e.at("process")] = e.at("failed");
  EXPECT_EQ(ended, (std::map<std::string, bool>{
                       {"rank 0", true}, {"rank 1", false}, {"rank 2", false}, {"rank 3", false}}));
}

TEST_F(Runner, EventsOfALostHostAndOfAnInterruptSayWhy) {
  plan_ = make_plan({1, 1});
  HostScript cut = host({exits(60)});
  cut.lost_at = 3;
  FakeTransport fake({host({exits(60)}), cut});
  with_events();
  EXPECT_EQ(run(fake), 255);
  Strings types = event_types();
  auto lost = std::find(types.begin(), types.end(), "host_lost");
  ASSERT_NE(lost, types.end());
  EXPECT_EQ(*(lost + 1), "process_ended");  // the lost host's process, then the teardown
  EXPECT_EQ(*(lost + 2), "teardown");
  nlohmann::json e = events()[static_cast<size_t>(lost - types.begin())];
  EXPECT_EQ(e.at("host"), "node1");
  EXPECT_EQ(e.at("reason"), "connection reset by peer");

  ::ftruncate(::open((dir_ + "/events.jsonl").c_str(), O_WRONLY), 0);
  plan_ = make_plan({1});
  FakeTransport quiet({host({exits(60)})});
  quiet.at(1, [&] { runner().on_signal(SIGINT); });
  with_events();
  EXPECT_EQ(run(quiet), 130);
  std::vector<nlohmann::json> ev = events();
  auto teardown = std::find_if(ev.begin(), ev.end(),
                               [](const nlohmann::json& x) { return x.at("type") == "teardown"; });
  ASSERT_NE(teardown, ev.end());
  EXPECT_EQ(teardown->at("reason"), "received SIGINT");
  EXPECT_EQ(teardown->at("exit_status"), 130);
}

TEST(EventLog, WritesOneVersionedTimedObjectPerLine) {
  ms::test::TempDir dir;
  std::string path = dir.path() + "/e.jsonl";
  {
    ms::EventLog log(path, [] {
      return std::chrono::system_clock::time_point(std::chrono::milliseconds(1796081171499LL));
    });
    log.emit("job", {{"job_id", "j-1"}, {"hosts", {"a", "b"}}});
    log.emit("end", {{"exit_status", 0}, {"note", std::string("bad \xff byte")}});
  }
  std::istringstream in(slurp(path));
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  nlohmann::json e = nlohmann::json::parse(line);
  EXPECT_EQ(e.at("version"), 1);
  EXPECT_EQ(e.at("time"), "2026-11-30T23:26:11.499Z");
  EXPECT_EQ(e.at("type"), "job");
  EXPECT_EQ(e.at("hosts"), nlohmann::json({"a", "b"}));
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(nlohmann::json::parse(line).at("type"), "end");  // the bad byte was replaced
  EXPECT_FALSE(std::getline(in, line));
  EXPECT_EQ(::access(path.c_str(), F_OK), 0);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_THROW(ms::EventLog(dir.path() + "/no/such/dir/e.jsonl"), ms::InputError);
}

TEST(SummaryJson, CarriesEveryProcessAndTheRootCause) {
  ms::SummaryRow a, b;
  a.host = "node0";
  a.process = "rank 0";
  a.rank = 0;
  a.status = "exit 3";
  a.failed = true;
  a.root_cause = true;
  a.traceback = {"Traceback (most recent call last):", "ValueError: x"};
  b.host = "node1";
  b.process = "scheduler";
  b.rank = -1;
  b.status = "exit 0 (killed by teardown)";
  b.torn_down = true;
  nlohmann::json j = ms::summary_json({a, b});
  ASSERT_EQ(j.at("processes").size(), 2u);
  EXPECT_EQ(j.at("processes")[1].at("rank"), nullptr);
  EXPECT_EQ(j.at("root_cause").at("process"), "rank 0");
  EXPECT_EQ(j.at("root_cause").at("traceback").size(), 2u);
  EXPECT_EQ(j.at("torn_down"), 1);
}

// --- In-place process recovery (--restart_policy process) ---------------------------------------
// A scheduler and rank 0 on node0, ranks 1 and 2 on node1. On the fake, a process started again is
// the next exec on its host: node1's processes[2] scripts the second run of rank 1.

class ProcessRecovery : public Runner {
 protected:
  void SetUp() override {
    Runner::SetUp();
    plan_ = make_plan({1, 2}, /*scheduler=*/true);
    options_.restart_policy = ms::RestartPolicy::kProcess;
    options_.max_restarts = 2;
  }
  // Every channel the runner opened for a process (the watchdogs left out).
  static size_t process_channels(const FakeTransport& fake) { return fake.process_execs(); }
};

TEST_F(ProcessRecovery, AFailedWorkerAloneIsStartedAgainOnItsHostAndTheJobEndsWell) {
  with_events();
  ProcScript rank1 = exits(1, 3);
  rank1.output = {{0.5, "step 1\n"}};
  ProcScript rank1_again = exits(2);
  rank1_again.output = {{0.5, "resumed\n"}};
  FakeTransport fake({host({exits(10), exits(10)}), host({rank1, exits(10), rank1_again})});
  EXPECT_EQ(run(fake), 0);
  // Exactly one new exec, on node1, with the very same command (same env, same job marker).
  ASSERT_EQ(process_channels(fake), 5u);
  const auto& first = fake.channel(fake.process(1, 0));
  const auto& again = fake.channel(fake.process(1, 2));
  EXPECT_EQ(again.host, 1u);
  EXPECT_EQ(again.command, first.command);
  // As soon as the failed run's channel closed and what it left on node1 was ended (the command
  // sent at its exit, 1000 ms, ends 50 ms later on the fake and its channel closes at 1060 ms),
  // not before.
  ASSERT_EQ(fake.execs_of("msrun-ssh-leftovers"), 1u);
  EXPECT_EQ(again.opened_ms, 1060);
  // Nothing else was touched: no cancel, no kill, no teardown byte; a normal end at 10 s.
  EXPECT_TRUE(fake.cancels.empty());
  EXPECT_TRUE(fake.kills.empty());
  EXPECT_EQ(fake.control(0).find('k'), std::string::npos);
  EXPECT_EQ(fake.control(1).find('k'), std::string::npos);
  EXPECT_EQ(fake.control_times(0, 'q'), Times{10010});
  EXPECT_EQ(statuses(), Strings(4, "exit 0"));
  EXPECT_EQ(runner().cause(), "");
  ASSERT_EQ(runner().process_restarts().size(), 1u);
  const ms::ProcessRestart& r = runner().process_restarts()[0];
  EXPECT_EQ(r.number, 1);
  EXPECT_EQ(r.host, "node1");
  EXPECT_EQ(r.process, "rank 1");
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.cause, "rank 1 on node1 failed: exit 3");
  // One log, the restart named between the two runs; the console and the launcher say it too.
  const std::string line =
      "process restart 1 of 2: rank 1 on node1 failed: exit 3; started again in place";
  EXPECT_EQ(log("worker_1.log"), "step 1\n----- msrun-ssh: " + line + " -----\nresumed\n");
  EXPECT_EQ(console_err(), "msrun-ssh: " + line + "\n");
  EXPECT_EQ(ms::format_process_restarts(runner().process_restarts(), 2),
            "process restarts (1 of --max_restarts=2):\n"
            "  restart 1: rank 1 on node1 failed: exit 3\n");
  // The events: the failure's exit, then process_restarted; no teardown.
  Strings types = event_types();
  EXPECT_EQ(std::count(types.begin(), types.end(), "teardown"), 0);
  auto at = std::find(types.begin(), types.end(), "process_restarted");
  ASSERT_NE(at, types.end());
  EXPECT_EQ(*(at - 1), "process_exited");
  nlohmann::json e = events()[static_cast<size_t>(at - types.begin())];
  EXPECT_EQ(e.at("host"), "node1");
  EXPECT_EQ(e.at("process"), "rank 1");
  EXPECT_EQ(e.at("rank"), 1);
  EXPECT_EQ(e.at("restart"), 1);
  EXPECT_EQ(e.at("max_restarts"), 2);
  EXPECT_EQ(e.at("cause"), "rank 1 on node1 failed: exit 3");
  EXPECT_EQ(e.at("exit_status"), 3);
  EXPECT_EQ(e.at("log"), "worker_1.log");
  // The transport learns that no channel comes any more only at the end of the job.
  EXPECT_EQ(fake.no_more_channels_at, Times{10010});
}

TEST_F(ProcessRecovery, AWorkerFailingBeyondTheBudgetEndsTheJobWithItsStatus) {
  options_.max_restarts = 1;
  ProcScript killed = exits(1, 137);
  killed.signal = "KILL";
  FakeTransport fake(
      {host({ProcScript{}, ProcScript{}}), host({exits(1, 3), ProcScript{}, killed})});
  EXPECT_EQ(run(fake), 137);
  ASSERT_EQ(process_channels(fake), 5u);                        // one restart, no second one
  EXPECT_EQ(fake.channel(fake.process(1, 2)).opened_ms, 1060);  // the leftovers ended first
  // The usual teardown, from the second failure (1 s after the restart at 1060 ms).
  EXPECT_EQ(fake.control_times(0, 'k'), Times{2060});
  EXPECT_EQ(fake.control_times(1, 'k'), Times{2060});
  EXPECT_EQ(runner().cause(), "rank 1 on node1 failed: killed by SIGKILL");
  EXPECT_EQ(statuses(), (Strings{kTerm, kTerm, "killed by SIGKILL", kTerm}));
  EXPECT_EQ(runner().process_restarts().size(), 1u);
  EXPECT_EQ(console_err(),
            "msrun-ssh: process restart 1 of 1: rank 1 on node1 failed: exit 3; started again in "
            "place\n"
            "msrun-ssh: no process restart left (--max_restarts=1)\n"
            "msrun-ssh: rank 1 on node1 failed: killed by SIGKILL; stopping the job on every "
            "host\n");
}

TEST_F(ProcessRecovery, WorkersFailingTogetherShareTheBudget) {
  // Ranks 1 and 2 fail 10 ms apart, before rank 1's restart is done (it waits for what its run
  // left): the budget of one restart is taken by rank 1, and rank 2's failure ends the job.
  options_.max_restarts = 1;
  FakeTransport fake({host({ProcScript{}, ProcScript{}}),
                      host({exits(1, 3), exits(1.01, 4), exits(2), exits(2)})});
  EXPECT_EQ(run(fake), 4);
  EXPECT_LE(runner().process_restarts().size(), 1u);
  EXPECT_EQ(runner().cause(), "rank 2 on node1 failed: exit 4");
  EXPECT_NE(console_err().find("msrun-ssh: no process restart left (--max_restarts=1)\n"),
            std::string::npos)
      << console_err();
  EXPECT_EQ(console_err().find("restart 2 of 1"), std::string::npos) << console_err();
}

TEST_F(ProcessRecovery, ASchedulerFailureTearsDownAtOnce) {
  FakeTransport fake({host({exits(1, 4), ProcScript{}}), host({ProcScript{}, ProcScript{}})});
  EXPECT_EQ(run(fake), 4);
  EXPECT_EQ(process_channels(fake), 4u);  // nothing started again
  EXPECT_EQ(fake.control_times(0, 'k'), Times{1010});
  EXPECT_EQ(fake.control_times(1, 'k'), Times{1010});
  EXPECT_TRUE(runner().process_restarts().empty());
  EXPECT_EQ(runner().cause(), "scheduler on node0 failed: exit 4");
}

TEST_F(ProcessRecovery, AWorkerThatCannotBeStartedAgainEndsTheJob) {
  ProcScript refused;
  refused.open_error = "channel open refused";
  FakeTransport fake(
      {host({ProcScript{}, ProcScript{}}), host({exits(1, 3), ProcScript{}, refused})});
  EXPECT_EQ(run(fake), ms::kExitHostFailure);
  EXPECT_EQ(process_channels(fake), 5u);
  EXPECT_EQ(runner().cause(), "cannot start rank 1 on node1: channel open refused");
  // The refusal comes 1 ms after the exec, at 1060 ms once the leftovers were ended.
  EXPECT_EQ(fake.control_times(0, 'k'), Times{1061});
}

// The failed run left a grandchild that holds its channel open, and the command that was to end
// it cannot start (the agent refuses it, the host's sshd is gone): nothing would ever close that
// channel, so the job ends with the worker's status, and its teardown ends what the run left.
TEST_F(ProcessRecovery, AFailedRunWhoseLeftoversCannotBeEndedEndsTheJob) {
  ProcScript failed = exits(1, 3);
  failed.stays_open = true;
  ProcScript refused;
  refused.open_error = "channel open refused";
  HostScript node1 = host({failed, ProcScript{}});
  node1.other_commands = {{"msrun-ssh-leftovers", refused}};
  FakeTransport fake({host({ProcScript{}, ProcScript{}}), node1});
  EXPECT_EQ(run(fake), 3);
  EXPECT_EQ(process_channels(fake), 4u);  // not started again
  EXPECT_TRUE(runner().process_restarts().empty());
  EXPECT_EQ(runner().cause(),
            "rank 1 on node1 failed: exit 3; not started again: what its run left cannot be "
            "ended: channel open refused");
  // The failure at 1010 ms, the refusal 1 ms after the leftovers' exec: the teardown then.
  EXPECT_EQ(fake.control_times(0, 'k'), Times{1011});
  EXPECT_EQ(fake.control_times(1, 'k'), Times{1011});
  EXPECT_EQ(runner().root_cause_host(), "node1");
  EXPECT_EQ(statuses(), (Strings{kTerm, kTerm, "exit 3", kTerm}));
}

// The failed run's channel stays open although what it left was ended (something the leftovers
// command cannot end or find holds its output): after the teardown's time for it, the job ends
// with the worker's status, as without a restart; it never waits for ever.
TEST_F(ProcessRecovery, AFailedRunThatStaysOpenAfterItsLeftoversEndsTheJob) {
  options_.kill_grace = 2;
  ProcScript failed = exits(1, 3);
  failed.stays_open = true;
  FakeTransport fake({host({exits(30), exits(30)}), host({failed, exits(30)})});
  EXPECT_EQ(run(fake), 3);
  EXPECT_EQ(process_channels(fake), 4u);  // not started again
  EXPECT_TRUE(runner().process_restarts().empty());
  EXPECT_EQ(runner().cause(),
            "rank 1 on node1 failed: exit 3; not started again: its run's output was still held "
            "open 12 s after what it left was ended");
  // The leftovers end at 1060 ms; 2 s of grace and 10 s of slack later, the teardown.
  EXPECT_EQ(fake.control_times(1, 'k'), Times{13060});
  EXPECT_EQ(runner().root_cause_host(), "node1");
}

TEST_F(ProcessRecovery, CtrlCAsAWorkerFailsRestartsNothing) {
  FakeTransport fake(
      {host({ProcScript{}, ProcScript{}}), host({exits(1, 3), ProcScript{}, exits(1)})});
  // The signal comes in the same instant, before the runner has seen the failure.
  fake.at(1.01, [&] { runner().on_signal(SIGINT); });
  EXPECT_EQ(run(fake), 130);
  EXPECT_EQ(process_channels(fake), 4u);
  EXPECT_TRUE(runner().process_restarts().empty());
  EXPECT_TRUE(runner().interrupted());
  // As any process that ends during a teardown.
  EXPECT_EQ(statuses(), (Strings{kTerm, kTerm, "exit 3 (ended by teardown)", kTerm}));
}

TEST_F(ProcessRecovery, CtrlCWhileTheRestartedWorkerRunsEndsWith130AndNoFurtherRestart) {
  FakeTransport fake({host({ProcScript{}, ProcScript{}}),
                      host({exits(1, 3), ProcScript{}, ProcScript{}, exits(1)})});
  fake.at(3, [&] { runner().on_signal(SIGINT); });
  EXPECT_EQ(run(fake), 130);
  EXPECT_EQ(process_channels(fake), 5u);  // the restart at 1010 ms, none after the teardown
  EXPECT_EQ(fake.control_times(1, 'k'), Times{3000});
  EXPECT_EQ(runner().process_restarts().size(), 1u);
  EXPECT_EQ(statuses(), Strings(4, kTerm));  // the restarted rank 1 too
  EXPECT_EQ(ended_ms_, 3100);
}

TEST_F(ProcessRecovery, UnderTheJobPolicyAFailedWorkerTearsDownAsAlways) {
  options_.restart_policy = ms::RestartPolicy::kJob;
  FakeTransport fake(
      {host({ProcScript{}, ProcScript{}}), host({exits(1, 3), ProcScript{}, exits(1)})});
  EXPECT_EQ(run(fake), 3);
  EXPECT_EQ(process_channels(fake), 4u);
  EXPECT_EQ(fake.control_times(1, 'k'), Times{1010});
  EXPECT_EQ(fake.no_more_channels_at, Times{10});  // right after the start, as always
  EXPECT_TRUE(runner().process_restarts().empty());
  EXPECT_EQ(console_err(),
            "msrun-ssh: rank 1 on node1 failed: exit 3; stopping the job on every host\n");
  EXPECT_EQ(ms::job_restarts(options_), 2);
  options_.restart_policy = ms::RestartPolicy::kProcess;
  EXPECT_EQ(ms::job_restarts(options_), 0);  // the budget is the in-place restarts'
  EXPECT_EQ(ms::format_process_restarts({}, 2), "");
}

}  // namespace
