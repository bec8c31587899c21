// Fuzzes what `check --perf` reads from a host (check.h): its output is whatever a login script, a
// broken accelerator tool or a hostile host makes of it.
//
// Input layout: byte 0 picks the parser (b % 4), the rest is the host's output:
//   0 parse_perf (perf.py's JSON line, with the accelerator tool's output inside)
//   1 parse_nvidia_smi (nvidia-smi's CSV)
//   2 parse_npu_smi (`npu-smi info`'s tables)
//   3 parse_sample (a running job's sampler line, watch.h), each line fed to a StragglerWatch
// Then (0-2) the host is judged beside a measured one (evaluate_perf) and the report formatted.
//
// Properties: no crash, no sanitizer report; a parsed host has an error or a CPU figure; every
// host judged gets a "perf" check; every NPU has an id; a sample's rates are finite and not
// negative.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "msrun_ssh/check.h"
#include "msrun_ssh/watch.h"

namespace ms = msrun_ssh;

namespace {

void samples(std::string_view out) {
  ms::StragglerWatch watch(1);
  std::optional<ms::HostSample> before;
  size_t start = 0;
  while (start <= out.size()) {
    size_t end = out.find('\n', start);
    std::string_view line =
        out.substr(start, end == std::string_view::npos ? out.npos : end - start);
    if (auto s = ms::parse_sample(line)) {
      if (before)
        if (auto r = ms::host_rate(*before, *s))
          for (const auto& k : r->ranks)
            FUZZ_CHECK(std::isfinite(k.demand()) && k.cpu >= 0 && k.wait >= 0 && k.throttled >= 0 &&
                           k.throttled <= 1,
                       "rank %s demand %f", k.rank.c_str(), k.demand());
      (void)watch.add(0, *s);
      before = std::move(s);
    }
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string out(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 4 == 3) {
    samples(out);
    return 0;
  }
  ms::HostPerf host;
  std::string error;
  switch (data[0] % 4) {
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
