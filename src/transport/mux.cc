// Kept connections (mux.h): the frame codec, the socket's plumbing, and a command's client side
// (the keeper, which serves the other side, is keeper.h's).
#include "msrun_ssh/mux.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "msrun_ssh/base.h"

namespace msrun_ssh {
namespace {

constexpr uint64_t kMaxFrame = uint64_t{64} << 20;
constexpr size_t kMaxWrite = size_t{16} << 20;  // stdin bytes per 'W' frame, well below kMaxFrame
constexpr int kWelcomeTimeoutMs = 3000;

struct Layout {
  char type;
  std::vector<int> widths;  // bytes of each number
  size_t strings;
};

const Layout* layout_of(char type) {
  static const Layout kLayouts[] = {{'H', {8, 4}, 1}, {'X', {4, 4}, 1},
                                    {'W', {4}, 1},    {'E', {4}, 0},
                                    {'C', {4}, 0},    {'K', {4}, 1},
                                    {'D', {4}, 0},    {'Q', {}, 0},
                                    {'h', {1, 4}, 1}, {'e', {1, 4, 4, 1, 4}, 2},
                                    {'a', {4, 8}, 0}, {'l', {}, 1}};
  for (const auto& l : kLayouts)
    if (l.type == type) return &l;
  return nullptr;
}

uint64_t take(std::string_view& s, size_t width) {
  if (s.size() < width) throw std::runtime_error("keeper protocol: frame too short for its fields");
  uint64_t v = 0;
  for (size_t i = 0; i < width; ++i) v = (v << 8) | static_cast<unsigned char>(s[i]);
  s.remove_prefix(width);
  return v;
}

sockaddr_un socket_address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path)
    throw std::runtime_error(fmt::format("{}: socket path too long", path));
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

}  // namespace

namespace mux_wire {

void put(std::string& s, uint64_t v, int width) {
  for (int i = width - 1; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::vector<MuxFrame> whole_frames(std::string& in) {
  std::vector<MuxFrame> out;
  std::string_view rest(in);
  while (auto f = decode_mux_frame(rest)) out.push_back(std::move(*f));
  in.erase(0, in.size() - rest.size());
  return out;
}

bool same_user(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == ::getuid();
}

ino_t socket_inode(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

}  // namespace mux_wire

using namespace mux_wire;

std::string encode_mux_frame(const MuxFrame& frame) {
  const Layout* l = layout_of(frame.type);
  if (!l || frame.numbers.size() != l->widths.size() || frame.strings.size() != l->strings)
    throw std::logic_error(fmt::format("keeper protocol: bad frame of type {}",
                                       in_quotes(std::string_view(&frame.type, 1), '\'')));
  std::string body(1, frame.type);
  for (size_t i = 0; i < l->widths.size(); ++i) put(body, frame.numbers[i], l->widths[i]);
  for (const auto& s : frame.strings) {
    put(body, s.size(), 4);
    body += s;
  }
  if (body.size() > kMaxFrame)  // the other side would refuse it and end the connection
    throw std::length_error(fmt::format("keeper protocol: frame of {} bytes", body.size()));
  std::string out;
  put(out, body.size(), 4);
  return out + body;
}

std::optional<MuxFrame> decode_mux_frame(std::string_view& data) {
  std::string_view head = data;
  if (head.size() < 4) return std::nullopt;
  uint64_t n = take(head, 4);
  if (n == 0 || n > kMaxFrame)
    throw std::runtime_error(fmt::format("keeper protocol: frame of {} bytes", n));
  if (head.size() < n) return std::nullopt;
  std::string_view body = head.substr(0, n);
  MuxFrame f;
  f.type = body[0];
  body.remove_prefix(1);
  const Layout* l = layout_of(f.type);
  if (!l)
    throw std::runtime_error(fmt::format("keeper protocol: unknown frame type {}",
                                         static_cast<int>(static_cast<unsigned char>(f.type))));
  for (int w : l->widths) f.numbers.push_back(take(body, static_cast<size_t>(w)));
  for (size_t i = 0; i < l->strings; ++i) {
    uint64_t len = take(body, 4);
    if (len > body.size()) throw std::runtime_error("keeper protocol: string beyond its frame");
    f.strings.emplace_back(body.substr(0, len));
    body.remove_prefix(len);
  }
  if (!body.empty()) throw std::runtime_error("keeper protocol: bytes after the last field");
  data.remove_prefix(4 + n);
  return f;
}

std::string mux_key(const std::vector<SshEndpoint>& hosts, const SshSettings& settings) {
  std::string key =
      fmt::format("msrun-ssh keeper 1\nconfig {}\npolicy {}\n", settings.ssh_config,
                  settings.host_key_policy ? static_cast<int>(*settings.host_key_policy) : -1);
  for (const auto& h : hosts)
    key += fmt::format("host {} {} {} {} {}\n", in_quotes(h.address), in_quotes(h.user),
                       h.port.value_or(-1), in_quotes(h.identity_file), in_quotes(h.known_hosts));
  return key;
}

std::string mux_socket_path(const std::string& key) {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  std::string dir = runtime && *runtime ? std::string(runtime) + "/msrun-ssh"
                                        : fmt::format("/tmp/msrun-ssh-{}", ::getuid());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error(fmt::format("{}: {}", dir, std::strerror(errno)));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0)
    throw std::runtime_error(fmt::format("{}: {}", dir, std::strerror(errno)));
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::getuid() || (st.st_mode & 077) != 0)
    throw std::runtime_error(
        fmt::format("{}: not a directory of this user that only this user can enter", dir));
  std::string path = dir + "/keep-" + sha256_hex(key).substr(0, 16) + ".sock";
  // Throws when too long, also as mux_listen's temporary name with the largest pid Linux gives
  // (PID_MAX_LIMIT, 4194304: 7 digits).
  socket_address(path + ".4194304");
  return path;
}

int mux_listen(const std::string& path) {
  // Made under a name of its own and renamed over `path`: a keeper knows its socket by the inode
  // it had there (another keeper's socket may replace it at any time).
  std::string tmp = fmt::format("{}.{}", path, ::getpid());
  if (tmp.size() >= sizeof(sockaddr_un::sun_path)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  sockaddr_un a = socket_address(tmp);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  ::unlink(tmp.c_str());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 8) != 0 ||
      ::chmod(tmp.c_str(), 0600) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    int saved = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    errno = saved;
    return -1;
  }
  return fd;
}

// ---- a command's side ----

MuxClient::MuxClient(int fd, size_t hosts, int keeper_pid)
    : fd_(fd), hosts_(hosts), keeper_pid_(keeper_pid) {}

MuxClient::~MuxClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::unique_ptr<MuxClient> MuxClient::attach(const std::string& path, const std::string& key,
                                             size_t hosts, double persist_s) {
  sockaddr_un a = socket_address(path);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return nullptr;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || !same_user(fd)) {
    ::close(fd);
    return nullptr;
  }
  std::string out =
      encode_mux_frame({'H', {static_cast<uint64_t>(persist_s * 1000), hosts}, {key}});
  std::string in;
  std::optional<MuxFrame> welcome;
  double deadline = monotonic_ms() + kWelcomeTimeoutMs;
  try {
    while (!welcome && monotonic_ms() < deadline) {
      if (!send_some(fd, out)) break;
      pollfd p{fd, static_cast<short>(POLLIN | (out.empty() ? 0 : POLLOUT)), 0};
      ::poll(&p, 1, static_cast<int>(deadline - monotonic_ms()) + 1);
      if ((p.revents & (POLLIN | POLLHUP | POLLERR)) && !recv_some(fd, in)) break;
      std::string_view rest(in);
      welcome = decode_mux_frame(rest);
      if (welcome) in.erase(0, in.size() - rest.size());
    }
  } catch (const std::runtime_error&) {
    welcome.reset();
  }
  bool ok = welcome && welcome->type == 'h' && welcome->numbers[0] == 0;
  if (ok && welcome->strings[0] != std::string(hosts, '1')) {
    // It lost a host: it is told to end, and this command connects anew (and keeps those).
    std::string quit = encode_mux_frame({'Q', {}, {}});
    send_some(fd, quit);
    ok = false;
  }
  if (!ok) {
    ::close(fd);
    return nullptr;
  }
  set_nonblocking(fd);
  auto client =
      std::unique_ptr<MuxClient>(new MuxClient(fd, hosts, static_cast<int>(welcome->numbers[1])));
  client->ack_age_ms_.assign(hosts, kUnknownAge);
  client->in_ = std::move(in);  // what came after the welcome
  return client;
}

std::vector<std::optional<ConnectFailure>> MuxClient::connect_all(const std::vector<int>&) {
  return std::vector<std::optional<ConnectFailure>>(hosts_);
}

void MuxClient::disconnect_all() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  gone_ = true;
  for (auto& [id, c] : channels_) c.closed = true;
}

void MuxClient::send(const MuxFrame& frame) {
  if (gone_) return;
  out_ += encode_mux_frame(frame);
  flush();
}

void MuxClient::flush() {
  if (!gone_ && !send_some(fd_, out_)) gone_ = true;
}

ChannelId MuxClient::exec(size_t host, const std::string& command) {
  ChannelId id = next_channel_++;
  channels_[id].host = host;
  send({'X', {wire(id), host}, {command}});
  return id;
}

void MuxClient::write(ChannelId channel, std::string_view data) {
  auto it = channels_.find(channel);
  if (it == channels_.end() || it->second.closed || data.empty()) return;
  it->second.written += data.size();
  // In frames the keeper takes (a sync's request for the hashes of some 300,000 files is more
  // than one).
  for (size_t at = 0; at < data.size(); at += kMaxWrite)
    send({'W', {wire(channel)}, {std::string(data.substr(at, kMaxWrite))}});
}

void MuxClient::send_eof(ChannelId channel) { send({'E', {wire(channel)}, {}}); }

size_t MuxClient::unsent(ChannelId channel) const {
  auto it = channels_.find(channel);
  if (gone_ || it == channels_.end() || it->second.closed) return 0;
  return static_cast<size_t>(it->second.written - std::min(it->second.written, it->second.handed));
}

void MuxClient::cancel(ChannelId channel) { send({'C', {wire(channel)}, {}}); }

void MuxClient::kill(ChannelId channel, const char* signal) {
  send({'K', {wire(channel)}, {signal}});
}

void MuxClient::watch_fd(int fd) {
  if (std::find(watched_.begin(), watched_.end(), fd) == watched_.end()) watched_.push_back(fd);
}

void MuxClient::unwatch_fd(int fd) {
  watched_.erase(std::remove(watched_.begin(), watched_.end(), fd), watched_.end());
}

void MuxClient::drop_host(size_t host) {
  send({'D', {host}, {}});
  for (auto& [id, c] : channels_)
    if (c.host == host) c.closed = true;  // dropped without further events
}

std::optional<double> MuxClient::tcp_ack_age_ms(size_t host) const {
  if (host >= ack_age_ms_.size() || ack_age_ms_[host] == kUnknownAge) return std::nullopt;
  if (ack_age_ms_[host] == 0) return 0.0;
  return ack_age_ms_[host] + (now_ms() - ack_at_ms_);
}

double MuxClient::now_ms() const { return monotonic_ms(); }

// The keeper went away: every channel still open ends as its host's connection would.
void MuxClient::keeper_gone(const EventHandler& handler) {
  gone_ = true;
  std::string why = fmt::format("the connection keeper (process {}) ended", keeper_pid_);
  std::vector<bool> told(hosts_, false);
  for (auto& [id, c] : channels_) {
    if (c.closed) continue;
    if (c.host < hosts_ && !told[c.host]) {
      told[c.host] = true;
      TransportEvent lost;
      lost.kind = TransportEvent::Kind::kHostLost;
      lost.host = c.host;
      lost.data = why;
      handler(lost);
    }
    c.closed = true;
    TransportEvent e;
    e.kind = TransportEvent::Kind::kClosed;
    e.channel = id;
    e.host = c.host;
    handler(e);
  }
}

void MuxClient::poll(int timeout_ms, const EventHandler& handler) {
  if (gone_) {
    keeper_gone(handler);
    std::vector<pollfd> fds;
    for (int w : watched_) fds.push_back({w, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), fds.empty() ? std::min(timeout_ms, 0) : timeout_ms) > 0)
      for (const auto& p : fds)
        if (p.revents) handler({TransportEvent::Kind::kFdReady, -1, 0, false, {}, 0, {}, p.fd});
    return;
  }
  flush();
  std::vector<pollfd> fds{{fd_, static_cast<short>(POLLIN | (out_.empty() ? 0 : POLLOUT)), 0}};
  for (int w : watched_) fds.push_back({w, POLLIN, 0});
  if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  bool alive = true;
  if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) alive = recv_some(fd_, in_);
  std::vector<MuxFrame> frames;
  try {
    frames = whole_frames(in_);
  } catch (const std::runtime_error&) {
    alive = false;
  }
  for (const auto& f : frames) {
    if (f.type == 'a') {
      auto it = channels_.find(unwire(f.numbers[0]));
      if (it != channels_.end()) it->second.handed = f.numbers[1];
    } else if (f.type == 'l') {
      for (size_t h = 0; h < hosts_ && 4 * h + 4 <= f.strings[0].size(); ++h) {
        std::string_view s(f.strings[0].data() + 4 * h, 4);
        ack_age_ms_[h] = static_cast<uint32_t>(take(s, 4));
      }
      ack_at_ms_ = now_ms();
    } else if (f.type == 'e') {
      TransportEvent e;
      e.kind = static_cast<TransportEvent::Kind>(f.numbers[0]);
      e.channel = unwire(f.numbers[1]);
      e.host = f.numbers[2];
      e.is_stderr = f.numbers[3] != 0;
      e.status = unwire(f.numbers[4]);
      e.data = f.strings[0];
      e.signal = f.strings[1];
      auto it = channels_.find(e.channel);
      if (e.kind != TransportEvent::Kind::kHostLost && (it == channels_.end() || it->second.closed))
        continue;  // a channel dropped here
      if (e.kind == TransportEvent::Kind::kClosed || e.kind == TransportEvent::Kind::kOpenFailed)
        it->second.closed = true;
      handler(e);
    }
  }
  for (size_t i = 1; i < fds.size(); ++i)
    if (fds[i].revents)
      handler({TransportEvent::Kind::kFdReady, -1, 0, false, {}, 0, {}, fds[i].fd});
  if (!alive) keeper_gone(handler);
}

}  // namespace msrun_ssh
