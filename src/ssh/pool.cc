#include <fcntl.h>
#include <fmt/format.h>
#include <libssh/callbacks.h>
#include <libssh/libssh.h>
#include <pwd.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <utility>

#include "msrun_ssh/ssh.h"

namespace msrun_ssh {
namespace {

double monotonic_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

int signal_number(const char* name) {
  for (int i = 1; i < 65; ++i) {
    const char* abbrev = sigabbrev_np(i);
    if (abbrev && strcmp(abbrev, name) == 0) return i;
  }
  return 0;
}

// A launcher holds several descriptors per host: lift the soft limit to the hard one.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// The user's home as libssh and OpenSSH find it: from the password database, not $HOME.
std::string user_home_dir() {
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(static_cast<size_t>(size > 0 ? size : 16384));
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(getuid(), &pw, buf.data(), buf.size(), &found) != 0 || !found || !pw.pw_dir)
    return "";
  return pw.pw_dir;
}

std::optional<std::string> read_whole_file(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  close(fd);
  if (n < 0) return std::nullopt;
  return text;
}

// An in-memory file holding `text`, readable by path as /proc/self/fd/N; -1 on failure.
int memory_file(const std::string& text) {
  int fd = memfd_create("msrun-ssh-known_hosts", MFD_CLOEXEC);
  if (fd < 0) return -1;
  for (size_t done = 0; done < text.size();) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      close(fd);
      return -1;
    }
    done += static_cast<size_t>(n);
  }
  return fd;
}

std::string option_string(ssh_session s, ssh_options_e option) {
  char* value = nullptr;
  if (ssh_options_get(s, option, &value) != SSH_OK || !value) return "";
  std::string out = value;
  ssh_string_free_char(value);
  return out;
}

struct KeyDeleter {
  void operator()(ssh_key k) const { ssh_key_free(k); }
};
using KeyPtr = std::unique_ptr<std::remove_pointer_t<ssh_key>, KeyDeleter>;

std::string describe_error(ssh_session s) {
  std::string e = ssh_get_error(s);
  if (e.empty()) return "connection failed";
  return e;
}

// A failure libssh describes: its words, and their kind.
ConnectFailure libssh_failure(ssh_session s) {
  std::string why = describe_error(s);
  return {classify_libssh_error(why), why};
}

}  // namespace

ConnectError classify_libssh_error(std::string_view message) {
  auto has = [message](std::string_view part) { return message.find(part) != message.npos; };
  if (has("Connection refused")) return ConnectError::kRefused;
  if (has("Failed to resolve hostname") || has("No route to host") || has("Network is unreachable"))
    return ConnectError::kUnreachable;
  if (has("timed out")) return ConnectError::kTimedOut;
  if (has("host key")) return ConnectError::kHostKeyUnverifiable;
  return ConnectError::kOther;
}

struct SshPool::Impl {
  enum class ConnState { kQueued, kConnecting, kAuth, kReady, kFailed, kClosed };
  struct Conn {
    size_t host = 0;
    ssh_session session = nullptr;
    ssh_event event = nullptr;
    ConnState state = ConnState::kQueued;
    double deadline = 0;
    int fd = -1;
    uint32_t mask = 0;
    int channels = 0;
    std::string known_hosts;           // the user known_hosts file, as the user knows it
    std::string global_known_hosts;    // and the global one
    std::vector<int> known_hosts_fds;  // the narrowed copies libssh reads (memfds)
    bool known_hosts_empty = false;    // and they hold no line for the host
  };
  enum class ChanState { kNew, kOpening, kExec, kRunning, kClosed };
  struct Chan {
    Impl* pool = nullptr;
    ChannelId id = 0;
    size_t conn = 0;
    ssh_channel channel = nullptr;
    ChanState state = ChanState::kNew;
    std::string command;
    std::string out;  // stdin bytes not yet accepted by libssh
    bool eof_wanted = false;
    bool eof_sent = false;
    bool exited = false;
    bool exec_sent = false;     // the exec request left: the command may run
    bool cancelled = false;     // a teardown came before the exec request: never send it
    std::string signal_wanted;  // an SSH "signal" request to send ("KILL")
    ssh_channel_callbacks_struct callbacks{};
  };

  std::vector<SshEndpoint> hosts;
  SshSettings settings;
  std::vector<Conn> conns;
  std::map<ChannelId, std::unique_ptr<Chan>> chans;
  std::set<ChannelId> unsettled;  // channels with an open / exec / stdin / EOF step to take
  std::vector<ChannelId> ended;   // closed channels, freed outside libssh's callbacks
  double last_wake_ms = 0;
  // No channel will be opened any more (no_more_channels): an ended channel is not answered
  // with a close of its own (one packet per channel less); ssh_disconnect closes and frees it.
  bool linger = false;
  bool busy = false;  // the last wake-up read a stream of output: do not pause
  std::set<size_t> lost_hosts;
  std::map<std::string, KeyPtr> keys;  // identity file -> key, loaded once
  std::set<int> watched;
  std::vector<ConnectWarning> warnings;
  const EventHandler* handler = nullptr;
  ChannelId next_id = 1;
  int epfd = -1;
  std::string home_dir;  // of the user, from the password database, looked up once
  std::string ssh_dir;   // home_dir/.ssh
  std::map<std::string, std::unique_ptr<KnownHostsIndex>> known_hosts_files;  // read once each
  std::map<std::tuple<std::string, std::string, int>, std::string> known_hosts_lines_of;
  bool narrowing = false;  // known_hosts narrowing possible (/proc mounted)

  Impl(std::vector<SshEndpoint> h, SshSettings s) : hosts(std::move(h)), settings(std::move(s)) {
    raise_fd_limit();
    home_dir = user_home_dir();
    if (!home_dir.empty()) ssh_dir = home_dir + "/.ssh";
    // The narrowed known_hosts copies are opened by libssh as /proc/self/fd/N.
    narrowing = access("/proc/self/fd", X_OK) == 0;
    epfd = epoll_create1(EPOLL_CLOEXEC);
  }

  ~Impl() {
    close_all();
    if (epfd >= 0) close(epfd);
  }

  void emit(const TransportEvent& e) {
    if (handler) (*handler)(e);
  }

  // --- wake-up coalescing -----------------------------------------------------------------------

  // A launch is hundreds of small exchanges (handshake steps, channel confirmations, heartbeat
  // echoes) that arrive one by one. Waking up for each costs an epoll_wait plus a poll and a read
  // per ready socket, which made up a large share of the launcher's CPU time. After a wake-up that
  // read only messages the loop pauses until kCoalesceMs have passed since it, so that the next
  // wake-up finds several hosts ready. Streams of output (a connection that still had more to
  // read after a first read) are never delayed, and the pause never outlasts the caller's timeout.
  static constexpr double kCoalesceMs = 1.0;

  int wait(std::vector<epoll_event>& evs, int timeout_ms) {
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

  // --- descriptors -------------------------------------------------------------------------

  // Watches the session's socket for what libssh needs: always input, output only while libssh
  // holds unsent bytes (or a TCP connect is in progress), so the loop never spins.
  void update_epoll(size_t ci) {
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

  void drop_conn(size_t ci, ConnState state) {
    Conn& c = conns[ci];
    close_known_hosts(c);
    if (c.fd >= 0) epoll_ctl(epfd, EPOLL_CTL_DEL, c.fd, nullptr);
    c.fd = -1;
    c.mask = 0;
    for (auto& [id, ch] : chans)
      if (ch->conn == ci && ch->channel) {
        ssh_channel_free(ch->channel);
        ch->channel = nullptr;
      }
    if (c.event) {
      ssh_event_remove_session(c.event, c.session);
      ssh_event_free(c.event);
      c.event = nullptr;
    }
    if (c.session) {
      if (state == ConnState::kClosed) ssh_disconnect(c.session);
      ssh_free(c.session);
      c.session = nullptr;
    }
    c.state = state;
  }

  void close_all() {
    for (auto& [id, ch] : chans)
      if (ch->channel) {
        ssh_channel_free(ch->channel);
        ch->channel = nullptr;
      }
    for (size_t i = 0; i < conns.size(); ++i)
      if (conns[i].session) drop_conn(i, ConnState::kClosed);
  }

  // --- phase one: connect, verify, authenticate -----------------------------------------------

  ssh_key identity(const std::string& path, ConnectFailure& error) {
    auto it = keys.find(path);
    if (it != keys.end()) return it->second.get();
    ssh_key key = nullptr;
    if (ssh_pki_import_privkey_file(path.c_str(), nullptr, nullptr, nullptr, &key) != SSH_OK) {
      error = {ConnectError::kIdentityUnreadable,
               fmt::format("cannot load identity file {}", path)};
      return nullptr;
    }
    return keys.emplace(path, KeyPtr(key)).first->second.get();
  }

  bool start_connect(size_t ci, ConnectFailure& error) {
    Conn& c = conns[ci];
    const SshEndpoint& ep = hosts[c.host];
    c.session = ssh_new();
    if (!c.session) return error = {ConnectError::kOther, "out of memory"}, false;
    ssh_options_set(c.session, SSH_OPTIONS_HOST, ep.address.c_str());
    // libssh would look the user's home directory up in the password database for every session.
    if (!ssh_dir.empty()) ssh_options_set(c.session, SSH_OPTIONS_SSH_DIR, ssh_dir.c_str());
    std::string config = settings.ssh_config;
    if (config.empty()) {
      const char* home = getenv("HOME");
      std::string def = std::string(home ? home : "") + "/.ssh/config";
      if (access(def.c_str(), R_OK) == 0) config = def;
    }
    if (!config.empty() && ssh_options_parse_config(c.session, config.c_str()) != SSH_OK)
      return error = {ConnectError::kOther, fmt::format("cannot parse ssh config {}", config)},
             false;
    apply_ssh_log_verbosity(c.session);  // a LogLevel in the config does not decide it
    bool no = false;
    ssh_options_set(c.session, SSH_OPTIONS_PROCESS_CONFIG, &no);
    if (!ep.user.empty()) ssh_options_set(c.session, SSH_OPTIONS_USER, ep.user.c_str());
    if (ep.port) {
      unsigned int port = static_cast<unsigned int>(*ep.port);
      ssh_options_set(c.session, SSH_OPTIONS_PORT, &port);
    }
    if (!ep.known_hosts.empty())
      ssh_options_set(c.session, SSH_OPTIONS_KNOWNHOSTS, ep.known_hosts.c_str());
    narrow_known_hosts(c);
    ssh_set_blocking(c.session, 0);
    c.deadline = monotonic_ms() + settings.connect_timeout_s * 1000;
    c.state = ConnState::kConnecting;
    return advance(ci, error);
  }

  // The path libssh would open for a known_hosts option value; "" when it holds what only libssh
  // expands (%d, %u, ~user).
  std::string expand_path(const std::string& value) const {
    if (value.find('%') != std::string::npos) return "";
    if (value.starts_with("~/")) return home_dir.empty() ? "" : home_dir + value.substr(1);
    if (value.starts_with('~')) return "";
    return value;
  }

  // The lines of known_hosts file `path` for a host, computed once per file and host: a host with
  // several connections (past MaxSessions) does not pay its HMACs again.
  const std::string& known_hosts_lines(const std::string& path, const std::string& host, int port) {
    auto& index = known_hosts_files[path];
    if (!index) index = std::make_unique<KnownHostsIndex>(read_whole_file(path).value_or(""));
    auto key = std::make_tuple(path, host, port);
    auto it = known_hosts_lines_of.find(key);
    if (it == known_hosts_lines_of.end())
      it = known_hosts_lines_of.emplace(key, index->lines_for(host, port)).first;
    return it->second;
  }

  // Points the session's known_hosts options at in-memory copies of its files that hold only the
  // lines for its host (KnownHostsIndex). Leaves the session as it is when a path cannot be told
  // for sure or a copy cannot be made: libssh then reads the files themselves.
  void narrow_known_hosts(Conn& c) {
    std::string user = option_string(c.session, SSH_OPTIONS_KNOWNHOSTS);
    user = user.empty() ? (ssh_dir.empty() ? "" : ssh_dir + "/known_hosts") : expand_path(user);
    std::string global = option_string(c.session, SSH_OPTIONS_GLOBAL_KNOWNHOSTS);
    global = global.empty() ? "/etc/ssh/ssh_known_hosts" : expand_path(global);
    std::string host = option_string(c.session, SSH_OPTIONS_HOST);
    unsigned int port = 22;
    if (!narrowing || user.empty() || global.empty() || host.empty() ||
        ssh_options_get_port(c.session, &port) != SSH_OK)
      return;
    const std::string& user_lines = known_hosts_lines(user, host, static_cast<int>(port));
    const std::string& global_lines = known_hosts_lines(global, host, static_cast<int>(port));
    int user_fd = memory_file(user_lines);
    int global_fd = memory_file(global_lines);
    if (user_fd < 0 || global_fd < 0) {
      if (user_fd >= 0) close(user_fd);
      if (global_fd >= 0) close(global_fd);
      return;
    }
    c.known_hosts = user;
    c.global_known_hosts = global;
    c.known_hosts_fds = {user_fd, global_fd};
    c.known_hosts_empty = user_lines.empty() && global_lines.empty();
    ssh_options_set(c.session, SSH_OPTIONS_KNOWNHOSTS,
                    fmt::format("/proc/self/fd/{}", user_fd).c_str());
    ssh_options_set(c.session, SSH_OPTIONS_GLOBAL_KNOWNHOSTS,
                    fmt::format("/proc/self/fd/{}", global_fd).c_str());
  }

  // After the host key check: the session's options name the real files again (accept-new writes
  // there) and the copies are closed.
  void close_known_hosts(Conn& c) {
    if (c.known_hosts_fds.empty()) return;
    if (c.session) {
      ssh_options_set(c.session, SSH_OPTIONS_KNOWNHOSTS, c.known_hosts.c_str());
      ssh_options_set(c.session, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, c.global_known_hosts.c_str());
    }
    for (int fd : c.known_hosts_fds) close(fd);
    c.known_hosts_fds.clear();
  }

  bool verify_host_key(size_t ci, ConnectFailure& error) {
    Conn& c = conns[ci];
    const SshEndpoint& ep = hosts[c.host];
    HostKeyPolicy policy = settings.host_key_policy.value_or(HostKeyPolicy::kYes);
    std::string known = c.known_hosts;
    if (known.empty()) known = option_string(c.session, SSH_OPTIONS_KNOWNHOSTS);
    if (known.empty()) known = "~/.ssh/known_hosts";
    enum ssh_known_hosts_e verdict = ssh_session_is_known_server(c.session);
    close_known_hosts(c);
    switch (verdict) {
      case SSH_KNOWN_HOSTS_OK:
        // libssh also says OK for a host it has no line for when the ssh config says
        // StrictHostKeyChecking no: not verified, and the user is told so.
        if (c.known_hosts_empty)
          warnings.push_back({c.host, ConnectWarningKind::kHostKeyNotVerified,
                              fmt::format("host key NOT verified (not in {}) because the ssh "
                                          "config says StrictHostKeyChecking no",
                                          known)});
        return true;
      case SSH_KNOWN_HOSTS_CHANGED:
        error = {ConnectError::kHostKeyChanged,
                 fmt::format("host key CHANGED (does not match {}): possible man-in-the-middle, "
                             "refused; if the host was reinstalled, remove its old key with: "
                             "ssh-keygen -R {} -f {}",
                             known, ep.address, known)};
        return false;
      case SSH_KNOWN_HOSTS_OTHER:
        error = {ConnectError::kHostKeyChanged,
                 fmt::format("host key of another type than the one in {}: refused", known)};
        return false;
      case SSH_KNOWN_HOSTS_UNKNOWN:
      case SSH_KNOWN_HOSTS_NOT_FOUND:
        if (policy == HostKeyPolicy::kAcceptNew) {
          if (ssh_session_update_known_hosts(c.session) != SSH_OK)
            return error = {ConnectError::kHostKeyUnverifiable,
                            fmt::format("cannot add its host key to {}", known)},
                   false;
          warnings.push_back({c.host, ConnectWarningKind::kHostKeyAdded,
                              fmt::format("new host key added to {}", known)});
          return true;
        }
        if (policy == HostKeyPolicy::kNo) {
          warnings.push_back({c.host, ConnectWarningKind::kHostKeyNotVerified,
                              fmt::format("host key NOT verified (not in {}) because of "
                                          "--strict_host_key_checking=no",
                                          known)});
          return true;
        }
        error = {ConnectError::kHostKeyUnknown,
                 fmt::format("unknown host key (not in {}); after checking it, add it with: "
                             "ssh-keyscan -p {} {} >> {}",
                             known, ep.port.value_or(22), ep.address, known)};
        return false;
      default:
        error = {ConnectError::kHostKeyUnverifiable,
                 fmt::format("cannot check the host key: {}", describe_error(c.session))};
        return false;
    }
  }

  // Moves one connection as far as it can go without blocking. False: failed, `error` says why.
  bool advance(size_t ci, ConnectFailure& error) {
    Conn& c = conns[ci];
    const SshEndpoint& ep = hosts[c.host];
    if (c.state == ConnState::kConnecting) {
      int rc = ssh_connect(c.session);
      if (rc == SSH_AGAIN) return update_epoll(ci), true;
      if (rc != SSH_OK) return error = libssh_failure(c.session), false;
      if (!verify_host_key(ci, error)) return false;
      c.state = ConnState::kAuth;
    }
    if (c.state == ConnState::kAuth) {
      int rc;
      if (!ep.identity_file.empty()) {
        ssh_key key = identity(ep.identity_file, error);
        if (!key) return false;
        rc = ssh_userauth_publickey(c.session, nullptr, key);
      } else {
        rc = ssh_userauth_publickey_auto(c.session, nullptr, nullptr);
      }
      if (rc == SSH_AUTH_AGAIN) return update_epoll(ci), true;
      if (rc == SSH_AUTH_DENIED || rc == SSH_AUTH_PARTIAL) {
        char* user = nullptr;
        ssh_options_get(c.session, SSH_OPTIONS_USER, &user);
        error = {ConnectError::kAuthDenied,
                 fmt::format("authentication denied (publickey) for user {}", user ? user : "?")};
        ssh_string_free_char(user);
        return false;
      }
      if (rc != SSH_AUTH_SUCCESS) return error = libssh_failure(c.session), false;
      c.event = ssh_event_new();
      ssh_event_add_session(c.event, c.session);
      c.state = ConnState::kReady;
      update_epoll(ci);
    }
    return true;
  }

  std::vector<std::optional<ConnectFailure>> connect_all(const std::vector<int>& per_host) {
    for (size_t h = 0; h < hosts.size(); ++h)
      for (int k = 0; k < std::max(1, per_host.at(h)); ++k) conns.push_back(Conn{.host = h});
    std::vector<std::optional<ConnectFailure>> failed(hosts.size());
    size_t next = 0;
    int in_flight = 0;
    auto fail = [&](size_t ci, ConnectFailure why) {
      drop_conn(ci, ConnState::kFailed);
      if (!failed[conns[ci].host]) failed[conns[ci].host] = std::move(why);
      --in_flight;
    };
    std::vector<epoll_event> evs(256);
    while (true) {
      while (next < conns.size() && in_flight < settings.fanout) {
        size_t ci = next++;
        ++in_flight;
        ConnectFailure error;
        if (!start_connect(ci, error))
          fail(ci, error);
        else if (conns[ci].state == ConnState::kReady)
          --in_flight;
      }
      if (in_flight == 0 && next == conns.size()) break;
      double now = monotonic_ms();
      double soonest = now + 1000;
      for (size_t ci = 0; ci < conns.size(); ++ci) {
        Conn& c = conns[ci];
        if (c.state != ConnState::kConnecting && c.state != ConnState::kAuth) continue;
        if (c.deadline <= now) {
          bool answered = c.state == ConnState::kAuth;
          fail(ci, {answered ? ConnectError::kAuthTimedOut : ConnectError::kTimedOut,
                    fmt::format("timed out after {:g} s ({})", settings.connect_timeout_s,
                                answered ? "during authentication" : "no answer")});
        } else {
          soonest = std::min(soonest, c.deadline);
        }
      }
      if (in_flight == 0) continue;
      int n = wait(evs, static_cast<int>(std::ceil(soonest - now)));
      for (int i = 0; i < n; ++i) {
        size_t ci = evs[i].data.u64;
        Conn& c = conns[ci];
        if (c.state != ConnState::kConnecting && c.state != ConnState::kAuth) continue;
        ConnectFailure error;
        if (!advance(ci, error))
          fail(ci, error);
        else if (c.state == ConnState::kReady)
          --in_flight;
      }
    }
    // A host is ready only when every connection it needs is: the others of a failed host close.
    for (size_t ci = 0; ci < conns.size(); ++ci)
      if (failed[conns[ci].host] && conns[ci].session) drop_conn(ci, ConnState::kClosed);
    return failed;
  }

  // --- phase two: channels --------------------------------------------------------------------

  static int on_data(ssh_session, ssh_channel, void* data, uint32_t len, int is_stderr,
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

  void report_exit(Chan* ch, int status, const std::string& signal) {
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

  static void on_exit_status(ssh_session, ssh_channel, int status, void* user) {
    auto* ch = static_cast<Chan*>(user);
    ch->pool->report_exit(ch, status, "");
  }

  static void on_exit_signal(ssh_session, ssh_channel, const char* sig, int, const char*,
                             const char*, void* user) {
    auto* ch = static_cast<Chan*>(user);
    std::string name = sig ? sig : "";
    ch->pool->report_exit(ch, 128 + signal_number(name.c_str()), name);
  }

  static void on_close(ssh_session, ssh_channel, void* user) {
    auto* ch = static_cast<Chan*>(user);
    ch->pool->close_chan(ch);
  }

  void close_chan(Chan* ch) {
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

  void open_failed(Chan* ch, const std::string& why) {
    TransportEvent e;
    e.kind = TransportEvent::Kind::kOpenFailed;
    e.channel = ch->id;
    e.host = conns[ch->conn].host;
    e.data = why;
    ch->state = ChanState::kClosed;
    ended.push_back(ch->id);
    if (conns[ch->conn].channels > 0) --conns[ch->conn].channels;
    if (ch->channel) {
      ssh_channel_free(ch->channel);
      ch->channel = nullptr;
    }
    emit(e);
  }

  void host_lost(size_t ci, const std::string& why) {
    size_t host = conns[ci].host;
    std::vector<size_t> host_conns;
    for (size_t i = 0; i < conns.size(); ++i)
      if (conns[i].host == host && conns[i].state == ConnState::kReady) host_conns.push_back(i);
    for (size_t i : host_conns) {
      for (auto& [id, ch] : chans)
        if (ch->conn == i && ch->channel) {
          ssh_remove_channel_callbacks(ch->channel, &ch->callbacks);
          ssh_channel_free(ch->channel);
          ch->channel = nullptr;
        }
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
  void step(Chan* ch) {
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
        return open_failed(
            ch, fmt::format("cannot execute the command: {}", describe_error(c.session)));
      ch->state = ChanState::kRunning;
    }
    if (!ch->signal_wanted.empty()) {
      // want_reply is false: the request is sent at once, never pending.
      ssh_channel_request_send_signal(ch->channel, ch->signal_wanted.c_str());
      ch->signal_wanted.clear();
    }
    if (!ch->out.empty()) {
      int n = ssh_channel_write(ch->channel, ch->out.data(), static_cast<uint32_t>(ch->out.size()));
      if (n > 0) ch->out.erase(0, static_cast<size_t>(n));
    }
    if (ch->eof_wanted && !ch->eof_sent && ch->out.empty()) {
      ssh_channel_send_eof(ch->channel);
      ch->eof_sent = true;
    }
  }

  bool needs_step(const Chan& ch) const {
    return ch.state == ChanState::kNew || ch.state == ChanState::kOpening ||
           ch.state == ChanState::kExec ||
           (ch.state == ChanState::kRunning &&
            (!ch.out.empty() || (ch.eof_wanted && !ch.eof_sent) || !ch.signal_wanted.empty()));
  }

  // Takes the pending steps of the unsettled channels only: a wake-up costs nothing per idle
  // channel.
  void step_all() {
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
    // Channels closed by the remote end are freed here, outside libssh's callbacks.
    for (ChannelId id : std::exchange(ended, {})) {
      auto it = chans.find(id);
      if (it == chans.end()) continue;
      Chan& ch = *it->second;
      if (ch.channel && linger && conns[ch.conn].state == ConnState::kReady)
        ssh_remove_channel_callbacks(ch.channel, &ch.callbacks);  // left to ssh_disconnect
      else if (ch.channel)
        ssh_channel_free(ch.channel);
      chans.erase(it);
    }
  }

  void check_conn(size_t ci) {
    Conn& c = conns[ci];
    if (c.state != ConnState::kReady) return;
    int status = ssh_get_status(c.session);
    if ((status & (SSH_CLOSED | SSH_CLOSED_ERROR)) || !ssh_is_connected(c.session)) {
      std::string why = describe_error(c.session);
      host_lost(ci, why == "connection failed" ? "connection closed" : why);
      return;
    }
    update_epoll(ci);
  }

  // libssh reads at most 4 KB from the socket per poll. While a connection has more waiting (a
  // process flooding output), keep reading it here rather than going back through epoll_wait and
  // the whole loop for every 4 KB; bounded, so that one busy host cannot starve the others.
  static constexpr int kMaxPumpRounds = 16;  // 64 KB per connection per wake-up

  void pump(size_t ci) {
    Conn& c = conns[ci];
    for (int round = 0; round < kMaxPumpRounds && c.state == ConnState::kReady; ++round) {
      int rc = ssh_event_dopoll(c.event, 0);
      if (rc == SSH_ERROR && c.state == ConnState::kReady) {
        std::string why = describe_error(c.session);
        host_lost(ci, why == "connection failed" ? "connection closed" : why);
        return;
      }
      if (rc != SSH_OK) break;     // SSH_AGAIN: nothing more to read now
      if (round > 0) busy = true;  // still more after a first read: a stream, not a message
    }
    check_conn(ci);
  }

  ChannelId exec(size_t host, const std::string& command) {
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

  std::vector<std::pair<ChannelId, size_t>> pending_failures;

  void report_pending_failures() {
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

  void poll(int timeout_ms, const EventHandler& h) {
    handler = &h;
    report_pending_failures();
    step_all();
    std::vector<epoll_event> evs(512);
    int n = wait(evs, timeout_ms);
    for (int i = 0; i < n; ++i) {
      uint64_t key = evs[i].data.u64;
      if (key >= kFdKey) {
        TransportEvent e;
        e.kind = TransportEvent::Kind::kFdReady;
        e.fd = static_cast<int>(key - kFdKey);
        emit(e);
      } else {
        pump(static_cast<size_t>(key));
      }
    }
    step_all();
    report_pending_failures();
    handler = nullptr;
  }

  static constexpr uint64_t kFdKey = 1ULL << 40;

  void watch_fd(int fd) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kFdKey + static_cast<uint64_t>(fd);
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0) watched.insert(fd);
  }

  void unwatch_fd(int fd) {
    if (watched.erase(fd)) epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
  }
};

SshPool::SshPool(std::vector<SshEndpoint> hosts, SshSettings settings)
    : impl_(std::make_unique<Impl>(std::move(hosts), std::move(settings))) {}

SshPool::~SshPool() = default;

std::vector<std::optional<ConnectFailure>> SshPool::connect_all(
    const std::vector<int>& connections) {
  return impl_->connect_all(connections);
}

const std::vector<ConnectWarning>& SshPool::warnings() const { return impl_->warnings; }

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

void SshPool::send_eof(ChannelId channel) {
  auto it = impl_->chans.find(channel);
  if (it != impl_->chans.end()) {
    it->second->eof_wanted = true;
    impl_->unsettled.insert(channel);
  }
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

void SshPool::watch_fd(int fd) { impl_->watch_fd(fd); }
void SshPool::unwatch_fd(int fd) { impl_->unwatch_fd(fd); }

void SshPool::poll(int timeout_ms, const EventHandler& handler) {
  impl_->poll(timeout_ms, handler);
}

double SshPool::now_ms() const { return monotonic_ms(); }

void SshPool::disconnect_all() { impl_->close_all(); }

}  // namespace msrun_ssh
