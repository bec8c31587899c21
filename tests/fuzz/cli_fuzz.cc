// Fuzzes parse_args (src/cli/cli.cc): the input split on NUL bytes is argv[1..]; the launcher's
// environment is empty (getenv always returns nullptr). Inputs with a word containing ".json" are
// skipped: --bind_numa would read such a file.
//
// Findings: any crash or sanitizer report; any exception other than InputError; an empty error
// message; a successful run whose Options break what cli.h / options.h promise (required options
// present, values within the ranges the options document, TASK_ARGS exactly the words after
// TASK_SCRIPT, command-only options only there, a host file unless the command reads a job record).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "msrun_ssh/cli.h"
#include "msrun_ssh/error.h"

namespace {

using msrun_ssh::Command;
using msrun_ssh::Options;

std::vector<std::string> split_words(std::string_view input) {
  std::vector<std::string> words;
  if (input.empty()) return words;
  size_t start = 0;
  while (true) {
    size_t nul = input.find('\0', start);
    words.emplace_back(input.substr(start, nul == input.npos ? input.npos : nul - start));
    if (nul == input.npos) break;
    start = nul + 1;
  }
  return words;
}

bool valid_env_name(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name)
    if (!(c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
      return false;
  return true;
}

void check_options(const std::vector<std::string>& args, const Options& o) {
  // list, status, logs, top, `stop --job` and `stack --job` work from a job record; everything
  // else needs a host file.
  bool from_record =
      o.command == Command::kList || o.command == Command::kStatus || o.command == Command::kLogs ||
      o.command == Command::kTop ||
      ((o.command == Command::kStop || o.command == Command::kStack) && !o.job.empty());
  FUZZ_CHECK(from_record || !o.hostfile.empty(), "no --hostfile");
  if (o.command == Command::kRun) {
    FUZZ_CHECK(!o.task_script.empty(), "run without TASK_SCRIPT");
    // TASK_SCRIPT and TASK_ARGS are the tail of argv, verbatim.
    FUZZ_CHECK(o.task_args.size() + 1 <= args.size(), "more task args than words");
    size_t at = args.size() - o.task_args.size() - 1;
    FUZZ_CHECK(args[at] == o.task_script, "TASK_SCRIPT \"%s\" is not word %zu \"%s\"",
               o.task_script.c_str(), at, args[at].c_str());
    for (size_t i = 0; i < o.task_args.size(); ++i)
      FUZZ_CHECK(args[at + 1 + i] == o.task_args[i], "task arg %zu changed", i);
    FUZZ_CHECK(o.task_script == "-" || o.task_script[0] != '-' || o.task_script.size() < 2,
               "an option word became TASK_SCRIPT: \"%s\"", o.task_script.c_str());
  } else if (o.command == Command::kCheck) {
    // check: after TASK_SCRIPT and check's own options, the task's words are argv's tail.
    FUZZ_CHECK(o.task_args.empty() || !o.task_script.empty(), "task args without TASK_SCRIPT");
    FUZZ_CHECK(o.task_args.size() < args.size(), "more task args than words");
    for (size_t i = 0; i < o.task_args.size(); ++i)
      FUZZ_CHECK(args[args.size() - o.task_args.size() + i] == o.task_args[i],
                 "check's task arg %zu is not argv's tail", i);
  } else {
    FUZZ_CHECK(o.task_args.empty(), "task args outside a run");
  }
  bool job_command = o.command == Command::kStop || o.command == Command::kStatus ||
                     o.command == Command::kLogs || o.command == Command::kStack;
  if (job_command)
    FUZZ_CHECK(!o.job.empty() && o.task_script.empty(), "%s without --job or with a script",
               args.empty() ? "" : args[0].c_str());
  if (o.command != Command::kCheck) FUZZ_CHECK(o.imports.empty(), "--import outside check");
  if (o.command != Command::kCheck && o.command != Command::kList && o.command != Command::kStatus)
    FUZZ_CHECK(!o.json, "--json outside check, list and status");
  if (!job_command && o.command != Command::kTop)  // (top takes --job, and works without it)
    FUZZ_CHECK(o.job.empty(), "--job outside stop, status, logs, stack and top");
  for (char c : o.job)
    FUZZ_CHECK((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '-', "job \"%s\"",
               o.job.c_str());
  if (o.worker_num) FUZZ_CHECK(*o.worker_num >= 1 && *o.worker_num <= (1 << 20), "worker_num");
  FUZZ_CHECK(o.local_worker_num >= 0 && o.local_worker_num <= 1024, "local_worker_num %d",
             o.local_worker_num);
  FUZZ_CHECK(o.master_port >= 1024 && o.master_port <= 65535, "master_port %d", o.master_port);
  FUZZ_CHECK(!o.log_dir.empty(), "empty log_dir");
  FUZZ_CHECK(o.cluster_time_out >= 1 && o.cluster_time_out <= 86400 * 7, "cluster_time_out %d",
             o.cluster_time_out);
  FUZZ_CHECK(o.sim_level >= -1 && o.sim_level <= 1000, "sim_level %d", o.sim_level);
  FUZZ_CHECK(o.sim_rank_id >= -1 && o.sim_rank_id <= (1 << 20), "sim_rank_id %d", o.sim_rank_id);
  FUZZ_CHECK(!o.worker_log_name.empty() && o.worker_log_name.find('/') == std::string::npos,
             "worker_log_name \"%s\"", o.worker_log_name.c_str());
  for (int r : o.tail_worker_log) FUZZ_CHECK(r >= 0 && r <= (1 << 20), "tail rank %d", r);
  FUZZ_CHECK(o.fanout >= 1 && o.fanout <= 4096, "fanout %d", o.fanout);
  FUZZ_CHECK(
      std::isfinite(o.connect_timeout) && o.connect_timeout >= 0.1 && o.connect_timeout <= 3600,
      "connect_timeout %g", o.connect_timeout);
  FUZZ_CHECK(std::isfinite(o.heartbeat) && o.heartbeat >= 0.2 && o.heartbeat <= 3600,
             "heartbeat %g", o.heartbeat);
  FUZZ_CHECK(std::isfinite(o.kill_grace) && o.kill_grace >= 0 && o.kill_grace <= 3600,
             "kill_grace %g", o.kill_grace);
  std::set<std::string> names;
  for (const auto& [name, value] : o.env) {
    FUZZ_CHECK(valid_env_name(name), "env name \"%s\"", name.c_str());
    FUZZ_CHECK(value.find('\0') == std::string::npos, "NUL in env value");
    FUZZ_CHECK(names.insert(name).second, "env %s twice", name.c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args = split_words(input);
  for (const auto& a : args)
    if (a.find(".json") != std::string::npos) return 0;
  auto no_env = [](const char*) -> const char* { return nullptr; };
  try {
    msrun_ssh::CliResult result = msrun_ssh::parse_args(args, no_env);
    if (result.action == msrun_ssh::CliAction::kRun) check_options(args, result.options);
  } catch (const msrun_ssh::InputError& e) {
    FUZZ_CHECK(e.what()[0] != '\0', "empty InputError message");
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "unexpected exception: %s", e.what());
  }
  return 0;
}
