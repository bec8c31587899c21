// Fuzzes what `check --perf` reads from a host (check.h): its output is whatever a login script, a
// broken accelerator tool or a hostile host makes of it.
//
// Input layout: byte 0 picks the parser (b % 3), the rest is the host's output:
//   0 parse_perf (perf.py's JSON line, with the accelerator tool's output inside)
//   1 parse_nvidia_smi (nvidia-smi's CSV)
//   2 parse_npu_smi (`npu-smi info`'s tables)
// Then the host is judged beside a measured one (evaluate_perf) and the report formatted.
//
// Properties: no crash, no sanitizer report; a parsed host has an error or a CPU figure; every
// host judged gets a "perf" check; every NPU has an id.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "msrun_ssh/check.h"

namespace ms = msrun_ssh;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string out(reinterpret_cast<const char*>(data) + 1, size - 1);
  ms::HostPerf host;
  std::string error;
  switch (data[0] % 3) {
    case 0:
      host = ms::parse_perf(out, "no answer");
      FUZZ_CHECK(!host.error.empty() || !host.cpu_each.empty(), "neither an error nor a figure");
      break;
    case 1:
      host = ms::parse_perf("{\"cpu_each\": [1], \"kernel\": \"python\"}", "");
      host.accel_tool = "nvidia-smi";
      host.accel = ms::parse_nvidia_smi(out, error);
      break;
    default:
      host = ms::parse_perf("{\"cpu_each\": [1], \"kernel\": \"python\"}", "");
      host.accel_tool = "npu-smi";
      host.accel = ms::parse_npu_smi(out, error);
      for (const auto& d : host.accel) FUZZ_CHECK(!d.id.empty(), "an NPU without an id");
      break;
  }
  ms::PerfReport perf;
  perf.hosts = {host, ms::parse_perf("{\"cpu_each\": [2], \"kernel\": \"python\"}", "")};
  ms::CheckReport report;
  report.hosts = {{"10.0.0.1", 0, false, {}}, {"10.0.0.2", 1, false, {}}};
  ms::evaluate_perf(perf, report);
  for (const auto& h : report.hosts) FUZZ_CHECK(h.find("perf") != nullptr, "a host not judged");
  (void)ms::format_perf(perf, report);
  return 0;
}
