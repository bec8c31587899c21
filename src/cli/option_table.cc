// The table of every option (option_table.h): its documentation and its parser side by side.
#include "msrun_ssh/option_table.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <initializer_list>
#include <regex>
#include <utility>

#include "msrun_ssh/base.h"
#include "msrun_ssh/error.h"

namespace msrun_ssh {
namespace {

constexpr CommandSet kRun = command_bit(Command::kRun);
constexpr CommandSet kCheck = command_bit(Command::kCheck);
constexpr CommandSet kStop = command_bit(Command::kStop);
constexpr CommandSet kList = command_bit(Command::kList);
constexpr CommandSet kStatus = command_bit(Command::kStatus);
constexpr CommandSet kLogs = command_bit(Command::kLogs);
constexpr CommandSet kSync = command_bit(Command::kSync);
constexpr CommandSet kStack = command_bit(Command::kStack);
constexpr CommandSet kTop = command_bit(Command::kTop);
constexpr CommandSet kRunCheck = kRun | kCheck;
// Every command that reaches hosts with the SSH options of a run.
constexpr CommandSet kConnecting = kRun | kCheck | kStop | kSync | kStack;
constexpr CommandSet kEvery = kConnecting | kList | kStatus | kLogs | kTop;
// How hosts are reached, also for status and logs (which reach the hosts of a job's record).
constexpr CommandSet kReaching = kConnecting | kStatus | kLogs;

[[noreturn]] void bad(const std::string& name, const std::string& value, const std::string& why) {
  throw InputError(fmt::format("{}={}: {}", name, value, why));
}

// Why `v` is not an integer in lo..hi ("" when it is one: `out`).
std::string int_problem(const std::string& v, long long lo, long long hi, long long& out) {
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size()) return "not an integer";
  if (out < lo || out > hi) return fmt::format("must be {}..{}", lo, hi);
  return "";
}

long long to_int(const std::string& name, const std::string& v, long long lo, long long hi) {
  long long out = 0;
  if (std::string why = int_problem(v, lo, hi, out); !why.empty()) bad(name, v, why);
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

// `v`, which must not be empty (`why` says what it must be instead).
const std::string& non_empty(const std::string& name, const std::string& v,
                             const char* why = "must not be empty") {
  if (v.empty()) bad(name, v, why);
  return v;
}

// The value of the word `v` among `choices`; else "expects a, b or c".
template <typename T>
T one_of(const std::string& name, const std::string& v,
         std::initializer_list<std::pair<const char*, T>> choices) {
  std::string words;
  size_t i = 0;
  for (const auto& [word, value] : choices) {
    if (v == word) return value;
    words += i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ";
    words += word;
    ++i;
  }
  bad(name, v, "expects " + words);
}

std::vector<int> to_rank_list(const std::string& name, const std::string& v) {
  if (v == "-1") return {};
  std::vector<int> ranks;
  size_t pos = 0;
  while (true) {
    size_t comma = v.find(',', pos);
    // Blanks around a rank are dropped, as msrun's int() drops them ("0, 3").
    std::string item(trim(std::string_view(v).substr(pos, comma - pos), " \t"));
    long long rank = 0;
    if (std::string why = int_problem(item, 0, 1 << 20, rank); !why.empty())
      bad(name, v, fmt::format("rank {}: {}", in_quotes(item), why));
    ranks.push_back(static_cast<int>(rank));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return ranks;
}

}  // namespace

const std::vector<OptionSpec>& option_table() {
  using S = OptionSection;
  using O = Options;
  using V = const std::string&;
  using G = const GetEnv&;
  static const std::vector<OptionSpec> table{
      {"--hostfile", "", "FILE|slurm|pbs|lsf|auto",
       "TOML host file (*.toml) or \"host slots=N\" lines; or the hosts of the Slurm, PBS or "
       "LSF allocation it runs in (required, but by stop and stack: they take the hosts of the "
       "job's record without it)",
       kConnecting, S::kMsrun, [](O& o, V n, V v, G) { o.hostfile = non_empty(n, v); }},
      {"--worker_num", "", "N", "total workers; must equal the host file's sum (default: that sum)",
       kRunCheck, S::kMsrun,
       [](O& o, V n, V v, G) { o.worker_num = static_cast<int>(to_int(n, v, 1, 1 << 20)); }},
      {"--local_worker_num", "", "N", "workers on hosts whose entry does not say (default 8)",
       kRunCheck, S::kMsrun,
       [](O& o, V n, V v, G) {
         o.local_worker_num = static_cast<int>(to_int(n, v, 0, 1024));
         o.local_worker_num_given = true;
       }},
      {"--master_addr", "", "HOST",
       "host that runs the scheduler, by address, name or IP (default: first)", kRunCheck,
       S::kMsrun, [](O& o, V n, V v, G) { o.master_addr = non_empty(n, v); }},
      {"--master_port", "", "P", "scheduler port, 1024-65535 (default 8118)", kRunCheck, S::kMsrun,
       [](O& o, V n, V v, G) { o.master_port = static_cast<int>(to_int(n, v, 1024, 65535)); }},
      {"--log_dir", "", "DIR",
       "where logs go on this machine, created 0700 (default .); for stack: where its report is "
       "saved",
       kRunCheck | kStack, S::kMsrun, [](O& o, V n, V v, G) { o.log_dir = non_empty(n, v); }},
      {"--join", "", "BOOL", "False: start detached, print a job id and return (default True)",
       kRunCheck, S::kMsrun, [](O& o, V n, V v, G) { o.join = to_bool(n, v); }},
      {"--cluster_time_out", "", "S", "MS_TOPO_TIMEOUT; also bounds start-up (default 600)",
       kRunCheck, S::kMsrun,
       [](O& o, V n, V v, G) {
         o.cluster_time_out = static_cast<int>(to_int(n, v, 1, 86400LL * 7));
       }},
      {"--bind_core", "", "BOOL|JSON",
       "True: bind each process to its own cores, NUMA/device-local; or "
       "'{\"scheduler\":[\"0-3\"],\"device0\":[\"4-9\"]}' (default False)",
       kRunCheck, S::kMsrun, [](O& o, V n, V v, G) { o.bind_core = parse_bind_core(v, n); }},
      {"--bind_numa", "", "BOOL|JSON|FILE",
       "numactl --cpunodebind/--membind per process (default False)", kRunCheck, S::kMsrun,
       [](O& o, V n, V v, G) { o.bind_numa = parse_bind_numa(v, n); }},
      {"--sim_level", "", "N", "msrun simulation: no scheduler, MS_SIMULATION_LEVEL=N", kRunCheck,
       S::kMsrun,
       [](O& o, V n, V v, G) { o.sim_level = static_cast<int>(to_int(n, v, -1, 1000)); }},
      {"--sim_rank_id", "", "N", "with --sim_level: run only rank N", kRunCheck, S::kMsrun,
       [](O& o, V n, V v, G) { o.sim_rank_id = static_cast<int>(to_int(n, v, -1, 1 << 20)); }},
      {"--rank_table_file", "", "PATH", "exported as RANK_TABLE_FILE", kRunCheck, S::kMsrun,
       [](O& o, V, V v, G) { o.rank_table_file = v; }},
      {"--worker_log_name", "", "T",
       "log name T_<rank>.log; {ip} and {hostname} are replaced (default worker)", kRunCheck,
       S::kMsrun,
       [](O& o, V n, V v, G) {
         if (v.find('/') != std::string::npos || v.find('\0') != std::string::npos)
           bad(n, v, "must be a file name without \"/\"");
         o.worker_log_name = v.empty() ? "worker" : v;  // as msrun: empty is the default
       }},
      {"--tail_worker_log", "", "R",
       "ranks shown on the console, e.g. 0,3; -1 all (default -1); logs keep all; what you type "
       "reaches the ranks named here (pdb), none with -1",
       kRunCheck, S::kMsrun, [](O& o, V n, V v, G) { o.tail_worker_log = to_rank_list(n, v); }},
      {"--node_rank", "", "N", "not accepted: node ranks come from the host file", kRunCheck,
       S::kMsrun,
       [](O&, V n, V v, G) {
         bad(n, v, "node ranks come from the order of the host file; remove --node_rank");
       }},
      {"--dry_run", "", "", "print hosts, ranks, environment, bindings and remote commands; exit 0",
       kRunCheck, S::kOwn, [](O& o, V n, V v, G) { o.dry_run = v.empty() || to_bool(n, v); }},
      {"--ssh_config", "", "FILE", "OpenSSH client config (default ~/.ssh/config)", kReaching,
       S::kOwn, [](O& o, V, V v, G) { o.ssh_config = v; }},
      {"--fanout", "", "N", "SSH handshakes in flight at once (default 64)", kConnecting, S::kOwn,
       [](O& o, V n, V v, G) {
         o.fanout = static_cast<int>(to_int(n, v, 1, 4096));
         o.fanout_given = true;
       }},
      {"--jump_fanout", "", "N",
       "of those, through one jump host (ProxyJump's first hop, or one ProxyCommand) until the "
       "host behind it answers; its sshd drops those above MaxStartups, 10 by default (default 8)",
       kConnecting, S::kOwn,
       [](O& o, V n, V v, G) {
         o.jump_fanout = static_cast<int>(to_int(n, v, 1, 4096));
         o.jump_fanout_given = true;
       }},
      {"--connect_timeout", "", "S",
       "per host: connect + authenticate (default: ssh config's ConnectTimeout, else 10)",
       kConnecting, S::kOwn,
       [](O& o, V n, V v, G) {
         o.connect_timeout = to_seconds(n, v, 0.1, 3600);
         o.connect_timeout_given = true;
       }},
      {"--ssh_debug", "", "N",
       "libssh's own messages, 0 (none) .. 4 (every function), into msrun-ssh.log, never the "
       "console (default 1: its warnings); check and stop print them on stderr when asked",
       kReaching, S::kOwn,
       [](O& o, V n, V v, G) { o.ssh_debug = static_cast<int>(to_int(n, v, 0, 4)); }},
      {"--heartbeat", "", "S", "remote processes end within 3x this after losing us (default 5)",
       kRunCheck, S::kOwn, [](O& o, V n, V v, G) { o.heartbeat = to_seconds(n, v, 0.2, 3600); }},
      {"--kill_grace", "", "S", "SIGTERM -> SIGKILL delay in a teardown (default 5)",
       kRunCheck | kStop, S::kOwn,
       [](O& o, V n, V v, G) { o.kill_grace = to_seconds(n, v, 0, 3600); }},
      {"--contract", "", "msrun|torch",
       "the processes' environment: msrun's (scheduler, MS_* variables) or torchrun's (RANK, "
       "WORLD_SIZE, MASTER_ADDR, ...; no scheduler); default: the host file's [defaults] "
       "contract, else msrun",
       kRunCheck, S::kOwn,
       [](O& o, V n, V v, G) {
         o.contract =
             one_of<Contract>(n, v, {{"msrun", Contract::kMsrun}, {"torch", Contract::kTorch}});
       }},
      {"--timeout", "", "S",
       "the job's wall-time limit: then a teardown and exit 124 (default 0: none)", kRunCheck,
       S::kOwn, [](O& o, V n, V v, G) { o.timeout = to_seconds(n, v, 0, 1e7); }},
      {"--hang_timeout", "", "S",
       "no output from any process for S seconds is a hang: reported, then handled as --on_hang "
       "says",
       kRunCheck, S::kOwn, [](O& o, V n, V v, G) { o.hang_timeout = to_seconds(n, v, 0, 1e7); }},
      {"--watch", "", "[True|False]",
       "sample every host's job processes once a second over the job's own connections (a small "
       "Perl program): a straggler, the host whose ranks the others wait for, is named on the "
       "console and in --events and summary.json (docs/slow-nodes.md) (default True)",
       kRunCheck, S::kOwn, [](O& o, V n, V v, G) { o.watch = v.empty() || to_bool(n, v); }},
      {"--progress_regex", "", "REGEX",
       "where `top` finds a rank's step in its last line: the first group of REGEX (ECMAScript), "
       "else its whole match (default: \"step N\" / \"iter N\", tqdm's \"N/TOTAL [\", \"epoch N\")",
       kRunCheck, S::kOwn,
       [](O& o, V n, V v, G) {
         o.progress_regex = non_empty(n, v);
         // std::regex compiles by recursion: 20000 nested groups overflow the stack.
         if (o.progress_regex.size() > 512)
           bad(n, v.substr(0, 40) + "...", "is longer than 512 characters");
         try {
           std::regex check(o.progress_regex);
         } catch (const std::regex_error& e) {
           bad(n, v, fmt::format("is not a regular expression: {}", e.what()));
         }
       }},
      {"--once", "", "", "print one screen and exit", kTop, S::kOwn,
       [](O& o, V n, V v, G) { o.once = v.empty() || to_bool(n, v); }},
      {"--on_hang", "", "kill|report",
       "with --hang_timeout: kill (the default): a teardown and exit 124; report: reported again "
       "every S seconds, the job goes on",
       kRunCheck, S::kOwn,
       [](O& o, V n, V v, G) {
         o.hang_kills = one_of<bool>(n, v, {{"kill", true}, {"report", false}});
       }},
      {"--on_log_error", "", "warn|stop",
       "a per-rank log that cannot be written (a full disk): warn (the default): said at once and "
       "in the summary, the job goes on and the log resumes when it can; stop: a teardown and "
       "exit 1",
       kRunCheck, S::kOwn,
       [](O& o, V n, V v, G) {
         o.log_error_stops = one_of<bool>(n, v, {{"warn", false}, {"stop", true}});
       }},
      {"--max_restarts", "", "N",
       "after a failure, tear down and start the whole job again, up to N times (default 0); "
       "MSRUN_SSH_ATTEMPT tells each process its attempt",
       kRunCheck, S::kOwn,
       [](O& o, V n, V v, G) { o.max_restarts = static_cast<int>(to_int(n, v, 0, 1000)); }},
      {"--restart_backoff", "", "S",
       "wait before the first restart, doubled for each next (default 1)", kRunCheck, S::kOwn,
       [](O& o, V n, V v, G) { o.restart_backoff = to_seconds(n, v, 0, 3600); }},
      {"--restart_policy", "", "job|process",
       "job (the default): a failure restarts the whole job; process: a failed worker alone is "
       "started again in place while the others run on (each restart counts against "
       "--max_restarts); every process gets MS_ENABLE_RECOVERY=1 and MS_RECOVERY_PATH",
       kRunCheck, S::kOwn,
       [](O& o, V n, V v, G) {
         o.restart_policy = one_of<RestartPolicy>(
             n, v, {{"job", RestartPolicy::kJob}, {"process", RestartPolicy::kProcess}});
       }},
      {"--recovery_path", "", "DIR",
       "with --restart_policy process: MS_RECOVERY_PATH is DIR/JOB_ID, DIR relative to each "
       "host's workdir (default msrun-ssh-recovery)",
       kRunCheck, S::kOwn,
       [](O& o, V n, V v, G) { o.recovery_path = non_empty(n, v, "expects a directory"); }},
      {"--spares", "", "N",
       "the host file's last N hosts are spares (as hosts marked spare = true): they start "
       "nothing; at a restart the first free one replaces a host lost, unreachable or failed "
       "--host_failures_to_exclude times (default 0)",
       kRunCheck, S::kOwn,
       [](O& o, V n, V v, G) { o.spares = static_cast<int>(to_int(n, v, 0, 16384)); }},
      {"--host_failures_to_exclude", "", "K",
       "with spares: a host whose process failed first, or that was lost, in K attempts is "
       "replaced by a spare (default 2)",
       kRunCheck, S::kOwn,
       [](O& o, V n, V v, G) {
         o.host_failures_to_exclude = static_cast<int>(to_int(n, v, 1, 1000));
       }},
      {"--report_bindings", "", "", "print each process's CPUs / NUMA nodes before starting",
       kRunCheck, S::kOwn,
       [](O& o, V n, V v, G) { o.report_bindings = v.empty() || to_bool(n, v); }},
      {"--output", "", "prefixed|gather",
       "gather: a line that several ranks print within 1 s is printed once, under their rank and "
       "host sets (\"[0-7@node[01-02]] ...\"); logs stay raw (default prefixed: every line with "
       "its own rank@host)",
       kRunCheck, S::kOwn,
       [](O& o, V n, V v, G) {
         o.output_gather = one_of<bool>(n, v, {{"prefixed", false}, {"gather", true}});
       }},
      {"--timestamps", "", "", "console lines start with their receive time (UTC, ms)", kRunCheck,
       S::kOwn, [](O& o, V n, V v, G) { o.timestamps = v.empty() || to_bool(n, v); }},
      {"--log_timestamps", "", "",
       "so do the lines of the per-rank log files (they are no longer raw)", kRunCheck, S::kOwn,
       [](O& o, V n, V v, G) { o.log_timestamps = v.empty() || to_bool(n, v); }},
      {"--events", "", "FILE",
       "the job's life as JSON Lines (docs/events.md), appended to FILE; \"-\" for stdout; the "
       "summary also goes to <log_dir>/summary.json",
       kRun, S::kOwn,
       [](O& o, V n, V v, G) { o.events = non_empty(n, v, "must name a file, or - for stdout"); }},
      {"--strict_host_key_checking", "", "yes|accept-new|no", "(default: ssh config, else yes)",
       kReaching, S::kOwn,
       [](O& o, V n, V v, G) {
         o.strict_host_key_checking =
             one_of<HostKeyPolicy>(n, v,
                                   {{"yes", HostKeyPolicy::kYes},
                                    {"accept-new", HostKeyPolicy::kAcceptNew},
                                    {"no", HostKeyPolicy::kNo}});
       }},
      {"--transport", "", "ssh|srun",
       "how commands reach the hosts: ssh (default), or srun inside a Slurm allocation: every "
       "command a job step on its host (the host's address is its node name; needs SLURM_JOB_ID "
       "and srun on PATH)",
       kReaching, S::kOwn,
       [](O& o, V n, V v, G) {
         o.transport = one_of<TransportKind>(
             n, v, {{"ssh", TransportKind::kSsh}, {"srun", TransportKind::kSrun}});
       }},
      {"--env", "", "NAME[=VALUE]",
       "set, or forward from here, a variable for every process (repeatable)", kRunCheck, S::kOwn,
       [](O& o, V n, V v, G getenv) {
         size_t eq = v.find('=');
         std::string name = v.substr(0, eq);
         if (std::string why = env_name_problem(name); !why.empty()) bad(n, v, why);
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
       }},
      {"--python", "", "PATH", "interpreter for .py scripts (default: host file, else python3)",
       kRunCheck, S::kOwn, [](O& o, V n, V v, G) { o.python = non_empty(n, v); }},
      {"--agent", "", "BOOL|auto",
       "True: one launch agent per host starts its processes, so each host runs its login rc once; "
       "False: one SSH channel per process; auto: the same as True (default auto)",
       kRunCheck, S::kOwn,
       [](O& o, V n, V v, G) {
         bool on = false;
         if (v == "auto")
           o.agent.reset();
         else if (parse_bool_word(v, on))
           o.agent = on;
         else
           bad(n, v, "expects True, False or auto");
       }},
      {"--quiet", "", "",
       "no start-up progress on the terminal (it is only ever drawn on a terminal's stderr, never "
       "in logs or pipes)",
       kRunCheck, S::kOwn, [](O& o, V n, V v, G) { o.quiet = v.empty() || to_bool(n, v); }},
      {"--status_line", "", "",
       "while the job runs, its state on the terminal's last row: processes running/exited/failed, "
       "output rate, elapsed time",
       kRunCheck, S::kOwn, [](O& o, V n, V v, G) { o.status_line = v.empty() || to_bool(n, v); }},
      {"--sync", "", "[=DIR]",
       "before starting, make DIR (default: the task script's directory) on every host identical "
       "to this one's (docs/sync.md); for check: report per host whether it is in sync",
       kRunCheck, S::kOwn,
       [](O& o, V, V v, G) {
         o.sync = true;
         o.sync_dir = v;
       }},
      {"--sync_dest", "", "DEST", "where DIR goes on the hosts (relative: to each workdir)", kRun,
       S::kOwn, [](O& o, V n, V v, G) { o.sync_dest = non_empty(n, v); }},
      {"--sync_exclude", "", "PATTERN",
       "leave out what PATTERN matches (gitignore syntax; repeatable)", kRunCheck | kCheck | kSync,
       S::kOwn, [](O& o, V n, V v, G) { o.sync_excludes.push_back(non_empty(n, v)); }},
      {"--persist", "", "SECONDS",
       "keep the connections open that long after the sync, in a process of their own, for the "
       "next sync to the same hosts (as ssh's ControlPersist; docs/sync.md) "
       "(default 0: not kept)",
       kSync, S::kOwn, [](O& o, V n, V v, G) { o.persist = to_seconds(n, v, 0, 86400); }},
      {"--import", "", "MODULE",
       "check that MODULE imports with the hosts' interpreter (repeatable)", kCheck, S::kOwn,
       [](O& o, V, V v, G) { o.imports.push_back(v); }},
      {"--net", "", "[=collective]",
       "also measure TCP bandwidth (both ways) and RTT between hosts, in rounds of pairs, over the "
       "address each host uses to reach the master (or its *_SOCKET_IFNAME); a host below "
       "--net_min_ratio of the median fails. --net=collective (or --net collective): then one tiny "
       "all-reduce, timed, through the job's own launch path: scheduler and workers started as a "
       "run starts them, each running a small Python program with the run's interpreter (an "
       "\"allreduce\" column)",
       kCheck, S::kOwn,
       [](O& o, V n, V v, G) {
         o.net_collective = v == "collective";
         bool on = v.empty() || o.net_collective;
         if (!on && !parse_bool_word(v, on)) bad(n, v, "expects True, False or collective");
         o.net = on;
       }},
      {"--net_pairs", "", "all|ring",
       "which pairs --net tests: all (N-1 rounds) or a ring (2-3 rounds) (default: all up to 8 "
       "hosts, a ring above)",
       kCheck, S::kOwn,
       [](O& o, V n, V v, G) {
         o.net_pairs = one_of<NetPairs>(n, v, {{"ring", NetPairs::kRing}, {"all", NetPairs::kAll}});
       }},
      {"--net_seconds", "", "S", "--net's sending time per direction of each pair (default 1)",
       kCheck, S::kOwn, [](O& o, V n, V v, G) { o.net_seconds = to_seconds(n, v, 0.05, 60); }},
      {"--net_min_ratio", "", "R",
       "fraction of the median rate below which a host or link fails --net (default 0.5)", kCheck,
       S::kOwn, [](O& o, V n, V v, G) { o.net_min_ratio = to_number(n, v, 0, 1, ""); }},
      {"--perf", "", "",
       "also time each host (a few seconds): its allowed CPUs (numpy, else pure Python), a memory "
       "copy, writing and reading its workdir and each --perf_path, and its accelerators' health "
       "(nvidia-smi / npu-smi); a host below --perf_min_ratio of the median fails (a \"perf\" "
       "column)",
       kCheck, S::kOwn, [](O& o, V n, V v, G) { o.perf = v.empty() || to_bool(n, v); }},
      {"--perf_seconds", "", "S", "--perf's time per measurement (default 1)", kCheck, S::kOwn,
       [](O& o, V n, V v, G) { o.perf_seconds = to_seconds(n, v, 0.05, 60); }},
      {"--perf_path", "", "DIR",
       "also time writing and reading DIR on each host, e.g. the dataset's (repeatable; implies "
       "--perf)",
       kCheck, S::kOwn,
       [](O& o, V n, V v, G) {
         o.perf_paths.push_back(non_empty(n, v));
         o.perf = true;
       }},
      {"--perf_min_ratio", "", "R",
       "fraction of the hosts' median below which a host fails --perf (default 0.5)", kCheck,
       S::kOwn, [](O& o, V n, V v, G) { o.perf_min_ratio = to_number(n, v, 0, 1, ""); }},
      {"--json", "", "", "print the report as JSON instead of a table", kCheck | kList | kStatus,
       S::kOwn, [](O& o, V n, V v, G) { o.json = v.empty() || to_bool(n, v); }},
      {"--job", "", "ID",
       "the job id a run printed (see msrun-ssh list; required, but by top: without it, the newest "
       "job); stop and stack without --hostfile take the hosts from the job's record",
       kStop | kStatus | kLogs | kStack | kTop, S::kOwn,
       [](O& o, V n, V v, G) {
         if (v.empty() ||
             v.find_first_not_of("0123456789abcdefghijklmnopqrstuvwxyz-") != std::string::npos)
           bad(n, v, "not a job id (as printed by a --join=False run)");
         o.job = v;
       }},
      {"--rank", "", "R", "only the log of rank R (-1: the scheduler)", kLogs, S::kOwn,
       [](O& o, V n, V v, G) { o.log_rank = static_cast<int>(to_int(n, v, -1, 1 << 20)); }},
      {"--follow", "", "", "keep printing new lines until the job has ended on every host", kLogs,
       S::kOwn, [](O& o, V n, V v, G) { o.follow = v.empty() || to_bool(n, v); }},
      {"--help", "-h", "", "print the help of the command and exit", kEvery, S::kOwn, nullptr},
      {"--version", "-v", "", "print the version and exit", kEvery, S::kOwn, nullptr},
  };
  return table;
}

const OptionSpec* find_option(const std::string& name) {
  for (const auto& o : option_table())
    if (o.name == name) return &o;
  return nullptr;
}

}  // namespace msrun_ssh
