// The local programs the ssh room asks (ssh -G, ssh-keygen -Q), started one way.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace msrun_ssh {

// Starts `argv` (its program looked up on PATH) with stdin on /dev/null, stdout and stderr on
// `out` and `err` (-1: /dev/null) and no signal blocked (the launcher blocks those it reads on a
// signalfd); its pid, or -1 when it cannot start.
pid_t spawn_program(const std::vector<std::string>& argv, int out, int err);

}  // namespace msrun_ssh
