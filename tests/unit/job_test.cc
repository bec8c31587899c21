// The SSH edge of a run (src/runner/job.cc) on hosts already connected: `stop` against
// ReplyTransport (scripted replies, a fake clock, no SSH). Printed text is kept in memory.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "msrun_ssh/command.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/runner.h"
#include "reply_transport.h"

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

}  // namespace
}  // namespace msrun_ssh
