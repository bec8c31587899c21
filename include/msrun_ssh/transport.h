// What the runner needs from the hosts, and nothing more: start a command on a host, write to its
// stdin, and wait for typed events. SshPool (ssh.h) implements it over libssh; the runner's tests
// implement it with a scripted fake and a fake clock.
#pragma once

#include <time.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "msrun_ssh/base.h"

namespace msrun_ssh {

using ChannelId = int;

// Milliseconds of CLOCK_MONOTONIC: the clock of the real transports' now_ms().
struct TransportEvent {
  enum class Kind {
    kData,        // `data` arrived on the channel's stdout (or stderr when is_stderr)
    kExit,        // the remote command ended: `status` is the exit code or 128+signal
    kClosed,      // the channel is closed (after kExit, or without one when the host went away)
    kOpenFailed,  // the channel could not be opened / exec'd: `data` says why
    kHostLost,    // the connection to `host` broke: `data` says why; its channels close after it
    kFdReady,     // a watched descriptor (`fd`) is readable
  };
  Kind kind = Kind::kData;
  ChannelId channel = -1;
  size_t host = 0;
  bool is_stderr = false;
  std::string_view data;
  int status = 0;
  std::string signal;  // for kExit by signal: its name without "SIG" ("TERM")
  int fd = -1;
};

// The number of the signal TransportEvent::signal names ("TERM": 15); 0 for none.
int signal_number(const char* name);

using EventHandler = std::function<void(const TransportEvent&)>;

class Transport {
 public:
  virtual ~Transport() = default;
  // Starts `command` on host `host` through a new channel; events for it carry the returned id.
  virtual ChannelId exec(size_t host, const std::string& command) = 0;
  // Queues bytes for the channel's stdin; never blocks.
  virtual void write(ChannelId channel, std::string_view data) = 0;
  // The same for bytes of static storage (they outlive the transport): it may keep a view of them
  // instead of a copy while they wait (the same program sent to every host at once).
  virtual void write_stable(ChannelId channel, std::string_view data) { write(channel, data); }
  // Sends EOF on the channel's stdin.
  virtual void send_eof(ChannelId channel) = 0;
  // Bytes given to write() for the channel that the transport still holds (not handed to the
  // connection yet): a writer of a long stream keeps this small. 0 where the transport cannot tell.
  virtual size_t unsent(ChannelId /*channel*/) const { return 0; }
  // For a teardown. cancel: a command not sent to the host yet never will be (the channel then
  // reports kOpenFailed); one already sent is left alone. kill: cancel, and a command already sent
  // gets the SSH "signal" request for `signal` ("KILL"), which OpenSSH's sshd (7.9 and later)
  // delivers to the command's process group: the user's login shell while its rc still runs, and
  // what the rc started, too (but not for root's sessions, which OpenSSH runs without a
  // privilege-separated child: it refuses the signal there). Both are no-ops on a closed channel.
  virtual void cancel(ChannelId channel) = 0;
  virtual void kill(ChannelId channel, const char* signal) = 0;
  // Promises that the job's start is over: channels that end from now on need no close handshake
  // of their own, the disconnect at the end closes them all. Short commands may still be opened
  // after it (a stack dump while the job runs); they end the same way.
  virtual void no_more_channels() = 0;
  // Reports kFdReady for `fd` whenever it is readable (until unwatch_fd).
  virtual void watch_fd(int fd) = 0;
  virtual void unwatch_fd(int fd) = 0;
  // Forgets a host that stopped answering: its channels are dropped without further events and
  // without waiting for the peer (a cut-off host would never answer a goodbye).
  virtual void drop_host(size_t host) = 0;
  // Whether host `host`'s TCP stack has acknowledged everything we sent, or acknowledged something
  // within the last `within_ms`: its kernel is alive even when nothing on it answers (a host
  // starved of CPU). kUnknown where the transport cannot tell.
  // By default judged from tcp_ack_age_ms.
  enum class Liveness { kUnknown, kAcking, kSilent };
  virtual Liveness tcp_liveness(size_t host, double within_ms) const {
    std::optional<double> age = tcp_ack_age_ms(host);
    if (!age) return Liveness::kUnknown;
    return *age <= within_ms ? Liveness::kAcking : Liveness::kSilent;
  }
  // How long ago host `host`'s TCP stack last acknowledged something, in ms (0 when everything
  // sent is acknowledged). nullopt where the transport cannot tell.
  virtual std::optional<double> tcp_ack_age_ms(size_t /*host*/) const { return std::nullopt; }
  // What host `host`'s ssh config asks of a silent server (ServerAliveInterval, in seconds, and
  // ServerAliveCountMax): OpenSSH's client gives a server up after that many unanswered probes,
  // one every interval. nullopt where the config sets no interval or the transport cannot tell.
  struct ServerAlive {
    double interval_s = 0;
    int count_max = 3;
  };
  virtual std::optional<ServerAlive> server_alive(size_t /*host*/) const { return std::nullopt; }
  // Waits at most `timeout_ms` (-1: no limit) for events and hands each to `handler`.
  virtual void poll(int timeout_ms, const EventHandler& handler) = 0;
  // Monotonic milliseconds; the fake transport's clock is under the test's control.
  virtual double now_ms() const = 0;
};

}  // namespace msrun_ssh
