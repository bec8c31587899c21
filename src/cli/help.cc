#include "msrun_ssh/help.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string_view>

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
constexpr CommandSet kRunCheck = kRun | kCheck;
// Every command that reaches hosts with the SSH options of a run.
constexpr CommandSet kConnecting = kRun | kCheck | kStop | kSync | kStack;
constexpr CommandSet kEvery = kConnecting | kList | kStatus | kLogs;

constexpr size_t kWidth = 100;      // columns of --help
constexpr size_t kTextColumn = 31;  // where an option's text starts in --help

// What a run's exit status means, in the order --help and the man page give them.
struct ExitDoc {
  std::string status;  // "0", "else", ...
  std::string text;
};

const std::vector<ExitDoc>& exit_docs() {
  static const std::vector<ExitDoc> docs{
      {"0", "all processes exited 0"},
      {"else", "the first failed process's status (128+N for signal N)"},
      {"2", "usage or input error"},
      {"255", "a host could not be reached, authenticated or verified, or was lost"},
      {"124", "--timeout passed or --hang_timeout found the job silent"},
      {"254",
       "the end of the job could not be confirmed on a host (the processes named may still run)"},
      {"130/143/129", "interrupted by SIGINT/SIGTERM/SIGHUP (after teardown)"},
  };
  return docs;
}

// `text` in lines of at most `width` columns; the first line is taken to start at column `indent`,
// every next one starts with `indent` spaces. A word longer than a line keeps a line of its own.
std::string wrap(std::string_view text, size_t indent, size_t width) {
  std::string out;
  size_t column = indent;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = std::min(text.find(' ', pos), text.size());
    std::string_view word = text.substr(pos, end - pos);
    if (column > indent && column + 1 + word.size() > width) {
      out += '\n';
      out.append(indent, ' ');
      column = indent;
    } else if (column > indent) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    pos = end + 1;
  }
  return out;
}

bool documented_for(const OptionDoc& d, Command c) { return (d.commands & command_bit(c)) != 0; }

const CommandDoc& command_doc(Command c) {
  const auto& docs = command_docs();
  return *std::find_if(docs.begin(), docs.end(),
                       [c](const CommandDoc& d) { return d.command == c; });
}

const char* section_title(OptionSection s) {
  return s == OptionSection::kMsrun ? "msrun's options" : "msrun-ssh's options";
}

// "  -h, --help FILE" padded to the text column (or followed by a new line when it is too long).
std::string option_label(const OptionDoc& d) {
  std::string label = "  ";
  if (!d.short_name.empty()) label += d.short_name + ", ";
  label += d.name;
  if (!d.metavar.empty()) label += " " + d.metavar;
  if (label.size() < kTextColumn) {
    label.resize(kTextColumn, ' ');
  } else {
    label += '\n';
    label.append(kTextColumn, ' ');
  }
  return label;
}

// "Exit status: 0 all processes exited 0; ...", wrapped between entries only.
std::string exit_status_paragraph() {
  std::string out = "Exit status:";
  size_t column = out.size();
  for (const auto& e : exit_docs()) {
    std::string entry = e.status + " " + e.text;
    entry += &e == &exit_docs().back() ? '.' : ';';
    if (column + 1 + entry.size() > kWidth) {
      out += '\n';
      column = 0;
    } else {
      out += ' ';
      ++column;
    }
    out += entry;
    column += entry.size();
  }
  return out;
}

// ---- roff -----------------------------------------------------------------------------------

bool option_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// "--log_dir" as roff: bold, its dashes minus signs (what a shell needs).
std::string roff_option(std::string_view name) {
  std::string out = "\\fB";
  for (char c : name) {
    if (c == '-') out += '\\';
    out += c;
  }
  return out + "\\fR";
}

// `text` as roff text: backslashes escaped, option names such as --log_dir as roff_option, other
// dashes that start a word ("-1") as minus signs, and no line starting with a control character.
std::string roff(std::string_view text) {
  std::string out;
  bool word_start = true;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (word_start && text.substr(i, 2) == "--" && i + 2 < text.size() &&
        option_char(text[i + 2])) {
      size_t end = i + 2;
      while (end < text.size() && option_char(text[end])) ++end;
      out += roff_option(text.substr(i, end - i));
      i = end - 1;
      word_start = false;
      continue;
    }
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-' && word_start) {
      out += "\\-";
      continue;  // a dash keeps the word's start: "-1", "--"
    } else if ((c == '.' || c == '\'') && (out.empty() || out.back() == '\n')) {
      out += "\\&";
      out += c;
    } else {
      out += c;
    }
    word_start = std::string_view(" \n([\"'/").find(c) != std::string_view::npos;
  }
  return out;
}

std::string command_list(CommandSet set) {
  std::string names;
  for (const auto& c : command_docs())
    if (set & command_bit(c.command)) {
      if (!names.empty()) names += ", ";
      names += c.name;
    }
  return names;
}

CommandSet every_command() {
  CommandSet all = 0;
  for (const auto& c : command_docs()) all |= command_bit(c.command);
  return all;
}

std::string man_option(const OptionDoc& d) {
  std::string tag = d.short_name.empty() ? "" : roff_option(d.short_name) + ", ";
  tag += roff_option(d.name);
  if (!d.metavar.empty()) tag += fmt::format(" \\fI{}\\fR", roff(d.metavar));
  std::string text = roff(d.text);
  if (d.commands != every_command()) text += fmt::format("\n({})", command_list(d.commands));
  return fmt::format(".TP\n{}\n{}\n", tag, text);
}

std::string man_options() {
  std::string out =
      ".SH OPTIONS\nOptions take \\fB\\-\\-name=value\\fR or \\fB\\-\\-name value\\fR;"
      " booleans take True/False. An option used by some commands only names them.\n";
  for (OptionSection s : {OptionSection::kMsrun, OptionSection::kOwn}) {
    out += fmt::format(".SS \"{}\"\n", section_title(s));
    for (const auto& d : option_docs())
      if (d.section == s) out += man_option(d);
  }
  return out;
}

std::string man_synopsis() {
  std::string out = ".SH SYNOPSIS\n.nf\n";
  for (const auto& c : command_docs()) out += roff(c.usage) + "\n";
  return out + ".fi\n";
}

std::string man_commands() {
  std::string out = ".SH COMMANDS\n";
  for (const auto& c : command_docs()) out += fmt::format(".TP\n.B {}\n{}\n", c.name, roff(c.text));
  return out;
}

std::string man_exit_status() {
  std::string out = ".SH EXIT STATUS\nA run exits with:\n";
  for (const auto& e : exit_docs())
    out += fmt::format(".TP\n{}\n{}\n", roff(e.status), roff(e.text));
  return out + ".PP\n.B check\nexits 0 only when every check passes.\n";
}

constexpr std::string_view kManHead =
    R"(.\" Written by msrun-ssh --man from the tables of src/cli/help.cc: edit those, not this.
.TH MSRUN\-SSH 1 "" "msrun\-ssh {}" "User Commands"
.nh
.SH NAME
msrun\-ssh \- start one distributed job on many hosts over SSH, with msrun's environment
)";

constexpr std::string_view kManDescription = R"(.SH DESCRIPTION
.B msrun\-ssh
reads a host file, gives every host a node rank and every process a global rank, picks the
master, connects to every host at once and starts the scheduler and the workers with the
environment MindSpore's
.B msrun
sets (or torchrun's, with \fB\-\-contract torch\fR). Every line the processes print comes back
prefixed on the console and raw in per\-rank log files. When a process fails, the user presses
Ctrl\-C or a host is lost, the job is torn down on every host; a watchdog on each host ends the job
there by itself when the launcher disappears.
)";

constexpr std::string_view kManTail = R"(.SH FILES
.TP
.I ~/.ssh/config
the OpenSSH client configuration read by default (\fB\-\-ssh_config\fR).
.TP
.I ~/.local/state/msrun\-ssh/jobs/
records of the jobs started, one \fIID\fR.json per job (under \fB$XDG_STATE_HOME\fR when it is
set).
.SH ENVIRONMENT
.TP
.B NO_COLOR
when set, the report of \fBcheck\fR has no colours.
.TP
.B XDG_STATE_HOME
where the job records go: \fB$XDG_STATE_HOME\fR/msrun\-ssh/jobs/ (default ~/.local/state).
.TP
.B SLURM_JOB_NODELIST\fR, \fBSLURM_TASKS_PER_NODE\fR, \fBSLURM_NTASKS_PER_NODE
the hosts and workers per host of \fB\-\-hostfile slurm\fR.
.TP
.B PBS_NODEFILE
the file of \fB\-\-hostfile pbs\fR: one host per line, once per slot.
.TP
.B LSB_MCPU_HOSTS
the "host slots" pairs of \fB\-\-hostfile lsf\fR.
.SH SEE ALSO
.BR ssh (1),
.BR ssh_config (5),
.BR numactl (8),
.BR taskset (1);
/usr/share/doc/msrun\-ssh/README.md and the other documents there.
)";

std::string completion_list(Command c) {
  std::string out;
  for (const auto& d : option_docs())
    if (documented_for(d, c))
      out += d.metavar.empty() ? d.name + "\n" : d.name + " " + d.metavar + "\n";
  return out;
}

}  // namespace

const std::vector<OptionDoc>& option_docs() {
  using S = OptionSection;
  static const std::vector<OptionDoc> docs{
      {"--hostfile", "", "FILE|slurm|pbs|lsf|auto",
       "TOML host file (*.toml) or \"host slots=N\" lines; or the hosts of the Slurm, PBS or "
       "LSF allocation it runs in (required)",
       kConnecting, S::kMsrun},
      {"--worker_num", "", "N", "total workers; must equal the host file's sum (default: that sum)",
       kRunCheck, S::kMsrun},
      {"--local_worker_num", "", "N", "workers on hosts whose entry does not say (default 8)",
       kRunCheck, S::kMsrun},
      {"--master_addr", "", "HOST",
       "host that runs the scheduler, by address, name or IP (default: first)", kRunCheck,
       S::kMsrun},
      {"--master_port", "", "P", "scheduler port, 1024-65535 (default 8118)", kRunCheck, S::kMsrun},
      {"--log_dir", "", "DIR",
       "where logs go on this machine, created 0700 (default .); for stack: where its report is "
       "saved",
       kRun | kStack, S::kMsrun},
      {"--join", "", "BOOL", "False: start detached, print a job id and return (default True)",
       kRun, S::kMsrun},
      {"--cluster_time_out", "", "S", "MS_TOPO_TIMEOUT; also bounds start-up (default 600)", kRun,
       S::kMsrun},
      {"--bind_core", "", "BOOL|JSON",
       "True: bind each process to its own cores, NUMA/device-local; or "
       "'{\"scheduler\":[\"0-3\"],\"device0\":[\"4-9\"]}' (default False)",
       kRunCheck, S::kMsrun},
      {"--bind_numa", "", "BOOL|JSON|FILE",
       "numactl --cpunodebind/--membind per process (default False)", kRunCheck, S::kMsrun},
      {"--sim_level", "", "N", "msrun simulation: no scheduler, MS_SIMULATION_LEVEL=N", kRunCheck,
       S::kMsrun},
      {"--sim_rank_id", "", "N", "with --sim_level: run only rank N", kRunCheck, S::kMsrun},
      {"--rank_table_file", "", "PATH", "exported as RANK_TABLE_FILE", kRun, S::kMsrun},
      {"--worker_log_name", "", "T",
       "log name T_<rank>.log; {ip} and {hostname} are replaced (default worker)", kRun, S::kMsrun},
      {"--tail_worker_log", "", "R",
       "ranks shown on the console, e.g. 0,3; -1 all (default -1); logs keep all; what you type "
       "reaches these ranks (pdb)",
       kRun, S::kMsrun},
      {"--node_rank", "", "", "not accepted: node ranks come from the host file", kRun, S::kMsrun},
      {"--dry_run", "", "", "print hosts, ranks, environment, bindings and remote commands; exit 0",
       kRun, S::kOwn},
      {"--ssh_config", "", "FILE", "OpenSSH client config (default ~/.ssh/config)", kConnecting,
       S::kOwn},
      {"--fanout", "", "N", "SSH handshakes in flight at once (default 64)", kConnecting, S::kOwn},
      {"--connect_timeout", "", "S", "per host: connect + authenticate (default 10)", kConnecting,
       S::kOwn},
      {"--ssh_debug", "", "N",
       "libssh's own messages, 0 (none) .. 4 (every function), into msrun-ssh.log, never the "
       "console (default 1: its warnings); check and stop print them on stderr when asked",
       kConnecting, S::kOwn},
      {"--heartbeat", "", "S", "remote processes end within 3x this after losing us (default 5)",
       kRun, S::kOwn},
      {"--kill_grace", "", "S", "SIGTERM -> SIGKILL delay in a teardown (default 5)", kRun | kStop,
       S::kOwn},
      {"--contract", "", "msrun|torch",
       "the processes' environment: msrun's (scheduler, MS_* variables) or torchrun's (RANK, "
       "WORLD_SIZE, MASTER_ADDR, ...; no scheduler); default: the host file's [defaults] "
       "contract, else msrun",
       kRunCheck, S::kOwn},
      {"--timeout", "", "S",
       "the job's wall-time limit: then a teardown and exit 124 (default 0: none)", kRun, S::kOwn},
      {"--hang_timeout", "", "S",
       "no output from any process for S seconds is a hang: reported, then handled as --on_hang "
       "says",
       kRun, S::kOwn},
      {"--on_hang", "", "kill|report",
       "with --hang_timeout: kill (the default): a teardown and exit 124; report: reported again "
       "every S seconds, the job goes on",
       kRun, S::kOwn},
      {"--max_restarts", "", "N",
       "after a failure, tear down and start the whole job again, up to N times (default 0); "
       "MSRUN_SSH_ATTEMPT tells each process its attempt",
       kRun, S::kOwn},
      {"--restart_backoff", "", "S",
       "wait before the first restart, doubled for each next (default 1)", kRun, S::kOwn},
      {"--restart_policy", "", "job|process",
       "job (the default): a failure restarts the whole job; process: a failed worker alone is "
       "started again in place while the others run on (each restart counts against "
       "--max_restarts); every process gets MS_ENABLE_RECOVERY=1 and MS_RECOVERY_PATH",
       kRun, S::kOwn},
      {"--recovery_path", "", "DIR",
       "with --restart_policy process: MS_RECOVERY_PATH is DIR/JOB_ID, DIR relative to each "
       "host's workdir (default msrun-ssh-recovery)",
       kRun, S::kOwn},
      {"--spares", "", "N",
       "the host file's last N hosts are spares (as hosts marked spare = true): they start "
       "nothing; at a restart the first free one replaces a host lost, unreachable or failed "
       "--host_failures_to_exclude times (default 0)",
       kRun, S::kOwn},
      {"--host_failures_to_exclude", "", "K",
       "with spares: a host whose process failed first, or that was lost, in K attempts is "
       "replaced by a spare (default 2)",
       kRun, S::kOwn},
      {"--report_bindings", "", "", "print each process's CPUs / NUMA nodes before starting", kRun,
       S::kOwn},
      {"--output", "", "prefixed|gather",
       "gather: a line that several ranks print within 1 s is printed once, under their rank and "
       "host sets (\"[0-7@node[01-02]] ...\"); logs stay raw (default prefixed: every line with "
       "its own rank@host)",
       kRun, S::kOwn},
      {"--timestamps", "", "", "console lines start with their receive time (UTC, ms)", kRun,
       S::kOwn},
      {"--log_timestamps", "", "",
       "so do the lines of the per-rank log files (they are no longer raw)", kRun, S::kOwn},
      {"--events", "", "FILE",
       "the job's life as JSON Lines (docs/events.md), appended to FILE; \"-\" for stdout; the "
       "summary also goes to <log_dir>/summary.json",
       kRun, S::kOwn},
      {"--strict_host_key_checking", "", "yes|accept-new|no", "(default: ssh config, else yes)",
       kConnecting, S::kOwn},
      {"--transport", "", "ssh|srun",
       "how commands reach the hosts: ssh (default), or srun inside a Slurm allocation: every "
       "command a job step on its host (the host's address is its node name; needs SLURM_JOB_ID "
       "and srun on PATH)",
       kConnecting, S::kOwn},
      {"--env", "", "NAME[=VALUE]",
       "set, or forward from here, a variable for every process (repeatable)", kRunCheck, S::kOwn},
      {"--python", "", "PATH", "interpreter for .py scripts (default: host file, else python3)",
       kRunCheck, S::kOwn},
      {"--agent", "", "BOOL|auto",
       "True: one launch agent per host starts its processes, so each host runs its login rc once; "
       "False: one SSH channel per process; auto: the agent on hosts with 2 or more processes "
       "(default auto)",
       kRun, S::kOwn},
      {"--quiet", "", "",
       "no start-up progress on the terminal (it is only ever drawn on a terminal's stderr, never "
       "in logs or pipes)",
       kRun, S::kOwn},
      {"--status_line", "", "",
       "while the job runs, its state on the terminal's last row: processes running/exited/failed, "
       "output rate, elapsed time",
       kRun, S::kOwn},
      {"--sync", "", "[=DIR]",
       "before starting, make DIR (default: the task script's directory) on every host identical "
       "to this one's (docs/sync.md); for check: report per host whether it is in sync",
       kRunCheck, S::kOwn},
      {"--sync_dest", "", "DEST", "where DIR goes on the hosts (relative: to each workdir)", kRun,
       S::kOwn},
      {"--sync_exclude", "", "PATTERN",
       "leave out what PATTERN matches (gitignore syntax; repeatable)", kRun | kCheck | kSync,
       S::kOwn},
      {"--persist", "", "SECONDS",
       "keep the connections open that long after the sync, in a process of their own, for the "
       "next sync to the same hosts (as ssh's ControlPersist; docs/sync.md) "
       "(default 0: not kept)",
       kSync, S::kOwn},
      {"--import", "", "MODULE",
       "check that MODULE imports with the hosts' interpreter (repeatable)", kCheck, S::kOwn},
      {"--net", "", "[=collective]",
       "also measure TCP bandwidth (both ways) and RTT between hosts, in rounds of pairs, over the "
       "address each host uses to reach the master (or its *_SOCKET_IFNAME); a host below "
       "--net_min_ratio of the median fails. --net=collective (or --net collective): then one tiny "
       "all-reduce, timed, through the job's own launch path: scheduler and workers started as a "
       "run starts them, each running a small Python program with the run's interpreter (an "
       "\"allreduce\" column)",
       kCheck, S::kOwn},
      {"--net_pairs", "", "all|ring",
       "which pairs --net tests: all (N-1 rounds) or a ring (2-3 rounds) (default: all up to 8 "
       "hosts, a ring above)",
       kCheck, S::kOwn},
      {"--net_seconds", "", "S", "--net's sending time per direction of each pair (default 1)",
       kCheck, S::kOwn},
      {"--net_min_ratio", "", "R",
       "fraction of the median rate below which a host or link fails --net (default 0.5)", kCheck,
       S::kOwn},
      {"--json", "", "", "print the report as JSON instead of a table", kCheck | kList | kStatus,
       S::kOwn},
      {"--job", "", "ID",
       "the job id a run printed (required; see msrun-ssh list); stop and stack without --hostfile "
       "take the hosts from the job's record",
       kStop | kStatus | kLogs | kStack, S::kOwn},
      {"--rank", "", "R", "only the log of rank R (-1: the scheduler)", kLogs, S::kOwn},
      {"--follow", "", "", "keep printing new lines until the job has ended on every host", kLogs,
       S::kOwn},
      {"--help", "-h", "", "print the help of the command and exit", kEvery, S::kOwn},
      {"--version", "-v", "", "print the version and exit", kEvery, S::kOwn},
  };
  return docs;
}

const std::vector<CommandDoc>& command_docs() {
  static const std::vector<CommandDoc> docs{
      {Command::kRun, "run", "msrun-ssh [OPTIONS] --hostfile FILE TASK_SCRIPT [TASK_ARGS...]",
       "Start one distributed job on every host of FILE over SSH, with msrun's environment "
       "(MS_SCHED_HOST, MS_WORKER_NUM, RANK_ID, ...). Node ranks follow the host file; every line "
       "of every process comes back prefixed, and per-rank logs are written to --log_dir. Options "
       "take \"--name=value\" or \"--name value\"; booleans take True/False. Everything after "
       "TASK_SCRIPT belongs to the task."},
      {Command::kCheck, "check",
       "msrun-ssh check [OPTIONS] --hostfile FILE [TASK_SCRIPT] [--import MODULE]... [--json]",
       "Cluster acceptance report: checks every host concurrently (reachable, authenticated, host "
       "key, OS/kernel, CPUs, NUMA, devices, python and modules, script checksum, workdir, clock, "
       "disk, master port) and prints a table, or JSON with --json. Exit 0 only when every check "
       "passes. The options of a run apply where they make sense."},
      {Command::kStop, "stop", "msrun-ssh stop [OPTIONS] [--hostfile FILE] --job ID",
       "End a detached job (one started with --join=False) on every host of FILE: SIGTERM, then "
       "SIGKILL after --kill_grace seconds, to every process marked with the job id, grandchildren "
       "included. Prints what it killed on each host. The SSH options of a run apply. Without "
       "--hostfile, the hosts and SSH options come from the job's record (see msrun-ssh list)."},
      {Command::kList, "list", "msrun-ssh list [--json]",
       "Every job this user started (records in "
       "${XDG_STATE_HOME:-~/.local/state}/msrun-ssh/jobs/), "
       "newest first: id, start time, hosts, processes and state. A detached job's state comes "
       "from its hosts."},
      {Command::kStatus, "status", "msrun-ssh status --job ID [--json]",
       "Every process of a detached job: host, rank, pid, alive / exited / killed, CPU time, last "
       "line of its log. Exit 0 when every host answered, 255 when one could not be reached."},
      {Command::kLogs, "logs", "msrun-ssh logs --job ID [--rank R] [--follow]",
       "The per-rank logs of a detached job, from its hosts, each line prefixed as in an attached "
       "run ([3@host]). --follow keeps printing new lines until the job has ended on every host; "
       "Ctrl-C ends it."},
      {Command::kStack, "stack", "msrun-ssh stack [OPTIONS] [--hostfile FILE] --job ID",
       "Show where every process of a running job is, without stopping it: per host, each "
       "process's rank, pid, state and wait channel (/proc), then the Python stack of every thread "
       "(its Python processes dump them on SIGUSR2, see docs/hangs-and-stacks.md), else a "
       "native backtrace where gdb is installed; identical stacks of many ranks are shown once "
       "under their rank set. The report is also saved as <log_dir>/stacks-<time>.txt. Exit 0 when "
       "every host answered, 255 when one did not. Without --hostfile, the hosts and SSH options "
       "come from the job's record. In an attached run, Ctrl-\\ (SIGQUIT) prints the same report "
       "and the job goes on."},
      {Command::kSync, "sync", "msrun-ssh sync [OPTIONS] --hostfile FILE DIR [DEST]",
       "Make DEST on every host of FILE identical to DIR here, sending only what differs "
       "(docs/sync.md). DEST: each host's workdir joined with DIR's path relative to the current "
       "directory, unless given (relative: to each workdir). Excludes: __pycache__/, .git/, *.pyc, "
       "DIR/.msrunignore (gitignore syntax) and --sync_exclude. Prints one line per host; exit 0, "
       "255 when a host failed, 2 for input errors. The SSH options of a run apply."},
  };
  return docs;
}

std::string help_text(Command command) {
  const CommandDoc& doc = command_doc(command);
  std::string out = fmt::format("usage: {}\n", doc.usage);
  if (command == Command::kRun)
    for (const auto& other : command_docs())
      if (other.command != command) out += fmt::format("       {}\n", other.usage);
  out += fmt::format("\n{}\n", wrap(doc.text, 0, kWidth));
  for (OptionSection s : {OptionSection::kMsrun, OptionSection::kOwn}) {
    std::string options;
    for (const auto& d : option_docs())
      if (d.section == s && documented_for(d, command))
        options += option_label(d) + wrap(d.text, kTextColumn, kWidth) + "\n";
    if (!options.empty()) out += fmt::format("\n{}:\n{}", section_title(s), options);
  }
  if (command == Command::kRun) out += fmt::format("\n{}\n", exit_status_paragraph());
  return out;
}

std::string man_page() {
  return fmt::format(kManHead, MSRUN_SSH_VERSION) + man_synopsis() + std::string(kManDescription) +
         man_commands() + man_options() + man_exit_status() + std::string(kManTail);
}

std::optional<std::string> hidden_output(const std::vector<std::string>& args) {
  if (args.size() == 1 && args[0] == "--man") return man_page();
  if (args.empty() || args[0] != "--complete-options") return std::nullopt;
  if (args.size() == 1) return completion_list(Command::kRun);
  const auto& docs = command_docs();
  auto it = std::find_if(docs.begin(), docs.end(),
                         [&args](const CommandDoc& d) { return d.name == args[1]; });
  if (args.size() > 2 || it == docs.end())
    throw InputError(fmt::format("--complete-options: no command \"{}\"", args.back()));
  return completion_list(it->command);
}

}  // namespace msrun_ssh
