// The application (src/cli/app.cc run_app): argv in, exit status and printed text out. Stdout and
// stderr are captured by pointing fds 1 and 2 at temporary files around the call. Host files use
// IP literals of 198.18.0.0/16 only, so nothing is ever looked up.
#include "msrun_ssh/app.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>

#include "msrun_ssh/cli.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

struct Captured {
  int status = -1;
  std::string out;
  std::string err;
};

Captured run(const std::vector<std::string>& args) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  int saved_out = dup(1), saved_err = dup(2);
  dup2(fileno(out), 1);
  dup2(fileno(err), 2);
  Captured c;
  c.status = run_app(args);
  std::fflush(stdout);
  std::fflush(stderr);
  dup2(saved_out, 1);
  dup2(saved_err, 2);
  close(saved_out);
  close(saved_err);
  std::rewind(out);
  std::rewind(err);
  c.out = test::read_all(out);
  c.err = test::read_all(err);
  std::fclose(out);
  std::fclose(err);
  return c;
}

using test::count;

std::string cwd() { return std::filesystem::current_path().string(); }

class App : public test::TempDirTest {
 protected:
  void SetUp() override {
    hostfile_ = write("hosts.toml",
                      "[defaults]\n"
                      "local_worker_num = 2\n"
                      "\n"
                      "[[hosts]]\n"
                      "address = \"198.18.0.1\"\n"
                      "\n"
                      "[[hosts]]\n"
                      "address = \"198.18.0.2\"\n"
                      "local_worker_num = 1\n"
                      "env = { GLOO_SOCKET_IFNAME = \"eth0\" }\n");
  }
  // Runs and expects a usage error: exit 2, nothing on stdout, exactly `message` on stderr.
  void expect_error(const std::vector<std::string>& args, const std::string& message) {
    Captured c = run(args);
    EXPECT_EQ(c.status, 2);
    EXPECT_EQ(c.out, "");
    EXPECT_EQ(c.err, "msrun-ssh: error: " + message + "\n");
  }

  std::string hostfile_;
};

TEST_F(App, DryRunPrintsThePlan) {
  Captured c = run({"--dry_run", "--hostfile", hostfile_, "train.py", "--lr", "0.1"});
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_EQ(c.err, "");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      c.out, m,
      std::regex("^job ([0-9]{8}-[0-9]{6}-[0-9a-f]{6}): 2 hosts, 3 workers, scheduler at "
                 "198\\.18\\.0\\.1:8118\nlogs: \\.\n")))
      << c.out;
  std::string job = m[1];
  // Where ssh connects, as OpenSSH's own answer says: this user, port 22.
  const passwd* pw = getpwuid(getuid());
  ASSERT_TRUE(pw);
  std::string user = pw->pw_name;
  EXPECT_NE(
      c.out.find("\nhost 198.18.0.1 (node rank 0) [master]: " + user + "@198.18.0.1:22, workdir " +
                 cwd() + "\n  scheduler: DEVICE_ID=- cpus - log scheduler.log\n"),
      std::string::npos)
      << c.out;
  EXPECT_NE(c.out.find("\nhost 198.18.0.2 (node rank 1): " + user + "@198.18.0.2:22, workdir " +
                       cwd() + "\n  rank 2: DEVICE_ID=0 cpus - log worker_2.log\n"),
            std::string::npos)
      << c.out;
  EXPECT_NE(c.out.find("\nssh settings (as OpenSSH reads the ssh config: ssh -G):\n  "
                       "198.18.0.[1-2]:\n"),
            std::string::npos)
      << c.out;
  EXPECT_NE(c.out.find("  rank 1: DEVICE_ID=1 cpus - log worker_1.log\n"), std::string::npos);
  EXPECT_NE(c.out.find("    GLOO_SOCKET_IFNAME='eth0'\n"), std::string::npos);
  EXPECT_NE(c.out.find("    RANK_ID='2'\n"), std::string::npos);
  EXPECT_NE(c.out.find("    MS_SCHED_HOST='198.18.0.1'\n"), std::string::npos);
  // One command line per process, each marked with the job and running the task.
  EXPECT_EQ(count(c.out, "    command: cd -- "), 4u);
  EXPECT_EQ(count(c.out, "'MSRUN_SSH_JOB=" + job + "'"), 4u);
  EXPECT_EQ(count(c.out, "'python3' 'train.py' '--lr' '0.1' < /dev/null\n"), 4u);
}

// check --dry_run prints the plan and what the check would look at, and connects to nothing:
// the hosts (198.18.0.1-2) exist nowhere, so a check that connected would fail them (exit 1).
TEST_F(App, CheckDryRunConnectsToNothing) {
  Captured c = run({"check", "--dry_run", "--hostfile", hostfile_, "--import", "numpy", "--perf"});
  ASSERT_EQ(c.status, 0) << c.out << c.err;
  EXPECT_EQ(c.err, "");
  EXPECT_NE(c.out.find("\nhost 198.18.0.2 (node rank 1): "), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("\ncheck: would log in to each of the 2 host(s) and check it "
                       "(docs/check.md), --import numpy, --perf; nothing was connected "
                       "(--dry_run)\n"),
            std::string::npos)
      << c.out;
}

// check --dry_run refuses an --import the check refuses, with the same message and exit 2 (it
// said "would check" and exited 0; review of 2026-12-07).
TEST_F(App, CheckDryRunRefusesAnImportTheCheckRefuses) {
  Captured c = run({"check", "--dry_run", "--hostfile", hostfile_, "--import", "os;x"});
  EXPECT_EQ(c.status, 2) << c.out << c.err;
  EXPECT_NE(c.err.find("not a Python module name"), std::string::npos) << c.err;
  EXPECT_EQ(c.out, "");
}

// A host file's identity_file that cannot be read is said, as ssh says it of an -i file, once.
TEST_F(App, AnIdentityFileThatCannotBeReadIsSaidOnce) {
  std::string hf =
      write("keys.toml",
            "[defaults]\nidentity_file = \"/nonexistent/id_typo\"\n\n"
            "[[hosts]]\naddress = \"198.18.0.1\"\n\n[[hosts]]\naddress = \"198.18.0.2\"\n");
  Captured c = run({"--dry_run", "--hostfile", hf, "train.py"});
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_EQ(c.err, "msrun-ssh: warning: " + hf +
                       ":2: identity_file /nonexistent/id_typo cannot be read (No such file or "
                       "directory): passed over, as ssh passes over an -i file it cannot read\n");
}

// A dry run with --sync names where the directory goes on each host, and refuses what a run
// refuses (sync_where) before printing anything.
TEST_F(App, ADryRunSaysWhereSyncPutsTheDirectoryAndRefusesWhatARunRefuses) {
  std::string code = dir_ + "/code";
  std::filesystem::create_directory(code);
  Captured c = run({"--dry_run", "--hostfile", hostfile_, "--sync=" + code, "--sync_dest",
                    "/srv/code", "train.py"});
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.out.find("\nsync: " + code +
                       " to each host before anything starts there:\n  host 198.18.0.1: "
                       "/srv/code\n  host 198.18.0.2: /srv/code\n"),
            std::string::npos)
      << c.out;
  std::string outside = std::filesystem::path(cwd()).parent_path().string();
  expect_error({"--dry_run", "--hostfile", hostfile_, "--sync=..", "train.py"},
               "sync: " + outside + " is not inside the current directory " + cwd() +
                   ", so it has no place in the hosts' workdirs; give its destination "
                   "(--sync_dest for a run, DEST for msrun-ssh sync)");
  expect_error({"--dry_run", "--hostfile", hostfile_, "--sync=" + dir_ + "/none", "--sync_dest",
                "x", "train.py"},
               "sync: " + dir_ + "/none is not a directory");
  expect_error({"check", "--dry_run", "--hostfile", hostfile_, "--sync=no-such-dir", "train.py"},
               "sync: " + cwd() + "/no-such-dir is not a directory");
}

// A NUL byte in what an error quotes is spelled \x00: the message goes on past it, with the
// closing quote.
TEST_F(App, ANulByteInAQuotedValueDoesNotEndTheMessage) {
  std::string plain = write("hosts.txt", std::string("198.18.0.1 slots=1") + '\0' + "x\n");
  expect_error({"--dry_run", "--hostfile", plain, "train.py"},
               plain + ":1: slots must be an integer 0..1024: \"slots=1\\x00x\"");
}

// One host twice as OpenSSH sees it (ssh -G itself answers): a port unset and `port = 22`, and a
// name in other capitals, refused before anything connects, both entries named.
TEST_F(App, AHostListedTwiceAsSshSeesItIsAnInputError) {
  std::string twice = write("twice.toml",
                            "[[hosts]]\naddress = \"198.18.0.1\"\n\n"
                            "[[hosts]]\naddress = \"198.18.0.1\"\nport = 22\n");
  expect_error({"--dry_run", "--hostfile", twice, "train.py"},
               twice + ":4: host \"198.18.0.1\" is listed twice: " + twice +
                   ":1 has it already as \"198.18.0.1\", and ssh sends both to 198.18.0.1 port "
                   "22 (a host runs one node's processes; list it once)");
  std::string caps =
      write("caps.toml", "[[hosts]]\naddress = \"NodeA\"\n\n[[hosts]]\naddress = \"nodea\"\n");
  Captured c = run({"--dry_run", "--hostfile", caps, "train.py"});
  EXPECT_EQ(c.status, 2) << c.out;
  EXPECT_NE(c.err.find("is listed twice"), std::string::npos) << c.err;
  // Another port is another sshd: two hosts.
  std::string ports = write("ports.toml",
                            "[[hosts]]\naddress = \"198.18.0.1\"\n\n"
                            "[[hosts]]\naddress = \"198.18.0.1\"\nport = 2222\n");
  EXPECT_EQ(run({"--dry_run", "--hostfile", ports, "train.py"}).status, 0);
}

TEST_F(App, DryRunHonoursOptions) {
  Captured c = run({"--hostfile=" + hostfile_, "--master_addr", "198.18.0.2", "--master_port=9000",
                    "--dry_run", "--python", "/opt/py", "--env", "A=1", "--log_dir=out", "run.py"});
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.out.find("scheduler at 198.18.0.2:9000\nlogs: out\n"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("host 198.18.0.2 (node rank 1) [master]"), std::string::npos);
  EXPECT_EQ(count(c.out, "    A='1'\n"), 4u);
  EXPECT_EQ(count(c.out, "'/opt/py' 'run.py' < /dev/null\n"), 4u);
  EXPECT_FALSE(std::filesystem::exists("out/scheduler.log"));
}

TEST_F(App, DryRunDetached) {
  Captured c = run({"--dry_run", "--join=False", "--hostfile", hostfile_, "train.py"});
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_EQ(count(c.out, "setsid 'sh' '-c' "), 4u);
  // The keeper sets the job's marker itself: no MSRUN_SSH_JOB=ID word on its command line, which
  // the sweep took for a process of the job's (stop's SIGKILL ended the keeper, and the status).
  EXPECT_EQ(count(c.out, "' 'env' '--' '"), 4u);
  EXPECT_EQ(count(c.out, "'MSRUN_SSH_JOB="), 0u);
  EXPECT_NE(c.out.find("> './worker_2.log' 2>&1 &"), std::string::npos) << c.out;
}

TEST_F(App, DryRunWithAPlainHostFile) {
  std::string plain = write("hosts", "198.18.0.5 slots=2\n198.18.0.6 slots=2\n");
  Captured c = run({"--dry_run", "--hostfile", plain, "train.py"});
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.out.find(": 2 hosts, 4 workers, scheduler at 198.18.0.5:8118"), std::string::npos);
}

TEST_F(App, UsageErrorsExitTwo) {
  expect_error({"train.py"}, "run: --hostfile is required");
  expect_error({"--hostfile", hostfile_},
               "TASK_SCRIPT is required: msrun-ssh [OPTIONS] --hostfile "
               "FILE TASK_SCRIPT ...");
  expect_error(
      {"--hostfile", hostfile_, "--node_rank=1", "train.py"},
      "--node_rank=1: node ranks come from the order of the host file; remove --node_rank");
  expect_error({"--hostfile", hostfile_, "--bogus", "train.py"},
               "unknown option \"--bogus\" for run (see --help)");
  // A value the error names reaches the terminal escaped, never as a control sequence.
  expect_error({"--hostfile", hostfile_, "--worker_num", "1\x1b[2J", "train.py"},
               "--worker_num=1\\x1b[2J: not an integer");
}

TEST_F(App, RestartPolicyProcessInTheDryRunAndItsUsageErrors) {
  Captured c = run({"--dry_run", "--restart_policy", "process", "--max_restarts=2", "--hostfile",
                    hostfile_, "train.py"});
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_EQ(count(c.out, "    MS_ENABLE_RECOVERY='1'\n"), 4u) << c.out;
  EXPECT_EQ(count(c.out, "    MS_RECOVERY_PATH='" + cwd() + "/msrun-ssh-recovery/"), 4u);
  expect_error({"--hostfile", hostfile_, "--restart_policy", "rank", "train.py"},
               "--restart_policy=rank: expects job or process");
}

TEST_F(App, HostFileErrorsExitTwo) {
  expect_error({"--dry_run", "--hostfile", dir_ + "/none.toml", "train.py"},
               dir_ + "/none.toml: cannot read host file: No such file or directory");
  std::string bad = write("bad.toml", "[[hosts]]\naddress = \"198.18.0.1\"\nport = 0\n");
  expect_error({"--dry_run", "--hostfile", bad, "train.py"},
               bad + ":3:8: key \"port\" = 0 is out of range 1..65535");
}

TEST_F(App, PlanErrorsExitTwo) {
  expect_error({"--dry_run", "--hostfile", hostfile_, "--worker_num", "4", "train.py"},
               "--worker_num=4 but the host file " + hostfile_ + " gives 3 workers (2+1)");
  expect_error({"--dry_run", "--hostfile", hostfile_, "--tail_worker_log", "3", "train.py"},
               "--tail_worker_log: rank 3 does not exist (the job has ranks 0..2)");
  expect_error({"--dry_run", "--hostfile", hostfile_, "--master_addr", "198.18.0.9", "train.py"},
               "--master_addr=198.18.0.9: no host of the host file has this address, name or IP "
               "(198.18.0.9)");
}

TEST_F(App, Help) {
  Captured c = run({"-h"});
  EXPECT_EQ(c.status, 0);
  EXPECT_EQ(c.out, help_text(Command::kRun));
  EXPECT_EQ(c.err, "");
  EXPECT_EQ(run({"stop", "--help"}).out, help_text(Command::kStop));
  EXPECT_EQ(run({"check", "-h"}).out, help_text(Command::kCheck));
}

// The job subcommands read records from $XDG_STATE_HOME/msrun-ssh/jobs (#21).
TEST_F(App, JobSubcommandsWithoutRecords) {
  std::string state = dir_ + "/state";
  const char* old = std::getenv("XDG_STATE_HOME");
  std::string saved = old ? old : "";
  setenv("XDG_STATE_HOME", state.c_str(), 1);
  expect_error({"status", "--job", "nope"}, "no job nope in " + state + "/msrun-ssh/jobs");
  expect_error({"logs", "--job", "nope"}, "no job nope in " + state + "/msrun-ssh/jobs");
  expect_error({"stop", "--job", "nope"}, "no job nope in " + state + "/msrun-ssh/jobs");
  Captured c = run({"list", "--json"});
  EXPECT_EQ(c.status, 0) << c.err;
  EXPECT_EQ(c.out, "[]\n");
  c = run({"list"});
  EXPECT_EQ(c.status, 0) << c.err;
  EXPECT_EQ(c.out.rfind("id ", 0), 0u) << c.out;
  if (old)
    setenv("XDG_STATE_HOME", saved.c_str(), 1);
  else
    unsetenv("XDG_STATE_HOME");
}

TEST_F(App, Version) {
  Captured c = run({"-v"});
  EXPECT_EQ(c.status, 0);
  EXPECT_EQ(c.out, std::string("msrun-ssh ") + MSRUN_SSH_VERSION + "\n");
  EXPECT_EQ(run({"--version"}).out, c.out);
}

TEST(AppJobId, Format) {
  std::string id = new_job_id();
  EXPECT_TRUE(std::regex_match(id, std::regex("[0-9]{8}-[0-9]{6}-[0-9a-f]{6}"))) << id;
  // Accepted back by `stop --job`.
  EXPECT_EQ(
      parse_args({"stop", "--hostfile", "h", "--job", id}, [](const char*) { return nullptr; })
          .options.job,
      id);
}

TEST(AppResolve, IpLiteralIsItself) {
  EXPECT_EQ(resolve_ipv4("198.18.0.1"), "198.18.0.1");
  EXPECT_EQ(resolve_ipv4("198.18.255.254"), "198.18.255.254");
}

}  // namespace
}  // namespace msrun_ssh
