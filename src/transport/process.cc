// ProcessTransport (process.h): channels that are child processes, driven by one poll(2).
#include "msrun_ssh/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace msrun_ssh {
namespace {

// Stderr held back until a command has started: its last line says why it did not.
constexpr size_t kHeldErrMax = size_t{64} * 1024;
// Without a pidfd, the longest a child's end may go unnoticed while its output stays open.
constexpr int kReapWithoutPidfdMs = 100;
constexpr int kDisconnectWaitMs = 2000;
// With nothing to wait on, a poll returns after this long at most.
constexpr int kIdlePollMs = 10;

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

int signal_number(const char* name) {
  for (int i = 1; i < 65; ++i) {
    const char* abbrev = sigabbrev_np(i);
    if (abbrev && std::strcmp(abbrev, name) == 0) return i;
  }
  return 0;
}

struct ProcessTransport::Chan {
  size_t host = 0;
  pid_t pid = -1;
  int in = -1, out = -1, err = -1, pidfd = -1;
  std::string pending;  // for stdin
  bool eof = false;
  bool started = false;  // its start marker came (or none is expected)
  std::string head;      // stdout while it may still be the start marker
  std::string held_err;  // stderr before the start
  std::string why;       // why it could not be started (kOpenFailed)
  bool reaped = false;
  bool closed = false;  // reported closed (or dropped): nothing more is reported
  int kills = 0;
  int raw = 0;
};

ProcessTransport::ProcessTransport(ProcessSettings settings) : settings_(std::move(settings)) {}

ProcessTransport::~ProcessTransport() { disconnect_all(); }

std::vector<std::optional<ConnectFailure>> ProcessTransport::connect_all(
    const std::vector<int>& connections) {
  return std::vector<std::optional<ConnectFailure>>(connections.size());
}

ProcessTransport::Chan* ProcessTransport::find(ChannelId channel) {
  auto it = chans_.find(channel);
  return it == chans_.end() ? nullptr : it->second.get();
}

const ProcessTransport::Chan* ProcessTransport::find(ChannelId channel) const {
  auto it = chans_.find(channel);
  return it == chans_.end() ? nullptr : it->second.get();
}

std::vector<std::string> ProcessTransport::argv(size_t, const std::string& command) const {
  return {"/bin/sh", "-c", command};
}

void ProcessTransport::deliver(pid_t pid, const char* signal, int) {
  int sig = signal_number(signal);
  if (sig == 0) return;
  ::kill(pid, sig);
  ::kill(-pid, sig);
}

void ProcessTransport::describe_exit(int raw, int& status, std::string& signal) const {
  status = WIFSIGNALED(raw) ? 128 + WTERMSIG(raw) : WEXITSTATUS(raw);
  signal = WIFSIGNALED(raw) ? sigabbrev_np(WTERMSIG(raw)) : "";
}

ChannelId ProcessTransport::exec(size_t host, const std::string& command) {
  ChannelId id = next_++;
  auto& c = *(chans_[id] = std::make_unique<Chan>());
  c.host = host;
  c.started = settings_.start_marker.empty();
  spawn(c, argv(host, command));
  return id;
}

// Forks the child: a session of its own, the launcher's blocked signals unblocked and SIGPIPE back
// to its default (both survive exec), pipes as stdin, stdout and stderr.
void ProcessTransport::spawn(Chan& c, const std::vector<std::string>& args) {
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) {
    c.why = std::string("cannot create a pipe: ") + std::strerror(errno);
    for (int* p : {in, out, err})
      for (int i : {0, 1}) close_fd(p[i]);
    return;
  }
  std::vector<char*> cargs;
  cargs.reserve(args.size() + 1);
  for (const auto& a : args) cargs.push_back(const_cast<char*>(a.c_str()));
  cargs.push_back(nullptr);
  std::string cannot = "msrun-ssh: cannot run " + args[0] + ": ";
  pid_t pid = fork();
  if (pid == 0) {
    setsid();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    if (settings_.child_keeps_output_open) {
      fcntl(out[0], F_DUPFD, 3);
      fcntl(err[0], F_DUPFD, 3);
    }
    execvp(cargs[0], cargs.data());
    const char* why = std::strerror(errno);
    (void)!::write(2, cannot.data(), cannot.size());
    (void)!::write(2, why, std::strlen(why));
    (void)!::write(2, "\n", 1);
    _exit(127);
  }
  close_fd(in[0]);
  close_fd(out[1]);
  close_fd(err[1]);
  if (pid < 0) {
    c.why = std::string("cannot start a process: ") + std::strerror(errno);
    for (int fd : {in[1], out[0], err[0]}) ::close(fd);
    return;
  }
  fcntl(in[1], F_SETFL, O_NONBLOCK);
  c.pid = pid;
  c.in = in[1];
  c.out = out[0];
  c.err = err[0];
  c.pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
}

void ProcessTransport::write(ChannelId channel, std::string_view data) {
  Chan* c = find(channel);
  if (!c || c->in < 0 || c->eof) return;
  c->pending.append(data);
  flush(*c);
}

void ProcessTransport::send_eof(ChannelId channel) {
  Chan* c = find(channel);
  if (!c) return;
  c->eof = true;
  flush(*c);
}

size_t ProcessTransport::unsent(ChannelId channel) const {
  const Chan* c = find(channel);
  return c ? c->pending.size() : 0;
}

void ProcessTransport::cancel(ChannelId channel) {
  Chan* c = find(channel);
  if (c && !c->started) kill(channel, "KILL");
}

void ProcessTransport::kill(ChannelId channel, const char* signal) {
  Chan* c = find(channel);
  if (!c || c->closed || c->reaped || c->pid < 0) return;
  deliver(c->pid, signal, ++c->kills);
}

void ProcessTransport::drop_host(size_t host) {
  for (auto& [id, c] : chans_)
    if (c->host == host && !c->closed) {
      if (!c->reaped && c->pid > 0) deliver(c->pid, "KILL", ++c->kills);
      c->closed = true;
      close_fd(c->in);
      close_fd(c->out);
      close_fd(c->err);
    }
}

// Writes what the pipe takes now; the rest waits for the next poll. SIGPIPE is the launcher's to
// ignore (a command that ended before reading its stdin): the write then fails with EPIPE and
// what is pending is dropped.
void ProcessTransport::flush(Chan& c) {
  while (!c.pending.empty() && c.in >= 0) {
    ssize_t n = ::write(c.in, c.pending.data(), c.pending.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      c.pending.clear();
      break;
    }
    c.pending.erase(0, static_cast<size_t>(n));
  }
  if (c.eof && c.pending.empty()) close_fd(c.in);
}

// What a descriptor polled for a channel is.
enum class ProcessTransport::Polled { kStdout, kStderr, kEnd, kStdin, kWatched };

// The descriptors to wait on: each open channel's output, its end (pidfd) and its stdin while
// bytes wait for it; the watched ones. `unnoticed_end`: a child's end would only be seen by
// polling.
void ProcessTransport::collect(std::vector<pollfd>& fds,
                               std::vector<std::pair<ChannelId, Polled>>& whose,
                               bool& unnoticed_end) const {
  for (const auto& [id, c] : chans_) {
    if (c->closed) continue;
    auto add = [&, id = id](int fd, short events, Polled what) {
      if (fd < 0) return;
      fds.push_back({fd, events, 0});
      whose.emplace_back(id, what);
    };
    add(c->out, POLLIN, Polled::kStdout);
    add(c->err, POLLIN, Polled::kStderr);
    if (!c->reaped) add(c->pidfd, POLLIN, Polled::kEnd);
    if (!c->pending.empty()) add(c->in, POLLOUT, Polled::kStdin);
    unnoticed_end = unnoticed_end || (!c->reaped && c->pid > 0 && c->pidfd < 0);
  }
  for (int fd : watched_) {
    fds.push_back({fd, POLLIN, 0});
    whose.emplace_back(fd, Polled::kWatched);
  }
}

void ProcessTransport::poll(int timeout_ms, const EventHandler& handler) {
  std::vector<pollfd> fds;
  std::vector<std::pair<ChannelId, Polled>> whose;
  bool unnoticed_end = false;
  collect(fds, whose, unnoticed_end);
  int cap = unnoticed_end ? kReapWithoutPidfdMs : fds.empty() ? kIdlePollMs : -1;
  if (cap >= 0 && (timeout_ms < 0 || timeout_ms > cap)) timeout_ms = cap;
  if (::poll(fds.data(), fds.size(), timeout_ms) < 0) fds.clear();
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!fds[i].revents) continue;
    auto [id, what] = whose[i];
    if (what == Polled::kWatched) {
      TransportEvent e;
      e.kind = TransportEvent::Kind::kFdReady;
      e.fd = fds[i].fd;
      handler(e);
      continue;
    }
    Chan* c = find(id);
    if (!c || c->closed) continue;
    if (what == Polled::kStdout || what == Polled::kStderr)
      read_one(id, *c, what == Polled::kStderr, handler);
    else if (what == Polled::kStdin)
      flush(*c);
  }
  reap(handler);
}

void ProcessTransport::read_one(ChannelId id, Chan& c, bool is_err, const EventHandler& handler) {
  int& fd = is_err ? c.err : c.out;
  char buf[65536];
  ssize_t n = ::read(fd, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) return close_fd(fd);
  std::string_view data(buf, static_cast<size_t>(n));
  if (!is_err) return on_stdout(id, c, data, handler);
  if (!c.started) {
    c.held_err.append(data);
    if (c.held_err.size() > kHeldErrMax) c.held_err.erase(0, c.held_err.size() - kHeldErrMax);
    return;
  }
  TransportEvent e;
  e.kind = TransportEvent::Kind::kData;
  e.channel = id;
  e.host = c.host;
  e.is_stderr = true;
  e.data = data;
  handler(e);
}

// Stdout: first the start marker, when one is expected; once it has come, the stderr held back
// and whatever followed it.
void ProcessTransport::on_stdout(ChannelId id, Chan& c, std::string_view data,
                                 const EventHandler& handler) {
  TransportEvent e;
  e.kind = TransportEvent::Kind::kData;
  e.channel = id;
  e.host = c.host;
  std::string rest;
  if (!c.started) {
    const std::string& marker = settings_.start_marker;
    c.head.append(data);
    size_t n = std::min(c.head.size(), marker.size());
    if (c.head.compare(0, n, marker, 0, n) == 0 && c.head.size() < marker.size()) return;
    c.started = true;
    rest = c.head.compare(0, n, marker, 0, n) == 0 ? c.head.substr(marker.size()) : c.head;
    c.head.clear();
    if (!c.held_err.empty()) {
      e.is_stderr = true;
      e.data = c.held_err;
      handler(e);
      e.is_stderr = false;
      c.held_err.clear();
    }
    data = rest;
  }
  if (data.empty()) return;
  e.data = data;
  handler(e);
}

void ProcessTransport::reap(const EventHandler& handler) {
  for (auto& [id, c] : chans_) {
    if (!c->reaped && c->pid > 0 && waitpid(c->pid, &c->raw, WNOHANG) == c->pid) {
      c->reaped = true;
      close_fd(c->pidfd);
    }
    if (!c->closed) settle(id, *c, handler);
  }
}

// Reports a child's end: kExit once it is reaped, kClosed once its output has ended too; or
// kOpenFailed for a child that ended without its start marker, or never ran.
void ProcessTransport::settle(ChannelId id, Chan& c, const EventHandler& handler) {
  TransportEvent e;
  e.channel = id;
  e.host = c.host;
  if (c.pid < 0 || (!c.started && c.reaped && c.out < 0 && c.err < 0)) {
    if (c.why.empty()) {
      int status = 0;
      std::string signal;
      describe_exit(c.raw, status, signal);
      c.why = last_line(c.held_err);
      if (c.why.empty()) c.why = "ended (exit status " + std::to_string(status) + ") unstarted";
    }
    e.kind = TransportEvent::Kind::kOpenFailed;
    e.data = c.why;
    c.closed = true;
    close_fds(c);
    handler(e);
    return;
  }
  if (!c.reaped || !c.started) return;
  if (c.raw != -1) {
    e.kind = TransportEvent::Kind::kExit;
    describe_exit(c.raw, e.status, e.signal);
    c.raw = -1;  // reported
    handler(e);
  }
  if (c.out >= 0 || c.err >= 0) return;
  c.closed = true;
  close_fds(c);
  e.kind = TransportEvent::Kind::kClosed;
  e.status = 0;
  e.signal.clear();
  handler(e);
}

void ProcessTransport::close_fds(Chan& c) {
  for (int* fd : {&c.in, &c.out, &c.err, &c.pidfd}) close_fd(*fd);
}

double ProcessTransport::now_ms() const {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool ProcessTransport::closed(ChannelId channel) const {
  const Chan* c = find(channel);
  return !c || c->closed;
}

pid_t ProcessTransport::pid_of(ChannelId channel) const {
  const Chan* c = find(channel);
  return c ? c->pid : -1;
}

void ProcessTransport::disconnect_all() {
  for (auto& [id, c] : chans_) {
    c->pending.clear();
    close_fd(c->in);
  }
  auto running = [this] {
    return std::any_of(chans_.begin(), chans_.end(),
                       [](const auto& kv) { return !kv.second->reaped && kv.second->pid > 0; });
  };
  for (int round = 0; round < 2 && running(); ++round) {
    for (auto& [id, c] : chans_)
      if (!c->reaped && c->pid > 0) deliver(c->pid, "KILL", ++c->kills);
    double until = now_ms() + kDisconnectWaitMs;
    while (running() && now_ms() < until) poll(50, [](const TransportEvent&) {});
  }
  for (auto& [id, c] : chans_) {
    if (!c->reaped && c->pid > 0) waitpid(c->pid, nullptr, 0);
    c->reaped = c->closed = true;
    close_fds(*c);
  }
}

}  // namespace msrun_ssh
