// pool_probe: drives the SSH pool as the launcher does, with a handler that tears a host down
// from inside an event, the way the launcher reacts when a host's watchdog ends. Run by
// test_transport.py against the namespace cluster:
//
//   pool_probe SSH_CONFIG HOST drop|disconnect
//
// Starts two commands on HOST over one connection; on their first output the handler calls
// drop_host (or disconnect_all). Under the sanitizers, a pool that hands an event over while a
// libssh call is still on the stack fails here with a use after free. Prints "ok EVENTS AFTER"
// (AFTER: the events that came after the teardown; the only one due is the refusal of the command
// started after it) and exits 0 when the pool stays sound; exits 1 with a reason otherwise. What
// came after the teardown goes to stderr, for a test's failure message.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "msrun_ssh/ssh.h"

using msrun_ssh::SshPool;
using msrun_ssh::TransportEvent;

int main(int argc, char** argv) {
  if (argc != 4) {
    fmt::print(stderr, "usage: pool_probe SSH_CONFIG HOST drop|disconnect\n");
    return 2;
  }
  const std::string mode = argv[3];
  msrun_ssh::SshSettings settings;
  settings.ssh_config = argv[1];
  SshPool pool({msrun_ssh::SshEndpoint{.address = argv[2]}}, settings);
  auto failures = pool.connect_all({1});
  if (failures[0]) {
    fmt::print(stderr, "cannot connect: {}\n", failures[0]->reason);
    return 1;
  }
  // Output on both streams and several packets, so that libssh has more to walk after the one
  // it hands over first.
  pool.exec(0, "printf one; printf two >&2; printf three; sleep 3");
  pool.exec(0, "printf four; sleep 3");
  bool torn_down = false;
  int events = 0;
  int events_after = 0;
  std::string after;  // what came after the teardown: kinds and channels, for the failure message
  msrun_ssh::EventHandler handler = [&](const TransportEvent& e) {
    ++events;
    if (torn_down) {
      ++events_after;
      after += fmt::format(" kind {} channel {} ({})", static_cast<int>(e.kind), e.channel, e.data);
    }
    if (e.kind != TransportEvent::Kind::kData || torn_down) return;
    torn_down = true;
    after += fmt::format(" (torn down on output of channel {})", e.channel);
    if (mode == "drop")
      pool.drop_host(0);
    else
      pool.disconnect_all();
    // The launcher goes on using the pool from the same handler.
    pool.exec(0, "true");
  };
  double start = pool.now_ms();
  while (pool.now_ms() - start < 6000) pool.poll(100, handler);
  if (!torn_down) {
    fmt::print(stderr, "no output came from {} in 6 s ({} events)\n", argv[2], events);
    return 1;
  }
  fmt::print("ok {} {}\n", events, events_after);
  fmt::print(stderr, "after the teardown:{}\n", after);
  return 0;
}
