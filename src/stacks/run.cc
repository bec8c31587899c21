// `msrun-ssh stack` over SSH: one batch of stack.sh on every host, the report (stacks.h).
#include <fmt/format.h>

#include <cstdio>

#include "msrun_ssh/batch.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/ssh_settings.h"
#include "msrun_ssh/stacks.h"

namespace msrun_ssh {
namespace {

// How long stack.sh waits for the Python dumps, and bounds one gdb run (seconds); the batch's
// bound (kStackBatchSeconds) leaves room for both and for gdb's own end (timeout -k 2).
constexpr double kDumpWaitS = 2;
constexpr double kGdbS = 10;

}  // namespace

void start_stacks(Batch& batch, const std::vector<size_t>& hosts, const std::string& job_id) {
  std::string command = stack_command(job_id, kDumpWaitS, kGdbS);
  for (size_t h : hosts) batch.start(h, command);
}

std::vector<HostStacks> collect_stacks(const std::vector<BatchResult>& results,
                                       const std::vector<std::string>& addresses,
                                       const std::vector<std::string>& unreachable) {
  std::vector<HostStacks> hosts(addresses.size());
  for (size_t h = 0; h < addresses.size(); ++h)
    if (!unreachable.at(h).empty()) hosts[h].trouble = "unreachable: " + unreachable[h];
  for (const BatchResult& r : results) {
    HostStacks& h = hosts.at(r.host);
    h = parse_stacks(r.out);
    if (!h.complete)
      h.trouble =
          batch_trouble(r, fmt::format("no complete answer within {:g} s", kStackBatchSeconds));
  }
  for (size_t h = 0; h < addresses.size(); ++h) hosts[h].address = addresses[h];
  return hosts;
}

std::vector<HostStacks> stacks_on_hosts(Transport& transport,
                                        const std::vector<std::string>& addresses,
                                        const std::vector<std::string>& unreachable,
                                        const std::string& job_id) {
  std::vector<size_t> reached;
  for (size_t h = 0; h < addresses.size(); ++h)
    if (unreachable.at(h).empty()) reached.push_back(h);
  Batch batch(transport);
  start_stacks(batch, reached, job_id);
  batch.wait(transport.now_ms() + kStackBatchSeconds * 1000);
  return collect_stacks(batch.results(), addresses, unreachable);
}

int stack_job(const Options& options, const Cluster& cluster) {
  std::vector<SshEndpoint> endpoints;
  std::vector<std::string> addresses;
  for (const auto& h : cluster.hosts) {
    endpoints.push_back(endpoint_of(h));
    addresses.push_back(host_key(h));
  }
  auto pool = host_transport(options, std::move(endpoints), ssh_settings(options));
  std::vector<std::string> unreachable =
      connect_reaching(*pool, std::vector<int>(addresses.size(), 1), addresses);
  std::vector<HostStacks> hosts = stacks_on_hosts(*pool, addresses, unreachable, options.job);
  pool->disconnect_all();
  std::string report = format_stack_report(options.job, hosts);
  std::fputs(report.c_str(), stdout);
  std::fflush(stdout);
  if (std::string path = write_stacks_file(options.log_dir, report, 1); !path.empty())
    std::fprintf(stderr, "msrun-ssh: the stacks are also in %s\n", path.c_str());
  for (const auto& h : hosts)
    if (!h.trouble.empty()) return kExitHostFailure;
  return kExitOk;
}

}  // namespace msrun_ssh
