// examples/stdlib_ddp/train.py's in-place recovery (MS_ENABLE_RECOVERY=1; docs/restarts.md): the
// example run for real on 127.0.0.1 — a scheduler and three workers as local processes with the
// environment a plan gives them on one host — one worker SIGKILLed mid-training and started again
// with the same environment, as `msrun-ssh --restart_policy process` does.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace msrun_ssh {
namespace {

constexpr int kWorkers = 3;
constexpr int kScheduler = -1;
constexpr auto kLimit = std::chrono::seconds(60);

using test::count;

class StdlibDdp : public test::TempDirTest {
 protected:
  ~StdlibDdp() override {
    for (const auto& [rank, pid] : running_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }

  // The environment make_plan gives process `rank` (kScheduler or a worker) on one host.
  std::vector<std::string> env_of(int rank) const {
    const char* path = std::getenv("PATH");
    std::vector<std::string> env{
        std::string("PATH=") + (path ? path : "/usr/bin:/bin"),
        "PYTHONUNBUFFERED=1",
        "MS_SCHED_HOST=127.0.0.1",
        fmt::format("MS_SCHED_PORT={}", port_),
        "MS_TOPO_TIMEOUT=20",
        fmt::format("MS_ROLE={}", rank == kScheduler ? "MS_SCHED" : "MS_WORKER"),
        fmt::format("MS_WORKER_NUM={}", kWorkers),
        fmt::format("RANK_SIZE={}", kWorkers),
        "MS_NODE_RANK=0",
        fmt::format("RANK_ID={}", rank == kScheduler ? 0 : rank)};
    if (rank != kScheduler) {
      env.push_back(fmt::format("MS_NODE_ID={}", rank));
      env.push_back(fmt::format("DEVICE_ID={}", rank));
    }
    if (recovery_) {
      env.push_back("MS_ENABLE_RECOVERY=1");
      env.push_back("MS_RECOVERY_PATH=" + dir_ + "/recovery");
    }
    return env;
  }

  std::string log_path(int rank) const {
    return dir_ + (rank == kScheduler ? "/scheduler.log" : fmt::format("/worker_{}.log", rank));
  }
  std::string log(int rank) const { return test::slurp(log_path(rank)); }

  // Starts process `rank`: `env -i VARS python3 train.py ARGS`, its output appended to its log.
  pid_t start(int rank) {
    std::vector<std::string> args{"env", "-i"};
    for (auto& v : env_of(rank)) args.push_back(v);
    for (const char* a : {"python3", "-u", MSRUN_SSH_SOURCE_DIR "/examples/stdlib_ddp/train.py",
                          "--epochs", "3", "--steps", "20", "--sleep", "0.02"})
      args.emplace_back(a);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::string path = log_path(rank);
    pid_t pid = ::fork();
    if (pid == 0) {
      int out = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      int in = ::open("/dev/null", O_RDONLY);
      if (out < 0 || in < 0) ::_exit(126);
      ::dup2(in, 0);
      ::dup2(out, 1);
      ::dup2(out, 2);
      ::execv("/usr/bin/env", argv.data());
      ::_exit(127);
    }
    running_[rank] = pid;
    return pid;
  }

  // Waits until `rank`'s log holds `text` (false after kLimit).
  bool wait_for(int rank, const std::string& text) const {
    auto until = std::chrono::steady_clock::now() + kLimit;
    while (log(rank).find(text) == std::string::npos) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

  // Waits for every process still running; returns each one's wait status (kill -9 after kLimit).
  std::map<int, int> wait_all() {
    std::map<int, int> status;
    auto until = std::chrono::steady_clock::now() + kLimit;
    while (!running_.empty()) {
      for (auto it = running_.begin(); it != running_.end();) {
        int s = 0;
        if (::waitpid(it->second, &s, WNOHANG) == it->second) {
          status[it->first] = s;
          it = running_.erase(it);
        } else {
          ++it;
        }
      }
      if (std::chrono::steady_clock::now() > until) {
        ADD_FAILURE() << "the job did not end within the limit";
        for (const auto& [rank, pid] : running_) ::kill(pid, SIGKILL);
        until += kLimit;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return status;
  }

  // Starts the scheduler and every worker; SIGKILLs rank 1 in the middle of epoch 1.
  std::map<int, pid_t> start_and_kill_rank1() {
    std::map<int, pid_t> pids;
    for (int rank = kScheduler; rank < kWorkers; ++rank) pids[rank] = start(rank);
    EXPECT_TRUE(wait_for(1, "epoch: 1, step: 10,")) << log(1);
    ::kill(pids[1], SIGKILL);
    int s = 0;
    EXPECT_EQ(::waitpid(pids[1], &s, 0), pids[1]);
    EXPECT_TRUE(WIFSIGNALED(s) && WTERMSIG(s) == SIGKILL);
    running_.erase(1);
    return pids;
  }

  // The weights a worker's log says it ended with ("" when none).
  std::string final_weights(int rank) const {
    std::smatch m;
    std::string text = log(rank);
    std::regex line(fmt::format("rank {}: final weights (\\[[^\\]]*\\])", rank));
    return std::regex_search(text, m, line) ? m[1].str() : "";
  }

  int port_ = test::free_port();
  bool recovery_ = true;
  std::map<int, pid_t> running_;
};

TEST_F(StdlibDdp, AWorkerKilledMidTrainingRejoinsAndEveryRankEndsWithTheSameWeights) {
  if (!test::have_python3()) GTEST_SKIP() << "no python3";
  std::map<int, pid_t> pids = start_and_kill_rank1();
  start(1);  // the same command and environment, as an in-place restart
  std::map<int, int> status = wait_all();
  for (int rank = kScheduler; rank < kWorkers; ++rank)
    EXPECT_TRUE(WIFEXITED(status[rank]) && WEXITSTATUS(status[rank]) == 0)
        << "rank " << rank << " " << status[rank] << "\n"
        << log(rank);
  std::string weights = final_weights(0);
  EXPECT_NE(weights, "") << log(0);
  for (int rank = 1; rank < kWorkers; ++rank) EXPECT_EQ(final_weights(rank), weights) << rank;
  EXPECT_NE(log(kScheduler).find("rank 1 rejoined; it resumes after step"), std::string::npos)
      << log(kScheduler);
  EXPECT_NE(log(kScheduler).find("weights identical on all ranks"), std::string::npos);
  EXPECT_NE(log(1).find("rank 1: rejoined the job; resuming after step"), std::string::npos);
  // The survivors ran once, from start to end, as the processes started first.
  for (int rank : {0, 2}) {
    std::string text = log(rank);
    EXPECT_EQ(count(text, ", pid "), 1u) << text;  // one start line: never started again
    EXPECT_NE(text.find(fmt::format(", pid {},", pids[rank])), std::string::npos) << text;
    EXPECT_EQ(text.find("rejoined"), std::string::npos) << text;
  }
}

TEST_F(StdlibDdp, WithoutRecoveryALostWorkerEndsTheJob) {
  if (!test::have_python3()) GTEST_SKIP() << "no python3";
  recovery_ = false;
  start_and_kill_rank1();
  std::map<int, int> status = wait_all();
  for (int rank : {kScheduler, 0, 2})
    EXPECT_TRUE(WIFEXITED(status[rank]) && WEXITSTATUS(status[rank]) == 1)
        << "rank " << rank << " " << status[rank] << "\n"
        << log(rank);
  EXPECT_NE(log(kScheduler).find("scheduler: error: rank 1 disconnected"), std::string::npos)
      << log(kScheduler);
  EXPECT_EQ(final_weights(0), "");
}

}  // namespace
}  // namespace msrun_ssh
