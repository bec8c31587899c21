// The check room's way to run a small Python program on a host (src/remote/python.sh): private to
// src/check/.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace msrun_ssh {

// `exec /bin/sh -c PYTHON_SH+TAIL NAME LIMIT CODE A B D INTERPRETERS...` (src/remote/python.sh):
// runs `code` with arguments `abd` (three) under the first interpreter found among `python`,
// python3 and python, within `limit_s` + 5 s; else the sh code `tail`.
std::string python_command(std::string_view tail, const char* name, double limit_s,
                           std::string_view code, const std::vector<std::string>& abd,
                           const std::string& python);

}  // namespace msrun_ssh
