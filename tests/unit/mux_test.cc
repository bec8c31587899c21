// Kept connections (mux.h): the frame codec, and a keeper (serve_mux in a child process, over the
// ProcessTransport, whose "hosts" are this machine) with commands attaching to it (MuxClient).
#include "msrun_ssh/mux.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

#include "msrun_ssh/keeper.h"
#include "msrun_ssh/process.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

namespace fs = std::filesystem;

// The message of the std::runtime_error (or std::logic_error) `f()` throws, "no error" without one.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

// Sets an environment variable for a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Lines in the file at `path` (0 when there is none).
long lines_in(const std::string& path) {
  std::string text = test::slurp(path);
  return std::count(text.begin(), text.end(), '\n');
}

// ---- the codec ----

TEST(MuxFrame, FramesComeBackAsTheyWentAndOnlyWhenWhole) {
  std::vector<MuxFrame> frames = {
      {'H', {600000, 64}, {"key\nwith lines"}},
      {'X', {7, 63}, {"exec /bin/sh -c 'echo hi'"}},
      {'W', {7}, {std::string("\0\xff data", 7)}},
      {'e', {0, 0xffffffff, 3, 1, 137}, {"out", "KILL"}},
      {'a', {7, uint64_t{1} << 40}, {}},
      {'Q', {}, {}},
  };
  std::string wire;
  for (const auto& f : frames) wire += encode_mux_frame(f);
  for (size_t cut = 0; cut < wire.size(); ++cut) {  // any prefix: the whole frames in it, no more
    std::string_view rest(wire.data(), cut);
    size_t got = 0;
    while (auto f = decode_mux_frame(rest)) {
      EXPECT_EQ(f->type, frames[got].type);
      EXPECT_EQ(f->numbers, frames[got].numbers);
      EXPECT_EQ(f->strings, frames[got].strings);
      ++got;
    }
    size_t fit = 0, used = 0;
    for (const auto& f : frames) {
      used += encode_mux_frame(f).size();
      if (used <= cut) ++fit;
    }
    EXPECT_EQ(got, fit) << cut;
  }
}

TEST(MuxFrame, MalformedFramesAreErrors) {
  auto error = [](std::string bytes) {
    return error_of([&] {
      std::string_view v(bytes);
      decode_mux_frame(v);
    });
  };
  EXPECT_NE(error(std::string("\0\0\0\0", 4)).find("frame of 0 bytes"), std::string::npos);
  EXPECT_NE(error(std::string("\x10\0\0\0", 4)).find("frame of"), std::string::npos);
  EXPECT_NE(error(std::string("\0\0\0\1Z", 5)).find("unknown frame type 90"), std::string::npos);
  EXPECT_NE(error(std::string("\0\0\0\2E\1", 6)).find("too short"), std::string::npos);
  EXPECT_NE(error(std::string("\0\0\0\6E\0\0\0\1!", 10)).find("after the last field"),
            std::string::npos);
  EXPECT_NE(error(std::string("\0\0\0\x0aW\0\0\0\1\0\0\0\x09x", 15)).find("beyond its frame"),
            std::string::npos);
  EXPECT_THROW(encode_mux_frame({'W', {}, {}}), std::logic_error);
  // One the other side would refuse is not made (its length would wrap past 4 GiB, too).
  EXPECT_NE(error_of([] {
              encode_mux_frame({'W', {1}, {std::string(64 << 20, 'x')}});
            }).find("frame of 67108873 bytes"),
            std::string::npos);
}

TEST(MuxKey, HostsAndSettingsMakeTheKey) {
  std::vector<SshEndpoint> hosts = {{"n0", "", std::nullopt, "", ""}, {"n1", "u", 2222, "", ""}};
  SshSettings s;
  std::string key = mux_key(hosts, s);
  EXPECT_EQ(mux_key(hosts, s), key);
  hosts[1].port = 22;
  EXPECT_NE(mux_key(hosts, s), key);
  hosts[1].port = 2222;
  s.ssh_config = "/etc/other";
  EXPECT_NE(mux_key(hosts, s), key);
  s.ssh_config.clear();
  s.fanout = 3;  // how many at a time does not change the connections
  EXPECT_EQ(mux_key(hosts, s), key);
}

TEST(MuxSocketPath, APrivateDirectoryOfThisUser) {
  test::TempDir tmp;
  std::string runtime = tmp.path() + "/run";
  fs::create_directory(runtime);
  ScopedEnv env("XDG_RUNTIME_DIR", runtime);
  std::string path = mux_socket_path("k");
  EXPECT_EQ(fs::path(path).parent_path(), runtime + "/msrun-ssh");
  EXPECT_EQ(path, mux_socket_path("k"));
  EXPECT_NE(path, mux_socket_path("other"));
  struct stat st {};
  ASSERT_EQ(::stat((runtime + "/msrun-ssh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ::chmod((runtime + "/msrun-ssh").c_str(), 0755);  // others may enter: refused
  EXPECT_NE(error_of([] { mux_socket_path("k"); }).find("only this user can enter"),
            std::string::npos);
}

// The keeper binds its socket under a temporary name, the path and "." and its pid: a runtime
// directory whose path leaves room for the socket's name but not for that one's is refused here
// (the command warns and keeps nothing) instead of mux_listen throwing after a sync went well.
TEST(MuxSocketPath, RoomIsLeftForTheTemporaryNameTheKeeperBindsFirst) {
  test::TempDir tmp;
  std::string base = tmp.path() + "/";
  // "/msrun-ssh/keep-" + 16 hex + ".sock" is 37 bytes; sun_path holds 107 and a NUL.
  size_t room = sizeof(sockaddr_un::sun_path) - 1 - 37 - base.size();
  std::string runtime = base + std::string(room - 3, 'r');  // fits with ".12", not with a pid
  fs::create_directory(runtime);
  ScopedEnv env("XDG_RUNTIME_DIR", runtime);
  EXPECT_NE(error_of([] { mux_socket_path("k"); }).find("socket path too long"), std::string::npos);
  // mux_listen says so by its status.
  std::string path = runtime + "/msrun-ssh/keep-0123456789abcdef.sock";
  EXPECT_EQ(mux_listen(path), -1);
  EXPECT_EQ(errno, ENAMETOOLONG);
  // Room for Linux's largest pid (7 digits) is enough.
  std::string roomy = base + std::string(room - 8, 's');
  fs::create_directory(roomy);
  ScopedEnv env2("XDG_RUNTIME_DIR", roomy);
  EXPECT_EQ(error_of([] { mux_socket_path("k"); }), "no error");
}

// ---- a keeper and its commands ----

class Keeper : public ::testing::Test {
 protected:
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  // A keeper of `hosts` local hosts in a child process; `blocked`: signals the child blocks as well
  // (a launcher that reads its signals from a signalfd has them blocked when it forks the keeper).
  void start(double persist_s, MuxAhead ahead = {}, size_t hosts = 2,
             std::initializer_list<int> blocked = {}) {
    path_ = tmp_.path() + "/k.sock";
    int fd = mux_listen(path_);
    ASSERT_GE(fd, 0);
    // as keep_connections forks it: a SIGTERM, SIGINT or SIGHUP before serve_mux's signalfd is
    // held for it
    sigset_t ends, before;
    sigemptyset(&ends);
    sigaddset(&ends, SIGTERM);
    sigaddset(&ends, SIGINT);
    sigaddset(&ends, SIGHUP);
    sigprocmask(SIG_BLOCK, &ends, &before);
    pid_ = ::fork();
    if (pid_ != 0) sigprocmask(SIG_SETMASK, &before, nullptr);
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      sigset_t set;
      sigemptyset(&set);
      for (int b : blocked) sigaddset(&set, b);
      sigprocmask(SIG_BLOCK, &set, nullptr);
      {
        ProcessTransport t;
        serve_mux(t, fd, path_, "key", hosts, persist_s, std::move(ahead));
        t.disconnect_all();
      }
      ::_exit(0);
    }
    ::close(fd);
  }

  std::unique_ptr<MuxClient> attach(size_t hosts = 2, const std::string& key = "key") {
    return MuxClient::attach(path_, key, hosts, 30);
  }

  // Whether the keeper ended within `seconds` (it is reaped then).
  bool keeper_ends_within(double seconds) {
    for (int i = 0; i < seconds * 50; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  struct Seen {
    std::string out, err, lost;
    int status = -1;
    bool closed = false;
  };

  // Polls `c` until `done` or `seconds` pass; what each channel saw goes to seen_.
  bool poll_until(MuxClient& c, const std::function<bool()>& done, double seconds = 10) {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!done()) {
      if (std::chrono::steady_clock::now() > end) return false;
      c.poll(50, [this](const TransportEvent& e) {
        using K = TransportEvent::Kind;
        Seen& s = seen_[e.channel];
        if (e.kind == K::kData) (e.is_stderr ? s.err : s.out) += e.data;
        if (e.kind == K::kExit) s.status = e.status;
        if (e.kind == K::kClosed || e.kind == K::kOpenFailed) s.closed = true;
        if (e.kind == K::kHostLost) seen_[-1].lost += std::string(e.data) + "\n";
      });
    }
    return true;
  }

  test::TempDir tmp_;
  std::string path_;
  pid_t pid_ = -1;
  std::map<ChannelId, Seen> seen_;
};

TEST_F(Keeper, CommandsRunThroughItWithTheirStdinOutputAndStatus) {
  start(30);
  auto c = attach();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->keeper_pid(), pid_);
  ChannelId a = c->exec(1, "read x; echo got $x; echo oops >&2; exit 3");
  ChannelId b = c->exec(0, "wc -c");
  c->write(a, "hi\n");
  std::string big(3 << 20, 'x');  // more than one frame's worth at a time: handed over in full
  c->write(b, big);
  c->send_eof(b);
  ASSERT_TRUE(poll_until(*c, [&] { return seen_[a].closed && seen_[b].closed; }));
  EXPECT_EQ(seen_[a].out, "got hi\n");
  EXPECT_EQ(seen_[a].err, "oops\n");
  EXPECT_EQ(seen_[a].status, 3);
  EXPECT_EQ(seen_[b].out, std::to_string(big.size()) + "\n");
  EXPECT_EQ(seen_[b].status, 0);
  EXPECT_EQ(c->unsent(b), 0u);
}

// A write of more than a frame may hold (64 MiB: a sync's request for the hashes of some 300,000
// files) goes in several frames: the keeper refused the one frame and ended every channel.
TEST_F(Keeper, AWriteOfMoreThanAFrameHoldsGoesThroughWhole) {
  start(30);
  auto c = attach();
  ASSERT_TRUE(c);
  ChannelId ch = c->exec(0, "wc -c");
  std::string big((size_t{64} << 20) + 1, 'z');
  c->write(ch, big);
  c->send_eof(ch);
  ASSERT_TRUE(poll_until(
      *c, [&] { return seen_[ch].closed; }, 60));
  EXPECT_EQ(seen_[ch].out, std::to_string(big.size()) + "\n");
  EXPECT_EQ(seen_[ch].status, 0);
  EXPECT_EQ(seen_[-1].lost, "");
}

TEST_F(Keeper, WhatItHoldsIsAcknowledgedAsHandedOver) {
  start(30);
  auto c = attach();
  ASSERT_TRUE(c);
  ChannelId ch = c->exec(0, "sleep 1; cat >/dev/null");
  c->write(ch, std::string(1 << 20, 'y'));
  EXPECT_EQ(c->unsent(ch), size_t{1} << 20);  // nothing acknowledged yet
  ASSERT_TRUE(poll_until(*c, [&] { return c->unsent(ch) == 0; }));
  c->send_eof(ch);
  ASSERT_TRUE(poll_until(*c, [&] { return seen_[ch].closed; }));
  EXPECT_EQ(seen_[ch].status, 0);
}

TEST_F(Keeper, OneCommandAtATimeAndOnlyForItsKey) {
  start(30);
  auto first = attach();
  ASSERT_TRUE(first);
  EXPECT_FALSE(attach());                  // busy
  first.reset();                           // it left
  EXPECT_FALSE(attach(2, "another key"));  // other hosts or settings
  EXPECT_FALSE(attach(3));                 // another number of hosts
  auto again = attach();
  ASSERT_TRUE(again);
  seen_.clear();
  ChannelId ch = again->exec(0, "echo still here");
  ASSERT_TRUE(poll_until(*again, [&] { return seen_[ch].closed; }));
  EXPECT_EQ(seen_[ch].out, "still here\n");
}

TEST_F(Keeper, WhatACommandLeftRunningIsKilledWhenItLeaves) {
  start(30);
  auto c = attach();
  ASSERT_TRUE(c);
  std::string pid_file = tmp_.path() + "/pid";
  ChannelId ch = c->exec(0, "echo $$ >" + pid_file + ".tmp && mv " + pid_file + ".tmp " + pid_file +
                                " && exec sleep 60");
  ASSERT_TRUE(poll_until(*c, [&] { return fs::exists(pid_file); }));
  pid_t sleeper = std::stoi(test::slurp(pid_file));
  ASSERT_EQ(::kill(sleeper, 0), 0);
  (void)ch;
  c.reset();  // as a command killed with SIGKILL: its socket closes
  bool gone = false;
  for (int i = 0; i < 250 && !gone; ++i) {
    gone = ::kill(sleeper, 0) != 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "process " << sleeper << " still runs";
  EXPECT_TRUE(attach());  // and the keeper goes on
}

TEST_F(Keeper, ItEndsAfterItsIdleTimeAndRemovesItsSocket) {
  start(0.5);
  {
    auto c = attach();
    ASSERT_TRUE(c);
    // attach() made the idle time 30 s; a command asking for 0.5 s makes it 0.5 s again.
  }
  auto c = MuxClient::attach(path_, "key", 2, 0.5);
  ASSERT_TRUE(c);
  c.reset();
  EXPECT_TRUE(keeper_ends_within(5));
  EXPECT_FALSE(fs::exists(path_));
}

TEST_F(Keeper, SigtermEndsIt) {
  start(30);
  ASSERT_TRUE(fs::exists(path_));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::kill(pid_, SIGTERM);
  EXPECT_TRUE(keeper_ends_within(5));
  EXPECT_FALSE(fs::exists(path_));
}

TEST_F(Keeper, SigtermAndSigintEndItWhenTheLauncherThatForkedItHadThemBlocked) {
  for (int sig : {SIGTERM, SIGINT}) {
    start(30, {}, 2, {SIGINT, SIGTERM, SIGHUP});
    ASSERT_TRUE(fs::exists(path_));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ::kill(pid_, sig);
    EXPECT_TRUE(keeper_ends_within(5)) << strsignal(sig);
    EXPECT_FALSE(fs::exists(path_));
  }
}

// keep_connections' own fork: a SIGTERM or SIGINT at the keeper as soon as the command names it
// (before the keeper could have made its signalfd) ends it as one sent later does, the socket
// removed and the keeper's exit 0. The command's process runs with neither signal blocked, as
// `sync --persist` does. Each round runs in a subreaper of its own, which reaps the keeper.
TEST(KeeperFork, ASignalAsSoonAsTheKeeperIsNamedEndsItCleanly) {
  test::TempDir tmp;
  for (int round = 0; round < 40; ++round) {
    int sig = round % 2 ? SIGINT : SIGTERM;
    std::string path = tmp.path() + "/k" + std::to_string(round) + ".sock";
    pid_t harness = ::fork();
    ASSERT_GE(harness, 0);
    if (harness == 0) {
      ::alarm(20);
      ::prctl(PR_SET_CHILD_SUBREAPER, 1);
      int p[2];
      if (::pipe(p) != 0) ::_exit(10);
      pid_t launcher = ::fork();
      if (launcher == 0) {
        ::dup2(p[1], 2);
        ::close(p[0]);
        ::close(p[1]);
        ProcessTransport t;
        keep_connections(t, path, "key", 2, 5, {}, 0);  // short: a failed round leaves no keeper
        ::_exit(11);                                    // no keeper was made
      }
      ::close(p[1]);
      std::string err;
      char buf[256];
      pid_t keeper = -1;
      for (ssize_t n; keeper < 0 && (n = ::read(p[0], buf, sizeof buf)) > 0;) {
        err.append(buf, static_cast<size_t>(n));
        size_t at = err.find("by process ");
        if (at != std::string::npos && err.find(' ', at + 11) != std::string::npos) {
          keeper = static_cast<pid_t>(std::atoi(err.c_str() + at + 11));
          ::kill(keeper, sig);
        }
      }
      if (keeper <= 0) ::_exit(12);
      int status = 0;
      ::waitpid(launcher, nullptr, 0);  // then the keeper is this process's to reap
      if (::waitpid(keeper, &status, 0) != keeper) ::_exit(13);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ::_exit(14);
      ::_exit(fs::exists(path) ? 15 : 0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(harness, &status, 0), harness);
    ASSERT_TRUE(WIFEXITED(status)) << "round " << round << ": " << strsignal(WTERMSIG(status));
    // 14: the keeper died of the signal (or ended badly); 15: it left its socket
    ASSERT_EQ(WEXITSTATUS(status), 0) << "round " << round << " (" << strsignal(sig) << ")";
  }
}

// A caller that waits for the end of a pipe it left open to the command (a CI runner, make, a
// subprocess without close_fds) waits for the command, not for the keeper's --persist time.
TEST(KeeperFork, TheKeeperHoldsNoneOfTheDescriptorsItsCommandWasStartedWith) {
  test::TempDir tmp;
  std::string path = tmp.path() + "/k.sock";
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    ::close(p[0]);
    note_inherited_fds();  // p[1]: what the command's caller left open
    ProcessTransport t;
    keep_connections(t, path, "key", 2, 30, {}, 0);
    ::_exit(0);
  }
  ::close(p[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(launcher, &status, 0), launcher);
  pollfd end{p[0], POLLIN, 0};
  bool eof = ::poll(&end, 1, 5000) == 1;
  char c = 0;
  if (eof) eof = ::read(p[0], &c, 1) == 0;
  ::close(p[0]);
  auto kept = MuxClient::attach(path, "key", 2, 30);
  ASSERT_TRUE(kept);
  pid_t keeper = kept->keeper_pid();
  kept.reset();
  ::kill(keeper, SIGTERM);
  EXPECT_TRUE(eof) << "the keeper holds the caller's pipe";
  for (int i = 0; i < 250 && ::kill(keeper, 0) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

TEST_F(Keeper, ALostHostEndsItOnceItsCommandLeftAndTheNextCommandConnectsAnew) {
  start(30);
  auto c = attach();
  ASSERT_TRUE(c);
  c->drop_host(1);
  c.reset();
  EXPECT_TRUE(keeper_ends_within(5));
  EXPECT_FALSE(attach());
}

TEST_F(Keeper, ACommandWhoseKeeperDiesSeesItsHostsLost) {
  start(30);
  auto c = attach();
  ASSERT_TRUE(c);
  ChannelId ch = c->exec(1, "sleep 30");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::kill(pid_, SIGKILL);
  ASSERT_TRUE(poll_until(*c, [&] { return seen_[ch].closed; }));
  EXPECT_NE(
      seen_[-1].lost.find("the connection keeper (process " + std::to_string(pid_) + ") ended"),
      std::string::npos);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

// A command started ahead (it does nothing before its stdin's first line) is handed to the
// command that asks for it, with what it printed meanwhile; after that command left, it is
// started again. One that failed is not.
TEST_F(Keeper, CommandsStartedAheadAreHandedOverAndStartedAgain) {
  std::string ran = tmp_.path() + "/ran";
  std::string cmd = "echo ahead >>" + ran + "; echo early; read x; echo got $x";
  MuxAhead ahead;
  ahead.may_start = [](const std::string& c) { return c.find("echo ahead") != std::string::npos; };
  ahead.now = {{0, cmd}};
  start(30, ahead);
  auto lines = [&] { return lines_in(ran); };
  auto wait_for = [&](long n) {
    for (int i = 0; i < 250 && lines() < n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  wait_for(1);
  ASSERT_EQ(lines(), 1);  // started before anyone asked
  auto c = attach();
  ASSERT_TRUE(c);
  ChannelId ch = c->exec(0, cmd);
  c->write(ch, "T\n");
  ASSERT_TRUE(poll_until(*c, [&] { return seen_[ch].closed; }));
  EXPECT_EQ(seen_[ch].out, "early\ngot T\n");
  EXPECT_EQ(seen_[ch].status, 0);
  EXPECT_EQ(lines(), 1);              // the one started ahead, not another
  ChannelId other = c->exec(1, cmd);  // not started ahead on host 1: started now
  c->write(other, "U\n");
  ASSERT_TRUE(poll_until(*c, [&] { return seen_[other].closed; }));
  EXPECT_EQ(seen_[other].out, "early\ngot U\n");
  EXPECT_EQ(lines(), 2);
  c.reset();
  // Both ended well: started again on both hosts once the command left.
  wait_for(4);
  EXPECT_EQ(lines(), 4);
  auto next = attach();
  ASSERT_TRUE(next);
  seen_.clear();                                        // its channel numbers start again
  ChannelId failing = next->exec(0, cmd + "; exit 5");  // another text: started now
  next->write(failing, "V\n");
  ASSERT_TRUE(poll_until(*next, [&] { return seen_[failing].closed; }));
  EXPECT_EQ(seen_[failing].status, 5);
  next.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(lines(), 5);  // not started again: it failed
}

}  // namespace
}  // namespace msrun_ssh

namespace msrun_ssh {
namespace {

// One command waits per host at most: a command started ahead for another text replaces it (the
// one replaced is ended).
TEST_F(Keeper, OneCommandWaitsAheadPerHost) {
  std::string log = tmp_.path() + "/log";
  auto cmd = [&](const std::string& name) { return "echo " + name + " $$ >>" + log + "; read x"; };
  MuxAhead ahead;
  ahead.may_start = [](const std::string& c) { return c.find(">>") != std::string::npos; };
  ahead.now = {{0, cmd("A")}};
  start(30, ahead);
  for (int i = 0; i < 250 && test::count(test::slurp(log), "A ") < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto c = attach();
  ASSERT_TRUE(c);
  ChannelId ch = c->exec(0, cmd("B"));
  c->write(ch, "go\n");
  ASSERT_TRUE(poll_until(*c, [&] { return seen_[ch].closed; }));
  EXPECT_EQ(seen_[ch].status, 0);
  c.reset();  // B ended well: B waits ahead now, and A is ended
  for (int i = 0; i < 250 && test::count(test::slurp(log), "B ") < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::string text = test::slurp(log);
  ASSERT_EQ(test::count(text, "A "), 1u) << text;
  ASSERT_EQ(test::count(text, "B "), 2u) << text;
  pid_t a = std::stoi(text.substr(2));
  bool gone = false;
  for (int i = 0; i < 250 && !gone; ++i) {
    gone = ::kill(a, 0) != 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "A (process " << a << ") still waits";
}

}  // namespace
}  // namespace msrun_ssh
