// `msrun-ssh check --perf`: each host's CPU, memory and disk throughput and its accelerators'
// health (src/remote/perf.py), judged against the other hosts (see check.h for the rules).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "msrun_ssh/base.h"
#include "msrun_ssh/batch.h"
#include "msrun_ssh/check.h"
#include "python_command.h"
#include "remote/programs.h"

namespace msrun_ssh {
namespace {

// A tool's field: absent when it says it has none ("N/A", "[N/A]", "[Not Supported]", "-").
std::optional<double> field_number(std::string_view text) {
  std::string t(trim(text));
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::vector<std::string> cells(std::string_view line, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t at = line.find(sep, start);
    out.emplace_back(
        trim(line.substr(start, at == std::string_view::npos ? line.npos : at - start)));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}

// The words of a cell ("97.8        35                0    / 0" -> 97.8, 35, 0, /, 0).
std::vector<std::string> words(std::string_view cell) {
  std::vector<std::string> out;
  for (auto& w : cells(cell, ' '))
    if (!w.empty()) out.push_back(std::move(w));
  return out;
}

std::optional<double> json_number(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

// "1.23 k/s" in the kernel's unit: runs per second (python: 2000-step loops).
std::string per_cpu(double v) {
  return v >= 1e3 ? fmt::format("{:.3g} k/s", v / 1e3) : fmt::format("{:.3g} /s", v);
}

bool below(double mine, double median, double ratio) { return median > 0 && mine < ratio * median; }

}  // namespace

double HostPerf::cpu_median() const { return upper_median(cpu_each); }

std::string perf_command(const std::string& python, double seconds,
                         const std::vector<std::string>& paths) {
  std::string joined;
  for (const auto& p : paths) joined += p + "\n";
  return python_command(remote::kPerfSh, "msrun-ssh-perf", 6 * seconds + 60, remote::kPerfPy,
                        {fmt::format("{:g}", seconds), joined, "auto"}, python);
}

std::vector<AccelDevice> parse_nvidia_smi(std::string_view csv, std::string& error) {
  std::vector<AccelDevice> out;
  for (const auto& line : split_lines(csv)) {
    if (trim(line).empty()) continue;
    auto f = cells(line, ',');
    if (f.size() < 8 || f[0].empty()) {
      error = fmt::format("unreadable nvidia-smi line: {}", line.substr(0, 120));
      continue;
    }
    AccelDevice d;
    d.id = f[0];
    d.name = f[1];
    d.temp_c = field_number(f[2]);
    d.util_pct = field_number(f[3]);
    d.sm_mhz = field_number(f[4]);
    d.max_sm_mhz = field_number(f[5]);
    if (auto e = field_number(f[6])) d.ecc_uncorrected = saturate<long>(*e);
    d.hw_slowdown = f[7] == "Active";
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<AccelDevice> parse_npu_smi(std::string_view text, std::string& error) {
  std::vector<AccelDevice> out;
  enum { kNone, kDevices, kProcesses } table = kNone;
  AccelDevice* last = nullptr;  // the NPU row waiting for its chip row
  for (const auto& raw : split_lines(text)) {
    std::string_view line = trim(raw);
    if (!line.starts_with('|')) continue;  // borders: +----+, +====+
    auto c = cells(line.substr(1, line.size() - (line.ends_with('|') ? 2 : 1)), '|');
    if (c.size() >= 2 && c[1] == "Health") {
      table = kDevices;
      continue;
    }
    if (c.size() >= 2 && c[1] == "Process id") {
      table = kProcesses;
      continue;
    }
    if (table == kDevices && c.size() >= 3) {
      auto first = words(c[0]);
      if (first.empty() || c[0] == "Chip") continue;
      if (first.size() >= 2) {  // "NPU  NAME | Health | Power Temp ..."
        AccelDevice d;
        d.id = first[0];
        d.name = first[1];
        d.health = c[1];
        auto w = words(c[2]);
        if (w.size() >= 2) d.temp_c = field_number(w[1]);
        out.push_back(std::move(d));
        last = &out.back();
      } else if (last) {  // "CHIP | Bus-Id | AICore(%) Memory-Usage ..."
        last->id += "/" + first[0];
        auto w = words(c[2]);
        if (!w.empty()) last->util_pct = field_number(w[0]);
        last = nullptr;
      } else {
        error = fmt::format("unreadable npu-smi line: {}", line.substr(0, 120));
      }
    } else if (table == kProcesses && c.size() >= 3) {
      auto npu = words(c[0]);
      if (npu.size() < 2) continue;
      std::string id = npu[0] + "/" + npu[1];
      for (auto& d : out)
        if (d.id == id) d.processes.push_back(c[1] + " " + c[2]);
    }
  }
  if (out.empty() && error.empty()) error = "npu-smi info listed no NPU";
  return out;
}

HostPerf parse_perf(const std::string& output, const std::string& trouble) {
  HostPerf p;
  size_t start = output.find('{');
  nlohmann::json j = nlohmann::json::parse(
      start == std::string::npos ? std::string_view() : std::string_view(output).substr(start),
      nullptr, false);
  if (!j.is_object()) {
    p.error = trouble.empty() ? "no measurement" : trouble;
    return p;
  }
  if (auto e = j.find("error"); e != j.end() && e->is_string()) {
    p.error = e->get<std::string>();
    return p;
  }
  p.cpus = saturate<int>(json_number(j, "cpus").value_or(0));
  p.kernel = j.value("kernel", "");
  if (auto each = j.find("cpu_each"); each != j.end() && each->is_array())
    for (const auto& v : *each)
      if (v.is_number()) p.cpu_each.push_back(v.get<double>());
  p.mem_gbps = json_number(j, "mem_gbps").value_or(0);
  if (auto disks = j.find("disks"); disks != j.end() && disks->is_array())
    for (const auto& d : *disks) {
      if (!d.is_object()) continue;
      p.disks.push_back({d.value("path", ""), json_number(d, "write_mbps"),
                         json_number(d, "read_mbps"), d.value("error", "")});
    }
  if (auto a = j.find("accel"); a != j.end() && a->is_object()) {
    p.accel_tool = a->value("tool", "");
    std::string out = a->value("out", "");
    int status = saturate<int>(json_number(*a, "status").value_or(0));
    if (status != 0 || out.empty())
      p.accel_error = fmt::format("{} exited {}{}", p.accel_tool, status,
                                  a->contains("error") ? ": " + a->value("error", "") : "");
    else
      p.accel = p.accel_tool == "nvidia-smi" ? parse_nvidia_smi(out, p.accel_error)
                                             : parse_npu_smi(out, p.accel_error);
  }
  if (p.cpu_each.empty()) p.error = "no CPU measurement";
  return p;
}

void evaluate_perf(PerfReport& perf, CheckReport& report) {
  std::map<std::string, std::vector<double>> cpu;
  std::vector<double> mem;
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> disk;
  for (const auto& h : perf.hosts) {
    if (!h || !h->error.empty()) continue;
    cpu[h->kernel].push_back(h->cpu_median());
    mem.push_back(h->mem_gbps);
    for (const auto& d : h->disks) {
      if (d.write_mbps) disk[d.path].first.push_back(*d.write_mbps);
      if (d.read_mbps) disk[d.path].second.push_back(*d.read_mbps);
    }
  }
  for (const auto& [k, v] : cpu) perf.median_cpu[k] = upper_median(v);
  perf.median_mem_gbps = upper_median(mem);
  for (const auto& [path, wr] : disk)
    perf.median_disk[path] = {upper_median(wr.first), upper_median(wr.second)};
  const double r = perf.min_ratio;
  for (size_t i = 0; i < perf.hosts.size() && i < report.hosts.size(); ++i) {
    const auto& h = perf.hosts[i];
    if (!h) continue;
    HostReport& host = report.hosts[i];
    if (!h->error.empty()) {
      host.set("perf", CheckStatus::kFail, "the node test failed: " + h->error);
      continue;
    }
    std::vector<std::string> fails, warns;
    double c = h->cpu_median(), mc = perf.median_cpu[h->kernel];
    if (below(c, mc, r))
      fails.push_back(fmt::format("CPU at {} per CPU ({}): below {:g} x the median {}", per_cpu(c),
                                  h->kernel, r, per_cpu(mc)));
    if (below(h->mem_gbps, perf.median_mem_gbps, r))
      fails.push_back(fmt::format("memory copy at {:.2f} GB/s: below {:g} x the median {:.2f} GB/s",
                                  h->mem_gbps, r, perf.median_mem_gbps));
    for (const auto& d : h->disks) {
      if (!d.error.empty()) {
        fails.push_back(fmt::format("{}: {}", d.path, d.error));
        continue;
      }
      auto [mw, mr] = perf.median_disk[d.path];
      for (auto [what, v, m] : {std::tuple{"writes", d.write_mbps, mw}, {"reads", d.read_mbps, mr}})
        if (v && below(*v, m, r))
          fails.push_back(fmt::format("{} {} at {:.0f} MB/s: below {:g} x the median {:.0f} MB/s",
                                      d.path, what, *v, r, m));
    }
    if (!h->accel_error.empty()) warns.push_back(h->accel_error);
    for (const auto& a : h->accel) {
      std::string who = fmt::format("{} {}", h->accel_tool == "npu-smi" ? "NPU" : "GPU", a.id);
      if (!a.health.empty() && a.health != "OK")
        fails.push_back(fmt::format("{}: health {}", who, a.health));
      if (a.ecc_uncorrected && *a.ecc_uncorrected > 0)
        fails.push_back(fmt::format("{}: {} uncorrected ECC errors", who, *a.ecc_uncorrected));
      if (a.temp_c && *a.temp_c >= 85) warns.push_back(fmt::format("{}: {:g} C", who, *a.temp_c));
      if (a.util_pct && *a.util_pct >= 10)
        warns.push_back(fmt::format("{}: {:g}% busy before the job", who, *a.util_pct));
      if (!a.processes.empty())
        warns.push_back(fmt::format("{}: in use by {}", who, a.processes.front()));
      if (a.hw_slowdown) warns.push_back(fmt::format("{}: clocks held down by the hardware", who));
    }
    std::string value = per_cpu(c);
    if (!fails.empty())
      host.set("perf", CheckStatus::kFail, fmt::format("{}", fmt::join(fails, "; ")), value);
    else if (!warns.empty())
      host.set("perf", CheckStatus::kWarn, fmt::format("{}", fmt::join(warns, "; ")), value);
    else
      host.set("perf", CheckStatus::kPass,
               fmt::format("{} CPUs at {} each ({}), memory {:.2f} GB/s", h->cpus, per_cpu(c),
                           h->kernel, h->mem_gbps),
               value);
  }
}

namespace {

// Of two measurements of one host, the better figure of each.
void keep_better(HostPerf& kept, const HostPerf& again) {
  if (!again.error.empty() || again.kernel != kept.kernel) return;
  for (size_t i = 0; i < kept.cpu_each.size() && i < again.cpu_each.size(); ++i)
    kept.cpu_each[i] = std::max(kept.cpu_each[i], again.cpu_each[i]);
  kept.mem_gbps = std::max(kept.mem_gbps, again.mem_gbps);
  for (size_t i = 0; i < kept.disks.size() && i < again.disks.size(); ++i) {
    DiskRate& k = kept.disks[i];
    const DiskRate& a = again.disks[i];
    if (!k.error.empty() || !a.error.empty()) continue;
    k.write_mbps = std::max(k.write_mbps.value_or(0), a.write_mbps.value_or(0));
    k.read_mbps = std::max(k.read_mbps.value_or(0), a.read_mbps.value_or(0));
  }
}

}  // namespace

PerfReport run_perf_test(Transport& transport, const std::vector<size_t>& hosts,
                         const std::vector<HostExpectation>& es, const Options& options,
                         CheckReport& report) {
  PerfReport perf;
  perf.min_ratio = options.perf_min_ratio;
  perf.hosts.resize(es.size());
  double start = transport.now_ms();
  auto measure = [&](const std::vector<size_t>& which) {
    std::vector<BatchCommand> commands;
    for (size_t h : which) {
      std::vector<std::string> paths{es[h].workdir};
      paths.insert(paths.end(), options.perf_paths.begin(), options.perf_paths.end());
      commands.push_back({h, perf_command(es[h].python, options.perf_seconds, paths)});
    }
    std::vector<std::pair<size_t, HostPerf>> out;
    for (const auto& r : run_batch(transport, commands, 6 * options.perf_seconds + 70))
      out.emplace_back(r.host, parse_perf(r.out, batch_trouble(r, "no answer in time")));
    return out;
  };
  for (auto& [h, p] : measure(hosts)) perf.hosts[h] = std::move(p);
  evaluate_perf(perf, report);
  // A host found slow is measured once more and keeps its better figures: a moment of load on a
  // shared machine does not fail it; a slow node stays slow.
  std::vector<size_t> slow;
  for (size_t h : hosts)
    if (perf.hosts[h] && perf.hosts[h]->error.empty() &&
        report.hosts[h].find("perf")->status == CheckStatus::kFail)
      slow.push_back(h);
  if (!slow.empty()) {
    for (auto& [h, p] : measure(slow)) keep_better(*perf.hosts[h], p);
    perf.median_cpu.clear();
    perf.median_disk.clear();
    evaluate_perf(perf, report);
  }
  perf.retested = slow.size();
  perf.seconds = (transport.now_ms() - start) / 1000;
  return perf;
}

std::string format_perf(const PerfReport& perf, const CheckReport& report) {
  std::string out = fmt::format(
      "\nperf: {:.1f} s, {} slow hosts measured again; medians:", perf.seconds, perf.retested);
  for (const auto& [k, v] : perf.median_cpu) out += fmt::format(" CPU {} ({}),", per_cpu(v), k);
  out += fmt::format(" memory {:.2f} GB/s", perf.median_mem_gbps);
  for (const auto& [path, wr] : perf.median_disk)
    out += fmt::format(", {} write {:.0f} / read {:.0f} MB/s", path, wr.first, wr.second);
  out += "\n";
  for (size_t i = 0; i < perf.hosts.size(); ++i) {
    const auto& h = perf.hosts[i];
    if (!h) continue;
    out += fmt::format("  {}: ", report.hosts.at(i).address);
    if (!h->error.empty()) {
      out += "failed: " + h->error + "\n";
      continue;
    }
    out += fmt::format(
        "{} CPUs, {} per CPU (slowest {}), memory {:.2f} GB/s", h->cpus, per_cpu(h->cpu_median()),
        per_cpu(*std::min_element(h->cpu_each.begin(), h->cpu_each.end())), h->mem_gbps);
    for (const auto& d : h->disks)
      out += d.error.empty() ? fmt::format("; {} write {:.0f} / read {:.0f} MB/s", d.path,
                                           d.write_mbps.value_or(0), d.read_mbps.value_or(0))
                             : fmt::format("; {}: {}", d.path, d.error);
    for (const auto& a : h->accel)
      out += fmt::format("; {} {} {}{}", h->accel_tool, a.id, a.name,
                         a.temp_c ? fmt::format(" {:g} C", *a.temp_c) : "");
    out += "\n";
  }
  return out;
}

}  // namespace msrun_ssh
