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

#include "msrun_ssh/base.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/stacks.h"

namespace msrun_ssh {
namespace {

constexpr double kEchoSlackMs = 2000;    // beyond 2x heartbeat before a silent host counts as lost
constexpr double kSuspendWaitMs = 3000;  // for the watchdogs' "paused", and the console, at Ctrl-Z
constexpr double kStallToldMs = 2000;    // a launcher that stood still longer says so
constexpr double kTeardownSlackMs = 10000;  // beyond the kill grace before we stop waiting
constexpr double kStartedShownMs = 500;     // "started N/N" stays this long on the status row
constexpr double kKillNowWaitMs = 3000;

template <typename T>
void put(std::vector<T>& v, ChannelId id, T value) {
  if (id < 0) return;
  if (static_cast<size_t>(id) >= v.size()) v.resize(static_cast<size_t>(id) + 1, T(-1));
  v[static_cast<size_t>(id)] = value;
}

template <typename T>
T get(const std::vector<T>& v, ChannelId id) {
  return id >= 0 && static_cast<size_t>(id) < v.size() ? v[static_cast<size_t>(id)] : T(-1);
}

std::string describe_status(int status, const std::string& signal) {
  if (!signal.empty()) return fmt::format("killed by SIG{}", signal);
  return fmt::format("exit {}", status);
}

}  // namespace

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
  for (size_t h = 0; h < plan.hosts.size(); ++h)
    for (const auto& p : plan.hosts[h].processes) procs_.push_back(Proc{.host = h, .spec = &p});
}

const std::string& Runner::host_name(size_t host) const { return plan_.hosts[host].host.address; }

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
  return std::all_of(hosts_.begin(), hosts_.end(),
                     [](const HostState& h) { return h.lost || h.watchdog_closed; });
}

void Runner::fail(int status, const std::string& why, char how) {
  if (exit_code_ < 0) exit_code_ = status;
  if (cause_.empty()) cause_ = why;
  if (!tearing_down_) {
    emit_event(events_, "teardown", {{"reason", why}, {"exit_status", exit_code_}});
    out_.message(fmt::format("{}; stopping the job on every host", why));
    teardown(how);
  }
}

void Runner::teardown(char how) {
  double now = t_.now_ms();
  if (how == kKillNow) {
    killed_now_ = true;
    deadline_ms_ = now + kKillNowWaitMs;
  } else if (!tearing_down_) {
    deadline_ms_ = now + options_.kill_grace * 1000 + kTeardownSlackMs;
  }
  tearing_down_ = true;
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
}

void Runner::lose_host(size_t host, const std::string& why) {
  HostState& h = hosts_[host];
  if (h.lost) return;
  h.lost = true;
  t_.drop_host(host);
  emit_event(events_, "host_lost", {{"host", host_name(host)}, {"reason", why}});
  if (quit_sent_ && !tearing_down_) {
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

void Runner::on_signal(int signo) {
  if (signo == SIGQUIT) return request_stacks();
  if (signo == SIGTSTP) return suspend_job();
  if (signo == SIGCONT) return;  // a stop is seen by the time it took (poll_for)
  int code = exit_status_of_signal(signo);
  interrupted_ = true;
  if (tearing_down_ && signo == SIGINT && !killed_now_) {
    out_.message("second interrupt: killing every process now");
    if (exit_code_ < 0) exit_code_ = code;
    teardown(kKillNow);
    return;
  }
  fail(code, fmt::format("received SIG{}", sigabbrev_np(signo)));
}

void Runner::request_stacks() {
  if (tearing_down_ || quit_sent_ || started_ms_ < 0) {
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

void Runner::read_stdin() {
  char buf[65536];
  ssize_t n = ::read(stdin_fd_, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    t_.unwatch_fd(stdin_fd_);
    for (ChannelId c : stdin_targets_) t_.send_eof(c);
    stdin_fd_ = -1;
    return;
  }
  for (ChannelId c : stdin_targets_) t_.write(c, std::string_view(buf, static_cast<size_t>(n)));
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
    fail(kExitUsage, fmt::format("workdir {} does not exist on {} (or cannot be entered)",
                                 plan_.hosts[host].host.workdir, host_name(host)));
  } else if (line == kWatchdogPaused) {
    h.paused = true;
  } else if (line == kWatchdogResumed) {
    h.paused = false;
  } else if (line == kWatchdogLost) {
    // Not the host's fault: the launcher was silent for too long (excuse_stall says why). The
    // watchdog is tearing its host's processes down; everyone else follows.
    if (!quit_sent_ && !tearing_down_)
      fail(kExitHostFailure, fmt::format("the watchdog on {} ended the job there: {}",
                                         host_name(host), watchdog_gave_up_why()));
  } else if (line.rfind("killed ", 0) == 0 && quit_sent_ && !tearing_down_) {
    out_.message(fmt::format("{}: ended a process the job left behind: {}", host_name(host),
                             line.substr(7)));
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
    case TransportEvent::Kind::kClosed:
      h.watchdog_closed = true;
      if (!quit_sent_ && !tearing_down_)
        fail(kExitHostFailure,
             fmt::format("the watchdog on {} ended unexpectedly", host_name(host)));
      break;
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
      if (e.status != 0 && !tearing_down_ && restarts_in_place(p)) {
        p.restart_cause = fmt::format("{} on {} failed: {}", p.spec->label(), host_name(p.host),
                                      describe_status(e.status, e.signal));
        break;
      }
      p.exited = true;
      if (e.status != 0 && !tearing_down_ && !e.signal.empty() &&
          hosts_[p.host].may_have_given_up) {
        // Killed after the launcher stood still longer than the watchdogs wait, before its
        // watchdog answered again: by that watchdog's teardown, not by a failure of its own (the
        // watchdog's line may come after this).
        p.note = "ended by its watchdog";
        fail(kExitHostFailure,
             fmt::format("{} on {} was ended by its watchdog ({}): {}", p.spec->label(),
                         host_name(p.host), describe_status(e.status, e.signal),
                         watchdog_gave_up_why()));
        break;
      }
      if (e.status != 0 && !tearing_down_ && root_cause_ < 0) root_cause_ = static_cast<int>(index);
      if (e.status != 0 && !tearing_down_)
        fail(e.status, fmt::format("{} on {} failed: {}", p.spec->label(), host_name(p.host),
                                   describe_status(e.status, e.signal)));
      // A process the teardown killed reports the teardown's signal, whatever the job's status
      // (143 after a SIGTERM to the launcher is not a failure of every process).
      else if (tearing_down_ && e.status != 0 && (!e.signal.empty() || exit_code_ != e.status))
        p.note = teardown_note_;
      break;
    case TransportEvent::Kind::kOpenFailed:
      finish_process(p, fmt::format("not started: {}", e.data));
      fail(kExitHostFailure,
           fmt::format("cannot start {} on {}: {}", p.spec->label(), host_name(p.host), e.data));
      break;
    case TransportEvent::Kind::kClosed:
      if (!p.restart_cause.empty()) {
        if (!tearing_down_) return restart_process(index);
        p.exited = true;  // the teardown came first: the failed run's status stands
      }
      if (!p.exited && !tearing_down_)
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
  if (e.kind == TransportEvent::Kind::kHostLost) return lose_host(e.host, std::string(e.data));
  int proc = get(proc_of_channel_, e.channel);
  if (proc >= 0) return handle_process(static_cast<size_t>(proc), e);
  int host = get(host_of_watchdog_, e.channel);
  if (host >= 0) handle_watchdog(static_cast<size_t>(host), e);
}

bool Runner::start_watchdogs() {
  // The watchdog gives up after 2 heartbeats of silence, so that the whole teardown on a host
  // that lost us fits in the 3 heartbeats docs/life-cycle.md promises.
  if (start_view_) start_view_->phase(StartProgress::Phase::kWatchdogs);
  double now = t_.now_ms();
  for (size_t h = 0; h < hosts_.size(); ++h) {
    hosts_[h].watchdog =
        t_.exec(h, watchdog_command(plan_.job_id, 2 * options_.heartbeat, options_.kill_grace,
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
    if (!hosts_[h].ready && t_.tcp_liveness(h, 2 * heartbeat_ms_) != Transport::Liveness::kAcking)
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
  if (restarts_.size() < static_cast<size_t>(options_.max_restarts)) return true;
  out_.message(fmt::format("no process restart left (--max_restarts={})", options_.max_restarts));
  return false;
}

void Runner::restart_process(size_t index) {
  Proc& p = procs_[index];
  const Process& s = *p.spec;
  int rank = s.role == Role::kWorker ? s.rank : -1;
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

void Runner::start_processes() {
  for (size_t i = 0; i < procs_.size(); ++i) {
    Proc& p = procs_[i];
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
    // The others read /dev/null (set in their command): no EOF to send.
    exec_process(i);
    emit_event(events_, "process_started",
               {{"host", host_name(p.host)},
                {"process", s.label()},
                {"rank", rank_json(is_worker ? s.rank : -1)},
                {"log", p.log_name}});
    p.start_ms = t_.now_ms();
  }
  // An in-place restart opens a channel later: the promise waits for the end of the job then.
  if (options_.restart_policy != RestartPolicy::kProcess || options_.max_restarts == 0)
    promise_no_more_channels();
  if (start_view_) start_view_->processes_started(procs_.size());
  started_ms_ = last_output_ms_ = t_.now_ms();
  if (!stdin_targets_.empty())
    t_.watch_fd(stdin_fd_);
  else
    stdin_fd_ = -1;
}

void Runner::beat() {
  send_all(kBeat);
  next_beat_ms_ = t_.now_ms() + heartbeat_ms_;
}

// A host is lost when its watchdog has not echoed for 2 heartbeats (+ slack), unless the host's
// TCP stack still acknowledges what we send: then the host is alive but starved of CPU (or its
// watchdog is stuck) and gets up to starved_limit_ms() before it counts as lost.
void Runner::check_heartbeats(double now) {
  for (size_t h = 0; h < hosts_.size(); ++h) {
    const HostState& s = hosts_[h];
    if (s.lost || s.watchdog_closed) continue;
    double silent = now - s.last_echo_ms;
    if (silent <= 2 * heartbeat_ms_ + kEchoSlackMs) continue;
    bool acking = t_.tcp_liveness(h, 2 * heartbeat_ms_) == Transport::Liveness::kAcking;
    if (acking && silent <= starved_limit_ms()) continue;
    lose_host(h, fmt::format("no answer to heartbeats for {:.1f} s{}", silent / 1000,
                             acking ? " (its TCP still acknowledges: starved or stuck)" : ""));
  }
}

double Runner::starved_limit_ms() const { return std::max(60000.0, 10 * heartbeat_ms_); }

// --timeout and --hang_timeout, while the job runs. The silence rule is output from any process:
// a hang in one rank usually silences all of them (they wait for it in a collective), and it
// needs nothing from the script. A job silent by design needs a larger --hang_timeout.
void Runner::check_time_limits(double now) {
  if (started_ms_ < 0 || tearing_down_ || quit_sent_) return;
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

int Runner::timeout_ms(double now) const {
  double until = next_beat_ms_;
  if (started_ms_ >= 0 && !tearing_down_ && !quit_sent_) {
    if (options_.timeout > 0) until = std::min(until, started_ms_ + options_.timeout * 1000);
    if (options_.hang_timeout > 0)
      until = std::min(until, last_output_ms_ + options_.hang_timeout * 1000);
  }
  if (tearing_down_ || quit_sent_) until = std::min(until, deadline_ms_);
  // The status row: the start view leaves after kStartedShownMs, the running status every second.
  if (start_view_ && !start_view_->finished() && started_ms_ >= 0)
    until = std::min(until, started_ms_ + kStartedShownMs);
  if (running_line_) until = std::min(until, now + 1000);
  if (stacks_) until = std::min(until, stacks_deadline_ms_);
  if (suspending_) until = std::min(until, suspend_deadline_ms_);
  // Wake up when a silent host becomes lost, not at the next heartbeat after.
  for (size_t i = 0; i < hosts_.size(); ++i) {
    const HostState& h = hosts_[i];
    if (h.lost || h.watchdog_closed) continue;
    double due = h.last_echo_ms + 2 * heartbeat_ms_ + kEchoSlackMs;
    // A silent host that still acknowledges at the TCP level is looked at again every heartbeat.
    if (due <= now && t_.tcp_liveness(i, 2 * heartbeat_ms_) == Transport::Liveness::kAcking)
      due = std::min(h.last_echo_ms + starved_limit_ms(), now + heartbeat_ms_);
    until = std::min(until, due);
  }
  // Gathered console lines go out when their window has passed, not at the next event.
  if (int due = out_.due_in_ms(); due >= 0) until = std::min(until, now + due);
  return static_cast<int>(std::clamp(std::ceil(until - now), 1.0, 60000.0));
}

int Runner::run() {
  if (signal_fd_ >= 0) t_.watch_fd(signal_fd_);
  if (start_watchdogs())
    start_processes();
  else
    for (auto& p : procs_) finish_process(p, "not started");
  beat();
  if (std::exchange(suspend_pending_, false) && started_ms_ >= 0) suspend_job();
  while (true) {
    double now = t_.now_ms();
    // Before the end checks: losing the last host we wait for ends the job now, not after a poll.
    check_heartbeats(now);
    check_time_limits(now);
    check_stacks(now);
    if (pending_fail_) {
      auto [status, why] = *std::exchange(pending_fail_, std::nullopt);
      fail(status, why);
    }
    if (finish_suspend(now)) continue;  // suspended and resumed: the clock moved on
    if (processes_ended() && !quit_sent_) {
      // Every process ended: let each watchdog sweep what the job left behind, then finish.
      quit_sent_ = true;
      promise_no_more_channels();
      if (!tearing_down_) {
        send_all(kQuit);
        deadline_ms_ = now + options_.kill_grace * 1000 + kTeardownSlackMs;
      }
    }
    if (processes_done() && watchdogs_done()) break;
    if (tearing_down_ && !channels_killed_ && watchdogs_done()) kill_channels();
    if ((tearing_down_ || quit_sent_) && now >= deadline_ms_) {
      if (!killed_now_) {
        out_.message("hosts did not confirm the end of the job in time; killing what is left");
        teardown(kKillNow);
        continue;
      }
      give_up();
      break;
    }
    if (now >= next_beat_ms_) beat();
    update_status(now);
    poll_for(timeout_ms(now));
    out_.flush();
  }
  check_stacks(-1);
  if (start_view_) start_view_->finish();
  if (running_line_) running_line_->hide();
  out_.drain();
  return exit_code_ < 0 ? kExitOk : exit_code_;
}

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
  if (stuck_ms >= 2 * heartbeat_ms_)  // their silence limit passed
    for (HostState& h : hosts_) h.may_have_given_up = true;
  if (stuck_ms < kStallToldMs) return;
  emit_event(events_, "launcher_stalled", {{"seconds", stuck_ms / 1000}});
  out_.message(fmt::format(
      "the launcher itself stood still for {:.1f} s (stopped by SIGSTOP or a debugger, or starved "
      "of CPU); no host is blamed for it{}",
      stuck_ms / 1000,
      stuck_ms >= 2 * heartbeat_ms_
          ? fmt::format(", but the watchdogs end the job on their hosts after {:g} s without it",
                        2 * options_.heartbeat)
          : ""));
}

std::string Runner::watchdog_gave_up_why() const {
  return fmt::format(
      "it heard nothing from the launcher for {:g} s{}", 2 * options_.heartbeat,
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
  if (tearing_down_ || quit_sent_) {
    out_.message("Ctrl-Z: the job is ending; it is not suspended");
    return;
  }
  if (started_ms_ < 0) {
    if (!std::exchange(suspend_pending_, true))
      out_.message("Ctrl-Z: the job is suspended once its processes have started");
    return;
  }
  if (suspending_) return;
  send_all(kSuspend);
  suspending_ = true;
  suspend_deadline_ms_ = t_.now_ms() + kSuspendWaitMs;
}

bool Runner::finish_suspend(double now) {
  if (!suspending_) return false;
  if (tearing_down_ || quit_sent_) {  // the watchdogs continue the processes before a teardown
    suspending_ = false;
    return false;
  }
  const size_t hosts = live_watchdogs(false), paused = live_watchdogs(true);
  if (paused < hosts && now < suspend_deadline_ms_) return false;
  suspending_ = false;
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

bool should_restart(const AttemptResult& r, int attempt, int max_restarts) {
  return r.status != kExitOk && !r.interrupted && !r.final && r.status != kExitUnconfirmed &&
         attempt <= max_restarts;
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

std::vector<std::string> Runner::lost_hosts() const {
  std::vector<std::string> lost;
  for (size_t h = 0; h < hosts_.size(); ++h)
    if (hosts_[h].lost) lost.push_back(host_name(h));
  return lost;
}

std::string Runner::root_cause_host() const {
  return root_cause_ < 0 ? "" : host_name(procs_[static_cast<size_t>(root_cause_)].host);
}

HostRoster::HostRoster(Plan plan, const Options& options, Say say)
    : plan_(std::move(plan)),
      options_(options),
      say_(std::move(say)),
      has_spares_(!plan_.spares.empty()) {}

std::string HostRoster::after_attempt(const AttemptResult& result) {
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
    if (h.is_master) old_master = h.host.address;
  try {
    plan_ = apply_replacements(plan_, d.replacements, options_);
  } catch (const InputError& e) {
    return fmt::format("cannot restart: a spare host does not fit the job: {}", e.what());
  }
  for (const Replacement& r : d.replacements) {
    say_(fmt::format("spare host {} replaces {} as node rank {} ({})", r.spare, r.host, r.node_rank,
                     r.reason));
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
