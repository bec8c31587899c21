// `check --net=collective` (src/check/collective.cc, src/remote/allreduce.py): the program itself
// run locally with python3 on 127.0.0.1 (a scheduler and workers as separate processes, with the
// environment a plan gives them), the command line, the smoke test's job, the result read from
// what the job left, and the verdicts.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "msrun_ssh/check.h"
#include "msrun_ssh/cli.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/error.h"
#include "remote/programs.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

using test::free_port;
using test::have_python3;

// Runs the embedded program once per entry of `envs` (each "NAME=VALUE ..."), all at once, with
// a limit of `limit` seconds; returns each one's stdout followed by "exit=N".
std::vector<std::string> run_ranks(const std::vector<std::string>& envs, int limit) {
  test::TempDir tmp;
  tmp.write("allreduce.py", std::string(remote::kAllreducePy));
  std::string script = fmt::format("cd {} || exit 9\n", shell_quote(tmp.path()));
  for (size_t i = 0; i < envs.size(); ++i)
    script += fmt::format(
        "(env {} python3 -c \"$(cat allreduce.py)\" {} > out{} 2>&1; echo exit=$? >> out{}) &\n",
        envs[i], limit, i, i, i);
  script += "wait\n";
  test::shell_output("/bin/sh -c " + shell_quote(script));
  std::vector<std::string> outs;
  for (size_t i = 0; i < envs.size(); ++i)
    outs.push_back(test::slurp(tmp.path() + "/out" + std::to_string(i)));
  return outs;
}

std::vector<std::string> msrun_ranks(int port, int world, const std::string& rank1_extra = "") {
  std::string common =
      fmt::format("MS_SCHED_HOST=127.0.0.1 MS_SCHED_PORT={} MS_WORKER_NUM={}", port, world);
  std::vector<std::string> envs{common + " MS_ROLE=MS_SCHED"};
  for (int r = 0; r < world; ++r)
    envs.push_back(
        fmt::format("{} MS_ROLE=MS_WORKER RANK_ID={}{}", common, r, r == 1 ? rank1_extra : ""));
  return envs;
}

TEST(CheckCollective, ProgramSumsOverASchedulerAndThreeWorkers) {
  if (!have_python3()) GTEST_SKIP() << "no python3";
  auto outs = run_ranks(msrun_ranks(free_port(), 3), 20);
  ASSERT_EQ(outs.size(), 4u);
  EXPECT_THAT(outs[0], StartsWith("allreduce hub ok world=3 seconds="));
  EXPECT_THAT(outs[0], HasSubstr("exit=0"));
  for (int r = 0; r < 3; ++r) {
    EXPECT_THAT(outs[r + 1], StartsWith(fmt::format("allreduce ok rank={} world=3 seconds=", r)));
    EXPECT_THAT(outs[r + 1], HasSubstr("exit=0"));
  }
}

TEST(CheckCollective, AWorkerToldAWrongWorldSizeFailsWithAClearLine) {
  if (!have_python3()) GTEST_SKIP() << "no python3";
  auto outs = run_ranks(msrun_ranks(free_port(), 3, " MS_WORKER_NUM=4"), 20);
  ASSERT_EQ(outs.size(), 4u);
  EXPECT_EQ(outs[2],
            "allreduce failed rank=1: got the sum [6.0, 3.0, 3.0, 3.0], expected [10.0, 4.0, 4.0, "
            "4.0] for a world of 4\nexit=1\n");
  EXPECT_THAT(outs[1], StartsWith("allreduce ok rank=0 world=3"));
}

TEST(CheckCollective, ProgramWithTorchrunsContractUsesRankZeroAsTheHub) {
  if (!have_python3()) GTEST_SKIP() << "no python3";
  std::string common =
      fmt::format("MASTER_ADDR=127.0.0.1 MASTER_PORT={} WORLD_SIZE=3", free_port());
  auto outs = run_ranks({common + " RANK=0", common + " RANK=1", common + " RANK=2"}, 20);
  for (int r = 0; r < 3; ++r) {
    EXPECT_THAT(outs[r], StartsWith(fmt::format("allreduce ok rank={} world=3 seconds=", r)));
    EXPECT_THAT(outs[r], HasSubstr("exit=0"));
  }
}

TEST(CheckCollective, ProgramFailsOnTheTestHookAndWithoutAPeer) {
  if (!have_python3()) GTEST_SKIP() << "no python3";
  int port = free_port();
  std::string worker = fmt::format(
      "MS_SCHED_HOST=127.0.0.1 MS_SCHED_PORT={} MS_WORKER_NUM=2 MS_ROLE=MS_WORKER RANK_ID=1", port);
  auto outs = run_ranks({worker + " MSRUN_SSH_ALLREDUCE_FAIL_RANK=1", worker}, 1);
  EXPECT_EQ(outs[0],
            "allreduce failed rank=1: told to fail by MSRUN_SSH_ALLREDUCE_FAIL_RANK\nexit=1\n");
  EXPECT_THAT(outs[1], StartsWith(fmt::format("allreduce failed rank=1: cannot reach "
                                              "127.0.0.1:{}: Connection refused",
                                              port)));
  EXPECT_THAT(outs[1], HasSubstr("exit=1"));
  EXPECT_THAT(run_ranks({"A=1"}, 1)[0],
              StartsWith("allreduce failed rank=?: neither MS_ROLE nor RANK in the environment"));
}

// ---- the command line -------------------------------------------------------------------------

Options parse_check(std::vector<std::string> args) {
  args.insert(args.begin(), {"check", "--hostfile", "h"});
  return parse_args(args, [](const char*) -> const char* { return nullptr; }).options;
}

TEST(CheckCollective, CommandLine) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--net", "collective"}, {"--net=collective"}, {"--net", "collective", "train.py"}}) {
    Options o = parse_check(args);
    EXPECT_TRUE(o.net);
    EXPECT_TRUE(o.net_collective);
    EXPECT_EQ(o.task_script, args.size() == 3 ? "train.py" : "");
  }
  Options plain = parse_check({"--net", "train.py"});
  EXPECT_TRUE(plain.net);
  EXPECT_FALSE(plain.net_collective);
  EXPECT_EQ(plain.task_script, "train.py");
  EXPECT_FALSE(parse_check({"--net=collective", "--net=False"}).net);
  // A boolean word after it, as after every flag: `--net False` is off, not TASK_SCRIPT "False"
  // (review of 2026-12-07).
  Options off = parse_check({"--net", "False", "train.py"});
  EXPECT_FALSE(off.net);
  EXPECT_EQ(off.task_script, "train.py");
  EXPECT_TRUE(parse_check({"--net", "true"}).net);
  EXPECT_FALSE(parse_check({"--net=collective", "--net"}).net_collective);
  EXPECT_EQ(test::error_of([] { parse_check({"--net=all"}); }),
            "--net=all: expects True, False or collective");
  // Only --net takes the word "collective": after another option it is TASK_SCRIPT.
  EXPECT_EQ(parse_check({"--json", "collective"}).task_script, "collective");
}

// ---- the job -----------------------------------------------------------------------------------

Plan two_hosts(Options& o) {
  Cluster c;
  c.path = "h.toml";
  c.hosts = {test::host("a", 1), test::host("b", 2)};
  o.job_id = "job";
  o.launcher_cwd = "/home/u";
  return make_plan(o, c, [](const std::string& n) { return n == "a" ? "198.18.1.10" : ""; });
}

std::vector<HostExpectation> expectations_of(const Plan& plan, const Options& o) {
  std::vector<HostExpectation> es;
  for (size_t h = 0; h < plan.hosts.size(); ++h) es.push_back(expectation_for(plan, h, o));
  return es;
}

TEST(CheckCollective, JobIsTheRunsPlanRunningTheProgramQuietly) {
  Options o;
  o.task_script = "train.py";
  o.python = "/opt/py/bin/python3";
  o.connect_timeout = 5;
  o.tail_worker_log = {1};
  o.events = "ev.jsonl";
  o.max_restarts = 3;
  o.net_collective = o.net = true;
  o.sync = true;  // check --sync: compared, never written
  o.sync_dir = "src";
  Plan plan = two_hosts(o);
  CollectiveJob job = collective_job(o, plan, expectations_of(plan, o), "/tmp/x");
  EXPECT_EQ(job.skip, "");
  EXPECT_FALSE(job.options.sync);
  EXPECT_EQ(job.options.log_dir, "/tmp/x");
  EXPECT_TRUE(job.options.tail_worker_log.empty());
  EXPECT_EQ(job.options.events, "/tmp/x/events.jsonl");  // its own, read for the result
  EXPECT_EQ(job.options.max_restarts, 0);
  EXPECT_DOUBLE_EQ(job.options.timeout, 3 * 5 + 20 + 15);
  ASSERT_EQ(job.plan.hosts.size(), 2u);
  EXPECT_EQ(job.plan.hosts[0].processes.size(), 2u);  // the scheduler and rank 0
  for (const auto& hp : job.plan.hosts)
    for (const auto& p : hp.processes)
      EXPECT_THAT(p.argv, ElementsAre("/opt/py/bin/python3", "-c",
                                      std::string(remote::kAllreducePy), "35"));
  // Everything else is the run's: environment, workdir, log names.
  EXPECT_EQ(job.plan.hosts[1].processes[1].env, plan.hosts[1].processes[1].env);
  EXPECT_EQ(job.plan.hosts[1].processes[1].workdir, plan.hosts[1].processes[1].workdir);
  EXPECT_EQ(job.plan.master_port, plan.master_port);
}

TEST(CheckCollective, JobIsSkippedForDifferentInterpretersAndSimulation) {
  Options o;
  Plan plan = two_hosts(o);
  auto es = expectations_of(plan, o);
  es[1].python = "/usr/bin/python3.11";
  EXPECT_EQ(collective_job(o, plan, es, "/tmp/x").skip,
            "not run: the hosts use different interpreters (python3 on a, /usr/bin/python3.11 on "
            "b); --python chooses one");
  o.sim_level = 1;
  EXPECT_THAT(collective_job(o, plan, expectations_of(plan, o), "/tmp/x").skip,
              HasSubstr("--sim_level"));
}

// ---- the result and the verdicts ------------------------------------------------------------

const char* kFailedSummary = R"({"processes": [
  {"host": "a", "process": "scheduler", "status": "exit 0", "failed": false, "torn_down": false},
  {"host": "a", "process": "rank 0", "status": "ended by teardown", "failed": false,
   "torn_down": true},
  {"host": "b", "process": "rank 1", "status": "exit 1", "failed": true, "torn_down": false}],
 "root_cause": {"host": "b", "process": "rank 1", "last_lines": ["x", "y", "z",
   "allreduce failed rank=1: told to fail by MSRUN_SSH_ALLREDUCE_FAIL_RANK"]},
 "exit_status": 1, "cause": "rank 1 on b failed: exit 1"})";

// The events stream of a child job (docs/events.md): its summary (one line), and before it the
// process_started events that name the ranks' logs.
std::string events_of(const std::string& summary, const std::string& before = "") {
  nlohmann::json doc = nlohmann::json::parse(summary);
  doc["type"] = "summary";
  return before + doc.dump() + "\n" + R"({"type":"end","exit_status":1})" + "\n";
}

const char* kStarted =
    R"({"type":"process_started","host":"a","process":"scheduler","rank":null,"log":"scheduler.log"})"
    "\n"
    R"({"type":"process_started","host":"a","process":"rank 0","rank":0,"log":"worker_0.log"})"
    "\n"
    R"({"type":"process_started","host":"b","process":"rank 1","rank":1,"log":"worker_1.log"})"
    "\n";

std::string no_log(const std::string&) { return ""; }

TEST(CheckCollective, ResultFromTheEventsAndTheRanksOwnLogs) {
  std::map<std::string, std::string> logs = {
      {"worker_0.log", "connecting\nallreduce ok rank=0 world=2 seconds=0.125\n"},
      {"worker_1.log", "allreduce failed rank=1: told to fail\n"},
      {"scheduler.log", "allreduce ok rank=7 world=2 seconds=9\n"}};
  std::vector<std::string> read;
  auto read_log = [&](const std::string& name) {
    read.push_back(name);
    return logs[name];
  };
  CollectiveResult r = collective_result(1, 2.5, events_of(kFailedSummary, kStarted), read_log);
  EXPECT_TRUE(r.ran);
  EXPECT_EQ(r.cause, "rank 1 on b failed: exit 1");
  EXPECT_EQ(r.failed_process, "rank 1 on b");
  EXPECT_THAT(r.failed_hosts, ElementsAre("b"));
  ASSERT_EQ(r.last_lines.size(), 4u);
  // Only the ranks' logs are read (the scheduler's is not a rank's), each once.
  EXPECT_THAT(read, ElementsAre("worker_0.log", "worker_1.log"));
  ASSERT_EQ(r.rank_seconds.size(), 1u);
  EXPECT_DOUBLE_EQ(r.rank_seconds.at(0), 0.125);
  // A rank that failed after the root cause (its peer gone) does not fail its host.
  std::string echo = kFailedSummary;
  echo.replace(
      echo.find("\"status\": \"ended by teardown\", \"failed\": false,\n   \"torn_down\": true"),
      std::string("\"status\": \"ended by teardown\", \"failed\": false,\n   \"torn_down\": true")
          .size(),
      "\"status\": \"exit 1\", \"failed\": true, \"torn_down\": false");
  EXPECT_THAT(collective_result(1, 2.5, events_of(echo), no_log).failed_hosts, ElementsAre("b"));
  // Nothing started: the start_failed event is the cause.
  CollectiveResult none = collective_result(
      2, 0.3,
      R"({"type":"start_failed","exit_status":2,"reason":"--master_port=8118 is taken on the master a"})"
      "\n",
      no_log);
  EXPECT_EQ(none.cause, "--master_port=8118 is taken on the master a");
  EXPECT_TRUE(none.failed_hosts.empty());
  EXPECT_EQ(collective_result(3, 0.1, "not json\n", no_log).cause, "exit status 3");
}

CheckReport report_of(const std::vector<std::string>& hosts) {
  CheckReport report;
  for (const auto& a : hosts) report.hosts.push_back(HostReport{a, 0, false, {}});
  return report;
}

CheckStatus status_of(const CheckReport& r, size_t h) {
  return r.hosts[h].find("allreduce")->status;
}

TEST(CheckCollective, VerdictsNameTheHostsOfTheFailedRanks) {
  CheckReport report = report_of({"a", "b", "c"});
  CollectiveResult r = collective_result(1, 2.5, events_of(kFailedSummary), no_log);
  r.log_dir = "/tmp/msrun-ssh-allreduce-1";
  evaluate_collective(r, report);
  EXPECT_EQ(status_of(report, 0), CheckStatus::kSkip);
  EXPECT_EQ(status_of(report, 1), CheckStatus::kFail);
  EXPECT_EQ(status_of(report, 2), CheckStatus::kSkip);
  EXPECT_EQ(report.hosts[1].find("allreduce")->detail,
            "the all-reduce failed (exit status 1): rank 1 on b failed: exit 1; last lines: y | z "
            "| allreduce failed rank=1: told to fail by MSRUN_SSH_ALLREDUCE_FAIL_RANK; logs in "
            "/tmp/msrun-ssh-allreduce-1");
  EXPECT_THAT(report.hosts[0].find("allreduce")->detail, HasSubstr("failed on b"));
  EXPECT_EQ(check_exit_code(report), 1);
}

// A failure on a host the report does not name fails every host: a failed all-reduce never
// leaves check's exit status 0.
TEST(CheckCollective, AFailureOnAHostTheReportDoesNotNameFailsEveryHost) {
  CheckReport report = report_of({"a", "b"});
  CollectiveResult r = collective_result(1, 2.5, events_of(kFailedSummary), no_log);
  r.failed_hosts = {"a:2202"};
  evaluate_collective(r, report);
  EXPECT_EQ(status_of(report, 0), CheckStatus::kFail);
  EXPECT_EQ(status_of(report, 1), CheckStatus::kFail);
  EXPECT_EQ(check_exit_code(report), 1);
}

TEST(CheckCollective, VerdictsOfAPassAJobThatDidNotStartAndASkip) {
  CheckReport pass = report_of({"a", "b"});
  CollectiveResult ok = collective_result(0, 1.23, kStarted, [](const std::string& log) {
    return std::string(log == "worker_0.log" ? "allreduce ok rank=0 world=1 seconds=0.1\n" : "");
  });
  EXPECT_EQ(ok.rank_seconds.size(), 1u);
  evaluate_collective(ok, pass);
  for (size_t h = 0; h < 2; ++h) {
    EXPECT_EQ(status_of(pass, h), CheckStatus::kPass);
    EXPECT_EQ(pass.hosts[h].find("allreduce")->value, "1.2 s");
  }
  EXPECT_EQ(check_exit_code(pass), 0);
  CheckReport failed = report_of({"a", "b"});
  evaluate_collective(
      collective_result(254, 9,
                        R"({"type":"summary","cause":"host b lost: no answer to heartbeats"})"
                        "\n",
                        no_log),
      failed);
  EXPECT_EQ(status_of(failed, 0), CheckStatus::kFail);
  EXPECT_EQ(status_of(failed, 1), CheckStatus::kFail);
  EXPECT_THAT(failed.hosts[0].find("allreduce")->detail, HasSubstr("host b lost"));
  CheckReport skipped = report_of({"a"});
  CollectiveResult not_run;
  not_run.cause = "not run: a host is not connected";
  evaluate_collective(not_run, skipped);
  EXPECT_EQ(status_of(skipped, 0), CheckStatus::kSkip);
}

// ---- through a launcher ---------------------------------------------------------------------

TEST(CheckCollective, RunsThroughTheLauncherAndKeepsTheLogsOfAFailure) {
  Options o;
  o.net = o.net_collective = true;
  Plan plan = two_hosts(o);
  auto es = expectations_of(plan, o);
  std::string seen_dir;
  int status = 0;
  JobLauncher launch = [&](const Options& jo, Plan& jp, const std::string& console) {
    seen_dir = jo.log_dir;
    EXPECT_EQ(console, jo.log_dir + "/console.log");
    EXPECT_EQ(jp.hosts.size(), 2u);
    write_file(jo.log_dir + "/summary.json", status ? kFailedSummary : "{}");
    write_file(console, "0@a allreduce ok rank=0 world=2 seconds=0.1\n");
    return status;
  };
  CheckReport report = empty_report(plan, {}, "x");
  check_collective(o, plan, es, true, launch, report);
  ASSERT_TRUE(report.collective);
  EXPECT_EQ(report.hosts[1].find("allreduce")->status, CheckStatus::kPass);
  EXPECT_FALSE(std::filesystem::exists(seen_dir)) << "removed after a pass: " << seen_dir;
  EXPECT_THAT(format_json(report), HasSubstr("\"collective\""));

  status = 1;
  check_collective(o, plan, es, true, launch, report);
  EXPECT_EQ(report.hosts[1].find("allreduce")->status, CheckStatus::kFail);
  EXPECT_EQ(report.collective->log_dir, seen_dir);
  EXPECT_TRUE(std::filesystem::exists(seen_dir + "/console.log"));
  std::filesystem::remove_all(seen_dir);

  bool called = false;
  check_collective(
      o, plan, es, false,
      [&](const Options&, Plan&, const std::string&) {
        called = true;
        return 0;
      },
      report);
  EXPECT_FALSE(called);
  EXPECT_EQ(report.hosts[0].find("allreduce")->status, CheckStatus::kSkip);

  check_collective(
      o, plan, es, true,
      [](const Options&, Plan&, const std::string&) -> int { throw InputError("no log dir"); },
      report);
  EXPECT_EQ(report.collective->cause, "no log dir");
  EXPECT_EQ(report.hosts[0].find("allreduce")->status, CheckStatus::kFail);
  std::filesystem::remove_all(report.collective->log_dir);
}

}  // namespace
}  // namespace msrun_ssh
