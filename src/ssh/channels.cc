// Phase two of the SSH pool: channels opened on demand over the hosts' connections, their stdin,
// signals and events; and the epoll loop (with its wake-up coalescing) both phases wait in.
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <vector>

#include "pool.h"

namespace msrun_ssh {
namespace {
// Marks a stretch: one in which libssh may run the pool's callbacks (in_libssh), or in which the
// pool tears channels and sessions down (tearing_down).
class Stretch {
 public:
  explicit Stretch(int& depth) : depth_(depth) { ++depth_; }
  ~Stretch() { --depth_; }
  Stretch(const Stretch&) = delete;
  Stretch& operator=(const Stretch&) = delete;

 private:
  int& depth_;
};
}  // namespace

void SshPool::Impl::emit(const TransportEvent& e) {
  if (!handler || tearing_down != 0) return;
  if (in_libssh == 0) return (*handler)(e);
  Held h{e, held_bytes.size(), e.data.size()};
  h.event.data = {};
  held_bytes.append(e.data);
  held.push_back(std::move(h));
}

// Hands the held events over, in the order they came; called with no libssh call on the stack,
// so whatever the handler does to the pool (drop_host, disconnect_all) frees nothing in use.
void SshPool::Impl::deliver_held() {
  if (in_libssh != 0 || held.empty()) return;
  for (size_t i = 0; i < held.size(); ++i) {
    if (held[i].dropped) continue;
    TransportEvent e = held[i].event;
    e.data = std::string_view(held_bytes).substr(held[i].offset, held[i].size);
    if (handler) (*handler)(e);
  }
  held.clear();  // the capacity stays: no allocation per wake-up
  held_bytes.clear();
}

// A host torn down hears nothing more of itself: what it sent before is not handed over after.
void SshPool::Impl::drop_held(std::optional<size_t> host) {
  for (Held& h : held)
    if (!host || h.event.host == *host) h.dropped = true;
}

int SshPool::Impl::wait(std::vector<epoll_event>& evs, int timeout_ms) {
  if (timeout_ms > 0 && !busy) {
    double pause =
        std::min(kCoalesceMs - (monotonic_ms() - last_wake_ms), static_cast<double>(timeout_ms));
    if (pause > 0) {
      timespec ts{0, static_cast<long>(pause * 1e6)};
      nanosleep(&ts, nullptr);
      timeout_ms = std::max(0, timeout_ms - static_cast<int>(std::ceil(pause)));
    }
  }
  int n = epoll_wait(epfd, evs.data(), static_cast<int>(evs.size()), timeout_ms);
  last_wake_ms = monotonic_ms();
  busy = false;
  return n;
}

// Watches the session's socket for what libssh needs: always input, output only while libssh
// holds unsent bytes (or a TCP connect is in progress), so the loop never spins.
void SshPool::Impl::update_epoll(size_t ci) {
  Conn& c = conns[ci];
  int fd = c.session ? ssh_get_fd(c.session) : -1;
  if (fd != c.fd && c.fd >= 0) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, c.fd, nullptr);
    c.mask = 0;
  }
  c.fd = fd;
  if (fd < 0) return;
  uint32_t mask = EPOLLIN;
  if (ssh_get_poll_flags(c.session) & SSH_WRITE_PENDING) mask |= EPOLLOUT;
  if (mask == c.mask) return;
  epoll_event ev{};
  ev.events = mask;
  ev.data.u64 = ci;
  epoll_ctl(epfd, c.mask ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev);
  c.mask = mask;
}

// A channel libssh still holds after ssh_channel_free (one not yet closed by the server: its exec
// refused, or torn down before its command ran) lives on in the session until the server's close
// comes, and that close runs the channel's callbacks: they must not point into the Chan, which
// is freed before then.
void SshPool::Impl::free_channel(Chan& ch) {
  if (!ch.channel) return;
  ssh_remove_channel_callbacks(ch.channel, &ch.callbacks);
  ssh_channel_free(ch.channel);
  ch.channel = nullptr;
}

void SshPool::Impl::drop_conn(size_t ci, ConnState state) {
  Stretch quiet(tearing_down);
  Conn& c = conns[ci];
  close_known_hosts(c);
  if (c.fd >= 0) epoll_ctl(epfd, EPOLL_CTL_DEL, c.fd, nullptr);
  c.fd = -1;
  c.mask = 0;
  for (auto& [id, ch] : chans)
    if (ch->conn == ci) free_channel(*ch);
  if (c.event) {
    ssh_event_remove_session(c.event, c.session);
    ssh_event_free(c.event);
    c.event = nullptr;
  }
  if (c.session) {
    if (c.proxied) end_proxies({ci}, state == ConnState::kClosed ? kProxyGraceMs : 0);
    if (state == ConnState::kClosed) ssh_disconnect(c.session);
    ssh_free(c.session);  // and the agent filter's socket it held, if any
    c.session = nullptr;
  }
  if (c.proxy_log >= 0) ::close(c.proxy_log);
  c.proxy_log = -1;
  c.agent_fd = -1;
  c.agent_held.reset();
  c.state = state;
}

void SshPool::Impl::close_all() {
  Stretch quiet(tearing_down);
  drop_held(std::nullopt);
  for (auto& [id, ch] : chans) free_channel(*ch);
  std::vector<size_t> open;
  for (size_t i = 0; i < conns.size(); ++i)
    if (conns[i].session) open.push_back(i);
  end_proxies(open, kProxyGraceMs);  // all at once: one grace, not one per proxy
  for (size_t i : open) drop_conn(i, ConnState::kClosed);
}

int SshPool::Impl::on_data(ssh_session, ssh_channel, void* data, uint32_t len, int is_stderr,
                           void* user) {
  auto* ch = static_cast<Chan*>(user);
  TransportEvent e;
  e.kind = TransportEvent::Kind::kData;
  e.channel = ch->id;
  e.host = ch->pool->conns[ch->conn].host;
  e.is_stderr = is_stderr != 0;
  e.data = std::string_view(static_cast<const char*>(data), len);
  ch->pool->emit(e);
  return static_cast<int>(len);
}

void SshPool::Impl::report_exit(Chan* ch, int status, const std::string& signal) {
  if (ch->exited) return;
  ch->exited = true;
  TransportEvent e;
  e.kind = TransportEvent::Kind::kExit;
  e.channel = ch->id;
  e.host = conns[ch->conn].host;
  e.status = status;
  e.signal = signal;
  emit(e);
}

void SshPool::Impl::on_exit_status(ssh_session, ssh_channel, int status, void* user) {
  auto* ch = static_cast<Chan*>(user);
  ch->pool->report_exit(ch, status, "");
}

void SshPool::Impl::on_exit_signal(ssh_session, ssh_channel, const char* sig, int, const char*,
                                   const char*, void* user) {
  auto* ch = static_cast<Chan*>(user);
  std::string name = sig ? sig : "";
  ch->pool->report_exit(ch, 128 + signal_number(name.c_str()), name);
}

void SshPool::Impl::on_close(ssh_session, ssh_channel, void* user) {
  auto* ch = static_cast<Chan*>(user);
  ch->pool->close_chan(ch);
}

void SshPool::Impl::close_chan(Chan* ch) {
  if (ch->state == ChanState::kClosed) return;
  ch->state = ChanState::kClosed;
  ended.push_back(ch->id);
  if (conns[ch->conn].channels > 0) --conns[ch->conn].channels;
  TransportEvent e;
  e.kind = TransportEvent::Kind::kClosed;
  e.channel = ch->id;
  e.host = conns[ch->conn].host;
  emit(e);
}

void SshPool::Impl::open_failed(Chan* ch, const std::string& why) {
  TransportEvent e;
  e.kind = TransportEvent::Kind::kOpenFailed;
  e.channel = ch->id;
  e.host = conns[ch->conn].host;
  e.data = why;
  ch->state = ChanState::kClosed;
  ended.push_back(ch->id);
  if (conns[ch->conn].channels > 0) --conns[ch->conn].channels;
  free_channel(*ch);
  emit(e);
}

void SshPool::Impl::host_lost(size_t ci, const std::string& why) {
  size_t host = conns[ci].host;
  std::vector<size_t> host_conns;
  for (size_t i = 0; i < conns.size(); ++i)
    if (conns[i].host == host && conns[i].state == ConnState::kReady) host_conns.push_back(i);
  for (size_t i : host_conns) {
    drop_conn(i, ConnState::kFailed);
  }
  if (lost_hosts.insert(host).second) {
    TransportEvent e;
    e.kind = TransportEvent::Kind::kHostLost;
    e.host = host;
    e.data = why;
    emit(e);
  }
  for (auto& [id, ch] : chans)
    if (conns[ch->conn].host == host && ch->state != ChanState::kClosed) close_chan(ch.get());
}

// Drives one channel's open / exec / stdin as far as possible; called outside callbacks only.
void SshPool::Impl::step(Chan* ch) {
  Conn& c = conns[ch->conn];
  if (c.state != ConnState::kReady || ch->state == ChanState::kClosed) return;
  if (ch->cancelled && !ch->exec_sent) {
    if (ch->channel && ch->state == ChanState::kExec) ssh_channel_close(ch->channel);
    // A channel still opening is freed by open_failed; the server's late answer to it is
    // ignored by libssh (unknown channel), and the disconnect ends it on the server.
    return open_failed(ch, "not started: the job is being torn down");
  }
  if (ch->state == ChanState::kNew) {
    ch->channel = ssh_channel_new(c.session);
    if (!ch->channel) return open_failed(ch, describe_error(c.session));
    ch->callbacks = {};
    ch->callbacks.userdata = ch;
    ch->callbacks.channel_data_function = &Impl::on_data;
    ch->callbacks.channel_exit_status_function = &Impl::on_exit_status;
    ch->callbacks.channel_exit_signal_function = &Impl::on_exit_signal;
    ch->callbacks.channel_close_function = &Impl::on_close;
    ssh_callbacks_init(&ch->callbacks);
    ssh_set_channel_callbacks(ch->channel, &ch->callbacks);
    ch->state = ChanState::kOpening;
  }
  if (ch->state == ChanState::kOpening) {
    int rc = ssh_channel_open_session(ch->channel);
    if (rc == SSH_AGAIN) return;
    if (rc != SSH_OK && ssh_get_error_code(c.session) == SSH_REQUEST_DENIED &&
        ch->open_retries < kOpenRetries && c.channels <= kChannelsPerConnection) {
      // sshd frees a session (MaxSessions) once it has both closes, after it handled every
      // packet that came with the launcher's close: an open sent right after that close (an
      // in-place restart's, without the agent) can find the session still taken. The refusal
      // leaves after sshd freed it: sent again, the open is handled then.
      free_channel(*ch);
      ++ch->open_retries;
      ch->state = ChanState::kNew;
      return;
    }
    if (rc != SSH_OK)
      return open_failed(
          ch, fmt::format("cannot open a session channel: {}", describe_error(c.session)));
    ch->state = ChanState::kExec;
  }
  if (ch->state == ChanState::kExec) {
    ch->exec_sent = true;
    int rc = ssh_channel_request_exec(ch->channel, ch->command.c_str());
    if (rc == SSH_AGAIN) return;
    if (rc != SSH_OK)
      return open_failed(ch,
                         fmt::format("cannot execute the command: {}", describe_error(c.session)));
    ch->state = ChanState::kRunning;
    std::string().swap(ch->command);  // sent: its bytes (the launch agent's are ~6 KB) go
  }
  if (!ch->signal_wanted.empty()) {
    // want_reply is false: the request is sent at once, never pending.
    ssh_channel_request_send_signal(ch->channel, ch->signal_wanted.c_str());
    ch->signal_wanted.clear();
  }
  // A channel's first bytes (the launch agent's program, the watchdog's and the processes'
  // spawn frames) go in packets of at most kSmallPacket: libssh keeps its buffers as large as the
  // largest packet that went through them, for the session's life, on every host.
  while (!ch->out.empty()) {
    std::string_view next = ch->out.front();
    size_t size = next.size();
    if (ch->written < kSmallPacketsFor) size = std::min(size, kSmallPacket);
    int n = ssh_channel_write(ch->channel, next.data(), static_cast<uint32_t>(size));
    if (n <= 0) break;
    ch->out.consume(static_cast<size_t>(n));
    ch->written += static_cast<size_t>(n);
    if (static_cast<size_t>(n) < size) break;
  }
  if (ch->eof_wanted && !ch->eof_sent && ch->out.empty()) {
    ssh_channel_send_eof(ch->channel);
    ch->eof_sent = true;
  }
}

bool SshPool::Impl::needs_step(const Chan& ch) const {
  return ch.state == ChanState::kNew || ch.state == ChanState::kOpening ||
         ch.state == ChanState::kExec ||
         (ch.state == ChanState::kRunning &&
          (!ch.out.empty() || (ch.eof_wanted && !ch.eof_sent) || !ch.signal_wanted.empty()));
}

// Steps the channels, then hands over the events their libssh calls gave.
void SshPool::Impl::step_all() {
  {
    Stretch guard(in_libssh);
    step_unsettled();
  }
  deliver_held();
}

// Takes the pending steps of the unsettled channels only: a wake-up costs nothing per idle
// channel.
void SshPool::Impl::step_unsettled() {
  free_ended();
  std::set<size_t> touched;
  for (auto it = unsettled.begin(); it != unsettled.end();) {
    auto found = chans.find(*it);
    Chan* ch = found == chans.end() ? nullptr : found->second.get();
    if (ch && needs_step(*ch)) {
      step(ch);
      touched.insert(ch->conn);
    }
    if (ch && needs_step(*ch) && ch->state != ChanState::kClosed)
      ++it;
    else
      it = unsettled.erase(it);
  }
  for (size_t ci : touched) check_conn(ci);
  free_ended();
}

// Channels closed by the remote end are freed here, outside libssh's callbacks; first of all, so
// that their closes leave before a new channel's open (an open right after a close is refused by
// an sshd at MaxSessions until it has the close).
void SshPool::Impl::free_ended() {
  for (ChannelId id : std::exchange(ended, {})) {
    auto it = chans.find(id);
    if (it == chans.end()) continue;
    Chan& ch = *it->second;
    if (ch.channel && linger && conns[ch.conn].state == ConnState::kReady)
      ssh_remove_channel_callbacks(ch.channel, &ch.callbacks);  // left to ssh_disconnect
    else
      free_channel(ch);
    chans.erase(it);
  }
}

void SshPool::Impl::check_conn(size_t ci) {
  Conn& c = conns[ci];
  if (c.state != ConnState::kReady) return;
  int status = ssh_get_status(c.session);
  if ((status & (SSH_CLOSED | SSH_CLOSED_ERROR)) || !ssh_is_connected(c.session)) {
    host_lost(ci, describe_loss(c.session));
    return;
  }
  update_epoll(ci);
}

void SshPool::Impl::pump(size_t ci) {
  Conn& c = conns[ci];
  for (int round = 0; round < kMaxPumpRounds && c.state == ConnState::kReady; ++round) {
    int rc = ssh_event_dopoll(c.event, 0);
    if (rc == SSH_ERROR && c.state == ConnState::kReady) {
      host_lost(ci, describe_loss(c.session));
      return;
    }
    if (rc != SSH_OK) break;     // SSH_AGAIN: nothing more to read now
    if (round > 0) busy = true;  // still more after a first read: a stream, not a message
  }
  check_conn(ci);
}

ChannelId SshPool::Impl::exec(size_t host, const std::string& command) {
  size_t best = conns.size();
  for (size_t i = 0; i < conns.size(); ++i)
    if (conns[i].host == host && conns[i].state == ConnState::kReady &&
        (best == conns.size() || conns[i].channels < conns[best].channels))
      best = i;
  auto ch = std::make_unique<Chan>();
  ch->pool = this;
  ch->id = next_id++;
  ch->command = command;
  ChannelId id = ch->id;
  if (best == conns.size()) {
    // No live connection: report the failure through the event stream like any other.
    ch->conn = 0;
    while (ch->conn < conns.size() && conns[ch->conn].host != host) ++ch->conn;
    ch->state = ChanState::kClosed;
    pending_failures.push_back({id, host});
    ended.push_back(id);
    chans.emplace(id, std::move(ch));
    return id;
  }
  ch->conn = best;
  ++conns[best].channels;
  chans.emplace(id, std::move(ch));
  unsettled.insert(id);
  return id;
}

void SshPool::Impl::report_pending_failures() {
  auto failures = std::move(pending_failures);
  pending_failures.clear();
  for (auto [id, host] : failures) {
    TransportEvent e;
    e.kind = TransportEvent::Kind::kOpenFailed;
    e.channel = id;
    e.host = host;
    e.data = "no live connection to the host";
    emit(e);
  }
}

void SshPool::Impl::poll(int timeout_ms, const EventHandler& h) {
  handler = &h;
  report_pending_failures();
  step_all();
  std::vector<epoll_event> evs(512);
  int n = wait(evs, always_ready.empty() ? timeout_ms : 0);
  for (int i = 0; i < n; ++i) {
    uint64_t key = evs[i].data.u64;
    if (key >= kFdKey) {
      TransportEvent e;
      e.kind = TransportEvent::Kind::kFdReady;
      e.fd = static_cast<int>(key - kFdKey);
      emit(e);
    } else {
      {
        Stretch guard(in_libssh);
        pump(static_cast<size_t>(key));
      }
      deliver_held();
    }
  }
  // A copy: the handler may unwatch one (at its end of file).
  for (int fd : std::vector<int>(always_ready.begin(), always_ready.end()))
    if (always_ready.count(fd) != 0) {
      TransportEvent e;
      e.kind = TransportEvent::Kind::kFdReady;
      e.fd = fd;
      emit(e);
    }
  step_all();
  report_pending_failures();
  handler = nullptr;
}

void SshPool::Impl::watch_fd(int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kFdKey + static_cast<uint64_t>(fd);
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0)
    watched.insert(fd);
  else if (errno == EPERM)  // a regular file or /dev/null: its read never waits
    always_ready.insert(fd);
}

void SshPool::Impl::unwatch_fd(int fd) {
  if (watched.erase(fd)) epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
  always_ready.erase(fd);
}

ChannelId SshPool::exec(size_t host, const std::string& command) {
  return impl_->exec(host, command);
}

void SshPool::write(ChannelId channel, std::string_view data) {
  auto it = impl_->chans.find(channel);
  if (it != impl_->chans.end() && !it->second->eof_wanted) {
    it->second->out.append(data);
    impl_->unsettled.insert(channel);
  }
}

// Data of static storage (the launch agent's program, the same for every host): kept as a view
// while it waits, not copied once per host.
void SshPool::write_stable(ChannelId channel, std::string_view data) {
  auto it = impl_->chans.find(channel);
  if (it == impl_->chans.end() || it->second->eof_wanted) return;
  it->second->out.append_stable(data);
  impl_->unsettled.insert(channel);
}

void SshPool::send_eof(ChannelId channel) {
  auto it = impl_->chans.find(channel);
  if (it != impl_->chans.end()) {
    it->second->eof_wanted = true;
    impl_->unsettled.insert(channel);
  }
}

size_t SshPool::unsent(ChannelId channel) const {
  auto it = impl_->chans.find(channel);
  return it == impl_->chans.end() ? 0 : it->second->out.size();
}

void SshPool::no_more_channels() { impl_->linger = true; }

void SshPool::cancel(ChannelId channel) {
  auto it = impl_->chans.find(channel);
  if (it == impl_->chans.end() || it->second->state == Impl::ChanState::kClosed) return;
  it->second->cancelled = true;
  impl_->unsettled.insert(channel);
}

void SshPool::kill(ChannelId channel, const char* signal) {
  auto it = impl_->chans.find(channel);
  if (it == impl_->chans.end() || it->second->state == Impl::ChanState::kClosed) return;
  it->second->cancelled = true;
  if (it->second->exec_sent) it->second->signal_wanted = signal;
  impl_->unsettled.insert(channel);
}

void SshPool::drop_host(size_t host) {
  impl_->drop_held(host);
  for (auto& [id, ch] : impl_->chans)
    if (impl_->conns[ch->conn].host == host && ch->state != Impl::ChanState::kClosed) {
      ch->state = Impl::ChanState::kClosed;
      impl_->ended.push_back(id);
    }
  for (size_t i = 0; i < impl_->conns.size(); ++i)
    if (impl_->conns[i].host == host && impl_->conns[i].session)
      impl_->drop_conn(i, Impl::ConnState::kFailed);
  impl_->lost_hosts.insert(host);
}

std::optional<Transport::ServerAlive> SshPool::server_alive(size_t host) const {
  if (!impl_->has_openssh(host)) return std::nullopt;
  const SshHostConfig& c = *impl_->openssh[host].shared;
  if (c.server_alive_interval_s <= 0) return std::nullopt;
  return ServerAlive{.interval_s = static_cast<double>(c.server_alive_interval_s),
                     .count_max = c.server_alive_count_max};
}

// TCP_INFO of every live connection to the host: all sent data acknowledged, or an ACK within
// `within_ms`, means the host's kernel answers.
std::optional<double> SshPool::tcp_ack_age_ms(size_t host) const {
  std::optional<double> out;
  for (const auto& c : impl_->conns) {
    if (c.host != host || !c.session) continue;
    struct tcp_info info {};
    socklen_t len = sizeof info;
    int fd = ssh_get_fd(c.session);
    if (fd < 0 || ::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) continue;
    double age = info.tcpi_unacked == 0 ? 0 : info.tcpi_last_ack_recv;
    if (!out || age < *out) out = age;
  }
  return out;
}

void SshPool::watch_fd(int fd) { impl_->watch_fd(fd); }
void SshPool::unwatch_fd(int fd) { impl_->unwatch_fd(fd); }

void SshPool::poll(int timeout_ms, const EventHandler& handler) {
  impl_->poll(timeout_ms, handler);
}

double SshPool::now_ms() const { return monotonic_ms(); }

void SshPool::disconnect_all() { impl_->close_all(); }

}  // namespace msrun_ssh
