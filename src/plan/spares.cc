// Spare hosts at a restart (plan.h): which hosts leave, and the plan with the spares in their
// places.
#include <fmt/format.h>

#include <algorithm>

#include "msrun_ssh/error.h"
#include "msrun_ssh/plan.h"

namespace msrun_ssh {
namespace {

// Why the host `key` (host_key) must leave the job ("" when it may stay).
std::string leaving_reason(const std::string& key,
                           const std::map<std::string, std::string>& unusable,
                           const std::map<std::string, int>& failures, int exclude_after) {
  if (auto it = unusable.find(key); it != unusable.end()) return it->second;
  auto it = failures.find(key);
  if (it != failures.end() && it->second >= exclude_after)
    return fmt::format("failed {} attempts", it->second);
  return "";
}

}  // namespace

SpareDecision replace_hosts(const Plan& plan, const std::map<std::string, std::string>& unusable,
                            const std::map<std::string, int>& failures, int exclude_after) {
  SpareDecision d;
  size_t next_spare = 0;
  for (const auto& h : plan.hosts) {
    std::string key = host_key(h.host);
    std::string why = leaving_reason(key, unusable, failures, exclude_after);
    if (why.empty()) continue;
    if (next_spare == plan.spares.size()) {
      d.error = fmt::format("no spare host is left to replace {} (node rank {}, {})", key,
                            h.node_rank, why);
      d.replacements.clear();
      return d;
    }
    d.replacements.push_back({h.node_rank, key, host_key(plan.spares[next_spare++].host), why});
  }
  return d;
}

Plan apply_replacements(const Plan& plan, const std::vector<Replacement>& replacements,
                        const Options& options) {
  if (replacements.empty()) return plan;
  Cluster cluster;
  cluster.path = "the host file";
  std::map<std::string, std::string> ips;
  for (const auto& h : plan.hosts) {
    cluster.hosts.push_back(h.host);
    ips[h.host.address] = h.ip;
  }
  std::vector<HostPlan> spares = plan.spares;
  for (const Replacement& r : replacements) {
    auto spare = std::find_if(spares.begin(), spares.end(),
                              [&r](const HostPlan& s) { return host_key(s.host) == r.spare; });
    if (spare == spares.end()) throw InputError(fmt::format("{} is no free spare host", r.spare));
    Host& slot = cluster.hosts.at(static_cast<size_t>(r.node_rank));
    Host host = spare->host;
    host.spare = false;
    host.local_worker_num = slot.local_worker_num.value_or(options.local_worker_num);
    slot = std::move(host);
    ips[spare->host.address] = spare->ip;
    spares.erase(spare);
  }
  Options o = options;
  o.job_id = plan.job_id;
  o.contract = plan.contract;
  for (size_t h = 0; h < plan.hosts.size(); ++h)
    if (plan.hosts[h].is_master) o.master_addr = host_key(cluster.hosts[h]);  // the entry itself
  // Every address is resolved already (the hosts that needed it, and every spare).
  Plan next = make_plan(o, cluster, [&ips](const std::string& name) {
    auto it = ips.find(name);
    return it == ips.end() ? std::string() : it->second;
  });
  next.spares = std::move(spares);
  return next;
}

}  // namespace msrun_ssh
