// The ground floor's string helpers (include/msrun_ssh/base.h).
#include "msrun_ssh/base.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace msrun_ssh {
namespace {

using Views = std::vector<std::string_view>;

// A console descriptor left non-blocking by whoever shares it: every byte still arrives, written
// as the reader takes them (the rest of a chunk was dropped at EAGAIN; review of 2026-12-07).
TEST(Base, WriteFullyWaitsForANonBlockingDescriptorInsteadOfDroppingBytes) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::fcntl(fds[1], F_SETFL, ::fcntl(fds[1], F_GETFL) | O_NONBLOCK), 0);
  const std::string data(1 << 20, 'x');  // far more than a pipe holds
  std::string got;
  std::thread reader([&] {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof buf)) > 0) {
      got.append(buf, static_cast<size_t>(n));
      if (got.size() < (1u << 16)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  write_fully(fds[1], data);
  ::close(fds[1]);
  reader.join();
  ::close(fds[0]);
  EXPECT_EQ(got.size(), data.size());
}

// No descriptor left for the signalfd: the signals are not left blocked with nobody to read them
// (a Ctrl-C did nothing at all; review of 2026-12-07).
TEST(Base, ASignalFdThatCannotBeMadeLeavesItsSignalsUnblocked) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // A signalfd made before (the job's) reads SIGHUP: it stays blocked for it.
    int outer = signal_fd({SIGHUP});
    rlimit none{0, 0};
    ::setrlimit(RLIMIT_NOFILE, &none);
    int fd = signal_fd({SIGINT, SIGTERM, SIGHUP});
    sigset_t now;
    sigprocmask(SIG_BLOCK, nullptr, &now);
    ::_exit(outer >= 0 && fd == -1 && !sigismember(&now, SIGINT) && !sigismember(&now, SIGTERM) &&
                    sigismember(&now, SIGHUP)
                ? 0
                : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// A signal ignored when the launcher started stays ignored: nohup's SIGHUP, blocked for the
// signalfd, waited to be read, and a terminal's hangup ended the nohup'd job.
TEST(Base, ASignalIgnoredAtTheStartStaysIgnored) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGHUP, SIG_IGN);
    int fd = signal_fd({SIGHUP, SIGTERM});
    ::raise(SIGHUP);
    int first = next_signal(fd);
    ::raise(SIGTERM);
    int second = next_signal(fd);
    ::_exit(fd >= 0 && first == 0 && second == SIGTERM ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(Base, ReaderGoneOnceAPipesReadingEndIsClosed) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  EXPECT_FALSE(reader_gone(fds[1]));
  ::close(fds[0]);
  EXPECT_TRUE(reader_gone(fds[1]));
  ::close(fds[1]);
}

TEST(Base, TrimDropsBlanksAtBothEnds) {
  EXPECT_EQ(trim("  a b\t"), "a b");
  EXPECT_EQ(trim(" \t "), "");
  EXPECT_EQ(trim("xxaxx", "x"), "a");
}

TEST(Base, SplitLinesKeepsEmptyLinesAndALastLineWithoutNewline) {
  EXPECT_EQ(split_lines(""), Views{});
  EXPECT_EQ(split_lines("a"), Views{"a"});
  EXPECT_EQ(split_lines("a\n"), Views{"a"});
  EXPECT_EQ(split_lines("a\n\nb"), (Views{"a", "", "b"}));
  EXPECT_EQ(split_lines("\n"), Views{""});
  EXPECT_EQ(split_lines("a\r\nb\n"), (Views{"a\r", "b"}));
}

TEST(Base, SplitWordsSkipsEveryRunOfBlanks) {
  EXPECT_EQ(split_words(""), Views{});
  EXPECT_EQ(split_words(" \t "), Views{});
  EXPECT_EQ(split_words("  a\t b  c "), (Views{"a", "b", "c"}));
  EXPECT_EQ(split_words("a,b,,c", ","), (Views{"a", "b", "c"}));
}

// What a message quotes of a file: any bytes, shown escaped where they are not printable UTF-8.
TEST(Base, InQuotesEscapesWhatIsNotPrintableUtf8) {
  EXPECT_EQ(in_quotes("a b"), "\"a b\"");
  EXPECT_EQ(in_quotes("say \"hi\"\\"), "\"say \\\"hi\\\"\\\\\"");
  EXPECT_EQ(in_quotes("it's", '\''), "'it\\'s'");
  EXPECT_EQ(in_quotes("l1\nl2\r\t\x07\x7f"), "\"l1\\nl2\\r\\t\\x07\\x7f\"");
  // UTF-8 as written; C1 controls as \u00NN; bytes of no character, cut or overlong sequences,
  // surrogates and code points past U+10FFFF as \xNN.
  EXPECT_EQ(in_quotes("h\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80"),
            "\"h\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\"");
  EXPECT_EQ(in_quotes("\xc2\x85"), "\"\\u0085\"");
  EXPECT_EQ(in_quotes("alhalh\xd5\x8c\x8b\xf5"), "\"alhalh\xd5\x8c\\x8b\\xf5\"");
  EXPECT_EQ(in_quotes("\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80\xe4\xb8"),
            "\"\\xc0\\xaf\\xed\\xa0\\x80\\xf4\\x90\\x80\\x80\\xe4\\xb8\"");
  EXPECT_EQ(in_quotes(std::string_view("a\0b", 3)), "\"a\\x00b\"");
}

// A whole message keeps its lines, tabs, quotes and backslashes; what a terminal would act on (an
// escape sequence given as a value) and bytes of no character are shown escaped.
TEST(Base, PrintableKeepsTheMessageAndEscapesWhatATerminalActsOn) {
  EXPECT_EQ(printable("a \"b\" \\ c\n\td"), "a \"b\" \\ c\n\td");
  EXPECT_EQ(printable("--master_addr=ev\x1b[31mil\r\x07"), "--master_addr=ev\\x1b[31mil\\x0d\\x07");
  EXPECT_EQ(printable("h\xc3\xa9 \xc2\x9b \xff"), "h\xc3\xa9 \\u009b \\xff");
  EXPECT_EQ(printable(std::string_view("a\0b", 3)), "a\\x00b");
}

// What another program printed may be anything: out of range is the nearest bound, never undefined.
TEST(Base, SaturateKeepsEveryDoubleWithinTheIntegerType) {
  EXPECT_EQ(saturate<long>(3.9), 3);
  EXPECT_EQ(saturate<long>(-3.9), -3);
  EXPECT_EQ(saturate<long>(3.11111e+89), std::numeric_limits<long>::max());
  EXPECT_EQ(saturate<long>(-1e300), std::numeric_limits<long>::min());
  EXPECT_EQ(saturate<int>(2147483647.5), std::numeric_limits<int>::max());
  EXPECT_EQ(saturate<int>(2147483646.0), 2147483646);
  EXPECT_EQ(saturate<int>(std::numeric_limits<double>::infinity()),
            std::numeric_limits<int>::max());
  EXPECT_EQ(saturate<int>(std::nan("")), 0);
  EXPECT_EQ(saturate<long>(9.2233720368547758e18), std::numeric_limits<long>::max());  // 2^63
}

// replace_file: the new text in full, or the old file untouched, and never a temporary file left.
TEST(Base, ReplaceFileWritesInFullOrLeavesNothingBehind) {
  std::string dir = ::testing::TempDir() + "replace-file-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(std::filesystem::create_directory(dir));
  std::string path = dir + "/summary.json";
  EXPECT_EQ(replace_file(path, "one\n"), "");
  EXPECT_EQ(read_whole_file(path), "one\n");
  EXPECT_EQ(replace_file(path, "two\n"), "");
  EXPECT_EQ(read_whole_file(path), "two\n");
  // A directory in the way: the rename fails; its reason is returned and the temporary is gone.
  ASSERT_TRUE(std::filesystem::create_directory(dir + "/busy"));
  ASSERT_TRUE(write_text_file(dir + "/busy/x", "x"));
  EXPECT_NE(replace_file(dir + "/busy", "three\n"), "");
  // A directory that does not exist: nothing can be created.
  EXPECT_EQ(replace_file(dir + "/no/such/file", "four\n"), std::strerror(ENOENT));
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"busy", "summary.json"}));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace msrun_ssh

// What goes in comes out in order; static views are never copied; a big copy is not made to grow
// by a small write after it (one piece of its own instead); the memory goes once it is empty.
TEST(Base, SendQueueKeepsOrderAndCopiesNoStaticBytes) {
  static const std::string kProgram(3000, 'p');
  msrun_ssh::SendQueue q;
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.front(), "");
  q.append("ab");
  q.append("c");
  q.append_stable(kProgram);
  q.append("de");
  EXPECT_EQ(q.size(), 3 + kProgram.size() + 2);
  EXPECT_EQ(q.front(), "abc");
  q.consume(1);
  EXPECT_EQ(q.front(), "bc");
  q.consume(2);
  EXPECT_EQ(q.front().data(), kProgram.data());  // the view itself, not a copy
  q.consume(1000);
  EXPECT_EQ(q.front().data(), kProgram.data() + 1000);
  q.consume(2000);
  EXPECT_EQ(q.front(), "de");
  q.consume(5);  // more than there is: what is there
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.size(), 0u);

  std::string big(3000, 'b');
  q.append(big);
  const char* before = q.front().data();
  q.append("x");  // would double the big copy's capacity: a piece of its own instead
  EXPECT_EQ(q.front().data(), before);
  EXPECT_EQ(q.front().size(), big.size());
  q.consume(big.size());
  EXPECT_EQ(q.front(), "x");
  q.consume(1);
  EXPECT_TRUE(q.empty());
}
