// How the command line and the host file set up the SSH pool: the one conversion from Options and
// host entries to the pool's own settings (ssh.h), for every command that connects (run and stop:
// src/runner/job.cc; check: src/check/check.cc), so that they all reach hosts the same way. The
// ssh room itself knows neither Options nor the host file.
#pragma once

#include "msrun_ssh/hostfile.h"
#include "msrun_ssh/options.h"
#include "msrun_ssh/ssh.h"

namespace msrun_ssh {

inline SshSettings ssh_settings(const Options& o) {
  SshSettings s;
  s.ssh_config = o.ssh_config;
  s.fanout = o.fanout;
  s.connect_timeout_s = o.connect_timeout;
  s.host_key_policy = o.strict_host_key_checking;
  return s;
}

// How to reach a host of the host file.
inline SshEndpoint endpoint_of(const Host& h) {
  return SshEndpoint{h.address, h.user, h.port, h.identity_file, h.known_hosts};
}

}  // namespace msrun_ssh
