// The Runner's reactions (runner.h): to signals, stdin, the watchdogs' lines and the processes'
// events; stack dumps on demand.
#include <errno.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
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

void Runner::on_signal(int signo) {
  if (signo == SIGQUIT) return request_stacks();
  if (signo == SIGTSTP) return suspend_job();
  if (signo == SIGCONT) return;  // a stop is seen by the time it took (poll_for)
  int code = exit_status_of_signal(signo);
  if (outcome_stands_) {
    // Every process had ended well: the job's outcome stands (as a host lost now leaves it). The
    // watchdogs' sweep of what the job left goes on, bounded; a second interrupt ends it at once,
    // and any signal after that changes nothing.
    if (std::exchange(late_signal_, true) && signo == SIGINT) {
      if (phase_ != Phase::kKillingNow) teardown(kKillNow);
      return;
    }
    out_.message(
        fmt::format("received SIG{} after every process had ended; the job's outcome "
                    "stands",
                    sigabbrev_np(signo)));
    return;
  }
  interrupted_ = true;
  if (phase_ == Phase::kTearingDown && signo == SIGINT) {
    out_.message("second interrupt: killing every process now");
    if (exit_code_ < 0) exit_code_ = code;
    teardown(kKillNow);
    return;
  }
  std::string why = fmt::format("received SIG{}", sigabbrev_np(signo));
  // A failure began the teardown first (under Slurm, scancel signals the ranks and the launcher
  // at once): the first cause keeps the exit status, and the signal is still acknowledged. Once
  // every process is being killed, more signals change nothing and say nothing.
  if (phase_ == Phase::kTearingDown) out_.message(why + " during the teardown; it goes on");
  fail(code, why);
}

void Runner::request_stacks() {
  if (phase_ != Phase::kRunning) {
    out_.message("stacks: not now, the job is not running");
    return;
  }
  if (stacks_) {
    out_.message("stacks: a dump is already under way");
    return;
  }
  std::vector<size_t> live;
  for (size_t h = 0; h < hosts_.size(); ++h)
    if (!hosts_[h].lost) live.push_back(h);
  out_.message(fmt::format("stacks: asking {} hosts for every process's stack; the job goes on",
                           live.size()));
  stacks_ = std::make_unique<Batch>(t_);
  start_stacks(*stacks_, live, plan_.job_id);
  stacks_deadline_ms_ = t_.now_ms() + kStackBatchSeconds * 1000;
}

// A stack dump that is over (every host answered, its bound passed, or the job ends: `now` < 0)
// is reported and written to its file.
void Runner::check_stacks(double now) {
  if (!stacks_ || (now >= 0 && stacks_->open() > 0 && now < stacks_deadline_ms_)) return;
  stacks_->abandon();
  std::vector<std::string> addresses;
  for (size_t h = 0; h < hosts_.size(); ++h) addresses.push_back(host_name(h));
  std::vector<HostStacks> answers =
      collect_stacks(stacks_->results(), addresses, std::vector<std::string>(hosts_.size()));
  std::vector<HostStacks> asked;
  for (const BatchResult& r : stacks_->results()) asked.push_back(answers[r.host]);
  stacks_.reset();
  std::string report = format_stack_report(plan_.job_id, asked);
  out_.report(report);
  if (std::string path = write_stacks_file(options_.log_dir, report, attempt_); !path.empty())
    out_.message(fmt::format("the stacks are also in {}", path));
}

void Runner::read_signals() {
  while (int signo = next_signal(signal_fd_)) on_signal(signo);
}

namespace {
// What a tailed rank may hold of stdin not sent yet before stdin is read again (stdin_held_).
constexpr size_t kStdinBacklog = 1 << 20;
}  // namespace

void Runner::read_stdin() {
  char buf[65536];
  ssize_t n = ::read(stdin_fd_, buf, sizeof buf);
  const int error = errno;
  if (n < 0 && (error == EINTR || error == EAGAIN)) return;
  // EIO from a terminal whose foreground is another process group: the launcher runs in the
  // background (run_job blocks SIGTTIN: the read fails instead of stopping the launcher). The
  // input is the shell's; the job goes on without it. A terminal gone says EIO too: its end.
  if (n < 0 && error == EIO && ::isatty(stdin_fd_) && in_background_of(stdin_fd_)) {
    t_.unwatch_fd(stdin_fd_);
    stdin_in_background_ = true;
    return;
  }
  if (n <= 0) {
    t_.unwatch_fd(stdin_fd_);
    for (ChannelId c : stdin_targets_) t_.send_eof(c);
    stdin_fd_ = -1;
    return;
  }
  for (ChannelId c : stdin_targets_) t_.write(c, std::string_view(buf, static_cast<size_t>(n)));
  if (stdin_backlogged()) {
    t_.unwatch_fd(stdin_fd_);
    stdin_held_ = true;
  }
}

bool Runner::stdin_backlogged() const {
  return std::any_of(stdin_targets_.begin(), stdin_targets_.end(),
                     [this](ChannelId c) { return t_.unsent(c) > kStdinBacklog; });
}

// From the loop: stdin is read again once the launcher is in the foreground (or its terminal is
// no longer its own), or once the tailed ranks' backlog has drained.
void Runner::watch_stdin_again() {
  if (stdin_fd_ < 0) return;
  if (stdin_in_background_) {
    if (in_background_of(stdin_fd_)) return;
    stdin_in_background_ = false;
  } else if (!stdin_held_ || stdin_backlogged()) {
    return;
  }
  stdin_held_ = false;
  t_.watch_fd(stdin_fd_);
}

void Runner::watchdog_line(size_t host, std::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  HostState& h = hosts_[host];
  h.last_echo_ms = t_.now_ms();
  if (line.rfind(kWatchdogReady, 0) == 0) {
    h.ready = true;
    // "ready PID NAME": NAME is the host's uname -n.
    std::string_view rest = line.substr(kWatchdogReady.size());
    size_t space = rest.find(' ');
    if (space != std::string_view::npos) h.name = std::string(rest.substr(space + 1));
    if (start_view_) start_view_->host_done(host, true);
    emit_event(events_, "watchdog_ready",
               {{"host", host_name(host)},
                {"name", h.name},
                {"pid", std::string(rest.substr(0, std::min(space, rest.size())))}});
  } else if (line.size() == 1 && line[0] == kBeat) {
    h.may_have_given_up = false;  // it still listens
  } else if (line == kWatchdogNoWorkdir) {
    workdir_missing_ = true;
    fail(kExitUsage, fmt::format("workdir {} does not exist on {} (or cannot be entered)",
                                 plan_.hosts[host].host.workdir, host_name(host)));
  } else if (line == kWatchdogDone) {
    h.watchdog_done = true;
  } else if (line == kWatchdogPaused) {
    h.paused = true;
  } else if (line == kWatchdogResumed) {
    h.paused = false;
  } else if (line == kWatchdogTerminated) {
    h.watchdog_done = true;
    // Not a lost host: something ended the job there on purpose (scancel of the allocation ends
    // every step with SIGTERM, and salloc -K's SIGTERM to the launcher may come later or not at
    // all). The job ends as if the launcher had got it, and is not restarted: a batch system
    // ending it would meet a restart with the same. The line comes before the watchdog's SIGKILL
    // of its host's processes, so their ends are the teardown's, not the cause.
    if (!ending()) {
      interrupted_ = true;
      fail(exit_status_of_signal(SIGTERM),
           fmt::format("the watchdog on {} received SIGTERM (the job was ended there from outside)",
                       host_name(host)));
    }
  } else if (line == kWatchdogLost) {
    // Not the host's fault: the launcher was silent for too long (excuse_stall says why). The
    // watchdog is tearing its host's processes down; everyone else follows.
    if (!ending())
      fail(kExitHostFailure, fmt::format("the watchdog on {} ended the job there: {}",
                                         host_name(host), watchdog_gave_up_why(host)));
  } else if (auto swept = parse_swept_line(line)) {
    if (phase_ == Phase::kQuitting)
      out_.message(fmt::format("{}: ended a process the job left behind: {}", host_name(host),
                               describe_swept(*swept)));
    else  // what each host's teardown ended, for the record
      out_.log_only(
          fmt::format("{}: the watchdog ended {}", host_name(host), describe_swept(*swept)));
  }
}

void Runner::handle_watchdog(size_t host, const TransportEvent& e) {
  HostState& h = hosts_[host];
  switch (e.kind) {
    case TransportEvent::Kind::kData:
      if (!e.is_stderr)
        h.framer.feed(e.data, [&](std::string_view l) { watchdog_line(host, l); });
      else
        out_.message(fmt::format("{}: watchdog: {}", host_name(host), e.data));
      break;
    case TransportEvent::Kind::kOpenFailed:
      h.watchdog_closed = true;
      fail(kExitHostFailure,
           fmt::format("cannot start the watchdog on {}: {}", host_name(host), e.data));
      break;
    case TransportEvent::Kind::kClosed: {
      h.watchdog_closed = true;
      const bool unexpected = !ending();
      if (unexpected)
        fail(kExitHostFailure,
             fmt::format("the watchdog on {} ended unexpectedly", host_name(host)));
      // Nothing sweeps its host now: what the job left there that its channels cannot reach (a
      // grandchild in a session of its own, a process whose command holds no channel) is ended
      // by the program `msrun-ssh stop` runs, over the same connection. So also when the
      // watchdog ended in the middle of the teardown, before it said it was done (killed on its
      // host: fault campaign seed 20261209, trial 11).
      if (!h.lost && (unexpected || (h.ready && !h.watchdog_done)) && h.sweep < 0) {
        h.sweep = t_.exec(host, stop_command(plan_.job_id, options_.kill_grace));
        put(host_of_sweep_, h.sweep, static_cast<int>(host));
      }
      break;
    }
    default:
      break;
  }
}

void Runner::handle_process(size_t index, const TransportEvent& e) {
  Proc& p = procs_[index];
  switch (e.kind) {
    case TransportEvent::Kind::kData:
      out_.data(p.out, e.is_stderr, e.data);
      last_output_ms_ = t_.now_ms();
      break;
    case TransportEvent::Kind::kExit:
      p.end_ms = t_.now_ms();
      p.status = e.status;
      p.signal = e.signal;
      emit_event(
          events_, "process_exited",
          {{"host", host_name(p.host)},
           {"process", p.spec->label()},
           {"exit_status", e.status},
           {"signal", e.signal.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.signal)}});
      if (e.status != 0 && !tearing_down() && restarts_in_place(p)) {
        p.restart_cause = fmt::format("{} on {} failed: {}", p.spec->label(), host_name(p.host),
                                      describe_status(e.status, e.signal));
        // Its channel closes once nothing holds the run's output any more: what the run left (a
        // grandchild in a session of its own) is ended first, or it would never close.
        // It starts again only once that has ended (it would take the new run for a leftover).
        p.leftovers =
            t_.exec(p.host, leftovers_command(*p.spec, plan_.job_id, options_.kill_grace));
        put(proc_of_leftovers_, p.leftovers, static_cast<int>(index));
        break;
      }
      p.exited = true;
      if (e.status != 0 && !tearing_down() && !e.signal.empty() &&
          hosts_[p.host].may_have_given_up) {
        // Killed after the launcher stood still longer than the watchdogs wait, before its
        // watchdog answered again: by that watchdog's teardown, not by a failure of its own (the
        // watchdog's line may come after this).
        p.note = "ended by its watchdog";
        fail(kExitHostFailure,
             fmt::format("{} on {} was ended by its watchdog ({}): {}", p.spec->label(),
                         host_name(p.host), describe_status(e.status, e.signal),
                         watchdog_gave_up_why(p.host)));
        break;
      }
      if (e.status != 0 && !tearing_down() && root_cause_ < 0)
        root_cause_ = static_cast<int>(index);
      if (e.status != 0 && !tearing_down())
        fail(e.status, fmt::format("{} on {} failed: {}", p.spec->label(), host_name(p.host),
                                   describe_status(e.status, e.signal)));
      // A process the teardown killed reports the teardown's signal, whatever the job's status
      // (143 after a SIGTERM to the launcher is not a failure of every process).
      else if (tearing_down() && e.status != 0 && (!e.signal.empty() || exit_code_ != e.status))
        p.note = teardown_note_;
      break;
    case TransportEvent::Kind::kOpenFailed:
      finish_process(p, fmt::format("not started: {}", e.data));
      fail(kExitHostFailure,
           fmt::format("cannot start {} on {}: {}", p.spec->label(), host_name(p.host), e.data));
      break;
    case TransportEvent::Kind::kClosed:
      if (!p.restart_cause.empty()) {
        if (!tearing_down() && p.leftovers >= 0) {
          p.closed = true;  // restart_process once the leftovers are gone
          return;
        }
        if (!tearing_down()) return restart_process(index);
        p.exited = true;  // the teardown came first: the failed run's status stands
      }
      if (!p.exited && !tearing_down())
        fail(kExitHostFailure, fmt::format("{} on {} ended without an exit status", p.spec->label(),
                                           host_name(p.host)));
      finish_process(p, p.exited ? "" : "no exit status");
      break;
    default:
      break;
  }
}

void Runner::handle(const TransportEvent& e) {
  if (e.kind == TransportEvent::Kind::kFdReady) {
    if (e.fd == signal_fd_)
      read_signals();
    else if (e.fd == stdin_fd_)
      read_stdin();
    return;
  }
  if (stacks_ && stacks_->offer(e)) return;
  if (watch_ && watch_->offer(e)) return;
  if (e.kind == TransportEvent::Kind::kHostLost) return lose_host(e.host, std::string(e.data));
  int proc = get(proc_of_channel_, e.channel);
  if (proc >= 0) return handle_process(static_cast<size_t>(proc), e);
  int host = get(host_of_watchdog_, e.channel);
  if (host >= 0) return handle_watchdog(static_cast<size_t>(host), e);
  if (int swept = get(host_of_sweep_, e.channel); swept >= 0) {
    HostState& h = hosts_[static_cast<size_t>(swept)];
    if (e.kind == TransportEvent::Kind::kData && e.is_stderr)
      out_.message(fmt::format("{}: sweep: {}", host_name(static_cast<size_t>(swept)), e.data));
    if (e.kind == TransportEvent::Kind::kClosed || e.kind == TransportEvent::Kind::kOpenFailed) {
      put(host_of_sweep_, h.sweep, -1);
      h.sweep = -1;
    }
    return;
  }
  int failed = get(proc_of_leftovers_, e.channel);
  if (failed >= 0 &&
      (e.kind == TransportEvent::Kind::kClosed || e.kind == TransportEvent::Kind::kOpenFailed)) {
    Proc& p = procs_[static_cast<size_t>(failed)];
    put(proc_of_leftovers_, p.leftovers, -1);
    p.leftovers = -1;
    if (!std::exchange(p.closed, false)) {  // its own channel has not closed yet
      // ... and what holds it open (what the failed run left) will not be ended: the command
      // that was to end it could not start. No restart can follow; the job ends as without one,
      // and its teardown ends what the run left.
      if (e.kind == TransportEvent::Kind::kOpenFailed && !tearing_down()) {
        if (root_cause_ < 0) root_cause_ = failed;
        fail(p.status, fmt::format("{}; not started again: what its run left cannot be ended: {}",
                                   p.restart_cause, e.data));
        return;
      }
      // Ended, and still something holds the run's output (a process in D state, one the
      // leftovers command could not tell for the job's): the teardown's time for it to go, then
      // the job ends as without a restart (check_restart_waits), never waits for ever.
      if (!tearing_down()) {
        p.restart_wait_until_ms = t_.now_ms() + options_.kill_grace * 1000 + kTeardownSlackMs;
        restart_waits_.push_back(static_cast<size_t>(failed));
      }
      return;
    }
    if (!tearing_down()) return restart_process(static_cast<size_t>(failed));
    p.exited = true;  // the teardown came first: the failed run's status stands
    finish_process(p, "");
  }
}

// A straggler raised or cleared (watch.h): one line, an event, and the record for summary.json.
void Runner::on_straggler(const StragglerChange& c) {
  const std::string& host = host_name(c.host);
  std::string ranks = fmt::format("{}", fmt::join(c.ranks, ", "));
  double at = (t_.now_ms() - started_ms_) / 1000;
  if (c.raised) {
    const RankRate& w = c.worst;
    out_.message(fmt::format(
        "straggler: {} (rank{} {}): the others wait for it: busy {:.2f} CPU ({:.2f} computing, "
        "{:.2f} waiting for a CPU, {:.2f} throttled by its CPU quota, {:.2f} stolen) where the "
        "median rank is busy {:.2f}",
        host, c.ranks.size() > 1 ? "s" : "", ranks, c.demand, w.cpu, w.wait, w.throttled, w.steal,
        c.median));
    emit_event(events_, "straggler",
               {{"host", host},
                {"ranks", c.ranks},
                {"demand", c.demand},
                {"median", c.median},
                {"cpu", w.cpu},
                {"wait", w.wait},
                {"throttled", w.throttled},
                {"steal", w.steal}});
    stragglers_.push_back({host, c.ranks, at, -1, c.demand, c.median});
    return;
  }
  out_.message(
      fmt::format("straggler cleared: {} (rank{} {})", host, c.ranks.size() > 1 ? "s" : "", ranks));
  emit_event(events_, "straggler_cleared", {{"host", host}, {"ranks", c.ranks}});
  for (auto& r : stragglers_)
    if (r.host == host && r.until < 0) r.until = at;
}

// Once a second while the job runs: what `msrun-ssh top` shows, through a temporary name.
void Runner::write_top(double now) {
  if (!top_ || ending() || (top_at_ms_ >= 0 && now - top_at_ms_ < 1000)) return;
  top_at_ms_ = now;
  std::vector<RankOutput> outputs;
  for (const Proc& p : procs_) {
    if (p.out < 0) continue;
    auto last = out_.last_lines(p.out);
    const Process& s = *p.spec;
    outputs.push_back({rank_word(s.role == Role::kScheduler ? -1 : s.rank), p.host,
                       out_.lines(p.out), last.empty() ? std::string() : last.back()});
  }
  std::vector<std::string> names;
  for (size_t h = 0; h < hosts_.size(); ++h) names.push_back(host_name(h));
  std::string text = top_->snapshot(now, plan_.job_id, names, *watch_, outputs).dump() + "\n";
  std::string why = replace_file(top_file_, text);
  if (why.empty()) return;
  out_.message(
      fmt::format("warning: cannot write {}: {}; `top` shows nothing of this job", top_file_, why));
  top_.reset();  // said once; the job goes on without it
}

}  // namespace msrun_ssh
