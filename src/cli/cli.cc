#include "msrun_ssh/cli.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <vector>

#include "msrun_ssh/error.h"
#include "msrun_ssh/option_table.h"
#include "msrun_ssh/process.h"

namespace msrun_ssh {
namespace {

// The subcommands, by the word that names them.
constexpr std::pair<const char*, Command> kSubcommands[] = {
    {"check", Command::kCheck},   {"stop", Command::kStop}, {"list", Command::kList},
    {"status", Command::kStatus}, {"logs", Command::kLogs}, {"sync", Command::kSync},
    {"stack", Command::kStack},   {"top", Command::kTop}};

const char* command_name(Command c) {
  for (const auto& [word, command] : kSubcommands)
    if (command == c) return word;
  return "run";
}

// The edit distance of `a` and `b` (insertions, deletions, substitutions), '-' and '_' alike.
size_t distance(std::string_view a, std::string_view b) {
  auto same = [](char x, char y) {
    return x == y || ((x == '-' || x == '_') && (y == '-' || y == '_'));
  };
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] =
          std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same(a[i - 1], b[j - 1]) ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// " (did you mean X?)" for the closest of `words` within 2 edits of `word`, else "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& words) {
  std::string best;
  size_t best_distance = 3;
  for (const auto& w : words)
    if (size_t d = distance(word, w); d < best_distance) {
      best = w;
      best_distance = d;
    }
  return best.empty() ? "" : fmt::format(" (did you mean {}?)", best);
}

// True/False/true/false/1/0: the words a boolean takes.
bool is_bool_word(const std::string& word) {
  bool ignored = false;
  return parse_bool_word(word, ignored);
}

// The job subcommands (docs/jobs.md) work from a job record: no host file needed.
bool from_record(const Options& o) {
  return o.command == Command::kList || o.command == Command::kStatus ||
         o.command == Command::kLogs || o.command == Command::kTop ||
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
      if (o.command != Command::kCheck)
        throw InputError(
            fmt::format("{}: unexpected argument \"{}\"", command_name(o.command), arg));
      if (!o.task_script.empty()) {  // a run's line with `check` in front: the task's words
        o.task_args.assign(args.begin() + static_cast<long>(i), args.end());
        break;
      }
      o.task_script = arg;
      continue;
    }
    if (arg == "--") throw InputError("\"--\": put TASK_SCRIPT first, then its arguments");
    size_t eq = arg.find('=');
    std::string name = arg.substr(0, eq);
    const OptionSpec* spec = find_option(name);
    if (!spec && name.starts_with("--") && name.size() > 2) {
      // An unambiguous prefix of an option this command takes ("--local_worker=2"), as msrun's
      // argparse reads one.
      std::vector<const OptionSpec*> matches;
      for (const auto& other : option_table())
        if (other.apply && other.taken_by(o.command) && other.name.starts_with(name))
          matches.push_back(&other);
      if (matches.size() > 1) {
        std::vector<std::string> names;
        names.reserve(matches.size());
        for (const auto* m : matches) names.push_back(m->name);
        throw InputError(fmt::format("ambiguous option \"{}\" for {}: it begins {}", name,
                                     command_name(o.command), fmt::join(names, ", ")));
      }
      if (matches.size() == 1) {
        spec = matches[0];
        name = spec->name;
      }
    }
    if (!spec && o.command == Command::kCheck && !o.task_script.empty()) {
      // check keeps reading its own options after TASK_SCRIPT (`check train.py --import x`);
      // from the first word that is none, the rest is the task's, as in the run's line.
      o.task_args.assign(args.begin() + static_cast<long>(i), args.end());
      break;
    }
    if (!spec || !spec->apply || !spec->taken_by(o.command)) {
      std::vector<std::string> names;
      for (const auto& other : option_table())
        if (other.apply && other.taken_by(o.command)) names.push_back(other.name);
      throw InputError(fmt::format("unknown option \"{}\" for {}{} (see --help)", name,
                                   command_name(o.command), spec ? "" : did_you_mean(name, names)));
    }
    std::string value;
    const std::string* after = i + 1 < args.size() ? &args[i + 1] : nullptr;
    // `--net collective`, `--dry_run False`: a value, not TASK_SCRIPT (a flag takes a boolean
    // word after it, as msrun's booleans take theirs).
    bool flag = spec->metavar.empty() || spec->metavar == "[True|False]";
    bool optional_value =
        after && ((name == "--net" && (*after == "collective" || is_bool_word(*after))) ||
                  (flag && is_bool_word(*after)));
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (optional_value) {
      value = args[++i];
    } else if (spec->takes_value()) {
      if (i + 1 >= args.size()) throw InputError(fmt::format("{}: expects a value", name));
      // "--log_dir --quiet": the value was forgotten; taking the option as it would lose both.
      const std::string& next = args[i + 1];
      if (next.starts_with("--") && find_option(next.substr(0, next.find('='))))
        throw InputError(fmt::format(
            "{}: expects a value, but the next word is the option {} (a value that starts so "
            "goes as {}=VALUE)",
            name, next, name));
      value = args[++i];
    }
    spec->apply(o, name, value, getenv);
  }
  if ((o.command == Command::kStop || o.command == Command::kStatus ||
       o.command == Command::kLogs || o.command == Command::kStack) &&
      o.job.empty())
    throw InputError(fmt::format("{}: --job ID is required", command_name(o.command)));
  if (o.hostfile.empty() && !from_record(o)) {
    // "msrun-ssh chek --hostfile h": the misspelt command became TASK_SCRIPT, the rest its words.
    std::vector<std::string> commands;
    for (const auto& [word, command] : kSubcommands) commands.emplace_back(word);
    std::string hint = o.command == Command::kRun && !o.task_script.empty()
                           ? did_you_mean(o.task_script, commands)
                           : "";
    if (!hint.empty())
      throw InputError(fmt::format(
          "run: --hostfile is required; \"{}\" was taken as TASK_SCRIPT and every word after it "
          "as its own{}",
          o.task_script, hint.substr(0, hint.size() - 2) + ", a command?)"));
    throw InputError(fmt::format("{}: --hostfile is required", command_name(o.command)));
  }
  if (o.command == Command::kRun && o.task_script.empty())
    throw InputError(
        "TASK_SCRIPT is required: msrun-ssh [OPTIONS] --hostfile FILE TASK_SCRIPT ...");
  if (o.command == Command::kSync && o.sync_dir.empty())
    throw InputError("sync: DIR is required: msrun-ssh sync --hostfile FILE DIR [DEST]");
  if (o.command == Command::kCheck && o.sync && o.sync_dir.empty() && o.task_script.empty())
    throw InputError("check --sync: give TASK_SCRIPT (its directory is synced) or --sync=DIR");
  // Slurm ends what a step started once the step's command ends: a detached process would go with
  // the start's step (or the agent's, at the launcher's exit).
  if (!o.join && o.transport == TransportKind::kSrun)
    throw InputError(
        "--join=False needs --transport ssh: under --transport srun, Slurm ends a detached "
        "process with the job step that started it");
  if (o.transport == TransportKind::kSrun)
    if (std::string why = srun_unavailable(getenv); !why.empty()) throw InputError(why);
  // A detached job has no launcher left to restart it or to watch its clock.
  if (!o.join && (o.max_restarts > 0 || o.timeout > 0 || o.hang_timeout > 0))
    throw InputError(
        "--max_restarts, --timeout and --hang_timeout need an attached run (--join=True)");
  if (!o.join && o.restart_policy == RestartPolicy::kProcess)
    throw InputError("--restart_policy process needs an attached run (--join=True)");
  // The events are the launcher's account of the job's life; a detached start leaves at once.
  if (!o.join && !o.events.empty())
    throw InputError(
        "--events needs an attached run (--join=True): a detached job has no launcher to write "
        "them (msrun-ssh status --job ID --json tells how it is doing)");
  return result;
}

}  // namespace msrun_ssh
