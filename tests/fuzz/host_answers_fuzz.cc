// Fuzzes the parsers of what the hosts answer: their output is whatever a login script, a broken
// or hostile host, or a cut connection makes of it.
//
// Input layout: byte 0 picks the parser (b % 10), the rest is the host's output:
//   0 parse_stacks (stack.sh; stacks.h), then format_stack_report of the result
//   1 parse_probe (check's probe; check.h)
//   2 parse_remote_time (`date +%s.%N`; check.h)
//   3 parse_net_client (check --net's client; check.h)
//   4 parse_job_state (job_state.sh; jobs.h)
//   5 parse_remote_manifest (sync's manifest step; sync.h), with __pycache__/ excluded
//   6 parse_remote_answer (sync's hash answer; sync.h)
//   7 parse_apply_summary (sync's apply step; sync.h)
//   8 parse_cpu_list (a CPU list from a host file or a host; binding.h)
//   9 the binding probe: npu_logic_order_of (npu-smi's table and chip map), and
//     parse_probe_output unless the text holds hwloc XML (hwloc's own loader reads that)
// and, whatever byte 0 says, each line through parse_swept_line (a sweep's "killed PID SIGNAL
// ARGV" line, from the watchdog or stop's program; command.h).
//
// Properties: no crash, no sanitizer report, and the contracts of the headers:
//  - stacks: complete only when an "end" line came; each process's pid > 0;
//  - remote time: a finite value >= 0 when one is read;
//  - net client: the two links of the pair (client -> server, server -> client), each rate
//    finite and >= 0;
//  - manifest: no entry that the rules exclude; the same result with and without the JSON
//    parser's shortcut for plain entry lines (parse_remote_manifest's plain_lines);
//  - CPU list: sorted, unique ids in 0..65535, or InputError;
//  - npu-smi: PCI bus ids ("0000:c1:00.0", lowercase), none twice; a probe's topology has
//    allowed CPUs, and its NPUs by logic id are its NPUs, or InputError;
//  - swept line: pid > 0 and a SIG... name, and what describe_swept makes of it reads back the
//    same.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "msrun_ssh/binding.h"
#include "msrun_ssh/check.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/jobs.h"
#include "msrun_ssh/stacks.h"
#include "msrun_ssh/sync.h"
#include "msrun_ssh/topology.h"

namespace ms = msrun_ssh;

namespace {

void stacks(std::string_view out) {
  ms::HostStacks h = ms::parse_stacks(out);
  FUZZ_CHECK(!h.complete || out.find("end") != std::string_view::npos, "complete without end");
  for (const auto& p : h.processes) FUZZ_CHECK(p.pid > 0, "pid %ld", p.pid);
  h.address = "host";
  (void)ms::format_stack_report("job-1", {h});
}

void remote_time(std::string_view out) {
  bool whole = false;
  if (auto t = ms::parse_remote_time(out, &whole))
    FUZZ_CHECK(std::isfinite(*t) && *t >= 0, "time %f", *t);
}

void net_client(std::string_view out) {
  auto links = ms::parse_net_client(0, 1, std::string(out), "");
  FUZZ_CHECK(links.size() == 2, "%zu links", links.size());
  FUZZ_CHECK(links[0].from == 1 && links[0].to == 0 && links[1].from == 0 && links[1].to == 1,
             "the pair's links");
  for (const auto& l : links)
    if (l.gbps) FUZZ_CHECK(std::isfinite(*l.gbps) && *l.gbps >= 0, "rate %f", *l.gbps);
}

void manifest(std::string_view out) {
  ms::IgnoreRules rules;
  rules.add("__pycache__/");
  ms::RemoteManifest m = ms::parse_remote_manifest(out, rules);
  for (const auto& [path, entry] : m.entries)
    FUZZ_CHECK(!rules.excluded(path, entry.type == ms::EntryType::kDir), "excluded %s",
               path.c_str());
  ms::RemoteManifest json = ms::parse_remote_manifest(out, rules, false);
  FUZZ_CHECK(m.entries == json.entries && m.marker == json.marker && m.error == json.error &&
                 m.complete == json.complete,
             "the plain-line shortcut read %zu entries, the JSON parser %zu", m.entries.size(),
             json.entries.size());
}

void cpu_list(std::string_view out) {
  try {
    std::vector<int> cpus = ms::parse_cpu_list(out, "fuzz");
    for (size_t i = 0; i < cpus.size(); ++i) {
      FUZZ_CHECK(cpus[i] >= 0 && cpus[i] <= 65535, "cpu %d", cpus[i]);
      FUZZ_CHECK(i == 0 || cpus[i - 1] < cpus[i], "not sorted and unique");
    }
  } catch (const ms::InputError&) {
  }
}

void binding_probe(std::string_view out) {
  std::vector<std::string> order = ms::npu_logic_order_of(out);
  for (size_t i = 0; i < order.size(); ++i) {
    const std::string& b = order[i];
    FUZZ_CHECK(b.size() == 12 && b[4] == ':' && b[7] == ':' && b[10] == '.', "bus id %s",
               b.c_str());
    for (char c : b) FUZZ_CHECK(!(c >= 'A' && c <= 'Z'), "bus id %s not lowercase", b.c_str());
    for (size_t j = 0; j < i; ++j) FUZZ_CHECK(order[j] != b, "bus id %s twice", b.c_str());
  }
  if (out.find("hwloc-xml") != std::string_view::npos) return;
  try {
    ms::Topology t = ms::parse_probe_output(out);
    FUZZ_CHECK(!t.allowed_cpus.empty(), "no allowed CPU");
    std::vector<ms::Device> npus = t.devices_of_kind("npu");
    size_t n = 0;
    for (const auto& d : t.devices) n += d.kind == "npu" ? 1 : 0;
    FUZZ_CHECK(npus.size() == n, "%zu NPUs by logic id of %zu", npus.size(), n);
  } catch (const ms::InputError&) {
  }
}

void swept_lines(std::string_view out) {
  for (std::string_view line : ms::split_lines(out)) {
    auto p = ms::parse_swept_line(line);
    if (!p) continue;
    FUZZ_CHECK(p->pid > 0 && p->signal.starts_with("SIG"), "pid %ld signal %s", p->pid,
               p->signal.c_str());
    auto again = ms::parse_swept_line("killed " + ms::describe_swept(*p));
    FUZZ_CHECK(again && again->pid == p->pid && again->signal == p->signal,
               "describe_swept does not read back");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view out(reinterpret_cast<const char*>(data) + 1, size - 1);
  swept_lines(out);
  switch (data[0] % 10) {
    case 0:
      stacks(out);
      break;
    case 1:
      (void)ms::parse_probe(out);
      break;
    case 2:
      remote_time(out);
      break;
    case 3:
      net_client(out);
      break;
    case 4:
      (void)ms::parse_job_state(out);
      break;
    case 5:
      manifest(out);
      break;
    case 6:
      (void)ms::parse_remote_answer(out);
      break;
    case 7:
      (void)ms::parse_apply_summary(out);
      break;
    case 8:
      cpu_list(out);
      break;
    default:
      binding_probe(out);
      break;
  }
  return 0;
}
