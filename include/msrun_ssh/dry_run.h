// The text of --dry_run: per host its node rank, address and every process with role, rank,
// DEVICE_ID, CPUs, log file, environment and the exact remote command, then the spare hosts. Pure.
#pragma once

#include <string>
#include <string_view>

#include "msrun_ssh/options.h"
#include "msrun_ssh/plan.h"

namespace msrun_ssh {

// `hosts_from`: where a host source's hosts came from (Cluster::hosts_from), "" for a host file.
std::string describe_plan(const Plan& plan, const Options& options,
                          std::string_view hosts_from = {});

}  // namespace msrun_ssh
