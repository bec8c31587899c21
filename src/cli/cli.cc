#include "msrun_ssh/cli.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <map>

#include "msrun_ssh/error.h"

namespace msrun_ssh {
namespace {

struct Spec {
  bool takes_value;
  std::function<void(Options&, const std::string& name, const std::string& value)> apply;
};

[[noreturn]] void bad(const std::string& name, const std::string& value, const std::string& why) {
  throw InputError(fmt::format("{}={}: {}", name, value, why));
}

long long to_int(const std::string& name, const std::string& v, long long lo, long long hi) {
  long long out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size()) bad(name, v, "not an integer");
  if (out < lo || out > hi) bad(name, v, fmt::format("must be {}..{}", lo, hi));
  return out;
}

// A number in lo..hi; `unit` names it in errors ("seconds", or "" for a plain number).
double to_number(const std::string& name, const std::string& v, double lo, double hi,
                 std::string_view unit) {
  double out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size() || !std::isfinite(out))
    bad(name, v, unit.empty() ? "not a number" : fmt::format("not a number of {}", unit));
  if (out < lo || out > hi)
    bad(name, v, fmt::format("must be {}..{}{}{}", lo, hi, unit.empty() ? "" : " ", unit));
  return out;
}

double to_seconds(const std::string& name, const std::string& v, double lo, double hi) {
  return to_number(name, v, lo, hi, "seconds");
}

bool to_bool(const std::string& name, const std::string& v) {
  bool out = false;
  if (!parse_bool_word(v, out)) bad(name, v, "expects True or False");
  return out;
}

std::vector<int> to_rank_list(const std::string& name, const std::string& v) {
  if (v == "-1") return {};
  std::vector<int> ranks;
  size_t pos = 0;
  while (true) {
    size_t comma = v.find(',', pos);
    ranks.push_back(static_cast<int>(to_int(name, v.substr(pos, comma - pos), 0, 1 << 20)));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return ranks;
}

std::map<std::string, Spec> option_table(const GetEnv& getenv) {
  auto value = [](auto fn) { return Spec{true, fn}; };
  auto flag = [](auto fn) { return Spec{false, fn}; };
  using O = Options;
  using S = const std::string&;
  return {
      {"--hostfile", value([](O& o, S, S v) { o.hostfile = v; })},
      {"--worker_num",
       value([](O& o, S n, S v) { o.worker_num = static_cast<int>(to_int(n, v, 1, 1 << 20)); })},
      {"--local_worker_num",
       value([](O& o, S n, S v) { o.local_worker_num = static_cast<int>(to_int(n, v, 0, 1024)); })},
      {"--master_addr", value([](O& o, S n, S v) {
         if (v.empty()) bad(n, v, "must not be empty");
         o.master_addr = v;
       })},
      {"--master_port",
       value([](O& o, S n, S v) { o.master_port = static_cast<int>(to_int(n, v, 1024, 65535)); })},
      {"--node_rank", value([](O&, S n, S v) {
         bad(n, v, "node ranks come from the order of the host file; remove --node_rank");
       })},
      {"--log_dir", value([](O& o, S n, S v) {
         if (v.empty()) bad(n, v, "must not be empty");
         o.log_dir = v;
       })},
      {"--join", value([](O& o, S n, S v) { o.join = to_bool(n, v); })},
      {"--cluster_time_out", value([](O& o, S n, S v) {
         o.cluster_time_out = static_cast<int>(to_int(n, v, 1, 86400LL * 7));
       })},
      {"--bind_core", value([](O& o, S n, S v) { o.bind_core = parse_bind_core(v, n); })},
      {"--bind_numa", value([](O& o, S n, S v) { o.bind_numa = parse_bind_numa(v, n); })},
      {"--sim_level",
       value([](O& o, S n, S v) { o.sim_level = static_cast<int>(to_int(n, v, -1, 1000)); })},
      {"--sim_rank_id",
       value([](O& o, S n, S v) { o.sim_rank_id = static_cast<int>(to_int(n, v, -1, 1 << 20)); })},
      {"--rank_table_file", value([](O& o, S, S v) { o.rank_table_file = v; })},
      {"--worker_log_name", value([](O& o, S n, S v) {
         if (v.empty() || v.find('/') != std::string::npos || v.find('\0') != std::string::npos)
           bad(n, v, "must be a non-empty file name without \"/\"");
         o.worker_log_name = v;
       })},
      {"--tail_worker_log", value([](O& o, S n, S v) { o.tail_worker_log = to_rank_list(n, v); })},
      {"--dry_run", flag([](O& o, S n, S v) { o.dry_run = v.empty() || to_bool(n, v); })},
      {"--ssh_config", value([](O& o, S, S v) { o.ssh_config = v; })},
      {"--fanout",
       value([](O& o, S n, S v) { o.fanout = static_cast<int>(to_int(n, v, 1, 4096)); })},
      {"--connect_timeout",
       value([](O& o, S n, S v) { o.connect_timeout = to_seconds(n, v, 0.1, 3600); })},
      {"--ssh_debug",
       value([](O& o, S n, S v) { o.ssh_debug = static_cast<int>(to_int(n, v, 0, 4)); })},
      {"--heartbeat", value([](O& o, S n, S v) { o.heartbeat = to_seconds(n, v, 0.2, 3600); })},
      {"--contract", value([](O& o, S n, S v) {
         if (v == "msrun")
           o.contract = Contract::kMsrun;
         else if (v == "torch")
           o.contract = Contract::kTorch;
         else
           bad(n, v, "expects msrun or torch");
       })},
      {"--timeout", value([](O& o, S n, S v) { o.timeout = to_seconds(n, v, 0, 1e7); })},
      {"--hang_timeout", value([](O& o, S n, S v) { o.hang_timeout = to_seconds(n, v, 0, 1e7); })},
      {"--on_hang", value([](O& o, S n, S v) {
         if (v == "kill" || v == "report")
           o.hang_kills = v == "kill";
         else
           bad(n, v, "expects kill or report");
       })},
      {"--max_restarts",
       value([](O& o, S n, S v) { o.max_restarts = static_cast<int>(to_int(n, v, 0, 1000)); })},
      {"--restart_backoff",
       value([](O& o, S n, S v) { o.restart_backoff = to_seconds(n, v, 0, 3600); })},
      {"--kill_grace", value([](O& o, S n, S v) { o.kill_grace = to_seconds(n, v, 0, 3600); })},
      {"--output", value([](O& o, S n, S v) {
         if (v == "prefixed" || v == "gather")
           o.output_gather = v == "gather";
         else
           bad(n, v, "expects prefixed or gather");
       })},
      {"--timestamps", flag([](O& o, S n, S v) { o.timestamps = v.empty() || to_bool(n, v); })},
      {"--log_timestamps",
       flag([](O& o, S n, S v) { o.log_timestamps = v.empty() || to_bool(n, v); })},
      {"--events", value([](O& o, S n, S v) {
         if (v.empty()) bad(n, v, "must name a file, or - for stdout");
         o.events = v;
       })},
      {"--report_bindings",
       flag([](O& o, S n, S v) { o.report_bindings = v.empty() || to_bool(n, v); })},
      {"--strict_host_key_checking", value([](O& o, S n, S v) {
         if (v == "yes")
           o.strict_host_key_checking = HostKeyPolicy::kYes;
         else if (v == "accept-new")
           o.strict_host_key_checking = HostKeyPolicy::kAcceptNew;
         else if (v == "no")
           o.strict_host_key_checking = HostKeyPolicy::kNo;
         else
           bad(n, v, "expects yes, accept-new or no");
       })},
      {"--env", value([getenv](O& o, S n, S v) {
         size_t eq = v.find('=');
         std::string name = v.substr(0, eq);
         if (!valid_env_name(name)) bad(n, v, "not a valid environment variable name");
         std::string val;
         if (eq != std::string::npos) {
           val = v.substr(eq + 1);
         } else {
           const char* local = getenv(name.c_str());
           if (!local) bad(n, v, fmt::format("{} is not set in the launcher's environment", name));
           val = local;
         }
         if (val.find('\0') != std::string::npos) bad(n, v, "value contains a NUL byte");
         set_env(o.env, name, val);
       })},
      {"--python", value([](O& o, S n, S v) {
         if (v.empty()) bad(n, v, "must not be empty");
         o.python = v;
       })},
      {"--import", value([](O& o, S, S v) { o.imports.push_back(v); })},
      {"--json", flag([](O& o, S n, S v) { o.json = v.empty() || to_bool(n, v); })},
      {"--net", flag([](O& o, S n, S v) {
         o.net_collective = v == "collective";
         bool on = v.empty() || o.net_collective;
         if (!on && !parse_bool_word(v, on)) bad(n, v, "expects True, False or collective");
         o.net = on;
       })},
      {"--net_pairs", value([](O& o, S n, S v) {
         if (v == "ring")
           o.net_pairs = NetPairs::kRing;
         else if (v == "all")
           o.net_pairs = NetPairs::kAll;
         else
           bad(n, v, "expects ring or all");
       })},
      {"--net_seconds", value([](O& o, S n, S v) { o.net_seconds = to_seconds(n, v, 0.05, 60); })},
      {"--net_min_ratio",
       value([](O& o, S n, S v) { o.net_min_ratio = to_number(n, v, 0, 1, ""); })},
      {"--job", value([](O& o, S n, S v) {
         if (v.empty() ||
             v.find_first_not_of("0123456789abcdefghijklmnopqrstuvwxyz-") != std::string::npos)
           bad(n, v, "not a job id (as printed by a --join=False run)");
         o.job = v;
       })},
  };
}

// Options that only make sense for one command.
bool allowed(Command command, const std::string& name) {
  if (name == "--import" || name == "--json" || name.rfind("--net", 0) == 0)
    return command == Command::kCheck;
  if (name == "--job") return command == Command::kStop;
  return true;
}

const char* command_name(Command c) {
  return c == Command::kCheck ? "check" : c == Command::kStop ? "stop" : "run";
}

}  // namespace

CliResult parse_args(const std::vector<std::string>& args, const GetEnv& getenv) {
  CliResult result;
  Options& o = result.options;
  size_t i = 0;
  if (!args.empty() && (args[0] == "check" || args[0] == "stop")) {
    o.command = args[0] == "check" ? Command::kCheck : Command::kStop;
    i = 1;
  }
  auto table = option_table(getenv);
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") return {CliAction::kHelp, o};
    if (arg == "-v" || arg == "--version") return {CliAction::kVersion, o};
    if (arg.size() < 2 || arg[0] != '-' || arg == "-") {
      // TASK_SCRIPT: for a run, it and everything after it belong to the task.
      if (o.command == Command::kRun) {
        o.task_script = arg;
        o.task_args.assign(args.begin() + static_cast<long>(i) + 1, args.end());
        break;
      }
      if (o.command == Command::kStop || !o.task_script.empty())
        throw InputError(
            fmt::format("{}: unexpected argument \"{}\"", command_name(o.command), arg));
      o.task_script = arg;
      continue;
    }
    if (arg == "--") throw InputError("\"--\": put TASK_SCRIPT first, then its arguments");
    size_t eq = arg.find('=');
    std::string name = arg.substr(0, eq);
    auto it = table.find(name);
    if (it == table.end() || !allowed(o.command, name))
      throw InputError(
          fmt::format("unknown option \"{}\" for {} (see --help)", name, command_name(o.command)));
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (name == "--net" && i + 1 < args.size() && args[i + 1] == "collective") {
      value = args[++i];  // `--net collective`: a value, not TASK_SCRIPT
    } else if (it->second.takes_value) {
      if (i + 1 >= args.size()) throw InputError(fmt::format("{}: expects a value", name));
      value = args[++i];
    }
    it->second.apply(o, name, value);
  }
  if (o.hostfile.empty())
    throw InputError(fmt::format("{}: --hostfile is required", command_name(o.command)));
  if (o.command == Command::kRun && o.task_script.empty())
    throw InputError(
        "TASK_SCRIPT is required: msrun-ssh [OPTIONS] --hostfile FILE TASK_SCRIPT ...");
  if (o.command == Command::kStop && o.job.empty()) throw InputError("stop: --job ID is required");
  // A detached job has no launcher left to restart it or to watch its clock.
  if (!o.join && (o.max_restarts > 0 || o.timeout > 0 || o.hang_timeout > 0))
    throw InputError(
        "--max_restarts, --timeout and --hang_timeout need an attached run (--join=True)");
  return result;
}

std::string help_text(Command command) {
  if (command == Command::kStop)
    return R"(usage: msrun-ssh stop [OPTIONS] --hostfile FILE --job ID

End a detached job (one started with --join=False) on every host of FILE: SIGTERM, then SIGKILL
after --kill_grace seconds, to every process marked with the job id, grandchildren included.
Prints what it killed on each host. The SSH options of a run apply.
)";
  if (command == Command::kCheck)
    return R"(usage: msrun-ssh check [OPTIONS] --hostfile FILE [TASK_SCRIPT] [--import MODULE]... [--json]

Cluster acceptance report: checks every host concurrently (reachable, authenticated, host key,
OS/kernel, CPUs, NUMA, devices, python and modules, script checksum, workdir, clock, disk,
master port) and prints a table, or JSON with --json. Exit 0 only when every check passes.
The options of a run apply where they make sense.

  --import MODULE              also check `import MODULE` on every host (repeatable)
  --json                       the report as JSON
  --net                        also measure TCP bandwidth (both ways) and RTT between hosts, in
                               rounds of pairs, over the address each host uses to reach the
                               master (or its *_SOCKET_IFNAME); a host below --net_min_ratio of
                               the median fails
  --net=collective             (or --net collective) --net, then one tiny all-reduce, timed,
                               through the job's own launch path: scheduler and workers started
                               as a run starts them, each running a small Python program with
                               the run's interpreter (an "allreduce" column)
  --net_pairs all|ring         which pairs: all (N-1 rounds) or a ring (2-3 rounds)
                               (default: all up to 8 hosts, a ring above)
  --net_seconds S              sending time per direction of each pair (default 1)
  --net_min_ratio R            fraction of the median rate below which a host or link fails
                               (default 0.5)
)";
  return R"(usage: msrun-ssh [OPTIONS] --hostfile FILE TASK_SCRIPT [TASK_ARGS...]
       msrun-ssh check [OPTIONS] --hostfile FILE [TASK_SCRIPT] [--import MODULE]... [--json]
       msrun-ssh stop  [OPTIONS] --hostfile FILE --job ID

Start one distributed job on every host of FILE over SSH, with msrun's environment (MS_SCHED_HOST,
MS_WORKER_NUM, RANK_ID, ...). Node ranks follow the host file; every line of every process comes
back prefixed, and per-rank logs are written to --log_dir. Options take "--name=value" or
"--name value"; booleans take True/False. Everything after TASK_SCRIPT belongs to the task.

msrun's options:
  --hostfile FILE              TOML host file (*.toml) or "host slots=N" lines (required)
  --worker_num N               total workers; must equal the host file's sum (default: that sum)
  --local_worker_num N         workers on hosts whose entry does not say (default 8)
  --master_addr HOST           host that runs the scheduler, by address, name or IP (default: first)
  --master_port P              scheduler port, 1024-65535 (default 8118)
  --log_dir DIR                where logs go on this machine, created 0700 (default .)
  --join BOOL                  False: start detached, print a job id and return (default True)
  --cluster_time_out S         MS_TOPO_TIMEOUT; also bounds start-up (default 600)
  --bind_core BOOL|JSON        True: bind each process to its own cores, NUMA/device-local;
                               or '{"scheduler":["0-3"],"device0":["4-9"]}' (default False)
  --bind_numa BOOL|JSON|FILE   numactl --cpunodebind/--membind per process (default False)
  --sim_level N                msrun simulation: no scheduler, MS_SIMULATION_LEVEL=N
  --sim_rank_id N              with --sim_level: run only rank N
  --rank_table_file PATH       exported as RANK_TABLE_FILE
  --worker_log_name T          log name T_<rank>.log; {ip} and {hostname} are replaced (default worker)
  --tail_worker_log R          ranks shown on the console, e.g. 0,3; -1 all (default -1); logs keep all;
                               what you type reaches these ranks (pdb)
  --node_rank                  not accepted: node ranks come from the host file

msrun-ssh's options:
  --dry_run                    print hosts, ranks, environment, bindings and remote commands; exit 0
  --ssh_config FILE            OpenSSH client config (default ~/.ssh/config)
  --fanout N                   SSH handshakes in flight at once (default 64)
  --connect_timeout S          per host: connect + authenticate (default 10)
  --ssh_debug N                libssh's own messages, 0 (none) .. 4 (every function), into
                               msrun-ssh.log, never the console (default 1: its warnings);
                               check and stop print them on stderr when asked
  --heartbeat S                remote processes end within 3x this after losing us (default 5)
  --kill_grace S               SIGTERM -> SIGKILL delay in a teardown (default 5)
  --contract msrun|torch       the processes' environment: msrun's (scheduler, MS_* variables) or
                               torchrun's (RANK, WORLD_SIZE, MASTER_ADDR, ...; no scheduler);
                               default: the host file's [defaults] contract, else msrun
  --timeout S                  the job's wall-time limit: then a teardown and exit 124 (default 0: none)
  --hang_timeout S             no output from any process for S seconds is a hang: reported, then
                               (--on_hang=kill, the default) a teardown and exit 124; or
                               --on_hang=report: reported again every S seconds, the job goes on
  --max_restarts N             after a failure, tear down and start the whole job again, up to N
                               times (default 0); MSRUN_SSH_ATTEMPT tells each process its attempt
  --restart_backoff S          wait before the first restart, doubled for each next (default 1)
  --report_bindings            print each process's CPUs / NUMA nodes before starting
  --output prefixed|gather     gather: a line that several ranks print within 1 s is printed once,
                               under their rank and host sets ("[0-7@node[01-02]] ..."); logs stay
                               raw (default prefixed: every line with its own rank@host)
  --timestamps                 console lines start with their receive time (UTC, ms)
  --log_timestamps             so do the lines of the per-rank log files (they are no longer raw)
  --events FILE                the job's life as JSON Lines (docs/events.md), appended to FILE;
                               - for stdout; the summary also goes to <log_dir>/summary.json
  --strict_host_key_checking yes|accept-new|no   (default: ssh config, else yes)
  --env NAME[=VALUE]           set, or forward from here, a variable for every process (repeatable)
  --python PATH                interpreter for .py scripts (default: host file, else python3)
  -h, --help                   this text;  -v, --version   the version

Exit status: 0 all processes exited 0; else the first failed process's status (128+N for signal N);
2 usage or input error; 255 a host could not be reached, authenticated or verified, or was lost;
124 --timeout passed or --hang_timeout found the job silent;
254 the end of the job could not be confirmed on a host (the processes named may still run);
130/143/129 interrupted by SIGINT/SIGTERM/SIGHUP (after teardown).
)";
}

}  // namespace msrun_ssh
