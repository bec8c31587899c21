#include "msrun_ssh/dry_run.h"

#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <vector>

#include "msrun_ssh/command.h"
#include "msrun_ssh/hostfile.h"

namespace msrun_ssh {
namespace {

// "user@ip:port, workdir W": how the launcher reaches a host and where its processes run.
std::string reach_of(const HostPlan& h) {
  return fmt::format("{}{}{}, workdir {}", h.host.user.empty() ? "" : h.host.user + "@",
                     h.ip.empty() ? h.host.address : h.ip,
                     h.host.port ? fmt::format(":{}", *h.host.port) : "", h.host.workdir);
}

// "root@198.18.1.10:22, workdir W": where OpenSSH connects for the host.
std::string reach_of(const HostPlan& h, const SshResolution& r) {
  if (!r.config) return fmt::format("ssh config: {}, workdir {}", r.error, h.host.workdir);
  const SshHostConfig& c = *r.config;
  return fmt::format("{}{}:{}, workdir {}", c.user.empty() ? "" : c.user + "@", c.hostname, c.port,
                     h.host.workdir);
}

std::string join(const std::vector<std::string>& words, std::string_view none) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out.empty() ? std::string(none) : out;
}

const char* policy_word(HostKeyPolicy p) {
  return p == HostKeyPolicy::kYes ? "yes" : p == HostKeyPolicy::kNo ? "no" : "accept-new";
}

// What every host's connection uses besides where it goes, grouped by the hosts that share it.
std::string ssh_section(const std::vector<std::string>& names,
                        const std::vector<SshResolution>& ssh, const Options& options) {
  std::map<std::string, std::vector<std::string>> groups;
  const passwd* pw = ::getpwuid(::getuid());
  std::string home = pw && pw->pw_dir ? pw->pw_dir : "";
  for (size_t i = 0; i < names.size() && i < ssh.size(); ++i) {
    if (!ssh[i].config) continue;
    const SshHostConfig& c = *ssh[i].config;
    HostKeyPolicy strict = options.strict_host_key_checking.value_or(c.strict_host_key_checking);
    // As the pool tries them: the agent when there is one to ask (under IdentitiesOnly only its
    // copies of the listed files' keys), then the identity files that exist here (ssh passes over
    // a missing one).
    bool agent =
        c.identity_agent != "none" && (!c.identity_agent.empty() || std::getenv("SSH_AUTH_SOCK"));
    std::vector<std::string> identities;
    for (const auto& f : c.identity_files) {
      std::string path = f.starts_with("~/") ? home + f.substr(1) : f;
      if (f.find('%') != std::string::npos || ::access(path.c_str(), R_OK) == 0)
        identities.push_back(path);
    }
    std::string_view from_agent =
        !agent              ? ""
        : c.identities_only ? (identities.empty() ? "" : "the agent's copies of these keys, then ")
                            : "the agent's keys, then ";
    std::string jump = c.proxy_jump.empty()
                           ? (c.proxy_command.empty() ? "none" : "ProxyCommand " + c.proxy_command)
                           : c.proxy_jump;
    std::string text = fmt::format(
        "    identities: {}{}\n    jump: {}\n    known_hosts: {}{}\n    host key checking: {}\n",
        from_agent, join(identities, "none"), jump, join(c.user_known_hosts_files, "none"),
        c.host_key_alias.empty() ? "" : fmt::format(" (under HostKeyAlias {})", c.host_key_alias),
        policy_word(strict));
    groups[text].push_back(names[i]);
  }
  if (groups.empty()) return "";
  std::string out = "\nssh settings (as OpenSSH reads the ssh config: ssh -G):\n";
  for (const auto& [text, hosts] : groups)
    out += fmt::format("  {}:\n{}", fold_nodeset(hosts), text);
  return out;
}

}  // namespace

std::string describe_plan(const Plan& plan, const Options& options, std::string_view hosts_from,
                          const std::vector<SshResolution>* ssh) {
  const bool torch = plan.contract == Contract::kTorch;
  // A simulation (msrun's --sim_level) runs no scheduler and gives no process its address.
  std::string meeting =
      options.sim_level >= 0
          ? fmt::format("no scheduler (simulation level {})", options.sim_level)
          : fmt::format(
                "{} at {}:{}",
                torch ? "rendezvous (MASTER_ADDR:MASTER_PORT, RANK 0's store)" : "scheduler",
                plan.master_ip, plan.master_port);
  std::string out = fmt::format("job {}: {} hosts, {} workers, {}\nlogs: {}\n", plan.job_id,
                                plan.hosts.size(), plan.worker_num, meeting, options.log_dir);
  if (!hosts_from.empty()) out += fmt::format("hosts: {}\n", hosts_from);
  if (options.worker_log_name.find(kHostnameToken) != std::string::npos)
    out += fmt::format("{} in log names: each host's own name (uname -n), resolved at start-up\n",
                       kHostnameToken);
  for (const auto& h : plan.hosts) {
    size_t i = static_cast<size_t>(&h - plan.hosts.data());
    out += fmt::format("\nhost {} (node rank {}){}: {}\n", host_key(h.host), h.node_rank,
                       h.is_master ? " [master]" : "",
                       ssh && i < ssh->size() ? reach_of(h, (*ssh)[i]) : reach_of(h));
    for (const auto& p : h.processes) {
      out += fmt::format(
          "  {}:{} cpus {} log {}\n", p.label(),
          torch ? "" : fmt::format(" DEVICE_ID={}", p.device_id.empty() ? "-" : p.device_id),
          describe_binding(p), p.log_name);
      for (const auto& [n, v] : p.env) out += fmt::format("    {}={}\n", n, shell_quote(v));
      for (const auto& [n, v] : p.env_defaults)
        out += fmt::format("    {}={} (unless the host's environment sets it)\n", n,
                           v.starts_with('$') ? v : shell_quote(v));
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
        host_key(s.host), reach_of(s), options.host_failures_to_exclude);
  if (ssh) {
    std::vector<std::string> names;
    for (const auto& h : plan.hosts) names.push_back(h.host.address);
    for (const auto& h : plan.spares) names.push_back(h.host.address);
    out += ssh_section(names, *ssh, options);
  }
  return out;
}

}  // namespace msrun_ssh
