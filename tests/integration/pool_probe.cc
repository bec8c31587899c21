// pool_probe: drives the SSH pool as the launcher does, with a handler that tears a host down
// from inside an event, the way the launcher reacts when a host's watchdog ends. Run by
// test_transport.py against the namespace cluster:
//
//   pool_probe SSH_CONFIG HOST drop|disconnect [ROUNDS]
//
// Each round opens a pool to HOST and starts two commands over its one connection: one prints a
// few short outputs, the other streams. Once the stream has brought 1 MB, the handler calls
// drop_host (or disconnect_all) from inside a data event. Closing a channel makes libssh flush
// the session, and a flush that has to wait reads what came meanwhile, the stream's data
// included: that data must not reach the handler after the teardown. Under the sanitizers, a
// pool that hands an event over while a libssh call is still on the stack fails here with a use
// after free.
//
// Prints "ok EVENTS AFTER" and exits 0 when the pool stays sound; exits 1 with a reason otherwise.
// EVENTS counts all rounds' events. AFTER counts the events that came after a round's teardown:
// the only one due is the refusal of the command started after it, so AFTER is 1 when every
// round saw just that, and otherwise the count of the first round that did not. What came after
// each round's teardown goes to stderr, for a test's failure message.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "msrun_ssh/ssh.h"

using msrun_ssh::SshPool;
using msrun_ssh::TransportEvent;

namespace {
constexpr size_t kStreamedBeforeTeardown = 1000000;
constexpr double kRoundLimitMs = 6000;
constexpr double kAfterTeardownMs = 300;  // late events would come within a poll or two

struct Round {
  bool torn_down = false;
  int events = 0;
  int events_after = 0;
  std::string after;  // what came after the teardown: kinds and channels, for the failure message
};

// One round on a fresh pool; returns false (with a reason on stderr) when it could not run.
bool run_round(const std::string& ssh_config, const std::string& host, const std::string& mode,
               Round& r) {
  msrun_ssh::SshSettings settings;
  settings.ssh_config = ssh_config;
  SshPool pool({msrun_ssh::SshEndpoint{.address = host}}, settings);
  auto failures = pool.connect_all({1});
  if (failures[0]) {
    fmt::print(stderr, "cannot connect: {}\n", failures[0]->reason);
    return false;
  }
  // Output on both streams and several packets, so that libssh has more to walk after the one
  // it hands over first.
  pool.exec(0, "printf one; printf two >&2; printf three; sleep 3");
  auto streaming = pool.exec(0, "printf four; head -c 8000000 /dev/zero; sleep 3");
  size_t streamed = 0;
  double torn_down_at = 0;
  msrun_ssh::EventHandler handler = [&](const TransportEvent& e) {
    ++r.events;
    if (r.torn_down) {
      ++r.events_after;
      std::string_view text = e.data.substr(0, std::min(e.data.find('\0'), size_t{40}));
      r.after += fmt::format(" kind {} channel {} ({} bytes: {})", static_cast<int>(e.kind),
                             e.channel, e.data.size(), text);
    }
    if (e.kind != TransportEvent::Kind::kData || r.torn_down) return;
    if (e.channel == streaming) streamed += e.data.size();
    if (streamed < kStreamedBeforeTeardown) return;
    r.torn_down = true;
    torn_down_at = pool.now_ms();
    r.after += fmt::format(" (torn down on output of channel {})", e.channel);
    if (mode == "drop")
      pool.drop_host(0);
    else
      pool.disconnect_all();
    // The launcher goes on using the pool from the same handler.
    pool.exec(0, "true");
  };
  double start = pool.now_ms();
  while (pool.now_ms() - start < kRoundLimitMs &&
         (!r.torn_down || pool.now_ms() - torn_down_at < kAfterTeardownMs))
    pool.poll(100, handler);
  if (!r.torn_down) {
    fmt::print(stderr, "the stream from {} brought {} bytes in {} s, not {} ({} events)\n", host,
               streamed, kRoundLimitMs / 1000, kStreamedBeforeTeardown, r.events);
    return false;
  }
  return true;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    fmt::print(stderr, "usage: pool_probe SSH_CONFIG HOST drop|disconnect [ROUNDS]\n");
    return 2;
  }
  const std::string mode = argv[3];
  const int rounds = argc == 5 ? std::atoi(argv[4]) : 1;
  if (rounds < 1 || rounds > 100) {
    fmt::print(stderr, "ROUNDS must be 1 to 100, not {:?}\n", argv[4]);
    return 2;
  }
  int events = 0;
  int after = 1;
  for (int i = 0; i < rounds; ++i) {
    Round r;
    if (!run_round(argv[1], argv[2], mode, r)) return 1;
    events += r.events;
    if (after == 1 && r.events_after != 1) after = r.events_after;
    fmt::print(stderr, "round {}: after the teardown:{}\n", i + 1, r.after);
  }
  fmt::print("ok {} {}\n", events, after);
  return 0;
}
