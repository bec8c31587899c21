// `msrun-ssh check --net=collective`: one all-reduce through the run's own launch path (see
// check.h for the job and the verdict rules).
#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "msrun_ssh/base.h"
#include "msrun_ssh/check.h"
#include "msrun_ssh/error.h"
#include "remote/programs.h"

namespace msrun_ssh {
namespace {

// The value of "key=" in a line of allreduce.py ("" when absent).
std::string field(std::string_view line, std::string_view key) {
  size_t pos = line.find(fmt::format(" {}=", key));
  if (pos == std::string_view::npos) return "";
  size_t start = pos + key.size() + 2;
  return std::string(line.substr(start, line.find(' ', start) - start));
}

// The "seconds=" of the rank's "allreduce ok rank=R world=W seconds=S" line in its own log.
std::optional<double> ok_seconds(std::string_view log) {
  for (std::string_view line : split_lines(log)) {
    if (!line.starts_with("allreduce ok ")) continue;
    std::string seconds = field(line, "seconds");
    char* end = nullptr;
    double s = std::strtod(seconds.c_str(), &end);
    if (!seconds.empty() && !*end) return s;
  }
  return std::nullopt;
}

void read_summary(const nlohmann::json& doc, CollectiveResult& r) {
  r.cause = doc.value("cause", "");
  if (auto root = doc.find("root_cause"); root != doc.end() && root->is_object()) {
    r.failed_process =
        fmt::format("{} on {}", root->value("process", "?"), root->value("host", "?"));
    r.failed_hosts.push_back(root->value("host", ""));
    if (auto last = root->find("last_lines"); last != root->end() && last->is_array())
      for (const auto& l : *last)
        if (l.is_string()) r.last_lines.push_back(l.get<std::string>());
  }
  // The first failure is the one to name: ranks that failed after it (a peer gone) are its echo.
  if (!r.failed_hosts.empty()) return;
  if (auto procs = doc.find("processes"); procs != doc.end() && procs->is_array())
    for (const auto& p : *procs) {
      std::string host = p.value("host", "");
      if (p.value("failed", false) && !p.value("torn_down", false) &&
          std::find(r.failed_hosts.begin(), r.failed_hosts.end(), host) == r.failed_hosts.end())
        r.failed_hosts.push_back(host);
    }
}

// "; last lines: a | b | c" (the last three), or "".
std::string last_lines_text(const std::vector<std::string>& lines) {
  if (lines.empty()) return "";
  size_t from = lines.size() > 3 ? lines.size() - 3 : 0;
  std::vector<std::string> tail(lines.begin() + static_cast<long>(from), lines.end());
  return fmt::format("; last lines: {}", fmt::join(tail, " | "));
}

std::string failure_detail(const CollectiveResult& r) {
  std::string what = !r.cause.empty()            ? r.cause
                     : !r.failed_process.empty() ? r.failed_process + " failed"
                                                 : "no reason given";
  return fmt::format("the all-reduce failed (exit status {}): {}{}{}", r.status, what,
                     last_lines_text(r.last_lines),
                     r.log_dir.empty() ? "" : fmt::format("; logs in {}", r.log_dir));
}

std::string temp_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = fmt::format("{}/msrun-ssh-allreduce-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!::mkdtemp(pattern.data()))
    throw InputError(
        fmt::format("cannot create a directory like {}: {}", pattern, std::strerror(errno)));
  return pattern;
}

CollectiveResult run_collective(const CollectiveJob& job, const JobLauncher& launch) {
  Options options = job.options;
  Plan plan = job.plan;
  std::string console = options.log_dir + "/console.log";
  const std::string& dir = options.log_dir;
  auto start = std::chrono::steady_clock::now();
  int status = 0;
  std::string thrown;
  try {
    status = launch(options, plan, console);
  } catch (const std::exception& e) {
    status = kExitUsage;
    thrown = e.what();
  }
  std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  CollectiveResult r = collective_result(
      status, took.count(), read_whole_file(options.events).value_or(""),
      [&](const std::string& log) { return read_whole_file(dir + "/" + log).value_or(""); });
  if (!thrown.empty()) r.cause = thrown;
  r.log_dir = options.log_dir;
  if (status == 0) {
    std::error_code ec;
    std::filesystem::remove_all(r.log_dir, ec);
    r.log_dir.clear();
  }
  return r;
}

}  // namespace

CollectiveJob collective_job(const Options& options, const Plan& plan,
                             const std::vector<HostExpectation>& es, const std::string& log_dir) {
  CollectiveJob job{options, plan, ""};
  job.options.log_dir = log_dir;
  if (options.sim_level >= 0) {
    job.skip = "not run: a simulated job (--sim_level) starts no scheduler";
    return job;
  }
  for (const auto& e : es)
    if (e.python != es.front().python)
      job.skip = fmt::format(
          "not run: the hosts use different interpreters ({} on {}, {} on {}); --python chooses "
          "one",
          es.front().python, es.front().address, e.python, e.address);
  if (es.empty() || !job.skip.empty()) return job;
  double limit = 3 * options.connect_timeout + 20;
  Options& o = job.options;
  o.task_script = es.front().python;
  o.task_args = {"-c", std::string(remote::kAllreducePy), fmt::format("{:g}", limit)};
  o.join = true;
  o.events = log_dir + "/events.jsonl";
  o.tail_worker_log.clear();
  o.max_restarts = 0;
  o.timeout = limit + 15;
  o.hang_timeout = 0;
  // check --sync compares the trees and writes nothing: the all-reduce must not sync them (its
  // task script, the interpreter, would make the launcher's cwd every workdir's tree).
  o.sync = false;
  o.output_gather = o.timestamps = o.log_timestamps = o.report_bindings = false;
  for (auto& hp : job.plan.hosts)
    for (auto& p : hp.processes) p.argv = process_argv(p, o, hp);
  return job;
}

CollectiveResult collective_result(int status, double seconds, const std::string& events,
                                   const std::function<std::string(const std::string&)>& read_log) {
  CollectiveResult r;
  r.ran = true;
  r.status = status;
  r.seconds = seconds;
  std::string start_failed;
  std::map<int, std::string> logs;  // rank -> its log file
  for (std::string_view line : split_lines(events)) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (!e.is_object()) continue;
    std::string type = e.value("type", "");
    if (type == "summary") {
      r = CollectiveResult{true, status, seconds};
      read_summary(e, r);
    } else if (type == "start_failed") {
      start_failed = e.value("reason", "");
    } else if (type == "process_started" && e.contains("rank") && e["rank"].is_number_integer()) {
      logs[e["rank"].get<int>()] = e.value("log", "");
    }
  }
  for (const auto& [rank, log] : logs)
    if (auto s = log.empty() ? std::nullopt : ok_seconds(read_log(log))) r.rank_seconds[rank] = *s;
  if (status != 0 && r.cause.empty())
    r.cause = start_failed.empty() ? fmt::format("exit status {}", status) : start_failed;
  return r;
}

void evaluate_collective(const CollectiveResult& r, CheckReport& report) {
  // A failure on hosts the report does not name (it names them as the run does: never, unless
  // those two drift apart) fails every host rather than none.
  bool named = std::any_of(report.hosts.begin(), report.hosts.end(), [&](const HostReport& h) {
    return std::find(r.failed_hosts.begin(), r.failed_hosts.end(), h.address) !=
           r.failed_hosts.end();
  });
  for (auto& h : report.hosts) {
    if (!r.ran) {
      h.set("allreduce", CheckStatus::kSkip, r.cause);
    } else if (r.status == 0) {
      h.set("allreduce", CheckStatus::kPass,
            fmt::format("{} ranks summed 4 floats through the job's launch path in {:.1f} s",
                        r.rank_seconds.size(), r.seconds),
            fmt::format("{:.1f} s", r.seconds));
    } else if (!named || std::find(r.failed_hosts.begin(), r.failed_hosts.end(), h.address) !=
                             r.failed_hosts.end()) {
      h.set("allreduce", CheckStatus::kFail, failure_detail(r));
    } else {
      h.set("allreduce", CheckStatus::kSkip,
            fmt::format("nothing failed here; the all-reduce failed on {}",
                        fmt::join(r.failed_hosts, ", ")));
    }
  }
}

void check_collective(const Options& options, const Plan& plan,
                      const std::vector<HostExpectation>& es, bool all_connected,
                      const JobLauncher& launch, CheckReport& report) {
  CollectiveResult r;
  if (!all_connected) {
    r.cause = "not run: a host is not connected (a job would not start)";
  } else {
    CollectiveJob job = collective_job(options, plan, es, temp_dir());
    if (job.skip.empty()) {
      r = run_collective(job, launch);
    } else {
      r.cause = job.skip;
      std::filesystem::remove(job.options.log_dir);
    }
  }
  evaluate_collective(r, report);
  report.collective = std::move(r);
}

}  // namespace msrun_ssh
