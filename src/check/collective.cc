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

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out = split_lines(text);
  for (std::string_view& line : out)
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return out;
}

void read_console(const std::string& console, CollectiveResult& r, std::string& last_message) {
  for (std::string_view line : lines_of(console)) {
    if (line.rfind("msrun-ssh: ", 0) == 0) last_message = line.substr(11);
    size_t at = line.find("allreduce ok rank=");
    if (at == std::string_view::npos) continue;
    std::string_view ok = line.substr(at + 12);  // " rank=R world=W seconds=S"
    char* end = nullptr;
    std::string rank = field(ok, "rank"), seconds = field(ok, "seconds");
    long n = std::strtol(rank.c_str(), &end, 10);
    if (rank.empty() || *end) continue;
    double s = std::strtod(seconds.c_str(), &end);
    if (!seconds.empty() && !*end) r.rank_seconds[static_cast<int>(n)] = s;
  }
}

void read_summary(const std::string& text, CollectiveResult& r) {
  auto doc = nlohmann::json::parse(text, nullptr, false);
  if (!doc.is_object()) return;
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

std::string slurp(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return "";
  std::string out;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  std::fclose(f);
  return out;
}

CollectiveResult run_collective(const CollectiveJob& job, const JobLauncher& launch) {
  Options options = job.options;
  Plan plan = job.plan;
  std::string console = options.log_dir + "/console.log";
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
  CollectiveResult r = collective_result(status, took.count(),
                                         slurp(options.log_dir + "/summary.json"), slurp(console));
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
  o.events.clear();
  o.tail_worker_log.clear();
  o.max_restarts = 0;
  o.timeout = limit + 15;
  o.hang_timeout = 0;
  o.output_gather = o.timestamps = o.log_timestamps = o.report_bindings = false;
  for (auto& hp : job.plan.hosts)
    for (auto& p : hp.processes) p.argv = process_argv(p, o, hp);
  return job;
}

CollectiveResult collective_result(int status, double seconds, const std::string& summary_json,
                                   const std::string& console) {
  CollectiveResult r;
  r.ran = true;
  r.status = status;
  r.seconds = seconds;
  std::string last_message;
  read_console(console, r, last_message);
  read_summary(summary_json, r);
  if (status != 0 && r.cause.empty())
    r.cause = last_message.empty() ? fmt::format("exit status {}", status) : last_message;
  return r;
}

void evaluate_collective(const CollectiveResult& r, CheckReport& report) {
  for (auto& h : report.hosts) {
    if (!r.ran) {
      h.set("allreduce", CheckStatus::kSkip, r.cause);
    } else if (r.status == 0) {
      h.set("allreduce", CheckStatus::kPass,
            fmt::format("{} ranks summed 4 floats through the job's launch path in {:.1f} s",
                        r.rank_seconds.size(), r.seconds),
            fmt::format("{:.1f} s", r.seconds));
    } else if (r.failed_hosts.empty() || std::find(r.failed_hosts.begin(), r.failed_hosts.end(),
                                                   h.address) != r.failed_hosts.end()) {
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
