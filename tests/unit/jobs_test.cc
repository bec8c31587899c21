// Job records and the job subcommands' logic (src/jobs/): records written and read back under a
// temporary XDG_STATE_HOME, the hosts' answers (job_state.sh) parsed and shown, `logs` over
// ReplyTransport, and the remote scripts run here for real on a detached process.
#include "msrun_ssh/jobs.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <thread>

#include "msrun_ssh/base.h"
#include "msrun_ssh/cli.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/error.h"
#include "reply_transport.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

using fake::Reply;
using fake::ReplyTransport;

// A detached job of two hosts: the scheduler and rank 0 on node0, rank 1 on node1.
JobRecord two_hosts(const std::string& log_dir = "/w/logs") {
  JobRecord r;
  r.id = "20260101-000000-abcdef";
  r.hostfile = "/etc/hosts.toml";
  r.argv = {"msrun-ssh", "--join=False", "train.py"};
  r.cwd = "/home/u";
  r.started = "2026-01-01T00:00:00.000Z";
  r.detached = true;
  r.launcher_pid = 4242;
  r.launcher_start = 123456789012;
  r.launcher_host = "login1";
  r.ssh = {"/home/u/.ssh/config", HostKeyPolicy::kAcceptNew, 7, 32, 5};
  r.hosts = {{{"node0", "u", 2222, "/k", "/kh"}, 0, "/w"}, {{"node1", "", {}, "", ""}, 1, "/w"}};
  r.processes = {{-1, 0, 0, log_dir + "/scheduler.log"},
                 {0, 0, 0, log_dir + "/worker_0.log"},
                 {1, 1, 1, log_dir + "/worker_1.log"}};
  return r;
}

class JobRecords : public test::TempDirTest {};

TEST_F(JobRecords, WhereTheyLive) {
  auto env = [](const char* state, const char* home) {
    return [=](const char* n) -> const char* {
      return std::string(n) == "XDG_STATE_HOME" ? state : std::string(n) == "HOME" ? home : nullptr;
    };
  };
  EXPECT_EQ(jobs_dir(env("/s", "/h")), "/s/msrun-ssh/jobs");
  EXPECT_EQ(jobs_dir(env(nullptr, "/h")), "/h/.local/state/msrun-ssh/jobs");
  EXPECT_EQ(jobs_dir(env("relative", "/h")), "/h/.local/state/msrun-ssh/jobs");
  EXPECT_EQ(jobs_dir(env(nullptr, nullptr)), "");
  EXPECT_EQ(absolute_path("logs/a", "/w"), "/w/logs/a");
  EXPECT_EQ(absolute_path("/x", "/w"), "/x");
}

TEST_F(JobRecords, WrittenAndReadBack) {
  std::string dir = dir_ + "/state/msrun-ssh/jobs";
  JobRecord r = two_hosts();
  r.exit_status = 3;
  r.ended = "2026-01-01T00:01:00.000Z";
  ASSERT_TRUE(write_job_record(dir, r, stderr));
  struct stat st {};
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(stat((dir_ + "/state").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  JobRecord back = load_job_record(dir, r.id);
  EXPECT_EQ(record_json(back), record_json(r));
  EXPECT_EQ(back.hosts[0].endpoint.port, 2222);
  EXPECT_FALSE(back.hosts[1].endpoint.port.has_value());
  EXPECT_EQ(back.ssh.strict_host_key_checking, HostKeyPolicy::kAcceptNew);
  EXPECT_EQ(back.ssh.jump_fanout, 5);
  EXPECT_EQ(back.processes[2].host, 1u);
  EXPECT_EQ(back.processes[0].rank, -1);
  EXPECT_EQ(back.launcher_host, "login1");
  EXPECT_EQ(back.launcher_start, r.launcher_start);
  nlohmann::json j = record_json(r);
  EXPECT_TRUE(j["processes"][0]["rank"].is_null());
  EXPECT_EQ(j["processes"][2]["host"], "node1");
  EXPECT_EQ(j["ssh"]["connect_timeout"], 7);
  EXPECT_EQ(j["exit_status"], 3);
  // Nothing but the record is left in the directory (the temporary name was renamed).
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1u);
}

// One address may be two hosts on two ports (containers behind one machine's port forwards):
// each process stays on its own host, and a record of an older launcher (no index) still reads.
TEST_F(JobRecords, OneAddressOnTwoPortsIsTwoHosts) {
  std::string dir = dir_ + "/jobs";
  JobRecord r = two_hosts();
  r.hosts[1].endpoint.address = "node0";
  r.hosts[1].endpoint.port = 2223;
  ASSERT_TRUE(write_job_record(dir, r, stderr));
  JobRecord back = load_job_record(dir, r.id);
  ASSERT_EQ(back.processes.size(), 3u);
  EXPECT_EQ(back.processes[1].host, 0u);
  EXPECT_EQ(back.processes[2].host, 1u);
  EXPECT_EQ(back.hosts[back.processes[2].host].endpoint.port, 2223);
  nlohmann::json old = record_json(r);
  for (auto& p : old["processes"]) p.erase("host_index");
  write("jobs/" + r.id + ".json", old.dump());
  EXPECT_EQ(load_job_record(dir, r.id).processes[2].host, 0u);
  // The two are named with their ports, as the run named them (a record without the mark: the
  // entries of one address among those it holds).
  EXPECT_EQ(host_key(back.hosts[0]), "node0:2222");
  EXPECT_EQ(host_key(back.hosts[1]), "node0:2223");
  EXPECT_EQ(host_key(cluster_of(back).hosts[1]), "node0:2223");
  nlohmann::json wrong = record_json(r);
  wrong["processes"][2]["host_index"] = 2;
  write("jobs/" + r.id + ".json", wrong.dump());
  EXPECT_EQ(
      test::error_of([&] { load_job_record(dir, r.id); }),
      dir + "/" + r.id + ".json: not a job record: host_index 2 is not a whole number in 0..1");
}

// The run's mark is recorded: a host that shared its address only with a spare the job never took
// (so not in the record) is still named with its port by stop, stack, status and logs.
TEST_F(JobRecords, AHostNamedWithItsPortByTheRunIsSoByTheRecord) {
  std::string dir = dir_ + "/jobs";
  JobRecord r = two_hosts();
  Host shared;
  shared.address = "node0";
  shared.port = 2222;
  shared.shares_address = true;  // make_plan's mark: a spare box:2223 was in the host file
  r.hosts[0] = job_host(shared, 0, "/w");
  ASSERT_TRUE(write_job_record(dir, r, stderr));
  JobRecord back = load_job_record(dir, r.id);
  EXPECT_EQ(host_key(back.hosts[0]), "node0:2222");
  EXPECT_EQ(host_key(back.hosts[1]), "node1");
  EXPECT_EQ(host_key(cluster_of(back).hosts[0]), "node0:2222");
  // A record written before the mark: a host and a spare a restart took on one address.
  nlohmann::json old = record_json(r);
  old["spares"] = nlohmann::json::array({old["hosts"][0]});
  old["spares"][0]["port"] = 2223;
  for (auto* entries : {&old["hosts"], &old["spares"]})
    for (auto& h : *entries) h.erase("shares_address");
  write("jobs/" + r.id + ".json", old.dump());
  JobRecord older = load_job_record(dir, r.id);
  EXPECT_EQ(host_key(older.hosts[0]), "node0:2222");
  EXPECT_EQ(host_key(older.spares[0]), "node0:2223");
  EXPECT_EQ(host_key(older.hosts[1]), "node1");
  EXPECT_EQ(host_key(cluster_of(older).hosts[2]), "node0:2223");
  r.hosts[0].shares_address = false;
  ASSERT_TRUE(write_job_record(dir, r, stderr));
  EXPECT_EQ(host_key(load_job_record(dir, r.id).hosts[0]), "node0");
}

TEST_F(JobRecords, NewestFirstBrokenOnesSkipped) {
  std::string dir = dir_ + "/jobs";
  JobRecord a = two_hosts(), b = two_hosts();
  b.id = "20260102-000000-000001";
  b.started = "2026-01-02T00:00:00.000Z";
  ASSERT_TRUE(write_job_record(dir, a, stderr));
  ASSERT_TRUE(write_job_record(dir, b, stderr));
  write("jobs/broken.json", "{\"id\": 3");
  std::FILE* err = std::tmpfile();
  auto all = load_job_records(dir, err);
  std::rewind(err);
  EXPECT_NE(test::read_all(err).find("broken.json: not a job record"), std::string::npos);
  std::fclose(err);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, b.id);
  EXPECT_EQ(all[1].id, a.id);
  EXPECT_TRUE(load_job_records(dir_ + "/none", stderr).empty());
}

// A record edited or damaged by hand: a located error naming what is wrong, never nlohmann's
// internals, and never a value that would hang status or list (a fanout of 0 started nothing).
TEST_F(JobRecords, ADamagedRecordSaysWhatIsWrong) {
  std::string dir = dir_ + "/jobs";
  JobRecord r = two_hosts();
  ASSERT_TRUE(write_job_record(dir, r, stderr));
  nlohmann::json j = record_json(r);
  auto error_with = [&](const nlohmann::json& bad) {
    write("jobs/" + r.id + ".json", bad.dump());
    return test::error_of([&] { load_job_record(dir, r.id); });
  };
  std::string path = dir + "/" + r.id + ".json";
  nlohmann::json zero = j;
  zero["ssh"]["fanout"] = 0;
  EXPECT_EQ(error_with(zero),
            path + ": not a job record: ssh.fanout 0 is not a whole number in 1..4096");
  nlohmann::json jump = j;
  jump["ssh"]["jump_fanout"] = 0;
  EXPECT_EQ(error_with(jump),
            path + ": not a job record: ssh.jump_fanout 0 is not a whole number in 1..4096");
  nlohmann::json older = j;  // a record from before jump_fanout was recorded
  older["ssh"].erase("jump_fanout");
  write("jobs/" + r.id + ".json", older.dump());
  EXPECT_EQ(load_job_record(dir, r.id).ssh.jump_fanout, 8);
  // A number a whole one is read from must be one: converting 1e300 or a fraction is undefined.
  nlohmann::json huge = j;
  huge["ssh"]["fanout"] = 1e300;
  EXPECT_EQ(error_with(huge),
            path + ": not a job record: ssh.fanout 1e+300 is not a whole number in 1..4096");
  nlohmann::json pid = j;
  pid["launcher_pid"] = -1e300;
  EXPECT_EQ(error_with(pid), path + ": not a job record: launcher_pid -1e+300 is not a whole " +
                                 "number in 0..2147483647");
  nlohmann::json port = j;
  port["hosts"][0]["port"] = 22.5;
  EXPECT_EQ(error_with(port),
            path + ": not a job record: port 22.5 is not a whole number in 1..65535");
  nlohmann::json rank = j;
  rank["processes"][0]["rank"] = -2;
  EXPECT_EQ(error_with(rank),
            path + ": not a job record: rank -2 is not a whole number in 0..2147483647");
  nlohmann::json status = j;
  status["exit_status"] = "0";
  EXPECT_EQ(error_with(status),
            path + ": not a job record: exit_status \"0\" is not a whole number in 0..255");
  nlohmann::json negative = j;
  negative["ssh"]["connect_timeout"] = -5;
  EXPECT_EQ(error_with(negative),
            path + ": not a job record: ssh.connect_timeout -5 is not 0.1..3600 s");
  write("jobs/" + r.id + ".json", "{\"id\": 3");
  std::string invalid = test::error_of([&] { load_job_record(dir, r.id); });
  EXPECT_EQ(invalid.rfind(path + ": not a job record: invalid JSON: parse error at line 1", 0), 0u)
      << invalid;
  EXPECT_EQ(invalid.find("json.exception"), std::string::npos) << invalid;
}

TEST_F(JobRecords, UnknownIdNamesTheDirectory) {
  EXPECT_EQ(test::error_of([&] { load_job_record(dir_, "nope"); }), "no job nope in " + dir_);
}

TEST_F(JobRecords, AWriteThatFailsIsAWarning) {
  write("file", "");
  std::FILE* err = std::tmpfile();
  EXPECT_FALSE(write_job_record(dir_ + "/file/jobs", two_hosts(), err));
  EXPECT_FALSE(write_job_record("", two_hosts(), err));
  std::rewind(err);
  std::string text = test::read_all(err);
  std::fclose(err);
  EXPECT_NE(text.find("msrun-ssh: warning: cannot write the job record " + dir_ + "/file/jobs/"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("neither XDG_STATE_HOME nor HOME is set"), std::string::npos) << text;
}

TEST_F(JobRecords, MadeFromThePlan) {
  Options o;
  o.hostfile = "hosts.toml";
  o.launcher_cwd = "/home/u";
  o.command_line = {"msrun-ssh", "--hostfile", "hosts.toml", "t.py"};
  o.connect_timeout = 3;
  Plan plan;
  plan.job_id = "j";
  HostPlan h;
  h.node_rank = 0;
  h.host.address = "n0";
  h.host.port = 22;
  Process sched;
  sched.role = Role::kScheduler;
  sched.workdir = "/w";
  Process w;
  w.rank = 0;
  w.workdir = "/w";
  h.processes = {sched, w};
  plan.hosts = {h};
  JobRecord r = make_job_record(o, plan, {"/w/./scheduler.log", "/w/./worker_0.log"}, true);
  EXPECT_EQ(r.hostfile, "/home/u/hosts.toml");
  EXPECT_EQ(r.argv, o.command_line);
  EXPECT_EQ(r.launcher_pid, static_cast<long>(getpid()));
  utsname u{};
  ASSERT_EQ(uname(&u), 0);
  EXPECT_EQ(r.launcher_host, u.nodename);
  EXPECT_EQ(r.hosts[0].workdir, "/w");
  EXPECT_EQ(r.hosts[0].endpoint.port, 22);
  ASSERT_EQ(r.processes.size(), 2u);
  EXPECT_EQ(r.processes[0].rank, -1);
  EXPECT_EQ(r.processes[1].log, "/w/./worker_0.log");
  EXPECT_EQ(r.ssh.connect_timeout, 3);
  EXPECT_TRUE(r.started.ends_with("Z"));
  Cluster c = cluster_of(r);
  EXPECT_EQ(c.hosts[0].address, "n0");
  Options merged = options_from_record(Options{}, two_hosts());
  EXPECT_EQ(merged.ssh_config, "/home/u/.ssh/config");
  EXPECT_EQ(merged.strict_host_key_checking, HostKeyPolicy::kAcceptNew);
  EXPECT_EQ(merged.connect_timeout, 7);
  EXPECT_EQ(merged.jump_fanout, 5);  // stop reaches the hosts through a jump host as the job did
  EXPECT_EQ(merged.hostfile, "/etc/hosts.toml");
  // What the command line gives wins over the record.
  Options given;
  given.connect_timeout = 2;
  given.connect_timeout_given = true;
  EXPECT_EQ(options_from_record(given, two_hosts()).connect_timeout, 2);
  given.fanout = 3;
  given.fanout_given = true;
  given.jump_fanout = 2;
  given.jump_fanout_given = true;
  EXPECT_EQ(options_from_record(given, two_hosts()).fanout, 3);
  EXPECT_EQ(options_from_record(given, two_hosts()).jump_fanout, 2);
  EXPECT_EQ(merged.fanout, 32);
}

// The spares a restart took in are in an attached job's record under their own key (older
// readers pass it over, and a record without it has none), so that `stop` and `stack` reach them
// after the job's hosts; `list` counts the hosts the job started on.
TEST_F(JobRecords, TheSparesARestartTookInAreReachedFromTheRecord) {
  JobRecord r = two_hosts();
  r.detached = false;
  Host spare;
  spare.address = "s0";
  spare.port = 2222;
  r.spares.push_back(job_host(spare, 1, "/sw"));
  nlohmann::json j = record_json(r);
  ASSERT_TRUE(j.contains("spares"));
  EXPECT_EQ(j["hosts"].size(), 2u);
  JobRecord back = record_from_json(j, "test");
  ASSERT_EQ(back.spares.size(), 1u);
  EXPECT_EQ(back.spares[0].endpoint.address, "s0");
  EXPECT_EQ(back.spares[0].endpoint.port, 2222);
  EXPECT_EQ(back.spares[0].node_rank, 1);
  EXPECT_EQ(back.spares[0].workdir, "/sw");
  Cluster c = cluster_of(back);
  ASSERT_EQ(c.hosts.size(), 3u);
  EXPECT_EQ(c.hosts[2].address, "s0");
  EXPECT_EQ(c.hosts[2].port, 2222);
  EXPECT_EQ(c.hosts[2].workdir, "/sw");
  EXPECT_EQ(host_key(c.hosts[2]), "s0") << "alone on its address: named without its port";
  EXPECT_NE(format_job_list({{back, "running"}}).find("      2          3  running"),
            std::string::npos)
      << format_job_list({{back, "running"}});
  j.erase("spares");  // an older launcher's record
  EXPECT_TRUE(record_from_json(j, "test").spares.empty());
}

TEST_F(JobRecords, AHostSourceStaysItsName) {
  Options o;
  o.hostfile = "slurm";
  o.launcher_cwd = "/home/u";
  Plan plan;
  plan.job_id = "j";
  EXPECT_EQ(make_job_record(o, plan, {}, true).hostfile, "slurm");
  o.hostfile = "./slurm";  // a file of that name
  EXPECT_EQ(make_job_record(o, plan, {}, true).hostfile, "/home/u/./slurm");
}

// ---- the hosts' answers
// --------------------------------------------------------------------------

TEST(JobState, ParsesTheScriptsAnswer) {
  auto s = parse_job_state(
      "hz 100\nalive 3\nproc sched 11 alive - 250 step 3 of 9\nproc 0 12 ended 143 - \n"
      "proc 1 - unknown - - \n");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->hz, 100);
  EXPECT_EQ(s->alive, 3);
  ASSERT_EQ(s->processes.size(), 3u);
  EXPECT_EQ(s->processes[0].rank_word, "sched");
  EXPECT_EQ(s->processes[0].pid, 11);
  EXPECT_EQ(s->processes[0].ticks, 250);
  EXPECT_EQ(s->processes[0].last_line, "step 3 of 9");
  EXPECT_EQ(s->processes[1].status, 143);
  EXPECT_FALSE(s->processes[1].ticks.has_value());
  EXPECT_FALSE(s->processes[2].pid.has_value());
  EXPECT_FALSE(parse_job_state("alive 1\n").has_value());
  EXPECT_FALSE(parse_job_state("hz 100\nalive 1\nproc 0\n").has_value());
  EXPECT_FALSE(parse_job_state("").has_value());
}

TEST(JobState, CommandsQuoteEverything) {
  JobRecord r = two_hosts("/w/my logs");
  std::string c = job_state_command(r, 0);
  EXPECT_EQ(c.rfind("exec sh -c '", 0), 0u);
  EXPECT_TRUE(c.ends_with("' 'msrun-ssh-state' '" + r.id + "' 'sched' '/w/my logs/.msrun-ssh/" +
                          r.id + "/sched' '/w/my logs/scheduler.log' '0' '/w/my logs/.msrun-ssh/" +
                          r.id + "/0' '/w/my logs/worker_0.log'"))
      << c;
  EXPECT_TRUE(job_logs_command(r, 2, true)
                  .ends_with("'msrun-ssh-logs' '" + r.id + "' '/w/my logs/worker_1.log' 'follow'"));
  EXPECT_TRUE(job_logs_command(r, 2, false).ends_with("'once'"));
}

TEST(JobState, StatusFromEveryHostOneUnreachable) {
  JobRecord r = two_hosts();
  r.hosts.push_back({{"node2", "", {}, "", ""}, 2, "/w"});
  r.processes.push_back({2, 2, 2, "/w/logs/worker_2.log"});
  ReplyTransport t;
  t.on("msrun-ssh-state",
       Reply{.output = {{0.001,
                         "hz 100\nalive 2\nproc sched 11 alive - 250 sched line\n"
                         "proc 0 12 ended 143 - last words\n"}}},
       0);
  t.on("msrun-ssh-state", Reply{.output = {{0.001, "hz 100\nalive 0\nproc 1 13 ended 3 - x\n"}}},
       1);
  auto rows = query_processes(t, r, {"", "", "Connection refused"}, 5);
  ASSERT_EQ(t.execs.size(), 2u);  // the unreachable host is not asked
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].state, "alive");
  EXPECT_EQ(rows[0].cpu_s, 2.5);
  EXPECT_EQ(rows[1].state, "killed");
  EXPECT_EQ(rows[1].signal, "TERM");
  EXPECT_EQ(rows[2].state, "exited");
  EXPECT_EQ(rows[2].status, 3);
  EXPECT_EQ(rows[3].state, "unreachable");
  EXPECT_EQ(rows[3].why, "Connection refused");

  std::string table = format_status(r, rows);
  EXPECT_NE(table.find("host    rank       pid  state"), std::string::npos) << table;
  EXPECT_NE(table.find("node0  sched        11  alive"), std::string::npos) << table;
  EXPECT_NE(table.find("killed (SIGTERM, status 143)"), std::string::npos) << table;
  EXPECT_NE(table.find("exited (3)"), std::string::npos) << table;
  EXPECT_NE(table.find("unreachable: Connection refused"), std::string::npos) << table;
  EXPECT_NE(table.find("2.5s  sched line"), std::string::npos) << table;

  nlohmann::json j = status_json(r, rows);
  EXPECT_TRUE(j["processes"][0]["rank"].is_null());
  EXPECT_EQ(j["processes"][0]["pid"], 11);
  EXPECT_EQ(j["processes"][0]["cpu_seconds"], 2.5);
  EXPECT_EQ(j["processes"][1]["exit_status"], 143);
  EXPECT_EQ(j["processes"][1]["signal"], "TERM");
  EXPECT_EQ(j["processes"][3]["state"], "unreachable");
  EXPECT_EQ(job_state(r, rows, false), "unknown (host node2 unreachable)");
}

TEST(JobState, HostWithoutAnswerIsUnreachable) {
  JobRecord r = two_hosts();
  ReplyTransport t;
  t.on("msrun-ssh-state", Reply{.output = {{0.001, "garbage\n"}}}, 0);
  t.on("msrun-ssh-state", Reply{.exit_at = -1}, 1);  // never answers
  auto rows = query_processes(t, r, {"", ""}, 2);
  EXPECT_EQ(rows[0].state, "unreachable");
  EXPECT_EQ(rows[2].state, "unreachable");
  EXPECT_EQ(rows[2].why, "no answer");
}

TEST(JobState, WhatListShows) {
  JobRecord r = two_hosts();
  ProcessStatus alive{.rank = 0, .host = "node0", .state = "alive"};
  ProcessStatus ok{.rank = 1, .host = "node1", .state = "exited", .status = 0};
  ProcessStatus bad{.rank = 1, .host = "node1", .state = "exited", .status = 2};
  EXPECT_EQ(job_state(r, {alive, ok}, false), "running (1/2 alive)");
  EXPECT_EQ(job_state(r, {ok, ok}, false), "ended (all exit 0)");
  EXPECT_EQ(job_state(r, {ok, bad}, false), "ended (1 failed)");
  // Gone without an exit status (its host rebooted, its keeper SIGKILLed): not a success.
  ProcessStatus gone{.rank = 1, .host = "node1", .state = "unknown"};
  EXPECT_EQ(job_state(r, {ok, gone}, false), "ended (1 without an exit status)");
  EXPECT_EQ(job_state(r, {bad, gone}, false), "ended (1 failed, 1 without an exit status)");
  JobRecord attached = two_hosts();
  attached.detached = false;
  EXPECT_EQ(job_state(attached, {}, true), "running");
  EXPECT_EQ(job_state(attached, {}, false), "ended (launcher gone)");
  attached.exit_status = 7;
  EXPECT_EQ(job_state(attached, {}, false), "ended (exit 7)");

  std::vector<JobListing> jobs{{r, "running (1/2 alive)"}, {attached, "ended (exit 7)"}};
  std::string table = format_job_list(jobs);
  EXPECT_EQ(table.substr(0, table.find('\n')),
            "id                        started                   hosts  processes  state");
  EXPECT_NE(table.find(r.id + "    2026-01-01T00:00:00.000Z      2          3  running (1/2 "
                              "alive)\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("ended (exit 7) [attached]\n"), std::string::npos) << table;
  nlohmann::json j = job_list_json(jobs);
  EXPECT_EQ(j[0]["id"], r.id);
  EXPECT_EQ(j[0]["processes"], 3);
  EXPECT_EQ(j[1]["detached"], false);
  EXPECT_EQ(j[1]["state"], "ended (exit 7)");
}

// ---- logs
// ----------------------------------------------------------------------------------------

struct Console {
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  std::unique_ptr<Output> output;
  Console() {
    OutputConfig oc;
    oc.console_out = fileno(out);
    oc.console_err = fileno(err);
    output = std::make_unique<Output>(oc);
  }
  ~Console() {
    std::fclose(out);
    std::fclose(err);
  }
  std::string text(std::FILE* f) {
    output->drain();
    std::rewind(f);
    return test::read_all(f);
  }
};

TEST(JobLogs, PrefixedAsAnAttachedRun) {
  JobRecord r = two_hosts();
  ReplyTransport t;
  t.on("scheduler.log", Reply{.output = {{0.001, "s1\ns2"}}});
  t.on("worker_0.log", Reply{.output = {{0.001, "a\n"}, {0.5, "b\n"}}, .exit_at = 1});
  t.on("worker_1.log", Reply{.output = {{0.002, "c\n"}}});
  Console c;
  int code = logs_on_hosts(
      t, r, {"", ""}, std::nullopt, true, *c.output, [] { return 0; }, c.err);
  EXPECT_EQ(code, 0);
  std::string out = c.text(c.out);
  EXPECT_NE(out.find("[sched@node0] s1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("[sched@node0] s2\n"), std::string::npos) << out;  // the last, cut line
  EXPECT_NE(out.find("[0@node0] a\n"), std::string::npos) << out;
  EXPECT_NE(out.find("[0@node0] b\n"), std::string::npos) << out;
  EXPECT_NE(out.find("[1@node1] c\n"), std::string::npos) << out;
  ASSERT_EQ(t.execs.size(), 3u);
  EXPECT_NE(t.execs[1].command.find("'follow'"), std::string::npos);
  EXPECT_EQ(t.execs[2].host, 1u);
}

TEST(JobLogs, OneRankAndAnUnreachableHost) {
  JobRecord r = two_hosts();
  ReplyTransport t;
  t.on("worker_0.log", Reply{.output = {{0.001, "a\n"}}});
  Console c;
  EXPECT_EQ(logs_on_hosts(
                t, r, {"", ""}, 0, false, *c.output, [] { return 0; }, c.err),
            0);
  EXPECT_EQ(c.text(c.out), "[0@node0] a\n");
  ASSERT_EQ(t.execs.size(), 1u);
  EXPECT_NE(t.execs[0].command.find("'once'"), std::string::npos);

  ReplyTransport t2;
  Console c2;
  EXPECT_EQ(logs_on_hosts(
                t2, r, {"", "timed out"}, 1, false, *c2.output, [] { return 0; }, c2.err),
            kExitHostFailure);
  EXPECT_EQ(c2.text(c2.err), "msrun-ssh: node1: unreachable (timed out): no log of 1@node1\n");
  EXPECT_EQ(test::error_of([&] {
              logs_on_hosts(
                  t2, r, {"", ""}, 9, false, *c2.output, [] { return 0; }, c2.err);
            }),
            "logs: job " + r.id + " has no rank 9");
}

// Two hosts on one address, ports of their own: their logs, their status rows and an unreachable
// one are named with their ports, as the run named them.
TEST(JobLogs, HostsOnOneAddressAreNamedWithTheirPorts) {
  JobRecord r = two_hosts();
  r.hosts[1].endpoint = {"node0", "", 2223, "", ""};
  r.hosts[0].shares_address = r.hosts[1].shares_address = true;
  ReplyTransport t;
  t.on("scheduler.log", Reply{.output = {{0.001, "s\n"}}});
  t.on("worker_0.log", Reply{.output = {{0.001, "a\n"}}});
  Console c;
  EXPECT_EQ(logs_on_hosts(
                t, r, {"", "timed out"}, std::nullopt, false, *c.output, [] { return 0; }, c.err),
            kExitHostFailure);
  EXPECT_NE(c.text(c.out).find("[0@node0:2222] a\n"), std::string::npos) << c.text(c.out);
  EXPECT_EQ(c.text(c.err),
            "msrun-ssh: node0:2223: unreachable (timed out): no log of 1@node0:2223\n");
  ReplyTransport s;
  s.on("msrun-ssh-state", Reply{.output = {{0.001, "hz 100\nalive 1\nproc 0 12 alive - 1 x\n"}}},
       0);
  auto rows = query_processes(s, r, {"", "Connection refused"}, 5);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].host, "node0:2222");
  EXPECT_EQ(rows[2].host, "node0:2223");
  EXPECT_EQ(job_state(r, rows, false), "unknown (host node0:2223 unreachable)");
}

TEST(JobLogs, ASignalEndsTheFollowAndKillsEveryTail) {
  JobRecord r = two_hosts();
  ReplyTransport t;
  t.on("log", Reply{.output = {{0.001, "x\n"}}, .exit_at = -1});  // follows for ever
  Console c;
  int polls = 0;
  int code = logs_on_hosts(
      t, r, {"", ""}, std::nullopt, true, *c.output, [&] { return ++polls >= 3 ? kExitSigint : 0; },
      c.err);
  EXPECT_EQ(code, kExitSigint);
  EXPECT_EQ(t.kills.size(), 3u);
  for (const auto& k : t.kills) EXPECT_EQ(k.signal, "KILL");
  EXPECT_NE(c.text(c.out).find("[1@node1] x\n"), std::string::npos);
}

// ---- the remote scripts, run here
// ----------------------------------------------------------------

class JobScripts : public test::TempDirTest {
 protected:
  // Starts `argv` detached as rank 0 of job_ with its log in dir_/logs; returns the record.
  JobRecord start(const std::vector<std::string>& argv) {
    Process p;
    p.rank = 0;
    p.workdir = dir_;
    p.argv = argv;
    std::string out = test::shell_output(detached_command(p, job_, "logs/worker_0.log"));
    EXPECT_EQ(out.rfind("msrun-ssh: started ", 0), 0u) << out;
    JobRecord r;
    r.id = job_;
    r.detached = true;
    r.hosts = {{{"local", "", {}, "", ""}, 0, dir_}};
    r.processes = {{0, 0, 0, dir_ + "/logs/worker_0.log"}};
    return r;
  }
  std::optional<RemoteState> state(const JobRecord& r) {
    return parse_job_state(test::shell_output(job_state_command(r, 0)));
  }
  // Waits (bounded) until `done` holds for the job's state.
  RemoteState wait_state(const JobRecord& r, const std::function<bool(const RemoteState&)>& done) {
    for (int i = 0; i < 500; ++i) {
      auto s = state(r);
      if (s && !s->processes.empty() && done(*s)) return *s;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "state not reached";
    return {};
  }
  std::string job_ = fmt::format("jobs-test-{}", getpid());
};

TEST_F(JobScripts, StateOfALiveThenKilledProcess) {
  JobRecord r = start({"sh", "-c", "echo first; printf 'bar 10%%\\rbar 20%%\\n'; exec sleep 30"});
  RemoteState s = wait_state(r, [](const RemoteState& x) {
    return x.processes[0].state == "alive" && x.processes[0].last_line == "bar 20%";
  });
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_GE(s.alive, 1);
  EXPECT_GT(s.hz, 0);
  ASSERT_TRUE(s.processes[0].pid.has_value());
  EXPECT_TRUE(s.processes[0].ticks.has_value());
  ::kill(static_cast<pid_t>(*s.processes[0].pid), SIGTERM);
  // Ended, and its keeper (which wrote the status) gone too.
  s = wait_state(
      r, [](const RemoteState& x) { return x.processes[0].state == "ended" && x.alive == 0; });
  EXPECT_EQ(s.processes[0].status, 143);
  EXPECT_EQ(s.alive, 0);
  EXPECT_EQ(test::shell_output(job_logs_command(r, 0, false)), "first\nbar 10%\rbar 20%\n");
  // Following a job that has ended prints the whole log and ends.
  EXPECT_EQ(test::shell_output(job_logs_command(r, 0, true)), "first\nbar 10%\rbar 20%\n");
}

// A stop that has to SIGKILL (the process ignores SIGTERM) leaves the status: the keeper, whose
// command line held the word MSRUN_SSH_JOB=ID, was taken for a process of the job and killed
// before it wrote it (status said "unknown", list "without an exit status").
TEST_F(JobScripts, AStopThatHasToKillLeavesTheStatus) {
  JobRecord r = start({"sh", "-c", "trap '' TERM; exec sleep 30"});
  wait_state(r, [](const RemoteState& x) { return x.processes[0].state == "alive"; });
  std::string stopped = test::shell_output(stop_command(job_, 0.3));
  EXPECT_EQ(stopped.find("sh -c _ms_s"), std::string::npos) << "the keeper was signalled:\n"
                                                            << stopped;
  RemoteState s =
      wait_state(r, [](const RemoteState& x) { return x.processes[0].state == "ended"; });
  EXPECT_EQ(s.processes[0].status, 137);
}

// A status written is the process's end, whatever runs under its pid afterwards (another process
// of the job given the same pid was shown "alive").
TEST_F(JobScripts, AStatusWrittenIsTheEndWhateverRunsUnderItsPid) {
  JobRecord r = start({"sh", "-c", "exit 3"});
  wait_state(r, [](const RemoteState& x) { return x.processes[0].state == "ended"; });
  Process other;
  other.rank = 1;
  other.workdir = dir_;
  other.argv = {"sleep", "30"};
  test::shell_output(detached_command(other, job_, "logs/worker_1.log"));
  std::string other_pid;
  for (int i = 0; i < 500 && !other_pid.ends_with("\n"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    other_pid = test::slurp(dir_ + "/logs/.msrun-ssh/" + job_ + "/1.pid");
  }
  ASSERT_TRUE(other_pid.ends_with("\n"));
  std::ofstream(dir_ + "/logs/.msrun-ssh/" + job_ + "/0.pid") << other_pid;
  std::optional<RemoteState> s = state(r);
  ASSERT_TRUE(s && s->processes.size() == 1u);
  EXPECT_EQ(s->processes[0].state, "ended");
  EXPECT_EQ(s->processes[0].status, 3);
  ::kill(static_cast<pid_t>(std::stol(other_pid)), SIGKILL);
}

TEST_F(JobScripts, FollowPrintsWhatComesUntilTheEnd) {
  JobRecord r = start({"sh", "-c", "echo one; sleep 1; echo two; exit 4"});
  // Its stdin open, as the launcher's channel keeps it (a reader whose stdin ends stops at once).
  std::string follow = fmt::format("{} < <(sleep 5)", job_logs_command(r, 0, true));
  std::string out = test::shell_output(fmt::format("bash -c {}", shell_quote(follow)));
  EXPECT_EQ(out, "one\ntwo\n");
  RemoteState s = state(r).value_or(RemoteState{});
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_EQ(s.processes[0].state, "ended");
  EXPECT_EQ(s.processes[0].status, 4);
}

TEST_F(JobScripts, FollowEndsWhenItsStdinEnds) {
  JobRecord r = start({"sh", "-c", "echo one; exec sleep 30"});
  wait_state(r, [](const RemoteState& x) { return x.processes[0].last_line == "one"; });
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(test::shell_output(job_logs_command(r, 0, true) + " < /dev/null"), "one\n");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  RemoteState s = state(r).value_or(RemoteState{});
  ASSERT_EQ(s.processes.size(), 1u);
  ASSERT_TRUE(s.processes[0].pid.has_value());
  ::kill(static_cast<pid_t>(*s.processes[0].pid), SIGKILL);
}

}  // namespace
}  // namespace msrun_ssh

namespace msrun_ssh {
namespace {

// /proc/PID/stat read once: the command name whole even with ") " in it (it ends at the last
// ")"), the state letter, and the start time; a zombie is 'Z'; no such process (pid 0), nothing.
TEST_F(JobRecords, ProcessStatReadsANameWithParenthesesAndTheState) {
  test::Child child = test::sleep_copy(dir_ + "/a) Z (b", "a) Z (b", 30);
  const pid_t pid = child.pid();
  std::optional<ProcessStat> st = process_stat(pid);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->comm, "a) Z (b");
  EXPECT_NE(st->state, 'Z');
  EXPECT_GT(st->start_ticks, 0);
  EXPECT_EQ(st->start_ticks, process_start_ticks(pid));
  kill(pid, SIGKILL);
  for (int i = 0; i < 200 && (st = process_stat(pid)) && st->state != 'Z'; ++i) usleep(10 * 1000);
  ASSERT_TRUE(st) << "an unreaped child is a zombie, still there";
  EXPECT_EQ(st->state, 'Z');
  ASSERT_EQ(waitpid(pid, nullptr, 0), pid);
  child.reaped();
  EXPECT_FALSE(process_stat(0)) << "no such process";
  EXPECT_EQ(process_start_ticks(0), 0);
}

// `stop --job ID` of an attached job: SIGTERM to its launcher when that runs here (a process
// named msrun-ssh), and a wait that ends when it has exited (a zombie not yet reaped has); never
// for a detached job, an ended one, or one launched on another machine.
TEST_F(JobRecords, StopOfAnAttachedJobEndsItsLauncherHereOnly) {
  test::Child child = test::sleep_copy(dir_ + "/msrun-ssh", "msrun-ssh", 30);
  const pid_t pid = child.pid();
  JobRecord r = two_hosts();
  r.launcher_pid = pid;
  r.launcher_host = this_machine();
  Options o;
  o.kill_grace = 1;
  o.connect_timeout = 1;
  std::FILE* out = std::tmpfile();
  EXPECT_FALSE(stop_attached_launcher(r, o, out)) << "a detached job";
  r.detached = false;
  r.launcher_host = "elsewhere";
  EXPECT_FALSE(stop_attached_launcher(r, o, out)) << "launched on another machine";
  r.launcher_host = this_machine();
  r.exit_status = 0;
  EXPECT_FALSE(stop_attached_launcher(r, o, out)) << "an attached job that ended";
  r.exit_status.reset();
  // The pid reused by another msrun-ssh (another job's launcher, a keeper): it started at another
  // time than the record says, and is left alone.
  ASSERT_GT(process_start_ticks(pid), 0);
  r.launcher_start = process_start_ticks(pid) + 1;
  EXPECT_FALSE(stop_attached_launcher(r, o, out)) << "another process of that pid";
  EXPECT_EQ(kill(pid, 0), 0) << "none of these signalled it";
  r.launcher_start = process_start_ticks(pid);
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(stop_attached_launcher(r, o, out));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20))
      << "a zombie counts as ended";
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  child.reaped();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
  std::rewind(out);
  std::string text(4096, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), out));
  std::fclose(out);
  EXPECT_NE(text.find(fmt::format("SIGTERM sent to its launcher (process {})", pid)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("its launcher ended"), std::string::npos) << text;
  EXPECT_FALSE(stop_attached_launcher(r, o, out = std::tmpfile())) << "nothing runs any more";
  std::fclose(out);
}

}  // namespace
}  // namespace msrun_ssh
