#include "msrun_ssh/cli.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <map>

#include "msrun_ssh/error.h"
#include "msrun_ssh/process.h"

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
      {"--local_worker_num", value([](O& o, S n, S v) {
         o.local_worker_num = static_cast<int>(to_int(n, v, 0, 1024));
         o.local_worker_num_given = true;
       })},
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
      {"--restart_policy", value([](O& o, S n, S v) {
         if (v == "job" || v == "process")
           o.restart_policy = v == "job" ? RestartPolicy::kJob : RestartPolicy::kProcess;
         else
           bad(n, v, "expects job or process");
       })},
      {"--recovery_path", value([](O& o, S n, S v) {
         if (v.empty()) bad(n, v, "expects a directory");
         o.recovery_path = v;
       })},
      {"--spares",
       value([](O& o, S n, S v) { o.spares = static_cast<int>(to_int(n, v, 0, 16384)); })},
      {"--host_failures_to_exclude", value([](O& o, S n, S v) {
         o.host_failures_to_exclude = static_cast<int>(to_int(n, v, 1, 1000));
       })},
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
      {"--transport", value([](O& o, S n, S v) {
         if (v == "ssh")
           o.transport = TransportKind::kSsh;
         else if (v == "srun")
           o.transport = TransportKind::kSrun;
         else
           bad(n, v, "expects ssh or srun");
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
      {"--sync", flag([](O& o, S, S v) {
         o.sync = true;
         o.sync_dir = v;
       })},
      {"--sync_dest", value([](O& o, S n, S v) {
         if (v.empty()) bad(n, v, "must not be empty");
         o.sync_dest = v;
       })},
      {"--sync_exclude", value([](O& o, S n, S v) {
         if (v.empty()) bad(n, v, "must not be empty");
         o.sync_excludes.push_back(v);
       })},
      {"--persist", value([](O& o, S n, S v) { o.persist = to_seconds(n, v, 0, 86400); })},
      {"--json", flag([](O& o, S n, S v) { o.json = v.empty() || to_bool(n, v); })},
      {"--agent", value([](O& o, S n, S v) {
         bool on = false;
         if (v == "auto")
           o.agent.reset();
         else if (parse_bool_word(v, on))
           o.agent = on;
         else
           bad(n, v, "expects True, False or auto");
       })},
      {"--quiet", flag([](O& o, S n, S v) { o.quiet = v.empty() || to_bool(n, v); })},
      {"--status_line", flag([](O& o, S n, S v) { o.status_line = v.empty() || to_bool(n, v); })},
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
      {"--rank",
       value([](O& o, S n, S v) { o.log_rank = static_cast<int>(to_int(n, v, -1, 1 << 20)); })},
      {"--follow", flag([](O& o, S n, S v) { o.follow = v.empty() || to_bool(n, v); })},
  };
}

// Options that only make sense for one command.
bool allowed(Command command, const std::string& name) {
  if (name == "--import" || name.rfind("--net", 0) == 0) return command == Command::kCheck;
  if (name == "--json")
    return command == Command::kCheck || command == Command::kList || command == Command::kStatus;
  if (name == "--job")
    return command == Command::kStop || command == Command::kStatus || command == Command::kLogs ||
           command == Command::kStack;
  if (name == "--rank" || name == "--follow") return command == Command::kLogs;
  if (name == "--sync") return command == Command::kRun || command == Command::kCheck;
  if (name == "--sync_dest") return command == Command::kRun;
  if (name == "--persist") return command == Command::kSync;
  const bool reaching = name == "--hostfile" || name == "--ssh_config" || name == "--fanout" ||
                        name == "--connect_timeout" || name == "--ssh_debug" ||
                        name == "--strict_host_key_checking" || name == "--transport";
  if (command == Command::kSync) return name == "--sync_exclude" || name == "--persist" || reaching;
  if (command == Command::kStack) return name == "--log_dir" || reaching;
  return true;
}

// The subcommands, by the word that names them.
constexpr std::pair<const char*, Command> kSubcommands[] = {
    {"check", Command::kCheck},   {"stop", Command::kStop}, {"list", Command::kList},
    {"status", Command::kStatus}, {"logs", Command::kLogs}, {"sync", Command::kSync},
    {"stack", Command::kStack}};

const char* command_name(Command c) {
  for (const auto& [word, command] : kSubcommands)
    if (command == c) return word;
  return "run";
}

// The job subcommands (docs/jobs.md) work from a job record: no host file needed.
bool from_record(const Options& o) {
  return o.command == Command::kList || o.command == Command::kStatus ||
         o.command == Command::kLogs ||
         ((o.command == Command::kStop || o.command == Command::kStack) && !o.job.empty());
}

}  // namespace

CliResult parse_args(const std::vector<std::string>& args, const GetEnv& getenv) {
  CliResult result;
  Options& o = result.options;
  size_t i = 0;
  for (const auto& [word, command] : kSubcommands)
    if (!args.empty() && args[0] == word) {
      o.command = command;
      i = 1;
    }
  if (o.command == Command::kSync) o.sync = true;
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
      if (o.command == Command::kSync && (o.sync_dir.empty() || o.sync_dest.empty())) {
        (o.sync_dir.empty() ? o.sync_dir : o.sync_dest) = arg;
        continue;
      }
      if (o.command != Command::kCheck || !o.task_script.empty())
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
  if (o.hostfile.empty() && !from_record(o))
    throw InputError(fmt::format("{}: --hostfile is required", command_name(o.command)));
  if (o.command == Command::kRun && o.task_script.empty())
    throw InputError(
        "TASK_SCRIPT is required: msrun-ssh [OPTIONS] --hostfile FILE TASK_SCRIPT ...");
  if ((o.command == Command::kStop || o.command == Command::kStatus ||
       o.command == Command::kLogs || o.command == Command::kStack) &&
      o.job.empty())
    throw InputError(fmt::format("{}: --job ID is required", command_name(o.command)));
  if (o.command == Command::kSync && o.sync_dir.empty())
    throw InputError("sync: DIR is required: msrun-ssh sync --hostfile FILE DIR [DEST]");
  if (o.command == Command::kCheck && o.sync && o.sync_dir.empty() && o.task_script.empty())
    throw InputError("check --sync: give TASK_SCRIPT (its directory is synced) or --sync=DIR");
  if (o.transport == TransportKind::kSrun)
    if (std::string why = srun_unavailable(getenv); !why.empty()) throw InputError(why);
  // A detached job has no launcher left to restart it or to watch its clock.
  if (!o.join && (o.max_restarts > 0 || o.timeout > 0 || o.hang_timeout > 0))
    throw InputError(
        "--max_restarts, --timeout and --hang_timeout need an attached run (--join=True)");
  if (!o.join && o.restart_policy == RestartPolicy::kProcess)
    throw InputError("--restart_policy process needs an attached run (--join=True)");
  return result;
}

std::vector<std::string> option_names() {
  std::vector<std::string> names{"--help", "--version"};
  for (const auto& [name, spec] : option_table([](const char*) -> const char* { return nullptr; }))
    names.push_back(name);
  return names;
}

}  // namespace msrun_ssh
