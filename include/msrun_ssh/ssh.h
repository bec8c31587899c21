// The SSH pool: every connection of a job, on libssh, driven by one epoll loop in one thread.
//
// Phase one (connect_all) connects, verifies and authenticates every host with at most `fanout`
// handshakes in flight and a deadline per host kept by the pool itself (libssh ignores its own
// timeout in non-blocking mode). Identity keys are loaded once per file. Each session has its own
// ssh_event, so a dying socket is pinned to its host. Phase two is the Transport interface:
// channels opened on demand, spread over as many connections per host as MaxSessions requires.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "msrun_ssh/options.h"
#include "msrun_ssh/transport.h"

namespace msrun_ssh {

// How to reach one host; empty fields fall back to the ssh config, then to libssh's defaults.
struct SshEndpoint {
  std::string address;  // host file address: the ssh config's Host alias or a name / IP
  std::string user;
  std::optional<int> port;
  std::string identity_file;
  std::string known_hosts;
};

struct SshSettings {
  std::string ssh_config;  // "" : ~/.ssh/config when it exists
  int fanout = 64;
  double connect_timeout_s = 10;
  std::optional<HostKeyPolicy> host_key_policy;  // unset: ssh config, else yes
  int channels_per_connection = 10;              // sshd's default MaxSessions
};

struct HostFailure {
  size_t host;
  std::string reason;  // "connection refused", "timed out after 10 s", "host key changed", ...
};

// sshd's default MaxSessions: channels per connection before another connection is opened.
inline constexpr int kChannelsPerConnection = 10;

// The pool settings of a run (also used by `check` and `stop`, so they reach hosts the same way).
SshSettings ssh_settings(const Options& options);

// How to reach a host of the host file.
SshEndpoint endpoint_of(const Host& host);

class SshPool : public Transport {
 public:
  SshPool(std::vector<SshEndpoint> hosts, SshSettings settings);
  ~SshPool() override;
  SshPool(const SshPool&) = delete;
  SshPool& operator=(const SshPool&) = delete;

  // Connects `connections[i]` sessions to host i (at least 1) and verifies + authenticates each.
  // Returns the failed hosts (empty: all ready). On failure every session is already closed.
  std::vector<HostFailure> connect_all(const std::vector<int>& connections);

  // Runs `command` on every listed host and collects its stdout (stderr is dropped) until it
  // ends or `timeout_s` passes; for short probes during start-up. result[i] is empty on failure.
  std::vector<std::optional<std::string>> run_on_all(const std::vector<size_t>& hosts,
                                                     const std::string& command, double timeout_s,
                                                     std::vector<int>* exit_codes = nullptr);

  // Warnings collected during connect_all (e.g. StrictHostKeyChecking=no).
  const std::vector<std::string>& warnings() const;

  ChannelId exec(size_t host, const std::string& command) override;
  void write(ChannelId channel, std::string_view data) override;
  void send_eof(ChannelId channel) override;
  void no_more_channels() override;
  void watch_fd(int fd) override;
  void unwatch_fd(int fd) override;
  void drop_host(size_t host) override;
  void poll(int timeout_ms, const EventHandler& handler) override;
  double now_ms() const override;

  // Closes every channel and session.
  void disconnect_all();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace msrun_ssh
