// The console sink: a console that takes nothing never blocks the writer, whole lines past the
// bound are dropped and counted, the launcher's own lines never are, and order is kept.
#include "msrun_ssh/console_sink.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace msrun_ssh {
namespace {

// A console that takes nothing until opened (a terminal stopped by Ctrl-S, a paused pager).
class StoppedConsole {
 public:
  ConsoleWriteFn writer() {
    return [this](int fd, std::string_view data) {
      std::unique_lock lock(m_);
      open_cv_.wait(lock, [&] { return open_; });
      written_.emplace_back(fd, std::string(data));
    };
  }
  void open() {
    std::lock_guard lock(m_);
    open_ = true;
    open_cv_.notify_all();
  }
  // Everything written to `fd`, in order.
  std::string text(int fd) {
    std::lock_guard lock(m_);
    std::string all;
    for (auto& [f, d] : written_)
      if (f == fd) all += d;
    return all;
  }

 private:
  std::mutex m_;
  std::condition_variable open_cv_;
  bool open_ = false;
  std::vector<std::pair<int, std::string>> written_;
};

TEST(ConsoleSink, AStoppedConsoleNeverBlocksAndLinesPastTheBoundAreDroppedAndCounted) {
  StoppedConsole console;
  ConsoleSink sink(100, console.writer());
  // 1000 lines of 10 bytes: the writer is stuck in the first chunk; at most 100 bytes wait.
  for (int i = 0; i < 1000; ++i) sink.write(1, "line " + std::to_string(100 + i) + "\n", true);
  EXPECT_LE(sink.queued_bytes(), 100u);
  EXPECT_GE(sink.dropped_lines(), 980u);
  // The launcher's own message is queued whatever the bound.
  sink.write(2, "msrun-ssh: a message of the launcher\n", false);
  EXPECT_FALSE(sink.drain(50));  // the console still takes nothing
  console.open();
  EXPECT_TRUE(sink.drain());
  const std::string out = console.text(1), err = console.text(2);
  EXPECT_EQ(out.rfind("line 100\n", 0), 0u) << out;  // the first lines, in order, whole
  EXPECT_NE(err.find("msrun-ssh: a message of the launcher\n"), std::string::npos) << err;
  const std::string marker = "msrun-ssh: ... " + group_thousands(sink.dropped_lines()) +
                             " lines not shown (the console fell behind); the logs have them\n";
  EXPECT_NE(err.find(marker), std::string::npos) << err;
  // Lines shown plus lines dropped: every line accounted for, none torn.
  size_t shown = 0;
  for (char c : out) shown += c == '\n';
  EXPECT_EQ(shown + sink.dropped_lines(), 1000u);
  for (size_t at = 0; at < out.size(); at = out.find('\n', at) + 1)
    EXPECT_EQ(out.compare(at, 5, "line "), 0) << out.substr(at, 20);
}

TEST(ConsoleSink, AConsoleThatKeepsUpGetsEveryLineInOrderAndNoMarker) {
  std::string got;
  std::mutex m;
  ConsoleSink sink(1 << 20, [&](int, std::string_view d) {
    std::lock_guard lock(m);
    got.append(d);
  });
  std::string want;
  for (int i = 0; i < 5000; ++i) {
    std::string l = std::to_string(i) + "\n";
    want += l;
    sink.write(1, l, true);
  }
  sink.drain();
  EXPECT_EQ(sink.dropped_lines(), 0u);
  std::lock_guard lock(m);
  EXPECT_EQ(got, want);
}

TEST(ConsoleSink, AWriteLargerThanTheBoundGoesOutWhenNothingWaits) {
  StoppedConsole console;
  ConsoleSink sink(100, console.writer());
  const std::string turn = std::string(60, 'a') + "\n" + std::string(60, 'b') + "\n";
  sink.write(1, turn, true);      // a gathered turn of two lines, 122 bytes: nothing waits
  sink.write(1, "next\n", true);  // the first still waits: this one is past the bound
  EXPECT_EQ(sink.dropped_lines(), 1u);
  console.open();
  EXPECT_TRUE(sink.drain());
  EXPECT_EQ(console.text(1), turn);
}

TEST(ConsoleSink, AfterStopWritesGoOutAtOnce) {
  std::string got;
  ConsoleSink sink(100, [&](int, std::string_view d) { got.append(d); });
  sink.write(1, "queued\n", true);
  sink.stop();
  EXPECT_EQ(got, "queued\n");
  sink.write(1, "direct\n", true);
  EXPECT_EQ(got, "queued\ndirect\n");
}

TEST(ConsoleSink, GroupsThousands) {
  EXPECT_EQ(group_thousands(0), "0");
  EXPECT_EQ(group_thousands(999), "999");
  EXPECT_EQ(group_thousands(1000), "1,000");
  EXPECT_EQ(group_thousands(123456), "123,456");
  EXPECT_EQ(group_thousands(1234567), "1,234,567");
}

}  // namespace
}  // namespace msrun_ssh
