// A Transport whose "hosts" are this machine: the production ProcessTransport (process.h), which
// runs `sh -c COMMAND` at once as a real child in a session of its own (as sshd does), with pipes
// for stdin, stdout and stderr, and signals its process group; this one also records what it was
// asked. For tests of what runs on a host (the launch agent) without SSH. Every child still running
// is killed when it is destroyed.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "msrun_ssh/process.h"

namespace msrun_ssh::local {

class LocalTransport : public ProcessTransport {
 public:
  ChannelId exec(size_t host, const std::string& command) override {
    execs.push_back(command);
    return ProcessTransport::exec(host, command);
  }
  void kill(ChannelId channel, const char* signal) override {
    if (!closed(channel)) kills.emplace_back(channel, signal);
    ProcessTransport::kill(channel, signal);
  }
  void drop_host(size_t host) override {
    dropped.push_back(host);
    ProcessTransport::drop_host(host);
  }
  void write(ChannelId channel, std::string_view data) override {
    written.append(data);
    ProcessTransport::write(channel, data);
  }
  void write_stable(ChannelId channel, std::string_view data) override {
    stable.emplace_back(data);
    ProcessTransport::write_stable(channel, data);
  }

  std::vector<std::string> execs;
  std::vector<std::pair<ChannelId, std::string>> kills;
  std::vector<size_t> dropped;
  std::vector<std::string_view> stable;  // what was given as static storage (write_stable)
  std::string written;                   // what was given to write(), every channel's
};

}  // namespace msrun_ssh::local
