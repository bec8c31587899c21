// The keeper (`--persist SECONDS`, mux.h): a process of its own that holds a command's SSH
// connections after it ended and serves the next command's channels through them, over the socket
// and the frames of mux.h.
#include "msrun_ssh/keeper.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>

#include "msrun_ssh/base.h"
#include "msrun_ssh/mux.h"

namespace msrun_ssh {

using namespace mux_wire;

namespace {

namespace {

class Keeper {
 public:
  Keeper(Transport& t, int listen_fd, int signal_fd, std::string path, std::string key,
         size_t hosts, double persist_s, MuxAhead ahead)
      : t_(t),
        listen_fd_(listen_fd),
        signal_fd_(signal_fd),
        path_(std::move(path)),
        key_(std::move(key)),
        alive_(hosts, true),
        persist_ms_(persist_s * 1000),
        ahead_(std::move(ahead)) {}

  void run(ino_t ino) {
    ino_ = ino;
    t_.watch_fd(listen_fd_);
    if (signal_fd_ >= 0) t_.watch_fd(signal_fd_);
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
    if (signal_fd_ >= 0) t_.unwatch_fd(signal_fd_);
    if (socket_inode(path_) == ino_) ::unlink(path_.c_str());
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
    if (stop_) return true;
    if (client_ >= 0) return false;
    if (quit_ || std::find(alive_.begin(), alive_.end(), false) != alive_.end()) return true;
    if (socket_inode(path_) != ino_) return true;  // removed or replaced
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
      if (fd == signal_fd_) {
        while (next_signal(signal_fd_) != 0) stop_ = true;
      } else if (fd == listen_fd_) {
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
  int signal_fd_;  // SIGTERM, SIGINT: the keeper ends
  bool stop_ = false;
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

}  // namespace

void serve_mux(Transport& transport, int listen_fd, const std::string& path, const std::string& key,
               size_t hosts, double persist_s, MuxAhead ahead) {
  ino_t ino = socket_inode(path);
  int sfd = signal_fd({SIGTERM, SIGINT});
  ::signal(SIGHUP, SIG_IGN);
  set_nonblocking(listen_fd);
  Keeper(transport, listen_fd, sfd, path, key, hosts, persist_s, std::move(ahead)).run(ino);
  if (sfd >= 0) ::close(sfd);
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
  // The keeper is forked with SIGTERM, SIGINT and SIGHUP blocked: one that comes before serve_mux
  // made its signalfd waits for it (SIGHUP is then ignored) instead of killing it with its socket
  // left behind. The command keeps them blocked until it has named the keeper (below).
  constexpr int kEnding[] = {SIGTERM, SIGINT, SIGHUP};
  sigset_t ends, before;
  sigemptyset(&ends);
  for (int s : kEnding) sigaddset(&ends, s);
  ::pthread_sigmask(SIG_BLOCK, &ends, &before);
  pid_t pid = ::fork();
  if (pid < 0) {
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
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
    close_inherited_fds();  // a caller waiting for its pipe's end waits for the command only
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
  // One that came since the fork and would have ended the command (not blocked before, its
  // default action) ends the keeper too, and then the command, unannounced, as it would have.
  // One that comes after this look finds the keeper named, and is not delivered.
  sigset_t pending;
  sigpending(&pending);
  for (int s : kEnding) {
    struct sigaction action {};
    if (sigismember(&pending, s) == 1 && sigismember(&before, s) == 0 &&
        ::sigaction(s, nullptr, &action) == 0 && action.sa_handler == SIG_DFL) {
      ::kill(pid, SIGTERM);
      ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
    }
  }
  std::fprintf(stderr, "msrun-ssh: connections kept for %g s by process %d (--persist)\n",
               persist_s, static_cast<int>(pid));
  std::fflush(nullptr);
  ::_exit(exit_code);
}

}  // namespace msrun_ssh
