// msrun-ssh's entry point: parse, plan, then hand over to the command that was asked for.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "msrun_ssh/app.h"
#include "msrun_ssh/base.h"
#include "msrun_ssh/error.h"

int main(int argc, char** argv) {
  msrun_ssh::note_inherited_fds();
  // Before anything is written: a reader gone (--events into a pipe whose reader ended, a console
  // piped into head) is a write error, never the launcher's death (signal_fd does it again).
  ::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv + 1, argv + argc);
  return msrun_ssh::run_app(args);
}
