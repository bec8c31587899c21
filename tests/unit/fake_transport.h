// A scripted stand-in for the SSH pool (transport.h), for the runner's tests: a fake clock that
// poll() advances to the next scheduled event (it never sleeps), and hosts whose behaviour comes
// from a table (HostScript / ProcScript), not from code in the tests (ninja's FakeCommandRunner,
// leveldb's EnvWrapper).
//
// The first exec() on a host must be the watchdog (a command watchdog_args_of recognises, which
// also gives its times); the fake plays the watchdog's protocol of command.h with its constants: it
// prints its ready line, echoes "h\n" for every 'h', and on 'q' / 'k' ends every process of its
// host still running with SIGTERM (status 143) after a delay, on 'K' with SIGKILL (137) at once
// (even in the middle of a teardown, as command.h promises), then closes; on 'z' it says "paused"
// and has no silence limit until the next byte ('r': "resumed"); it also ends the job by
// itself when no byte comes for the silence its arguments give (as the real one does after losing
// the launcher). The next exec() calls on a host are its processes, scripted by
// HostScript::processes in that order.
//
// Every write, EOF, exec and drop_host is recorded with its time so that tests can assert them. A
// runaway runner (clock past kMaxClockMs or too many polls) makes poll() throw.
#pragma once

#include <fmt/format.h>
#include <poll.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fake_clock.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/transport.h"

namespace msrun_ssh::fake {

// One process, by the order exec() is called for it on its host. Times: seconds after its exec.
struct ProcScript {
  double exit_at = -1;      // when it ends by itself; -1: it runs until torn down
  int status = 0;           // its exit status then (128+n for a death by signal, with `signal`)
  std::string signal;       // "SEGV", ... or empty
  bool exit_status = true;  // false: the channel closes without any exit status
  std::vector<std::pair<double, std::string>> output;  // stdout chunks
  std::vector<std::pair<double, std::string>> errors;  // stderr chunks
  bool dies_on_teardown = true;  // false: ignores SIGTERM; only the SIGKILL after the grace ends it
  std::string open_error;  // not empty: the channel fails to open (kOpenFailed) with this reason
  // false: the watchdog's sweeps never find it (as a command whose exec reached sshd after the
  // sweep); only an SSH "signal" on its channel (Transport::kill) ends it.
  bool seen_by_sweep = true;
  // true: its exit status comes at exit_at, but its channel stays open (a grandchild in a session
  // of its own holds its output) until a sweep or a kill ends that.
  bool stays_open = false;
};

// One host. Times are absolute seconds on the fake clock unless said otherwise.
struct HostScript {
  bool watchdog_answers = true;  // the watchdog prints its ready line
  double ready_after = 0.01;     // ... that long (s) after its exec
  bool echoes = true;            // it answers every 'h' with "h\n"
  double echo_delay = 0.001;     // s
  bool obeys = true;             // false: 'q', 'k', 'K' are read and ignored (a stuck teardown)
  double teardown_delay = 0.1;   // s from 'q' / 'k' to the SIGTERM of every process left
  double kill_delay = 0.01;      // s from 'K' to the SIGKILL (also after the grace, for survivors)
  double silent_from = -1;       // from then on nothing at all comes from the host (cut off)
  bool tcp_acks = false;  // tcp_liveness() says kAcking until silent_from (default: kUnknown)
  // Its ssh config's ServerAliveInterval and ServerAliveCountMax (Transport::server_alive).
  std::optional<Transport::ServerAlive> server_alive;
  double lost_at = -1;  // then the transport reports kHostLost
  std::string lost_reason = "connection reset by peer";
  double watchdog_exits_at = -1;  // then the watchdog channel closes by itself
  // Then the watchdog gets SIGTERM (Slurm ending its step): it says "terminated", SIGKILLs the
  // host's processes and ends.
  double watchdog_terminated_at = -1;
  bool no_workdir = false;               // the watchdog says the workdir is missing and ends
  std::vector<std::string> sweep_lines;  // printed by the watchdog when it sweeps ("killed ...")
  bool honours_signals = true;           // sshd delivers SSH "signal" requests (OpenSSH >= 7.9)
  std::string name;                      // the host's own name in the ready line (may be "")
  std::vector<ProcScript> processes;
  // Commands that are not the job's processes (a stack dump's): an exec whose command contains
  // the key is played by its script and is not counted among `processes`.
  std::vector<std::pair<std::string, ProcScript>> other_commands;
};

class FakeTransport : public Transport, public FakeClock {
 public:
  static constexpr double kMaxClockMs = 24 * 3600 * 1000.0;
  static constexpr int kMaxPolls = 1000000;

  struct Write {
    double at_ms;
    std::string bytes;
  };
  struct Channel {
    ChannelId id = -1;
    size_t host = 0;
    bool watchdog = false;
    int index = -1;  // process index on its host (-1: the watchdog or another command)
    const ProcScript* other = nullptr;  // the script of one of HostScript::other_commands
    std::string command;
    double opened_ms = 0;
    std::vector<Write> writes;
    std::vector<double> eofs;    // times of send_eof
    bool running = false;        // the remote command is alive
    bool closed = false;         // kClosed was (or would have been) sent
    bool exit_reported = false;  // kExit was sent while it still runs (ProcScript::stays_open)
    // Watchdog state.
    bool ready = false;
    bool stopping = false;  // tearing down after q / k / silence
    bool killing = false;   // after K
    std::string queued;     // bytes that arrived before the ready line
    uint64_t byte_gen = 0;  // bumps with every byte read, to expire the silence timer
    bool paused = false;    // after 'z': no silence limit until the next byte
    WatchdogArgs args;      // what the watchdog command was made from
  };

  explicit FakeTransport(std::vector<HostScript> hosts) : hosts_(std::move(hosts)) {
    dropped_.assign(hosts_.size(), false);
    for (size_t h = 0; h < hosts_.size(); ++h) {
      const HostScript& s = hosts_[h];
      if (s.lost_at >= 0) at(s.lost_at, [this, h] { host_lost(h); });
    }
  }

  // --- Transport ---------------------------------------------------------------------------------

  ChannelId exec(size_t host, const std::string& command) override {
    if (host >= hosts_.size()) throw std::logic_error("FakeTransport: exec on unknown host");
    Channel c;
    c.id = static_cast<ChannelId>(channels_.size());
    c.host = host;
    c.command = command;
    c.opened_ms = now_;
    std::optional<WatchdogArgs> args = watchdog_args_of(command);
    c.watchdog = args.has_value();
    if (args) c.args = std::move(*args);
    for (const auto& [key, proc] : script(host).other_commands)
      if (!c.other && command.find(key) != std::string::npos) c.other = &proc;
    // What ends a failed run's leftovers before it starts again in place (leftovers_command):
    // unless a test scripts it, it ends 50 ms after its exec.
    static const ProcScript kLeftovers{.exit_at = 0.05};
    if (!c.other && command.find("msrun-ssh-leftovers") != std::string::npos) c.other = &kLeftovers;
    if (!no_more_channels_at.empty() && !c.other)
      throw std::logic_error("FakeTransport: a process's exec after no_more_channels");
    int before = 0;
    for (const Channel& o : channels_)
      if (o.host == host && !o.watchdog && !o.other) ++before;
    bool has_watchdog = watchdog(host) >= 0;
    if (c.watchdog == has_watchdog)
      throw std::logic_error("FakeTransport: the watchdog must be the first exec on a host");
    c.index = c.watchdog || c.other ? -1 : before;
    channels_.push_back(std::move(c));
    Channel& ch = channels_.back();
    if (ch.watchdog)
      start_watchdog(ch);
    else
      start_process(ch);
    return ch.id;
  }

  void no_more_channels() override { no_more_channels_at.push_back(now_); }

  // Every command starts at its exec here, so there is never anything to cancel.
  void cancel(ChannelId id) override { cancels.push_back(id); }

  void kill(ChannelId id, const char* signal) override {
    Channel& c = chan(id);
    kills.push_back({id, signal, now_});
    if (!c.running || dropped_[c.host] || !script(c.host).honours_signals) return;
    after(script(c.host).kill_delay,
          [this, id, sig = std::string(signal)] { end(id, 128 + (sig == "KILL" ? 9 : 15), sig); });
  }

  void write(ChannelId id, std::string_view data) override {
    Channel& c = chan(id);
    c.writes.push_back({now_, std::string(data)});
    if (dropped_[c.host]) ++writes_after_drop;
    if (c.closed) ++writes_after_close;
    // A cut-off host never sees the bytes.
    if (!c.watchdog || c.closed || dropped_[c.host] || silent(c.host)) return;
    for (char b : data) {
      if (!c.ready)
        c.queued += b;
      else
        control_byte(c.id, b);
    }
  }

  void send_eof(ChannelId id) override { chan(id).eofs.push_back(now_); }

  // What a test says the transport still holds of a channel's stdin (0 unless it says).
  std::function<size_t(ChannelId)> unsent_bytes;
  size_t unsent(ChannelId id) const override { return unsent_bytes ? unsent_bytes(id) : 0; }

  void watch_fd(int fd) override {
    watched.push_back(fd);
    fds_.push_back(fd);
  }
  void unwatch_fd(int fd) override {
    unwatched.push_back(fd);
    std::erase(fds_, fd);
  }

  void drop_host(size_t host) override {
    drops.push_back({host, now_});
    dropped_.at(host) = true;
  }

  void poll(int timeout_ms, const EventHandler& handler) override {
    if (++polls_ > kMaxPolls) throw std::runtime_error("FakeTransport: too many polls");
    polled_timeouts.push_back(timeout_ms);
    if (deliver_ready_fds(handler)) return;
    advance(timeout_ms, "FakeTransport");
    if (now_ > kMaxClockMs) throw std::runtime_error("FakeTransport: the fake clock ran away");
    std::vector<Pending> batch;
    batch.swap(pending_);
    for (Pending& p : batch) {
      if (dropped_[p.event.host]) continue;  // drop_host: no further events
      p.event.data = p.data;
      handler(p.event);
    }
  }

  double now_ms() const override { return now_; }

  // --- For the tests -----------------------------------------------------------------------------

  // Runs `fn` at `seconds` on the fake clock, inside poll() (as a signal or stdin would arrive).
  void at(double seconds, std::function<void()> fn) { schedule(ms(seconds), std::move(fn)); }

  // The launcher stands still for `seconds` (stopped, a debugger) while the hosts go on: the clock
  // moves on and everything due meanwhile happens; its events wait for the next poll().
  void stand_still(double seconds) {
    const double until = now_ + ms(seconds);
    while (now_ < until) advance(static_cast<int>(std::ceil(until - now_)), "FakeTransport");
  }

  const std::vector<Channel>& channels() const { return channels_; }
  const Channel& channel(ChannelId id) const { return channels_.at(static_cast<size_t>(id)); }
  ChannelId channel_count() const { return static_cast<ChannelId>(channels_.size()); }

  ChannelId watchdog(size_t host) const {
    for (const Channel& c : channels_)
      if (c.host == host && c.watchdog) return c.id;
    return -1;
  }
  ChannelId process(size_t host, int index) const {
    for (const Channel& c : channels_)
      if (c.host == host && !c.watchdog && c.index == index) return c.id;
    return -1;
  }
  // The execs of processes (neither a watchdog nor one of the other commands).
  size_t process_execs() const {
    size_t n = 0;
    for (const Channel& c : channels_) n += c.watchdog || c.other ? 0 : 1;
    return n;
  }
  // The execs of commands containing `key`.
  size_t execs_of(std::string_view key) const {
    size_t n = 0;
    for (const Channel& c : channels_) n += c.command.find(key) != std::string::npos ? 1 : 0;
    return n;
  }

  // Everything written to a channel, concatenated.
  std::string written(ChannelId id) const {
    std::string all;
    if (id < 0) return all;
    for (const Write& w : channel(id).writes) all += w.bytes;
    return all;
  }
  // The control bytes a host's watchdog got ("hhk").
  std::string control(size_t host) const { return written(watchdog(host)); }
  // When each `byte` was written to the host's watchdog (ms).
  std::vector<double> control_times(size_t host, char byte) const {
    std::vector<double> t;
    ChannelId w = watchdog(host);
    if (w < 0) return t;
    for (const Write& x : channel(w).writes)
      for (char b : x.bytes)
        if (b == byte) t.push_back(x.at_ms);
    return t;
  }

  std::vector<std::pair<size_t, double>> drops;  // drop_host calls: host, time
  struct Kill {
    ChannelId channel;
    std::string signal;
    double at_ms;
  };
  std::vector<Kill> kills;         // kill calls
  std::vector<ChannelId> cancels;  // cancel calls
  std::vector<int> watched, unwatched;
  std::vector<int> polled_timeouts;
  std::vector<double> no_more_channels_at;  // when the runner promised it
  int writes_after_drop = 0;
  int writes_after_close = 0;

 private:
  struct Pending {
    TransportEvent event;
    std::string data;
  };

  static double ms(double seconds) { return std::round(seconds * 1e6) / 1e3; }

  Channel& chan(ChannelId id) { return channels_.at(static_cast<size_t>(id)); }
  const HostScript& script(size_t host) const { return hosts_[host]; }

  void after(double seconds, std::function<void()> fn) {
    schedule(now_ + ms(seconds), std::move(fn));
  }

  std::optional<ServerAlive> server_alive(size_t host) const override {
    return script(host).server_alive;
  }

  Liveness tcp_liveness(size_t host, double) const override {
    if (!script(host).tcp_acks) return Liveness::kUnknown;
    return silent(host) ? Liveness::kSilent : Liveness::kAcking;
  }

  bool silent(size_t host) const {
    const HostScript& s = script(host);
    return s.silent_from >= 0 && now_ >= ms(s.silent_from);
  }

  void emit(TransportEvent e, std::string data = {}) {
    if (silent(e.host)) return;
    pending_.push_back(Pending{std::move(e), std::move(data)});
  }
  void emit_data(const Channel& c, std::string bytes, bool is_stderr = false) {
    TransportEvent e;
    e.kind = TransportEvent::Kind::kData;
    e.channel = c.id;
    e.host = c.host;
    e.is_stderr = is_stderr;
    emit(e, std::move(bytes));
  }

  // Ends a running command: kExit (unless `with_status` is false), then kClosed.
  void end(ChannelId id, int status, const std::string& signal, bool with_status = true) {
    Channel& c = chan(id);
    if (!c.running) return;
    c.running = false;
    c.closed = true;
    TransportEvent e;
    e.channel = c.id;
    e.host = c.host;
    if (with_status && !std::exchange(c.exit_reported, false)) {
      e.kind = TransportEvent::Kind::kExit;
      e.status = status;
      e.signal = signal;
      emit(e);
    }
    e.kind = TransportEvent::Kind::kClosed;
    e.status = 0;
    e.signal.clear();
    emit(e);
  }

  void start_process(Channel& c) {
    static const ProcScript kForever;
    const HostScript& hs = script(c.host);
    const ProcScript& s = c.other ? *c.other
                          : static_cast<size_t>(c.index) < hs.processes.size()
                              ? hs.processes[c.index]
                              : kForever;
    ChannelId id = c.id;
    if (!s.open_error.empty()) {
      c.closed = true;
      after(0.001, [this, id, why = s.open_error] {
        TransportEvent e;
        e.kind = TransportEvent::Kind::kOpenFailed;
        e.channel = id;
        e.host = chan(id).host;
        emit(e, why);
      });
      return;
    }
    c.running = true;
    for (const auto& [t, bytes] : s.output)
      after(t, [this, id, b = bytes] {
        if (chan(id).running) emit_data(chan(id), b);
      });
    for (const auto& [t, bytes] : s.errors)
      after(t, [this, id, b = bytes] {
        if (chan(id).running) emit_data(chan(id), b, true);
      });
    if (s.exit_at >= 0 && s.stays_open)
      after(s.exit_at, [this, id, s] { report_exit(id, s.status, s.signal); });
    else if (s.exit_at >= 0)
      after(s.exit_at, [this, id, s] { end(id, s.status, s.signal, s.exit_status); });
  }

  // A command's exit status while its channel stays open (ProcScript::stays_open).
  void report_exit(ChannelId id, int status, const std::string& signal) {
    Channel& c = chan(id);
    if (!c.running) return;
    c.exit_reported = true;
    TransportEvent e;
    e.kind = TransportEvent::Kind::kExit;
    e.channel = c.id;
    e.host = c.host;
    e.status = status;
    e.signal = signal;
    emit(e);
  }

  void start_watchdog(Channel& c) {
    c.running = true;
    const HostScript& s = script(c.host);
    ChannelId id = c.id;
    if (s.watchdog_exits_at >= 0) at(s.watchdog_exits_at, [this, id] { end(id, 0, ""); });
    if (s.watchdog_terminated_at >= 0)
      at(s.watchdog_terminated_at, [this, id] {
        Channel& w = chan(id);
        if (!w.running) return;
        w.killing = true;
        emit_data(w, std::string(kWatchdogTerminated) + "\n");
        kill_all(w.host, true);
        end(id, 0, "");
      });
    if (!s.watchdog_answers) return;
    if (s.no_workdir) {
      after(s.ready_after, [this, id] {
        std::string line(kWatchdogNoWorkdir);
        line += '\n';  // appended: g++ 12 warns wrongly on operator+ here
        emit_data(chan(id), line);
        end(id, 0, "");
      });
      return;
    }
    after(s.ready_after, [this, id] {
      Channel& w = chan(id);
      if (!w.running) return;
      w.ready = true;
      emit_data(w, watchdog_ready_line(4242, script(w.host).name) + "\n");
      arm_silence(id);
      std::string queued;
      queued.swap(w.queued);
      for (char b : queued) control_byte(id, b);
    });
  }

  // The real watchdog gives up on the launcher when no byte arrives for its silence time.
  void arm_silence(ChannelId id) {
    Channel& w = chan(id);
    uint64_t gen = ++w.byte_gen;
    after(w.args.silence_s, [this, id, gen] {
      Channel& c = chan(id);
      if (c.byte_gen != gen || !c.running || c.stopping || c.killing) return;
      emit_data(c, std::string(kWatchdogLost) + "\n");
      sweep(id, c.args.lost_grace_s(), 0);
    });
  }

  void control_byte(ChannelId id, char b) {
    Channel& c = chan(id);
    const HostScript& s = script(c.host);
    if (!c.running || c.killing) return;
    if (c.stopping && b != kKillNow) return;  // busy with a teardown
    if (b == kSuspend) {  // the processes stop; no silence limit until the next byte
      ++c.byte_gen;
      c.paused = true;
      emit_data(c, std::string(kWatchdogPaused) + "\n");
      return;
    }
    if (std::exchange(c.paused, false) && b == kResume) {
      emit_data(c, std::string(kWatchdogResumed) + "\n");
      arm_silence(id);
      return;
    }
    arm_silence(id);
    if (b == kBeat) {
      if (s.echoes)
        after(s.echo_delay, [this, id] {
          if (chan(id).running) emit_data(chan(id), std::string{kBeat, '\n'});
        });
    } else if ((b == kQuit || b == kTeardown || b == kStacksThenTeardown) && s.obeys) {
      c.stopping = true;
      if (b == kStacksThenTeardown) print_stacks(c.host);
      sweep(id, c.args.grace_s(), s.teardown_delay);
    } else if (b == kKillNow && s.obeys) {
      c.killing = true;
      after(s.kill_delay, [this, id] {
        kill_all(chan(id).host, true);
        finish_watchdog(id);
      });
    }
  }

  // What faulthandler prints on SIGABRT, from every running process of the host: one thread,
  // whose innermost frame names the process's index ("in wait_3").
  void print_stacks(size_t host) {
    for (Channel& c : channels_) {
      if (c.host != host || c.watchdog || c.other || !c.running) continue;
      emit_data(c,
                fmt::format("Fatal Python error: Aborted\n\nCurrent thread 0x{:x} (most recent "
                            "call first):\n  File \"t.py\", line 7 in wait_{}\n",
                            0x7f00 + c.id, c.index),
                true);
    }
  }

  // SIGTERM to every process of the host after `delay`; SIGKILL to survivors after `grace`.
  void sweep(ChannelId id, double grace, double delay) {
    chan(id).stopping = true;
    after(delay, [this, id, grace] {
      Channel& w = chan(id);
      if (!w.running || w.killing) return;
      for (const std::string& line : script(w.host).sweep_lines) emit_data(w, line + "\n");
      if (!kill_all(w.host, false)) return finish_watchdog(id);
      after(grace + script(w.host).kill_delay, [this, id] {
        if (chan(id).killing) return;
        kill_all(chan(id).host, true);
        finish_watchdog(id);
      });
    });
  }

  // Ends the host's running processes (SIGKILL, or SIGTERM for those that die of it); returns
  // whether some survived.
  bool kill_all(size_t host, bool hard) {
    bool survivors = false;
    for (Channel& c : channels_) {
      if (c.host != host || c.watchdog || c.other || !c.running) continue;
      const HostScript& hs = script(host);
      bool scripted = static_cast<size_t>(c.index) < hs.processes.size();
      if (scripted && !hs.processes[c.index].seen_by_sweep) continue;
      bool dies = hard || !scripted || hs.processes[c.index].dies_on_teardown;
      if (dies)
        end(c.id, hard ? 137 : 143, hard ? "KILL" : "TERM");
      else
        survivors = true;
    }
    return survivors;
  }

  void finish_watchdog(ChannelId id) {
    if (!chan(id).running) return;
    emit_data(chan(id), std::string(kWatchdogDone) + "\n");
    end(id, 0, "");
  }

  void host_lost(size_t host) {
    TransportEvent e;
    e.kind = TransportEvent::Kind::kHostLost;
    e.host = host;
    emit(e, script(host).lost_reason);
    // Its channels close after it (unless the runner drops the host first).
    for (Channel& c : channels_)
      if (c.host == host && c.running) {
        c.running = false;
        c.closed = true;
        TransportEvent x;
        x.kind = TransportEvent::Kind::kClosed;
        x.channel = c.id;
        x.host = host;
        emit(x);
      }
  }

  bool deliver_ready_fds(const EventHandler& handler) {
    if (fds_.empty()) return false;
    std::vector<pollfd> p;
    for (int fd : fds_) p.push_back({fd, POLLIN, 0});
    if (::poll(p.data(), p.size(), 0) <= 0) return false;
    bool any = false;
    for (const pollfd& x : p) {
      if (!(x.revents & (POLLIN | POLLHUP | POLLERR))) continue;
      any = true;
      TransportEvent e;
      e.kind = TransportEvent::Kind::kFdReady;
      e.fd = x.fd;
      handler(e);
    }
    return any;
  }

  std::vector<HostScript> hosts_;
  std::vector<Channel> channels_;
  std::vector<bool> dropped_;
  std::vector<int> fds_;
  std::vector<Pending> pending_;
  int polls_ = 0;
};

}  // namespace msrun_ssh::fake
