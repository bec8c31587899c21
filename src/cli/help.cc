#include "msrun_ssh/help.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string_view>

#include "msrun_ssh/error.h"

namespace msrun_ssh {
namespace {

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

const CommandDoc& command_doc(Command c) {
  const auto& docs = command_docs();
  return *std::find_if(docs.begin(), docs.end(),
                       [c](const CommandDoc& d) { return d.command == c; });
}

const char* section_title(OptionSection s) {
  return s == OptionSection::kMsrun ? "msrun's options" : "msrun-ssh's options";
}

// "  -h, --help FILE" padded to the text column (or followed by a new line when it is too long).
std::string option_label(const OptionSpec& d) {
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

std::string man_option(const OptionSpec& d) {
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
    for (const auto& d : option_table())
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
  for (const auto& d : option_table())
    if (d.taken_by(c)) out += d.metavar.empty() ? d.name + "\n" : d.name + " " + d.metavar + "\n";
  return out;
}

}  // namespace

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
      {Command::kStatus, "status", "msrun-ssh status [OPTIONS] --job ID [--json]",
       "Every process of a detached job: host, rank, pid, alive / exited / killed, CPU time, last "
       "line of its log. Exit 0 when every host answered, 255 when one could not be reached."},
      {Command::kLogs, "logs", "msrun-ssh logs [OPTIONS] --job ID [--rank R] [--follow]",
       "The per-rank logs of a detached job, from its hosts, each line prefixed as in an attached "
       "run ([3@host]). --follow keeps printing new lines until the job has ended on every host; "
       "Ctrl-C ends it."},
      {Command::kTop, "top", "msrun-ssh top [--job ID] [--once]",
       "Watch a running job from another terminal, refreshed each second: per host CPU%, "
       "steal, load, free memory and whether it is a straggler; per rank CPU%, run-queue wait, "
       "CPU-quota throttling, RSS, state, lines per second, age of its last line, its step and "
       "step rate (from its output: --progress_regex). Without --job: the newest job whose "
       "launcher runs here. A detached job is watched over connections of top's own (no output "
       "columns). --once prints one screen. Ctrl-C ends it; it ends when the job does."},
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
    for (const auto& d : option_table())
      if (d.section == s && d.taken_by(command))
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
