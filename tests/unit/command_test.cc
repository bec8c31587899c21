// The remote stanza (src/command/command.cc). Quoting is checked the only way that counts: the
// generated command runs through real shells (dash as sh, and bash) on this machine, and a helper
// at the end of the exec chain records the argv, environment and working directory it got, which
// must equal the Process byte for byte, with nothing executed on the way. The watchdog and `stop`
// also run here against marked `sleep` processes. Every wait is bounded; leftovers die in TearDown.
#include "msrun_ssh/command.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "msrun_ssh/agent.h"
#include "msrun_ssh/watch.h"
#include "remote/programs.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Words = std::vector<std::string>;
using ::testing::HasSubstr;

// The environment the local "login shell" starts with.
const Words kShellEnv = {"PATH=/usr/bin:/bin", "LC_ALL=C.UTF-8"};
// Variables a shell may add on its own on the way to the helper.
const std::set<std::string> kShellVars = {"PATH", "LC_ALL", "PWD", "OLDPWD", "SHLVL", "_"};

using test::slurp;

Words split_nul(const std::string& data) {
  Words out;
  size_t pos = 0;
  while (pos < data.size()) {
    size_t end = data.find('\0', pos);
    if (end == std::string::npos) end = data.size();
    out.push_back(data.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

std::string random_job_id() {
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof buf, "unit-%08x%04x", rd(), rd() & 0xffff);
  return buf;
}

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Child {
  pid_t pid = -1;
  int out = -1;  // read end of the child's stdout + stderr
  int in = -1;   // write end of the child's stdin; -1: stdin is /dev/null
};

// A process started by a test, with its output. Everything is bounded by deadlines.
class CommandTest : public test::TempDirTest {
 protected:
  void SetUp() override {
    std::signal(SIGPIPE, SIG_IGN);
    // Orphans of the job (setsid'd grandchildren, detached processes) come back to this process,
    // so that tests can reap them and nothing is left behind.
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    job_ = random_job_id();
  }

  void TearDown() override {
    for (int fd : fds_) close(fd);
    for (const auto& job : jobs_) kill_marked(job);
    kill_marked(job_);
    for (pid_t pid : children_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    // Reap orphans handed to us as subreaper (bounded).
    auto t0 = Clock::now();
    while (since(t0) < 2) {
      pid_t r = reap_any();
      if (r > 0) continue;
      if (r < 0 || marked(job_).empty()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // Reaps a child that has ended, if any (one of ours, or an orphan handed to us as subreaper).
  // A pid reaped here is not ours to signal any more: the system may give it to any process.
  pid_t reap_any() {
    pid_t r = waitpid(-1, nullptr, WNOHANG);
    if (r > 0) std::erase(children_, r);
    return r;
  }

  // Pids whose environment carries MSRUN_SSH_JOB=<job> (what the shell code looks for).
  static std::vector<pid_t> marked(const std::string& job) {
    std::vector<pid_t> out;
    std::string want = std::string(kJobMarker) + "=" + job;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      for (const auto& kv : split_nul(slurp(e.path() / "environ")))
        if (kv == want) out.push_back(std::stoi(name));
    }
    return out;
  }

  static void kill_marked(const std::string& job) {
    for (pid_t p : marked(job)) kill(p, SIGKILL);
  }

  Child spawn(const Words& argv, const Words& env, const std::string& cwd, bool stdin_pipe) {
    std::vector<char*> av, ev;
    for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
    av.push_back(nullptr);
    for (const auto& e : env) ev.push_back(const_cast<char*>(e.c_str()));
    ev.push_back(nullptr);
    int out[2], in[2] = {-1, -1};
    if (pipe2(out, O_CLOEXEC) != 0) ADD_FAILURE() << "pipe2";
    if (stdin_pipe && pipe2(in, O_CLOEXEC) != 0) ADD_FAILURE() << "pipe2";
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pid_t pid = fork();
    if (pid == 0) {
      if (chdir(cwd.c_str()) != 0) _exit(126);
      dup2(stdin_pipe ? in[0] : null, 0);
      dup2(out[1], 1);
      dup2(out[1], 2);
      execve(av[0], av.data(), ev.data());
      _exit(127);
    }
    close(null);
    close(out[1]);
    if (stdin_pipe) close(in[0]);
    children_.push_back(pid);
    fds_.push_back(out[0]);
    if (stdin_pipe) fds_.push_back(in[1]);
    return {pid, out[0], stdin_pipe ? in[1] : -1};
  }

  // Waits for `pid` at most `timeout_s`; returns its wait status, or nothing on timeout.
  std::optional<int> wait_for(pid_t pid, double timeout_s) {
    auto t0 = Clock::now();
    while (true) {
      int status = 0;
      pid_t r = waitpid(pid, &status, WNOHANG);
      if (r == pid) {
        std::erase(children_, pid);
        return status;
      }
      if (r < 0 || since(t0) > timeout_s) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  // Whether `pid` ends of `signal` within `timeout_s` (it is reaped then).
  ::testing::AssertionResult killed_by(pid_t pid, int signal, double timeout_s) {
    std::optional<int> status = wait_for(pid, timeout_s);
    if (!status) return ::testing::AssertionFailure() << pid << " still runs";
    if (!WIFSIGNALED(*status) || WTERMSIG(*status) != signal)
      return ::testing::AssertionFailure() << pid << " ended with wait status " << *status;
    return ::testing::AssertionSuccess();
  }

  // Reads from `fd` into `buf` until `done(buf)`, EOF or the deadline. Returns done(buf), also at
  // EOF, which `eof` (when given) then says.
  static bool read_until(int fd, std::string& buf, double timeout_s,
                         const std::function<bool(const std::string&)>& done, bool* eof = nullptr) {
    auto t0 = Clock::now();
    while (!done(buf)) {
      int left = static_cast<int>((timeout_s - since(t0)) * 1000);
      if (left <= 0) return false;
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, left) <= 0) continue;
      char chunk[65536];
      ssize_t n = read(fd, chunk, sizeof chunk);
      if (n <= 0) {
        if (eof != nullptr) *eof = true;
        return done(buf);
      }
      buf.append(chunk, static_cast<size_t>(n));
    }
    return true;
  }

  // Reads from `fd` into `buf` until EOF; false when the deadline comes first.
  static bool read_to_eof(int fd, std::string& buf, double timeout_s) {
    bool eof = false;
    return read_until(
        fd, buf, timeout_s, [&](const std::string&) { return eof; }, &eof);
  }

  struct Result {
    std::optional<int> status;
    std::string output;
  };

  // Runs `shell -c command` in `cwd` with stdin /dev/null; bounded.
  Result run_shell(const std::string& shell, const std::string& command, const std::string& cwd,
                   double timeout_s = 10) {
    Child c = spawn({shell, "-c", command}, kShellEnv, cwd, false);
    Result r;
    EXPECT_TRUE(read_to_eof(c.out, r.output, timeout_s)) << shell << ": no EOF in time";
    r.status = wait_for(c.pid, timeout_s);
    return r;
  }

  // Runs process command `command` the way the launch agent starts it (a P frame: no shell, no
  // env program), in `cwd` with stdin /dev/null unless the command reads the launcher's; bounded.
  // The status is a wait status, as run_shell's; the output is the process's stdout and stderr.
  // `wrap`: words in front of the agent's /bin/sh (a tracer).
  Result run_agent(const std::string& command, const std::string& cwd, double timeout_s = 10,
                   Words wrap = {}) {
    Result r;
    std::optional<ProcessLaunch> launch = process_launch_of(command);
    EXPECT_TRUE(launch) << "not a process command: " << command;
    if (!launch) return r;
    wrap.insert(wrap.end(), {"/bin/sh", "-c", agent_command(30)});
    Child c = spawn(wrap, kShellEnv, cwd, true);
    std::string in = std::string(agent_program()) +
                     agent_frame('P', 1, agent_launch_payload(*launch)) + agent_frame('E', 1);
    EXPECT_EQ(::write(c.in, in.data(), in.size()), static_cast<ssize_t>(in.size()));
    AgentReader reader;
    bool closed = false;
    std::string raw;
    auto t0 = Clock::now();
    while (!closed && since(t0) < timeout_s) {
      std::string chunk;
      read_until(c.out, chunk, 0.1, [](const std::string& b) { return !b.empty(); });
      reader.feed(
          chunk, [&](std::string_view noise) { r.output += noise; },
          [&](AgentFrame&& f) {
            if (f.op == 'o' || f.op == 'e') r.output += f.payload;
            int status = -1;
            std::string signal;
            if (f.op == 'x' && parse_agent_exit(f.payload, status, signal))
              r.status = signal.empty() ? status << 8 : status - 128;
            closed = closed || f.op == 'c';
          });
    }
    EXPECT_TRUE(closed) << "the agent's process did not end in time: " << r.output;
    close(c.in);
    std::erase(fds_, c.in);
    EXPECT_TRUE(wait_for(c.pid, timeout_s)) << "the agent did not end";
    return r;
  }

  // Runs `command` with `shell -c`, or through the launch agent when `shell` is "agent".
  Result run_in(const std::string& shell, const std::string& command, const std::string& cwd) {
    return shell == "agent" ? run_agent(command, cwd) : run_shell(shell, command, cwd);
  }

  // At least 400 processes on the machine: as many `sleep 30` as that takes (end_crowd ends them).
  std::vector<pid_t> crowd_of_400() {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator("/proc"))
      n += std::isdigit(static_cast<unsigned char>(e.path().filename().string()[0])) ? 1 : 0;
    std::vector<pid_t> crowd;
    for (; n < 400 && crowd.size() < 400; ++n)
      crowd.push_back(spawn({"/bin/sleep", "30"}, kShellEnv, dir_, false).pid);
    return crowd;
  }
  void end_crowd(const std::vector<pid_t>& crowd) {
    for (pid_t p : crowd) {
      ::kill(p, SIGKILL);
      wait_for(p, 5);
    }
  }

  // Runs `command` with /bin/sh under a stack limit of 1 MiB (ARG_MAX 256 KiB) and an environment
  // that leaves `left` bytes of it beside the command; expects it to exit 0 within 20 s and
  // returns its output.
  std::string run_with_little_arg_room(const std::string& command, size_t left) {
    constexpr size_t kArgMax = 256 * 1024, kPiece = 100 * 1024;
    Words env = kShellEnv;
    size_t used = command.size() + 200;  // the words around it, and the pointers
    for (const auto& e : env) used += e.size() + 1 + sizeof(char*);
    for (int i = 0; used + left < kArgMax; ++i) {
      size_t n = std::min(kPiece, kArgMax - left - used);
      env.push_back(fmt::format("FILL{}={}", i, std::string(n, 'x')));
      used += env.back().size() + 1 + sizeof(char*);
    }
    Child c = spawn({"/bin/sh", "-c", "ulimit -s 1024 && exec /bin/sh -c \"$0\"", command}, env,
                    dir_, false);
    std::string output;
    EXPECT_TRUE(read_to_eof(c.out, output, 20));
    EXPECT_EQ(wait_for(c.pid, 20), 0) << output;
    return output;
  }

  // Runs `stop` for job_ with a grace of `grace_s`, expects it to exit 0, and returns its output.
  std::string stop(double grace_s) {
    Result r = run_shell("/bin/sh", stop_command(job_, grace_s), dir_);
    EXPECT_EQ(r.status, 0);
    return r.output;
  }

  // Starts `env MSRUN_SSH_JOB=<job> ARGV...` and waits until ARGV[0] has been exec'd.
  pid_t start_marked(const std::string& job, const Words& argv, const std::string& program) {
    Words full{"/usr/bin/env", std::string(kJobMarker) + "=" + job};
    full.insert(full.end(), argv.begin(), argv.end());
    jobs_.insert(job);
    Child c = spawn(full, {"PATH=/usr/bin:/bin"}, dir_, false);
    wait_exec(c.pid, program);
    return c.pid;
  }

  // Waits until `pid` runs `program` (its argv[0]).
  static void wait_exec(pid_t pid, const std::string& program) {
    auto t0 = Clock::now();
    while (true) {
      Words cmdline = split_nul(slurp("/proc/" + std::to_string(pid) + "/cmdline"));
      if (!cmdline.empty() && cmdline[0] == program) return;
      if (since(t0) > 5) {
        ADD_FAILURE() << "process " << pid << " did not exec " << program;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  std::string job_;
  std::set<std::string> jobs_;
  std::vector<pid_t> children_;
  std::vector<int> fds_;
};

// ---- shell_quote / shell_join / exact strings
// ------------------------------------------------------

TEST(CommandQuote, ShellQuote) {
  const test::Case kCases[] = {
      {"", "''"},
      {"abc", "'abc'"},
      {"a b", "'a b'"},
      {"it's", "'it'\\''s'"},
      {"'", "''\\'''"},
      {"''", "''\\'''\\'''"},
      {"$(x) `y` \"z\" \\", "'$(x) `y` \"z\" \\'"},
      {"a\nb", "'a\nb'"},
  };
  for (const auto& c : kCases) EXPECT_EQ(shell_quote(c.input), c.expected) << c.input;
  EXPECT_EQ(shell_quote(std::string_view("a\0b", 3)), std::string("'a\0b'", 5));
}

TEST(CommandQuote, ShellJoin) {
  EXPECT_EQ(shell_join({}), "");
  EXPECT_EQ(shell_join({"a"}), "'a'");
  EXPECT_EQ(shell_join({"a", "", "b c", "d'e"}), "'a' '' 'b c' 'd'\\''e'");
}

TEST(CommandQuote, ProcessCommandExactly) {
  Process p;
  p.workdir = "/data/my job";
  p.env = {{"A", "1"}, {"B", "it's"}};
  p.argv = {"python3", "train.py", "--lr", "0.1"};
  EXPECT_EQ(process_command(p, "20261129-154501-3fa9c2"),
            "cd -- '/data/my job' && exec 'env' '--' 'MSRUN_SSH_JOB=20261129-154501-3fa9c2' 'A=1' "
            "'B=it'\\''s' 'python3' 'train.py' '--lr' '0.1' < /dev/null");
  EXPECT_EQ(process_command(p, "j", /*stdin_from_launcher=*/true),
            "cd -- '/data/my job' && exec 'env' '--' 'MSRUN_SSH_JOB=j' 'A=1' 'B=it'\\''s' "
            "'python3' 'train.py' '--lr' '0.1'");
}

TEST(CommandQuote, OnlyTailedWorkersReadTheLaunchersStdin) {
  Options options;
  Process worker;
  worker.role = Role::kWorker;
  worker.rank = 3;
  Process sched;
  sched.role = Role::kScheduler;
  sched.rank = 3;
  EXPECT_FALSE(stdin_from_launcher(options, worker));  // no --tail_worker_log: nobody
  options.tail_worker_log = {1, 3};
  EXPECT_TRUE(stdin_from_launcher(options, worker));
  EXPECT_FALSE(stdin_from_launcher(options, sched));
  options.tail_worker_log = {1};
  EXPECT_FALSE(stdin_from_launcher(options, worker));
}

TEST(CommandQuote, ProgramWithAnEqualsSignGoesThroughExec) {
  Process p;
  p.workdir = "/w";
  p.argv = {"./a=b", "x"};
  EXPECT_EQ(process_command(p, "j"),
            "cd -- '/w' && exec 'env' '--' 'MSRUN_SSH_JOB=j' 'sh' '-c' 'exec \"$@\"' 'sh' './a=b' "
            "'x' < /dev/null");
  p.argv = {"python3", "a=b.py"};  // only the program matters
  EXPECT_EQ(process_command(p, "j"),
            "cd -- '/w' && exec 'env' '--' 'MSRUN_SSH_JOB=j' 'python3' 'a=b.py' < /dev/null");
}

TEST(CommandQuote, StackDumpsStartTheProgramThroughStackSite) {
  Process p;
  p.workdir = "/w";
  p.argv = {"python3", "x.py"};
  p.stack_dumps = true;
  // An attached run's watchdog has made the stack-dump directory: stack_site.py's text is not
  // sent again with every process.
  EXPECT_EQ(process_command(p, "j"),
            "cd -- '/w' && exec 'env' '--' 'MSRUN_SSH_JOB=j' " +
                shell_join({"sh", "-c", stack_site_script(), "msrun-ssh-stacks", ""}) +
                " 'python3' 'x.py' < /dev/null");
  // A detached process (no watchdog) and one with a TMPDIR of its own make it themselves.
  std::string with_text = shell_join({"msrun-ssh-stacks", std::string(remote::kStackSitePy)});
  EXPECT_NE(detached_command(p, "j", "w.log").find(" 'env' '--' 'sh' '-c' "), std::string::npos);
  EXPECT_NE(detached_command(p, "j", "w.log").find(with_text), std::string::npos);
  p.env = {{"TMPDIR", "/scratch"}};
  EXPECT_NE(process_command(p, "j").find(with_text), std::string::npos);
}

TEST(CommandQuote, ProcessCommandsAreTakenApartForTheAgent) {
  Process p;
  p.workdir = "/data/my 'job'";
  p.env = {{"A", "1"}, {"B", "x=y z"}};
  p.argv = {"python3", "train.py", "it's", ""};
  ProcessLaunch want{
      .workdir = p.workdir, .env = {"MSRUN_SSH_JOB=j", "A=1", "B=x=y z"}, .argv = p.argv};
  EXPECT_EQ(process_launch_of(process_command(p, "j")), want);
  want.stdin_null = false;
  EXPECT_EQ(process_launch_of(process_command(p, "j", true)), want);
  p.stack_dumps = true;
  want.stack_site = true;
  EXPECT_EQ(process_launch_of(process_command(p, "j", true)), want);
  p.argv = {"./a=b", "x"};  // through `sh -c 'exec "$@"'` in the shell's command
  want.argv = p.argv;
  EXPECT_EQ(process_launch_of(process_command(p, "j", true)), want);
  // Defaults go through env_defaults.sh, behind stack_site.sh: its words are the program's.
  p.env_defaults = {{"OMP_NUM_THREADS", "1"}};
  want.argv = {"sh",
               "-c",
               std::string(remote::kEnvDefaultsSh),
               "msrun-ssh-defaults",
               "OMP_NUM_THREADS=1",
               "--",
               "./a=b",
               "x"};
  EXPECT_EQ(process_launch_of(process_command(p, "j", true)), want);
  p.env_defaults.clear();
  // With a TMPDIR of its own the process makes its own stack directory: the step's text is an
  // argument of a plain exec of sh then.
  p.env = {{"TMPDIR", "/scratch"}};
  auto own = process_launch_of(process_command(p, "j"));
  ASSERT_TRUE(own);
  EXPECT_FALSE(own->stack_site);
  EXPECT_EQ(own->argv[0], "sh");
  // Anything else is no process command: the agent runs it with /bin/sh -c.
  for (const std::string& other :
       {process_command(p, "j") + " ", watchdog_command("j", 10, 1, "/w"), std::string("true"),
        std::string("cd -- '/w' && exec 'env' '--' 'A=1' 'true'"),       // no job marker
        std::string("cd -- '/w' && exec 'env' '--' 'MSRUN_SSH_JOB=j'"),  // no program
        std::string("cd -- '/w' && exec 'env' '--' 'MSRUN_SSH_JOB=j' 'x'; rm -rf ~"),
        std::string("cd -- '/w' && exec 'env' '--' 'MSRUN_SSH_JOB=j' 'x'  'y'"),
        std::string("cd -- '/w' && exec 'env' '--' 'MSRUN_SSH_JOB=j' 'sh' '-c' 'exec \"$@\"' "
                    "'sh' 'x'")})
    EXPECT_FALSE(process_launch_of(other)) << other;
}

TEST(CommandQuote, DetachedCommandExactly) {
  Process p;
  p.workdir = "/w";
  p.env = {{"A", "1"}};
  p.argv = {"sleep", "1"};
  EXPECT_EQ(detached_command(p, "j1", "logs/worker_0.log"),
            "cd -- '/w' && umask 077 && mkdir -p -- 'logs/' 'logs/.msrun-ssh/j1' && true >> "
            "'logs/worker_0.log' && { setsid " +
                shell_join({"sh", "-c", std::string(remote::kDetachedSh), "msrun-ssh-job",
                            "logs/.msrun-ssh/j1/0"}) +
                " 'env' '--' 'A=1' 'sleep' '1' < /dev/null > "
                "'logs/worker_0.log' 2>&1 & } && echo \"msrun-ssh: started $!\"");
  EXPECT_NE(detached_command(p, "j1", "w.log").find("mkdir -p -- '.' './.msrun-ssh/j1' &&"),
            std::string::npos);
  p.role = Role::kScheduler;
  EXPECT_NE(detached_command(p, "j1", "w.log").find("'msrun-ssh-job' './.msrun-ssh/j1/sched' "),
            std::string::npos);
}

TEST(CommandQuote, WatchdogAndStopArguments) {
  std::string w = watchdog_command("j-1", 1.0, 0.5);
  EXPECT_EQ(w.rfind("exec sh -c '", 0), 0u);
  // Timeout in seconds; grace in 0.2 s steps; the lost-launcher grace is capped at timeout / 4.
  EXPECT_TRUE(w.ends_with("' msrun-ssh-watchdog 'j-1' 1.000 3 2 ''")) << w;
  std::string w2 = watchdog_command("j", 10, 0, "/home/u/my job");
  EXPECT_TRUE(w2.ends_with("' msrun-ssh-watchdog 'j' 10.000 0 0 '/home/u/my job'")) << w2;
  std::string w3 = watchdog_command("j", 0.5, 0.01);
  EXPECT_TRUE(w3.ends_with("' msrun-ssh-watchdog 'j' 0.500 1 1 ''")) << w3;
  std::string s = stop_command("j-1", 5);
  EXPECT_EQ(s.rfind("exec sh -c '", 0), 0u);
  EXPECT_TRUE(s.ends_with("' msrun-ssh-stop 'j-1' 25 1")) << s;
}

// The protocol's words, as the watchdog script spells them (its tests below run it).
TEST(WatchdogProtocol, LinesAndBytes) {
  EXPECT_EQ(watchdog_ready_line(4242, "node7"), "msrun-ssh-watchdog: ready 4242 node7");
  EXPECT_EQ(kWatchdogLost, "msrun-ssh-watchdog: launcher lost");
  EXPECT_EQ(kWatchdogDone, "msrun-ssh-watchdog: done");
  EXPECT_EQ(std::string({kBeat, kQuit, kTeardown, kKillNow, kStacksThenTeardown}), "hqkKa");
}

TEST(WatchdogProtocol, TheSweepsKilledLineIsReadBack) {
  auto p = parse_swept_line("killed 77 SIGTERM sleep 30 ");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->pid, 77);
  EXPECT_EQ(p->signal, "SIGTERM");
  EXPECT_EQ(p->argv, "sleep 30 ");
  EXPECT_EQ(describe_swept(*p), "77 SIGTERM sleep 30");
  auto bare = parse_swept_line("killed 5 SIGKILL");
  ASSERT_TRUE(bare);
  EXPECT_EQ(describe_swept(*bare), "5 SIGKILL");
  for (const char* other : {"killed", "killed x SIGTERM a ", "killed 7 TERM a ",
                            "killed -3 SIGTERM", "h", "Killed 7 SIGTERM a ", "killed 7"})
    EXPECT_FALSE(parse_swept_line(other)) << other;
}

TEST(WatchdogProtocol, ArgsRoundUpTheGraceAndCapTheLostGrace) {
  EXPECT_EQ(watchdog_args("j-1", 1.0, 0.5), (WatchdogArgs{"j-1", 1.0, 3, 2}));
  EXPECT_EQ(watchdog_args("j", 10, 0), (WatchdogArgs{"j", 10, 0, 0}));
  EXPECT_EQ(watchdog_args("j", 0, -1), (WatchdogArgs{"j", 0.001, 0, 0}));
  WatchdogArgs a = watchdog_args("j", 10, 5);
  EXPECT_EQ(a, (WatchdogArgs{"j", 10, 25, 13}));
  EXPECT_DOUBLE_EQ(a.grace_s(), 5);
  EXPECT_DOUBLE_EQ(a.lost_grace_s(), 2.6);
  EXPECT_EQ(watchdog_command("j", 10, 5), watchdog_command(a));
}

TEST(WatchdogProtocol, ArgsAreReadBackFromTheCommand) {
  for (const char* job : {"j-1", "", "it's", "''", "x'; touch pwned; '", "a b\nc 1 2 3"})
    for (double timeout : {0.0, 0.5, 10.0, 1234.567})
      for (double grace : {0.0, 0.01, 5.0})
        for (const char* workdir : {"", "/w", "/it's here", "/a ' b", "/x 1 2 3 'y'"}) {
          WatchdogArgs a = watchdog_args(job, timeout, grace);
          a.workdir = workdir;
          EXPECT_EQ(watchdog_args_of(watchdog_command(a)), a) << job << " " << workdir;
        }
}

TEST(WatchdogProtocol, OtherCommandsAreNoWatchdogs) {
  std::string w = watchdog_command("j", 10, 5);
  Process p;
  p.workdir = "/w";
  p.argv = {"msrun-ssh-watchdog", "'j'", "10.000", "25", "13"};
  for (const std::string& c : {process_command(p, "j"), detached_command(p, "j", "w.log"),
                               stop_command("j", 5), std::string(), w + " ", w + " 7", w.substr(1),
                               w.substr(0, w.rfind("'j'")) + "j 10.000 25 13 ''",
                               w.substr(0, w.rfind("'j'")) + "'j'\\'' 10.000 25 13 ''",
                               w.substr(0, w.rfind("'j'")) + "'j' 10.000 25 13",
                               w.substr(0, w.rfind("'j'")) + "'j' 10.000 25 13 '' ''",
                               w.substr(0, w.rfind("'j'")) + "'j' 10.000 25 '/w'"})
    EXPECT_EQ(watchdog_args_of(c), std::nullopt) << c.substr(c.size() > 40 ? c.size() - 40 : 0);
}

// The launch agent runs the sampler itself: its arguments are read back from the command.
TEST(SamplerProtocol, ArgsAreReadBackFromTheCommandAndOtherCommandsAreNoSamplers) {
  for (const char* job : {"j-1", "", "it's", "x'; touch pwned; '", "a b\nc 1 2"})
    for (double interval : {0.1, 1.0, 2.5})
      for (const char* ranks : {"", "sched,0,1", "7", "a 'b' c"})
        EXPECT_EQ(sampler_words_of(sampler_command(job, interval, ranks)),
                  std::string(job) + '\0' + fmt::format("{:g}", interval) + '\0' + ranks + '\0')
            << job << " " << ranks;
  std::string s = sampler_command("j", 1, "0,1");
  std::string head(sampler_command_head());
  for (const std::string& c :
       {std::string(), head, s + " ", s + " 'x'", s.substr(1), watchdog_command("j", 10, 5),
        head + "j 1 '0,1'", head + "'j' 1 0,1", head + "'j'  '0,1'", head + "'j' 1",
        head + std::string("'j\0' 1 '0'", 10), head + std::string("'j' 1 '0\0'", 10)})
    EXPECT_EQ(sampler_words_of(c), std::nullopt)
        << c.substr(head.size() < c.size() ? head.size() : 0);
  EXPECT_EQ(sampler_program().data(), remote::kSamplerPl.data());
}

class CommandSyntax : public CommandTest {};

// For `exec sh -c SCRIPT ARGS`: the same with `sh -n`, which parses SCRIPT without running it.
std::string parse_inner(const std::string& command) {
  std::string c = command;
  c.replace(0, 11, "exec sh -n -c ");
  return c;
}

TEST_F(CommandSyntax, GeneratedCommandsAreValidShell) {
  Process p;
  p.workdir = dir_;
  p.env = {{"A", "it's $(x)"}};
  p.argv = {"/bin/true", "'\"`;|&<>"};
  Words commands{process_command(p, job_), detached_command(p, job_, "a/b'c/w.log"),
                 watchdog_command(job_, 10, 5), watchdog_command("x'; touch pwned; '", 1, 1),
                 stop_command(job_, 5)};
  for (const auto& shell : {"/bin/sh", "/bin/bash"}) {
    for (const auto& c : commands) {
      Result outer = run_shell(shell, "set -n\n" + c, dir_);
      EXPECT_EQ(outer.status, 0) << shell << ": " << c << "\n" << outer.output;
      EXPECT_EQ(outer.output, "") << shell << ": " << c;
      if (c.rfind("exec sh -c ", 0) != 0) continue;
      Result inner = run_shell(shell, parse_inner(c), dir_);
      EXPECT_EQ(inner.status, 0) << shell << ": " << c << "\n" << inner.output;
      EXPECT_EQ(inner.output, "") << shell << ": " << c;
    }
  }
  EXPECT_FALSE(fs::exists(dir_ + "/pwned"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 0);
}

// ---- the programs run on remote hosts (src/remote/, embedded by cmake/embed.cmake) -----------

// What the build embeds of a file of src/remote/: every line but those whose first non-blank
// character is '#'.
std::string without_comment_lines(const std::string& text) {
  std::string out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    size_t first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line[first] == '#') continue;
    out += line + "\n";
  }
  return out;
}

TEST(RemotePrograms, EmbeddedAreTheFilesOfSrcRemoteWithoutCommentLines) {
  std::string dir = std::string(MSRUN_SSH_SOURCE_DIR) + "/src/remote/";
  std::set<std::string> on_disk, embedded;
  for (const auto& entry : fs::directory_iterator(dir))
    if (std::string name = entry.path().filename();
        name.ends_with(".sh") || name.ends_with(".py") || name.ends_with(".pl"))
      on_disk.insert(name);
  for (const auto& file : remote::kFiles) {
    embedded.insert(std::string(file.name));
    EXPECT_EQ(file.text, without_comment_lines(slurp(dir + std::string(file.name)))) << file.name;
  }
  EXPECT_EQ(embedded, on_disk);
}

TEST_F(CommandSyntax, EveryEmbeddedShellProgramParses) {
  int checked = 0;
  for (const auto& file : remote::kFiles) {
    if (!file.name.ends_with(".sh")) continue;
    Result r = run_shell("/bin/sh", "exec /bin/sh -n -c " + shell_quote(file.text), dir_);
    EXPECT_EQ(r.status, 0) << file.name << "\n" << r.output;
    EXPECT_EQ(r.output, "") << file.name;
    ++checked;
  }
  EXPECT_GT(checked, 0);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 0);
}

TEST_F(CommandSyntax, EveryEmbeddedPythonProgramCompiles) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  for (const auto& file : remote::kFiles) {
    if (!file.name.ends_with(".py")) continue;
    Result r =
        run_shell("/bin/sh",
                  "exec python3 -c 'import sys; compile(sys.argv[1], sys.argv[2], \"exec\")' " +
                      shell_quote(file.text) + " " + shell_quote(file.name),
                  dir_);
    EXPECT_EQ(r.status, 0) << file.name << "\n" << r.output;
    EXPECT_EQ(r.output, "") << file.name;
  }
}

// A host cut off while its agent's program was still on the wire: the loader does not wait for
// the rest as long as sshd keeps the dead connection, but ends after the idle limit (+1 s).
TEST_F(CommandSyntax, AnAgentWhoseProgramNeverComesEndsAfterItsIdleLimit) {
  if (test::shell_output("command -v perl").empty()) GTEST_SKIP() << "no perl on this machine";
  auto t0 = Clock::now();
  Child c = spawn({"/bin/sh", "-c", agent_command(0.5)}, kShellEnv, dir_, true);  // nothing sent
  std::optional<int> status = wait_for(c.pid, 10);
  ASSERT_TRUE(status) << "still waiting for its program";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
  EXPECT_LT(since(t0), 5);
}

// The launch agent loads no module on the machines whose constants it knows (agent.pl): on this
// machine those constants must be perl's own (Errno, Fcntl, Config's signal names).
TEST_F(CommandSyntax, TheAgentsBuiltInConstantsArePerlsOwn) {
  std::string text(remote::kAgentPl);
  size_t from = text.find("if (defined $SETSID_NR) {");
  size_t to = text.find("} else {", from);
  ASSERT_NE(from, std::string::npos);
  ASSERT_NE(to, std::string::npos);
  std::string fast = text.substr(from + 25, to - from - 25);
  std::string script =
      "my ($EAGAIN, $EINTR, $F_GETFL, $F_SETFL, $O_NONBLOCK, @SIG_NAME);" + fast +
      "require Config; require Errno; require Fcntl; Config->import; our %Config;"
      "my @own = (split ' ', $Config{sig_name})[0 .. $#SIG_NAME];"
      "print join(',', $EAGAIN, $EINTR, $F_GETFL, $F_SETFL, $O_NONBLOCK, @SIG_NAME), \"\\n\";"
      "print join(',', Errno::EAGAIN(), Errno::EINTR(), Fcntl::F_GETFL(), Fcntl::F_SETFL(),"
      " Fcntl::O_NONBLOCK(), @own), \"\\n\";";
  Result r = run_shell("/bin/sh", "exec perl -e " + shell_quote(script) + " 2>&1", dir_);
  ASSERT_EQ(r.status, 0) << r.output;
  size_t nl = r.output.find('\n');
  ASSERT_NE(nl, std::string::npos) << r.output;
  EXPECT_EQ(r.output.substr(0, nl + 1), r.output.substr(nl + 1)) << "built-in, then perl's own";
  EXPECT_NE(r.output.find(",KILL,"), std::string::npos) << r.output;
}

TEST_F(CommandSyntax, EveryEmbeddedPerlProgramCompilesUnderStrictWithoutWarnings) {
  int checked = 0;
  for (const auto& file : remote::kFiles) {
    if (!file.name.ends_with(".pl")) continue;
    // -Mstrict: the agent does not load strict.pm itself (its start is paid on every host).
    Result r = run_shell("/bin/sh",
                         "exec perl -Mstrict -w -c -e " + shell_quote(file.text) + " 2>&1", dir_);
    EXPECT_EQ(r.status, 0) << file.name << "\n" << r.output;
    EXPECT_EQ(r.output, "-e syntax OK\n") << file.name;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

// ---- byte-exact round trip
// -------------------------------------------------------------------------

Words hostile_corpus(const std::string& base) {
  const std::string p = base + "/pwned";
  Words c = {
      "",
      " ",
      "plain",
      "two words",
      "  leading and trailing  ",
      "'",
      "''",
      "it's",
      "\"",
      "\"double\"",
      "'\"'\"''\"\"''''\"\"\"'",
      "'\\''",
      "$(touch " + p + "1)",
      "`touch " + p + "2`",
      "'$(touch " + p + "3)'",
      "\"$(touch " + p + "4)\"",
      "; touch " + p + "5",
      "&& touch " + p + "6 ||",
      "\ntouch " + p + "7\n",
      "| touch " + p + "8",
      "\\$(touch " + p + "9)",
      "'; touch " + p + "10; '",
      "${HOME}",
      "$HOME",
      "$0 $1 $@ $* $# $? $$ $! $-",
      "a;b",
      "a|b",
      "a&b",
      "a<b",
      "a>b",
      ">out",
      "a >> b 2>&1",
      "line1\nline2",
      "\n",
      "tab\there",
      "cr\rhere",
      "\t\n \r",
      "*",
      "?",
      "[a-z]*",
      "~",
      "~root",
      "~/x",
      "#comment",
      "a #b",
      "!",
      "!!",
      "!$",
      "\\",
      "\\\\n",
      "back\\'slash",
      "a\\\nb",
      "-",
      "--",
      "-n",
      "-e",
      "-c",
      "--help",
      "=",
      "A=B",
      "=x",
      "IFS=x",
      "exec",
      "%s%n%d%%",
      "{a,b}",
      "$'\\x41'",
      "(sub)",
      "{ echo; }",
      "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac",
      "\xff\xfe",
      "\x80"
      "abc\xc3",
      "\x01\x02\x1b[31m\x7f",
  };
  return c;
}

// About 100 KB of everything at once, one quote per chunk (quoting grows it by 3 bytes a chunk).
std::string long_word() {
  const std::string chunk =
      "abcdefghij $(touch x) `y` \"z\" \\ ; & | < > * ? ~ # ! \t\r\n\xff\xc3 '";
  std::string s;
  while (s.size() < 100 * 1024) s += chunk;
  return s;
}

// The helper at the end of the exec chain: writes its argv, its environment and its working
// directory to files in that directory. It is plain sh: "$@" hands every byte on.
const std::string kRecorder =
    "{ [ $# -eq 0 ] || printf '%s\\0' \"$@\"; } > argv.bin && env -0 > env.bin && "
    "pwd -P > pwd.txt";

class CommandRoundTrip : public CommandTest {
 protected:
  void SetUp() override {
    CommandTest::SetUp();
    // The working directory has a hostile name too.
    std::string tmpl =
        dir_ + "/wd 'q' \"d\" $(touch pwned-wd) `touch pwned-wd2` ;&|<>*?~#!\\ \t-x=yXXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    workdir_ = tmpl;
    corpus_ = hostile_corpus(dir_);
    ASSERT_GE(corpus_.size(), 40u);
    process_.workdir = workdir_;
    process_.argv = {"/bin/sh", "-c", kRecorder, "recorder"};
    for (size_t i = 0; i < corpus_.size(); ++i) {
      process_.argv.push_back(corpus_[i]);
      process_.env.emplace_back("T" + std::to_string(i), corpus_[i]);
    }
    process_.argv.push_back(long_word());
    process_.env.emplace_back("PYTHONUNBUFFERED", "1");
    process_.env.emplace_back("MULTI_EQ", "a=b=c");
  }

  void check_run(const std::string& shell) {
    SCOPED_TRACE(shell);
    std::string command = process_command(process_, job_);
    // A single argument of execve is limited to 128 KiB (MAX_ARG_STRLEN), for sshd too.
    ASSERT_LT(command.size(), 131072u);
    Result r = run_in(shell, command, dir_);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output, "");

    Words argv = split_nul(slurp(workdir_ + "/argv.bin"));
    Words want(process_.argv.begin() + recorder_words_, process_.argv.end());
    ASSERT_EQ(argv.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(argv[i], want[i]) << "argv " << i;

    std::map<std::string, std::string> env;
    for (const auto& kv : split_nul(slurp(workdir_ + "/env.bin"))) {
      size_t eq = kv.find('=');
      ASSERT_NE(eq, std::string::npos) << kv;
      EXPECT_TRUE(env.emplace(kv.substr(0, eq), kv.substr(eq + 1)).second) << kv;
    }
    EXPECT_EQ(env[kJobMarker], job_);
    for (const auto& [n, v] : process_.env) {
      ASSERT_TRUE(env.count(n)) << n;
      EXPECT_EQ(env[n], changed_.count(n) ? changed_.at(n) : v) << n;
    }
    for (const auto& [n, v] : changed_) EXPECT_EQ(env[n], v) << n;
    for (const auto& [n, v] : env) {
      bool expected = n == kJobMarker || kShellVars.count(n) || changed_.count(n) ||
                      std::any_of(process_.env.begin(), process_.env.end(),
                                  [&name = n](const auto& kv) { return kv.first == name; });
      EXPECT_TRUE(expected) << "unexpected variable " << n << "=" << v;
    }
    EXPECT_EQ(slurp(workdir_ + "/pwd.txt"), fs::canonical(workdir_).string() + "\n");
  }

  void check_nothing_ran() {
    std::set<std::string> in_base, in_workdir;
    for (const auto& e : fs::directory_iterator(dir_)) in_base.insert(e.path().filename());
    for (const auto& e : fs::directory_iterator(workdir_)) in_workdir.insert(e.path().filename());
    EXPECT_EQ(in_base, std::set<std::string>{fs::path(workdir_).filename()});
    EXPECT_EQ(in_workdir, (std::set<std::string>{"argv.bin", "env.bin", "pwd.txt"}));
  }

  // Removes what the recorder wrote, for the next run.
  void forget_records() {
    for (const char* f : {"argv.bin", "env.bin", "pwd.txt"}) fs::remove(workdir_ + "/" + f);
  }

  // The process runs the recorder as a program named "./rec=1" with the corpus as its arguments:
  // env(1) would take that name for an assignment.
  void run_a_program_named_with_an_equals_sign() {
    std::string program = workdir_ + "/rec=1";
    std::ofstream(program) << "#!/bin/sh\n" << kRecorder << "\n";
    fs::permissions(program, fs::perms::owner_all);
    process_.argv = {"./rec=1"};
    process_.argv.insert(process_.argv.end(), corpus_.begin(), corpus_.end());
    recorder_words_ = 1;
  }

  std::string workdir_;
  Words corpus_;
  Process process_;
  size_t recorder_words_ = 4;  // argv words before the recorded ones ("$@")
  // Variables the process gets other than from process_.env, or with another value there.
  std::map<std::string, std::string> changed_;
};

TEST_F(CommandRoundTrip, DashPassesEveryByte) {
  check_run("/bin/sh");
  check_nothing_ran();
}

TEST_F(CommandRoundTrip, BashPassesEveryByte) {
  check_run("/bin/bash");
  check_nothing_ran();
}

// The agent starts the same command without a shell: the same argv, environment and directory.
TEST_F(CommandRoundTrip, TheAgentPassesEveryByte) {
  check_run("agent");
  check_nothing_ran();
}

// ... and sets PWD as the shell's cd would (the recorder above is a shell: it sets its own).
TEST_F(CommandRoundTrip, TheAgentSetsPwdAsCdWould) {
  process_.argv = {"/usr/bin/env", "-0"};
  for (const auto& shell : {"/bin/sh", "agent"}) {
    SCOPED_TRACE(shell);
    Result r = run_in(shell, process_command(process_, job_), dir_);
    ASSERT_EQ(r.status, 0) << r.output;
    Words env = split_nul(r.output);
    EXPECT_THAT(env, ::testing::Contains("PWD=" + workdir_));
  }
}

TEST_F(CommandRoundTrip, HostileJobIdStaysOneValue) {
  // Job ids are ours, but the quoting must not depend on that.
  job_ = "j'$(touch " + dir_ + "/pwned-job)\n";
  check_run("/bin/sh");
  check_nothing_ran();
}

TEST_F(CommandRoundTrip, ProgramWithAnEqualsSign) {
  // env(1) takes every leading NAME=VALUE word for an assignment: the program must still run.
  run_a_program_named_with_an_equals_sign();
  for (const auto& shell : {"/bin/sh", "/bin/bash", "agent"}) {
    check_run(shell);
    forget_records();
  }
}

// A process's defaults (torchrun's, Process::env_defaults) pass every byte of its argv on, also
// to a program whose name holds a '=', through the shell and through the agent.
TEST_F(CommandRoundTrip, DefaultsPassEveryByteOn) {
  process_.env_defaults = {{"NCCL_ASYNC_ERROR_HANDLING", "1"},
                           {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "$NCCL_ASYNC_ERROR_HANDLING"},
                           {"OMP_NUM_THREADS", "1"}};
  changed_ = {{"NCCL_ASYNC_ERROR_HANDLING", "1"},
              {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
              {"OMP_NUM_THREADS", "1"}};
  for (const auto& shell : {"/bin/sh", "/bin/bash", "agent"}) {
    check_run(shell);
    check_nothing_ran();
    forget_records();
  }
  run_a_program_named_with_an_equals_sign();
  for (const auto& shell : {"/bin/sh", "agent"}) {
    check_run(shell);
    forget_records();
  }
}

// A default is set only where the host's environment (the login shell's, whose command this is)
// has no such variable: one set there stays, even empty, as torchrun started on that host keeps
// it; one set for the process (--env, the host file's env) wins over both. "$NAME" follows NAME.
TEST_F(CommandRoundTrip, DefaultsKeepWhatTheHostsEnvironmentSets) {
  process_.argv = {"/usr/bin/env", "-0"};
  process_.env = {};
  process_.env_defaults = {{"NCCL_ASYNC_ERROR_HANDLING", "1"},
                           {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "$NCCL_ASYNC_ERROR_HANDLING"},
                           {"OMP_NUM_THREADS", "1"}};
  struct Case {
    Words host;   // the login environment's own variables
    EnvList own;  // Process::env
    std::map<std::string, std::string> want;
  };
  const std::vector<Case> cases = {
      {{},
       {},
       {{"NCCL_ASYNC_ERROR_HANDLING", "1"},
        {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
        {"OMP_NUM_THREADS", "1"}}},
      {{"OMP_NUM_THREADS=4", "NCCL_ASYNC_ERROR_HANDLING=0"},
       {},
       {{"NCCL_ASYNC_ERROR_HANDLING", "0"},
        {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"},
        {"OMP_NUM_THREADS", "4"}}},
      {{"OMP_NUM_THREADS=", "TORCH_NCCL_ASYNC_ERROR_HANDLING=3"},
       {},
       {{"NCCL_ASYNC_ERROR_HANDLING", "1"},
        {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"},
        {"OMP_NUM_THREADS", ""}}},
      {{"NCCL_ASYNC_ERROR_HANDLING=0", "OMP_NUM_THREADS=4"},
       {{"NCCL_ASYNC_ERROR_HANDLING", "5"}},
       {{"NCCL_ASYNC_ERROR_HANDLING", "5"},
        {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "5"},
        {"OMP_NUM_THREADS", "4"}}},
  };
  for (const Case& c : cases) {
    process_.env = c.own;
    std::string command = process_command(process_, job_);
    for (const auto& shell : {"/bin/sh", "agent"}) {
      Words login{"/usr/bin/env"};
      login.insert(login.end(), c.host.begin(), c.host.end());
      SCOPED_TRACE(fmt::format("{} under {}", shell, shell_join(login)));
      Result r =
          std::string(shell) == "agent"
              ? run_agent(command, dir_, 10, login)
              : run_shell(shell,
                          fmt::format("{} /bin/sh -c {}", shell_join(login), shell_quote(command)),
                          dir_);
      ASSERT_EQ(r.status, 0) << r.output;
      std::map<std::string, std::string> got;
      for (const auto& kv : split_nul(r.output))
        if (kv.find("NCCL") != std::string::npos || kv.starts_with("OMP_") ||
            kv.starts_with("msrun_ssh"))
          got.emplace(kv.substr(0, kv.find('=')), kv.substr(kv.find('=') + 1));
      EXPECT_EQ(got, c.want);
    }
  }
}

// The agent finds a bare program name on the process's PATH as execvp would, also through an
// entry relative to the workdir (which only the child's cd resolves), and runs a script without
// a #! line with /bin/sh, as env(1) under the shell does.
TEST_F(CommandRoundTrip, TheAgentFindsAndRunsProgramsAsExecvpDoes) {
  fs::create_directory(workdir_ + "/bin");
  fs::create_directory(workdir_ + "/later");  // a program of the same name, later on PATH
  std::ofstream(workdir_ + "/later/rec-on-path") << "#!/bin/sh\nexit 3\n";
  fs::permissions(workdir_ + "/later/rec-on-path", fs::perms::owner_all);
  for (const char* name : {"/bin/rec-on-path", "/rec-no-line"}) {
    std::string program = workdir_ + name;
    std::ofstream(program) << (std::string(name) == "/bin/rec-on-path" ? "#!/bin/sh\n" : "")
                           << kRecorder << "\n";
    fs::permissions(program, fs::perms::owner_all);
  }
  recorder_words_ = 1;
  struct Case {
    std::string program, path;
  };
  for (const Case& c :
       {Case{"rec-on-path", "bin:" + workdir_ + "/later:/bin"},  // relative entry: the cd's
        Case{"rec-on-path", workdir_ + "/bin:/usr/bin:/bin"},    // absolute
        Case{"./rec-no-line", "/usr/bin:/bin"}}) {
    SCOPED_TRACE(c.program + " on " + c.path);
    process_.argv = {c.program};
    process_.argv.insert(process_.argv.end(), corpus_.begin(), corpus_.end());
    process_.env = {{"PATH", c.path}, {"T0", corpus_[0]}};
    for (const auto& shell : {"/bin/sh", "agent"}) {
      check_run(shell);
      forget_records();
    }
  }
}

TEST_F(CommandRoundTrip, StackDumpsPutTheJobsDirectoryFirstOnPythonPath) {
  process_.stack_dumps = true;
  process_.env.emplace_back("PYTHONPATH", "/opt/lib");
  // The step's shell has no variable of its own that could change one of the process's.
  process_.env.emplace_back("d", "the user's d");
  process_.env.emplace_back("s", "the user's s");
  process_.env.emplace_back("TORCHELASTIC_ERROR_FILE", "@msrun-ssh-job-dir@/error-3.json");
  std::string stack_dir = "/tmp/msrun-ssh-stacks-" + job_;  // the shell has no TMPDIR
  // The watchdog makes the directory before the processes start (stack_dir.sh).
  Result made = run_shell("/bin/sh",
                          fmt::format("{}stack_site {} {}", remote::kStackDirSh, shell_quote(job_),
                                      shell_quote(remote::kStackSitePy)),
                          dir_);
  ASSERT_EQ(made.status, 0) << made.output;
  changed_ = {{"MSRUN_SSH_STACK_DIR", stack_dir},
              {"PYTHONPATH", stack_dir + ":/opt/lib"},
              {"TORCHELASTIC_ERROR_FILE", stack_dir + "/error-3.json"}};
  check_run("/bin/bash");
  check_nothing_ran();
  // The agent does stack_site.sh's step itself.
  forget_records();
  check_run("agent");
  check_nothing_ran();
  EXPECT_EQ(slurp(stack_dir + "/sitecustomize.py"), remote::kStackSitePy);
  EXPECT_EQ(fs::status(stack_dir).permissions(), fs::perms::owner_all);
  fs::remove_all(stack_dir);
}

// Without the directory the watchdog makes, a process of an attached run makes none (it has no
// text for it) and runs without stack dumps; with a TMPDIR of its own it makes its own there.
TEST_F(CommandRoundTrip, StackDumpsWithoutTheWatchdogsDirectoryRunWithoutThem) {
  process_.stack_dumps = true;
  std::string stack_dir = "/tmp/msrun-ssh-stacks-" + job_;
  fs::remove_all(stack_dir);
  for (const auto& shell : {"/bin/sh", "agent"}) {
    check_run(shell);
    forget_records();
  }
  EXPECT_FALSE(fs::exists(stack_dir));
  std::string own_tmp = dir_ + "/tmp";
  fs::create_directory(own_tmp);
  process_.env.emplace_back("TMPDIR", own_tmp);
  std::string own_dir = own_tmp + "/msrun-ssh-stacks-" + job_;
  changed_ = {{"MSRUN_SSH_STACK_DIR", own_dir}, {"PYTHONPATH", own_dir}};
  check_run("/bin/sh");
  EXPECT_EQ(slurp(own_dir + "/sitecustomize.py"), remote::kStackSitePy);
}

TEST_F(CommandRoundTrip, EmptyEnvironmentAndArgumentList) {
  process_.env.clear();
  process_.argv = {"/bin/sh", "-c", kRecorder, "recorder"};
  check_run("/bin/sh");
  EXPECT_EQ(slurp(workdir_ + "/argv.bin"), "");
}

TEST_F(CommandRoundTrip, TheAgentGivesStdinDevNullUnlessFromTheLauncher) {
  process_.argv = {"/bin/sh", "-c", "readlink /proc/$$/fd/0 > stdin.txt"};
  for (bool from_launcher : {false, true}) {
    Result r = run_agent(process_command(process_, job_, from_launcher), dir_);
    ASSERT_EQ(r.status, 0) << r.output;
    std::string stdin_is = slurp(workdir_ + "/stdin.txt");
    if (from_launcher)
      EXPECT_TRUE(stdin_is.starts_with("pipe:")) << stdin_is;  // the agent's, for I frames
    else
      EXPECT_EQ(stdin_is, "/dev/null\n");
  }
}

TEST_F(CommandRoundTrip, StdinIsDevNullUnlessFromTheLauncher) {
  process_.argv = {"/bin/sh", "-c", "readlink /proc/$$/fd/0 > stdin.txt"};
  std::string input = write("input.txt", "typed\n");
  for (bool from_launcher : {false, true}) {
    // The shell that sshd starts has the channel as its stdin: here a file stands for it.
    std::string command =
        "{ " + process_command(process_, job_, from_launcher) + "; } < " + shell_quote(input);
    Result r = run_shell("/bin/sh", command, dir_);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(slurp(workdir_ + "/stdin.txt"), from_launcher ? input + "\n" : "/dev/null\n");
  }
}

TEST_F(CommandRoundTrip, MissingWorkdirFailsWithoutRunning) {
  process_.workdir = workdir_ + "/missing";
  for (const auto& shell : {"/bin/sh", "agent"}) {
    SCOPED_TRACE(shell);
    Result r = run_in(shell, process_command(process_, job_), dir_);
    ASSERT_TRUE(r.status.has_value());
    EXPECT_TRUE(WIFEXITED(*r.status) && WEXITSTATUS(*r.status) == 2) << r.output;
    EXPECT_FALSE(fs::exists(workdir_ + "/argv.bin"));
    EXPECT_FALSE(fs::exists(dir_ + "/argv.bin"));
  }
}

// The agent makes a process's start whole before its fork (plan_of in agent.pl): between its fork
// and its exec the child makes no system call but the start's own (signals to their defaults, the
// three descriptors, the workdir, the session), none of Perl's opens, environment or stack.
// Before, it made 37: fcntl, ioctl, lseek, newfstatat, dup2 and close per descriptor, an openat,
// two rt_sigprocmask around each signal's reset...
TEST_F(CommandRoundTrip, TheAgentsChildMakesOnlyItsStartsSystemCallsBeforeItsExec) {
  std::string strace = test::shell_output("command -v strace");
  if (strace.empty())
    GTEST_SKIP() << "SKIPPED LOUDLY: no strace on this machine (apt-get install strace)";
  if (strace.ends_with('\n')) strace.pop_back();
  process_.argv = {"/bin/sh", "-c", kRecorder, "recorder", "x"};
  recorder_words_ = 4;
  std::string trace = dir_ + "/strace.txt";
  Result r =
      run_agent(process_command(process_, job_), dir_, 10, {strace, "-f", "-qq", "-o", trace});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(slurp(workdir_ + "/argv.bin"), std::string("x\0", 2));
  // The pid that exec'd the recorder's /bin/sh, and its calls before that.
  std::istringstream lines(slurp(trace));
  std::map<std::string, Words> calls;
  Words before_exec;
  for (std::string line; std::getline(lines, line);) {
    size_t space = line.find(' ');
    size_t name = line.find_first_not_of(' ', space);  // strace pads the pid: "1865  execve("
    size_t paren = line.find('(', name);
    if (name == std::string::npos || paren == std::string::npos) continue;
    std::string pid = line.substr(0, space), call = line.substr(name, paren - name);
    if (call.starts_with("<") || call.starts_with("---")) continue;
    if (call == "execve" &&
        line.find("\"/bin/sh\", [\"/bin/sh\", \"-c\", \"{ [ $#") != std::string::npos) {
      before_exec = calls[pid];
      break;
    }
    calls[pid].push_back(call);
  }
  ASSERT_FALSE(before_exec.empty()) << slurp(trace);
  // set_robust_list: glibc's fork; rt_sigprocmask: Perl's gives the child back its signal mask;
  // brk: Perl's allocator may grow the heap for a temporary of a system call, as the heap the
  // fork left it holds (CI of 3adb79b: one brk after setsid), which is no file, environment or
  // stack of Perl's.
  const std::set<std::string> start = {"set_robust_list", "rt_sigprocmask", "rt_sigaction", "dup3",
                                       "chdir",           "setsid",         "brk"};
  std::string seen;
  for (const auto& call : before_exec) seen += call + " ";
  for (const auto& call : before_exec) EXPECT_TRUE(start.count(call)) << call << " in " << seen;
  EXPECT_EQ(std::count(before_exec.begin(), before_exec.end(), "dup3"), 3);
  EXPECT_EQ(std::count(before_exec.begin(), before_exec.end(), "chdir"), 1);
  EXPECT_EQ(std::count(before_exec.begin(), before_exec.end(), "setsid"), 1);
}

// A program that is not there ends as under env: 127, with its name and why on stderr.
TEST_F(CommandRoundTrip, TheAgentSaysWhyAProgramDidNotStart) {
  process_.argv = {"no-such-program-here", "x"};
  Result r = run_agent(process_command(process_, job_), dir_);
  ASSERT_TRUE(r.status.has_value());
  EXPECT_TRUE(WIFEXITED(*r.status) && WEXITSTATUS(*r.status) == 127) << *r.status;
  EXPECT_THAT(r.output, ::testing::HasSubstr("no-such-program-here: No such file or directory"));
}

// ---- detached
// -------------------------------------------------------------------------------------

// The stem of the state files of worker `p` of job `job` whose log is `log` in `workdir`.
std::string state_stem(const std::string& workdir, const std::string& log, const std::string& job,
                       const Process& p) {
  return workdir + "/" + detached_state_stem(log, job, rank_word(p.rank));
}

// The pid a detached process's keeper wrote to STEM.pid (0: none within 5 s).
pid_t keeper_pid_file(const std::string& stem) {
  auto t0 = Clock::now();
  while (since(t0) < 5) {
    std::string text = slurp(stem + ".pid");
    if (text.ends_with("\n")) return static_cast<pid_t>(std::stoi(text));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return 0;
}

// A log that cannot be opened (a directory of its name; another user's file): the start fails
// there and says so, and starts nothing (it said "started" for a process that never ran).
TEST_F(CommandRoundTrip, ADetachedProcessWhoseLogCannotBeOpenedIsNotStarted) {
  process_.argv = {"sleep", "30"};
  ASSERT_TRUE(fs::create_directories(workdir_ + "/logs/w0.log"));
  Result r = run_shell("/bin/sh", detached_command(process_, job_, "logs/w0.log"), dir_, 5);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("msrun-ssh: started"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("w0.log"), std::string::npos) << r.output;
  EXPECT_TRUE(marked(job_).empty());
}

TEST_F(CommandRoundTrip, DetachedRunsInTheBackgroundAndStopEndsIt) {
  process_.argv = {"/bin/sh", "-c", kRecorder + " && exec sleep 30", "recorder"};
  for (size_t i = 0; i < 20; ++i) process_.argv.push_back(corpus_[i]);
  std::string command = detached_command(process_, job_, "logs/sub dir/w'0.log");
  auto t0 = Clock::now();
  Result r = run_shell("/bin/sh", command, dir_, 5);
  EXPECT_LT(since(t0), 3) << "the detached command must return at once";
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_EQ(r.output.rfind("msrun-ssh: started ", 0), 0u) << r.output;
  pid_t keeper = std::stoi(r.output.substr(19));
  EXPECT_EQ(r.output, "msrun-ssh: started " + std::to_string(keeper) + "\n");

  // The keeper leads its own session and writes the pid of the process, its child, which records
  // its argv, then sleeps, marked with the job id.
  std::string stem = state_stem(workdir_, "logs/sub dir/w'0.log", job_, process_);
  pid_t pid = keeper_pid_file(stem);
  ASSERT_GT(pid, 0);
  wait_exec(pid, "sleep");
  EXPECT_EQ(marked(job_), std::vector<pid_t>{pid});
  Words argv = split_nul(slurp(workdir_ + "/argv.bin"));
  EXPECT_EQ(argv, Words(process_.argv.begin() + 4, process_.argv.end()));
  EXPECT_EQ(getsid(keeper), keeper);
  EXPECT_EQ(getsid(pid), keeper);

  // Log file 0600 in a 0700 directory, relative to the workdir.
  std::string log = workdir_ + "/logs/sub dir/w'0.log";
  struct stat st {};
  ASSERT_EQ(stat(log.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat((workdir_ + "/logs/sub dir").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  std::string stopped = stop(1);
  EXPECT_NE(stopped.find("killed " + std::to_string(pid) + " SIGTERM sleep 30 \n"),
            std::string::npos)
      << stopped;
  EXPECT_TRUE(stopped.ends_with("msrun-ssh-stop: done\n")) << stopped;
  // The keeper outlives the SIGTERM, writes the process's end and ends by itself; orphaned, it
  // came back to us (subreaper): reap it.
  std::optional<int> status = wait_for(keeper, 5);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
  EXPECT_EQ(slurp(stem + ".exit"), "143\n");
  EXPECT_TRUE(marked(job_).empty());
}

TEST_F(CommandRoundTrip, DetachedProcessLeavesItsExitStatus) {
  // The host's own s and d reach the process as they were (the keeper keeps no variable of its
  // own that could change them).
  process_.argv = {"/bin/sh", "-c", "echo out \"$s\" \"$d\"; exit 3"};
  Result r = run_shell(
      "/bin/sh",
      "export s='the host s' d='the host d'; " + detached_command(process_, job_, "w.log"), dir_,
      5);
  ASSERT_EQ(r.status, 0) << r.output;
  pid_t keeper = std::stoi(r.output.substr(19));
  std::optional<int> status = wait_for(keeper, 5);
  ASSERT_TRUE(status.has_value());
  std::string stem = state_stem(workdir_, "w.log", job_, process_);
  EXPECT_EQ(stem, workdir_ + "/./.msrun-ssh/" + job_ + "/0");
  EXPECT_EQ(slurp(stem + ".exit"), "3\n");
  EXPECT_GT(keeper_pid_file(stem), keeper);
  EXPECT_EQ(slurp(workdir_ + "/w.log"), "out the host s the host d\n");
  struct stat st {};
  ASSERT_EQ(stat((workdir_ + "/.msrun-ssh/" + job_).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

// What a detached process leaves behind ends with it before its status is written: a child in a
// session of its own, and one that ignores SIGTERM (SIGKILL after 2 s). Other processes of the
// job on the host (another rank's) are not touched.
TEST_F(CommandRoundTrip, DetachedProcessTakesWhatItStartedAlong) {
  // The job's stack-dump directory on this host (stack_dir.sh makes it): the last process of the
  // job to end here removes it, not an earlier one.
  std::string stacks = "/tmp/msrun-ssh-stacks-" + job_;  // the shell has no TMPDIR
  ASSERT_TRUE(fs::create_directory(stacks));
  Process other = process_;
  other.rank = 1;
  // It runs until the test lets it end, however long the teardown below takes on a loaded machine:
  // its shell waits on a FIFO (no process of its own for that, none to show up as the job's).
  struct Gate {
    std::string path;
    void open() const {  // the other one's `read` returns: it ends
      int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0) return;
      [[maybe_unused]] ssize_t n = ::write(fd, "\n", 1);
      ::close(fd);
    }
    ~Gate() { open(); }  // whatever ends the test, the other one ends too
  } gate{dir_ + "/other-runs"};
  ASSERT_EQ(::mkfifo(gate.path.c_str(), 0600), 0);
  other.argv = {"/bin/sh", "-c", "read line < '" + gate.path + "'"};
  Result o = run_shell("/bin/sh", detached_command(other, job_, "w1.log"), dir_, 5);
  ASSERT_EQ(o.status, 0) << o.output;
  pid_t other_pid = keeper_pid_file(state_stem(workdir_, "w1.log", job_, other));
  ASSERT_GT(other_pid, 0);

  process_.argv = {"/bin/sh", "-c",
                   "setsid sleep 31 & (trap '' TERM; exec setsid sleep 32) & sleep 0.3; exit 5"};
  Result r = run_shell("/bin/sh", detached_command(process_, job_, "w0.log"), dir_, 5);
  ASSERT_EQ(r.status, 0) << r.output;
  pid_t keeper = std::stoi(r.output.substr(19));
  std::string stem = state_stem(workdir_, "w0.log", job_, process_);
  std::optional<int> status = wait_for(keeper, 8);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(slurp(stem + ".exit"), "5\n");
  // Reap what came back to us (subreaper), then look: only the other rank's process is left.
  auto t0 = Clock::now();
  while (since(t0) < 1 && reap_any() > 0) {
  }
  EXPECT_EQ(marked(job_), std::vector<pid_t>{other_pid});
  EXPECT_TRUE(fs::exists(stacks)) << "removed while another process of the job runs";
  gate.open();
  // The other one ends by itself: its keeper finds nothing of the job left, and removes it.
  std::string other_stem = state_stem(workdir_, "w1.log", job_, other);
  t0 = Clock::now();
  while (since(t0) < 15 && slurp(other_stem + ".exit").empty())
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(slurp(other_stem + ".exit"), "0\n");
  EXPECT_FALSE(fs::exists(stacks));
  fs::remove_all(stacks);
}

// On a host of some 30,000 processes one grep cannot take the paths of their environ files
// (E2BIG): the keeper of a process that ended took that for "no process of the job left here" and
// removed the job's stack-dump directory while another rank still ran. Here with fewer processes:
// the keeper runs with a stack limit of 1 MiB (ARG_MAX 256 KiB) and an environment that leaves
// 4 KiB of it beside the start command, less than the paths of this machine's processes' environ
// files (made at least 400).
TEST_F(CommandRoundTrip, ADetachedProcessKeepsTheStackDirWhenTheProcessesPathsAreMoreThanOneExec) {
  std::string stacks = "/tmp/msrun-ssh-stacks-" + job_;  // the shell has no TMPDIR
  ASSERT_TRUE(fs::create_directory(stacks));
  pid_t other = start_marked(job_, {"sleep", "30"}, "sleep");  // another rank of the job
  std::vector<pid_t> crowd = crowd_of_400();
  process_.argv = {"true"};
  std::string command = detached_command(process_, job_, "w0.log");
  run_with_little_arg_room(command, 4 * 1024);
  std::string stem = state_stem(workdir_, "w0.log", job_, process_);
  auto t0 = Clock::now();
  while (since(t0) < 15 && slurp(stem + ".exit").empty())
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  end_crowd(crowd);
  ::kill(other, SIGKILL);
  wait_for(other, 5);
  EXPECT_EQ(slurp(stem + ".exit"), "0\n");
  EXPECT_TRUE(fs::exists(stacks)) << "removed while another process of the job runs";
  fs::remove_all(stacks);
}

// ---- stop
// -----------------------------------------------------------------------------------------

class StopCommand : public CommandTest {};

TEST_F(StopCommand, KillsTheMarkedProcess) {
  pid_t sleeper = start_marked(job_, {"sleep", "30"}, "sleep");
  pid_t bystander = start_marked(random_job_id(), {"sleep", "30"}, "sleep");
  // Same prefix, another job: the marker must match as a whole.
  pid_t sibling = start_marked(job_ + "0", {"sleep", "30"}, "sleep");
  EXPECT_EQ(stop(0.5),
            "killed " + std::to_string(sleeper) + " SIGTERM sleep 30 \nmsrun-ssh-stop: done\n");
  ASSERT_TRUE(killed_by(sleeper, SIGTERM, 2));
  // Other jobs' processes are left alone.
  EXPECT_FALSE(wait_for(bystander, 0.1).has_value());
  EXPECT_FALSE(wait_for(sibling, 0).has_value());
}

// A job restarted with --max_restarts runs attempt k as ID-k: stop ends the attempts it is told
// of, and nothing of another job whose id only begins the same.
TEST_F(StopCommand, EndsTheLaterAttemptsItIsToldOf) {
  pid_t second = start_marked(job_ + "-2", {"sleep", "30"}, "sleep");
  pid_t third = start_marked(job_ + "-3", {"sleep", "30"}, "sleep");
  pid_t other = start_marked(job_ + "-20", {"sleep", "30"}, "sleep");
  Result r = run_shell("/bin/sh", stop_command(job_, 0.5, 3), dir_);
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.output.find("killed " + std::to_string(second) + " SIGTERM sleep 30"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("killed " + std::to_string(third) + " SIGTERM sleep 30"),
            std::string::npos)
      << r.output;
  ASSERT_TRUE(killed_by(second, SIGTERM, 2));
  ASSERT_TRUE(killed_by(third, SIGTERM, 2));
  EXPECT_FALSE(wait_for(other, 0.1).has_value());
  // Told of one attempt only (no record of restarts), the second attempt's process is left.
  pid_t again = start_marked(job_ + "-2", {"sleep", "30"}, "sleep");
  EXPECT_EQ(stop(0.5), "msrun-ssh-stop: done\n");
  EXPECT_FALSE(wait_for(again, 0.1).has_value());
}

// On a host of some 30,000 processes the paths of their environ and cmdline files are more than
// one exec may carry (E2BIG), and a single grep found nothing: stop said "done" and left the job
// running. Here the same happens with fewer processes: the stop command runs with a stack limit of
// 1 MiB (ARG_MAX 256 KiB) and an environment that leaves 10 KiB of it, less than the paths of
// this machine's processes (made at least 400). It must still find and end its job.
TEST_F(StopCommand, FindsTheJobWhenTheProcessesPathsAreMoreThanOneExecCarries) {
  pid_t sleeper = start_marked(job_, {"sleep", "30"}, "sleep");
  std::vector<pid_t> crowd = crowd_of_400();
  std::string output = run_with_little_arg_room(stop_command(job_, 0.5), 10 * 1024);
  end_crowd(crowd);
  EXPECT_EQ(output,
            "killed " + std::to_string(sleeper) + " SIGTERM sleep 30 \nmsrun-ssh-stop: done\n");
  EXPECT_TRUE(killed_by(sleeper, SIGTERM, 2));
}

// A process's environ reads empty once the kernel lets go of its memory, before it closes its
// files (a worker of many GB holds the torch master's port and its devices some hundreds of ms
// longer): a restart after the stop found the port taken. Here the same gap, held longer: on
// SIGTERM the main thread ends (the environ reads empty) while another thread runs on for
// `hold_s`. Returns the pid, its handler set.
class StopHolder : public CommandTest {
 protected:
  pid_t start_holder(double hold_s) {
    const std::string script = fmt::format(
        "import ctypes, os, signal, threading, time\n"
        "def hold():\n"
        "    time.sleep({})\n"
        "    os._exit(0)\n"
        "def on_term(*_):\n"
        "    threading.Thread(target=hold).start()\n"
        "    ctypes.CDLL(None).pthread_exit(None)\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        "time.sleep(30)\n",
        hold_s);
    pid_t pid = start_marked(job_, {"python3", "-c", script}, "python3");
    // Until its SIGTERM handler is set (SigCgt in /proc/PID/status).
    for (auto t0 = Clock::now(); since(t0) < 10;) {
      std::string status = slurp("/proc/" + std::to_string(pid) + "/status");
      size_t at = status.find("SigCgt:\t");
      if (at != std::string::npos &&
          (std::stoull(status.substr(at + 8, 16), nullptr, 16) & (1ULL << (SIGTERM - 1))) != 0)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return pid;
  }
};

// Ending within the grace: the stop is done once it has ended.
TEST_F(StopHolder, TheStopIsDoneOnlyOnceWhatItSignalledHasEndedNotWhenItsEnvironIsEmpty) {
  pid_t slow = start_holder(1.5);
  auto t0 = Clock::now();
  EXPECT_THAT(stop(5), HasSubstr("killed " + std::to_string(slow) + " SIGTERM python3 -c"));
  EXPECT_GE(since(t0), 1.4);
  EXPECT_EQ(wait_for(slow, 0), 0);  // ended (a zombie of this test's), not running on
}

// Living on past the grace, unseen by the sweep, with the launcher's stdin still open (as the
// watchdog's and `stop`'s is): it gets SIGKILL too, and the stop waits for its end.
TEST_F(StopHolder, AProcessSignalledThatLivesOnUnseenPastTheGraceIsKilled) {
  pid_t slow = start_holder(30);
  Child c = spawn({"/bin/sh", "-c", stop_command(job_, 0.4)}, kShellEnv, dir_, true);
  std::string output;
  EXPECT_TRUE(read_to_eof(c.out, output, 10));
  EXPECT_EQ(wait_for(c.pid, 5), 0);
  std::string p = std::to_string(slow);
  EXPECT_THAT(output, HasSubstr("killed " + p + " SIGTERM python3 -c"));
  EXPECT_THAT(output, HasSubstr("killed " + p + " SIGKILL\nmsrun-ssh-stop: done\n"));
  EXPECT_TRUE(killed_by(slow, SIGKILL, 0));  // already ended when the stop said done
}

TEST_F(StopCommand, WithNothingRunning) { EXPECT_EQ(stop(0.5), "msrun-ssh-stop: done\n"); }

TEST_F(StopCommand, EscalatesToSigkill) {
  // SIGTERM stays ignored across exec: this sleep ignores it.
  pid_t stubborn = start_marked(job_, {"/bin/sh", "-c", "trap '' TERM; exec sleep 30"}, "sleep");
  auto t0 = Clock::now();
  std::string output = stop(0.4);
  std::string p = std::to_string(stubborn);
  EXPECT_EQ(output, "killed " + p + " SIGTERM sleep 30 \nkilled " + p +
                        " SIGKILL sleep 30 \nmsrun-ssh-stop: done\n");
  EXPECT_GE(since(t0), 0.35);  // the grace was given
  ASSERT_TRUE(killed_by(stubborn, SIGKILL, 2));
}

TEST_F(StopCommand, ReachesGrandchildrenInOtherSessions) {
  pid_t parent = start_marked(job_, {"/bin/sh", "-c", "setsid sleep 31 & exec sleep 30"}, "sleep");
  // The grandchild, once it runs `sleep 31` (a scan of /proc may miss a process mid-exec).
  pid_t grandchild = -1;
  for (auto t0 = Clock::now(); grandchild < 0 && since(t0) < 5;) {
    for (pid_t p : marked(job_))
      if (split_nul(slurp("/proc/" + std::to_string(p) + "/cmdline")) == Words{"sleep", "31"})
        grandchild = p;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(marked(job_).size(), 2u);
  EXPECT_NE(getsid(grandchild), getsid(parent));
  std::string output = stop(0.5);
  EXPECT_THAT(output, HasSubstr("killed " + std::to_string(parent) + " SIGTERM sleep 30 \n"));
  EXPECT_THAT(output, HasSubstr("killed " + std::to_string(grandchild) + " SIGTERM sleep 31 \n"));
  EXPECT_TRUE(wait_for(parent, 2).has_value());
  EXPECT_TRUE(wait_for(grandchild, 2).has_value());  // orphaned to us: reaped here
}

// A failed worker's leftovers (leftovers_command): only the processes of the job whose
// environment holds every one of the run's own words are ended; the job's other ranks, the
// scheduler with the same RANK_ID, and other jobs are left alone.
TEST_F(StopCommand, LeftoversOfOneRunOnly) {
  pid_t mine = start_marked(job_, {"MS_ROLE=MS_WORKER", "RANK_ID=1", "sleep", "30"}, "sleep");
  pid_t other_rank =
      start_marked(job_, {"MS_ROLE=MS_WORKER", "RANK_ID=11", "sleep", "30"}, "sleep");
  pid_t scheduler = start_marked(job_, {"MS_ROLE=MS_SCHED", "RANK_ID=1", "sleep", "30"}, "sleep");
  pid_t other_job =
      start_marked(random_job_id(), {"MS_ROLE=MS_WORKER", "RANK_ID=1", "sleep", "30"}, "sleep");
  Process worker;
  worker.role = Role::kWorker;
  worker.rank = 1;
  worker.env = {{"MS_ROLE", "MS_WORKER"}, {"RANK_ID", "1"}, {"PATH", "/usr/bin:/bin"}};
  std::string command = leftovers_command(worker, job_, 0.5);
  EXPECT_THAT(command,
              HasSubstr("' msrun-ssh-leftovers '" + job_ + "' 3 'MS_ROLE=MS_WORKER' 'RANK_ID=1'"));
  EXPECT_THAT(command, ::testing::Not(HasSubstr("PATH=")));
  Result r = run_shell("/bin/sh", command, dir_);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.output, "killed " + std::to_string(mine) + " SIGTERM sleep 30 \n" +
                          "msrun-ssh-leftovers: done\n");
  ASSERT_TRUE(killed_by(mine, SIGTERM, 2));
  for (pid_t left : {other_rank, scheduler, other_job})
    EXPECT_FALSE(wait_for(left, 0.05).has_value()) << left;
}

// A word of the run's with blanks and glob characters (a user's RANK under msrun's contract) is
// matched whole: split at its blanks, the failed run was never found and lived on.
TEST_F(StopCommand, LeftoversMatchWordsWithBlanksWhole) {
  pid_t mine =
      start_marked(job_, {"MS_ROLE=MS_WORKER", "RANK_ID=0", "RANK=x y *", "sleep", "30"}, "sleep");
  pid_t other =
      start_marked(job_, {"MS_ROLE=MS_WORKER", "RANK_ID=0", "RANK=x", "sleep", "30"}, "sleep");
  Process worker;
  worker.env = {{"MS_ROLE", "MS_WORKER"}, {"RANK_ID", "0"}, {"RANK", "x y *"}};
  Result r = run_shell("/bin/sh", leftovers_command(worker, job_, 0.5), dir_);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.output, "killed " + std::to_string(mine) + " SIGTERM sleep 30 \n" +
                          "msrun-ssh-leftovers: done\n");
  EXPECT_TRUE(killed_by(mine, SIGTERM, 2));
  EXPECT_FALSE(wait_for(other, 0.05).has_value());
}

// ---- watchdog
// -------------------------------------------------------------------------------------

class WatchdogCommand : public CommandTest {
 protected:
  // Starts the watchdog for job_ and waits for its ready line.
  void start(double timeout_s, double grace_s, const Words& env = kShellEnv) {
    dog_ = spawn({"/bin/sh", "-c", watchdog_command(job_, timeout_s, grace_s)}, env, dir_, true);
    ASSERT_TRUE(read_line()) << out_;
    // The ready line names the host as uname -n does.
    utsname u{};
    ASSERT_EQ(uname(&u), 0);
    EXPECT_EQ(out_, watchdog_ready_line(dog_.pid, u.nodename) + "\n");
    out_.clear();
  }
  void send(char c) { ASSERT_EQ(::write(dog_.in, &c, 1), 1); }
  // Reads the watchdog's output into out_ until it holds a whole line (at most 5 s).
  bool read_line() {
    return read_until(dog_.out, out_, 5,
                      [](const std::string& b) { return b.find('\n') != std::string::npos; });
  }
  // Reads the watchdog's output until it exits; returns its exit status.
  std::optional<int> finish(double timeout_s) {
    EXPECT_TRUE(read_to_eof(dog_.out, out_, timeout_s)) << out_;
    return wait_for(dog_.pid, timeout_s);
  }
  void resume_then_tear_down(pid_t sleeper);
  Child dog_;
  std::string out_;
};

// A workdir the host does not have is said instead of the ready line, before anything starts.
TEST_F(WatchdogCommand, AMissingWorkdirIsSaidInsteadOfReady) {
  dog_ = spawn({"/bin/sh", "-c", watchdog_command(job_, 10, 1, dir_ + "/no such dir")}, kShellEnv,
               dir_, true);
  EXPECT_EQ(finish(5), 0);
  EXPECT_EQ(out_, std::string(kWatchdogNoWorkdir) + "\n");
  dog_ = spawn({"/bin/sh", "-c", watchdog_command(job_, 10, 1, dir_)}, kShellEnv, dir_, true);
  out_.clear();
  ASSERT_TRUE(read_line()) << out_;
  EXPECT_TRUE(out_.starts_with(kWatchdogReady)) << out_;
  send(kQuit);
  EXPECT_EQ(finish(5), 0);
}

TEST_F(WatchdogCommand, EchoesHeartbeatsAndTearsDownAfterSilence) {
  pid_t sleeper = start_marked(job_, {"sleep", "30"}, "sleep");
  start(1.0, 0.5);
  // Heartbeats every 0.25 s for 1.5 s: longer than the timeout, and nothing is killed.
  for (int i = 0; i < 6; ++i) {
    send(kBeat);
    ASSERT_TRUE(read_until(dog_.out, out_, 2, [](const std::string& b) { return b == "h\n"; }))
        << out_;
    out_.clear();
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    EXPECT_FALSE(wait_for(sleeper, 0).has_value()) << "killed despite heartbeats";
  }
  // Silence, stdin still open.
  auto t0 = Clock::now();
  std::optional<int> status = wait_for(sleeper, 2.5);
  double waited = since(t0);
  ASSERT_TRUE(status.has_value()) << "not torn down within 2.5 s of the last heartbeat";
  EXPECT_GE(waited, 0.5);
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGTERM);
  // Its own end only closes what it said (its heartbeat reader may sit out its last read first;
  // a loaded CI machine once took more than 3 s): bounded, not timed.
  std::optional<int> dog = finish(10);
  EXPECT_EQ(dog, 0);
  EXPECT_EQ(out_, "msrun-ssh-watchdog: launcher lost\nkilled " + std::to_string(sleeper) +
                      " SIGTERM sleep 30 \n");
}

TEST_F(WatchdogCommand, AHostTooStarvedToReadInTimeDoesNotLoseTheLauncher) {
  // A host too starved of CPU to run the watchdog's read before its timer ran out: the first
  // `timeout` it starts (a stand-in first on PATH) lets the time pass without reading, while the
  // launcher's heartbeat waits in the pipe. The second read must find it (#15).
  std::string bin = dir_ + "/bin";
  ASSERT_EQ(::mkdir(bin.c_str(), 0700), 0);
  std::string once = dir_ + "/starved-once";
  write("bin/timeout", "#!/bin/sh\nif [ ! -e " + shell_quote(once) + " ]; then : > " +
                           shell_quote(once) +
                           "; sleep \"$1\"; exit 124; fi\nexec /usr/bin/timeout \"$@\"\n");
  ASSERT_EQ(::chmod((bin + "/timeout").c_str(), 0700), 0);
  pid_t sleeper = start_marked(job_, {"sleep", "30"}, "sleep");
  start(1.0, 0.5, {"PATH=" + bin + ":/usr/bin:/bin", "LC_ALL=C.UTF-8"});
  send(kBeat);
  ASSERT_TRUE(read_until(dog_.out, out_, 3, [](const std::string& b) { return !b.empty(); }));
  EXPECT_EQ(out_, "h\n") << "the starved watchdog gave up on a live launcher";
  EXPECT_EQ(::access(once.c_str(), F_OK), 0);  // the stand-in did starve the first read
  EXPECT_FALSE(wait_for(sleeper, 0).has_value());
  send(kKillNow);
  EXPECT_EQ(finish(3), 0);
}

TEST_F(WatchdogCommand, TeardownByteEndsTheJobAtOnce) {
  pid_t sleeper = start_marked(job_, {"sleep", "30"}, "sleep");
  pid_t bystander = start_marked(random_job_id(), {"sleep", "30"}, "sleep");
  start(30, 5);
  auto t0 = Clock::now();
  send(kTeardown);
  ASSERT_TRUE(killed_by(sleeper, SIGTERM, 1.5));
  EXPECT_LT(since(t0), 1.5);
  EXPECT_EQ(finish(3), 0);
  EXPECT_EQ(out_,
            "killed " + std::to_string(sleeper) + " SIGTERM sleep 30 \nmsrun-ssh-watchdog: done\n");
  EXPECT_FALSE(wait_for(bystander, 0.1).has_value());
}

// The state letter of /proc/PID/stat ('T': stopped).
char proc_state(pid_t pid) {
  std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
}

bool state_becomes(pid_t pid, char want, double timeout_s) {
  for (auto t0 = Clock::now(); since(t0) < timeout_s;) {
    if (proc_state(pid) == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return proc_state(pid) == want;
}

// The end of the suspend tests: 'r' continues `sleeper` (the watchdog says so), then a teardown
// ends it and the watchdog.
void WatchdogCommand::resume_then_tear_down(pid_t sleeper) {
  out_.clear();
  send(kResume);
  ASSERT_TRUE(read_line()) << out_;
  EXPECT_EQ(out_, std::string(kWatchdogResumed) + "\n");
  EXPECT_TRUE(state_becomes(sleeper, 'S', 2)) << proc_state(sleeper);
  out_.clear();
  send(kTeardown);
  ASSERT_TRUE(killed_by(sleeper, SIGTERM, 3));
  EXPECT_EQ(finish(3), 0);
}

TEST_F(WatchdogCommand, SuspendStopsTheJobWithoutATimeLimitAndResumeContinuesIt) {
  pid_t sleeper = start_marked(job_, {"sleep", "30"}, "sleep");
  start(1, 1);  // a launcher silent for 1 s would be lost, but not while suspended
  send(kSuspend);
  ASSERT_TRUE(read_line()) << out_;
  EXPECT_EQ(out_, std::string(kWatchdogPaused) + "\n");
  EXPECT_TRUE(state_becomes(sleeper, 'T', 2)) << proc_state(sleeper);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // over twice the silence
  EXPECT_EQ(proc_state(sleeper), 'T');
  EXPECT_FALSE(wait_for(dog_.pid, 0).has_value()) << "the watchdog gave up while suspended";
  resume_then_tear_down(sleeper);
}

// The launcher waits for every host's "paused" before it stops itself, and its heartbeats go on
// meanwhile: one that comes after the suspend is answered, and the job stays stopped.
TEST_F(WatchdogCommand, AHeartbeatAfterTheSuspendKeepsTheJobStopped) {
  pid_t sleeper = start_marked(job_, {"sleep", "30"}, "sleep");
  start(30, 1);
  send(kSuspend);
  ASSERT_TRUE(read_line()) << out_;
  EXPECT_EQ(out_, std::string(kWatchdogPaused) + "\n");
  ASSERT_TRUE(state_becomes(sleeper, 'T', 2)) << proc_state(sleeper);
  out_.clear();
  send(kBeat);
  ASSERT_TRUE(read_line()) << out_;
  EXPECT_EQ(out_, "h\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(proc_state(sleeper), 'T') << "a heartbeat resumed the suspended job";
  resume_then_tear_down(sleeper);
}

TEST_F(WatchdogCommand, ALauncherGoneWhileSuspendedContinuesTheJobAndTearsItDown) {
  pid_t sleeper = start_marked(job_, {"sleep", "30"}, "sleep");
  start(30, 1);
  send(kSuspend);
  ASSERT_TRUE(state_becomes(sleeper, 'T', 2));
  ::close(dog_.in);  // the launcher killed (SIGKILL) while the job is suspended
  std::erase(fds_, dog_.in);
  dog_.in = -1;
  // A stopped process would keep its SIGTERM pending: it is continued first, so SIGTERM ends it.
  ASSERT_TRUE(killed_by(sleeper, SIGTERM, 3));
  EXPECT_EQ(finish(5), 0);
  EXPECT_THAT(out_, HasSubstr(std::string(kWatchdogLost)));
}

TEST_F(WatchdogCommand, KillByteSendsSigkill) {
  pid_t sleeper = start_marked(job_, {"sleep", "30"}, "sleep");
  start(30, 5);
  send(kKillNow);
  ASSERT_TRUE(killed_by(sleeper, SIGKILL, 1.5));
  EXPECT_EQ(finish(3), 0);
  EXPECT_EQ(out_,
            "killed " + std::to_string(sleeper) + " SIGKILL sleep 30 \nmsrun-ssh-watchdog: done\n");
}

TEST_F(WatchdogCommand, KillByteDuringTeardownEndsTheGraceAtOnce) {
  // A process that ignores SIGTERM would hold the teardown for the whole grace (30 s here); a
  // second Ctrl-C ('K') must end the wait and SIGKILL it at once.
  pid_t stubborn = start_marked(job_, {"sh", "-c", "trap '' TERM; sleep 30"}, "sh");
  start(60, 30);
  send(kTeardown);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_FALSE(wait_for(stubborn, 0).has_value()) << "SIGTERM should have been ignored";
  auto t0 = Clock::now();
  send(kKillNow);
  ASSERT_TRUE(killed_by(stubborn, SIGKILL, 2)) << "'K' did not end the grace";
  EXPECT_LT(since(t0), 2);
  EXPECT_EQ(finish(3), 0);
}

TEST_F(WatchdogCommand, QuitWithNothingLeft) {
  start(30, 5);
  send(kQuit);
  EXPECT_EQ(finish(3), 0);
  EXPECT_EQ(out_, std::string(kWatchdogDone) + "\n");
}

TEST_F(WatchdogCommand, TheEndRemovesTheJobsStackDirectoryOnly) {
  // stack_site.sh's directory of this job goes; another job's stays, and so does what a link in
  // its place points to.
  std::string tmp = dir_ + "/tmp";
  ASSERT_EQ(::mkdir(tmp.c_str(), 0700), 0);
  std::string mine = tmp + "/msrun-ssh-stacks-" + job_;
  std::string other = tmp + "/msrun-ssh-stacks-job-2";
  ASSERT_EQ(::mkdir(mine.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir(other.c_str(), 0700), 0);
  write("tmp/msrun-ssh-stacks-" + job_ + "/sitecustomize.py", "x = 1\n");
  Words env = kShellEnv;
  env.push_back("TMPDIR=" + tmp);
  start(30, 5, env);
  send(kQuit);
  EXPECT_EQ(finish(3), 0);
  EXPECT_NE(::access(mine.c_str(), F_OK), 0) << "the job's directory is still there";
  EXPECT_EQ(::access(other.c_str(), F_OK), 0);
  // A link in the job's place is not followed.
  ASSERT_EQ(::symlink(other.c_str(), mine.c_str()), 0);
  out_.clear();
  start(30, 5, env);
  send(kKillNow);
  EXPECT_EQ(finish(3), 0);
  EXPECT_EQ(::access(other.c_str(), F_OK), 0);
  // Nor is another user's directory of that name removed (as root: one of nobody's).
  if (::geteuid() != 0) return;
  ASSERT_EQ(::unlink(mine.c_str()), 0);
  ASSERT_EQ(::mkdir(mine.c_str(), 0700), 0);
  ASSERT_EQ(::chown(mine.c_str(), 65534, 65534), 0);
  out_.clear();
  start(30, 5, env);
  send(kQuit);
  EXPECT_EQ(finish(3), 0);
  EXPECT_EQ(::access(mine.c_str(), F_OK), 0) << "another user's directory was removed";
  ASSERT_EQ(::chown(mine.c_str(), 0, 0), 0);
}

TEST_F(WatchdogCommand, MakesTheJobsStackDirectoryBeforeItIsReadySoProcessesForkNothingForIt) {
  std::string tmp = dir_ + "/tmp";
  ASSERT_EQ(::mkdir(tmp.c_str(), 0700), 0);
  std::string mine = tmp + "/msrun-ssh-stacks-" + job_;
  Words env = kShellEnv;
  env.push_back("TMPDIR=" + tmp);
  start(30, 5, env);
  EXPECT_EQ(slurp(mine + "/sitecustomize.py"), remote::kStackSitePy);
  EXPECT_EQ(fs::status(mine).permissions(), fs::perms::owner_all);
  // A process's stack_site.sh finds it made: with no mkdir or mv to run, it still gets it.
  std::string empty = dir_ + "/empty";
  ASSERT_EQ(::mkdir(empty.c_str(), 0700), 0);
  EXPECT_EQ(test::shell_output(shell_join(
                {"env", "-i", "PATH=" + empty, "TMPDIR=" + tmp, "MSRUN_SSH_JOB=" + job_, "/bin/sh",
                 "-c", stack_site_script(), "msrun-ssh-stacks", std::string(remote::kStackSitePy),
                 "/usr/bin/printenv", "MSRUN_SSH_STACK_DIR"})),
            mine + "\n");
  send(kQuit);
  EXPECT_EQ(finish(3), 0);
  EXPECT_NE(::access(mine.c_str(), F_OK), 0);
}

// Sends `sig` to `pid` and to every process below it (as a batch system ends a job step).
void signal_tree(pid_t pid, int sig) {
  std::string children = test::slurp(fmt::format("/proc/{}/task/{}/children", pid, pid));
  ::kill(pid, sig);
  std::istringstream in(children);
  for (pid_t child = 0; in >> child;) signal_tree(child, sig);
}

TEST_F(WatchdogCommand, SigtermToTheWatchdogKillsTheJobAtOnce) {
  // A batch system ending the watchdog's job step (scancel under --transport srun) sends SIGTERM
  // to the step's processes: what the job runs here, a grandchild in a session of its own too,
  // is killed.
  pid_t sleeper = start_marked(job_, {"/bin/sh", "-c", "setsid sleep 31 & exec sleep 30"}, "sleep");
  start(30, 5);
  // The step's end finds the watchdog waiting in its read (timeout + dd).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto t0 = Clock::now();
  signal_tree(dog_.pid, SIGTERM);
  EXPECT_EQ(finish(3), 0);
  EXPECT_THAT(out_, HasSubstr("msrun-ssh-watchdog: terminated\n"));
  ASSERT_TRUE(killed_by(sleeper, SIGKILL, 1)) << "not killed at the SIGTERM: " << out_;
  EXPECT_LT(since(t0), 4);
  for (auto t1 = Clock::now(); !marked(job_).empty() && since(t1) < 2;)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(marked(job_).empty()) << "the grandchild in its own session survived";
}

TEST_F(WatchdogCommand, ClosedStdinTearsDownWithoutWaitingForTheTimeout) {
  pid_t sleeper = start_marked(job_, {"sleep", "30"}, "sleep");
  start(30, 0.4);
  auto t0 = Clock::now();
  close(dog_.in);
  std::erase(fds_, dog_.in);
  ASSERT_TRUE(wait_for(sleeper, 2).has_value());
  EXPECT_LT(since(t0), 2);
  EXPECT_EQ(finish(3), 0);
  EXPECT_EQ(out_, "msrun-ssh-watchdog: launcher lost\nkilled " + std::to_string(sleeper) +
                      " SIGTERM sleep 30 \n");
}

TEST_F(WatchdogCommand, HostileJobIdIsOneWord) {
  job_ = "x'; touch pwned; echo '$(touch pwned2)";
  start(30, 0.4);
  send(kQuit);
  EXPECT_EQ(finish(3), 0);
  EXPECT_EQ(out_, "msrun-ssh-watchdog: done\n");
  EXPECT_FALSE(fs::exists(dir_ + "/pwned"));
  EXPECT_FALSE(fs::exists(dir_ + "/pwned2"));
}

TEST_F(WatchdogCommand, UnknownByteCountsAsLost) {
  start(30, 0.4);
  send('x');
  EXPECT_EQ(finish(3), 0);
  EXPECT_EQ(out_, std::string(kWatchdogLost) + "\n");
}

// Whether `pid` has ended (gone, or a zombie nobody reaped yet), waiting at most `timeout_s`.
bool ends_within(pid_t pid, double timeout_s) {
  auto t0 = Clock::now();
  while (since(t0) <= timeout_s) {
    std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    size_t paren = stat.rfind(')');
    if (stat.empty() || (paren != std::string::npos && stat.substr(paren + 2, 1) == "Z"))
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// The first child of `pid` (from /proc), waiting at most 5 s for one to appear; -1 if none.
pid_t first_child(pid_t pid) {
  std::string path = fmt::format("/proc/{}/task/{}/children", pid, pid);
  for (auto t0 = Clock::now(); since(t0) < 5;) {
    std::istringstream in(slurp(path));
    pid_t child = -1;
    if (in >> child) return child;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

// A host whose login rc takes seconds: sshd runs `$SHELL -c COMMAND` as a session leader, and the
// shell reads its rc before COMMAND; no process carries the job's marker in its environment yet.
// The sweep finds the shell by its command line and ends its process group, the rc's children
// with it, and the command never starts.
TEST_F(WatchdogCommand, TeardownEndsAShellStillInItsLoginRcWithWhatTheRcStarted) {
  Process p;
  p.workdir = dir_;
  p.argv = {"/bin/sh", "-c", "echo ran > ran"};
  std::string login = "sleep 30\n" + process_command(p, job_);  // the rc, then the command
  Child shell = spawn({"/usr/bin/setsid", "/bin/sh", "-c", login}, kShellEnv, dir_, false);
  pid_t rc = first_child(shell.pid);
  ASSERT_GT(rc, 0) << "the rc's sleep did not start";
  start(30, 5);
  send(kTeardown);
  ASSERT_TRUE(killed_by(shell.pid, SIGTERM, 3)) << "the login shell survived the teardown";
  EXPECT_TRUE(ends_within(rc, 3)) << "the rc's child survived the teardown";
  EXPECT_EQ(finish(3), 0);
  EXPECT_NE(out_.find("killed " + std::to_string(shell.pid) + " SIGTERM /bin/sh -c sleep 30"),
            std::string::npos)
      << out_;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(fs::exists(dir_ + "/ran")) << "the command ran after the teardown";
}

// A process of the job that leads a process group takes its group with it: a child that
// cleared its environment (env -i) carries no marker, but shares the group.
TEST_F(WatchdogCommand, TeardownReachesTheGroupOfAMarkedGroupLeader) {
  Child leader = spawn({"/usr/bin/setsid", "/usr/bin/env", std::string(kJobMarker) + "=" + job_,
                        "/bin/sh", "-c", "env -i /bin/sleep 31 & wait"},
                       kShellEnv, dir_, false);
  pid_t unmarked = first_child(leader.pid);
  ASSERT_GT(unmarked, 0);
  wait_exec(unmarked, "/bin/sleep");
  start(30, 5);
  send(kTeardown);
  EXPECT_TRUE(wait_for(leader.pid, 3).has_value());
  EXPECT_TRUE(ends_within(unmarked, 3)) << "the unmarked group member survived";
  EXPECT_EQ(finish(3), 0);
}

// A launcher that vanished cannot end a command whose exec reached sshd just before: after its
// teardown the watchdog keeps sweeping for a second.
TEST_F(WatchdogCommand, AfterLosingTheLauncherLateCommandsAreStillEnded) {
  start(30, 0.2);
  close(dog_.in);
  std::erase(fds_, dog_.in);
  ASSERT_TRUE(read_until(dog_.out, out_, 3, [](const std::string& b) {
    return b.find("launcher lost\n") != std::string::npos;
  })) << out_;
  // Nothing to end: the teardown's sweep is over within milliseconds; the late one comes after.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  pid_t late = start_marked(job_, {"sleep", "30"}, "sleep");
  ASSERT_TRUE(killed_by(late, SIGKILL, 2)) << "a command started after the first sweep survived";
  EXPECT_EQ(finish(3), 0);
}

}  // namespace
}  // namespace msrun_ssh
