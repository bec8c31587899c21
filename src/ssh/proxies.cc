// The proxies libssh forks for ProxyCommand / ProxyJump hosts: how they start and how they end.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "msrun_ssh/base.h"
#include "pool.h"

namespace msrun_ssh {
namespace {

// What a proxy's child writes to its pool's pipe first thing after the fork.
struct ProxyBorn {
  uint64_t conn;
  int64_t pid;
};

// Set on the thread that runs ssh_connect, for the fork libssh makes inside it. The child sees
// the forking thread's copy.
struct ProxyFork {
  bool active = false;
  int report_fd = -1;
  size_t conn = 0;
};
thread_local ProxyFork t_proxy_fork;

// The launcher has its ending signals blocked (it reads them from a signalfd) and SIGPIPE
// ignored, which a fork and exec would hand on: libssh's SIGTERM at the end would wait in the
// proxy's mask, and libssh's waitpid with it, for ever if its jump host was cut off. The proxy
// starts as a shell starts its commands (an empty mask, SIGPIPE's default), in a session of its
// own (a Ctrl-C on the terminal goes to the launcher, which still needs the proxy to end the job
// through it; the group is ended as one), with none of the launcher's descriptors (libssh makes
// its sockets without close-on-exec: a proxy such as `nc` would hold other hosts' connections
// open). (No PR_SET_PDEATHSIG: `sync --persist` hands its connections, proxies and all, to a
// keeper and ends.)
void proxy_child_as_from_a_shell() {
  const ProxyFork& f = t_proxy_fork;
  if (!f.active) return;
  if (f.report_fd >= 0) {
    ProxyBorn born{f.conn, ::getpid()};
    (void)!::write(f.report_fd, &born, sizeof born);
  }
  ::setsid();
  // libssh's dup2 onto 0 and 1 keeps those. Before Linux 5.11, one by one (a bound: the launcher
  // raised its descriptor limit).
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
    for (int fd = 3; fd < 65536; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
}

bool has_ended(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

// Whether the proxy is this process's child, not reaped yet (running or a zombie): then its pid is
// its process group's id, which no other group can take meanwhile. libssh reaps it at the end,
// and also by itself when the connection ends on its own (the server's disconnect, the proxy's
// output ended): a group id after that could be anyone's.
bool unreaped_child(int pidfd) {
  siginfo_t info{};
  constexpr int kPidfd = 3;  // P_PIDFD (linux/wait.h; glibc 2.36 does not name it)
  return ::waitid(static_cast<idtype_t>(kPidfd), static_cast<id_t>(pidfd), &info,
                  WEXITED | WNOHANG | WNOWAIT) == 0;
}

// `signo` to the proxy's process group while its id is the proxy's: our unreaped child, or a
// proxy still running (a keeper's inherited ones, init's children). Else to the proxy by its
// pidfd, which reaches no other process (one libssh reaped: nothing to do).
void signal_proxy(pid_t pid, int pidfd, int signo) {
  if (pidfd < 0) return;
  if (unreaped_child(pidfd) || !has_ended(pidfd))
    ::kill(-pid, signo);
  else
    ::syscall(SYS_pidfd_send_signal, pidfd, signo, nullptr, 0);
}

}  // namespace

int SshPool::Impl::connect_forking_a_proxy(size_t ci) {
  static const bool registered =
      ::pthread_atfork(nullptr, nullptr, proxy_child_as_from_a_shell) == 0;
  Conn& c = conns[ci];
  if (!c.proxied || !registered) return ssh_connect(c.session);
  if (proxy_reports[0] < 0 && ::pipe2(proxy_reports, O_CLOEXEC | O_NONBLOCK) != 0)
    proxy_reports[0] = proxy_reports[1] = -1;
  struct Scope {
    ProxyFork saved = t_proxy_fork;
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    Scope() = default;
    ~Scope() { t_proxy_fork = saved; }
  } scope;
  t_proxy_fork = {true, proxy_reports[1], ci};
  int rc = ssh_connect(c.session);
  learn_proxies();
  return rc;
}

void SshPool::Impl::learn_proxies() {
  if (proxy_reports[0] < 0) return;
  ProxyBorn born{};
  while (::read(proxy_reports[0], &born, sizeof born) == static_cast<ssize_t>(sizeof born)) {
    if (born.conn >= conns.size() || born.pid <= 0 || !conns[born.conn].session) continue;
    Conn& c = conns[born.conn];
    if (c.proxy_fd >= 0) ::close(c.proxy_fd);
    c.proxy = 0;
    c.proxy_fd = -1;
    // (Debian 12's <sys/pidfd.h> declares pidfd_open without C linkage.)
    int fd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(born.pid), 0));
    // Kept only while it is our unreaped child, so the pid is the proxy's own: one libssh
    // already reaped (a connect that failed at once) could be another process by now.
    if (fd >= 0 && !unreaped_child(fd)) {
      ::close(fd);
      fd = -1;
    }
    if (fd >= 0) {
      c.proxy = static_cast<pid_t>(born.pid);
      c.proxy_fd = fd;
    }
  }
}

void SshPool::Impl::end_proxies(const std::vector<size_t>& which, double grace_ms) {
  learn_proxies();
  std::vector<size_t> live;
  for (size_t ci : which) {
    const Conn& c = conns[ci];
    if (c.proxy <= 0 || c.proxy_fd < 0) continue;
    signal_proxy(c.proxy, c.proxy_fd, grace_ms > 0 ? SIGTERM : SIGKILL);
    live.push_back(ci);
  }
  if (grace_ms > 0 && !live.empty()) {
    double until = monotonic_ms() + grace_ms;
    for (size_t ci : live) {
      const Conn& c = conns[ci];
      while (!has_ended(c.proxy_fd) && monotonic_ms() < until) {
        pollfd p{c.proxy_fd, POLLIN, 0};
        ::poll(&p, 1, static_cast<int>(std::max(1.0, until - monotonic_ms())));
      }
    }
    // Also the group's other members (a multi-hop ProxyJump's inner ssh) when the proxy ended.
    for (size_t ci : live) signal_proxy(conns[ci].proxy, conns[ci].proxy_fd, SIGKILL);
  }
  for (size_t ci : which) {
    Conn& c = conns[ci];
    if (c.proxy_fd >= 0) ::close(c.proxy_fd);
    c.proxy_fd = -1;
    c.proxy = 0;
  }
}

}  // namespace msrun_ssh
