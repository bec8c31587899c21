// Fuzzes record_from_json (src/jobs/record.cc): a job record is a file in the user's state
// directory that `status`, `list`, `logs`, `stop` and `top` read back, and that may be edited,
// damaged or cut short (a full disk) by anything.
//
// Input: the whole file's text, parsed as the reader parses it (invalid JSON is the reader's own
// message, not this target's).
//
// Properties (jobs.h's promises):
//  - record_from_json returns or throws InputError, nothing else (no nlohmann exception, no
//    undefined conversion of a number: UBSan reports it);
//  - what it returns is usable: every process names one of its hosts, ssh.fanout is 1..4096,
//    ssh.connect_timeout 0.1..3600 s, every port 1..65535, ranks -1 or more, an exit status 0..255;
//  - written back and read again, the record is the same (record_json is a fixed point);
//  - the commands built from it (job_state_command per host, job_logs_command per process) build.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/jobs.h"

namespace ms = msrun_ssh;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return 0;
  ms::JobRecord r;
  try {
    r = ms::record_from_json(j, "fuzz.json");
  } catch (const ms::InputError& e) {
    FUZZ_CHECK(std::string_view(e.what()).starts_with("fuzz.json: not a job record: "),
               "unlocated error: %s", e.what());
    return 0;
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "not an InputError: %s", e.what());
  }
  FUZZ_CHECK(r.ssh.fanout >= 1 && r.ssh.fanout <= 4096, "fanout %d", r.ssh.fanout);
  FUZZ_CHECK(r.ssh.connect_timeout >= 0.1 && r.ssh.connect_timeout <= 3600, "connect_timeout %g",
             r.ssh.connect_timeout);
  FUZZ_CHECK(!r.exit_status || (*r.exit_status >= 0 && *r.exit_status <= 255), "exit status %d",
             *r.exit_status);
  FUZZ_CHECK(r.launcher_pid >= 0, "launcher pid %ld", r.launcher_pid);
  std::vector<ms::JobHost> all = r.hosts;
  all.insert(all.end(), r.spares.begin(), r.spares.end());
  for (const auto& h : all) {
    FUZZ_CHECK(!h.endpoint.port || (*h.endpoint.port >= 1 && *h.endpoint.port <= 65535), "port %d",
               *h.endpoint.port);
    FUZZ_CHECK(h.node_rank >= 0, "host node rank %d", h.node_rank);
  }
  for (const auto& p : r.processes) {
    FUZZ_CHECK(p.host < r.hosts.size(), "process on host %zu of %zu", p.host, r.hosts.size());
    FUZZ_CHECK(p.rank >= -1 && p.node_rank >= 0, "rank %d node rank %d", p.rank, p.node_rank);
  }
  nlohmann::json again = ms::record_json(r);
  ms::JobRecord back;
  try {
    back = ms::record_from_json(again, "again.json");
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "its own record refused: %s", e.what());
  }
  FUZZ_CHECK(ms::record_json(back) == again, "the record changed when read back");
  for (size_t h = 0; h < r.hosts.size() && h < 64; ++h)
    FUZZ_CHECK(!ms::job_state_command(r, h).empty(), "no state command for host %zu", h);
  for (size_t p = 0; p < r.processes.size() && p < 64; ++p)
    FUZZ_CHECK(!ms::job_logs_command(r, p, p % 2 == 1).empty(), "no logs command for %zu", p);
  return 0;
}
