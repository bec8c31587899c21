#include "msrun_ssh/runner.h"

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
#include "msrun_ssh/agent.h"
#include "msrun_ssh/base.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/stacks.h"

namespace msrun_ssh {

using namespace runner_detail;  // NOLINT(google-build-using-namespace)

Runner::Runner(const Plan& plan, const Options& options, Transport& transport, Output& output,
               int signal_fd, int stdin_fd)
    : plan_(plan),
      options_(options),
      t_(transport),
      out_(output),
      signal_fd_(signal_fd),
      stdin_fd_(stdin_fd),
      heartbeat_ms_(options.heartbeat * 1000) {
  hosts_.resize(plan.hosts.size());
  for (size_t h = 0; h < plan.hosts.size(); ++h) hosts_[h].label = host_key(plan.hosts[h].host);
  for (size_t h = 0; h < plan.hosts.size(); ++h)
    for (const auto& p : plan.hosts[h].processes) procs_.push_back(Proc{.host = h, .spec = &p});
  // A host whose ssh config sets ServerAliveInterval I (and ServerAliveCountMax C) is given up as
  // OpenSSH's client gives it up: after C intervals without an answer (I x C s, at least one),
  // however much more or less than the launcher's own 2 heartbeats that is; its watchdog waits as
  // long for a silent launcher. Heartbeats then go out at least every I s, and never less than 2
  // within a host's limit.
  for (size_t h = 0; h < hosts_.size(); ++h)
    if (auto alive = t_.server_alive(h); alive && alive->interval_s > 0) {
      hosts_[h].silence_ms = alive->interval_s * 1000 * std::max(1, alive->count_max);
      heartbeat_ms_ = std::min({heartbeat_ms_, alive->interval_s * 1000, hosts_[h].silence_ms / 2});
    }
  for (HostState& s : hosts_)
    if (s.silence_ms <= 0) s.silence_ms = 2 * options.heartbeat * 1000;
}

const std::string& Runner::host_name(size_t host) const { return hosts_[host].label; }

void Runner::send_all(char byte) {
  for (auto& h : hosts_)
    if (!h.lost && !h.watchdog_closed && h.watchdog >= 0)
      t_.write(h.watchdog, std::string(1, byte));
}

bool Runner::processes_done() const {
  return std::all_of(procs_.begin(), procs_.end(), [](const Proc& p) { return p.done; });
}

// A process has ended once its exit status arrived, even while a grandchild it left behind still
// holds its output open (the channel closes only when that grandchild is gone): the watchdogs'
// final sweep ends such leftovers, and then the channels close.
bool Runner::processes_ended() const {
  return std::all_of(procs_.begin(), procs_.end(),
                     [](const Proc& p) { return p.done || p.exited; });
}

bool Runner::watchdogs_done() const {
  return std::all_of(hosts_.begin(), hosts_.end(), [](const HostState& h) {
    return h.lost || (h.watchdog_closed && h.sweep < 0);
  });
}

void Runner::fail(int status, const std::string& why, char how) {
  if (exit_code_ < 0) exit_code_ = status;
  if (cause_.empty()) cause_ = why;
  if (!tearing_down()) {
    emit_event(events_, "teardown", {{"reason", why}, {"exit_status", exit_code_}});
    out_.message(fmt::format("{}; stopping the job on every host", why));
    teardown(how);
  }
}

void Runner::teardown(char how) {
  double now = t_.now_ms();
  if (how == kKillNow)
    deadline_ms_ = now + kKillNowWaitMs;
  else if (!tearing_down())
    deadline_ms_ = now + options_.kill_grace * 1000 + kTeardownSlackMs;
  enter(how == kKillNow ? Phase::kKillingNow : Phase::kTearingDown);
  if (watch_) watch_->stop();
  promise_no_more_channels();
  // Commands not sent yet never start; the watchdogs end the others (SIGTERM, grace, SIGKILL).
  for (const Proc& p : procs_)
    if (!p.done && p.channel >= 0) t_.cancel(p.channel);
  send_all(how);
  if (how == kKillNow) kill_channels();
}

// The watchdogs are done (or too slow): whatever channel of the job is still open runs something
// their sweeps could not end — in practice a command whose exec reached sshd after the sweep. The
// SSH "signal" request reaches its process group through sshd. A channel closes when what it ran
// has ended; until every one has, the teardown is not done. Watchdogs are never signalled: one
// may be in the middle of its sweep, and each ends by itself when the launcher disconnects.
void Runner::kill_channels() {
  channels_killed_ = true;
  for (const Proc& p : procs_)
    if (!p.done && p.channel >= 0 && !hosts_[p.host].lost) t_.kill(p.channel, "KILL");
}

// The hosts did not confirm the end of every process in time, even after the SIGKILLs: name each
// process that may still run and its host, and say so in the exit status.
void Runner::give_up() {
  std::map<size_t, std::vector<std::string>> left;
  for (auto& p : procs_) {
    if (p.done) continue;
    if (!hosts_[p.host].lost) left[p.host].push_back(p.spec->label());
    finish_process(p, hosts_[p.host].lost ? "host lost" : "not confirmed ended: may still run");
  }
  if (left.empty()) return;  // a watchdog still open ends with the disconnect (its stdin closes)
  for (const auto& [host, labels] : left)
    out_.message(fmt::format("{}: could not confirm the end of: {}; they may still run there",
                             host_name(host), fmt::join(labels, ", ")));
  exit_code_ = kExitUnconfirmed;
  unconfirmed_ = true;
}

void Runner::lose_host(size_t host, const std::string& why) {
  HostState& h = hosts_[host];
  if (h.lost) return;
  h.lost = true;
  t_.drop_host(host);
  emit_event(events_, "host_lost", {{"host", host_name(host)}, {"reason", why}});
  if (outcome_stands_) {
    // Every process had already reported how it ended: the job's outcome stands.
    for (auto& p : procs_)
      if (p.host == host && !p.done) finish_process(p, "");
    out_.message(fmt::format("warning: host {} lost after every process had ended: {}",
                             host_name(host), why));
    return;
  }
  for (auto& p : procs_)
    if (p.host == host && !p.done) finish_process(p, "host lost");
  fail(kExitHostFailure, fmt::format("host {} lost: {}", host_name(host), why));
}

void Runner::finish_process(Proc& p, const std::string& note) {
  if (p.done) return;
  p.done = true;
  if (!p.exited || p.end_ms == 0) p.end_ms = t_.now_ms();
  if (!note.empty() && p.note.empty()) p.note = note;
  if (p.out >= 0) out_.finish(p.out);
  if (events_) {
    SummaryRow r = row_of(static_cast<size_t>(&p - procs_.data()));
    events_->emit("process_ended",
                  {{"host", r.host},
                   {"process", r.process},
                   {"rank", rank_json(r.rank)},
                   {"status", r.status},
                   {"exit_status", p.exited ? nlohmann::json(p.status) : nlohmann::json(nullptr)},
                   {"failed", r.failed},
                   {"seconds", r.seconds}});
  }
}

bool Runner::start_watchdogs() {
  // The watchdog gives up after 2 heartbeats of silence (or its host's ServerAlive limit), so that
  // the whole teardown on a host that lost us fits in the 3 heartbeats docs/life-cycle.md promises.
  if (start_view_) start_view_->phase(StartProgress::Phase::kWatchdogs);
  double now = t_.now_ms();
  for (size_t h = 0; h < hosts_.size(); ++h) {
    hosts_[h].watchdog =
        t_.exec(h, watchdog_command(plan_.job_id, hosts_[h].silence_ms / 1000, options_.kill_grace,
                                    plan_.hosts[h].host.workdir));
    hosts_[h].last_echo_ms = now;
    put(host_of_watchdog_, hosts_[h].watchdog, static_cast<int>(h));
  }
  // The deadline follows progress: a host is late only when --connect_timeout has passed since
  // the last watchdog became ready. Hundreds of hosts starting on loaded machines (or slow login
  // rcs) keep the start going as long as some still come up; --cluster_time_out bounds it all.
  const double step = options_.connect_timeout * 1000;
  const double cap = now + std::max(step, options_.cluster_time_out * 1000.0);
  double deadline = now + step;
  auto ready_count = [&] {
    return static_cast<size_t>(
        std::count_if(hosts_.begin(), hosts_.end(), [](const HostState& h) { return h.ready; }));
  };
  size_t ready = 0;
  // Heartbeats go out while slower hosts start: a watchdog already running gives up on a silent
  // launcher after 2 heartbeats, which --connect_timeout may exceed.
  next_beat_ms_ = now + heartbeat_ms_;
  double stalled_before = stalled_ms_;
  while (ready < hosts_.size() && exit_code_ < 0 && t_.now_ms() < deadline) {
    if (t_.now_ms() >= next_beat_ms_) beat();
    // The status row names the slowest hosts after a few seconds: wake up for it.
    double until = std::min(deadline, next_beat_ms_);
    if (start_view_) until = std::min(until, t_.now_ms() + 500);
    const double before = t_.now_ms();
    poll_for(static_cast<int>(std::max(1.0, until - before)));
    // Time the launcher stood still is no host's delay.
    if (double stood = stalled_ms_ - stalled_before; stood > 0) {
      deadline += stood;
      stalled_before = stalled_ms_;
    }
    if (start_view_) start_view_->tick();
    if (size_t n = ready_count(); n > ready) {
      ready = n;
      deadline = std::min(cap, std::max(deadline, t_.now_ms() + step));
    }
    // No watchdog up yet, but every host still answers at the TCP level: they are all slow
    // together (every login rc burning the same CPUs, a slow shared home), not dead.
    if (ready == 0 && t_.now_ms() >= deadline && all_waiting_hosts_ack())
      deadline = std::min(cap, t_.now_ms() + step);
  }
  if (ready == hosts_.size() && exit_code_ < 0) return true;
  for (size_t h = 0; h < hosts_.size(); ++h)
    if (!hosts_[h].ready && exit_code_ < 0)
      fail(kExitHostFailure,
           ready == 0 ? fmt::format("the watchdog on {} did not start within {:g} s", host_name(h),
                                    options_.connect_timeout)
                      : fmt::format("the watchdog on {} did not start within {:g} s of the last "
                                    "host that did ({} of {} ready)",
                                    host_name(h), options_.connect_timeout, ready, hosts_.size()));
  return false;
}

bool Runner::all_waiting_hosts_ack() const {
  for (size_t h = 0; h < hosts_.size(); ++h)
    if (!hosts_[h].ready &&
        t_.tcp_liveness(h, hosts_[h].silence_ms) != Transport::Liveness::kAcking)
      return false;
  return true;
}

// The process's command on its host's transport (again, at an in-place restart): the same
// command, environment and log; the new channel takes the old one's place for stdin.
void Runner::exec_process(size_t index) {
  Proc& p = procs_[index];
  bool gets_stdin = stdin_from_launcher(options_, *p.spec) && stdin_fd_ >= 0;
  std::erase(stdin_targets_, p.channel);
  p.channel = t_.exec(p.host, process_command(*p.spec, plan_.job_id, gets_stdin));
  put(proc_of_channel_, p.channel, static_cast<int>(index));
  if (gets_stdin) stdin_targets_.push_back(p.channel);
}

// Whether the failure of `p` (an exit status not 0 just came) is met by an in-place restart.
bool Runner::restarts_in_place(const Proc& p) {
  if (options_.restart_policy != RestartPolicy::kProcess || p.spec->role != Role::kWorker)
    return false;
  // Restarts still waiting for what their run left count too: workers failing together (a device
  // fault, the OOM killer) share the budget, not each see it unspent.
  auto waiting = std::count_if(procs_.begin(), procs_.end(),
                               [](const Proc& q) { return !q.restart_cause.empty(); });
  if (restarts_.size() + static_cast<size_t>(waiting) < static_cast<size_t>(options_.max_restarts))
    return true;
  out_.message(fmt::format("no process restart left (--max_restarts={})", options_.max_restarts));
  return false;
}

void Runner::restart_process(size_t index) {
  Proc& p = procs_[index];
  const Process& s = *p.spec;
  int rank = s.role == Role::kWorker ? s.rank : -1;
  p.restart_wait_until_ms = -1;
  restarts_.push_back(ProcessRestart{static_cast<int>(restarts_.size()) + 1, host_name(p.host),
                                     s.label(), rank, std::exchange(p.restart_cause, {})});
  const ProcessRestart& r = restarts_.back();
  std::string what = fmt::format("process restart {} of {}: {}; started again in place", r.number,
                                 options_.max_restarts, r.cause);
  out_.separate(p.out, fmt::format("----- msrun-ssh: {} -----", what));
  out_.message(what);
  emit_event(events_, "process_restarted",
             {{"host", r.host},
              {"process", r.process},
              {"rank", rank_json(rank)},
              {"restart", r.number},
              {"max_restarts", options_.max_restarts},
              {"cause", r.cause},
              {"exit_status", p.status},
              {"signal", p.signal.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.signal)},
              {"log", p.log_name}});
  p.status = 0;
  p.signal.clear();
  exec_process(index);
}

void Runner::promise_no_more_channels() {
  if (std::exchange(no_more_channels_, true)) return;
  t_.no_more_channels();
}

bool Runner::make_logs() {
  try {
    for (Proc& p : procs_) {
      const Process& s = *p.spec;
      bool is_worker = s.role == Role::kWorker;
      bool tailed = stdin_from_launcher(options_, s);
      bool on_console = options_.tail_worker_log.empty() || tailed;
      const std::string& own = hosts_[p.host].name;
      p.log_name = with_hostname(s.log_name, own.empty() ? host_name(p.host) : own);
      std::string prefix = process_prefix(is_worker ? s.rank : -1, host_name(p.host));
      if (attempt_ > 1) prefix += fmt::format(" a{}", attempt_);
      p.out = out_.add_process(prefix, p.log_name, on_console, is_worker ? s.rank : -1,
                               host_name(p.host));
      if (tailed) out_.show_prompts(p.out);
    }
  } catch (const std::runtime_error& e) {
    logs_failed_ = true;
    fail(kExitUsage, fmt::format("{} (nothing was started)", e.what()));
    return false;
  }
  return true;
}

void Runner::start_processes() {
  for (size_t i = 0; i < procs_.size(); ++i) {
    Proc& p = procs_[i];
    const Process& s = *p.spec;
    bool is_worker = s.role == Role::kWorker;
    // The others read /dev/null (set in their command): no EOF to send.
    exec_process(i);
    emit_event(events_, "process_started",
               {{"host", host_name(p.host)},
                {"process", s.label()},
                {"rank", rank_json(is_worker ? s.rank : -1)},
                {"log", p.log_name}});
    p.start_ms = t_.now_ms();
  }
  // The samplers ride on the launch agents: spawned by an agent, a sampler is not a login shell
  // that could sit in its rc past the job's end. They start one sampling interval after the
  // processes (start_samplers): a straggler takes several samples to tell, and a job that ends
  // sooner (or the start's busiest second) does without a Perl start per host.
  const bool watching =
      options_.watch && use_agent(options_.agent) && options_.transport == TransportKind::kSsh;
  if (watching) {
    watch_ = std::make_unique<JobWatch>(t_, hosts_.size(),
                                        [this](const StragglerChange& c) { on_straggler(c); });
    samplers_at_ms_ = t_.now_ms() + kSamplerDelayMs;
    if (!top_file_.empty()) top_ = std::make_unique<TopTracker>(options_.progress_regex);
  }
  // The samplers' channels come later: the promise waits for them (start_samplers).
  if (!watching) promise_channels_after_start();
  if (start_view_) start_view_->processes_started(procs_.size());
  started_ms_ = last_output_ms_ = t_.now_ms();
  enter(Phase::kRunning);
  if (!stdin_targets_.empty())
    t_.watch_fd(stdin_fd_);
  else
    stdin_fd_ = -1;
}

void Runner::start_samplers() {
  samplers_at_ms_ = -1;
  if (phase_ == Phase::kRunning) {
    // Only where a process still runs: a host whose processes have all ended has nothing to
    // sample, and a sampler costs its host a fork and a Perl start.
    std::vector<bool> running(hosts_.size(), false);
    std::vector<std::string> ranks(hosts_.size());
    for (const Proc& p : procs_) {
      running[p.host] = running[p.host] || !p.done;
      std::string& r = ranks[p.host];
      r += r.empty() ? "" : ",";
      r += rank_word(p.spec->role == Role::kScheduler ? -1 : p.spec->rank);
    }
    std::vector<size_t> live;
    for (size_t h = 0; h < hosts_.size(); ++h)
      if (!hosts_[h].lost && running[h]) live.push_back(h);
    watch_->start(live, ranks, plan_.job_id, 1);
  }
  promise_channels_after_start();
}

void Runner::promise_channels_after_start() {
  // An in-place restart opens a channel later: the promise waits for the end of the job then.
  if (options_.restart_policy != RestartPolicy::kProcess || options_.max_restarts == 0)
    promise_no_more_channels();
}

void Runner::beat() {
  send_all(kBeat);
  next_beat_ms_ = t_.now_ms() + heartbeat_ms_;
}

// A host is lost when its watchdog has not echoed for its silence limit (+ slack), unless the
// host's TCP stack still acknowledges what we send: then the host is alive but starved of CPU (or
// its watchdog is stuck) and gets up to starved_limit_ms() before it counts as lost.
void Runner::check_heartbeats(double now) {
  for (size_t h = 0; h < hosts_.size(); ++h) {
    const HostState& s = hosts_[h];
    if (s.lost || s.watchdog_closed) continue;
    double silent = now - s.last_echo_ms;
    if (silent <= s.silence_ms + kEchoSlackMs) continue;
    bool acking = t_.tcp_liveness(h, s.silence_ms) == Transport::Liveness::kAcking;
    if (acking && silent <= std::max(starved_limit_ms(), s.silence_ms)) continue;
    lose_host(h, fmt::format("no answer to heartbeats for {:.1f} s{}", silent / 1000,
                             acking ? " (its TCP still acknowledges: starved or stuck)" : ""));
  }
}

double Runner::starved_limit_ms() const { return std::max(60000.0, 10 * heartbeat_ms_); }

// --timeout and --hang_timeout, while the job runs. The silence rule is output from any process:
// a hang in one rank usually silences all of them (they wait for it in a collective), and it
// needs nothing from the script. A job silent by design needs a larger --hang_timeout.
void Runner::check_time_limits(double now) {
  if (phase_ != Phase::kRunning) return;
  if (options_.timeout > 0 && now - started_ms_ >= options_.timeout * 1000) {
    teardown_note_ = "timed out";
    fail(kExitTimeout,
         fmt::format("timed out: the job ran for its --timeout of {:g} s", options_.timeout),
         kStacksThenTeardown);
    return;
  }
  if (options_.hang_timeout <= 0 || now - last_output_ms_ < options_.hang_timeout * 1000) return;
  std::string what =
      fmt::format("hang: no process printed anything for {:g} s", options_.hang_timeout);
  if (!options_.hang_kills) {
    out_.message(what + " (--on_hang=report: the job goes on)");
    last_output_ms_ = now;  // the next report after another --hang_timeout of silence
    return;
  }
  teardown_note_ = "timed out";
  fail(kExitTimeout, what + " (--hang_timeout)", kStacksThenTeardown);
}

// A failed worker's run whose channel stays open after what it left was ended (handle): past its
// wait, the job ends with the worker's status, as without a restart.
void Runner::check_restart_waits(double now) {
  std::erase_if(restart_waits_, [&](size_t i) {
    Proc& p = procs_[i];
    if (p.restart_wait_until_ms < 0 || p.restart_cause.empty() || tearing_down()) return true;
    if (now < p.restart_wait_until_ms) return false;
    if (root_cause_ < 0) root_cause_ = static_cast<int>(i);
    fail(p.status,
         fmt::format("{}; not started again: its run's output was still held open {:g} s after "
                     "what it left was ended",
                     p.restart_cause, options_.kill_grace + kTeardownSlackMs / 1000));
    return true;
  });
}

int Runner::timeout_ms(double now) const {
  double until = next_beat_ms_;
  for (size_t i : restart_waits_) until = std::min(until, procs_[i].restart_wait_until_ms);
  if (phase_ == Phase::kRunning) {
    if (options_.timeout > 0) until = std::min(until, started_ms_ + options_.timeout * 1000);
    if (options_.hang_timeout > 0)
      until = std::min(until, last_output_ms_ + options_.hang_timeout * 1000);
  }
  if (ending()) until = std::min(until, deadline_ms_);
  if (samplers_at_ms_ >= 0) until = std::min(until, samplers_at_ms_);
  // The status row: the start view leaves after kStartedShownMs, the running status every second.
  if (start_view_ && !start_view_->finished() && started_ms_ >= 0)
    until = std::min(until, started_ms_ + kStartedShownMs);
  if (running_line_ || top_ || stdin_in_background_) until = std::min(until, now + 1000);
  if (stdin_held_) until = std::min(until, now + 20);  // its backlog drains as the hosts take it
  if (stacks_) until = std::min(until, stacks_deadline_ms_);
  if (suspension_ == Suspension::kStopping) until = std::min(until, suspend_deadline_ms_);
  // Wake up when a silent host becomes lost, not at the next heartbeat after.
  for (size_t i = 0; i < hosts_.size(); ++i) {
    const HostState& h = hosts_[i];
    if (h.lost || h.watchdog_closed) continue;
    double due = h.last_echo_ms + h.silence_ms + kEchoSlackMs;
    // A silent host that still acknowledges at the TCP level is looked at again every heartbeat.
    if (due <= now && t_.tcp_liveness(i, h.silence_ms) == Transport::Liveness::kAcking)
      due = std::min(h.last_echo_ms + std::max(starved_limit_ms(), h.silence_ms),
                     now + heartbeat_ms_);
    until = std::min(until, due);
  }
  // Gathered console lines go out when their window has passed, not at the next event.
  if (int due = out_.due_in_ms(); due >= 0) until = std::min(until, now + due);
  return static_cast<int>(std::clamp(std::ceil(until - now), 1.0, 60000.0));
}

int Runner::run() {
  if (signal_fd_ >= 0) t_.watch_fd(signal_fd_);
  if (start_watchdogs() && make_logs())
    start_processes();
  else
    for (auto& p : procs_) finish_process(p, "not started");
  beat();
  if (suspension_ == Suspension::kPending) {  // Ctrl-Z while the processes were being started
    suspension_ = Suspension::kNone;
    if (started_ms_ >= 0) suspend_job();
  }
  while (true) {
    double now = t_.now_ms();
    // Before the end checks: losing the last host we wait for ends the job now, not after a poll.
    check_heartbeats(now);
    check_time_limits(now);
    check_restart_waits(now);
    check_stacks(now);
    if (pending_fail_) {
      auto [status, why] = *std::exchange(pending_fail_, std::nullopt);
      fail(status, why);
    }
    if (finish_suspend(now)) continue;  // suspended and resumed: the clock moved on
    if (processes_ended() && !ending()) {
      // Every process ended: let each watchdog sweep what the job left behind, then finish.
      enter(Phase::kQuitting);
      outcome_stands_ = true;
      if (watch_) watch_->stop();
      promise_no_more_channels();
      send_all(kQuit);
      deadline_ms_ = now + options_.kill_grace * 1000 + kTeardownSlackMs;
    }
    if (processes_done() && watchdogs_done()) break;
    if (tearing_down() && !channels_killed_ && watchdogs_done()) kill_channels();
    if (ending() && now >= deadline_ms_) {
      if (phase_ != Phase::kKillingNow) {
        out_.message("hosts did not confirm the end of the job in time; killing what is left");
        teardown(kKillNow);
        continue;
      }
      give_up();
      break;
    }
    if (samplers_at_ms_ >= 0 && now >= samplers_at_ms_) start_samplers();
    if (now >= next_beat_ms_) beat();
    update_status(now);
    write_top(now);
    watch_stdin_again();
    poll_for(timeout_ms(now));
    out_.flush();
  }
  check_stacks(-1);
  if (start_view_) start_view_->finish();
  if (running_line_) running_line_->hide();
  out_.drain();
  return exit_code_ < 0 ? kExitOk : exit_code_;
}

// The start view shows "started N/N" for half a second, then the running status (if asked for)
// takes the row, redrawn once a second.
void Runner::update_status(double now) {
  if (start_view_ && !start_view_->finished()) {
    if (started_ms_ < 0 || now - started_ms_ < kStartedShownMs) return;
    start_view_->finish();
  }
  if (!running_line_ || (status_at_ms_ >= 0 && now - status_at_ms_ < 1000)) return;
  size_t running = 0, exited = 0, failed = 0, bytes = 0;
  for (size_t i = 0; i < procs_.size(); ++i) {
    const Proc& p = procs_[i];
    if (p.out >= 0) bytes += out_.log_bytes(p.out);
    if (!p.done && !p.exited)
      ++running;
    else if (p.exited && p.status == 0)
      ++exited;
    else
      ++failed;
  }
  double rate = status_at_ms_ < 0 ? 0
                                  : static_cast<double>(bytes - status_bytes_) * 1000 /
                                        std::max(1.0, now - status_at_ms_);
  status_at_ms_ = now;
  status_bytes_ = bytes;
  running_line_->show(
      running_status_text(running, exited, failed, rate, (now - started_ms_) / 1000));
}

std::vector<std::string> Runner::log_names() const {
  std::vector<std::string> names;
  for (const Proc& p : procs_)
    if (!p.log_name.empty()) names.push_back(p.log_name);
  return names;
}

std::vector<std::string> Runner::lost_hosts() const {
  std::vector<std::string> lost;
  for (size_t h = 0; h < hosts_.size(); ++h)
    if (hosts_[h].lost) lost.push_back(host_name(h));
  return lost;
}

std::string Runner::root_cause_host() const {
  return root_cause_ < 0 ? "" : host_name(procs_[static_cast<size_t>(root_cause_)].host);
}

std::vector<SummaryRow> Runner::summary() const {
  std::vector<SummaryRow> rows;
  rows.reserve(procs_.size());
  for (size_t i = 0; i < procs_.size(); ++i) rows.push_back(row_of(i));
  follow_error_files(rows);
  return rows;
}

SummaryRow Runner::row_of(size_t i) const {
  const Proc& p = procs_[i];
  SummaryRow r;
  r.host = host_name(p.host);
  r.process = p.spec->label();
  if (p.exited) {
    r.status = describe_status(p.status, p.signal);
    r.exit_code = p.signal.empty() ? p.status : -signal_number(p.signal.c_str());
    if (!p.note.empty()) r.status += " (" + p.note + ")";
  } else {
    r.status = p.note.empty() ? "unknown" : p.note;
  }
  r.failed = !p.exited || (p.status != 0 && p.note.empty());
  r.seconds = p.start_ms > 0 && p.end_ms >= p.start_ms ? (p.end_ms - p.start_ms) / 1000 : 0;
  r.rank = p.spec->role == Role::kWorker ? p.spec->rank : -1;
  r.root_cause = static_cast<int>(i) == root_cause_;
  r.torn_down = p.exited && p.note == teardown_note_;
  if (p.out >= 0) r.stacks = out_.stacks(p.out);
  if (p.out >= 0) r.log_gap = out_.log_gap(p.out);
  if (r.failed && p.out >= 0) {
    const auto& last = out_.last_lines(p.out);
    r.last_lines.assign(last.begin(), last.end());
    r.traceback = out_.traceback(p.out).lines();
    // A torch rank's error file says what its traceback says, and when (output.h, ErrorFile).
    if (const auto& file = out_.error_file(p.out)) {
      r.error_message = file->message;
      r.error_time = file->timestamp;
      if (!file->traceback.empty()) r.traceback = file->traceback;
    }
  }
  return r;
}

}  // namespace msrun_ssh
