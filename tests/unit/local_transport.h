// A Transport whose "hosts" are this machine: exec() runs `sh -c COMMAND` at once as a real child
// in a session of its own (as sshd does), with pipes for stdin, stdout and stderr; kill() signals
// its process group; poll() waits on the pipes and reaps children. For tests of what runs on a
// host (the launch agent) without SSH. Every child still running is killed when it is destroyed.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "msrun_ssh/transport.h"

namespace msrun_ssh::local {

class LocalTransport : public Transport {
 public:
  ~LocalTransport() override {
    for (auto& [id, c] : chans_)
      if (c.pid > 0 && !c.reaped) signal_group(c.pid, SIGKILL);
    for (auto& [id, c] : chans_)
      if (c.pid > 0 && !c.reaped) waitpid(c.pid, nullptr, 0);
  }

  ChannelId exec(size_t host, const std::string& command) override {
    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) abort();
    pid_t pid = fork();
    if (pid == 0) {
      setsid();
      dup2(in[0], 0);
      dup2(out[1], 1);
      dup2(err[1], 2);
      execl("/bin/sh", "sh", "-c", command.c_str(), nullptr);
      _exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    ChannelId id = next_++;
    Chan& c = chans_[id];
    c = Chan{.host = host, .pid = pid, .in = in[1], .out = out[0], .err = err[0]};
    execs.push_back(command);
    return id;
  }
  void write(ChannelId channel, std::string_view data) override {
    auto it = chans_.find(channel);
    if (it == chans_.end() || it->second.in < 0) return;
    it->second.pending.append(data);
    flush(it->second);
  }
  void send_eof(ChannelId channel) override {
    auto it = chans_.find(channel);
    if (it == chans_.end()) return;
    it->second.eof = true;
    flush(it->second);
  }
  void cancel(ChannelId) override {}
  void kill(ChannelId channel, const char* signal) override {
    auto it = chans_.find(channel);
    if (it == chans_.end() || it->second.closed) return;
    kills.emplace_back(channel, signal);
    signal_group(it->second.pid, std::strcmp(signal, "KILL") == 0 ? SIGKILL : SIGTERM);
  }
  void no_more_channels() override {}
  void watch_fd(int) override {}
  void unwatch_fd(int) override {}
  void drop_host(size_t host) override {
    dropped.push_back(host);
    for (auto& [id, c] : chans_)
      if (c.host == host && !c.closed) {
        signal_group(c.pid, SIGKILL);
        c.closed = true;
      }
  }
  void poll(int timeout_ms, const EventHandler& handler) override {
    std::vector<pollfd> fds;
    std::vector<std::pair<ChannelId, bool>> whose;
    for (auto& [id, c] : chans_) {
      if (c.closed) continue;
      for (int fd : {c.out, c.err})
        if (fd >= 0) {
          fds.push_back({fd, POLLIN, 0});
          whose.emplace_back(id, fd == c.err);
        }
    }
    ::poll(fds.data(), fds.size(), fds.empty() ? std::min(timeout_ms, 10) : timeout_ms);
    for (size_t i = 0; i < fds.size(); ++i)
      if (fds[i].revents) read_one(whose[i].first, whose[i].second, handler);
    reap(handler);
  }
  double now_ms() const override {
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // Whether channel `channel` has closed (its command exited and its output ended).
  bool closed(ChannelId channel) const { return chans_.at(channel).closed; }
  // The pid of channel `channel`'s sh.
  pid_t pid_of(ChannelId channel) const { return chans_.at(channel).pid; }

  std::vector<std::string> execs;
  std::vector<std::pair<ChannelId, std::string>> kills;
  std::vector<size_t> dropped;

 private:
  struct Chan {
    size_t host = 0;
    pid_t pid = -1;
    int in = -1, out = -1, err = -1;
    std::string pending;
    bool eof = false, reaped = false, closed = false;
    int status = 0;
  };

  // The child's process group, or the child alone when it has not called setsid() yet.
  static void signal_group(pid_t pid, int sig) {
    ::kill(pid, sig);
    ::kill(-pid, sig);
  }

  void flush(Chan& c) {
    while (!c.pending.empty() && c.in >= 0) {
      ssize_t n = ::write(c.in, c.pending.data(), c.pending.size());
      if (n <= 0) break;
      c.pending.erase(0, static_cast<size_t>(n));
    }
    if (c.eof && c.pending.empty() && c.in >= 0) {
      ::close(c.in);
      c.in = -1;
    }
  }

  void read_one(ChannelId id, bool is_err, const EventHandler& handler) {
    Chan& c = chans_[id];
    int& fd = is_err ? c.err : c.out;
    char buf[65536];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      TransportEvent e;
      e.kind = TransportEvent::Kind::kData;
      e.channel = id;
      e.host = c.host;
      e.is_stderr = is_err;
      e.data = std::string_view(buf, static_cast<size_t>(n));
      handler(e);
      return;
    }
    ::close(fd);
    fd = -1;
  }

  void reap(const EventHandler& handler) {
    for (auto& [id, c] : chans_) flush(c);
    for (auto& [id, c] : chans_) {
      if (c.closed) continue;
      if (!c.reaped) {
        int raw = 0;
        if (waitpid(c.pid, &raw, WNOHANG) != c.pid) continue;
        c.reaped = true;
        TransportEvent e;
        e.kind = TransportEvent::Kind::kExit;
        e.channel = id;
        e.host = c.host;
        e.status = WIFSIGNALED(raw) ? 128 + WTERMSIG(raw) : WEXITSTATUS(raw);
        if (WIFSIGNALED(raw)) e.signal = sigabbrev_np(WTERMSIG(raw));
        handler(e);
      }
      if (c.out >= 0 || c.err >= 0) continue;
      c.closed = true;
      if (c.in >= 0) ::close(c.in);
      c.in = -1;
      TransportEvent e;
      e.kind = TransportEvent::Kind::kClosed;
      e.channel = id;
      e.host = c.host;
      handler(e);
    }
  }

  std::map<ChannelId, Chan> chans_;
  ChannelId next_ = 0;
};

}  // namespace msrun_ssh::local
