// The terminal's status row (src/output/status_line.cc): what it writes around other output, the
// start-up progress texts, and Output's console writes going through it.
#include "msrun_ssh/status_line.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <string>

#include "msrun_ssh/console_sink.h"
#include "msrun_ssh/output.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

// A pipe standing in for the terminal: everything written to it, read back.
struct Tty {
  int fds[2] = {-1, -1};
  Tty() {
    EXPECT_EQ(pipe(fds), 0);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
  }
  ~Tty() {
    close(fds[0]);
    close(fds[1]);
  }
  std::string take() {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }
};

TEST(StatusLine, DrawsErasesAndRedrawsAroundWholeLines) {
  Tty tty;
  StatusLine row(tty.fds[1], true, 40);
  row.show("msrun-ssh: connecting 1/3");
  EXPECT_EQ(tty.take(), "\r\033[Kmsrun-ssh: connecting 1/3");
  row.show("msrun-ssh: connecting 1/3");  // unchanged: nothing drawn
  EXPECT_EQ(tty.take(), "");
  row.write(tty.fds[1], "[0@node0] hello\n");
  EXPECT_EQ(tty.take(), "\r\033[K[0@node0] hello\n\r\033[Kmsrun-ssh: connecting 1/3");
  row.write(tty.fds[1], "partial");  // no newline: the row stays erased until the next show
  EXPECT_EQ(tty.take(), "\r\033[Kpartial");
  row.write(tty.fds[1], " line\n");
  EXPECT_EQ(tty.take(), " line\n");
  row.show("x");
  row.hide();
  EXPECT_EQ(tty.take(), "\r\033[Kx\r\033[K");
  row.write(tty.fds[1], "after\n");
  EXPECT_EQ(tty.take(), "after\n");
}

TEST(StatusLine, CutToTheWidthAndOffWhenDisabled) {
  Tty tty;
  StatusLine row(tty.fds[1], true, 10);
  row.show("0123456789abcdef");
  EXPECT_EQ(tty.take(), "\r\033[K012345678");
  StatusLine off(tty.fds[1], false);
  off.show("anything");
  off.write(tty.fds[1], "line\n");
  EXPECT_EQ(tty.take(), "line\n");
  EXPECT_FALSE(terminal_status_enabled(tty.fds[1], false));  // a pipe is no terminal
}

TEST(StatusLine, StartProgressTexts) {
  StartProgress p;
  p.hosts = 500;
  p.processes = 4000;
  p.done = 12;
  p.failed = 1;
  EXPECT_EQ(p.text(), "msrun-ssh: connecting 12/500 (failed 1)");
  p.phase = StartProgress::Phase::kWatchdogs;
  p.done = 480;
  p.phase_seconds = 2.5;
  p.slowest = {"a", "b", "c", "d", "e"};
  EXPECT_EQ(p.text(), "msrun-ssh: watchdogs ready 480/500");
  p.phase_seconds = 3;
  EXPECT_EQ(p.text(), "msrun-ssh: watchdogs ready 480/500; waiting for a, b, c (+2)");
  p.phase = StartProgress::Phase::kStarted;
  p.done = 4000;
  p.slowest.clear();
  EXPECT_EQ(p.text(), "msrun-ssh: started 4000/4000");
  EXPECT_EQ(running_status_text(7, 1, 0, 12345, 3723),
            "msrun-ssh: running 7, exited 1, failed 0 | 12.3 KB/s | 01:02:03");
}

TEST(StatusLine, StartViewNamesTheSlowestAfterThreeSeconds) {
  Tty tty;
  StatusLine row(tty.fds[1], true, 200);
  double now = 0;
  StartView view(row, {"h0", "h1", "h2"}, 7, [&now] { return now; });
  now = 0.15;
  view.host_done(0, true);
  now = 0.2;
  view.host_done(2, false);  // within 0.1 s of the last draw: not drawn yet
  EXPECT_EQ(row.text(), "msrun-ssh: connecting 1/3");
  now = 0.35;
  view.tick();
  EXPECT_EQ(row.text(), "msrun-ssh: connecting 1/3 (failed 1)");
  now = 3.5;
  view.tick();
  EXPECT_EQ(row.text(), "msrun-ssh: connecting 1/3 (failed 1); waiting for h1");
  view.phase(StartProgress::Phase::kWatchdogs);
  now = 4;
  view.host_done(1, true);
  EXPECT_EQ(row.text(), "msrun-ssh: watchdogs ready 1/3");
  view.processes_started(7);
  EXPECT_EQ(row.text(), "msrun-ssh: started 7/7");
  view.finish();
  EXPECT_EQ(row.text(), "");
  EXPECT_TRUE(view.finished());
  std::string all = tty.take();
  EXPECT_EQ(all.substr(all.size() - 4), "\r\033[K") << "the row ends erased";
}

TEST(StatusLine, OutputWritesGoThroughTheRow) {
  test::TempDir dir;
  Tty tty;
  StatusLine row(tty.fds[1], true, 80);
  OutputConfig oc;
  oc.log_dir = dir.path();
  oc.console_out = tty.fds[1];
  oc.console_err = tty.fds[1];
  oc.status = &row;
  Output out(oc);
  int p = out.add_process("0@h", "w.log", true, 0, "h");
  row.show("msrun-ssh: started 1/1");
  tty.take();
  out.data(p, false, "one\ntwo\n");
  out.flush();
  EXPECT_EQ(tty.take(), "\r\033[K[0@h] one\n[0@h] two\n\r\033[Kmsrun-ssh: started 1/1");
  out.message("bye");
  EXPECT_EQ(tty.take(), "\r\033[Kmsrun-ssh: bye\n\r\033[Kmsrun-ssh: started 1/1");
}

// The window made narrower while the row shows (a tmux split): the row is cut to the new width
// (it was measured once, wrapped, and its erase cleared only its last screen line).
TEST(StatusLine, TheRowFollowsTheTerminalsWidth) {
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  int slave = ::open(ptsname(master), O_RDWR | O_NOCTTY);
  ASSERT_GE(slave, 0);
  winsize ws{};
  ws.ws_col = 80;
  ws.ws_row = 24;
  ASSERT_EQ(ioctl(slave, TIOCSWINSZ, &ws), 0);
  termios raw{};
  ASSERT_EQ(tcgetattr(slave, &raw), 0);
  cfmakeraw(&raw);
  ASSERT_EQ(tcsetattr(slave, TCSANOW, &raw), 0);
  fcntl(master, F_SETFL, O_NONBLOCK);
  auto drawn = [&] {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(master, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  };
  {
    StatusLine row(slave, true);
    const std::string text(100, 'x');
    row.show(text);
    EXPECT_EQ(drawn(), "\r\033[K" + std::string(79, 'x'));
    ws.ws_col = 40;
    ASSERT_EQ(ioctl(slave, TIOCSWINSZ, &ws), 0);
    row.show(text + "y");
    EXPECT_EQ(drawn(), "\r\033[K" + std::string(39, 'x'));
    // Narrower again, and a line written before the next show: redrawn under it at the new width.
    ws.ws_col = 30;
    ASSERT_EQ(ioctl(slave, TIOCSWINSZ, &ws), 0);
    row.write(slave, "[0@h] a line\n");
    EXPECT_EQ(drawn(), "\r\033[K[0@h] a line\n\r\033[K" + std::string(29, 'x'));
  }
  ::close(slave);
  ::close(master);
}

// A terminal stopped by Ctrl-S under a flood of output: the row's erase and redraw around each
// line (never dropped, unlike the lines) piled up in the console's queue past its bound, without
// limit. Now the row waits for the console to catch up before it is drawn again.
TEST(StatusLine, ARowIsNotRedrawnWhileTheConsoleIsBehind) {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  ConsoleSink sink(ConsoleSink::kDefaultMaxQueued, [&](int, std::string_view) {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return open; });
  });
  Tty tty;
  StatusLine row(tty.fds[1], true, 80);
  row.set_sink(&sink);
  row.show("msrun-ssh: running 8, exited 0, failed 0 | 1.0 MB/s | 00:00:01");
  for (int i = 0; i < 400000; ++i) {
    row.write(1, "[0@h] a line of the job's output\n", true);
    if (i % 100 == 0) row.show(fmt::format("msrun-ssh: running 8 | {}", i));
  }
  EXPECT_LE(sink.queued_bytes(), ConsoleSink::kDefaultMaxQueued + (size_t{128} << 10));
  {
    std::lock_guard lock(m);
    open = true;
  }
  cv.notify_all();
  EXPECT_TRUE(sink.drain());
}

}  // namespace
}  // namespace msrun_ssh
