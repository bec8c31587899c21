// The ssh room's local programs (spawn.h).
#include "spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>

#include <utility>

extern char** environ;

namespace msrun_ssh {

pid_t spawn_program(const std::vector<std::string>& argv, int out, int err) {
  if (argv.empty()) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  for (auto [fd, to] : {std::pair{1, out}, std::pair{2, err}}) {
    if (to >= 0)
      posix_spawn_file_actions_adddup2(&fa, to, fd);
    else
      posix_spawn_file_actions_addopen(&fa, fd, "/dev/null", O_WRONLY, 0);
  }
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& s : argv) args.push_back(const_cast<char*>(s.c_str()));
  args.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigset_t pipe;  // the launcher ignores SIGPIPE; the program gets it at its default
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &pipe);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

}  // namespace msrun_ssh
