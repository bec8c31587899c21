// Stacks on demand (src/stacks/): stack.sh's answer parsed, the report grouped, the batch over a
// scripted transport, and the remote programs for real: stack_site.sh + stack_site.py start a
// local python3 that blocks in a known function, and stack.sh finds it, dumps its stack without
// ending it, and says what it can of a process that is not Python.
#include "msrun_ssh/stacks.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "msrun_ssh/command.h"
#include "msrun_ssh/output.h"
#include "msrun_ssh/plan.h"
#include "remote/programs.h"
#include "reply_transport.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

using ::testing::HasSubstr;

// Host n1's answer: a login script's noise, ranks 0 and 1 in the same place (other thread ids),
// rank 2 elsewhere, the scheduler, a process that is not Python, then the end.
const char* kAnswer =
    "Welcome to n1\n"
    "host n1\n"
    "gdb yes\n"
    "proc 101 0 S do_epoll_wait python3\n"
    "py Current thread 0x00007f0000000001 (most recent call first):\n"
    "py   File \"/job/train.py\", line 12 in collective\n"
    "py   File \"/job/train.py\", line 30 in <module>\n"
    "proc 102 1 S do_epoll_wait python3\n"
    "py Current thread 0x00007f0000000002 (most recent call first):\n"
    "py   File \"/job/train.py\", line 12 in collective\n"
    "py   File \"/job/train.py\", line 30 in <module>\n"
    "proc 103 2 S sk_wait_data python3\n"
    "py Current thread 0x00007f0000000003 (most recent call first):\n"
    "py   File \"/job/train.py\", line 7 in wait_for_peer\n"
    "py   File \"/job/train.py\", line 28 in <module>\n"
    "proc 100 sched D - my data loader\n"
    "note no Python stack: not a Python process with stack dumps\n"
    "native Thread 1 (Thread 0x7f11 (LWP 100) \"loader\"):\n"
    "native #0  0x00007f22 in read ()\n"
    "end\n";

TEST(Stacks, ParsesEveryRecordAndIgnoresNoise) {
  HostStacks h = parse_stacks(kAnswer);
  EXPECT_EQ(h.name, "n1");
  EXPECT_TRUE(h.gdb);
  EXPECT_TRUE(h.complete);
  ASSERT_EQ(h.processes.size(), 4u);
  const StackProcess& r2 = h.processes[2];
  EXPECT_EQ(r2.pid, 103);
  EXPECT_EQ(r2.rank, 2);
  EXPECT_EQ(r2.state, "S");
  EXPECT_EQ(r2.wchan, "sk_wait_data");
  EXPECT_EQ(r2.command, "python3");
  EXPECT_EQ(r2.python,
            (std::vector<std::string>{"Current thread 0x00007f0000000003 (most recent call first):",
                                      "  File \"/job/train.py\", line 7 in wait_for_peer",
                                      "  File \"/job/train.py\", line 28 in <module>"}));
  const StackProcess& sched = h.processes[3];
  EXPECT_EQ(sched.rank, -1);
  EXPECT_EQ(sched.wchan, "-");
  EXPECT_EQ(sched.command, "my data loader");
  EXPECT_TRUE(sched.python.empty());
  EXPECT_EQ(sched.native.size(), 2u);
  EXPECT_EQ(sched.notes,
            (std::vector<std::string>{"no Python stack: not a Python process with stack dumps"}));
}

TEST(Stacks, AnswerWithoutItsEndIsIncomplete) {
  std::string cut(kAnswer);
  cut = cut.substr(0, cut.find("end\n"));
  HostStacks h = parse_stacks(cut);
  EXPECT_FALSE(h.complete);
  EXPECT_EQ(h.processes.size(), 4u);
  // An unreadable process line starts no process: its lines are not given to the one before.
  h = parse_stacks("host n\nproc x 1 S - a\npy line\nend\n");
  EXPECT_TRUE(h.processes.empty());
  // Nor does one whose pid is not a process's (0, negative: host_answers_fuzz).
  h = parse_stacks("host n\nproc 0 1 S - a\npy line\nproc -3 1 S - a\nend\n");
  EXPECT_TRUE(h.processes.empty());
  h = parse_stacks("host n\nproc 5 - S - a\npy \nend\n");
  ASSERT_EQ(h.processes.size(), 1u);
  EXPECT_EQ(h.processes[0].rank, std::nullopt);
  EXPECT_EQ(h.processes[0].python, (std::vector<std::string>{""}));
}

TEST(Stacks, ProcessesStayInTheHostsOrderWithTheirOwnLines) {
  // An answer out of pid order (host_answers_fuzz): each process keeps its own stack.
  HostStacks h = parse_stacks(
      "host n\nproc 90 1 S - python3\npy b\nproc 7 0 S - python3\npy a\nproc 90 2 S - x\nend\n");
  ASSERT_EQ(h.processes.size(), 3u);
  EXPECT_EQ(h.processes[0].pid, 90);
  EXPECT_EQ(h.processes[0].python, (std::vector<std::string>{"b"}));
  EXPECT_EQ(h.processes[1].pid, 7);
  EXPECT_EQ(h.processes[1].python, (std::vector<std::string>{"a"}));
  EXPECT_EQ(h.processes[2].rank, 2);
  EXPECT_TRUE(h.processes[2].python.empty());
}

TEST(Stacks, ReportGroupsIdenticalStacksUnderTheirRankSet) {
  HostStacks n1 = parse_stacks(kAnswer);
  n1.address = "198.18.1.10";
  HostStacks n2 = parse_stacks(
      "host n2\ngdb no\n"
      "proc 201 3 S do_epoll_wait python3\n"
      "py Current thread 0x00007f0000000009 (most recent call first):\n"
      "py   File \"/job/train.py\", line 12 in collective\n"
      "py   File \"/job/train.py\", line 30 in <module>\n"
      "proc 202 4 T do_signal_stop sleep\n"
      "note no Python stack: not a Python process with stack dumps\n"
      "note no native stack tool (gdb is not installed)\n"
      "end\n");
  n2.address = "198.18.1.11";
  HostStacks n3;
  n3.address = "198.18.1.12";
  n3.trouble = "unreachable: Connection refused";
  EXPECT_EQ(
      format_stack_report("job-1", {n1, n2, n3}),
      "stacks of job job-1: 6 processes on 3 hosts\n"
      "host 198.18.1.10 (n1): 4 processes\n"
      "  rank 0 (pid 101) S (sleeping) wchan do_epoll_wait python3: Python stack\n"
      "  rank 1 (pid 102) S (sleeping) wchan do_epoll_wait python3: Python stack\n"
      "  rank 2 (pid 103) S (sleeping) wchan sk_wait_data python3: Python stack\n"
      "  scheduler (pid 100) D (uninterruptible) wchan - my data loader: native stack (no Python "
      "stack: not a Python process with stack dumps)\n"
      "host 198.18.1.11 (n2): 2 processes, no native stack tool\n"
      "  rank 3 (pid 201) S (sleeping) wchan do_epoll_wait python3: Python stack\n"
      "  rank 4 (pid 202) T (stopped) wchan do_signal_stop sleep: no stack (no Python stack: not "
      "a Python process with stack dumps; no native stack tool (gdb is not installed))\n"
      "host 198.18.1.12: unreachable: Connection refused\n"
      "--- Python stacks of ranks 0-1,3 (3 processes), e.g. rank 0 (pid 101) on 198.18.1.10 ---\n"
      "Current thread 0x00007f0000000001 (most recent call first):\n"
      "  File \"/job/train.py\", line 12 in collective\n"
      "  File \"/job/train.py\", line 30 in <module>\n"
      "--- Python stacks of rank 2 (pid 103) on 198.18.1.10 ---\n"
      "Current thread 0x00007f0000000003 (most recent call first):\n"
      "  File \"/job/train.py\", line 7 in wait_for_peer\n"
      "  File \"/job/train.py\", line 28 in <module>\n"
      "--- native stacks of scheduler (pid 100) on 198.18.1.10 ---\n"
      "Thread 1 (Thread 0x7f11 (LWP 100) \"loader\"):\n"
      "#0  0x00007f22 in read ()\n");
}

// The report of job "j" from host "n" whose stack.sh printed `processes` (with gdb).
std::string report_of(const std::string& processes) {
  HostStacks h = parse_stacks("host n\ngdb yes\n" + processes + "end\n");
  h.address = "n";
  return format_stack_report("j", {h});
}

TEST(Stacks, NativeStacksGroupWithAddressesAndLwpsBlurred) {
  std::string report = report_of(
      "proc 7 0 S - sleep\nnative Thread 1 (Thread 0x7f01 (LWP 7) \"sleep\"):\n"
      "native #0  0x00007fa1 in nanosleep (req=0x7ffc10) at x.c:71\n"
      "proc 8 1 S - sleep\nnative Thread 1 (Thread 0x7f02 (LWP 8) \"sleep\"):\n"
      "native #0  0x00007fb2 in nanosleep (req=0x7ffd20) at x.c:71\n"
      "proc 9 2 S - sleep\nnative Thread 1 (Thread 0x7f03 (LWP 9) \"sleep\"):\n"
      "native #0  0x00007fc3 in nanosleep (req=0x7ffe30) at x.c:72\n");
  EXPECT_THAT(report, HasSubstr("--- native stacks of ranks 0-1 (2 processes), e.g. rank 0 (pid 7) "
                                "on n ---\n"));
  EXPECT_THAT(report, HasSubstr("--- native stacks of rank 2 (pid 9) on n ---\n"));
}

TEST(Stacks, ProcessesOfOneRankAndOnesWithoutARank) {
  // A rank's child (a data loader worker) has its rank; a process without one stands alone.
  std::string report = report_of(
      "proc 7 0 S - python3\npy   File \"a.py\", line 1 in f\n"
      "proc 8 0 S - python3\npy   File \"a.py\", line 1 in f\n"
      "proc 9 - S - python3\npy   File \"a.py\", line 1 in f\n");
  EXPECT_THAT(report, HasSubstr("  pid 9 S (sleeping) wchan - python3: Python stack\n"));
  EXPECT_THAT(report, HasSubstr("--- Python stacks of rank 0 (2 processes), e.g. rank 0 (pid 7) "
                                "on n ---\n  File \"a.py\", line 1 in f\n"
                                "--- Python stacks of pid 9 on n ---\n"));
}

TEST(Stacks, NoProcessOfTheJob) {
  HostStacks h = parse_stacks("host n\ngdb yes\nend\n");
  h.address = "n";
  EXPECT_EQ(format_stack_report("j", {h, h}),
            "stacks of job j: no process of the job on these hosts\n");
  HostStacks lost;
  lost.address = "m";
  lost.trouble = "unreachable: timed out";
  EXPECT_EQ(format_stack_report("j", {h, lost}),
            "stacks of job j: 0 processes on 2 hosts\n"
            "host n: no process of the job\n"
            "host m: unreachable: timed out\n");
}

TEST(Stacks, CommandRunsStackShWithTheJobAndItsBounds) {
  EXPECT_EQ(stack_command("j'1", 2, 10), fmt::format("exec sh -c {} msrun-ssh-stack 'j'\\''1' 2 10",
                                                     shell_quote(remote::kStackSh)));
}

// ---- the batch ----------------------------------------------------------------------------

TEST(StacksOnHosts, OneCommandPerReachedHostAndTroubleForTheOthers) {
  fake::ReplyTransport t;
  fake::Reply answer{{{0.1, kAnswer}}};
  answer.exit_at = 0.2;
  t.on("msrun-ssh-stack", answer, 0);
  fake::Reply stuck{{{0.1, "host n2\ngdb no\nproc 5 3 S - x\n"}}};
  stuck.exit_at = -1;
  t.on("msrun-ssh-stack", stuck, 2);
  auto hosts = stacks_on_hosts(t, {"a", "b", "c"}, {"", "Connection refused", ""}, "job-1");
  ASSERT_EQ(hosts.size(), 3u);
  ASSERT_EQ(t.execs.size(), 2u);
  EXPECT_EQ(t.execs[0].command, stack_command("job-1", 2, 10));
  EXPECT_EQ(hosts[0].address, "a");
  EXPECT_EQ(hosts[0].trouble, "");
  EXPECT_EQ(hosts[0].processes.size(), 4u);
  EXPECT_EQ(hosts[1].address, "b");
  EXPECT_EQ(hosts[1].trouble, "unreachable: Connection refused");
  // Host c never ended: killed at the batch's bound, what it said is kept.
  EXPECT_EQ(hosts[2].address, "c");
  EXPECT_EQ(hosts[2].trouble, "no complete answer within 20 s");
  EXPECT_EQ(hosts[2].processes.size(), 1u);
  EXPECT_EQ(t.now_ms(), 20000);
}

// ---- the remote programs, for real --------------------------------------------------------

std::string random_job() {
  std::random_device rd;
  return fmt::format("unit-stack-{:08x}", rd());
}

// Processes started through stack_site.sh, as a job's are, with TMPDIR in the test's directory
// (the job's stack directory goes there) and a user sitecustomize of their own on PYTHONPATH.
class StackPrograms : public test::TempDirTest {
 protected:
  void SetUp() override {
    user_ = dir_ + "/user";
    ASSERT_EQ(::mkdir(user_.c_str(), 0700), 0);
    write("user/sitecustomize.py",
          fmt::format("open({}, 'w').write('user ran')\n", py_string(dir_ + "/user-ran")));
  }

  void TearDown() override {
    for (int pid : pids_) ::kill(pid, SIGKILL);
  }

  static std::string py_string(const std::string& s) { return "'" + s + "'"; }

  // The environment of a process of job_ with rank `rank`, as `env` words, and `more` words.
  std::string env_words(const std::string& rank, const std::vector<std::string>& more = {}) const {
    std::vector<std::string> words{"env",
                                   "-i",
                                   "PATH=/usr/bin:/bin",
                                   std::string(kJobMarker) + "=" + job_,
                                   "RANK_ID=" + rank,
                                   "TMPDIR=" + dir_,
                                   "PYTHONPATH=" + user_};
    words.insert(words.end(), more.begin(), more.end());
    return shell_join(words);
  }

  // Starts `argv` in the background through stack_site.sh; its output goes to dir_/NAME.out.
  int start(const std::string& rank, const std::vector<std::string>& argv, const std::string& name,
            const std::vector<std::string>& env = {}) {
    std::vector<std::string> words{"sh", "-c", stack_site_script(), "msrun-ssh-stacks",
                                   std::string(remote::kStackSitePy)};
    words.insert(words.end(), argv.begin(), argv.end());
    std::string pid = test::shell_output(fmt::format("{} {} > {} 2>&1 < /dev/null & echo $!",
                                                     env_words(rank, env), shell_join(words),
                                                     shell_quote(dir_ + "/" + name + ".out")));
    pids_.push_back(std::stoi(pid));
    return pids_.back();
  }

  // Waits (at most 10 s) until dir_/NAME.out holds `text`.
  bool wait_for_output(const std::string& name, const std::string& text) {
    for (int i = 0; i < 1000; ++i) {
      if (test::slurp(dir_ + "/" + name + ".out").find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  std::string job_ = random_job();
  std::string user_;
  std::vector<int> pids_;
};

// Rank 2 blocks in wait_for_peer (a socket's recv), a second thread elsewhere.
const char* kPeer =
    "import socket, sys, threading, time\n"
    "def side():\n"
    "    time.sleep(600)\n"
    "def wait_for_peer(s):\n"
    "    s.recv(1)\n"
    "threading.Thread(target=side, daemon=True).start()\n"
    "a, b = socket.socketpair()\n"
    "print('ready', flush=True)\n"
    "wait_for_peer(a)\n"
    "print('after', flush=True)\n";

// Native backtraces: as many gdb at once as the host has CPUs (at least 2), not one per process
// at once (a rank's forked workers' gdbs took longer than the launcher waits, and the host's
// whole answer was lost). A stand-in gdb records when it ran.
TEST_F(StackPrograms, NativeBacktracesRunAsManyAtOnceAsTheHostHasCpus) {
  const std::string bin = dir_ + "/bin";
  ASSERT_EQ(::mkdir(bin.c_str(), 0700), 0);
  write("bin/gdb", fmt::format("#!/bin/sh\necho \"$(date +%s.%N) 1\" >> {0}/gdb.log\nsleep 1\n"
                               "echo '#0  0x0 in fake ()'\necho \"$(date +%s.%N) -1\" >> "
                               "{0}/gdb.log\n",
                               dir_));
  ASSERT_EQ(::chmod((bin + "/gdb").c_str(), 0755), 0);
  for (int i = 0; i < 5; ++i) start(std::to_string(i), {"sleep", "600"}, fmt::format("s{}", i));
  HostStacks h = parse_stacks(test::shell_output(
      fmt::format("PATH={}:$PATH; export PATH; {}", bin, stack_command(job_, 1, 10))));
  ASSERT_TRUE(h.complete);
  ASSERT_EQ(h.processes.size(), 5u);
  for (const auto& p : h.processes) EXPECT_FALSE(p.native.empty()) << p.pid;
  std::vector<std::pair<double, int>> events;
  std::istringstream log(test::slurp(dir_ + "/gdb.log"));
  for (double at = 0; log >> at;) {
    int change = 0;
    log >> change;
    events.emplace_back(at, change);
  }
  ASSERT_EQ(events.size(), 10u);
  std::sort(events.begin(), events.end());
  int now = 0, most = 0;
  for (const auto& [at, change] : events) most = std::max(most, now += change);
  long cpus = std::max(2L, ::sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_LE(most, cpus);
}

TEST_F(StackPrograms, DumpsThePythonStackOfEveryThreadAndTheProcessGoesOn) {
  std::string script = write("peer.py", kPeer);
  int py = start("2", {"/usr/bin/python3", script}, "peer");
  int sh = start("5", {"sleep", "600"}, "sleep");
  ASSERT_TRUE(wait_for_output("peer", "ready\n")) << test::slurp(dir_ + "/peer.out");
  // The user's own sitecustomize ran too.
  EXPECT_EQ(test::slurp(dir_ + "/user-ran"), "user ran");

  HostStacks h = parse_stacks(test::shell_output(stack_command(job_, 2, 10)));
  EXPECT_TRUE(h.complete);
  ASSERT_EQ(h.processes.size(), 2u);
  const StackProcess& p = h.processes[0].pid == py ? h.processes[0] : h.processes[1];
  const StackProcess& s = h.processes[0].pid == py ? h.processes[1] : h.processes[0];
  EXPECT_EQ(p.pid, py);
  EXPECT_EQ(p.rank, 2);
  EXPECT_EQ(p.state, "S");
  std::string dump = fmt::format("{}\n", fmt::join(p.python, "\n"));
  EXPECT_THAT(dump, HasSubstr(fmt::format("  File \"{}\", line 5 in wait_for_peer\n", script)));
  EXPECT_THAT(dump, HasSubstr(fmt::format("  File \"{}\", line 3 in side\n", script)));
  EXPECT_TRUE(p.notes.empty()) << p.notes[0];

  EXPECT_EQ(s.pid, sh);
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.command, "sleep");
  ASSERT_FALSE(s.notes.empty());
  EXPECT_EQ(s.notes[0], "no Python stack: not a Python process with stack dumps");
  if (h.gdb)
    EXPECT_TRUE(!s.native.empty() ||
                (s.notes.size() == 2 && s.notes[1].starts_with("no native stack: gdb gave none")))
        << s.notes.back();
  else
    EXPECT_EQ(s.notes.back(), "no native stack tool (gdb is not installed)");

  // Both still run: the dump ended nothing.
  EXPECT_EQ(::kill(py, 0), 0);
  EXPECT_EQ(::kill(sh, 0), 0);
  // A second dump holds only the new stacks.
  h = parse_stacks(test::shell_output(stack_command(job_, 2, 10)));
  for (const auto& q : h.processes) {
    if (q.pid != py) continue;
    EXPECT_EQ(std::count(q.python.begin(), q.python.end(),
                         fmt::format("  File \"{}\", line 5 in wait_for_peer", script)),
              1);
  }
}

// A job restarted with --max_restarts runs attempt K as ID-K: `stack --job ID` shows its processes
// (it said "no process of the job" from the second attempt on); another job's are not shown.
TEST_F(StackPrograms, ALaterAttemptsProcessesAreTheJobs) {
  auto start_marked = [&](const std::string& job, const std::string& rank) {
    std::string pid = test::shell_output(fmt::format(
        "env -i PATH=/usr/bin:/bin {}={} RANK_ID={} sleep 600 < /dev/null > /dev/null 2>&1 & "
        "echo $!",
        kJobMarker, job, rank));
    pids_.push_back(std::stoi(pid));
    return pids_.back();
  };
  int third = start_marked(job_ + "-3", "4");
  start_marked(job_ + "x", "5");
  HostStacks h;
  for (int i = 0; i < 100; ++i) {  // until the sleep has exec'd (its environ is the job's)
    h = parse_stacks(test::shell_output(stack_command(job_, 0.5, 5)));
    if (!h.processes.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(h.processes.size(), 1u);
  EXPECT_EQ(h.processes[0].pid, third);
  EXPECT_EQ(h.processes[0].rank, 4);
}

TEST_F(StackPrograms, PythonPathKeepsWhatTheEnvironmentHadAndNothingRegistersWithoutTheJob) {
  // stack_site.sh puts the job's directory first and exports where it is.
  const char* show =
      "import os, sitecustomize\n"
      "print(sitecustomize.__file__)\n"
      "print(os.environ['PYTHONPATH'])\n"
      "print(os.environ['MSRUN_SSH_STACK_DIR'])\n"
      "m = [l for l in open('/proc/self/status') if l.startswith('SigCgt:')][0].split()[1]\n"
      "print(int(m, 16) >> 11 & 1)\n";
  std::string script = write("show.py", show);
  start("0", {"/usr/bin/python3", script}, "show");
  std::string stack_dir = dir_ + "/msrun-ssh-stacks-" + job_;
  ASSERT_TRUE(wait_for_output("show", "\n1\n")) << test::slurp(dir_ + "/show.out");
  EXPECT_EQ(test::slurp(dir_ + "/show.out"),
            fmt::format("{}/sitecustomize.py\n{}:{}\n{}\n1\n", user_, stack_dir, user_, stack_dir));
  struct stat st {};
  ASSERT_EQ(::stat(stack_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(test::slurp(stack_dir + "/sitecustomize.py"), remote::kStackSitePy);

  // The same sitecustomize without MSRUN_SSH_STACK_DIR: SIGUSR2 stays at its default.
  std::string out = test::shell_output(
      shell_join({"env", "-i", "PATH=/usr/bin:/bin", "PYTHONPATH=" + stack_dir + ":" + user_,
                  "/usr/bin/python3", "-c",
                  "import signal; m = [l for l in open('/proc/self/status') if "
                  "l.startswith('SigCgt:')][0].split()[1]; print(int(m, 16) >> 11 & 1)"}));
  EXPECT_EQ(out, "0\n");
}

TEST_F(StackPrograms, AFailingUserSitecustomizeBehavesAsWithoutUs) {
  write("user/sitecustomize.py", "raise RuntimeError('boom')\n");
  const std::string code = "print('main ran')";
  std::string alone =
      test::shell_output(shell_join({"env", "-i", "PATH=/usr/bin:/bin", "PYTHONPATH=" + user_,
                                     "/usr/bin/python3", "-c", code}) +
                         " 2>&1");
  start("0", {"/usr/bin/python3", "-c", code}, "boom");
  // "main ran" is the last the process writes.
  ASSERT_TRUE(wait_for_output("boom", "main ran\n")) << test::slurp(dir_ + "/boom.out");
  EXPECT_THAT(alone, HasSubstr("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                               "RuntimeError: boom\n"));
  EXPECT_EQ(test::slurp(dir_ + "/boom.out"), alone);
}

// --contract torch: TORCHELASTIC_ERROR_FILE names a file in the job's directory on the host, and
// what @record wrote there comes back on stderr at exit as one line Output takes (output.h).
TEST_F(StackPrograms, RelaysTheTorchErrorFileAtExit) {
  const std::string file = std::string(kJobDirToken) + "/error-rank3.json";
  const std::string job_dir = dir_ + "/msrun-ssh-stacks-" + job_;
  // What torch.distributed.elastic's @record does when main raises, without importing torch.
  std::string script =
      write("fail.py",
            "import json, os, sys, time\n"
            "path = os.environ['TORCHELASTIC_ERROR_FILE']\n"
            "print(path, flush=True)\n"
            "stale = os.path.exists(path)\n"
            "with open(path, 'w') as f:\n"
            "    json.dump({'message': {'message': 'ValueError: bad batch',\n"
            "               'extraInfo': {'py_callstack': 'Traceback (most recent call "
            "last):\\n  File \\\"t.py\\\", line 1\\nValueError: bad batch\\n',\n"
            "                             'timestamp': '1764669600'}}}, f)\n"
            "print('stale' if stale else 'fresh', flush=True)\n"
            "raise ValueError('bad batch')\n");
  // A file an earlier process of the rank left is gone before this one starts.
  ASSERT_EQ(::mkdir(job_dir.c_str(), 0700), 0);
  write("msrun-ssh-stacks-" + job_ + "/error-rank3.json", "{\"message\": \"old\"}");
  start("3", {"/usr/bin/python3", script}, "fail", {"TORCHELASTIC_ERROR_FILE=" + file});
  ASSERT_TRUE(wait_for_output("fail", "msrun-ssh: error file: "))
      << test::slurp(dir_ + "/fail.out");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the rest of the line
  std::string out = test::slurp(dir_ + "/fail.out");
  EXPECT_THAT(out, HasSubstr(job_dir + "/error-rank3.json\nfresh\n"));
  size_t at = out.find(kErrorFileLine);
  std::string line =
      out.substr(at + kErrorFileLine.size(), out.find('\n', at) - at - kErrorFileLine.size());
  std::optional<ErrorFile> got = parse_error_file(line);
  ASSERT_TRUE(got) << line;
  EXPECT_EQ(got->message, "ValueError: bad batch");
  EXPECT_EQ(got->timestamp, 1764669600);
  ASSERT_EQ(got->traceback.size(), 3u);
  EXPECT_EQ(got->traceback[2], "ValueError: bad batch");
  // After Python's own traceback: the file is relayed at exit.
  EXPECT_LT(out.find("Traceback (most recent call last):"), at);
}

// Without the job's directory, the variable is not left naming a file nobody can write.
TEST_F(StackPrograms, NoJobDirectoryLeavesNoErrorFileVariable) {
  std::string script = write("env.py",
                             "import os\nprint(os.environ.get('TORCHELASTIC_ERROR_FILE', 'unset'), "
                             "flush=True)\n");
  write("msrun-ssh-stacks-" + job_, "");  // the job's directory cannot be made: a file is there
  start("1", {"/usr/bin/python3", script}, "env",
        {"TORCHELASTIC_ERROR_FILE=" + std::string(kJobDirToken) + "/error-rank1.json"});
  bool done = false;
  for (int i = 0; i < 500 && !done; ++i) {
    done = test::slurp(dir_ + "/env.out").find('\n') != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(test::slurp(dir_ + "/env.out"), "unset\n");
}

}  // namespace
}  // namespace msrun_ssh
