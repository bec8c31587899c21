// The application as a whole: argv in, exit status out. main() is a one-line call to run_app so
// that the whole program (parsing, dry run, errors and their exit codes) can be driven by tests.
#pragma once

#include <string>
#include <vector>

namespace msrun_ssh {

// Runs msrun-ssh with argv[1..] and returns the exit status of SPEC §2.
int run_app(const std::vector<std::string>& args);

// A fresh job id: UTC time and 6 random hex digits, e.g. "20261129-154501-3fa9c2".
std::string new_job_id();

// IPv4 address of `name` through getaddrinfo, or "" when it does not resolve.
std::string resolve_ipv4(const std::string& name);

// The host an ssh config's `Host NAME` entry points to (its HostName), or `name` itself when the
// config (`ssh_config`, else ~/.ssh/config if it exists) has none.
std::string ssh_config_hostname(const std::string& name, const std::string& ssh_config);

}  // namespace msrun_ssh
