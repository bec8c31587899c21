#include "msrun_ssh/ssh.h"

namespace msrun_ssh {

SshSettings ssh_settings(const Options& o) {
  SshSettings s;
  s.ssh_config = o.ssh_config;
  s.fanout = o.fanout;
  s.connect_timeout_s = o.connect_timeout;
  s.host_key_policy = o.strict_host_key_checking;
  s.channels_per_connection = kChannelsPerConnection;
  return s;
}

SshEndpoint endpoint_of(const Host& h) {
  return SshEndpoint{h.address, h.user, h.port, h.identity_file, h.known_hosts};
}

}  // namespace msrun_ssh
