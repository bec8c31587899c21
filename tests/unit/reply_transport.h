// A second stand-in for the SSH pool (transport.h), simpler than fake_transport.h: no watchdog
// protocol, for code that runs batches of short commands (batch.h, `stop`, `check`). Every command
// gets a scripted Reply, chosen by a table of rules (host and a word of the command line); a fake
// clock that poll() advances to the next scheduled event (it never sleeps). Every exec, write,
// EOF and kill is recorded for the tests to assert. A runaway caller (too many polls, or a poll
// that would block forever) makes poll() throw.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fake_clock.h"
#include "msrun_ssh/transport.h"

namespace msrun_ssh::fake {

// How one command behaves. Times: seconds after its exec (or after its stdin's EOF for
// `after_eof`, after the write that completed its stdin's line `line` for `after_line`).
struct Reply {
  std::vector<std::pair<double, std::string>> output;  // stdout chunks
  std::vector<std::pair<double, std::string>> errors;  // stderr chunks
  double exit_at = 0.01;   // when it ends by itself; -1: it runs until killed (or until_eof)
  int status = 0;          // its exit status then
  bool until_eof = false;  // it runs until its stdin's EOF, prints `after_eof`, then ends
  std::vector<std::pair<double, std::string>> after_eof;  // stdout chunks after the EOF
  std::string open_error;  // not empty: the channel fails to open (kOpenFailed) with this reason
  std::vector<std::pair<double, std::string>> after_line;  // stdout chunks after line `line`
  size_t line = 1;                                         // of its stdin
};

class ReplyTransport : public Transport, public FakeClock {
 public:
  static constexpr size_t kAnyHost = std::numeric_limits<size_t>::max();
  static constexpr int kMaxPolls = 100000;

  struct Exec {
    size_t host;
    std::string command;
    double at_ms;
  };
  struct Channel {
    size_t host = 0;
    Reply reply;
    bool running = false;
    std::string written;  // everything written to its stdin
    double eof_ms = -1;   // when its stdin was closed (-1: never)
  };
  struct Kill {
    ChannelId channel;
    std::string signal;
    double at_ms;
  };

  // A command on `host` (kAnyHost: any) whose command line contains `word` gets `reply`; the first
  // rule that matches wins. A command no rule matches runs until killed, silently.
  void on(const std::string& word, Reply reply, size_t host = kAnyHost) {
    rules_.push_back({host, word, std::move(reply)});
  }

  // At `seconds`, the connection to `host` breaks: kHostLost, then its open channels close.
  void lose(size_t host, double seconds, std::string why) {
    schedule(ms(seconds), [this, host, why = std::move(why)] { host_lost(host, why); });
  }

  // At `seconds` on the fake clock, `fn` runs (a signal to the caller, say).
  void at(double seconds, std::function<void()> fn) { schedule(ms(seconds), std::move(fn)); }

  // --- Transport ---------------------------------------------------------------------------------

  ChannelId exec(size_t host, const std::string& command) override {
    execs.push_back({host, command, now_});
    ChannelId id = static_cast<ChannelId>(channels_.size());
    channels_.push_back({host, reply_for(host, command)});
    const Reply& r = channels_.back().reply;
    if (!r.open_error.empty()) {
      after(0.001, [this, id] {
        emit(event_of(TransportEvent::Kind::kOpenFailed, id), reply(id).open_error);
      });
      return id;
    }
    channels_.back().running = true;
    play(id, r.output, r.errors, r.exit_at);
    return id;
  }

  void write(ChannelId id, std::string_view data) override {
    Channel& c = chan(id);
    auto lines = [&c] {
      return static_cast<size_t>(std::count(c.written.begin(), c.written.end(), '\n'));
    };
    bool had_line = lines() >= c.reply.line;
    c.written += data;
    if (c.running && !had_line && lines() >= c.reply.line) play(id, c.reply.after_line, {}, -1);
  }

  void send_eof(ChannelId id) override {
    Channel& c = chan(id);
    if (c.eof_ms >= 0) return;
    c.eof_ms = now_;
    if (c.running && c.reply.until_eof) play(id, c.reply.after_eof, {}, c.reply.exit_at);
  }

  void cancel(ChannelId id) override { cancels.push_back(id); }

  // The command ends at once by the signal (128+9 for KILL, else 128+15).
  void kill(ChannelId id, const char* signal) override {
    kills.push_back({id, signal, now_});
    std::string sig = signal;
    schedule(now_, [this, id, sig] { end(id, 128 + (sig == "KILL" ? 9 : 15), sig); });
  }

  void no_more_channels() override {}
  void watch_fd(int) override {}
  void unwatch_fd(int) override {}
  void drop_host(size_t host) override { drops.push_back(host); }

  void poll(int timeout_ms, const EventHandler& handler) override {
    if (++polls_ > kMaxPolls) throw std::runtime_error("ReplyTransport: too many polls");
    advance(timeout_ms, "ReplyTransport");
    std::vector<Pending> batch;
    batch.swap(pending_);
    for (Pending& p : batch) {
      p.event.data = p.data;
      handler(p.event);
    }
  }

  double now_ms() const override { return now_; }

  // --- For the tests -----------------------------------------------------------------------------

  const Channel& channel(ChannelId id) const { return channels_.at(static_cast<size_t>(id)); }
  // The channel of the n-th exec whose command line contains `word` (-1: none).
  ChannelId find(const std::string& word, int n = 0) const {
    for (size_t i = 0; i < execs.size(); ++i)
      if (execs[i].command.find(word) != std::string::npos && n-- == 0)
        return static_cast<ChannelId>(i);
    return -1;
  }

  std::vector<Exec> execs;  // in order; the index is the channel id
  std::vector<Kill> kills;
  std::vector<ChannelId> cancels;
  std::vector<size_t> drops;

 private:
  struct Rule {
    size_t host;
    std::string word;
    Reply reply;
  };
  struct Pending {
    TransportEvent event;
    std::string data;
  };
  using Chunks = std::vector<std::pair<double, std::string>>;

  static double ms(double seconds) { return std::round(seconds * 1e6) / 1e3; }

  Reply reply_for(size_t host, const std::string& command) const {
    for (const Rule& r : rules_)
      if ((r.host == kAnyHost || r.host == host) && command.find(r.word) != std::string::npos)
        return r.reply;
    return Reply{.exit_at = -1};
  }

  Channel& chan(ChannelId id) { return channels_.at(static_cast<size_t>(id)); }
  const Reply& reply(ChannelId id) { return chan(id).reply; }

  TransportEvent event_of(TransportEvent::Kind k, ChannelId id) {
    TransportEvent e;
    e.kind = k;
    e.channel = id;
    e.host = chan(id).host;
    return e;
  }

  void after(double seconds, std::function<void()> fn) {
    schedule(now_ + ms(seconds), std::move(fn));
  }

  void emit(TransportEvent e, std::string data = {}) {
    pending_.push_back(Pending{std::move(e), std::move(data)});
  }

  // Schedules the chunks and the end (`exit_at` < 0: none) from now on.
  void play(ChannelId id, const Chunks& out, const Chunks& err, double exit_at) {
    for (const auto& [t, bytes] : out) after(t, [this, id, b = bytes] { data(id, b, false); });
    for (const auto& [t, bytes] : err) after(t, [this, id, b = bytes] { data(id, b, true); });
    bool waits_for_eof = reply(id).until_eof && chan(id).eof_ms < 0;
    if (exit_at >= 0 && !waits_for_eof)
      after(exit_at, [this, id] { end(id, reply(id).status, ""); });
  }

  void data(ChannelId id, const std::string& bytes, bool is_stderr) {
    if (!chan(id).running) return;
    TransportEvent e = event_of(TransportEvent::Kind::kData, id);
    e.is_stderr = is_stderr;
    emit(e, bytes);
  }

  // kExit, then kClosed.
  void end(ChannelId id, int status, const std::string& signal) {
    Channel& c = chan(id);
    if (!c.running) return;
    c.running = false;
    TransportEvent e = event_of(TransportEvent::Kind::kExit, id);
    e.status = status;
    e.signal = signal;
    emit(e);
    emit(event_of(TransportEvent::Kind::kClosed, id));
  }

  void host_lost(size_t host, const std::string& why) {
    TransportEvent e;
    e.kind = TransportEvent::Kind::kHostLost;
    e.host = host;
    emit(e, why);
    for (size_t i = 0; i < channels_.size(); ++i)
      if (channels_[i].host == host && channels_[i].running) {
        channels_[i].running = false;
        emit(event_of(TransportEvent::Kind::kClosed, static_cast<ChannelId>(i)));
      }
  }

  std::vector<Rule> rules_;
  std::vector<Channel> channels_;
  std::vector<Pending> pending_;
  int polls_ = 0;
};

}  // namespace msrun_ssh::fake
