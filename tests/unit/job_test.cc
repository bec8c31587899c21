// The SSH edge of a run (src/runner/job.cc) on hosts already connected: `stop` and a detached
// start against ReplyTransport (scripted replies, a fake clock, no SSH). Printed text is kept in
// memory.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "msrun_ssh/command.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/runner.h"
#include "reply_transport.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

using fake::Reply;
using fake::ReplyTransport;

const std::vector<std::string> kAddresses = {"198.18.1.10", "198.18.1.11"};

struct Stopped {
  int status = -1;
  std::string out, err;
};

// What is printed to a FILE*, kept in memory.
class Printed {
 public:
  Printed() : file_(open_memstream(&data_, &size_)) {}
  ~Printed() {
    if (file_) std::fclose(file_);
    std::free(data_);
  }
  Printed(const Printed&) = delete;
  Printed& operator=(const Printed&) = delete;
  std::FILE* file() { return file_; }
  std::string text() {
    std::fflush(file_);
    return std::string(data_, size_);
  }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
  std::FILE* file_;
};

Stopped stop(ReplyTransport& t, const Options& options) {
  Printed out, err;
  Stopped s;
  s.status = stop_on_hosts(t, kAddresses, options, out.file(), err.file());
  s.out = out.text();
  s.err = err.text();
  return s;
}

Options stop_options() {
  Options o;
  o.command = Command::kStop;
  o.job = "20260101-000000-abcdef";
  o.kill_grace = 5;
  o.connect_timeout = 10;
  return o;
}

TEST(Stop, PrintsEveryProcessSignalledAndTheTally) {
  ReplyTransport t;
  t.on("msrun-ssh-stop",
       Reply{.output = {{0.1, "killed 101 SIGTERM python train.py \nkilled 102 SIGTERM python"},
                        {0.2, " train.py \nmsrun-ssh-stop: done\n"}},
             .exit_at = 0.3},
       0);
  // A host where the stop itself failed still answered: what it killed counts.
  t.on("msrun-ssh-stop",
       Reply{.output = {{0.1, "killed 7 SIGKILL sleep 100 \n"}}, .exit_at = 0.2, .status = 1}, 1);
  Options o = stop_options();
  Stopped s = stop(t, o);
  EXPECT_EQ(s.status, kExitOk);
  EXPECT_EQ(s.out,
            "198.18.1.10: killed 101 SIGTERM python train.py\n"
            "198.18.1.10: killed 102 SIGTERM python train.py\n"
            "198.18.1.11: killed 7 SIGKILL sleep 100\n"
            "job 20260101-000000-abcdef: 3 signals sent on 2 hosts\n");
  EXPECT_EQ(s.err, "");
  ASSERT_EQ(t.execs.size(), 2u);
  for (const auto& e : t.execs) EXPECT_EQ(e.command, stop_command(o.job, 5));
  EXPECT_EQ(t.execs[1].host, 1u);
  EXPECT_EQ(t.now_ms(), 300);
}

TEST(Stop, AHostThatDoesNotFinishIsNamedAndFailsTheStop) {
  ReplyTransport t;
  t.on("msrun-ssh-stop", Reply{.output = {{0.1, "killed 5 x\n"}}, .exit_at = -1}, 1);
  t.on("msrun-ssh-stop", Reply{.output = {{0.1, "msrun-ssh-stop: done\n"}}});
  Stopped s = stop(t, stop_options());
  EXPECT_EQ(s.status, kExitHostFailure);
  EXPECT_EQ(s.err, "msrun-ssh: 198.18.1.11: stop did not finish\n");
  // Its lines are not trusted: the stop did not end there.
  EXPECT_EQ(s.out, "job 20260101-000000-abcdef: 0 signals sent on 2 hosts\n");
  // --kill_grace + --connect_timeout + 5 s, then the stop command itself is killed.
  EXPECT_EQ(t.now_ms(), 20000);
  ASSERT_EQ(t.kills.size(), 1u);
  EXPECT_EQ(t.kills[0].channel, 1);
}

TEST(Stop, AHostThatCannotRunItFailsTheStop) {
  ReplyTransport t;
  t.on("msrun-ssh-stop", Reply{.open_error = "no live connection to the host"}, 0);
  t.on("msrun-ssh-stop", Reply{});
  Stopped s = stop(t, stop_options());
  EXPECT_EQ(s.status, kExitHostFailure);
  EXPECT_EQ(s.err, "msrun-ssh: 198.18.1.10: stop did not finish\n");
  EXPECT_EQ(s.out, "job 20260101-000000-abcdef: 0 signals sent on 2 hosts\n");
}

// A host that could not be reached (dead: often why a job is stopped) is named, and every other
// host is stopped all the same; the stop fails (255) as it could not end everything.
TEST(Stop, AHostNotReachedIsNamedAndTheOthersAreStopped) {
  ReplyTransport t;
  t.on("msrun-ssh-stop",
       Reply{.output = {{0.1, "killed 101 SIGTERM python train.py \nmsrun-ssh-stop: done\n"}},
             .exit_at = 0.2},
       0);
  Printed out, err;
  int status = stop_on_hosts(t, kAddresses, stop_options(), out.file(), err.file(),
                             {"", "timed out after 10 s (connecting)"});
  EXPECT_EQ(status, kExitHostFailure);
  EXPECT_EQ(err.text(),
            "msrun-ssh: 198.18.1.11: timed out after 10 s (connecting): not stopped there (its "
            "processes may still run)\n");
  EXPECT_EQ(out.text(),
            "198.18.1.10: killed 101 SIGTERM python train.py\n"
            "job 20260101-000000-abcdef: 1 signals sent on 1 of 2 hosts\n");
  ASSERT_EQ(t.execs.size(), 1u);
  EXPECT_EQ(t.execs[0].host, 0u);
}

// ---- A detached start (start_detached) --------------------------------------------------------

// Two hosts with one worker each; logs under a log dir of their own.
Plan detached_plan() {
  Plan plan;
  plan.job_id = "20260101-000000-abcdef";
  for (size_t h = 0; h < kAddresses.size(); ++h) {
    HostPlan hp;
    hp.node_rank = static_cast<int>(h);
    hp.host.address = kAddresses[h];
    Process p;
    p.role = Role::kWorker;
    p.rank = static_cast<int>(h);
    p.local_index = 0;
    p.log_name = fmt::format("worker_{}.log", h);
    p.workdir = "/w";
    p.argv = {"python3", "train.py"};
    hp.processes.push_back(p);
    plan.hosts.push_back(std::move(hp));
  }
  plan.worker_num = 2;
  return plan;
}

Options detached_options() {
  Options o;
  o.join = false;
  o.hostfile = "hosts.toml";
  o.log_dir = "logs";
  o.kill_grace = 5;
  o.connect_timeout = 10;
  return o;
}

// A stand-in for the launcher's signalfd: a pipe that holds the signals given, as signalfd's
// records, ready to be read at once.
class FakeSignals {
 public:
  explicit FakeSignals(const std::vector<int>& signals) {
    if (::pipe2(fds_, O_NONBLOCK | O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
    for (int signo : signals) send(signo);
  }
  void send(int signo) const {
    signalfd_siginfo info{};
    info.ssi_signo = static_cast<uint32_t>(signo);
    if (::write(fds_[1], &info, sizeof info) != static_cast<ssize_t>(sizeof info))
      throw std::runtime_error("write");
  }
  ~FakeSignals() {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  FakeSignals(const FakeSignals&) = delete;
  FakeSignals& operator=(const FakeSignals&) = delete;
  int fd() const { return fds_[0]; }

 private:
  int fds_[2] = {-1, -1};
};

struct Started {
  int status = -1;
  std::string err;
};

// start_detached with the job records in a directory of their own (XDG_STATE_HOME).
Started start(ReplyTransport& t, const FakeSignals& signals, const test::TempDir& state) {
  const char* was = std::getenv("XDG_STATE_HOME");
  std::string saved = was ? was : "";
  ::setenv("XDG_STATE_HOME", state.path().c_str(), 1);
  testing::internal::CaptureStderr();
  Started s;
  s.status = start_detached(detached_options(), detached_plan(), t, signals.fd());
  s.err = testing::internal::GetCapturedStderr();
  if (was)
    ::setenv("XDG_STATE_HOME", saved.c_str(), 1);
  else
    ::unsetenv("XDG_STATE_HOME");
  return s;
}

// A process that fails to start stops the job on every host; a host whose stop does not finish is
// named, as `stop --job` names it (its processes may still run there); the start failed (255).
TEST(Detached, AFailedStartNamesEachHostWhoseStopDidNotFinish) {
  test::TempDir state;
  ReplyTransport t;
  t.on("msrun-ssh-stop", Reply{.output = {{0.1, "msrun-ssh-stop: done\n"}}, .exit_at = 0.2}, 0);
  t.on("msrun-ssh-stop", Reply{.exit_at = -1}, 1);  // its host stops answering
  t.on("MSRUN_SSH_KEEPER", Reply{.errors = {{0.01, "sh: 1: cd: can't cd to /w\n"}}, .status = 2},
       0);
  t.on("MSRUN_SSH_KEEPER", Reply{}, 1);
  FakeSignals none({});
  Started s = start(t, none, state);
  EXPECT_EQ(s.status, kExitHostFailure);
  EXPECT_NE(s.err.find("msrun-ssh: 198.18.1.10: sh: 1: cd: can't cd to /w\n"), std::string::npos)
      << s.err;
  EXPECT_NE(s.err.find("1 processes failed to start; stopping job 20260101-000000-abcdef\n"),
            std::string::npos)
      << s.err;
  EXPECT_NE(s.err.find("msrun-ssh: 198.18.1.11: the stop of job 20260101-000000-abcdef did not "
                       "finish there; its processes may still run (msrun-ssh stop --job "
                       "20260101-000000-abcdef)\n"),
            std::string::npos)
      << s.err;
  EXPECT_EQ(s.err.find("198.18.1.10: the stop"), std::string::npos) << s.err;
  // The record stays, no longer starting: `stop --job` finds the job.
  std::string record = test::slurp(state.path() + "/msrun-ssh/jobs/20260101-000000-abcdef.json");
  EXPECT_NE(record.find("20260101-000000-abcdef"), std::string::npos);
  EXPECT_NE(record.find("\"starting\": false"), std::string::npos) << record;
}

// When every stop finishes, the failed start's status is the host failure's, and no host is named.
TEST(Detached, AFailedStartWhoseStopsFinishedNamesNoHost) {
  test::TempDir state;
  ReplyTransport t;
  t.on("msrun-ssh-stop", Reply{.output = {{0.1, "msrun-ssh-stop: done\n"}}, .exit_at = 0.2});
  t.on("MSRUN_SSH_KEEPER", Reply{.status = 2}, 0);
  t.on("MSRUN_SSH_KEEPER", Reply{});
  FakeSignals none({});
  Started s = start(t, none, state);
  EXPECT_EQ(s.status, kExitHostFailure);
  EXPECT_EQ(s.err.find("did not finish"), std::string::npos) << s.err;
}

// Ctrl-C during the start stops the job; a second one during that stop ends its grace at once
// ('K' to each stop still running), and a host that still does not finish is named.
TEST(Detached, ASecondSignalDuringTheStopEndsItsGraceAndUnfinishedHostsAreNamed) {
  test::TempDir state;
  ReplyTransport t;
  t.on("msrun-ssh-stop", Reply{.output = {{0.1, "msrun-ssh-stop: done\n"}}, .exit_at = 0.2}, 0);
  t.on("msrun-ssh-stop", Reply{.exit_at = -1}, 1);
  t.on("MSRUN_SSH_KEEPER", Reply{.exit_at = -1});  // still starting when Ctrl-C comes
  FakeSignals two({SIGINT, SIGINT});
  Started s = start(t, two, state);
  EXPECT_EQ(s.status, kExitSigint);
  EXPECT_NE(s.err.find("interrupted while starting job 20260101-000000-abcdef; stopping it\n"),
            std::string::npos)
      << s.err;
  EXPECT_NE(s.err.find("msrun-ssh: 198.18.1.11: the stop of job 20260101-000000-abcdef did not "
                       "finish there"),
            std::string::npos)
      << s.err;
  // The stops got 'K' at once, and the host that did not answer it was given up on kKillNowWaitMs
  // (3 s) later, not after the grace and the connect timeout.
  size_t told = 0;
  for (size_t c = 0; c < t.execs.size(); ++c)
    if (t.execs[c].command.find("msrun-ssh-stop") != std::string::npos &&
        t.channel(static_cast<ChannelId>(c)).written == "K")
      ++told;
  EXPECT_GE(told, 1u);
  EXPECT_LT(t.now_ms(), 5000);
}

// A host lost while its process starts: whether the process started there is not known, so the
// start failed (it was taken for started: exit 0, the job id, and no stop anywhere).
TEST(Detached, AHostLostDuringTheStartFailsItAndStopsTheJob) {
  test::TempDir state;
  ReplyTransport t;
  t.on("msrun-ssh-stop", Reply{.output = {{0.1, "msrun-ssh-stop: done\n"}}, .exit_at = 0.2}, 0);
  t.on("msrun-ssh-stop", Reply{.open_error = "no live connection to the host"}, 1);
  t.on("MSRUN_SSH_KEEPER", Reply{.output = {{0.001, "msrun-ssh: started 42\n"}}}, 0);
  t.on("MSRUN_SSH_KEEPER", Reply{.exit_at = -1}, 1);
  t.lose(1, 0.005, "connection reset by peer");
  FakeSignals none({});
  Started s = start(t, none, state);
  EXPECT_EQ(s.status, kExitHostFailure);  // a host lost during the start (docs/reliability.md)
  EXPECT_EQ(s.err.find("started detached"), std::string::npos) << s.err;
  EXPECT_NE(s.err.find("1 processes failed to start"), std::string::npos) << s.err;
  EXPECT_NE(s.err.find("msrun-ssh: 198.18.1.11: the stop of job"), std::string::npos) << s.err;
  EXPECT_GE(t.find("msrun-ssh-stop", 0), 0);
}

// A signal during the stop of a failed start cuts its grace short ('K') and keeps the failure's
// status: the first event wins.
TEST(Detached, ASignalDuringTheStopOfAFailedStartKeepsTheFailuresStatus) {
  test::TempDir state;
  ReplyTransport t;
  t.on("msrun-ssh-stop", Reply{.output = {{0.1, "msrun-ssh-stop: done\n"}}, .exit_at = 0.2}, 0);
  t.on("msrun-ssh-stop", Reply{.output = {{1.9, "msrun-ssh-stop: done\n"}}, .exit_at = 2}, 1);
  t.on("MSRUN_SSH_KEEPER", Reply{.status = 2}, 0);
  t.on("MSRUN_SSH_KEEPER", Reply{});
  FakeSignals signals({});
  t.at(0.05, [&signals] { signals.send(SIGTERM); });
  Started s = start(t, signals, state);
  EXPECT_EQ(s.status, kExitHostFailure);
  EXPECT_EQ(s.err.find("did not finish"), std::string::npos) << s.err;
  ChannelId stop = t.find("msrun-ssh-stop", 1);
  ASSERT_GE(stop, 0);
  EXPECT_EQ(t.channel(stop).written, "K");
}

}  // namespace
}  // namespace msrun_ssh
