#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "msrun_ssh/base.h"
#include "msrun_ssh/error.h"

namespace msrun_ssh {

int signal_fd(std::initializer_list<int> signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : signals) {
    // One ignored when the launcher started (nohup's SIGHUP; SIGINT and SIGQUIT of a command
    // started with & by a shell without job control) stays ignored: blocked, it would wait to be
    // read instead of being discarded, and a terminal's hangup would end a nohup'd job.
    struct sigaction now {};
    if (sigaction(s, nullptr, &now) == 0 && now.sa_handler == SIG_IGN) continue;
    sigaddset(&set, s);
  }
  sigset_t before;
  sigprocmask(SIG_BLOCK, &set, &before);
  signal(SIGPIPE, SIG_IGN);
  int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  // As they were: a signalfd made before (an attempt's, inside the job's) still reads them.
  if (fd < 0) sigprocmask(SIG_SETMASK, &before, nullptr);
  return fd;
}

int next_signal(int fd) {
  signalfd_siginfo info{};
  if (::read(fd, &info, sizeof info) != static_cast<ssize_t>(sizeof info)) return 0;
  return static_cast<int>(info.ssi_signo);
}

int signal_status(int fd) {
  int signo = next_signal(fd);
  return signo == 0 ? 0 : exit_status_of_signal(signo);
}

bool reader_gone(int fd) {
  pollfd p{fd, 0, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP)) != 0;
}

bool in_background_of(int fd) {
  pid_t foreground = ::tcgetpgrp(fd);
  return foreground > 0 && foreground != ::getpgrp();
}

}  // namespace msrun_ssh
