// The keeper of kept connections (`--persist SECONDS`; mux.h says what it is and its protocol): a
// process of its own, in a session of its own, that holds a command's SSH connections after the
// command ended and serves the next command's channels through them.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "msrun_ssh/ssh.h"
#include "msrun_ssh/transport.h"

namespace msrun_ssh {

// Commands a keeper starts before a command asks for them, so that their start (the session, the
// login shell, the program's own) is paid while nobody waits: each must do nothing before its
// stdin's first line (sync's program with its token from stdin, sync.h's may_start_ahead). The
// keeper starts `now` when it starts, and again every command `may_start` accepts that ended with
// status 0 for a command, once that command left. When a command asks for one of them on its host
// (the same command text), it gets the waiting one, with whatever it printed meanwhile. One waits
// per host at most: starting another ends the one before (its stdin closed). The keeper ending
// closes them (their stdin ends: they exit).
struct MuxAhead {
  std::function<bool(const std::string&)> may_start;
  std::vector<std::pair<size_t, std::string>> now;  // host, command
};

// Keeps the connections of `transport` (already connected to `hosts` hosts) for commands that
// attach through `listen_fd` (a listening Unix socket at `path`), until `persist_s` after the last
// command left or until one of the ends above. Returns when it ends; the caller disconnects.
void serve_mux(Transport& transport, int listen_fd, const std::string& path, const std::string& key,
               size_t hosts, double persist_s, MuxAhead ahead = {});

// At the end of a command: a keeper for `transport`'s connections (all `hosts` connected and
// idle), forked into a session of its own with its stdio on /dev/null, serving at `path` for
// `persist_s`. The command's process says so on stderr and ends there with `exit_code` (it must
// not close connections the keeper now holds). Returns only when no keeper could be made (a
// warning says why); the caller then disconnects as usual.
void keep_connections(HostTransport& transport, const std::string& path, const std::string& key,
                      size_t hosts, double persist_s, MuxAhead ahead, int exit_code);

}  // namespace msrun_ssh
