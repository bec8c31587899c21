// The console's views of the output (src/output/console.cc and Output's use of them): receive
// timestamps, progress bars redrawn with '\r', --output gather, and folding host names into node
// sets (src/hostfile/nodeset.cc). Output runs on a fake clock; consoles are temporary files.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "msrun_ssh/cli.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/hostfile.h"
#include "msrun_ssh/output.h"
#include "test_util.h"

namespace {

namespace ms = msrun_ssh;
using Clock = std::chrono::system_clock;
using Strings = std::vector<std::string>;

// 2026-11-30T23:26:11.499Z
const Clock::time_point kT0 = Clock::time_point(std::chrono::milliseconds(1796081171499LL));

TEST(Timestamp, IsIso8601UtcWithMilliseconds) {
  EXPECT_EQ(ms::format_timestamp(kT0), "2026-11-30T23:26:11.499Z");
  EXPECT_EQ(ms::format_timestamp(kT0 + std::chrono::milliseconds(501)), "2026-11-30T23:26:12.000Z");
  EXPECT_EQ(ms::format_timestamp(Clock::time_point{}), "1970-01-01T00:00:00.000Z");
}

TEST(ConsoleText, ShowsTheLastRedrawOfALine) {
  EXPECT_EQ(ms::console_text("plain line"), "plain line");
  EXPECT_EQ(ms::console_text("\r  0%|    |\r 50%|##  |\r100%|####|"), "100%|####|");
  EXPECT_EQ(ms::console_text("\r100%|####|\r"), "100%|####|");
  EXPECT_EQ(ms::console_text("\r"), "");
}

TEST(LatestRedraw, NeverShowsTheRedrawStillBeingWritten) {
  EXPECT_EQ(ms::latest_redraw("no carriage return"), "");
  EXPECT_EQ(ms::latest_redraw("\r 10%|#"), "");  // the only redraw may still be cut
  EXPECT_EQ(ms::latest_redraw("\r 10%|#\r 20%|##\r 3"), " 20%|##");
  EXPECT_EQ(ms::latest_redraw("\r 10%|#\r 20%|##\r"), " 20%|##");
  EXPECT_EQ(ms::latest_redraw("start\r"), "start");
  EXPECT_EQ(ms::latest_redraw("\r 10%\r\r"), " 10%");
}

TEST(FoldNodeset, FoldsTheLastNumberOfNames) {
  EXPECT_EQ(ms::fold_nodeset({"node01", "node02", "node03", "node07"}), "node[01-03,07]");
  EXPECT_EQ(ms::fold_nodeset({"198.18.2.3", "198.18.2.1", "198.18.2.2", "198.18.2.9"}),
            "198.18.2.[1-3,9]");
  EXPECT_EQ(ms::fold_nodeset({"n9", "n10", "n11"}), "n[9-11]");
  EXPECT_EQ(ms::fold_nodeset({"n09", "n10"}), "n[09-10]");
  EXPECT_EQ(ms::fold_nodeset({"n9", "n010"}), "n[9,010]");
  EXPECT_EQ(ms::fold_nodeset({"solo"}), "solo");
  EXPECT_EQ(ms::fold_nodeset({"a", "b1", "b1", "b2", "a"}), "a,b[1-2]");
  EXPECT_EQ(ms::fold_nodeset({"r1n1", "r1n2", "r2n1"}), "r1n[1-2],r2n1");
}

TEST(FoldNodeset, ExpandsBackToTheSameNames) {
  Strings names{"gpu001", "gpu002", "gpu003", "gpu010", "gpu011", "login", "x7y"};
  Strings back;
  std::string folded = ms::fold_nodeset(names);
  // Commas inside brackets belong to the group; split at the others.
  size_t depth = 0, start = 0;
  for (size_t i = 0; i <= folded.size(); ++i) {
    if (i < folded.size() && folded[i] == '[') ++depth;
    if (i < folded.size() && folded[i] == ']') --depth;
    if (i == folded.size() || (folded[i] == ',' && depth == 0)) {
      for (auto& n : ms::expand_nodeset(folded.substr(start, i - start))) back.push_back(n);
      start = i + 1;
    }
  }
  std::sort(back.begin(), back.end());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(back, names);
}

// ------------------------------------------------------------------------------------------------

class Console : public ms::test::TempDirTest {
 protected:
  void SetUp() override {
    config_.log_dir = dir_;
    config_.console_out = ::open((dir_ + "/out").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    config_.console_err = ::open((dir_ + "/err").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(config_.console_out, 0);
    ASSERT_GE(config_.console_err, 0);
    config_.clock = [this] { return now_; };
  }
  void TearDown() override {
    ::close(config_.console_out);
    ::close(config_.console_err);
  }
  std::string file(const std::string& name) const { return ms::test::slurp(dir_ + "/" + name); }
  void advance(int ms) { now_ += std::chrono::milliseconds(ms); }

  ms::OutputConfig config_;
  Clock::time_point now_ = kT0;
};

TEST_F(Console, TimestampsMarkConsoleLinesAndOptionallyLogLines) {
  config_.timestamps = true;
  ms::Output o(config_);
  int p = o.add_process("0@h", "plain.log", true);
  o.data(p, false, "one\ntw");
  advance(1000);
  o.data(p, false, "o\n");
  o.flush();
  EXPECT_EQ(file("out"),
            "2026-11-30T23:26:11.499Z [0@h] one\n2026-11-30T23:26:12.499Z [0@h] two\n");
  EXPECT_EQ(file("plain.log"), "one\ntwo\n");  // logs stay raw without --log_timestamps
}

TEST_F(Console, LogTimestampsStampEveryLineOnceEvenWhenItComesInPieces) {
  config_.log_timestamps = true;
  ms::Output o(config_);
  int p = o.add_process("0@h", "w.log", true);
  o.data(p, false, "a\nb");
  advance(5);
  o.data(p, true, "e\n");
  o.data(p, false, "c\n");
  o.finish(p);
  o.flush();
  EXPECT_EQ(file("w.log"),
            "2026-11-30T23:26:11.499Z a\n2026-11-30T23:26:11.504Z e\n"
            "2026-11-30T23:26:11.504Z bc\n");
  EXPECT_EQ(file("out"), "[0@h] a\n[0@h] bc\n");  // the console has no stamps without --timestamps
}

TEST_F(Console, AProgressBarShowsItsNewestRedrawNoMoreThanOncePerInterval) {
  ms::Output o(config_);
  int p = o.add_process("0@h", "w.log", true);
  o.data(p, true, "\r  0%|    |\r 25%|#   |\r 5");
  o.flush();  // " 25%|#   |" is complete; " 5" may be cut
  o.data(p, true, "0%|##  |\r 75%|### |\r");
  o.flush();  // within the interval: nothing new on the console
  advance(1000);
  o.flush();
  o.data(p, true, "100%|####|\n");
  o.flush();
  EXPECT_EQ(file("err"), "[0@h err]  25%|#   |\n[0@h err]  75%|### |\n[0@h err] 100%|####|\n");
  EXPECT_EQ(file("w.log"), "\r  0%|    |\r 25%|#   |\r 50%|##  |\r 75%|### |\r100%|####|\n");
}

// A prompt (pdb's "(Pdb) ", input("...? ")) has no newline until the user answered: once the
// unfinished line has been quiet for half a second it is shown, and when its line ends (pdb's next
// output comes on it) only the rest follows. It never showed: pdb through --tail_worker_log
// waited for an answer to a prompt nobody saw.
TEST_F(Console, APromptIsShownOnceItIsQuietAndItsLineEndsWithTheRest) {
  ms::Output o(config_);
  int p = o.add_process("1@h", "w.log", true);
  o.show_prompts(p);  // it reads the launcher's stdin (--tail_worker_log)
  o.data(p, false, "> train.py(7)<module>()\n(Pd");
  o.flush();
  EXPECT_EQ(file("out"), "[1@h] > train.py(7)<module>()\n");
  EXPECT_GE(o.due_in_ms(), 1);
  EXPECT_LE(o.due_in_ms(), 501);
  advance(300);
  o.data(p, false, "b) ");
  advance(400);
  o.flush();  // 400 ms since it grew: not yet
  EXPECT_EQ(file("out"), "[1@h] > train.py(7)<module>()\n");
  advance(100);
  o.flush();
  EXPECT_EQ(file("out"), "[1@h] > train.py(7)<module>()\n[1@h] (Pdb) \n");
  EXPECT_LT(o.due_in_ms(), 0) << "shown: nothing more is due";
  advance(5000);
  o.flush();  // shown once
  o.data(p, false, "42\n(Pdb) ");
  advance(500);
  o.flush();
  EXPECT_EQ(file("out"), "[1@h] > train.py(7)<module>()\n[1@h] (Pdb) \n[1@h] 42\n[1@h] (Pdb) \n");
  EXPECT_EQ(file("w.log"), "> train.py(7)<module>()\n(Pdb) 42\n");
  // A progress bar is no prompt: it is never due for that, however quiet.
  int bar = o.add_process("2@h", "b.log", true);
  o.show_prompts(bar);
  o.data(bar, false, "\r 10%|#");
  advance(600);
  o.flush();
  EXPECT_LT(o.due_in_ms(), 0);
  // A rank that does not read stdin: "Loading..." dots stay one line, as they end.
  int dots = o.add_process("3@h", "d.log", true);
  o.data(dots, false, "Loading.");
  advance(600);
  o.data(dots, false, ".");
  advance(600);
  o.flush();
  o.data(dots, false, ". done\n");
  o.flush();
  std::string out = file("out");
  EXPECT_EQ(out.substr(out.rfind("[3@h]")), "[3@h] Loading... done\n");
}

TEST_F(Console, GatherPrintsLinesOfManyRanksOnceUnderTheirRankAndHostSets) {
  config_.gather = true;
  ms::Output o(config_);
  Strings hosts{"node01", "node01", "node02", "node02"};
  std::vector<int> procs;
  for (int r = 0; r < 4; ++r)
    procs.push_back(o.add_process(fmt::format("{}@{}", r, hosts[static_cast<size_t>(r)]),
                                  fmt::format("w{}.log", r), true, r,
                                  hosts[static_cast<size_t>(r)]));
  int sched = o.add_process("sched@node01", "s.log", true, -1, "node01");
  for (int p : procs) o.data(p, false, "Epoch 3 done\n");
  o.data(procs[2], false, "odd one\n");
  o.data(sched, false, "Epoch 3 done\n");
  o.flush();
  EXPECT_EQ(file("out"), "");  // within the window
  EXPECT_GE(o.due_in_ms(), 1);
  advance(999);
  o.flush();
  EXPECT_EQ(file("out"), "");
  advance(1);
  o.flush();
  EXPECT_EQ(file("out"), "[sched,0-3@node[01-02]] Epoch 3 done\n[2@node02] odd one\n");
  EXPECT_LT(o.due_in_ms(), 0);
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(file(fmt::format("w{}.log", r)),
              r == 2 ? "Epoch 3 done\nodd one\n" : "Epoch 3 done\n");
}

TEST_F(Console, GatherKeepsTheOrderOfEveryRanksLines) {
  config_.gather = true;
  ms::Output o(config_);
  int a = o.add_process("0@h1", "a.log", true, 0, "h1");
  int b = o.add_process("1@h2", "b.log", true, 1, "h2");
  o.data(a, false, "x\n");
  o.data(b, false, "y\n");
  o.data(b, false, "x\n");  // must not join a's "x", which would print it before b's "y"
  o.data(a, false, "y\n");  // joins b's "y"
  o.drain();
  EXPECT_EQ(file("out"), "[0@h1] x\n[0-1@h[1-2]] y\n[1@h2] x\n");
}

TEST_F(Console, GatherSeparatesStreamsAndLinesOutsideTheWindow) {
  config_.gather = true;
  ms::Output o(config_);
  int a = o.add_process("0@h1 a2", "a.log", true, 0, "h1");
  int b = o.add_process("1@h1 a2", "b.log", true, 1, "h1");
  o.data(a, true, "warn\n");
  o.data(b, false, "warn\n");
  advance(1500);
  o.data(b, true, "warn\n");  // the first group's window has passed
  o.flush();
  advance(1000);
  o.data(a, true, "late\n");
  o.data(b, true, "late\n");
  o.drain();
  EXPECT_EQ(file("out"), "[1@h1 a2] warn\n");
  EXPECT_EQ(file("err"), "[0@h1 a2 err] warn\n[1@h1 a2 err] warn\n[0-1@h1 a2 err] late\n");
}

TEST_F(Console, AMessageComesAfterTheGatheredLinesBeforeIt) {
  config_.gather = true;
  ms::Output o(config_);
  int a = o.add_process("0@h", "a.log", true, 0, "h");
  o.data(a, true, "boom\n");
  o.message("rank 0 failed");
  EXPECT_EQ(file("err"), "[0@h err] boom\nmsrun-ssh: rank 0 failed\n");
}

TEST(Gatherer, BoundsWhatWaits) {
  ms::Gatherer g(1000, false);
  int s = g.add_source(0, "h", "", "[0@h] ", "[0@h err] ");
  for (size_t i = 0; i < ms::Gatherer::kMaxPending + 10; ++i)
    g.add(s, false, "line " + std::to_string(i), 0, "");
  std::string out, err;
  g.take(0, false, out, err);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 10);
  EXPECT_EQ(out.substr(0, out.find('\n') + 1), "[0@h] line 0\n");
  EXPECT_EQ(err, "");
  EXPECT_EQ(g.pending(), ms::Gatherer::kMaxPending);
}

// Every line of `g` now, stdout lines only.
std::string taken(ms::Gatherer& g) {
  std::string out, err;
  g.take(0, true, out, err);
  return out;
}

size_t colliding_hash(std::string_view) { return 42; }

// Lines of two sources that print the same lines, repeat one, or skip one, gathered alike whether
// the texts' hashes differ or all collide: equal hashes never merge different lines.
TEST(Gatherer, GroupsByTheWholeTextEvenWhenHashesCollide) {
  for (ms::Gatherer::Hash hash : {&ms::Gatherer::hash_text, &colliding_hash}) {
    ms::Gatherer g(1000, false, hash);
    int a = g.add_source(0, "h", "", "[0@h] ", "[0@h err] ");
    int b = g.add_source(1, "h", "", "[1@h] ", "[1@h err] ");
    for (const char* text : {"same", "same", "same", "p", "q", "r", "x", "xx"})
      g.add(a, false, text, 0, "");
    for (const char* text : {"same", "same", "same", "p", "r", "xx", "x"})
      g.add(b, false, text, 0, "");
    EXPECT_EQ(taken(g),
              "[0-1@h] same\n[0-1@h] same\n[0-1@h] same\n[0-1@h] p\n[0@h] q\n[0-1@h] r\n"
              "[0@h] x\n[0-1@h] xx\n[1@h] x\n");
    EXPECT_EQ(g.pending(), 0U);
  }
}

// The pending lines live in a ring that grows as it must, also when it has wrapped around.
TEST(Gatherer, KeepsTheOrderWhenItsStorageGrows) {
  ms::Gatherer g(10, false);
  int a = g.add_source(0, "h", "", "[0@h] ", "[0@h err] ");
  int b = g.add_source(1, "h", "", "[1@h] ", "[1@h err] ");
  std::string want;
  for (int i = 0; i < 12; ++i) {
    g.add(a, false, fmt::format("early {}", i), 0, "");
    want += fmt::format("[0@h] early {}\n", i);
  }
  std::string out, err;
  g.take(10, false, out, err);
  EXPECT_EQ(out, want);
  want.clear();
  for (int i = 0; i < 40; ++i) {
    g.add(a, false, fmt::format("line {}", i % 30), 20, "");
    want += fmt::format("[0-1@h] line {}\n", i % 30);
  }
  for (int i = 0; i < 40; ++i) g.add(b, false, fmt::format("line {}", i % 30), 25, "");
  EXPECT_EQ(g.pending(), 40U);
  EXPECT_EQ(taken(g), want);
}

// A text whose lines have all gone out keeps its storage for the next text, unless it is long.
TEST(Gatherer, KeepsTheStorageOfShortTextsOnly) {
  ms::Gatherer g(1000, false);
  int a = g.add_source(0, "h", "", "[0@h] ", "[0@h err] ");
  for (const char* text : {"one", "two", "three"}) g.add(a, false, text, 0, "");
  EXPECT_EQ(taken(g), "[0@h] one\n[0@h] two\n[0@h] three\n");
  EXPECT_EQ(g.texts_held(), 3U);
  for (const char* text : {"four", "five"}) g.add(a, false, text, 0, "");
  g.add(a, true, "six", 0, "");
  EXPECT_EQ(g.texts_held(), 3U);  // reused
  const std::string long_text(ms::Gatherer::kKeptTextBytes + 1, 'x');
  g.add(a, false, long_text, 0, "");
  EXPECT_EQ(g.texts_held(), 4U);
  EXPECT_EQ(taken(g), "[0@h] four\n[0@h] five\n[0@h] " + long_text + "\n");
  EXPECT_EQ(g.texts_held(), 3U);  // the long one's storage went
}

ms::Options parsed(Strings args) {
  args.insert(args.end(), {"--hostfile", "h.toml", "train.py"});
  return ms::parse_args(args, [](const char*) -> const char* { return nullptr; }).options;
}

TEST(ConsoleOptions, AreParsedAndCheckedOnTheCommandLine) {
  EXPECT_FALSE(parsed({}).output_gather);
  EXPECT_FALSE(parsed({}).timestamps);
  EXPECT_FALSE(parsed({}).log_timestamps);
  EXPECT_TRUE(parsed({"--output", "gather"}).output_gather);
  EXPECT_FALSE(parsed({"--output=prefixed"}).output_gather);
  EXPECT_TRUE(parsed({"--timestamps"}).timestamps);
  EXPECT_TRUE(parsed({"--log_timestamps=True"}).log_timestamps);
  EXPECT_EQ(ms::test::error_of([] {
              parsed({"--output", "clubak"});
            }),
            "--output=clubak: expects prefixed or gather");
  EXPECT_EQ(ms::test::error_of([] {
              parsed({"--events", ""});
            }),
            "--events=: must name a file, or - for stdout");
}

}  // namespace
