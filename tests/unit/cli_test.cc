// The command line (src/cli/cli.cc): every option in both spellings, booleans, numeric
// ranges, REMAINDER semantics, --env, the check / stop subcommands and every usage error.
#include "msrun_ssh/cli.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "msrun_ssh/option_table.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

using Args = std::vector<std::string>;

// The launcher's environment, as --env NAME sees it.
const std::map<std::string, std::string>& fake_env() {
  static const std::map<std::string, std::string> env{
      {"HOME", "/home/u"}, {"DATA_PATH", "/data/a b"}, {"EMPTY", ""}};
  return env;
}

GetEnv fake_getenv() {
  return [](const char* name) -> const char* {
    auto it = fake_env().find(name);
    return it == fake_env().end() ? nullptr : it->second.c_str();
  };
}

CliResult parse(const Args& args) { return parse_args(args, fake_getenv()); }

// Parses "--hostfile h.toml" + `opts` + "train.py".
Options run_with(const Args& opts) {
  Args args{"--hostfile", "h.toml"};
  args.insert(args.end(), opts.begin(), opts.end());
  args.push_back("train.py");
  CliResult r = parse(args);
  EXPECT_EQ(r.action, CliAction::kRun);
  return r.options;
}

std::string error_of(const Args& args) {
  return test::error_of([&] { parse(args); });
}

std::string run_error(const Args& opts) {
  Args args{"--hostfile", "h.toml"};
  args.insert(args.end(), opts.begin(), opts.end());
  args.push_back("train.py");
  return error_of(args);
}

TEST(Cli, MinimalRunAndDefaults) {
  CliResult r = parse({"--hostfile", "h.toml", "train.py"});
  EXPECT_EQ(r.action, CliAction::kRun);
  const Options& o = r.options;
  EXPECT_EQ(o.command, Command::kRun);
  EXPECT_EQ(o.hostfile, "h.toml");
  EXPECT_EQ(o.task_script, "train.py");
  EXPECT_TRUE(o.task_args.empty());
  EXPECT_FALSE(o.worker_num.has_value());
  EXPECT_EQ(o.local_worker_num, 8);
  EXPECT_EQ(o.master_addr, "");
  EXPECT_EQ(o.master_port, 8118);
  EXPECT_EQ(o.log_dir, ".");
  EXPECT_TRUE(o.join);
  EXPECT_EQ(o.cluster_time_out, 600);
  EXPECT_EQ(o.bind_core.mode, BindCore::Mode::kUnset);
  EXPECT_EQ(o.bind_numa.mode, BindNuma::Mode::kUnset);
  EXPECT_EQ(o.sim_level, -1);
  EXPECT_EQ(o.sim_rank_id, -1);
  EXPECT_EQ(o.rank_table_file, "");
  EXPECT_EQ(o.worker_log_name, "worker");
  EXPECT_TRUE(o.tail_worker_log.empty());
  EXPECT_FALSE(o.dry_run);
  EXPECT_EQ(o.ssh_config, "");
  EXPECT_EQ(o.fanout, 64);
  EXPECT_EQ(o.connect_timeout, 10);
  EXPECT_EQ(o.heartbeat, 5);
  EXPECT_EQ(o.kill_grace, 5);
  EXPECT_FALSE(o.report_bindings);
  EXPECT_FALSE(o.strict_host_key_checking.has_value());
  EXPECT_TRUE(o.env.empty());
  EXPECT_EQ(o.python, "");
}

// One option, one value, and what it must do to Options.
struct Case {
  std::string name;
  std::string value;
  std::function<void(const Options&)> check;
};

std::vector<Case> value_options() {
  return {
      {"--worker_num", "16", [](const Options& o) { EXPECT_EQ(o.worker_num, 16); }},
      {"--local_worker_num", "4", [](const Options& o) { EXPECT_EQ(o.local_worker_num, 4); }},
      {"--master_addr", "node7", [](const Options& o) { EXPECT_EQ(o.master_addr, "node7"); }},
      {"--master_port", "9000", [](const Options& o) { EXPECT_EQ(o.master_port, 9000); }},
      {"--log_dir", "/tmp/logs", [](const Options& o) { EXPECT_EQ(o.log_dir, "/tmp/logs"); }},
      {"--join", "False", [](const Options& o) { EXPECT_FALSE(o.join); }},
      {"--cluster_time_out", "30", [](const Options& o) { EXPECT_EQ(o.cluster_time_out, 30); }},
      {"--bind_core", "True",
       [](const Options& o) { EXPECT_EQ(o.bind_core.mode, BindCore::Mode::kAuto); }},
      {"--bind_core", R"({"device0":["0-3"]})",
       [](const Options& o) {
         EXPECT_EQ(o.bind_core.mode, BindCore::Mode::kManual);
         EXPECT_EQ(o.bind_core.ranges.at("device0"), std::vector<std::string>{"0-3"});
       }},
      {"--bind_numa", "1",
       [](const Options& o) { EXPECT_EQ(o.bind_numa.mode, BindNuma::Mode::kAuto); }},
      {"--bind_numa", R"({"device0":1})",
       [](const Options& o) { EXPECT_EQ(o.bind_numa.nodes.at("device0"), std::vector<int>{1}); }},
      {"--sim_level", "1", [](const Options& o) { EXPECT_EQ(o.sim_level, 1); }},
      {"--sim_rank_id", "3", [](const Options& o) { EXPECT_EQ(o.sim_rank_id, 3); }},
      {"--rank_table_file", "/etc/rt.json",
       [](const Options& o) { EXPECT_EQ(o.rank_table_file, "/etc/rt.json"); }},
      {"--worker_log_name", "w_{ip}_{hostname}",
       [](const Options& o) { EXPECT_EQ(o.worker_log_name, "w_{ip}_{hostname}"); }},
      {"--tail_worker_log", "0,3,12",
       [](const Options& o) {
         EXPECT_EQ(o.tail_worker_log, (std::vector<int>{0, 3, 12}));
       }},
      {"--tail_worker_log", "-1", [](const Options& o) { EXPECT_TRUE(o.tail_worker_log.empty()); }},
      {"--ssh_config", "/etc/ssh/cfg",
       [](const Options& o) { EXPECT_EQ(o.ssh_config, "/etc/ssh/cfg"); }},
      {"--fanout", "16", [](const Options& o) { EXPECT_EQ(o.fanout, 16); }},
      {"--jump_fanout", "3", [](const Options& o) { EXPECT_EQ(o.jump_fanout, 3); }},
      {"--contract", "torch", [](const Options& o) { EXPECT_EQ(o.contract, Contract::kTorch); }},
      {"--contract", "msrun", [](const Options& o) { EXPECT_EQ(o.contract, Contract::kMsrun); }},
      {"--max_restarts", "3", [](const Options& o) { EXPECT_EQ(o.max_restarts, 3); }},
      {"--restart_backoff", "2.5", [](const Options& o) { EXPECT_EQ(o.restart_backoff, 2.5); }},
      {"--spares", "2", [](const Options& o) { EXPECT_EQ(o.spares, 2); }},
      {"--host_failures_to_exclude", "3",
       [](const Options& o) { EXPECT_EQ(o.host_failures_to_exclude, 3); }},
      {"--ssh_debug", "4", [](const Options& o) { EXPECT_EQ(o.ssh_debug, 4); }},
      {"--timeout", "90", [](const Options& o) { EXPECT_EQ(o.timeout, 90); }},
      {"--hang_timeout", "30", [](const Options& o) { EXPECT_EQ(o.hang_timeout, 30); }},
      {"--on_hang", "report", [](const Options& o) { EXPECT_FALSE(o.hang_kills); }},
      {"--connect_timeout", "2.5", [](const Options& o) { EXPECT_EQ(o.connect_timeout, 2.5); }},
      {"--heartbeat", "1", [](const Options& o) { EXPECT_EQ(o.heartbeat, 1); }},
      {"--kill_grace", "0", [](const Options& o) { EXPECT_EQ(o.kill_grace, 0); }},
      {"--strict_host_key_checking", "accept-new",
       [](const Options& o) { EXPECT_EQ(o.strict_host_key_checking, HostKeyPolicy::kAcceptNew); }},
      {"--env", "A=1",
       [](const Options& o) {
         EXPECT_EQ(o.env, (EnvList{{"A", "1"}}));
       }},
      {"--python", "/usr/bin/python3.11",
       [](const Options& o) { EXPECT_EQ(o.python, "/usr/bin/python3.11"); }},
  };
}

TEST(Cli, EveryOptionWithEquals) {
  for (const auto& c : value_options()) {
    SCOPED_TRACE(c.name + "=" + c.value);
    c.check(run_with({c.name + "=" + c.value}));
  }
}

TEST(Cli, EveryOptionWithASeparateValue) {
  for (const auto& c : value_options()) {
    SCOPED_TRACE(c.name + " " + c.value);
    c.check(run_with({c.name, c.value}));
  }
}

TEST(Cli, HostfileBothForms) {
  EXPECT_EQ(parse({"--hostfile=a.toml", "t.py"}).options.hostfile, "a.toml");
  EXPECT_EQ(parse({"--hostfile", "b.toml", "t.py"}).options.hostfile, "b.toml");
  EXPECT_EQ(parse({"--hostfile=x=y", "t.py"}).options.hostfile, "x=y");  // first '=' splits
}

TEST(Cli, LastValueWins) {
  Options o = run_with({"--master_port", "9000", "--master_port=9001"});
  EXPECT_EQ(o.master_port, 9001);
}

TEST(Cli, Flags) {
  Options o = run_with({"--dry_run", "--report_bindings"});
  EXPECT_TRUE(o.dry_run);
  EXPECT_TRUE(o.report_bindings);
  o = run_with({"--dry_run=False", "--report_bindings=0"});
  EXPECT_FALSE(o.dry_run);
  EXPECT_FALSE(o.report_bindings);
  o = run_with({"--dry_run=true"});
  EXPECT_TRUE(o.dry_run);
}

// A flag takes a boolean word after it as its value ("--watch False train.py" once ran a program
// named False); any other word is TASK_SCRIPT.
TEST(Cli, FlagTakesABooleanWordAfterItAndNothingElse) {
  CliResult r = parse({"--hostfile", "h", "--dry_run", "True", "x.py"});
  EXPECT_TRUE(r.options.dry_run);
  EXPECT_EQ(r.options.task_script, "x.py");
  EXPECT_TRUE(r.options.task_args.empty());
  r = parse({"--hostfile", "h", "--watch", "False", "--quiet", "0", "x.py", "True"});
  EXPECT_FALSE(r.options.watch);
  EXPECT_FALSE(r.options.quiet);
  EXPECT_EQ(r.options.task_script, "x.py");
  EXPECT_EQ(r.options.task_args, Args{"True"});
  r = parse({"--hostfile", "h", "--dry_run", "yes.py"});
  EXPECT_TRUE(r.options.dry_run);
  EXPECT_EQ(r.options.task_script, "yes.py");
}

// "--log_dir --quiet": the value forgotten; the option is not taken as it (both would be lost).
TEST(Cli, AValueOptionRefusesAnOptionAsItsValue) {
  EXPECT_EQ(error_of({"--hostfile", "h", "--log_dir", "--quiet", "x.py"}),
            "--log_dir: expects a value, but the next word is the option --quiet (a value that "
            "starts so goes as --log_dir=VALUE)");
  EXPECT_EQ(error_of({"--hostfile", "--log_dir=x", "x.py"}),
            "--hostfile: expects a value, but the next word is the option --log_dir=x (a value "
            "that starts so goes as --hostfile=VALUE)");
  EXPECT_EQ(parse({"--hostfile", "h", "--log_dir", "--not-an-option", "x.py"}).options.log_dir,
            "--not-an-option");
}

TEST(Cli, BooleanWords) {
  for (const char* t : {"True", "true", "1"}) {
    EXPECT_TRUE(run_with({"--join", t}).join) << t;
    EXPECT_TRUE(run_with({std::string("--join=") + t}).join) << t;
  }
  for (const char* f : {"False", "false", "0"}) {
    EXPECT_FALSE(run_with({"--join", f}).join) << f;
    EXPECT_FALSE(run_with({std::string("--join=") + f}).join) << f;
  }
}

TEST(Cli, AgentIsAutoUnlessTrueOrFalse) {
  EXPECT_EQ(run_with({}).agent, std::nullopt);
  EXPECT_EQ(run_with({"--agent", "auto"}).agent, std::nullopt);
  EXPECT_EQ(run_with({"--agent=True"}).agent, std::optional<bool>(true));
  EXPECT_EQ(run_with({"--agent", "False"}).agent, std::optional<bool>(false));
  EXPECT_EQ(run_error({"--agent=sometimes"}), "--agent=sometimes: expects True, False or auto");
}

TEST(Cli, BadBoolean) {
  EXPECT_EQ(run_error({"--join", "yes"}), "--join=yes: expects True or False");
  EXPECT_EQ(run_error({"--join="}), "--join=: expects True or False");
  EXPECT_EQ(run_error({"--dry_run=2"}), "--dry_run=2: expects True or False");
}

TEST(Cli, BadBindValues) {
  EXPECT_EQ(run_error({"--bind_core", "yes"}),
            "--bind_core: not a boolean (True/False) nor valid JSON (line 1, column 1: syntax "
            "error while parsing value - invalid literal; last read: 'y'): yes");
  EXPECT_EQ(run_error({"--bind_numa={\"x\":0}"}),
            "--bind_numa: unknown key \"x\" (expected \"scheduler\" or \"device<N>\", as msrun)");
}

TEST(Cli, StrictHostKeyChecking) {
  EXPECT_EQ(run_with({"--strict_host_key_checking", "yes"}).strict_host_key_checking,
            HostKeyPolicy::kYes);
  EXPECT_EQ(run_with({"--strict_host_key_checking=accept-new"}).strict_host_key_checking,
            HostKeyPolicy::kAcceptNew);
  EXPECT_EQ(run_with({"--strict_host_key_checking=no"}).strict_host_key_checking,
            HostKeyPolicy::kNo);
  EXPECT_EQ(run_error({"--strict_host_key_checking", "ask"}),
            "--strict_host_key_checking=ask: expects yes, accept-new or no");
  EXPECT_EQ(run_error({"--strict_host_key_checking=Yes"}),
            "--strict_host_key_checking=Yes: expects yes, accept-new or no");
}

TEST(Cli, ContractRestartsAndSshDebugValues) {
  EXPECT_EQ(run_error({"--contract", "mpi"}), "--contract=mpi: expects msrun or torch");
  EXPECT_FALSE(run_with({}).contract.has_value());  // unset: the host file decides
  EXPECT_EQ(run_with({}).max_restarts, 0);
  EXPECT_NE(run_error({"--max_restarts", "-1"}), "no error");
  EXPECT_EQ(run_with({}).spares, 0);
  EXPECT_EQ(run_with({}).host_failures_to_exclude, 2);
  EXPECT_NE(run_error({"--host_failures_to_exclude", "0"}), "no error");
  EXPECT_NE(run_error({"--spares", "-1"}), "no error");
  EXPECT_NE(run_error({"--ssh_debug", "5"}), "no error");
  EXPECT_EQ(run_error({"--on_hang", "dump"}), "--on_hang=dump: expects kill or report");
  EXPECT_TRUE(run_with({}).hang_kills);
  EXPECT_EQ(run_error({"--join=False", "--max_restarts", "1"}),
            "--max_restarts, --timeout and --hang_timeout need an attached run (--join=True)");
  EXPECT_EQ(run_error({"--timeout=5", "--join", "False"}),
            "--max_restarts, --timeout and --hang_timeout need an attached run (--join=True)");
}

TEST(Cli, RestartPolicyAndRecoveryPath) {
  EXPECT_EQ(run_with({}).restart_policy, RestartPolicy::kJob);
  EXPECT_EQ(run_with({"--restart_policy", "process"}).restart_policy, RestartPolicy::kProcess);
  EXPECT_EQ(run_with({"--restart_policy=job"}).restart_policy, RestartPolicy::kJob);
  EXPECT_EQ(run_error({"--restart_policy", "rank"}),
            "--restart_policy=rank: expects job or process");
  EXPECT_EQ(run_error({"--restart_policy="}), "--restart_policy=: expects job or process");
  EXPECT_EQ(run_with({}).recovery_path, "msrun-ssh-recovery");
  EXPECT_EQ(run_with({"--recovery_path", "/scratch/r"}).recovery_path, "/scratch/r");
  EXPECT_EQ(run_error({"--recovery_path="}), "--recovery_path=: expects a directory");
  EXPECT_EQ(run_error({"--join=False", "--restart_policy", "process"}),
            "--restart_policy process needs an attached run (--join=True)");
  // A detached start left at once and never created the file.
  EXPECT_EQ(run_error({"--join=False", "--events", "e.jsonl"}),
            "--events needs an attached run (--join=True): a detached job has no launcher to "
            "write them (msrun-ssh status --job ID --json tells how it is doing)");
  EXPECT_EQ(run_error({"--join=False", "--transport", "srun"}),
            "--join=False needs --transport ssh: under --transport srun, Slurm ends a detached "
            "process with the job step that started it");
}

TEST(Cli, RemainderBelongsToTheTask) {
  CliResult r = parse({"--hostfile", "h.toml", "--master_port=9000", "train.py", "--lr", "0.1",
                       "--hostfile", "x", "--master_port=1", "-h", "-v", "--node_rank", "3", "--"});
  EXPECT_EQ(r.action, CliAction::kRun);
  EXPECT_EQ(r.options.hostfile, "h.toml");
  EXPECT_EQ(r.options.master_port, 9000);
  EXPECT_EQ(r.options.task_script, "train.py");
  EXPECT_EQ(r.options.task_args, (Args{"--lr", "0.1", "--hostfile", "x", "--master_port=1", "-h",
                                       "-v", "--node_rank", "3", "--"}));
}

TEST(Cli, TaskArgsKeepEmptyAndOddWords) {
  CliResult r = parse({"--hostfile", "h", "run.sh", "", " ", "a b", "'q'"});
  EXPECT_EQ(r.options.task_script, "run.sh");
  EXPECT_EQ(r.options.task_args, (Args{"", " ", "a b", "'q'"}));
}

TEST(Cli, SingleDashIsATaskScript) {
  EXPECT_EQ(parse({"--hostfile", "h", "-", "x"}).options.task_script, "-");
}

TEST(Cli, NodeRankIsRejected) {
  EXPECT_EQ(run_error({"--node_rank", "0"}),
            "--node_rank=0: node ranks come from the order of the host file; remove --node_rank");
  EXPECT_EQ(run_error({"--node_rank=1"}),
            "--node_rank=1: node ranks come from the order of the host file; remove --node_rank");
}

TEST(Cli, NumericRanges) {
  EXPECT_EQ(run_error({"--worker_num", "0"}), "--worker_num=0: must be 1..1048576");
  EXPECT_EQ(run_error({"--worker_num", "-4"}), "--worker_num=-4: must be 1..1048576");
  EXPECT_EQ(run_error({"--local_worker_num", "1025"}), "--local_worker_num=1025: must be 0..1024");
  EXPECT_EQ(run_with({"--local_worker_num", "0"}).local_worker_num, 0);
  EXPECT_EQ(run_with({"--local_worker_num", "1024"}).local_worker_num, 1024);
  // Given or not: a host source's slot counts yield only to a given count (host_source.h).
  EXPECT_TRUE(run_with({"--local_worker_num", "8"}).local_worker_num_given);
  EXPECT_FALSE(run_with({}).local_worker_num_given);
  EXPECT_EQ(run_error({"--master_port", "1023"}), "--master_port=1023: must be 1024..65535");
  EXPECT_EQ(run_error({"--master_port=65536"}), "--master_port=65536: must be 1024..65535");
  EXPECT_EQ(run_with({"--master_port", "1024"}).master_port, 1024);
  EXPECT_EQ(run_with({"--master_port", "65535"}).master_port, 65535);
  EXPECT_EQ(run_error({"--cluster_time_out", "0"}), "--cluster_time_out=0: must be 1..604800");
  EXPECT_EQ(run_error({"--sim_level", "-2"}), "--sim_level=-2: must be -1..1000");
  EXPECT_EQ(run_with({"--sim_level", "-1"}).sim_level, -1);
  EXPECT_EQ(run_error({"--sim_rank_id=-2"}), "--sim_rank_id=-2: must be -1..1048576");
  EXPECT_EQ(run_error({"--fanout", "0"}), "--fanout=0: must be 1..4096");
  EXPECT_EQ(run_error({"--fanout", "4097"}), "--fanout=4097: must be 1..4096");
  EXPECT_EQ(run_error({"--jump_fanout", "0"}), "--jump_fanout=0: must be 1..4096");
  EXPECT_EQ(run_error({"--tail_worker_log", "0,-2"}),
            "--tail_worker_log=0,-2: rank \"-2\": must be 0..1048576");
  EXPECT_EQ(run_error({"--connect_timeout", "0.05"}),
            "--connect_timeout=0.05: must be 0.1..3600 seconds");
  EXPECT_EQ(run_error({"--heartbeat", "0.1"}), "--heartbeat=0.1: must be 0.2..3600 seconds");
  EXPECT_EQ(run_error({"--kill_grace", "-1"}), "--kill_grace=-1: must be 0..3600 seconds");
  EXPECT_EQ(run_error({"--kill_grace", "3601"}), "--kill_grace=3601: must be 0..3600 seconds");
}

TEST(Cli, NotNumbers) {
  EXPECT_EQ(run_error({"--worker_num", "eight"}), "--worker_num=eight: not an integer");
  EXPECT_EQ(run_error({"--master_port", "80a"}), "--master_port=80a: not an integer");
  EXPECT_EQ(run_error({"--master_port", "1e4"}), "--master_port=1e4: not an integer");
  EXPECT_EQ(run_error({"--fanout="}), "--fanout=: not an integer");
  EXPECT_EQ(run_error({"--worker_num", "99999999999999999999"}),
            "--worker_num=99999999999999999999: not an integer");
  EXPECT_EQ(run_error({"--tail_worker_log", "1,,2"}),
            "--tail_worker_log=1,,2: rank \"\": not an integer");
  EXPECT_EQ(run_error({"--hostfile=", "t.py"}), "--hostfile=: must not be empty");
  EXPECT_EQ(run_error({"--heartbeat", "x"}), "--heartbeat=x: not a number of seconds");
  EXPECT_EQ(run_error({"--heartbeat", "nan"}), "--heartbeat=nan: not a number of seconds");
  EXPECT_EQ(run_error({"--heartbeat", "inf"}), "--heartbeat=inf: not a number of seconds");
  EXPECT_EQ(run_error({"--connect_timeout", "5s"}),
            "--connect_timeout=5s: not a number of seconds");
}

TEST(Cli, EmptyValues) {
  EXPECT_EQ(run_error({"--master_addr="}), "--master_addr=: must not be empty");
  EXPECT_EQ(run_error({"--log_dir", ""}), "--log_dir=: must not be empty");
  EXPECT_EQ(run_error({"--python="}), "--python=: must not be empty");
  // msrun takes an empty --worker_log_name for its default (a wrapper that forwards an empty
  // variable works); it was refused.
  EXPECT_EQ(run_with({"--worker_log_name="}).worker_log_name, "worker");
  EXPECT_EQ(run_error({"--worker_log_name", "a/b"}),
            "--worker_log_name=a/b: must be a file name without \"/\"");
}

TEST(Cli, EnvSetsAndForwards) {
  Options o = run_with({"--env", "A=1", "--env=B=x=y", "--env", "DATA_PATH", "--env=EMPTY", "--env",
                        "C=", "--env", "A=2"});
  EXPECT_EQ(
      o.env,
      (EnvList{{"A", "2"}, {"B", "x=y"}, {"DATA_PATH", "/data/a b"}, {"EMPTY", ""}, {"C", ""}}));
}

TEST(Cli, EnvOfAnUnsetVariable) {
  EXPECT_EQ(run_error({"--env", "NOT_SET_ANYWHERE"}),
            "--env=NOT_SET_ANYWHERE: NOT_SET_ANYWHERE is not set in the launcher's environment");
}

TEST(Cli, EnvBadName) {
  EXPECT_EQ(run_error({"--env", "1A=2"}), "--env=1A=2: not a valid environment variable name");
  EXPECT_EQ(run_error({"--env", "=x"}), "--env==x: not a valid environment variable name");
  EXPECT_EQ(run_error({"--env", "A-B=1"}), "--env=A-B=1: not a valid environment variable name");
  EXPECT_EQ(run_error({"--env="}), "--env=: not a valid environment variable name");
  EXPECT_EQ(run_error({"--env", "MSRUN_SSH_STACK_DIR=x"}),
            "--env=MSRUN_SSH_STACK_DIR=x: msrun-ssh's own: MSRUN_SSH_JOB, MSRUN_SSH_STACK_DIR and "
            "MSRUN_SSH_KEEPER mark the job's processes, and the teardown, stop and stack find them "
            "by them");
  EXPECT_EQ(run_error({"--env", "MSRUN_SSH_OTHER=x", "--env", "1A=2"}),
            "--env=1A=2: not a valid environment variable name");  // other names are the user's
}

TEST(Cli, MissingValue) {
  EXPECT_EQ(error_of({"train.py", "--hostfile"}), "run: --hostfile is required");
  EXPECT_EQ(error_of({"--hostfile"}), "--hostfile: expects a value");
  // std::regex compiles by recursion: a pattern of 20000 nested groups overflowed the stack.
  std::string deep = std::string(20000, '(') + "a" + std::string(20000, ')');
  EXPECT_EQ(error_of({"--hostfile", "h", "--progress_regex", deep, "t.py"}),
            "--progress_regex=" + std::string(40, '(') + "...: is longer than 512 characters");
  EXPECT_EQ(error_of({"--hostfile", "h", "--master_port"}), "--master_port: expects a value");
}

TEST(Cli, UnknownOption) {
  EXPECT_EQ(run_error({"--frobnicate"}), "unknown option \"--frobnicate\" for run (see --help)");
  EXPECT_EQ(run_error({"--frobnicate=1"}), "unknown option \"--frobnicate\" for run (see --help)");
  EXPECT_EQ(run_error({"-x"}), "unknown option \"-x\" for run (see --help)");
  // A close match is suggested ('-' and '_' alike): within two edits.
  EXPECT_EQ(run_error({"--Hostfile=h"}),
            "unknown option \"--Hostfile\" for run (did you mean --hostfile?) (see --help)");
  EXPECT_EQ(run_error({"--hostflie"}),
            "unknown option \"--hostflie\" for run (did you mean --hostfile?) (see --help)");
  EXPECT_EQ(run_error({"--worker-num=2"}),
            "unknown option \"--worker-num\" for run (did you mean --worker_num?) (see --help)");
  EXPECT_EQ(run_error({"--dryrun"}),
            "unknown option \"--dryrun\" for run (did you mean --dry_run?) (see --help)");
}

// "msrun-ssh chek --hostfile h": the misspelt command became TASK_SCRIPT and the rest its words.
TEST(Cli, AMisspeltCommandIsNamed) {
  EXPECT_EQ(error_of({"chek", "--hostfile", "h"}),
            "run: --hostfile is required; \"chek\" was taken as TASK_SCRIPT and every word after "
            "it as its own (did you mean check, a command?)");
}

TEST(Cli, DoubleDashIsRefused) {
  EXPECT_EQ(error_of({"--hostfile", "h", "--", "train.py"}),
            "\"--\": put TASK_SCRIPT first, then its arguments");
}

TEST(Cli, MissingHostfile) {
  EXPECT_EQ(error_of({"train.py"}), "run: --hostfile is required");
  EXPECT_EQ(error_of({}), "run: --hostfile is required");
  EXPECT_EQ(error_of({"check"}), "check: --hostfile is required");
  // stop's --hostfile is optional (the job's record has the hosts); its --job is not.
  EXPECT_EQ(error_of({"stop"}), "stop: --job ID is required");
}

TEST(Cli, MissingTaskScript) {
  EXPECT_EQ(error_of({"--hostfile", "h"}),
            "TASK_SCRIPT is required: msrun-ssh [OPTIONS] --hostfile FILE TASK_SCRIPT ...");
}

TEST(Cli, HelpAndVersion) {
  EXPECT_EQ(parse({"-h"}).action, CliAction::kHelp);
  EXPECT_EQ(parse({"--help"}).action, CliAction::kHelp);
  EXPECT_EQ(parse({"-v"}).action, CliAction::kVersion);
  EXPECT_EQ(parse({"--version"}).action, CliAction::kVersion);
  EXPECT_EQ(parse({"--hostfile", "h", "-h", "train.py"}).action, CliAction::kHelp);
  CliResult r = parse({"stop", "-h"});
  EXPECT_EQ(r.action, CliAction::kHelp);
  EXPECT_EQ(r.options.command, Command::kStop);
  EXPECT_EQ(parse({"check", "--help"}).options.command, Command::kCheck);
}

TEST(Cli, HelpTexts) {
  EXPECT_EQ(
      help_text(Command::kRun).rfind("usage: msrun-ssh [OPTIONS] --hostfile FILE TASK_SCRIPT", 0),
      0u);
  EXPECT_EQ(help_text(Command::kCheck).rfind("usage: msrun-ssh check", 0), 0u);
  EXPECT_EQ(help_text(Command::kStop).rfind("usage: msrun-ssh stop", 0), 0u);
  // Every option of the table is documented.
  for (const char* name : {"--hostfile",
                           "--worker_num",
                           "--local_worker_num",
                           "--master_addr",
                           "--master_port",
                           "--node_rank",
                           "--log_dir",
                           "--join",
                           "--cluster_time_out",
                           "--bind_core",
                           "--bind_numa",
                           "--sim_level",
                           "--sim_rank_id",
                           "--rank_table_file",
                           "--worker_log_name",
                           "--tail_worker_log",
                           "--dry_run",
                           "--ssh_config",
                           "--fanout",
                           "--connect_timeout",
                           "--heartbeat",
                           "--kill_grace",
                           "--report_bindings",
                           "--strict_host_key_checking",
                           "--env",
                           "--python",
                           "--version"})
    EXPECT_NE(help_text(Command::kRun).find(name), std::string::npos) << name;
}

// ---- check / stop -------------------------------------------------------------------------------

TEST(Cli, Check) {
  CliResult r =
      parse({"check", "--hostfile", "h.toml", "--import", "mindspore", "--import=numpy", "--json"});
  const Options& o = r.options;
  EXPECT_EQ(r.action, CliAction::kRun);
  EXPECT_EQ(o.command, Command::kCheck);
  EXPECT_EQ(o.hostfile, "h.toml");
  EXPECT_EQ(o.task_script, "");
  EXPECT_EQ(o.imports, (Args{"mindspore", "numpy"}));
  EXPECT_TRUE(o.json);
}

TEST(Cli, CheckWithAScriptKeepsParsingOptions) {
  CliResult r = parse({"check", "train.py", "--hostfile=h.toml", "--json=False", "--import", "x"});
  EXPECT_EQ(r.options.task_script, "train.py");
  EXPECT_TRUE(r.options.task_args.empty());
  EXPECT_EQ(r.options.hostfile, "h.toml");
  EXPECT_FALSE(r.options.json);
  EXPECT_EQ(r.options.imports, Args{"x"});
}

// A run's line with `check` in front: from the first word after TASK_SCRIPT that is no option of
// check's, the words are the task's (`unknown option "--epochs"` refused it).
TEST(Cli, CheckTakesTheTasksWordsAfterItsOwnOptions) {
  Options o = parse({"check", "--hostfile", "h", "a.py", "--json", "b.py", "--json"}).options;
  EXPECT_EQ(o.task_script, "a.py");
  EXPECT_TRUE(o.json);
  EXPECT_EQ(o.task_args, (Args{"b.py", "--json"}));
  o = parse({"check", "--hostfile", "h", "train.py", "--epochs", "10", "--import", "x"}).options;
  EXPECT_EQ(o.task_args, (Args{"--epochs", "10", "--import", "x"}));
  EXPECT_TRUE(o.imports.empty());
}

// msrun's argparse takes an unambiguous prefix of a long option; so does every command here.
TEST(Cli, AnUnambiguousPrefixOfAnOptionIsTheOption) {
  Options o = run_with({"--local_worker=2", "--log_d", "x", "--tail", "0, 3"});
  EXPECT_EQ(o.local_worker_num, 2);
  EXPECT_EQ(o.log_dir, "x");
  EXPECT_EQ(run_error({"--log=x"}),
            "ambiguous option \"--log\" for run: it begins --log_dir, --log_timestamps");
  EXPECT_EQ(o.tail_worker_log, (std::vector<int>{0, 3}));  // blanks around a rank dropped
  EXPECT_EQ(error_of({"--hostfile", "h", "--worker=2", "t.py"})
                .rfind("ambiguous option \"--worker\" for run: it begins --worker_num, ", 0),
            0u);
  // msrun compares value.lower() with "true": any capitals.
  EXPECT_TRUE(run_with({"--join=TRUE"}).join);
  EXPECT_FALSE(run_with({"--join=FALSE"}).join);
}

TEST(Cli, CheckTakesRunOptions) {
  CliResult r = parse({"check", "--hostfile", "h", "--master_port", "9000", "--python=/p"});
  EXPECT_EQ(r.options.master_port, 9000);
  EXPECT_EQ(r.options.python, "/p");
}

// docs/command-line.md: check takes every option of a run but --sync_dest, so that a run's
// command line is checked as it is, with `check` in front.
TEST(Cli, CheckTakesEveryOptionOfARunButSyncDestAndEvents) {
  size_t run_options = 0;
  for (const OptionSpec& spec : option_table()) {
    if (!spec.taken_by(Command::kRun)) continue;
    ++run_options;
    EXPECT_EQ(spec.taken_by(Command::kCheck), spec.name != "--sync_dest" && spec.name != "--events")
        << spec.name;
  }
  EXPECT_GT(run_options, 40u);
  Options o =
      parse({"check", "--hostfile", "h", "--watch=False", "--progress_regex", "s (\\d+)", "t.py"})
          .options;
  EXPECT_FALSE(o.watch);
  EXPECT_EQ(o.progress_regex, "s (\\d+)");
}

TEST(Cli, Stop) {
  CliResult r =
      parse({"stop", "--hostfile", "h.toml", "--job", "20261129-154501-3fa9c2", "--kill_grace=1"});
  EXPECT_EQ(r.options.command, Command::kStop);
  EXPECT_EQ(r.options.job, "20261129-154501-3fa9c2");
  EXPECT_EQ(r.options.kill_grace, 1);
  EXPECT_EQ(parse({"stop", "--hostfile=h", "--job=abc-1"}).options.job, "abc-1");
}

TEST(Cli, StopNeedsAJob) {
  EXPECT_EQ(error_of({"stop", "--hostfile", "h"}), "stop: --job ID is required");
}

TEST(Cli, StopTakesNoScript) {
  EXPECT_EQ(error_of({"stop", "--hostfile", "h", "--job", "j", "train.py"}),
            "stop: unexpected argument \"train.py\"");
}

TEST(Cli, BadJobId) {
  EXPECT_EQ(error_of({"stop", "--hostfile", "h", "--job", "a;b"}),
            "--job=a;b: not a job id (as printed by a --join=False run)");
  EXPECT_EQ(error_of({"stop", "--hostfile", "h", "--job="}),
            "--job=: not a job id (as printed by a --join=False run)");
  EXPECT_EQ(error_of({"stop", "--hostfile", "h", "--job", "ABC"}),
            "--job=ABC: not a job id (as printed by a --join=False run)");
}

TEST(Cli, OptionsOnlyForTheirCommand) {
  EXPECT_EQ(run_error({"--import", "x"}), "unknown option \"--import\" for run (see --help)");
  EXPECT_EQ(run_error({"--json"}), "unknown option \"--json\" for run (see --help)");
  EXPECT_EQ(run_error({"--job", "j"}), "unknown option \"--job\" for run (see --help)");
  EXPECT_EQ(error_of({"check", "--hostfile", "h", "--job", "j"}),
            "unknown option \"--job\" for check (see --help)");
  EXPECT_EQ(error_of({"stop", "--hostfile", "h", "--job", "j", "--json"}),
            "unknown option \"--json\" for stop (see --help)");
  EXPECT_EQ(error_of({"stop", "--hostfile", "h", "--job", "j", "--import=x"}),
            "unknown option \"--import\" for stop (see --help)");
  // check wrote no events (it took --events and never opened the file).
  EXPECT_EQ(error_of({"check", "--hostfile", "h", "--events", "e.jsonl"}),
            "unknown option \"--events\" for check (see --help)");
}

TEST(Cli, SubcommandOnlyAsTheFirstWord) {
  CliResult r = parse({"--hostfile", "h", "check"});
  EXPECT_EQ(r.options.command, Command::kRun);
  EXPECT_EQ(r.options.task_script, "check");
}

TEST(Cli, SyncOnARun) {
  Options o = run_with({"--sync"});
  EXPECT_TRUE(o.sync);
  EXPECT_EQ(o.sync_dir, "");  // the task script's directory
  EXPECT_EQ(o.task_script, "train.py");
  o = run_with(
      {"--sync=code", "--sync_dest", "/dst", "--sync_exclude", "data/", "--sync_exclude=*.ckpt"});
  EXPECT_EQ(o.sync_dir, "code");
  EXPECT_EQ(o.sync_dest, "/dst");
  EXPECT_EQ(o.sync_excludes, (std::vector<std::string>{"data/", "*.ckpt"}));
  EXPECT_FALSE(run_with({}).sync);
  // A word after --sync is TASK_SCRIPT, never DIR.
  CliResult r = parse({"--hostfile", "h", "--sync", "code"});
  EXPECT_EQ(r.options.task_script, "code");
  EXPECT_EQ(r.options.sync_dir, "");
  EXPECT_EQ(run_error({"--sync_dest="}), "--sync_dest=: must not be empty");
  EXPECT_EQ(run_error({"--sync_exclude="}), "--sync_exclude=: must not be empty");
}

TEST(Cli, SyncSubcommand) {
  CliResult r = parse({"sync", "--hostfile", "h", "src", "/dst", "--sync_exclude", "x"});
  EXPECT_EQ(r.options.command, Command::kSync);
  EXPECT_TRUE(r.options.sync);
  EXPECT_EQ(r.options.sync_dir, "src");
  EXPECT_EQ(r.options.sync_dest, "/dst");
  EXPECT_EQ(r.options.sync_excludes, (std::vector<std::string>{"x"}));
  EXPECT_EQ(parse({"sync", "--hostfile", "h", "src"}).options.sync_dest, "");
  EXPECT_EQ(error_of({"sync", "--hostfile", "h"}),
            "sync: DIR is required: msrun-ssh sync --hostfile FILE DIR [DEST]");
  EXPECT_EQ(error_of({"sync", "--hostfile", "h", "a", "b", "c"}),
            "sync: unexpected argument \"c\"");
  EXPECT_EQ(error_of({"sync", "--hostfile", "h", "a", "--worker_num", "2"}),
            "unknown option \"--worker_num\" for sync (see --help)");
  EXPECT_EQ(error_of({"sync", "--hostfile", "h", "a", "--sync_dest", "b"}),
            "unknown option \"--sync_dest\" for sync (see --help)");
  EXPECT_NE(help_text(Command::kSync).find("msrun-ssh sync"), std::string::npos);
}

TEST(Cli, SyncOnACheck) {
  CliResult r = parse({"check", "--hostfile", "h", "--sync", "t.py"});
  EXPECT_TRUE(r.options.sync);
  EXPECT_EQ(r.options.task_script, "t.py");
  EXPECT_EQ(error_of({"check", "--hostfile", "h", "--sync"}),
            "check --sync: give TASK_SCRIPT (its directory is synced) or --sync=DIR");
  EXPECT_EQ(error_of({"stop", "--hostfile", "h", "--job", "j", "--sync"}),
            "unknown option \"--sync\" for stop (see --help)");
}

}  // namespace
}  // namespace msrun_ssh

namespace msrun_ssh {
namespace {

// The job subcommands (#21): no host file, --job where a job is named, their own options only.
TEST(CliJobs, Subcommands) {
  CliResult l = parse({"list", "--json"});
  EXPECT_EQ(l.options.command, Command::kList);
  EXPECT_TRUE(l.options.json);
  EXPECT_TRUE(l.options.hostfile.empty());
  Options s = parse({"status", "--job", "20260101-000000-abcdef", "--json"}).options;
  EXPECT_EQ(s.command, Command::kStatus);
  EXPECT_EQ(s.job, "20260101-000000-abcdef");
  EXPECT_TRUE(s.json);
  Options g = parse({"logs", "--job=j1", "--rank", "3", "--follow"}).options;
  EXPECT_EQ(g.command, Command::kLogs);
  EXPECT_EQ(g.log_rank, 3);
  EXPECT_TRUE(g.follow);
  EXPECT_EQ(parse({"logs", "--job=j1", "--rank=-1"}).options.log_rank, -1);
  EXPECT_FALSE(parse({"logs", "--job=j1"}).options.log_rank.has_value());
  Options stop = parse({"stop", "--job", "j1"}).options;
  EXPECT_EQ(stop.command, Command::kStop);
  EXPECT_TRUE(stop.hostfile.empty());
  EXPECT_EQ(parse({"stop", "--job", "j1", "--hostfile", "h"}).options.hostfile, "h");
}

TEST(CliJobs, StackTakesTheJobAndTheOptionsOfReachingHosts) {
  Options o = parse({"stack", "--job", "j1"}).options;
  EXPECT_EQ(o.command, Command::kStack);
  EXPECT_EQ(o.job, "j1");
  EXPECT_TRUE(o.hostfile.empty());
  o = parse({"stack", "--hostfile", "h", "--job=j1", "--log_dir", "l", "--connect_timeout", "3"})
          .options;
  EXPECT_EQ(o.hostfile, "h");
  EXPECT_EQ(o.log_dir, "l");
  EXPECT_EQ(error_of({"stack"}), "stack: --job ID is required");
  EXPECT_EQ(error_of({"stack", "--hostfile", "h"}), "stack: --job ID is required");
  EXPECT_EQ(error_of({"stack", "--job", "j", "--kill_grace", "1"}),
            "unknown option \"--kill_grace\" for stack (see --help)");
  EXPECT_EQ(error_of({"stack", "--job", "j", "t.py"}), "stack: unexpected argument \"t.py\"");
  EXPECT_EQ(help_text(Command::kStack).rfind("usage: msrun-ssh stack", 0), 0u);
  EXPECT_NE(help_text(Command::kStack).find("SIGUSR2"), std::string::npos);
}

TEST(CliJobs, Errors) {
  EXPECT_EQ(error_of({"status"}), "status: --job ID is required");
  EXPECT_EQ(error_of({"logs", "--follow"}), "logs: --job ID is required");
  EXPECT_EQ(error_of({"logs", "--job", "j", "--json"}),
            "unknown option \"--json\" for logs (see --help)");
  EXPECT_EQ(error_of({"list", "--follow"}), "unknown option \"--follow\" for list (see --help)");
  EXPECT_EQ(error_of({"status", "--job", "j", "--rank", "1"}),
            "unknown option \"--rank\" for status (see --help)");
  EXPECT_EQ(error_of({"list", "x"}), "list: unexpected argument \"x\"");
  EXPECT_EQ(error_of({"logs", "--job", "j", "--rank", "x"}), "--rank=x: not an integer");
  EXPECT_EQ(error_of({"--hostfile", "h", "--follow", "t.py"}),
            "unknown option \"--follow\" for run (see --help)");
  EXPECT_EQ(help_text(Command::kList).rfind("usage: msrun-ssh list", 0), 0u);
  EXPECT_EQ(help_text(Command::kStatus).rfind("usage: msrun-ssh status", 0), 0u);
  EXPECT_EQ(help_text(Command::kLogs).rfind("usage: msrun-ssh logs", 0), 0u);
  EXPECT_NE(help_text(Command::kRun).find("msrun-ssh logs [OPTIONS] --job ID"), std::string::npos);
}

// One table says which command takes which option: a run's options that a command does not use
// are refused there, not ignored; check takes a run's command line as it is; status and logs
// take the SSH options that reach the job's hosts.
TEST(CliJobs, EachCommandTakesTheOptionsItsHelpLists) {
  EXPECT_EQ(error_of({"stop", "--job", "j", "--worker_num", "3"}),
            "unknown option \"--worker_num\" for stop (see --help)");
  EXPECT_EQ(error_of({"status", "--job", "j", "--timeout", "3"}),
            "unknown option \"--timeout\" for status (see --help)");
  EXPECT_EQ(error_of({"sync", "--hostfile", "h", "--log_dir", "x", "d"}),
            "unknown option \"--log_dir\" for sync (see --help)");
  Options check =
      parse({"check", "--hostfile", "h", "--timeout", "5", "--max_restarts", "2", "t.py"}).options;
  EXPECT_EQ(check.command, Command::kCheck);
  EXPECT_EQ(check.timeout, 5);
  EXPECT_EQ(parse({"status", "--job", "j", "--ssh_config", "c"}).options.ssh_config, "c");
  EXPECT_EQ(parse({"logs", "--job", "j", "--strict_host_key_checking", "no"})
                .options.strict_host_key_checking,
            HostKeyPolicy::kNo);
  EXPECT_EQ(error_of({"check", "--hostfile", "h", "--sync_dest", "d"}),
            "unknown option \"--sync_dest\" for check (see --help)");
  EXPECT_NE(help_text(Command::kCheck).find("--max_restarts"), std::string::npos);
  EXPECT_EQ(help_text(Command::kStop).find("--worker_num"), std::string::npos);
}

}  // namespace
}  // namespace msrun_ssh
