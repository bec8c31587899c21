// The Runner's time (runner.h): waiting for events, a launcher that stood still, Ctrl-Z and `fg`.
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

void Runner::poll_for(int wait_ms) {
  const double before = t_.now_ms();
  // What lies beyond the wait asked for: the launcher was not running (stopped by SIGSTOP, a
  // debugger, or starved of CPU). It is judged before the first event is handled, as the events
  // are what the hosts did meanwhile. A stall is counted from a tenth of a second on.
  bool judged = false;
  auto judge = [&] {
    judged = true;
    double stuck = t_.now_ms() - before - wait_ms;
    if (stuck > 100) excuse_stall(stuck);
  };
  t_.poll(wait_ms, [&](const TransportEvent& e) {
    if (!judged) judge();
    handle(e);
  });
  if (!judged) judge();
}

// The launcher stood still for `stuck_ms`: no host is blamed for it. Every host's silence, and the
// processes' (--hang_timeout), start again from now less what they had before; --timeout keeps
// counting (the job ran on the hosts meanwhile).
void Runner::excuse_stall(double stuck_ms) {
  const double now = t_.now_ms();
  for (HostState& h : hosts_) h.last_echo_ms = std::min(now, h.last_echo_ms + stuck_ms);
  if (last_output_ms_ >= 0) last_output_ms_ = std::min(now, last_output_ms_ + stuck_ms);
  stalled_ms_ += stuck_ms;
  double shortest = -1;  // the shortest silence limit a watchdog had, when one passed
  for (HostState& h : hosts_)
    if (stuck_ms >= h.silence_ms) {  // its silence limit passed
      h.may_have_given_up = true;
      if (shortest < 0 || h.silence_ms < shortest) shortest = h.silence_ms;
    }
  if (stuck_ms < kStallToldMs) return;
  emit_event(events_, "launcher_stalled", {{"seconds", stuck_ms / 1000}});
  out_.message(fmt::format(
      "the launcher itself stood still for {:.1f} s (stopped by SIGSTOP or a debugger, or starved "
      "of CPU); no host is blamed for it{}",
      stuck_ms / 1000,
      shortest >= 0
          ? fmt::format(", but the watchdogs end the job on their hosts after {:g} s without it",
                        shortest / 1000)
          : ""));
}

std::string Runner::watchdog_gave_up_why(size_t host) const {
  return fmt::format(
      "it heard nothing from the launcher for {:g} s{}", hosts_[host].silence_ms / 1000,
      stalled_ms_ > 0 ? fmt::format(" (the launcher stood still for {:.1f} s)", stalled_ms_ / 1000)
                      : "");
}

size_t Runner::live_watchdogs(bool paused_only) const {
  return static_cast<size_t>(std::count_if(hosts_.begin(), hosts_.end(), [&](const HostState& h) {
    return !h.lost && !h.watchdog_closed && h.watchdog >= 0 && (!paused_only || h.paused);
  }));
}

// Ctrl-Z: the watchdogs stop every process of the job; once they all said so (or after
// kSuspendWaitMs) the launcher stops itself (finish_suspend, from the loop: never inside a poll).
void Runner::suspend_job() {
  if (ending()) {
    out_.message("Ctrl-Z: the job is ending; it is not suspended");
    return;
  }
  if (started_ms_ < 0) {
    if (std::exchange(suspension_, Suspension::kPending) != Suspension::kPending)
      out_.message("Ctrl-Z: the job is suspended once its processes have started");
    return;
  }
  if (suspension_ == Suspension::kStopping) return;
  send_all(kSuspend);
  suspension_ = Suspension::kStopping;
  suspend_deadline_ms_ = t_.now_ms() + kSuspendWaitMs;
}

bool Runner::finish_suspend(double now) {
  if (suspension_ != Suspension::kStopping) return false;
  if (ending()) {  // the watchdogs continue the processes before a teardown
    suspension_ = Suspension::kNone;
    return false;
  }
  const size_t hosts = live_watchdogs(false), paused = live_watchdogs(true);
  if (paused < hosts && now < suspend_deadline_ms_) return false;
  suspension_ = Suspension::kNone;
  emit_event(events_, "suspended", {{"hosts", hosts}, {"paused", paused}});
  out_.message(
      fmt::format("Ctrl-Z: the job is suspended (its processes stopped on {} of {} hosts); "
                  "`fg` or `bg` resumes it",
                  paused, hosts));
  out_.flush();
  if (running_line_) running_line_->hide();
  out_.settle_console(kSuspendWaitMs);
  const double stopped_at = t_.now_ms();
  if (stop_self_)
    stop_self_();
  else
    ::kill(::getpid(), SIGSTOP);
  resume_job(t_.now_ms() - stopped_at);
  return true;
}

void Runner::resume_job(double suspended_ms) {
  send_all(kResume);
  const double now = t_.now_ms();
  for (HostState& h : hosts_) h.last_echo_ms = now;
  if (last_output_ms_ >= 0) last_output_ms_ += suspended_ms;
  if (started_ms_ >= 0) started_ms_ += suspended_ms;  // --timeout counts the time running
  next_beat_ms_ = now;
  emit_event(events_, "resumed", {{"seconds", suspended_ms / 1000}});
  out_.message(
      fmt::format("resumed after {:.1f} s suspended: the job goes on", suspended_ms / 1000));
}

}  // namespace msrun_ssh
