// The plan's bindings as text, for --dry_run and --report_bindings (plan.h).
#include <fmt/format.h>

#include "msrun_ssh/plan.h"

namespace msrun_ssh {

std::string describe_binding(const Process& p) {
  if (p.bind_pending) return "auto (from the host's topology at start-up)";
  std::string s = p.cpus.empty() ? "-" : format_cpu_list(p.cpus);
  if (!p.numa_nodes.empty()) s += fmt::format(" numa {}", format_cpu_list(p.numa_nodes));
  return s;
}

std::string describe_bindings(const Plan& plan) {
  std::string out;
  for (const auto& h : plan.hosts)
    for (const auto& p : h.processes)
      out += fmt::format("node {:>3}  {:<16} {:<10} DEVICE_ID={:<3} cpus {}\n", h.node_rank,
                         h.host.address, p.label(), p.device_id.empty() ? "-" : p.device_id,
                         describe_binding(p));
  return out;
}

}  // namespace msrun_ssh
