// The text of --dry_run: per host its node rank, address and every process with role, rank,
// DEVICE_ID, CPUs, log file, environment and the exact remote command, then the spare hosts. Pure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "msrun_ssh/options.h"
#include "msrun_ssh/plan.h"
#include "msrun_ssh/ssh_config.h"

namespace msrun_ssh {

// `hosts_from`: where a host source's hosts came from (Cluster::hosts_from), "" for a host file.
// `ssh`: OpenSSH's answer for each host of the plan, then each spare (resolve_with_openssh), when
// it could be asked: each host line then says where, as whom and on which port ssh connects, and
// a last section the identities, jump hosts, known_hosts files and host key checking, grouped by
// the hosts that share them.
std::string describe_plan(const Plan& plan, const Options& options,
                          std::string_view hosts_from = {},
                          const std::vector<SshResolution>* ssh = nullptr);

}  // namespace msrun_ssh
