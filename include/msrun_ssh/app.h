// The application as a whole: argv in, exit status out. main() is a one-line call to run_app so
// that the whole program (parsing, dry run, errors and their exit codes) can be driven by tests.
#pragma once

#include <string>
#include <vector>

namespace msrun_ssh {

// Runs msrun-ssh with argv[1..] and returns its exit status (error.h; docs/command-line.md).
int run_app(const std::vector<std::string>& args);

// A fresh job id: UTC time and 6 random hex digits, e.g. "20261129-154501-3fa9c2".
std::string new_job_id();

// IPv4 address of `name` through getaddrinfo, or "" when it does not resolve.
std::string resolve_ipv4(const std::string& name);

}  // namespace msrun_ssh
