// Kept connections (mux.h): the frame codec, a command's client side, and the keeper.
#include "msrun_ssh/mux.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <set>
#include <stdexcept>

#include "msrun_ssh/base.h"

namespace msrun_ssh {
namespace {

constexpr uint64_t kMaxFrame = uint64_t{64} << 20;
constexpr uint32_t kUnknownAge = 0xffffffff;
constexpr double kLivenessEveryMs = 500;
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

void put(std::string& s, uint64_t v, int width) {
  for (int i = width - 1; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t take(std::string_view& s, size_t width) {
  if (s.size() < width) throw std::runtime_error("keeper protocol: frame too short for its fields");
  uint64_t v = 0;
  for (size_t i = 0; i < width; ++i) v = (v << 8) | static_cast<unsigned char>(s[i]);
  s.remove_prefix(width);
  return v;
}

// A channel id or status as it travels (4 bytes, -1 as 0xffffffff) and back.
uint64_t wire(int v) { return static_cast<uint32_t>(v); }
int unwire(uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Sends what it can of `out` without blocking; false when the peer is gone.
bool send_some(int fd, std::string& out) {
  while (!out.empty()) {
    ssize_t n = ::send(fd, out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      out.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  return true;
}

// Reads what `fd` has into `in`; false at EOF or an error.
bool recv_some(int fd, std::string& in) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      in.append(buf, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < sizeof buf) return true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

// Every whole frame at the front of `in`, which keeps the rest.
std::vector<MuxFrame> whole_frames(std::string& in) {
  std::vector<MuxFrame> out;
  std::string_view rest(in);
  while (auto f = decode_mux_frame(rest)) out.push_back(std::move(*f));
  in.erase(0, in.size() - rest.size());
  return out;
}

// Whether the process at the other end of the Unix socket `fd` runs as this user (the socket's
// directory already keeps others out; this is the second lock).
bool same_user(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == ::getuid();
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

std::string encode_mux_frame(const MuxFrame& frame) {
  const Layout* l = layout_of(frame.type);
  if (!l || frame.numbers.size() != l->widths.size() || frame.strings.size() != l->strings)
    throw std::logic_error(fmt::format("keeper protocol: bad frame of type {:?}", frame.type));
  std::string body(1, frame.type);
  for (size_t i = 0; i < l->widths.size(); ++i) put(body, frame.numbers[i], l->widths[i]);
  for (const auto& s : frame.strings) {
    put(body, s.size(), 4);
    body += s;
  }
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
    key += fmt::format("host {:?} {:?} {} {:?} {:?}\n", h.address, h.user, h.port.value_or(-1),
                       h.identity_file, h.known_hosts);
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
  socket_address(path);  // throws when too long
  return path;
}

int mux_listen(const std::string& path) {
  // Made under a name of its own and renamed over `path`: a keeper knows its socket by the inode
  // it had there (another keeper's socket may replace it at any time).
  std::string tmp = fmt::format("{}.{}", path, ::getpid());
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

static ino_t mux_socket_inode(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
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
  send({'W', {wire(channel)}, {std::string(data)}});
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

// ---- the keeper ----

namespace {

volatile sig_atomic_t g_keeper_stop = 0;

void stop_keeper(int) { g_keeper_stop = 1; }

class Keeper {
 public:
  Keeper(Transport& t, int listen_fd, std::string path, std::string key, size_t hosts,
         double persist_s, MuxAhead ahead)
      : t_(t),
        listen_fd_(listen_fd),
        path_(std::move(path)),
        key_(std::move(key)),
        alive_(hosts, true),
        persist_ms_(persist_s * 1000),
        ahead_(std::move(ahead)) {}

  void run(ino_t ino) {
    ino_ = ino;
    t_.watch_fd(listen_fd_);
    idle_since_ = t_.now_ms();
    for (const auto& c : ahead_.now) start_ahead(c);
    while (!over()) {
      int timeout = client_ < 0 ? 1000 : out_.empty() ? 200 : 10;
      t_.poll(timeout, [this](const TransportEvent& e) { on_event(e); });
      after_poll();
    }
    stopping_ = true;
    if (client_ >= 0) leave();
    t_.poll(0, [this](const TransportEvent& e) { on_event(e); });  // sends what leave() queued
    for (int fd : waiting_) ::close(fd);
    t_.unwatch_fd(listen_fd_);
    if (mux_socket_inode(path_) == ino_) ::unlink(path_.c_str());
  }

 private:
  struct Channel {
    ChannelId theirs = 0;
    size_t host = 0;
    uint64_t written = 0, handed = 0;
    bool current = true;  // of the command attached now (false: of one that left)
    std::string command;
    int status = -1;  // its exit status, once it came
  };
  using HostCommand = std::pair<size_t, std::string>;
  // A command started ahead, and what it said before a command took it (held for that command).
  struct Ahead {
    ChannelId ours = -1;
    std::vector<std::pair<TransportEvent, std::string>> held;  // the event, its data
  };

  bool over() const {
    if (g_keeper_stop) return true;
    if (client_ >= 0) return false;
    if (quit_ || std::find(alive_.begin(), alive_.end(), false) != alive_.end()) return true;
    if (mux_socket_inode(path_) != ino_) return true;  // removed or replaced
    return t_.now_ms() - idle_since_ >= persist_ms_;
  }

  void on_event(const TransportEvent& e) {
    using K = TransportEvent::Kind;
    if (e.kind == K::kFdReady) {
      ready_.push_back(e.fd);
      return;
    }
    if (e.kind == K::kHostLost) {
      if (e.host < alive_.size()) alive_[e.host] = false;
      if (client_ >= 0) forward(e, -1);
      return;
    }
    bool ended = e.kind == K::kClosed || e.kind == K::kOpenFailed;
    if (auto a = ahead_of_.find(e.channel); a != ahead_of_.end()) {
      if (ended) {
        started_.erase(a->second);
        ahead_of_.erase(a);
      } else {
        started_[a->second].held.emplace_back(e, std::string(e.data));
      }
      return;
    }
    auto it = ours_.find(e.channel);
    if (it == ours_.end()) return;  // a channel of a command that left
    Channel& c = it->second;
    ChannelId theirs = c.theirs;
    bool still_theirs = c.current;
    if (e.kind == K::kExit) c.status = e.status;
    if (ended) {
      if (still_theirs) theirs_.erase(theirs);
      if (still_theirs && e.kind == K::kClosed && c.status == 0 && ahead_.may_start &&
          ahead_.may_start(c.command))
        again_.emplace(c.host, c.command);
      ours_.erase(it);
    }
    if (client_ >= 0 && still_theirs) forward(e, theirs);
  }

  // Starts `c` ahead on its host unless it is already waiting there. One waits per host at most
  // (each holds a session, and sshd allows ten per connection): one of another command that
  // waited there is ended (its stdin closed: it exits).
  void start_ahead(const HostCommand& c) {
    if (c.first >= alive_.size() || !alive_[c.first] || started_.count(c)) return;
    for (auto it = started_.begin(); it != started_.end();) {
      if (it->first.first != c.first) {
        ++it;
        continue;
      }
      end(it->second.ours);
      ahead_of_.erase(it->second.ours);
      it = started_.erase(it);
    }
    ChannelId ours = t_.exec(c.first, c.second);
    started_[c].ours = ours;
    ahead_of_[ours] = c;
  }

  // Ends a command on its host: the signal where sshd delivers signals (not to root's sessions:
  // OpenSSH has no privilege-separated child there), and the end of its stdin, which ends a program
  // that reads it (sync's: "interrupted", its temporary file removed; one waiting: it exits).
  void end(ChannelId ours) {
    t_.kill(ours, "KILL");
    t_.send_eof(ours);
  }

  void forward(const TransportEvent& e, ChannelId theirs) {
    out_ += encode_mux_frame({'e',
                              {static_cast<uint64_t>(e.kind), wire(theirs), e.host,
                               e.is_stderr ? 1u : 0u, wire(e.status)},
                              {std::string(e.data), e.signal}});
  }

  void after_poll() {
    std::vector<int> ready;
    ready.swap(ready_);
    for (int fd : ready) {
      if (fd == listen_fd_) {
        accept_all();
      } else if (fd == client_) {
        if (!recv_some(client_, in_)) {
          leave();
          continue;
        }
        try {
          for (const auto& f : whole_frames(in_)) act(f);
        } catch (const std::runtime_error&) {
          leave();
        }
      } else {
        hello(fd);
      }
    }
    if (client_ < 0) return;
    for (auto& [id, c] : ours_) {
      if (!c.current) continue;
      uint64_t handed = c.written - std::min<uint64_t>(c.written, t_.unsent(id));
      if (handed != c.handed) {
        c.handed = handed;
        out_ += encode_mux_frame({'a', {wire(c.theirs), handed}, {}});
      }
    }
    if (t_.now_ms() - liveness_at_ >= kLivenessEveryMs) send_liveness();
    if (!send_some(client_, out_)) leave();
  }

  void accept_all() {
    for (;;) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      waiting_.push_back(fd);
      t_.watch_fd(fd);
    }
  }

  // A command that connected says hello: it becomes the client when the keeper is free and
  // keeps the same hosts; else it is told why not and let go.
  void hello(int fd) {
    std::string& in = hellos_[fd];
    bool open = recv_some(fd, in);
    std::optional<MuxFrame> f;
    try {
      std::string_view rest(in);
      f = decode_mux_frame(rest);
    } catch (const std::runtime_error&) {
      open = false;
    }
    if (!f && open) return;
    t_.unwatch_fd(fd);
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), fd), waiting_.end());
    hellos_.erase(fd);
    int state = !f || f->type != 'H' || f->strings[0] != key_ || f->numbers[1] != alive_.size() ||
                        !same_user(fd)
                    ? 2
                : client_ >= 0 ? 1
                               : 0;
    std::string alive;
    for (bool a : alive_) alive += a ? '1' : '0';
    std::string welcome = encode_mux_frame(
        {'h', {static_cast<uint64_t>(state), static_cast<uint64_t>(::getpid())}, {alive}});
    bool sent = send_some(fd, welcome);
    if (state != 0 || !sent) {
      ::close(fd);
      return;
    }
    client_ = fd;
    persist_ms_ = static_cast<double>(f->numbers[0]);
    t_.watch_fd(fd);
    send_liveness();
  }

  void send_liveness() {
    liveness_at_ = t_.now_ms();
    std::string ages;
    for (size_t h = 0; h < alive_.size(); ++h) {
      std::optional<double> known = t_.tcp_ack_age_ms(h);
      uint32_t age = kUnknownAge;
      if (known) age = static_cast<uint32_t>(std::min(std::ceil(*known), 4e9));
      put(ages, age, 4);
    }
    out_ += encode_mux_frame({'l', {}, {ages}});
  }

  ChannelId ours_of(uint64_t theirs) const {
    auto it = theirs_.find(unwire(theirs));
    return it == theirs_.end() ? -1 : it->second;
  }

  void act(const MuxFrame& f) {
    switch (f.type) {
      case 'X': {
        size_t host = f.numbers[1];
        if (host >= alive_.size()) throw std::runtime_error("keeper protocol: no such host");
        ChannelId theirs = unwire(f.numbers[0]);
        HostCommand c{host, f.strings[0]};
        auto a = started_.find(c);
        ChannelId ours = a != started_.end() ? a->second.ours : t_.exec(host, c.second);
        ours_[ours] = Channel{theirs, host, 0, 0, true, c.second, -1};
        theirs_[theirs] = ours;
        if (a != started_.end()) {  // started ahead: it is this command's now
          auto held = std::move(a->second.held);
          ahead_of_.erase(ours);
          started_.erase(a);
          for (auto& [e, data] : held) {
            e.data = data;
            on_event(e);
          }
        }
        return;
      }
      case 'W':
        if (ChannelId ours = ours_of(f.numbers[0]); ours >= 0) {
          ours_[ours].written += f.strings[0].size();
          t_.write(ours, f.strings[0]);
        }
        return;
      case 'E':
        if (ChannelId ours = ours_of(f.numbers[0]); ours >= 0) t_.send_eof(ours);
        return;
      case 'C':
        if (ChannelId ours = ours_of(f.numbers[0]); ours >= 0) t_.cancel(ours);
        return;
      case 'K':
        if (ChannelId ours = ours_of(f.numbers[0]); ours >= 0) t_.kill(ours, f.strings[0].c_str());
        return;
      case 'D':
        if (f.numbers[0] < alive_.size()) {
          alive_[f.numbers[0]] = false;
          t_.drop_host(f.numbers[0]);
        }
        return;
      case 'Q':
        quit_ = true;
        return;
      default:
        throw std::runtime_error("keeper protocol: unexpected frame");
    }
  }

  // The command left (or broke the protocol): what it left running is ended on its hosts. What
  // it sent before it left is done first (a send to it can fail before its last frames were read).
  void leave() {
    recv_some(client_, in_);
    try {
      for (const auto& f : whole_frames(in_)) act(f);
    } catch (const std::runtime_error&) {
    }
    for (auto& [ours, c] : ours_) {
      if (c.current) end(ours);
      c.current = false;
    }
    theirs_.clear();
    t_.unwatch_fd(client_);
    ::close(client_);
    client_ = -1;
    in_.clear();
    out_.clear();
    idle_since_ = t_.now_ms();
    if (!stopping_ && !over())
      for (const auto& c : again_) start_ahead(c);
    again_.clear();
  }

  Transport& t_;
  int listen_fd_;
  std::string path_, key_;
  std::vector<bool> alive_;
  double persist_ms_;
  ino_t ino_ = 0;
  int client_ = -1;
  std::string in_, out_;
  std::vector<int> waiting_, ready_;
  std::map<int, std::string> hellos_;
  std::map<ChannelId, Channel> ours_;      // the transport's channel -> the command's
  std::map<ChannelId, ChannelId> theirs_;  // the command's channel still open -> the transport's
  bool quit_ = false;
  double idle_since_ = 0, liveness_at_ = -1e300;
  MuxAhead ahead_;
  std::map<HostCommand, Ahead> started_;       // started ahead, waiting for a command
  std::map<ChannelId, HostCommand> ahead_of_;  // their channels
  std::set<HostCommand> again_;  // ended well for the command attached: started again when it left
  bool stopping_ = false;
};

}  // namespace

void serve_mux(Transport& transport, int listen_fd, const std::string& path, const std::string& key,
               size_t hosts, double persist_s, MuxAhead ahead) {
  ino_t ino = mux_socket_inode(path);
  g_keeper_stop = 0;
  struct sigaction sa {};
  sa.sa_handler = stop_keeper;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  ::signal(SIGHUP, SIG_IGN);
  ::signal(SIGPIPE, SIG_IGN);
  set_nonblocking(listen_fd);
  Keeper(transport, listen_fd, path, key, hosts, persist_s, std::move(ahead)).run(ino);
}

void keep_connections(HostTransport& transport, const std::string& path, const std::string& key,
                      size_t hosts, double persist_s, MuxAhead ahead, int exit_code) {
  int fd = mux_listen(path);
  if (fd < 0) {
    std::fprintf(stderr, "msrun-ssh: warning: --persist: %s: %s: connections not kept\n",
                 path.c_str(), std::strerror(errno));
    return;
  }
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    std::fprintf(stderr, "msrun-ssh: warning: --persist: fork: %s: connections not kept\n",
                 std::strerror(errno));
    ::close(fd);
    ::unlink(path.c_str());
    return;
  }
  if (pid == 0) {
    ::setsid();
    if (::chdir("/") != 0) ::_exit(1);  // holds no directory of the user's in use
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int std_fd = 0; std_fd < 3 && null >= 0; ++std_fd) ::dup2(null, std_fd);
    if (null > 2) ::close(null);
    try {
      serve_mux(transport, fd, path, key, hosts, persist_s, std::move(ahead));
      transport.disconnect_all();
    } catch (...) {  // never back into the command that forked it
      ::_exit(1);
    }
    ::close(fd);
    ::_exit(0);
  }
  ::close(fd);
  std::fprintf(stderr, "msrun-ssh: connections kept for %g s by process %d (--persist)\n",
               persist_s, static_cast<int>(pid));
  std::fflush(nullptr);
  ::_exit(exit_code);
}

}  // namespace msrun_ssh
