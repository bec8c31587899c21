// The straggler watch (src/watch/watch.cc, src/remote/sampler.pl): the sampler's lines, the rates
// between two samples, the rule, and the sampler itself run here.
#include "msrun_ssh/watch.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "msrun_ssh/base.h"
#include "msrun_ssh/command.h"
#include "reply_transport.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

namespace fs = std::filesystem;

// A host's sample at `t` s: ranks as (rank, cpu ticks, wait ns, throttled ns); steal ticks.
HostSample sample(double t,
                  const std::vector<std::tuple<std::string, double, double, double>>& ranks,
                  double steal = 0) {
  HostSample s;
  s.t = t;
  s.cpu = {100 * t, 0, 0, 100 * t, 0, 0, 0, steal};
  for (const auto& [rank, cpu, wait, thr] : ranks)
    s.ranks.push_back({rank, 1, cpu, wait, 1000, thr, "S"});
  return s;
}

TEST(WatchSample, ParsesTheSamplersLine) {
  auto s = parse_sample(
      R"({"t":28752.83,"hz":100,"cpu":[691352,548965,193390,4291188,4383,0,6901,3407],"load":0.25,)"
      R"("mem_kb":[24683664,24221628],"ranks":[{"rank":"3","pids":2,"cpu":150,"wait_ns":145774,)"
      R"("rss_kb":1668,"thr_ns":-1,"state":"R"},{"rank":"sched","pids":1,"cpu":1,"wait_ns":0,)"
      R"("rss_kb":1,"thr_ns":5,"state":"S"}],"accel":[35,0.5]})");
  ASSERT_TRUE(s);
  EXPECT_DOUBLE_EQ(s->t, 28752.83);
  EXPECT_EQ(s->cpu.size(), 8u);
  EXPECT_EQ(s->mem_total_kb, 24683664);
  EXPECT_EQ(s->mem_avail_kb, 24221628);
  ASSERT_EQ(s->ranks.size(), 2u);
  EXPECT_EQ(s->ranks[0].rank, "3");
  EXPECT_EQ(s->ranks[0].pids, 2);
  EXPECT_DOUBLE_EQ(s->ranks[0].cpu_ticks, 150);
  EXPECT_DOUBLE_EQ(s->ranks[0].throttled_ns, -1);
  EXPECT_EQ(s->ranks[0].state, "R");
  EXPECT_DOUBLE_EQ(s->ranks[1].throttled_ns, 5);
  EXPECT_EQ(s->accel, (std::vector<double>{35, 0.5}));
  // Numbers beyond the fields' types (a broken or hostile host) stay within them.
  auto odd = parse_sample(
      R"({"t":1,"mem_kb":[1e300,-1e300],"ranks":[{"rank":"0","pids":1e19,"rss_kb":-1e300}]})");
  ASSERT_TRUE(odd);
  EXPECT_EQ(odd->mem_total_kb, std::numeric_limits<long>::max());
  EXPECT_EQ(odd->mem_avail_kb, std::numeric_limits<long>::min());
  ASSERT_EQ(odd->ranks.size(), 1u);
  EXPECT_EQ(odd->ranks[0].pids, std::numeric_limits<int>::max());
  EXPECT_EQ(odd->ranks[0].rss_kb, std::numeric_limits<long>::min());
  EXPECT_FALSE(parse_sample("msrun-ssh: not a sample"));
  EXPECT_FALSE(parse_sample(R"({"t": 1})"));
}

TEST(WatchSample, RatesBetweenTwoSamples) {
  // Over 2 s: rank 0 used 1.5 s of CPU (150 ticks), waited 0.4 s, its cgroup throttled 1 s;
  // the host's CPUs were half busy and 10% stolen.
  HostSample a = sample(10, {{"0", 100, 1e9, 0}, {"1", 0, 0, -1}}, 0);
  HostSample b = sample(12, {{"0", 250, 1.4e9, 1e9}, {"1", 20, 0, -1}}, 40);
  b.cpu = {1000 + 120, 0, 80, 1000 + 160, 0, 0, 0, 40};
  a.cpu = {1000, 0, 0, 1000, 0, 0, 0, 0};
  auto r = host_rate(a, b);
  ASSERT_TRUE(r);
  EXPECT_NEAR(r->busy, 240.0 / 400, 1e-9);  // (120 + 80 + 40) of 400 ticks
  EXPECT_NEAR(r->steal, 40.0 / 400, 1e-9);
  ASSERT_EQ(r->ranks.size(), 2u);
  EXPECT_NEAR(r->ranks[0].cpu, 0.75, 1e-9);
  EXPECT_NEAR(r->ranks[0].wait, 0.2, 1e-9);
  EXPECT_NEAR(r->ranks[0].throttled, 0.5, 1e-9);
  EXPECT_NEAR(r->ranks[0].demand(), 0.75 + 0.5 + 0.1, 1e-9);  // the larger of wait and quota
  EXPECT_NEAR(r->ranks[1].cpu, 0.1, 1e-9);
  EXPECT_DOUBLE_EQ(r->ranks[1].throttled, 0);
  EXPECT_FALSE(host_rate(b, a));  // not later
}

// Feeds one sample per host per second for `seconds` s: hosts[h] gives each rank's CPU use.
std::vector<StragglerChange> run_for(
    StragglerWatch& w, double& t,
    const std::vector<std::vector<std::pair<std::string, double>>>& hosts, int seconds,
    std::vector<double>& ticks) {
  std::vector<StragglerChange> out;
  for (int i = 0; i < seconds; ++i, ++t)
    for (size_t h = 0; h < hosts.size(); ++h) {
      std::vector<std::tuple<std::string, double, double, double>> ranks;
      for (size_t k = 0; k < hosts[h].size(); ++k) {
        ticks[h * 8 + k] += 100 * hosts[h][k].second;
        ranks.emplace_back(hosts[h][k].first, ticks[h * 8 + k], 0, -1);
      }
      for (auto& c : w.add(h, sample(t, ranks))) out.push_back(c);
    }
  return out;
}

TEST(WatchStraggler, RaisedOnceForTheSlowHostThenCleared) {
  StragglerWatch w(3);
  double t = 100;
  std::vector<double> ticks(24, 0);
  std::vector<std::vector<std::pair<std::string, double>>> slow{
      {{"0", 0.1}, {"1", 0.1}, {"sched", 0.9}},
      {{"2", 0.95}, {"3", 0.9}},
      {{"4", 0.1}, {"5", 0.1}}};
  auto changes = run_for(w, t, slow, 2, ticks);
  EXPECT_TRUE(changes.empty()) << "raised before kRaiseAfter samples";
  changes = run_for(w, t, slow, 10, ticks);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_TRUE(changes[0].raised);
  EXPECT_EQ(changes[0].host, 1u);
  EXPECT_EQ(changes[0].ranks, (std::vector<std::string>{"2", "3"}));
  EXPECT_NEAR(changes[0].demand, 0.95, 1e-6);
  EXPECT_NEAR(changes[0].median, 0.1, 1e-6);
  EXPECT_TRUE(w.raised(1));
  // Everyone at the same pace again: cleared once the window has forgotten, after kClearAfter.
  std::vector<std::vector<std::pair<std::string, double>>> even{
      {{"0", 0.3}, {"1", 0.3}}, {{"2", 0.3}, {"3", 0.3}}, {{"4", 0.3}, {"5", 0.3}}};
  changes = run_for(w, t, even, 15, ticks);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].raised);
  EXPECT_EQ(changes[0].host, 1u);
  EXPECT_EQ(changes[0].ranks, (std::vector<std::string>{"2", "3"}));
  EXPECT_FALSE(w.raised(1));
}

// A host whose sampler ended (died) is forgotten: a straggler raised there is cleared at once
// (it never was: summary.json said until_s null), and its last figures no longer count in the
// median the other hosts are held to.
TEST(WatchStraggler, AHostWhoseSamplerEndedIsForgottenAndItsStragglerCleared) {
  StragglerWatch w(3);
  double t = 100;
  std::vector<double> ticks(24, 0);
  std::vector<std::vector<std::pair<std::string, double>>> slow{
      {{"0", 0.1}, {"1", 0.1}}, {{"2", 0.95}, {"3", 0.9}}, {{"4", 0.1}, {"5", 0.1}}};
  ASSERT_EQ(run_for(w, t, slow, 12, ticks).size(), 1u);
  ASSERT_TRUE(w.raised(1));
  auto changes = w.forget(1);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].raised);
  EXPECT_EQ(changes[0].host, 1u);
  EXPECT_EQ(changes[0].ranks, (std::vector<std::string>{"2", "3"}));
  EXPECT_FALSE(w.raised(1));
  EXPECT_FALSE(w.rate(1));
  EXPECT_TRUE(w.forget(1).empty());
  EXPECT_TRUE(w.forget(0).empty());  // nothing raised there
}

TEST(WatchStraggler, NotForRanksAllSlowTogetherNorForTheScheduler) {
  StragglerWatch w(2);
  double t = 0;
  std::vector<double> ticks(16, 0);
  // All busy: none stands out.
  EXPECT_TRUE(
      run_for(w, t, {{{"0", 0.95}, {"1", 0.9}}, {{"2", 0.92}, {"3", 0.97}}}, 20, ticks).empty());
  // Only the scheduler is busy: it is not a worker the others wait for.
  StragglerWatch s(2);
  t = 0;
  std::fill(ticks.begin(), ticks.end(), 0);
  EXPECT_TRUE(run_for(s, t, {{{"sched", 1.0}, {"0", 0.05}}, {{"1", 0.05}, {"2", 0.05}}}, 20, ticks)
                  .empty());
  // Busy, but below kMinDemand: a light job waits on something else.
  StragglerWatch l(2);
  t = 0;
  std::fill(ticks.begin(), ticks.end(), 0);
  EXPECT_TRUE(run_for(l, t, {{{"0", 0.4}}, {{"1", 0.01}}}, 20, ticks).empty());
}

TEST(WatchStraggler, OneSlowHostOfTwo) {
  // The lower median: with one slow host of two, the fast host's ranks set the median.
  StragglerWatch w(2);
  double t = 0;
  std::vector<double> ticks(16, 0);
  auto changes = run_for(w, t, {{{"0", 0.1}, {"1", 0.1}}, {{"2", 0.9}, {"3", 0.95}}}, 10, ticks);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].host, 1u);
}

// A slow host that runs more of the workers than the fast one: the median is the hosts', so its
// ranks do not set it themselves (they did, and it was never raised).
TEST(WatchStraggler, OneSlowHostRunningMostOfTheWorkers) {
  StragglerWatch w(2);
  double t = 0;
  std::vector<double> ticks(16, 0);
  auto changes =
      run_for(w, t, {{{"0", 0.1}, {"1", 0.1}}, {{"2", 0.9}, {"3", 0.9}, {"4", 0.95}}}, 10, ticks);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].host, 1u);
  EXPECT_NEAR(changes[0].median, 0.1, 1e-6);
}

// The sampler itself, here: it finds a process carrying the job's marker, by its rank.
// Writes a fixture file, with the directories it is in.
void put_file(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(WatchSampler, FindsTheJobsProcessesByRank) {
  if (test::shell_output("command -v perl").empty()) GTEST_SKIP() << "no perl on this machine";
  // Rank 7 is this host's; rank 8, of the same job, another host's (a shared pid namespace).
  auto start = [](const char* rank) {
    pid_t child = fork();
    if (child == 0) {
      char* argv[] = {const_cast<char*>("sleep"), const_cast<char*>("10"), nullptr};
      std::string r = std::string("RANK_ID=") + rank;
      char* envp[] = {const_cast<char*>("MSRUN_SSH_JOB=watch-unit-job"), r.data(), nullptr};
      execve("/bin/sleep", argv, envp);
      _exit(127);
    }
    return child;
  };
  pid_t child = start("7"), other = start("8");
  std::string out;
  for (int i = 0; i < 50 && out.find("\"rank\":\"7\"") == std::string::npos; ++i)
    out = test::shell_output("echo | " + sampler_command("watch-unit-job", 0.1, "sched,7"));
  for (pid_t p : {child, other}) {
    kill(p, SIGKILL);
    waitpid(p, nullptr, 0);
  }
  // The first sample may come before the children's exec: the first line that has rank 7.
  size_t at = out.rfind('\n', out.find("\"rank\":\"7\""));
  at = at == std::string::npos ? 0 : at + 1;
  auto s = parse_sample(out.substr(at, out.find('\n', at) - at));
  ASSERT_TRUE(s) << out;
  ASSERT_EQ(s->ranks.size(), 1u) << out;
  EXPECT_EQ(s->ranks[0].rank, "7");
  EXPECT_EQ(s->ranks[0].pids, 1);
  EXPECT_GT(s->ranks[0].rss_kb, 0);
  EXPECT_EQ(s->cpu.size(), 8u);
  EXPECT_GT(s->mem_total_kb, 0);
}

// The sampler over a tree of fixture files (MSRUN_SSH_SAMPLER_ROOT): ranks 0 and 1 of job "j"
// here, rank 0 in a cgroup v1 cpu controller, rank 1 in a cgroup v2 one; rank 2 of the same job is
// another host's (not in its list), pid 404 is not the job's.
TEST(WatchSampler, ReadsProcAndCgroupV1AndV2Fixtures) {
  if (test::shell_output("command -v perl").empty()) GTEST_SKIP() << "no perl on this machine";
  test::TempDir root;
  auto put = [&](const std::string& path, const std::string& text) {
    put_file(root.path() + path, text);
  };
  put("/proc/stat", "cpu  100 0 50 1000 10 0 5 7 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n");
  put("/proc/loadavg", "0.50 0.40 0.30 1/100 999\n");
  put("/proc/meminfo", "MemTotal:       1000 kB\nMemFree:  1 kB\nMemAvailable:    600 kB\n");
  put("/proc/uptime", "123.45 100.00\n");
  auto proc = [&](int pid, const std::string& env, const std::string& cgroup) {
    std::string d = "/proc/" + std::to_string(pid);
    put(d + "/environ", env);
    put(d + "/stat",
        std::to_string(pid) +
            " (python3 (a) b) R 1 101 101 0 -1 0 0 0 0 0 250 50 0 0 20 0 1 0 5000 1 2\n");
    put(d + "/status", "Name:\tpython3\nVmRSS:\t    2048 kB\n");
    put(d + "/task/" + std::to_string(pid) + "/schedstat", "1000 3000000 5\n");
    put(d + "/task/" + std::to_string(pid + 1) + "/schedstat", "2000 1000000 3\n");
    put(d + "/cgroup", cgroup);
  };
  using namespace std::string_literals;
  proc(101, "A=1\0MSRUN_SSH_JOB=j\0RANK_ID=0\0"s, "4:cpu,cpuacct:/jobA\n0::/ignored\n");
  proc(202, "MSRUN_SSH_JOB=j\0RANK_ID=1\0"s, "0::/jobB\n");
  proc(303, "MSRUN_SSH_JOB=j\0RANK_ID=2\0"s, "0::/jobB\n");
  proc(404, "MSRUN_SSH_JOB=other\0RANK_ID=0\0"s, "0::/jobB\n");
  put("/sys/fs/cgroup/cpu,cpuacct/jobA/cpu.stat",
      "nr_periods 10\nnr_throttled 3\nthrottled_time 5000\n");
  put("/sys/fs/cgroup/jobB/cpu.stat", "usage_usec 100\nnr_throttled 1\nthrottled_usec 7\n");
  // The accelerators' utilisation, from nvidia-smi when it is installed, else npu-smi (fakes on
  // PATH printing their documented formats).
  auto tool = [&](const std::string& dir, const std::string& name, const std::string& output) {
    put(dir + "/" + name, "#!/bin/sh\ncat <<'EOF'\n" + output + "EOF\n");
    fs::permissions(root.path() + dir + "/" + name, fs::perms::owner_all);
    return shell_quote(root.path() + dir);
  };
  std::string nvidia = tool("/bin-nvidia", "nvidia-smi", "35\n 0\n");
  std::string npu = tool("/bin-npu", "npu-smi",
                         "| NPU   Name                | Health        | Power(W)    Temp(C)  |\n"
                         "| 0     910B3               | OK            | 93.5        37       |\n"
                         "| 0                         | 0000:C1:00.0  | 12          0    / 0 |\n"
                         "| 1     910B3               | OK            | 93.5        37       |\n"
                         "| 0                         | 0000:C2:00.0  | 0           0    / 0 |\n");
  auto sample_with = [&](const std::string& path) {
    std::string out = test::shell_output(
        "echo | PATH=" + path + ":$PATH MSRUN_SSH_SAMPLER_ROOT=" + shell_quote(root.path()) + " " +
        sampler_command("j", 0.1, "sched,0,1"));
    return parse_sample(out.substr(0, out.find('\n')));
  };
  auto with_nvidia = sample_with(nvidia + ":" + npu);
  ASSERT_TRUE(with_nvidia);
  EXPECT_EQ(with_nvidia->accel, (std::vector<double>{35, 0}));
  auto with_npu = sample_with(npu);
  ASSERT_TRUE(with_npu);
  EXPECT_EQ(with_npu->accel, (std::vector<double>{12, 0}));
  int status = 0;
  std::string out = test::shell_output("echo | MSRUN_SSH_SAMPLER_ROOT=" + shell_quote(root.path()) +
                                           " " + sampler_command("j", 0.1, "sched,0,1"),
                                       &status);
  auto s = parse_sample(out.substr(0, out.find('\n')));
  ASSERT_TRUE(s) << out;
  EXPECT_DOUBLE_EQ(s->t, 123.45);
  EXPECT_EQ(s->cpu, (std::vector<double>{100, 0, 50, 1000, 10, 0, 5, 7}));
  EXPECT_DOUBLE_EQ(s->load, 0.5);
  EXPECT_EQ(s->mem_total_kb, 1000);
  EXPECT_EQ(s->mem_avail_kb, 600);
  ASSERT_EQ(s->ranks.size(), 2u) << out;
  const RankSample& r0 = s->ranks[0];
  EXPECT_EQ(r0.rank, "0");
  EXPECT_EQ(r0.pids, 1);
  // CPU time and run-queue wait count from a process's first sample on (the test below): none
  // yet in the first.
  EXPECT_DOUBLE_EQ(r0.cpu_ticks, 0);
  EXPECT_DOUBLE_EQ(r0.wait_ns, 0);
  EXPECT_EQ(r0.rss_kb, 2048);
  EXPECT_DOUBLE_EQ(r0.throttled_ns, 5000);  // v1: throttled_time, ns
  EXPECT_EQ(r0.state, "R");
  EXPECT_EQ(s->ranks[1].rank, "1");
  EXPECT_DOUBLE_EQ(s->ranks[1].throttled_ns, 7000);  // v2: throttled_usec
  EXPECT_TRUE(s->accel.empty());                     // no tool here: no "accel"
}

// A rank's child found at the next full scan (up to 5 samples late) counts from then on, and one
// that ends keeps what it counted: a rank's sums rise by what ran in between, never jump nor fall
// (the child's whole CPU time came in one sample: a rank at a steady 0.3 CPU read as 6, a false
// straggler; an ended one's time went out of the sum). The agent's way of running it: its sample
// closure, called once per sample, the fixture changed between calls.
TEST(WatchSampler, AProcessFoundLateCountsFromThenAndOneThatEndsKeepsItsCount) {
  if (test::shell_output("command -v perl").empty()) GTEST_SKIP() << "no perl on this machine";
  test::TempDir root;
  put_file(root.path() + "/proc/uptime", "1.0 1.0\n");
  using namespace std::string_literals;
  put_file(root.path() + "/proc/101/environ", "MSRUN_SSH_JOB=j\0RANK_ID=0\0"s);
  put_file(root.path() + "/sampler.pl", std::string(sampler_program()));
  std::string driver = fmt::format(R"(
use strict; use warnings;
my $root = '{0}';
$ENV{{MSRUN_SSH_SAMPLER_ROOT}} = $root;
@ARGV = ('j', '0.1', '0');
my ($sample) = do "$root/sampler.pl";
die "sampler: $@" unless $sample;
sub put {{ my ($p, $t) = @_; open(my $f, '>', "$root$p") or die "$p: $!"; print $f $t; close $f }}
sub stat_of {{
  my ($pid, $ticks) = @_;
  my ($u, $st) = (int($ticks / 2), $ticks - int($ticks / 2));  # utime + stime
  put("/proc/$pid/stat", "$pid (python3) S 1 1 1 0 -1 0 0 0 0 0 $u $st 0 0 20 0 1 0 ${{pid}}0 1 2\n");
}}
mkdir "$root/proc/101/task"; mkdir "$root/proc/101/task/101"; mkdir "$root/proc/101/task/1011";
for my $i (0 .. 7) {{
  stat_of(101, 300 + 10 * $i);
  # Its threads' run-queue waits: 1 ms and 0.5 ms more per sample; the second thread has ended
  # by the 7th sample, and its wait is out of the threads' sum.
  put('/proc/101/task/101/schedstat', '1 ' . 1000 * $i . " 1\n");
  if ($i < 6) {{ put('/proc/101/task/1011/schedstat', '1 ' . 500 * $i . " 1\n") }}
  else {{ unlink "$root/proc/101/task/1011/schedstat"; rmdir "$root/proc/101/task/1011" }}
  if ($i == 1) {{ mkdir "$root/proc/102"; put('/proc/102/environ', "MSRUN_SSH_JOB=j\0RANK_ID=0\0") }}
  stat_of(102, 5000 + 10 * $i) if $i >= 1 && $i <= 5;
  unlink "$root/proc/102/stat" if $i == 6;
  print(($sample->())[0]);
}}
)",
                                   root.path());
  put_file(root.path() + "/driver.pl", driver);
  int status = -1;
  std::string out = test::shell_output("perl " + shell_quote(root.path() + "/driver.pl"), &status);
  ASSERT_EQ(status, 0) << out;
  std::vector<double> cpu, pids, wait;
  for (std::string_view line : split_lines(out)) {
    if (line.empty()) continue;
    auto s = parse_sample(line);
    ASSERT_TRUE(s && s->ranks.size() == 1) << line;
    cpu.push_back(s->ranks[0].cpu_ticks);
    pids.push_back(s->ranks[0].pids);
    wait.push_back(s->ranks[0].wait_ns);
  }
  // Rank 0's second process is found at the 6th sample (the 5th scan after the first) and gone at
  // the 7th; rank 0 used 10 ticks between samples throughout.
  EXPECT_EQ(pids, (std::vector<double>{1, 1, 1, 1, 1, 2, 1, 1}));
  EXPECT_EQ(cpu, (std::vector<double>{0, 10, 20, 30, 40, 50, 60, 70}));
  // Counted thread by thread: the sum of the threads alive went from 7500 to 6000 at the 7th
  // sample (and counted nothing until it passed 7500 again), while the first thread waited on.
  EXPECT_EQ(wait, (std::vector<double>{0, 1500, 3000, 4500, 6000, 7500, 8500, 9500}));
}

// Once its first samples are past, a sampler whose job processes have all ended here reads every
// process's environ only every 5th sample, not every second (a host runs thousands of processes).
// Rank 0 ends after the 7th sample and rank 1 starts: it is found at the next 5th sample, not at
// the next one.
// A tool that hangs (a sick device) holds a sample at most its time limit (the tests' 0.3 s; 5 s on
// a host) and is not asked again: the samples go on, without "accel".
TEST(WatchSampler, AToolThatHangsIsCutAtItsLimitAndNotAskedAgain) {
  if (test::shell_output("command -v perl").empty()) GTEST_SKIP() << "no perl on this machine";
  if (test::shell_output("command -v timeout").empty()) GTEST_SKIP() << "no timeout here";
  test::TempDir root;
  put_file(root.path() + "/proc/stat", "cpu  100 0 50 1000 10 0 5 7 0 0\n");
  put_file(root.path() + "/proc/uptime", "1.0 1.0\n");
  put_file(root.path() + "/bin/nvidia-smi",
           "#!/bin/sh\necho run >> " + shell_quote(root.path() + "/runs") + "\nexec sleep 30\n");
  fs::permissions(root.path() + "/bin/nvidia-smi", fs::perms::owner_all);
  std::string r = shell_quote(root.path());
  // 2 s of samples every 0.1 s (without the limit: one sample, after 30 s).
  std::string out = test::shell_output("{ sleep 2; } | PATH=" + r +
                                       "/bin:$PATH MSRUN_SSH_SAMPLER_TOOL_S=0.3 "
                                       "MSRUN_SSH_SAMPLER_ROOT=" +
                                       r + " " + sampler_command("j", 0.1, "0"));
  std::vector<std::string> lines;
  for (std::string_view l : split_lines(out))
    if (!l.empty()) lines.emplace_back(l);
  EXPECT_GE(lines.size(), 8u) << out;
  for (const auto& line : lines) {
    auto s = parse_sample(line);
    ASSERT_TRUE(s) << line;
    EXPECT_TRUE(s->accel.empty()) << line;
  }
  EXPECT_EQ(test::slurp(root.path() + "/runs"), "run\n");
}

TEST(WatchSampler, RescansInFullOnlyEveryFifthSampleOnceStarted) {
  if (test::shell_output("command -v perl").empty()) GTEST_SKIP() << "no perl on this machine";
  test::TempDir root;
  auto put = [&](const std::string& path, const std::string& text) {
    put_file(root.path() + path, text);
  };
  put("/proc/stat", "cpu  100 0 50 1000 10 0 5 7 0 0\n");
  put("/proc/uptime", "1.0 1.0\n");
  auto proc = [&](const std::string& dir, int pid, const std::string& env) {
    put(dir + "/environ", env);
    put(dir + "/stat",
        std::to_string(pid) + " (x) S 1 1 1 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 77 1 2\n");
  };
  using namespace std::string_literals;
  proc("/proc/101", 101, "MSRUN_SSH_JOB=j\0RANK_ID=0\0"s);
  proc("/later/202", 202, "MSRUN_SSH_JOB=j\0RANK_ID=1\0"s);
  std::string r = shell_quote(root.path());
  // The output file is made before the loop polls it: a loop that found it missing would move
  // the ranks at once.
  std::string out = test::shell_output(
      ": > " + r + "/out; { sleep 3; } | MSRUN_SSH_SAMPLER_ROOT=" + r + " " +
      sampler_command("j", 0.1, "0,1") + " > " + r + "/out & n=0; while [ \"$(wc -l < " + r +
      "/out)\" -lt 7 ] && [ $n -lt 300 ]; " + "do sleep 0.01; n=$((n+1)); done; rm -r " + r +
      "/proc/101; mv " + r + "/later/202 " + r + "/proc/202; wait; cat " + r + "/out");
  std::vector<std::string> lines;
  for (std::string_view l : split_lines(out))
    if (!l.empty()) lines.emplace_back(l);
  ASSERT_GE(lines.size(), 16u) << out;
  int found = -1;
  for (size_t i = 7; i < lines.size() && found < 0; ++i) {
    auto s = parse_sample(lines[i]);
    ASSERT_TRUE(s) << lines[i];
    for (const RankSample& rank : s->ranks)
      if (rank.rank == "1") found = static_cast<int>(i);
  }
  // At the next full rescan (the 10th sample), or on a loaded machine, where the move may come
  // after it, at a later one: never at a sample in between.
  EXPECT_GE(found, 10) << out;
  EXPECT_EQ(found % 5, 0) << out;
}

}  // namespace
}  // namespace msrun_ssh

namespace msrun_ssh {
namespace {

TEST(WatchTop, ProgressSteps) {
  std::optional<std::regex> none;
  EXPECT_EQ(progress_step("epoch: 3, step: 120, loss is 0.5", none), 120);
  EXPECT_EQ(progress_step("Iteration 42 done", none), 42);
  EXPECT_EQ(progress_step(" 45%|####      | 120/1000 [00:12<01:30,  9.7it/s]", none), 120);
  EXPECT_EQ(progress_step("Epoch 3/10", none), 3);
  EXPECT_FALSE(progress_step("loss is 0.5", none));
  EXPECT_FALSE(progress_step("stepped aside", none));  // no number after it
  std::optional<std::regex> custom(std::regex(R"(batch=(\d+))"));
  EXPECT_EQ(progress_step("step 5 batch=77", custom), 77);
  EXPECT_FALSE(progress_step("step 5", custom));
  // A rank's line of 4 MB of digits after "step": read from its first 1024 bytes (std::regex
  // recursed a frame per digit, past the launcher's stack).
  std::string huge = "step " + std::string(4 << 20, '7');
  EXPECT_TRUE(progress_step(huge, none).has_value());
  EXPECT_EQ(progress_step("step 12" + std::string(4 << 20, ' '), none), 12);
  EXPECT_FALSE(progress_step(std::string(2000, 'x') + " step 3", none));
}

// Samples of one host, once a second for `n` s: each rank in `ranks` busy `busy` CPUs.
fake::Reply samples(const std::vector<std::string>& ranks, double busy, int n) {
  fake::Reply r;
  r.exit_at = -1;
  for (int i = 0; i < n; ++i) {
    std::string rs = test::sampler_ranks(ranks, 100 * busy * i, 2048, 'R');
    r.output.push_back({0.01 + i, fmt::format("{{\"t\":{},\"hz\":100,\"cpu\":[{},0,0,{},0,0,0,0],"
                                              "\"load\":1.5,\"mem_kb\":[4194304,2097152],"
                                              "\"ranks\":[{}],\"accel\":[97,3]}}\n",
                                              50 + i, 100 * i, 100 * i, rs)});
  }
  return r;
}

// A host's sampler that ends (dies) before the job: its straggler is cleared then; one that the
// job's end stops leaves the straggler as it was (it lasted to the end).
TEST(WatchTop, ASamplerThatEndsClearsItsHostsStragglerButNotAtTheJobsEnd) {
  for (bool job_ends : {false, true}) {
    fake::ReplyTransport t;
    t.on("exec perl -e", samples({"0", "1"}, 0.1, 12), 0);
    fake::Reply dies = samples({"2", "3"}, 0.9, 8);
    dies.exit_at = 8.5;
    dies.status = 1;
    t.on("exec perl -e", dies, 1);
    std::vector<StragglerChange> changes;
    JobWatch watch(t, 2, [&](const StragglerChange& c) { changes.push_back(c); });
    watch.start({0, 1}, {"0,1", "2,3"}, "job-1", 1);
    while (t.now_ms() < 8000) t.poll(1000, [&](const TransportEvent& e) { watch.offer(e); });
    ASSERT_EQ(changes.size(), 1u);
    EXPECT_TRUE(changes[0].raised);
    if (job_ends) watch.stop();
    while (t.now_ms() < 10000) t.poll(1000, [&](const TransportEvent& e) { watch.offer(e); });
    ASSERT_EQ(changes.size(), job_ends ? 1u : 2u);
    if (!job_ends) {
      EXPECT_FALSE(changes[1].raised);
      EXPECT_EQ(changes[1].host, 1u);
    }
  }
}

TEST(WatchTop, SnapshotRatesAndScreen) {
  fake::ReplyTransport t;
  t.on("exec perl -e", samples({"0", "1"}, 0.1, 8), 0);
  t.on("exec perl -e", samples({"2", "3"}, 0.9, 8), 1);
  std::vector<StragglerChange> changes;
  JobWatch watch(t, 2, [&](const StragglerChange& c) { changes.push_back(c); });
  watch.start({0, 1}, {"0,1", "2,3"}, "job-1", 1);
  TopTracker top("");
  nlohmann::json snap;
  uint64_t lines = 0;
  for (int second = 1; second <= 6; ++second) {
    while (t.now_ms() < second * 1000.0)
      t.poll(1000, [&](const TransportEvent& e) { EXPECT_TRUE(watch.offer(e)); });
    lines += 10;
    snap = top.snapshot(second * 1000.0, "job-1", {"node0", "node1"}, watch,
                        {{"0", 0, lines, fmt::format("epoch: 1, step: {}, loss", second * 2)},
                         {"2", 1, 5, "waiting"}});
  }
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].host, 1u);
  EXPECT_EQ(snap["job"], "job-1");
  ASSERT_EQ(snap["hosts"].size(), 2u);
  EXPECT_TRUE(snap["hosts"][1]["straggler"].get<bool>());
  EXPECT_FALSE(snap["hosts"][0]["straggler"].get<bool>());
  EXPECT_NEAR(snap["hosts"][0]["busy"].get<double>(), 0.5, 1e-9);
  ASSERT_EQ(snap["ranks"].size(), 2u);
  const auto& r0 = snap["ranks"][0];
  EXPECT_NEAR(r0["lines_per_s"].get<double>(), 10, 1e-9);
  EXPECT_NEAR(r0["steps_per_s"].get<double>(), 2, 1e-9);
  EXPECT_EQ(r0["step"].get<double>(), 12);
  EXPECT_NEAR(r0["cpu"].get<double>(), 0.1, 1e-6);
  EXPECT_EQ(r0["rss_kb"].get<long>(), 2048);
  const auto& r2 = snap["ranks"][1];
  EXPECT_EQ(r2["lines_per_s"].get<double>(), 0);
  EXPECT_NEAR(r2["last_line_age_s"].get<double>(), 5, 1e-9);  // its 5 lines came at second 1
  EXPECT_FALSE(r2.contains("step"));
  std::string screen = format_top(snap, 200);
  EXPECT_NE(screen.find("msrun-ssh top: job job-1"), std::string::npos) << screen;
  EXPECT_NE(screen.find("STRAGGLER"), std::string::npos) << screen;
  EXPECT_NE(screen.find("node1"), std::string::npos);
  EXPECT_NE(screen.find("2.0/4.0G"), std::string::npos) << screen;
  EXPECT_NE(screen.find("97 3"), std::string::npos) << screen;
  for (std::string_view line : split_lines(format_top(snap, 40))) EXPECT_LE(line.size(), 40u);
  // The samplers end with the job.
  watch.stop();
  EXPECT_EQ(t.kills.size(), 2u);
}

}  // namespace
}  // namespace msrun_ssh
