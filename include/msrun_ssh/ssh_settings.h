// How the command line and the host file set up the SSH pool: the one conversion from Options and
// host entries to the pool's own settings (ssh.h), for every command that connects (run and stop:
// src/runner/job.cc; check: src/check/check.cc), so that they all reach hosts the same way; and
// which transport --transport picks. The ssh room itself knows neither Options nor the host file.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "msrun_ssh/hostfile.h"
#include "msrun_ssh/options.h"
#include "msrun_ssh/process.h"
#include "msrun_ssh/ssh.h"

namespace msrun_ssh {

inline SshSettings ssh_settings(const ConnectionOptions& o) {
  SshSettings s;
  s.ssh_config = o.ssh_config;
  s.fanout = o.fanout;
  s.jump_fanout = o.jump_fanout;
  s.connect_timeout_s = o.connect_timeout;
  s.connect_timeout_given = o.connect_timeout_given;
  s.host_key_policy = o.strict_host_key_checking;
  return s;
}

// How to reach a host of the host file.
inline SshEndpoint endpoint_of(const Host& h) {
  return SshEndpoint{h.address, h.user, h.port, h.identity_file, h.known_hosts};
}

// The transport --transport asks for, to the hosts `endpoints` name: the SSH pool with `settings`,
// or srun (each host's address its Slurm node name; settings' connect timeout and progress).
inline std::unique_ptr<HostTransport> host_transport(const ConnectionOptions& o,
                                                     std::vector<SshEndpoint> endpoints,
                                                     SshSettings settings) {
  if (o.transport == TransportKind::kSsh)
    return std::make_unique<SshPool>(std::move(endpoints), std::move(settings));
  SrunSettings s;
  for (const auto& e : endpoints) s.nodes.push_back(e.address);
  s.connect_timeout_s = settings.connect_timeout_s;
  s.on_connect_progress = std::move(settings.on_connect_progress);
  return std::make_unique<SrunTransport>(std::move(s));
}

// Connects every host of `pool` (connections[h] of host h), says the pool's warnings on stderr
// (host h named addresses[h]), and returns why each host could not be reached ("" for each host
// that was): for the commands that go on with the hosts they reach (stop, stack, status, logs).
inline std::vector<std::string> connect_reaching(HostTransport& pool,
                                                 const std::vector<int>& connections,
                                                 const std::vector<std::string>& addresses) {
  std::vector<std::string> unreached;
  for (const auto& failure : pool.connect_all(connections))
    unreached.push_back(failure ? failure->reason : std::string());
  for (const auto& w : pool.warnings())
    std::fprintf(stderr, "msrun-ssh: warning: %s: %s\n", addresses[w.host].c_str(),
                 w.message.c_str());
  return unreached;
}

}  // namespace msrun_ssh
