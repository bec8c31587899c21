// Restarts (runner.h): whether and when an attempt is followed by another, the spares that replace
// failed hosts (HostRoster), and how restarts are reported.
#include <errno.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "internal.h"
#include "msrun_ssh/base.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/runner.h"
#include "msrun_ssh/stacks.h"

namespace msrun_ssh {

using namespace runner_detail;  // NOLINT(google-build-using-namespace)

bool should_restart(const AttemptResult& r, int attempt, int max_restarts) {
  return r.status != kExitOk && !r.interrupted && !r.final && attempt <= max_restarts;
}

double restart_backoff(double backoff_s, int attempt) {
  double s = backoff_s;
  for (int k = 2; k < attempt && s < kMaxRestartBackoff; ++k) s *= 2;
  return std::min(s, kMaxRestartBackoff);
}

RestartHistory run_with_restarts(int max_restarts, double backoff_s,
                                 const std::function<AttemptResult(int)>& run_attempt,
                                 const std::function<int(double)>& wait,
                                 const std::function<void(const std::string&)>& say) {
  RestartHistory h;
  for (int attempt = 1;; ++attempt) {
    h.attempts.push_back(run_attempt(attempt));
    const AttemptResult& r = h.attempts.back();
    h.status = r.status;
    if (!should_restart(r, attempt, max_restarts)) {
      if (r.status != kExitOk && max_restarts > 0 && attempt > max_restarts)
        say(fmt::format("attempt {} failed; no restart left (--max_restarts={})", attempt,
                        max_restarts));
      return h;
    }
    double s = restart_backoff(backoff_s, attempt + 1);
    say(fmt::format("attempt {} of {} failed ({}); restarting the whole job in {:g} s", attempt,
                    max_restarts + 1, r.cause, s));
    if (int signal_status = wait(s); signal_status != 0) {
      say("interrupted during the restart back-off: no further attempt");
      h.status = signal_status;
      return h;
    }
  }
}

HostRoster::HostRoster(Plan plan, const Options& options, Say say)
    : plan_(std::move(plan)),
      options_(options),
      say_(std::move(say)),
      has_spares_(!plan_.spares.empty()) {}

Plan HostRoster::take_plan() {
  Plan p = std::move(plan_);
  plan_ = Plan{};
  plan_.job_id = p.job_id;
  return p;
}

std::string HostRoster::after_attempt(const AttemptResult& result) {
  lost_before_.insert(result.lost_hosts.begin(), result.lost_hosts.end());
  if (!has_spares_) return "";
  std::set<std::string> failed(result.lost_hosts.begin(), result.lost_hosts.end());
  if (!result.root_cause_host.empty()) failed.insert(result.root_cause_host);
  for (const auto& host : failed) ++failures_[host];
  std::map<std::string, std::string> lost;
  for (const auto& host : result.lost_hosts) lost[host] = "lost during the attempt";
  return replace(lost);
}

std::string HostRoster::replace_unreachable(const std::map<std::string, std::string>& unreachable) {
  std::map<std::string, std::string> why;
  for (const auto& [host, reason] : unreachable) why[host] = "unreachable: " + reason;
  return replace(why);
}

std::string HostRoster::replace(const std::map<std::string, std::string>& unusable) {
  SpareDecision d = replace_hosts(plan_, unusable, failures_, options_.host_failures_to_exclude);
  if (!d.error.empty()) return "cannot restart: " + d.error;
  std::string old_master;
  for (const auto& h : plan_.hosts)
    if (h.is_master) old_master = host_key(h.host);
  try {
    plan_ = apply_replacements(plan_, d.replacements, options_);
  } catch (const InputError& e) {
    return fmt::format("cannot restart: a spare host does not fit the job: {}", e.what());
  }
  for (const Replacement& r : d.replacements) {
    say_(fmt::format("spare host {} replaces {} as node rank {} ({})", r.spare, r.host, r.node_rank,
                     r.reason));
    if (taken_)
      for (const HostPlan& h : plan_.hosts)
        if (h.node_rank == r.node_rank) taken_(h);
    if (r.host == old_master)
      say_(fmt::format("the master moves from {} to {}: {} is now {}", r.host, r.spare,
                       plan_.contract == Contract::kTorch ? "MASTER_ADDR" : "MS_SCHED_HOST",
                       plan_.master_ip));
  }
  return "";
}

int job_restarts(const Options& options) {
  return options.restart_policy == RestartPolicy::kJob ? options.max_restarts : 0;
}

std::string format_process_restarts(const std::vector<ProcessRestart>& restarts, int max_restarts) {
  if (restarts.empty()) return "";
  std::string out =
      fmt::format("process restarts ({} of --max_restarts={}):\n", restarts.size(), max_restarts);
  for (const ProcessRestart& r : restarts)
    out += fmt::format("  restart {}: {}\n", r.number, r.cause);
  return out;
}

std::string format_attempts(const RestartHistory& history) {
  std::string out = "attempts:\n";
  for (size_t i = 0; i < history.attempts.size(); ++i) {
    const AttemptResult& a = history.attempts[i];
    out += fmt::format("  attempt {}: exit {}{}\n", i + 1, a.status,
                       a.cause.empty() ? "" : " (" + a.cause + ")");
  }
  out += fmt::format("exit status {}\n", history.status);
  return out;
}

}  // namespace msrun_ssh
