#include "msrun_ssh/dry_run.h"

#include <fmt/format.h>

#include "msrun_ssh/command.h"

namespace msrun_ssh {
namespace {

// "user@ip:port, workdir W": how the launcher reaches a host and where its processes run.
std::string reach_of(const HostPlan& h) {
  return fmt::format("{}{}{}, workdir {}", h.host.user.empty() ? "" : h.host.user + "@",
                     h.ip.empty() ? h.host.address : h.ip,
                     h.host.port ? fmt::format(":{}", *h.host.port) : "", h.host.workdir);
}

}  // namespace

std::string describe_plan(const Plan& plan, const Options& options, std::string_view hosts_from) {
  std::string out = fmt::format(
      "job {}: {} hosts, {} workers, scheduler at {}:{}{}\nlogs: {}\n", plan.job_id,
      plan.hosts.size(), plan.worker_num, plan.master_ip, plan.master_port,
      options.sim_level >= 0 ? fmt::format(" (simulation level {})", options.sim_level) : "",
      options.log_dir);
  if (!hosts_from.empty()) out += fmt::format("hosts: {}\n", hosts_from);
  if (options.worker_log_name.find(kHostnameToken) != std::string::npos)
    out += fmt::format("{} in log names: each host's own name (uname -n), resolved at start-up\n",
                       kHostnameToken);
  for (const auto& h : plan.hosts) {
    out += fmt::format("\nhost {} (node rank {}){}: {}\n", h.host.address, h.node_rank,
                       h.is_master ? " [master]" : "", reach_of(h));
    for (const auto& p : h.processes) {
      out += fmt::format("  {}: DEVICE_ID={} cpus {} log {}\n", p.label(),
                         p.device_id.empty() ? "-" : p.device_id, describe_binding(p), p.log_name);
      for (const auto& [n, v] : p.env) out += fmt::format("    {}={}\n", n, shell_quote(v));
      out += fmt::format(
          "    command: {}\n",
          options.join ? process_command(p, plan.job_id, stdin_from_launcher(options, p))
                       : detached_command(p, plan.job_id, options.log_dir + "/" + p.log_name));
    }
  }
  for (const auto& s : plan.spares)
    out += fmt::format(
        "\nspare host {}: {}\n  starts nothing; at a restart it replaces a host lost, unreachable "
        "or failed --host_failures_to_exclude={} times\n",
        s.host.address, reach_of(s), options.host_failures_to_exclude);
  return out;
}

}  // namespace msrun_ssh
