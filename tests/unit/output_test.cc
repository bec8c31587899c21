// Output (src/output/output.cc): line framing, per-process log files, the prefixed console, the
// last-lines ring and the summary table. Consoles are temporary files read back after flush();
// every test works in its own temporary directory.
#include "msrun_ssh/output.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "msrun_ssh/console_sink.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/events.h"
#include "test_util.h"

namespace {

namespace ms = msrun_ssh;
namespace fs = std::filesystem;
using Strings = std::vector<std::string>;

using ms::test::slurp;

unsigned mode_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

// Feeds `chunks` one after the other, then finishes; returns every piece handed out.
Strings frame(const Strings& chunks, size_t max_line) {
  ms::LineFramer f(max_line);
  Strings out;
  auto take = [&](std::string_view l) { out.emplace_back(l); };
  for (const auto& c : chunks) f.feed(c, take);
  f.finish(take);
  return out;
}

// --- LineFramer ----------------------------------------------------------------------------------

TEST(LineFramer, HandsOutWholeLinesWithTheirNewline) {
  ms::LineFramer f;
  Strings out;
  f.feed("a\nbb\n\nccc", [&](std::string_view l) { out.emplace_back(l); });
  EXPECT_EQ(out, (Strings{"a\n", "bb\n", "\n"}));
  EXPECT_EQ(f.pending(), 3u);
}

TEST(LineFramer, JoinsALineSplitOverChunks) {
  EXPECT_EQ(frame({"hel", "lo wo", "rld\nnext", "\n"}, 100), (Strings{"hello world\n", "next\n"}));
}

TEST(LineFramer, FinishHandsOutTheLastLineWithoutNewline) {
  ms::LineFramer f;
  Strings out;
  auto take = [&](std::string_view l) { out.emplace_back(l); };
  f.feed("done\nno newline", take);
  f.finish(take);
  EXPECT_EQ(out, (Strings{"done\n", "no newline"}));
  EXPECT_EQ(f.pending(), 0u);
  f.finish(take);  // nothing left: nothing more
  EXPECT_EQ(out.size(), 2u);
}

TEST(LineFramer, FinishWithNothingPendingHandsOutNothing) {
  EXPECT_EQ(frame({"a\n"}, 100), Strings{"a\n"});
  EXPECT_EQ(frame({}, 100), Strings{});
  EXPECT_EQ(frame({"", ""}, 100), Strings{});
}

// Pieces hold at most max_line bytes and the newline that ends them; the last piece of a long
// line ends with its newline. A line of a whole number of pieces is no piece more: no lone newline
// (an empty console line) after it.
TEST(LineFramer, LongLinesAreCutAtMaxLine) {
  EXPECT_EQ(frame({"0123456789abcdefXY\n"}, 8), (Strings{"01234567", "89abcdef", "XY\n"}));
  EXPECT_EQ(frame({"0123456789"}, 8), (Strings{"01234567", "89"}));
  EXPECT_EQ(frame({"1234567\n"}, 8), Strings{"1234567\n"});
  EXPECT_EQ(frame({"12345678\n"}, 8), Strings{"12345678\n"});
  EXPECT_EQ(frame({"12345678", "\n"}, 8), Strings{"12345678\n"});
  EXPECT_EQ(frame({"0123456789abcdef\nz"}, 8), (Strings{"01234567", "89abcdef\n", "z"}));
  EXPECT_EQ(frame({"12345678"}, 8), Strings{"12345678"});
  EXPECT_EQ(frame({"12345678", "9"}, 8), (Strings{"12345678", "9"}));
  EXPECT_EQ(frame({"abc", "defghijk\n"}, 8), (Strings{"abcdefgh", "ijk\n"}));
}

TEST(LineFramer, ALongLineInOneChunkIsCutToo) {
  ms::LineFramer f(4);
  Strings out;
  f.feed("aaaaaaaaaa\nb\n", [&](std::string_view l) { out.emplace_back(l); });
  EXPECT_EQ(out, (Strings{"aaaa", "aaaa", "aa\n", "b\n"}));
}

// The pieces do not depend on where the stream was cut into chunks: every split into three chunks
// gives the pieces of the whole stream at once, byte by byte as well.
TEST(LineFramer, ChunkBoundariesDoNotChangeThePieces) {
  const std::string text = "alpha\nbeta gamma\n\n0123456789abcdefXY\n12345678\nend";
  const Strings expected = {"alpha\n",  "beta gam", "ma\n",       "\n", "01234567",
                            "89abcdef", "XY\n",     "12345678\n", "end"};
  ASSERT_EQ(frame({text}, 8), expected);
  for (size_t i = 0; i <= text.size(); ++i)
    for (size_t j = i; j <= text.size(); ++j)
      ASSERT_EQ(frame({text.substr(0, i), text.substr(i, j - i), text.substr(j)}, 8), expected)
          << "cuts at " << i << " and " << j;
  Strings bytes;
  for (char c : text) bytes.emplace_back(1, c);
  EXPECT_EQ(frame(bytes, 8), expected);
}

// --- Output --------------------------------------------------------------------------------------

class Output : public ms::test::TempDirTest {
 protected:
  void SetUp() override {
    config_.log_dir = dir_ + "/logs";
    ASSERT_EQ(::mkdir(config_.log_dir.c_str(), 0700), 0);
    config_.console_out = ::open((dir_ + "/out").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    config_.console_err = ::open((dir_ + "/err").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(config_.console_out, 0);
    ASSERT_GE(config_.console_err, 0);
  }
  void TearDown() override {
    ::close(config_.console_out);
    ::close(config_.console_err);
  }

  std::string out() const { return slurp(dir_ + "/out"); }
  std::string err() const { return slurp(dir_ + "/err"); }
  std::string log(const std::string& name) const { return slurp(config_.log_dir + "/" + name); }

  ms::OutputConfig config_;
};

// A log that cannot be written (a full disk): said once on the console with the file and what it
// holds, counted, the console keeps every line, and when writing works again the log goes on after
// a line saying how many bytes are missing there.
TEST_F(Output, AFullDiskIsSaidCountedMarkedAndTheLogGoesOnWhenThereIsSpaceAgain) {
  bool full = false;
  std::vector<ms::LogGap> said;
  config_.write_log = [&](int fd, const void* data, size_t n) -> ssize_t {
    if (full) {
      errno = ENOSPC;
      return -1;
    }
    return ::write(fd, data, n);
  };
  config_.on_log_error = [&](const ms::LogGap& g) { said.push_back(g); };
  ms::Output o(config_);
  int p = o.add_process("0@node0", "worker_0.log", true);
  o.data(p, false, "one\n");
  o.flush();
  full = true;
  o.data(p, false, "two\n");
  o.flush();
  o.data(p, false, "three\n");
  o.flush();
  full = false;
  o.data(p, false, "four\n");
  o.flush();
  const std::string path = config_.log_dir + "/worker_0.log";
  EXPECT_EQ(log("worker_0.log"),
            "one\n\n[msrun-ssh: 10 bytes of this log are missing here: No space left on "
            "device]\nfour\n");
  EXPECT_EQ(out(), "[0@node0] one\n[0@node0] two\n[0@node0] three\n[0@node0] four\n");
  EXPECT_EQ(err(), "msrun-ssh: warning: cannot write " + path +
                       ": No space left on device; it holds 4 bytes, the console keeps every "
                       "line, and the log goes on when it can (the bytes missing are counted)\n"
                       "msrun-ssh: " +
                       path +
                       " is written again; 10 bytes are missing in it, at a line that says so\n");
  ASSERT_EQ(said.size(), 1u);
  EXPECT_EQ(said[0].path, path);
  EXPECT_EQ(said[0].written, 4u);
  EXPECT_EQ(said[0].missing, 4u);
  ms::LogGap gap = o.log_gap(p);
  EXPECT_EQ(gap.missing, 10u);
  EXPECT_EQ(gap.error, "No space left on device");
  EXPECT_EQ(gap.written, log("worker_0.log").size());
}

// A file system that reports lost writes when the file is closed (NFS: a quota, a full server):
// said on the console and to on_log_error, in the log's gap, the summary and summary.json; a
// log closed to make room for another one (max_open_logs) is checked as well.
TEST_F(Output, AFailedCloseOfALogIsSaidAndEndsUpInTheSummary) {
  std::vector<ms::LogGap> said;
  std::vector<int> closed;
  config_.close_log = [&](int fd) {
    closed.push_back(fd);
    ::close(fd);
    errno = EDQUOT;
    return -1;
  };
  config_.on_log_error = [&](const ms::LogGap& g) { said.push_back(g); };
  config_.max_open_logs = 1;
  ms::Output o(config_);
  int a = o.add_process("0@node0", "worker_0.log", true);
  o.add_process("1@node0", "worker_1.log", true);  // closes worker_0.log to open it
  o.data(a, false, "one\n");                       // worker_0.log again: closes worker_1.log
  o.flush();
  o.close_logs();  // worker_0.log
  o.close_logs();  // nothing open: nothing more to say
  EXPECT_EQ(closed.size(), 3u);
  const std::string p0 = config_.log_dir + "/worker_0.log", p1 = config_.log_dir + "/worker_1.log";
  EXPECT_EQ(log("worker_0.log"), "one\n");
  EXPECT_EQ(err(), "msrun-ssh: warning: closing " + p0 +
                       " failed: Disk quota exceeded; the file system may have lost bytes written "
                       "to it (it accepted 0)\n"
                       "msrun-ssh: warning: closing " +
                       p1 +
                       " failed: Disk quota exceeded; the file system may have lost bytes written "
                       "to it (it accepted 0)\n");  // once per file, however often it is closed
  ASSERT_EQ(said.size(), 2u);
  EXPECT_EQ(said[0].close_error, "Disk quota exceeded");
  ms::LogGap gap = o.log_gap(a);
  EXPECT_EQ(gap.close_error, "Disk quota exceeded");
  EXPECT_EQ(gap.missing, 0u);
  ms::SummaryRow r;
  r.host = "node0";
  r.process = "rank 0";
  r.log_gap = gap;
  EXPECT_NE(ms::format_summary({r}).find("--- log may be incomplete: " + p0 +
                                         " (rank 0 on node0): closing it failed (Disk quota "
                                         "exceeded); 4 bytes were written to it ---"),
            std::string::npos)
      << ms::format_summary({r});
  auto j = ms::summary_json({r});
  ASSERT_EQ(j["incomplete_logs"].size(), 1u);
  EXPECT_EQ(j["incomplete_logs"][0]["close_error"], "Disk quota exceeded");
  // What --on_log_error=stop fails a job that ended well for: the first incomplete log.
  ms::SummaryRow clean;
  EXPECT_EQ(ms::first_incomplete_log({clean}), nullptr);
  std::vector<ms::SummaryRow> rows{clean, r};
  ASSERT_NE(ms::first_incomplete_log(rows), nullptr);
  EXPECT_EQ(ms::first_incomplete_log(rows)->close_error, "Disk quota exceeded");
  rows[0].log_gap.missing = 3;
  EXPECT_EQ(ms::first_incomplete_log(rows), &rows[0].log_gap);
}

// A disk that stays full, a quota, an I/O error, a file too large: one warning with the error,
// however much more is lost; a partial write counts what went through.
TEST_F(Output, ALogThatStaysUnwritableIsSaidOnce) {
  for (int error : {EDQUOT, EIO, EFBIG, ENOSPC}) {
    ASSERT_EQ(::ftruncate(config_.console_err, 0), 0);
    ::lseek(config_.console_err, 0, SEEK_SET);
    bool first = true;
    config_.write_log = [&](int fd, const void* data, size_t) -> ssize_t {
      if (std::exchange(first, false)) return ::write(fd, data, 2);  // "li" goes through
      errno = error;
      return -1;
    };
    ms::Output o(config_);
    int p = o.add_process("1@node0", "worker_1.log", false);
    for (int i = 0; i < 100; ++i) {
      o.data(p, true, "line\n");
      o.flush();
    }
    EXPECT_EQ(ms::test::count(err(), "cannot write"), 1u) << err();
    EXPECT_NE(err().find(std::strerror(error)), std::string::npos) << err();
    EXPECT_EQ(o.log_gap(p).missing, 498u);
    EXPECT_EQ(o.log_gap(p).error, std::strerror(error));
    EXPECT_EQ(log("worker_1.log"), "li");
  }
}

TEST(EventLog, AFullDiskIsSaidOnceAndTheJobGoesOn) {
  testing::internal::CaptureStderr();
  {
    ms::EventLog events("/dev/full");
    events.emit("attempt");
    events.emit("summary");
  }
  std::string e = testing::internal::GetCapturedStderr();
  EXPECT_EQ(ms::test::count(e,
                            "msrun-ssh: warning: cannot write the events file /dev/full: No "
                            "space left on device\n"),
            1u)
      << e;
}

// The disk filling in the middle of an event: the part written is cut off again, and the next
// event is a line of its own (it went on the cut line, and both were unreadable). A file size
// limit (RLIMIT_FSIZE) makes the write stop part way, as a full disk does.
TEST(EventLog, AnEventWrittenInPartIsCutOffAndTheNextIsALineOfItsOwn) {
  ms::test::TempDir dir;
  const std::string path = dir.path() + "/events.jsonl";
  ms::EventLog events(path);
  events.emit("attempt");
  const size_t size = ms::test::slurp(path).size();
  ASSERT_GT(size, 0u);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = size + 40;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  testing::internal::CaptureStderr();
  events.emit("summary", {{"x", std::string(300, 'a')}});
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  std::signal(SIGXFSZ, old_handler);
  events.emit("end");
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cannot write the events file"), std::string::npos) << err;
  std::istringstream lines(ms::test::slurp(path));
  std::vector<std::string> types;
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object()) << "not JSON: " << line;
    types.push_back(j.value("type", ""));
  }
  EXPECT_EQ(types, (std::vector<std::string>{"attempt", "end"}));
}

TEST(EventLog, EventsOnStdoutNeverWaitForAStoppedConsole) {
  // A console that takes nothing (a terminal stopped with Ctrl-S, `| less` nobody scrolls) until
  // opened: emit() must return all the same, and the events come out whole and in order after.
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  std::string got;
  ms::ConsoleSink sink(100, [&](int fd, std::string_view d) {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return open; });
    if (fd == STDOUT_FILENO) got.append(d);
  });
  {
    ms::EventLog events("-", {}, &sink);
    auto emitted = std::async(std::launch::async, [&] {
      for (int i = 0; i < 50; ++i) events.emit("process_exited", {{"rank", i}});
    });
    EXPECT_EQ(emitted.wait_for(std::chrono::seconds(5)), std::future_status::ready);
    {
      std::lock_guard lock(m);
      open = true;
    }
    cv.notify_all();
    emitted.wait();
    EXPECT_TRUE(sink.drain());
  }
  EXPECT_EQ(ms::test::count(got, "\"type\":\"process_exited\""), 50u) << got;
  EXPECT_LT(got.find("\"rank\":0,"), got.find("\"rank\":49,")) << got;
  EXPECT_EQ(ms::test::count(got, "}\n{"), 49u) << got;  // whole lines, one each
  EXPECT_EQ(sink.dropped_lines(), 0u);
}

TEST(Summary, IncompleteLogsAreNamedInTheReportAndTheJson) {
  ms::SummaryRow r;
  r.host = "n1";
  r.process = "rank 1";
  r.status = "exit 0";
  r.rank = 1;
  r.log_gap = {"logs/worker_1.log", 246000, 1254000, "No space left on device"};
  std::string s = ms::format_summary({r});
  EXPECT_NE(s.find("--- incomplete log: logs/worker_1.log (rank 1 on n1) misses 1254000 bytes "
                   "(No space left on device); it holds 246000 bytes ---\n"),
            std::string::npos)
      << s;
  auto j = ms::summary_json({r});
  ASSERT_EQ(j["incomplete_logs"].size(), 1u);
  EXPECT_EQ(j["incomplete_logs"][0]["bytes_missing"], 1254000);
  EXPECT_EQ(j["incomplete_logs"][0]["path"], "logs/worker_1.log");
}

TEST_F(Output, LogGetsEveryByteInOrder) {
  ms::Output o(config_);
  int p = o.add_process("0@node0", "worker_0.log", true);
  o.data(p, false, "step 1\nst");
  o.data(p, false, "ep 2\n");
  o.data(p, true, "warning\n");
  o.data(p, false, "\n\nlast");
  o.finish(p);
  o.flush();
  EXPECT_EQ(log("worker_0.log"), "step 1\nstep 2\nwarning\n\n\nlast");
  EXPECT_EQ(o.log_bytes(p), 28u);
}

// The logs open in the log directory now, counted from the process's descriptors.
size_t open_logs_in(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto target = std::filesystem::read_symlink(e.path(), ec);
    if (!ec && target.string().starts_with(dir + "/")) ++n;
  }
  return n;
}

// More ranks than descriptors: at most max_open_logs logs are open at once, and every log still
// gets every byte in order (a closed one is opened again, appending).
TEST_F(Output, MoreLogsThanOpenDescriptorsKeepEveryByteInOrder) {
  config_.max_open_logs = 2;
  ms::Output o(config_);
  std::vector<int> procs;
  for (int r = 0; r < 5; ++r)
    procs.push_back(
        o.add_process(fmt::format("{}@node0", r), fmt::format("worker_{}.log", r), r == 0));
  EXPECT_LE(open_logs_in(config_.log_dir), 2u);
  for (int step = 0; step < 4; ++step) {
    for (int r = 0; r < 5; ++r)
      o.data(procs[r], step % 2 == 1, fmt::format("rank {} step {}\n", r, step));
    o.flush();
    EXPECT_LE(open_logs_in(config_.log_dir), 2u) << "step " << step;
  }
  for (int r = 0; r < 5; ++r) {
    o.finish(procs[r]);
    EXPECT_EQ(
        log(fmt::format("worker_{}.log", r)),
        fmt::format("rank {0} step 0\nrank {0} step 1\nrank {0} step 2\nrank {0} step 3\n", r));
  }
  EXPECT_EQ(o.log_gap(procs[4]).missing, 0u);
}

TEST_F(Output, StdoutAndStderrLinesNeverSplitEachOtherInTheLog) {
  ms::Output o(config_);
  int p = o.add_process("0@node0", "worker_0.log", true);
  o.data(p, false, "hello wo");
  o.data(p, true, "warn");
  o.data(p, true, "ing\nerr ");
  o.data(p, false, "rld\n");
  o.data(p, true, "two\n");
  o.flush();
  EXPECT_EQ(log("worker_0.log"), "warning\nhello world\nerr two\n");
  EXPECT_EQ(out(), "[0@node0] hello world\n");
  EXPECT_EQ(err(), "[0@node0 err] warning\n[0@node0 err] err two\n");
}

TEST_F(Output, ConsoleLinesArePrefixedWithRankAndHost) {
  ms::Output o(config_);
  int p = o.add_process("3@host", "worker_3.log", true);
  int s = o.add_process("sched@host", "scheduler.log", true);
  o.data(p, false, "out line\n");
  o.data(p, true, "err line\n");
  o.data(s, false, "ready\n");
  o.flush();
  EXPECT_EQ(out(), "[3@host] out line\n[sched@host] ready\n");
  EXPECT_EQ(err(), "[3@host err] err line\n");
}

TEST_F(Output, ColorMarksThePrefixes) {
  config_.color = true;
  ms::Output o(config_);
  int p = o.add_process("3@host", "worker_3.log", true);
  o.data(p, false, "x\n");
  o.data(p, true, "y\n");
  o.flush();
  EXPECT_EQ(out(), "\x1b[36m[3@host]\x1b[0m x\n");
  EXPECT_EQ(err(), "\x1b[31m[3@host err]\x1b[0m y\n");
  EXPECT_EQ(log("worker_3.log"), "x\ny\n");  // logs stay plain
}

TEST_F(Output, LinesOfDifferentProcessesNeverMix) {
  ms::Output o(config_);
  int a = o.add_process("0@a", "worker_0.log", true);
  int b = o.add_process("1@b", "worker_1.log", true);
  o.data(a, false, "aa");
  o.data(b, false, "bb");
  o.data(b, false, "bb\n");
  o.data(a, false, "aa\n");
  o.flush();
  EXPECT_EQ(out(), "[1@b] bbbb\n[0@a] aaaa\n");
}

TEST_F(Output, FinishShowsAndLogsAFinalLineWithoutNewline) {
  ms::Output o(config_);
  int p = o.add_process("0@h", "worker_0.log", true);
  o.data(p, false, "first\nno newline");
  o.flush();
  EXPECT_EQ(out(), "[0@h] first\n");
  EXPECT_EQ(log("worker_0.log"), "first\n");
  o.finish(p);
  o.flush();
  EXPECT_EQ(out(), "[0@h] first\n[0@h] no newline\n");
  EXPECT_EQ(log("worker_0.log"), "first\nno newline");
}

// A worker started again in place goes on in its log after a separator line: when the failed run
// was killed in the middle of a line, that line ends there, and the separator stands alone (the
// fault campaign found it glued to the cut line, seed 20261208, trial 120).
TEST_F(Output, ASeparatorAfterALineWithoutNewlineStandsOnALineOfItsOwn) {
  ms::Output o(config_);
  int p = o.add_process("0@h", "worker_0.log", true);
  o.data(p, false, "line 0\nline 1");
  o.separate(p, "----- started again -----");
  o.data(p, false, "line 0\n");
  o.flush();
  EXPECT_EQ(log("worker_0.log"), "line 0\nline 1\n----- started again -----\nline 0\n");
  EXPECT_EQ(out(), "[0@h] line 0\n[0@h] line 1\n[0@h] line 0\n");
  // Both streams cut: one line end; a run that ended its lines gets none.
  int q = o.add_process("1@h", "worker_1.log", true);
  o.data(q, false, "out");
  o.data(q, true, "err");
  o.separate(q, "----- again -----");
  o.data(q, true, "e\n");
  o.separate(q, "----- and again -----");
  o.flush();
  EXPECT_EQ(log("worker_1.log"), "out\nerr\n----- again -----\ne\n----- and again -----\n");
}

// Where the two streams' lines meet in the log unfinished (a piece of a line over the 1 MiB
// limit; the last lines of both, without newline), a line end comes between them: a line of one
// stream never runs on in the other's.
TEST_F(Output, APieceOfALongLineAndTheOtherStreamsLineAreNotGlued) {
  ms::Output o(config_);
  int p = o.add_process("0@h", "worker_0.log", true);
  const std::string piece(size_t{1} << 20, 'x');  // the framer's default limit
  o.data(p, false, piece + "xy");
  o.data(p, true, "ERRLINE\n");
  o.data(p, false, "z\nnext\n");
  o.flush();
  EXPECT_EQ(log("worker_0.log"), piece + "\nERRLINE\nxyz\nnext\n");
  int q = o.add_process("1@h", "worker_1.log", true);
  o.data(q, false, "done 9");
  o.data(q, true, "50%|#####");
  o.finish(q);
  o.flush();
  EXPECT_EQ(log("worker_1.log"), "done 9\n50%|#####");
}

TEST_F(Output, OffConsoleProcessesAreOnlyLogged) {
  ms::Output o(config_);
  int hidden = o.add_process("0@h", "worker_0.log", false);
  int shown = o.add_process("1@h", "worker_1.log", true);
  o.data(hidden, false, "quiet\n");
  o.data(hidden, true, "quiet err\n");
  o.data(shown, false, "loud\n");
  o.finish(hidden);
  o.flush();
  EXPECT_EQ(out(), "[1@h] loud\n");
  EXPECT_EQ(err(), "");
  EXPECT_EQ(log("worker_0.log"), "quiet\nquiet err\n");
  EXPECT_EQ(o.last_lines(hidden), (std::deque<std::string>{"quiet", "quiet err"}));
}

TEST_F(Output, NothingReachesTheConsoleBeforeFlush) {
  ms::Output o(config_);
  int p = o.add_process("0@h", "worker_0.log", true);
  o.data(p, false, "line\n");
  EXPECT_EQ(out(), "");
  o.flush();
  EXPECT_EQ(out(), "[0@h] line\n");
  o.flush();
  EXPECT_EQ(out(), "[0@h] line\n");  // once
}

TEST_F(Output, DestructorFlushes) {
  {
    ms::Output o(config_);
    int p = o.add_process("0@h", "worker_0.log", true);
    o.data(p, false, "bye\n");
  }
  EXPECT_EQ(out(), "[0@h] bye\n");
  EXPECT_EQ(log("worker_0.log"), "bye\n");
}

TEST_F(Output, LogFilesAre0600AndTruncated) {
  std::string path = config_.log_dir + "/worker_0.log";
  {
    std::ofstream old(path);
    old << "a previous job's log\n";
  }
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  ms::Output o(config_);
  int p = o.add_process("0@h", "worker_0.log", true);
  EXPECT_EQ(mode_of(path), 0600u);
  EXPECT_EQ(fs::file_size(path), 0u);
  o.add_process("1@h", "worker_1.log", true);
  EXPECT_EQ(mode_of(config_.log_dir + "/worker_1.log"), 0600u);
  o.data(p, false, "new\n");
  o.flush();
  EXPECT_EQ(log("worker_0.log"), "new\n");
}

// A link in a log's place is not followed: it would truncate any file of the user's that
// whoever may write in the log directory points it at.
TEST_F(Output, ALogThatIsASymbolicLinkIsNotFollowed) {
  std::string victim = config_.log_dir + "/victim";
  { std::ofstream(victim) << "precious\n"; }
  ASSERT_EQ(::symlink(victim.c_str(), (config_.log_dir + "/worker_0.log").c_str()), 0);
  ms::Output o(config_);
  try {
    o.add_process("0@h", "worker_0.log", true);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot open log file " + config_.log_dir +
                                         "/worker_0.log: it is a symbolic link, which is not "
                                         "followed (anyone who may write in the directory could "
                                         "point it at any file of yours)");
  }
  EXPECT_EQ(log("victim"), "precious\n");
}

TEST_F(Output, AddProcessNamesTheLogFileItCannotOpen) {
  config_.log_dir = dir_ + "/missing";
  ms::Output o(config_);
  try {
    o.add_process("0@h", "worker_0.log", true);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot open log file " + dir_ + "/missing/worker_0.log: No such file or directory");
  }
}

TEST_F(Output, LastLinesKeepTheNewestOfBothStreams) {
  config_.keep_last_lines = 3;
  ms::Output o(config_);
  int p = o.add_process("0@h", "worker_0.log", true);
  EXPECT_TRUE(o.last_lines(p).empty());
  o.data(p, false, "l1\nl2\n");
  o.data(p, true, "l3\n");
  EXPECT_EQ(o.last_lines(p), (std::deque<std::string>{"l1", "l2", "l3"}));
  o.data(p, false, "l4\n");
  o.data(p, true, "l5\nl6");
  EXPECT_EQ(o.last_lines(p), (std::deque<std::string>{"l3", "l4", "l5"}));
  o.finish(p);
  EXPECT_EQ(o.last_lines(p), (std::deque<std::string>{"l4", "l5", "l6"}));
}

// A last line that redrew itself (a progress bar) is kept as it ended, and a cut never splits a
// UTF-8 character (the bar's first state was kept, and a cut could end inside a Chinese character).
TEST_F(Output, LastLinesKeepARedrawnLinesLastStateAndWholeCharacters) {
  ms::Output o(config_);
  int p = o.add_process("0@h", "worker_0.log", true);
  o.data(p, false, "  0%|          |\r 50%|#####     |\r100%|##########|\r\n");
  std::string chinese;
  for (int i = 0; i < 200; ++i) chinese += "\xe8\xae\xad";  // 训, 3 bytes each
  o.data(p, false, "xy" + chinese + "\n");
  ASSERT_EQ(o.last_lines(p).size(), 2u);
  EXPECT_EQ(o.last_lines(p).front(), "100%|##########|");
  EXPECT_EQ(o.last_lines(p).back(), "xy" + chinese.substr(0, 396));  // 398 bytes, not 400
}

TEST_F(Output, LastLinesAreCutTo400Bytes) {
  ms::Output o(config_);
  int p = o.add_process("0@h", "worker_0.log", true);
  o.data(p, false, std::string(1000, 'x') + "\n");
  ASSERT_EQ(o.last_lines(p).size(), 1u);
  EXPECT_EQ(o.last_lines(p).front(), std::string(400, 'x'));
  o.flush();
  EXPECT_EQ(log("worker_0.log").size(), 1001u);  // the log keeps it whole
}

TEST_F(Output, MessagesGoToTheErrorConsoleAfterWhatIsPending) {
  std::ostringstream launcher;
  config_.launcher_log = std::make_shared<spdlog::logger>(
      "test", std::make_shared<spdlog::sinks::ostream_sink_st>(launcher));
  config_.launcher_log->set_pattern("%v");
  ms::Output o(config_);
  int p = o.add_process("0@h", "worker_0.log", true);
  o.data(p, true, "pending\n");
  o.message("rank 0 on h failed: exit 1");
  EXPECT_EQ(err(), "[0@h err] pending\nmsrun-ssh: rank 0 on h failed: exit 1\n");
  EXPECT_EQ(launcher.str(), "rank 0 on h failed: exit 1\n");
}

// --- make_log_dir --------------------------------------------------------------------------------

TEST_F(Output, MakeLogDirCreatesNestedDirectories0700) {
  std::string top = dir_ + "/a";
  ms::Output::make_log_dir(top + "/b/c");
  EXPECT_EQ(mode_of(top), 0700u);
  EXPECT_EQ(mode_of(top + "/b"), 0700u);
  EXPECT_EQ(mode_of(top + "/b/c"), 0700u);
  ms::Output::make_log_dir(top + "/b/c");  // again: fine
  ms::Output::make_log_dir(top + "/b/c/");
  ms::Output::make_log_dir(top + "//b/d");
  EXPECT_EQ(mode_of(top + "/b/d"), 0700u);
}

TEST_F(Output, MakeLogDirLeavesAnExistingDirectoryAlone) {
  std::string d = dir_ + "/shared";
  ASSERT_EQ(::mkdir(d.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(d.c_str(), 0755), 0);
  ms::Output::make_log_dir(d);
  EXPECT_EQ(mode_of(d), 0755u);
}

TEST_F(Output, MakeLogDirUnderARegularFileNamesThePart) {
  std::string file = dir_ + "/file";
  { std::ofstream(file) << "x"; }
  try {
    ms::Output::make_log_dir(file + "/logs/deeper");
    FAIL() << "no exception";
  } catch (const ms::InputError& e) {
    EXPECT_EQ(std::string(e.what()), "--log_dir=" + file + "/logs/deeper: cannot create " + file +
                                         "/logs: Not a directory");
  }
}

TEST_F(Output, MakeLogDirOnARegularFile) {
  std::string file = dir_ + "/file";
  { std::ofstream(file) << "x"; }
  try {
    ms::Output::make_log_dir(file);
    FAIL() << "no exception";
  } catch (const ms::InputError& e) {
    EXPECT_EQ(std::string(e.what()), "--log_dir=" + file + ": not a directory");
  }
}

TEST_F(Output, MakeLogDirThatCannotBeWritten) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes everywhere";
  std::string d = dir_ + "/ro";
  ASSERT_EQ(::mkdir(d.c_str(), 0500), 0);
  try {
    ms::Output::make_log_dir(d);
    FAIL() << "no exception";
  } catch (const ms::InputError& e) {
    EXPECT_EQ(std::string(e.what()), "--log_dir=" + d + ": not writable");
  }
  try {
    ms::Output::make_log_dir(d + "/sub");
    FAIL() << "no exception";
  } catch (const ms::InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--log_dir=" + d + "/sub: cannot create " + d + "/sub: Permission denied");
  }
}

// --- format_summary ------------------------------------------------------------------------------

TEST(Summary, FormatsTheTableAndTheLastLinesOfFailedProcesses) {
  std::vector<ms::SummaryRow> rows(3);
  rows[0] = {"198.18.0.1", "scheduler", "exit 0", 12.34, false, {"not shown"}};
  rows[1] = {"198.18.0.2", "rank 3", "exit 7", 0.5, true, {"Traceback", "ValueError: x"}};
  rows[2] = {"198.18.0.2", "rank 4", "killed by SIGTERM (ended by teardown)", 123456.78, false, {}};
  EXPECT_EQ(ms::format_summary(rows),
            "host        process    status                                      time\n"
            "198.18.0.1  scheduler  exit 0                                     12.3s\n"
            "198.18.0.2  rank 3     exit 7                                      0.5s\n"
            "198.18.0.2  rank 4     killed by SIGTERM (ended by teardown)  123456.8s\n"
            "--- failed: rank 3 on 198.18.0.2: exit 7 ---\n"
            "Traceback\n"
            "ValueError: x\n");
}

TEST(Summary, NoRowsIsJustTheHeader) {
  EXPECT_EQ(ms::format_summary({}), "host  process  status       time\n");
}

TEST(Summary, FailedWithoutLastLinesShowsNoSection) {
  std::vector<ms::SummaryRow> rows(1);
  rows[0] = {"h", "rank 0", "host lost", 1, true, {}};
  EXPECT_EQ(ms::format_summary(rows),
            "host  process  status          time\n"
            "h     rank 0   host lost       1.0s\n");
}

// ---- the failure report --------------------------------------------------------------------

// A catcher fed `text` line by line (a last line without newline included).
template <typename Catcher>
Catcher fed(const std::string& text) {
  Catcher c;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = std::min(text.find('\n', pos), text.size());
    c.feed(std::string_view(text).substr(pos, end - pos));
    pos = end + 1;
  }
  return c;
}

std::vector<std::string> catch_traceback(const std::string& text, bool* cut = nullptr) {
  auto c = fed<ms::TracebackCatcher>(text);
  if (cut) *cut = c.cut();
  return c.lines();
}

using Lines = std::vector<std::string>;

TEST(Traceback, TheWholeBlockThroughTheExceptionLine) {
  bool cut = true;
  Lines tb = catch_traceback(
      "epoch 1\n"
      "Traceback (most recent call last):\n"
      "  File \"train.py\", line 9, in <module>\n"
      "    step()\n"
      "  File \"train.py\", line 4, in step\n"
      "    raise ValueError(\"rank 3: bad\")\n"
      "ValueError: rank 3: bad\n"
      "\n",
      &cut);
  EXPECT_EQ(tb,
            (Lines{"Traceback (most recent call last):", "  File \"train.py\", line 9, in <module>",
                   "    step()", "  File \"train.py\", line 4, in step",
                   "    raise ValueError(\"rank 3: bad\")", "ValueError: rank 3: bad"}));
  EXPECT_FALSE(cut);
}

// An exception's message over several lines is kept whole (only its first line was: MindSpore's
// and CANN's "- Ascend Error Message:" sections, NCCL's "Last error:"), up to kMessageLines lines.
TEST(Traceback, AMessageOverSeveralLinesIsKeptWhole) {
  std::string text =
      "Traceback (most recent call last):\n"
      "  File \"train.py\", line 9, in <module>\n"
      "RuntimeError: Compile graph failed.\n"
      "\n"
      "- Ascend Error Message:\n"
      "E40021: Failed to compile Op [Add3].\n";
  Lines tb = catch_traceback(text);
  ASSERT_EQ(tb.size(), 6u);
  EXPECT_EQ(tb[4], "- Ascend Error Message:");
  EXPECT_EQ(tb[5], "E40021: Failed to compile Op [Add3].");
  for (int i = 0; i < 50; ++i) text += "later line\n";
  EXPECT_EQ(catch_traceback(text).size(), 3 + ms::TracebackCatcher::kMessageLines);
}

// tqdm's bar has no newline yet when Python prints the traceback: the start ends a line of
// redraws (the traceback was missed, and the failure grouped by last lines).
TEST(Traceback, AStartAfterAnUnfinishedProgressBarIsCaught) {
  Lines tb = catch_traceback(
      "\r  0%|          | 0/10\r 20%|##        | 2/10Traceback (most recent call last):\n"
      "  File \"train.py\", line 9, in <module>\n"
      "ValueError: bad batch\n");
  EXPECT_EQ(tb, (Lines{"Traceback (most recent call last):",
                       "  File \"train.py\", line 9, in <module>", "ValueError: bad batch"}));
  // After an unfinished stderr write too; an exception group's indented sub-traceback is no start.
  EXPECT_EQ(catch_traceback("loading ckpt... Traceback (most recent call last):\n"
                            "  File \"train.py\", line 3, in <module>\nOSError: x\n")
                .front(),
            "Traceback (most recent call last):");
  EXPECT_TRUE(catch_traceback("    | Traceback (most recent call last):\n"
                              "    |   File \"a.py\", line 1\n    | ValueError: v\n")
                  .empty());
}

TEST(Traceback, ChainedExceptionsStayOneBlock) {
  std::string text =
      "Traceback (most recent call last):\n"
      "  File \"a.py\", line 2, in <module>\n"
      "KeyError: 'x'\n"
      "\n"
      "During handling of the above exception, another exception occurred:\n"
      "\n"
      "Traceback (most recent call last):\n"
      "  File \"a.py\", line 4, in <module>\n"
      "RuntimeError: lookup failed\n";
  Lines tb = catch_traceback(text);
  ASSERT_EQ(tb.size(), 9u);
  EXPECT_EQ(tb[4], "During handling of the above exception, another exception occurred:");
  EXPECT_EQ(tb.back(), "RuntimeError: lookup failed");
  // "direct cause" chains too.
  std::string cause = text;
  cause.replace(cause.find("During handling"), 67,
                "The above exception was the direct cause of the following exception:");
  EXPECT_EQ(catch_traceback(cause)[4],
            "The above exception was the direct cause of the following exception:");
}

TEST(Traceback, TheLastOneWinsAndACutOneIsKeptAsFarAsItGot) {
  bool cut = false;
  Lines tb = catch_traceback(
      "Traceback (most recent call last):\n  File \"a.py\", line 1\nOSError: first\n"
      "retrying\n"
      "Traceback (most recent call last):\n  File \"a.py\", line 7, in f\n    g()\n",
      &cut);
  EXPECT_EQ(tb, (Lines{"Traceback (most recent call last):", "  File \"a.py\", line 7, in f",
                       "    g()"}));
  EXPECT_TRUE(cut);
  EXPECT_TRUE(catch_traceback("no traceback here\nat all\n").empty());
}

TEST(Traceback, AVeryDeepOneIsBounded) {
  std::string text = "Traceback (most recent call last):\n";
  for (int i = 0; i < 1000; ++i) text += "  File \"r.py\", line 3, in f\n    f()\n";
  text += "RecursionError: maximum recursion depth exceeded\n";
  Lines tb = catch_traceback(text);
  ASSERT_EQ(tb.size(), ms::TracebackCatcher::kMaxLines);
  EXPECT_EQ(tb.front(), "Traceback (most recent call last):");
  EXPECT_EQ(tb.back(), "RecursionError: maximum recursion depth exceeded");
  // The outermost frames, the count of those between, then the innermost ones (where it
  // happened): 2002 lines, 199 kept.
  const size_t head = ms::TracebackCatcher::kHeadLines;
  EXPECT_EQ(tb[head], "  ... 1803 more lines ...");
  EXPECT_EQ(tb[head - 1], "  File \"r.py\", line 3, in f");
  EXPECT_EQ(tb[tb.size() - 2], "    f()");
  EXPECT_EQ(tb[tb.size() - 3], "  File \"r.py\", line 3, in f");
}

TEST(Summary, RanksInNodeSetNotation) {
  EXPECT_EQ(ms::describe_ranks({3}), "rank 3");
  EXPECT_EQ(ms::describe_ranks({4, 0, 1, 2, 6, 7}), "ranks 0-2,4,6-7 (6 processes)");
  EXPECT_EQ(ms::describe_ranks({-1, 5}), "scheduler, rank 5 (2 processes)");
  // Processes of one rank (its children) name it once and count each.
  EXPECT_EQ(ms::describe_ranks({3, -1, 3, -1, 4}), "scheduler, ranks 3-4 (5 processes)");
}

ms::SummaryRow failed_row(int rank, const std::string& host, Lines tb, bool root = false) {
  ms::SummaryRow r;
  r.host = host;
  r.process = "rank " + std::to_string(rank);
  r.status = "exit 1";
  r.failed = true;
  r.rank = rank;
  r.traceback = std::move(tb);
  r.last_lines = {"not shown when there is a traceback"};
  r.root_cause = root;
  return r;
}

Lines value_error(int rank) {
  return {"Traceback (most recent call last):", "  File \"t.py\", line 12, in <module>",
          "ValueError: rank " + std::to_string(rank) + " saw NaN at step 4" + std::to_string(rank)};
}

// A message's later lines tell failures with the same first line apart (NCCL's "Last error:").
TEST(Summary, AMessagesLaterLinesTellFailuresApart) {
  std::vector<ms::SummaryRow> rows;
  for (int r = 0; r < 3; ++r) {
    Lines tb = value_error(1);
    tb.push_back(r == 2 ? "Last error: Cuda failure 'out of memory'"
                        : "Last error: socketStartConnect: Connect to 10.0.0.1<1234> failed");
    rows.push_back(failed_row(r, "n1", tb, r == 0));
  }
  std::string s = ms::format_summary(rows);
  EXPECT_NE(s.find("--- also failed: rank 1 on n1: exit 1 ---"), std::string::npos) << s;
  EXPECT_NE(s.find("--- also failed: rank 2 on n1: exit 1 ---"), std::string::npos) << s;
}

TEST(Summary, RootCauseFirstThenIdenticalFailuresOnceUnderTheirRankSet) {
  std::vector<ms::SummaryRow> rows;
  for (int r = 0; r < 6; ++r)
    if (r != 3) rows.push_back(failed_row(r, r < 3 ? "n1" : "n2", value_error(r)));
  rows.insert(rows.begin() + 3,
              failed_row(3, "n2",
                         {"Traceback (most recent call last):", "  File \"t.py\", line 30, in load",
                          "OSError: disk full"},
                         true));
  ms::SummaryRow torn;
  torn.host = "n1";
  torn.process = "scheduler";
  torn.status = "killed by SIGTERM (ended by teardown)";
  torn.torn_down = true;
  rows.insert(rows.begin(), torn);
  std::string s = ms::format_summary(rows);
  std::string report = s.substr(s.find("---"));
  EXPECT_EQ(report,
            "--- root cause: rank 3 on n2: exit 1 (its traceback) ---\n"
            "Traceback (most recent call last):\n"
            "  File \"t.py\", line 30, in load\n"
            "OSError: disk full\n"
            "--- also failed: ranks 0-2,4-5 (5 processes), e.g. rank 0 on n1: exit 1 ---\n"
            "Traceback (most recent call last):\n"
            "  File \"t.py\", line 12, in <module>\n"
            "ValueError: rank 0 saw NaN at step 40\n"
            "--- ended by the teardown: 1 process ---\n");
}

// ---- torch error files (--contract torch) ---------------------------------------------------

TEST(ErrorFile, ReadsBothLayoutsTorchWrites) {
  auto f = ms::parse_error_file(
      R"({"message":{"message":"ValueError: x","extraInfo":{"py_callstack":"Traceback (most recent )"
      R"(call last):\n  File \"t.py\", line 3\nValueError: x\n","timestamp":"1764669600"}}})");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->message, "ValueError: x");
  EXPECT_EQ(f->timestamp, 1764669600);
  EXPECT_EQ(f->traceback, (Lines{"Traceback (most recent call last):", "  File \"t.py\", line 3",
                                 "ValueError: x"}));
  auto old = ms::parse_error_file(R"({"message": "RuntimeError: y", "timestamp": 17})");
  ASSERT_TRUE(old);
  EXPECT_EQ(old->message, "RuntimeError: y");
  EXPECT_EQ(old->timestamp, 17);
  EXPECT_TRUE(old->traceback.empty());
  for (const char* bad : {"", "{", "[]", "{}", R"({"message": 3})", R"({"message": {}})"})
    EXPECT_FALSE(ms::parse_error_file(bad)) << bad;
  auto no_time =
      ms::parse_error_file(R"({"message":{"message":"E","extraInfo":{"timestamp":"x"}}})");
  ASSERT_TRUE(no_time);
  EXPECT_EQ(no_time->timestamp, 0);
}

TEST_F(Output, AnErrorFileLineIsKeptForTheSummaryAndShownNowhere) {
  ms::Output o(config_);
  int p = o.add_process("0@node0", "worker_0.log", true);
  o.data(p, true, "ValueError: x\n");
  o.data(p, true,
         std::string(ms::kErrorFileLine) + R"({"message":"ValueError: x","timestamp":5})" + "\n");
  o.data(p, true, std::string(ms::kErrorFileLine) + "not json\n");  // not one: an ordinary line
  o.finish(p);
  o.flush();
  ASSERT_TRUE(o.error_file(p));
  EXPECT_EQ(o.error_file(p)->timestamp, 5);
  EXPECT_EQ(log("worker_0.log"), "ValueError: x\nmsrun-ssh: error file: not json\n");
  EXPECT_EQ(err(), "[0@node0 err] ValueError: x\n[0@node0 err] msrun-ssh: error file: not json\n");
}

TEST(Summary, TheErrorFileIsTheRootCausesReport) {
  std::vector<ms::SummaryRow> rows{failed_row(0, "n1", value_error(0), true)};
  rows[0].error_message = "ValueError: rank 0 saw NaN at step 40";
  rows[0].error_time = 100;
  std::string s = ms::format_summary(rows);
  EXPECT_THAT(s, ::testing::HasSubstr("--- root cause: rank 0 on n1: exit 1 (its error file) ---\n"
                                      "Traceback (most recent call last):\n"));
  auto j = ms::summary_json(rows);
  EXPECT_EQ(j["root_cause"]["error_file"]["message"], "ValueError: rank 0 saw NaN at step 40");
  EXPECT_EQ(j["root_cause"]["error_file"]["timestamp"], 100);
}

// An error file with a message and no traceback of its own (the older {"message": "..."} layout):
// the header said "(its error file)" and showed only the caught lines, never the message.
TEST(Summary, AnErrorFilesMessageIsShownWhenItsLinesDoNotHoldIt) {
  std::vector<ms::SummaryRow> rows{failed_row(0, "n1", {}, true)};
  rows[0].last_lines = {"step 40", "aborting"};
  rows[0].error_message = "CUDA error: an illegal memory access was encountered";
  EXPECT_THAT(ms::format_summary(rows),
              ::testing::HasSubstr("(its error file) ---\n"
                                   "error file: CUDA error: an illegal memory access was "
                                   "encountered\nstep 40\naborting\n"));
  rows[0].last_lines = {"CUDA error: an illegal memory access was encountered"};  // said there
  EXPECT_THAT(ms::format_summary(rows), ::testing::Not(::testing::HasSubstr("error file: ")));
  rows[0].error_message = "ValueError: rank 0 saw NaN at step 40";  // in its traceback: once
  rows[0].traceback = value_error(0);
  EXPECT_THAT(ms::format_summary(rows), ::testing::Not(::testing::HasSubstr("error file: ")));
}

// What torchrun writes to its own TORCHELASTIC_ERROR_FILE when the job fails: the root cause's
// file with its exitcode as errorCode, or a ChildFailedError naming it (torch's @record); the
// differential test against torchrun is test_torch.py's.
TEST(Summary, TheLaunchersTorchelasticErrorFileIsTheRootCauses) {
  std::vector<ms::SummaryRow> rows{failed_row(0, "n1", value_error(0)),
                                   failed_row(1, "n2", value_error(1), true)};
  rows[1].error_message = "ValueError: rank 1 saw NaN at step 41";
  rows[1].error_time = 100;
  rows[1].exit_code = 1;
  auto j = nlohmann::json::parse(ms::torchelastic_error(rows, 200));
  EXPECT_EQ(j["message"]["message"], "ValueError: rank 1 saw NaN at step 41");
  EXPECT_EQ(j["message"]["errorCode"], 1);
  EXPECT_EQ(j["message"]["extraInfo"]["timestamp"], "100");
  EXPECT_EQ(j["message"]["extraInfo"]["py_callstack"],
            "Traceback (most recent call last):\n  File \"t.py\", line 12, in <module>\n"
            "ValueError: rank 1 saw NaN at step 41\n");
  rows[1].error_message.clear();  // killed: no error file
  rows[1].status = "killed by SIGKILL";
  j = nlohmann::json::parse(ms::torchelastic_error(rows, 200));
  EXPECT_EQ(j["message"]["message"], "ChildFailedError: rank 1 on n2 failed: killed by SIGKILL");
  EXPECT_EQ(j["message"]["extraInfo"]["timestamp"], "200");
  EXPECT_FALSE(j["message"].contains("errorCode"));
  rows[1].root_cause = false;
  EXPECT_EQ(ms::torchelastic_error(rows, 200), "");
}

// torchrun's "first observed failure": the earliest error file, when the one seen first has one.
TEST(Summary, TheEarliestErrorFileIsTheRootCause) {
  auto rows_with = [](long long t0, long long t1, long long t2) {
    std::vector<ms::SummaryRow> rows{failed_row(0, "n1", value_error(0), true),
                                     failed_row(1, "n1", value_error(1)),
                                     failed_row(2, "n2", value_error(2))};
    rows[0].error_time = t0;
    rows[1].error_time = t1;
    rows[2].error_time = t2;
    ms::follow_error_files(rows);
    std::vector<int> roots;
    for (const auto& r : rows)
      if (r.root_cause) roots.push_back(r.rank);
    return roots;
  };
  EXPECT_EQ(rows_with(50, 40, 45), std::vector<int>{1});
  EXPECT_EQ(rows_with(50, 50, 60), std::vector<int>{0});  // a tie: the one seen first
  EXPECT_EQ(rows_with(0, 40, 45), std::vector<int>{0});   // the first seen has none: it stays
  EXPECT_EQ(rows_with(50, 0, 45), std::vector<int>{2});
}

TEST(Summary, DifferentFrameLinesAreDifferentFailures) {
  Lines a = value_error(0), b = value_error(1);
  b[1] = "  File \"t.py\", line 13, in <module>";
  std::string s = ms::format_summary({failed_row(0, "h", a), failed_row(1, "h", b)});
  EXPECT_NE(s.find("--- failed: rank 0 on h: exit 1 ---"), std::string::npos) << s;
  EXPECT_NE(s.find("--- failed: rank 1 on h: exit 1 ---"), std::string::npos) << s;
}

Lines catch_stacks(const std::string& text) { return fed<ms::StackCatcher>(text).lines(); }

TEST(Stacks, EveryThreadOfTheFaulthandlerDumpAndNothingAfter) {
  Lines s = catch_stacks(
      "step 4\n"
      "Fatal Python error: Aborted\n"
      "\n"
      "Thread 0x00007f5770fde6c0 (most recent call first):\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 320 in wait\n"
      "\n"
      "Current thread 0x00007f5771299040 (most recent call first):\n"
      "  File \"hang.py\", line 4 in wait_for_peer\n"
      "  File \"hang.py\", line 6 in <module>\n"
      "\n"
      "Extension modules: numpy.core._multiarray_umath (total: 1)\n");
  EXPECT_EQ(s, (Lines{"Thread 0x00007f5770fde6c0 (most recent call first):",
                      "  File \"/usr/lib/python3.11/threading.py\", line 320 in wait", "",
                      "Current thread 0x00007f5771299040 (most recent call first):",
                      "  File \"hang.py\", line 4 in wait_for_peer",
                      "  File \"hang.py\", line 6 in <module>", ""}));
  EXPECT_TRUE(catch_stacks("Traceback (most recent call last):\n  File \"x\"\n").empty());
}

TEST(Summary, StacksAreGroupedSoTheOddOneStandsOut) {
  auto row = [](int rank, const std::string& where) {
    ms::SummaryRow r;
    r.host = rank < 3 ? "n1" : "n2";
    r.process = rank < 0 ? "scheduler" : "rank " + std::to_string(rank);
    r.rank = rank;
    r.status = "killed by SIGABRT (timed out)";
    r.torn_down = true;
    r.stacks = {fmt::format("Current thread 0x00007f{:04x} (most recent call first):", rank + 9),
                "  File \"t.py\", line 9 in " + where};
    return r;
  };
  std::vector<ms::SummaryRow> rows;
  for (int r = 0; r < 6; ++r) rows.push_back(row(r, r == 2 ? "wait_for_peer" : "allreduce"));
  ms::SummaryRow plain;
  plain.host = "n1";
  plain.process = "scheduler";
  rows.push_back(plain);
  std::string s = ms::format_summary(rows);
  std::string stacks = s.substr(s.find("--- Python stacks"));
  EXPECT_EQ(stacks,
            "--- Python stacks of ranks 0-1,3-5 (5 processes), e.g. rank 0 on n1 ---\n"
            "Current thread 0x00007f0009 (most recent call first):\n"
            "  File \"t.py\", line 9 in allreduce\n"
            "--- Python stacks of rank 2 on n1 ---\n"
            "Current thread 0x00007f000b (most recent call first):\n"
            "  File \"t.py\", line 9 in wait_for_peer\n"
            "--- no Python stack from 1 process (not Python, or already ended) ---\n");
}

}  // namespace
