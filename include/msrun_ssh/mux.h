// Kept connections (`--persist SECONDS`, as OpenSSH's ControlPersist): after a command, a process
// of its own (the keeper, keeper.h) holds the command's SSH connections for SECONDS more, and the
// next command to the same hosts with the same SSH settings opens its channels through them
// (MuxClient) instead of connecting, authenticating and paying every host's login once more.
//
// The keeper listens on a Unix socket in a directory only its user can enter
// ($XDG_RUNTIME_DIR/msrun-ssh, else /tmp/msrun-ssh-UID), named after a hash of the hosts and the
// settings. It serves one command at a time: a second one at the same moment connects as usual.
// When a command's socket closes (it ended, or it was killed), every channel it left open is
// killed on its host. The keeper ends SECONDS after its last command left, when a host's
// connection breaks and no command is using it (the next command reconnects), on SIGTERM or
// SIGINT, and when its socket is replaced.
//
// The protocol on the socket: frames of a 4-byte big-endian length, then that many bytes: a type
// byte and the type's fields (integers big-endian, strings as a 4-byte length and the bytes).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "msrun_ssh/ssh.h"

namespace msrun_ssh {

// One frame's contents (type and fields), for the codec below and its fuzz target.
struct MuxFrame {
  char type = 0;
  std::vector<uint64_t> numbers;
  std::vector<std::string> strings;
};

// The frame's fields by type: how many numbers (each as wide as its type says) and strings.
// 'H' hello: persist ms, hosts; key          'h' welcome: state (0 ok, 1 busy, 2 other key),
// 'X' exec: channel, host; command               pid; per host '1' alive / '0' lost
// 'W' write: channel; data                  'e' event: kind, channel, host, stderr, status;
// 'E' eof: channel                               data, signal
// 'C' cancel: channel                       'a' handed: channel, bytes handed to the connection
// 'K' kill: channel; signal                 'l' liveness: per host a 4-byte age of the last TCP
// 'D' drop host: host                            acknowledgement in ms (0xffffffff unknown, 0
// 'Q' quit after this command                    when nothing is unacknowledged) as a string
std::string encode_mux_frame(const MuxFrame& frame);

// Takes the next whole frame off the front of `data`; nullopt (and `data` as it was) when it is not
// all there yet. Throws std::runtime_error for a malformed frame (unknown type, fields that do not
// fill it exactly, longer than 64 MiB).
std::optional<MuxFrame> decode_mux_frame(std::string_view& data);

// What identifies a keeper: the hosts' endpoints and the settings that change how they are reached.
std::string mux_key(const std::vector<SshEndpoint>& hosts, const SshSettings& settings);

// The keeper's socket for `key`: the directory is created (0700) when missing; throws
// std::runtime_error when it cannot be, or when it is not ours and private.
std::string mux_socket_path(const std::string& key);

// A command's side of a keeper: the transport over its socket.
class MuxClient : public HostTransport {
 public:
  // The keeper at `path`, when one answers there for `key` with every one of `hosts` hosts still
  // connected, and is free; nullptr otherwise (none, busy, another key, a host lost: a keeper that
  // lost a host is told to end). `persist_s` becomes its idle time from now on.
  static std::unique_ptr<MuxClient> attach(const std::string& path, const std::string& key,
                                           size_t hosts, double persist_s);
  ~MuxClient() override;
  MuxClient(const MuxClient&) = delete;
  MuxClient& operator=(const MuxClient&) = delete;

  // The keeper's process id.
  int keeper_pid() const { return keeper_pid_; }

  std::vector<std::optional<ConnectFailure>> connect_all(
      const std::vector<int>& connections) override;
  const std::vector<ConnectWarning>& warnings() const override { return warnings_; }
  void disconnect_all() override;

  ChannelId exec(size_t host, const std::string& command) override;
  void write(ChannelId channel, std::string_view data) override;
  void send_eof(ChannelId channel) override;
  size_t unsent(ChannelId channel) const override;
  void no_more_channels() override {}
  void cancel(ChannelId channel) override;
  void kill(ChannelId channel, const char* signal) override;
  void watch_fd(int fd) override;
  void unwatch_fd(int fd) override;
  void drop_host(size_t host) override;
  std::optional<double> tcp_ack_age_ms(size_t host) const override;
  void poll(int timeout_ms, const EventHandler& handler) override;
  double now_ms() const override;

 private:
  MuxClient(int fd, size_t hosts, int keeper_pid);
  void send(const MuxFrame& frame);
  void flush();
  void keeper_gone(const EventHandler& handler);

  int fd_ = -1;
  size_t hosts_ = 0;
  int keeper_pid_ = 0;
  std::string in_, out_;
  ChannelId next_channel_ = 1;
  struct Channel {
    size_t host = 0;
    uint64_t written = 0, handed = 0;
    bool closed = false;
  };
  std::map<ChannelId, Channel> channels_;
  std::vector<int> watched_;
  std::vector<uint32_t> ack_age_ms_;  // per host, from the last 'l'
  double ack_at_ms_ = 0;              // when the last 'l' came
  std::vector<ConnectWarning> warnings_;
  bool gone_ = false;
};

// A listening socket at `path` (a stale socket there is replaced); -1 when it cannot be made.
int mux_listen(const std::string& path);

// The socket's plumbing, shared by the client above and the keeper (keeper.h).
namespace mux_wire {

inline constexpr uint32_t kUnknownAge = 0xffffffff;  // 'l': no acknowledgement age known
inline constexpr double kLivenessEveryMs = 500;      // how often the keeper sends 'l'

// Appends `v` big-endian in `width` bytes.
void put(std::string& s, uint64_t v, int width);
// A channel id or status as it travels (4 bytes, -1 as 0xffffffff) and back.
inline uint64_t wire(int v) { return static_cast<uint32_t>(v); }
inline int unwire(uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }

// Every whole frame at the front of `in`, which keeps the rest; throws as decode_mux_frame.
std::vector<MuxFrame> whole_frames(std::string& in);
// Whether the process at the other end of the Unix socket `fd` runs as this user (the socket's
// directory already keeps others out; this is the second lock).
bool same_user(int fd);
// The inode of the socket at `path`, 0 when there is none: a keeper knows its socket by it.
ino_t socket_inode(const std::string& path);

}  // namespace mux_wire

}  // namespace msrun_ssh
