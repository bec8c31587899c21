// The SSH pool's own fds (src/ssh/channels.cc) without a host: Transport::watch_fd's promise, a
// kFdReady whenever the fd is readable, for every kind of fd the launcher's stdin may be.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "msrun_ssh/base.h"
#include "msrun_ssh/ssh.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

class SshPoolFds : public test::TempDirTest {
 protected:
  // The fds each poll reported ready, for up to `polls` polls of at most 5 s each.
  std::vector<int> ready_fds(SshPool& pool, int polls) {
    std::vector<int> ready;
    for (int i = 0; i < polls; ++i)
      pool.poll(5000, [&](const TransportEvent& e) {
        if (e.kind == TransportEvent::Kind::kFdReady) ready.push_back(e.fd);
      });
    return ready;
  }
  SshPool pool_{{}, SshSettings{}};
};

// epoll refuses a regular file and /dev/null (EPERM): such an fd (`msrun-ssh ... < input.txt`,
// `< /dev/null` from cron or nohup) is still reported, at once, until it is unwatched; before, it
// was never reported and a rank reading stdin waited for its end for ever.
TEST_F(SshPoolFds, ARegularFileAndDevNullAreReportedReadyAtOnce) {
  int file = ::open(write("in.txt", "input\n").c_str(), O_RDONLY | O_CLOEXEC);
  int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(file, 0);
  ASSERT_GE(null, 0);
  pool_.watch_fd(file);
  pool_.watch_fd(null);
  double before = monotonic_ms();
  EXPECT_EQ(ready_fds(pool_, 2), (std::vector<int>{file, null, file, null}));
  EXPECT_LT(monotonic_ms() - before, 4000);  // not a 5 s wait
  pool_.unwatch_fd(file);
  EXPECT_EQ(ready_fds(pool_, 1), std::vector<int>{null});
  pool_.unwatch_fd(null);
  ::close(file);
  ::close(null);
}

// A pipe is watched by epoll as before: ready only when written.
TEST_F(SshPoolFds, APipeIsReportedWhenItHasData) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  pool_.watch_fd(fds[0]);
  bool seen = false;
  pool_.poll(50, [&](const TransportEvent& e) { seen = e.kind == TransportEvent::Kind::kFdReady; });
  EXPECT_FALSE(seen);
  ASSERT_EQ(::write(fds[1], "x", 1), 1);
  EXPECT_EQ(ready_fds(pool_, 1), std::vector<int>{fds[0]});
  pool_.unwatch_fd(fds[0]);
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
}  // namespace msrun_ssh
