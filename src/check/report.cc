// The acceptance report of `msrun-ssh check`: its data model, the terminal table and the JSON.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "msrun_ssh/check.h"

namespace msrun_ssh {
namespace {

// Table headers: short enough that a report of every check fits a wide terminal.
std::string header(const std::string& name) {
  if (name == "reachable") return "reach";
  if (name == "authenticated") return "auth";
  if (name == "host_key") return "hostkey";
  if (name == "master_port") return "port";
  return name;
}

constexpr size_t kMaxCell = 14;

std::string cell(const CheckResult& c) {
  switch (c.status) {
    case CheckStatus::kPass: {
      std::string v = c.value.empty() ? "ok" : c.value;
      if (v.size() > kMaxCell) v = v.substr(0, kMaxCell - 1) + "~";
      return v;
    }
    case CheckStatus::kWarn:
      return "WARN";
    case CheckStatus::kFail:
      return "FAIL";
    case CheckStatus::kSkip:
      return "-";
  }
  return "?";
}

std::string paint(const std::string& text, CheckStatus status, bool color) {
  if (!color) return text;
  if (status == CheckStatus::kFail) return "\x1b[1;31m" + text + "\x1b[0m";
  if (status == CheckStatus::kWarn) return "\x1b[33m" + text + "\x1b[0m";
  return text;
}

std::string host_label(const HostReport& h) { return h.address + (h.is_master ? "*" : ""); }

// Every column name of the report, in the order the hosts have them (a union, for safety).
std::vector<std::string> columns(const CheckReport& report) {
  std::vector<std::string> out;
  for (const auto& h : report.hosts)
    for (const auto& c : h.checks)
      if (std::find(out.begin(), out.end(), c.name) == out.end()) out.push_back(c.name);
  return out;
}

std::string reasons(const CheckReport& report, CheckStatus status, const char* title, bool color) {
  std::string out;
  size_t width = 0;
  for (const auto& h : report.hosts) width = std::max(width, h.address.size());
  for (const auto& h : report.hosts)
    for (const auto& c : h.checks)
      if (c.status == status)
        out += fmt::format("  {:<{}}  {}: {}\n", h.address, width, paint(c.name, status, color),
                           c.detail);
  return out.empty() ? "" : fmt::format("\n{}:\n{}", title, out);
}

}  // namespace

const char* status_name(CheckStatus status) {
  switch (status) {
    case CheckStatus::kPass:
      return "pass";
    case CheckStatus::kWarn:
      return "warn";
    case CheckStatus::kFail:
      return "fail";
    case CheckStatus::kSkip:
      return "skip";
  }
  return "?";
}

CheckResult* HostReport::find(std::string_view name) {
  for (auto& c : checks)
    if (c.name == name) return &c;
  return nullptr;
}

const CheckResult* HostReport::find(std::string_view name) const {
  for (const auto& c : checks)
    if (c.name == name) return &c;
  return nullptr;
}

void HostReport::set(std::string_view name, CheckStatus status, std::string detail,
                     std::string value) {
  CheckResult* c = find(name);
  if (!c) {
    checks.push_back(CheckResult{std::string(name)});
    c = &checks.back();
  }
  c->status = status;
  c->detail = std::move(detail);
  c->value = std::move(value);
}

std::vector<std::string> check_names(const std::vector<std::string>& imports) {
  std::vector<std::string> names{"reachable", "authenticated", "host_key", "os",
                                 "cpus",      "numa",          "devices",  "python"};
  for (const auto& m : imports) names.push_back("import:" + m);
  for (const char* n : {"script", "workdir", "clock", "disk", "master_port", "route", "stacks"})
    names.emplace_back(n);
  return names;
}

CheckReport empty_report(const Plan& plan, const std::vector<std::string>& imports,
                         const std::string& detail) {
  CheckReport report;
  report.master = fmt::format("{}:{}", plan.master_ip, plan.master_port);
  for (const auto& hp : plan.hosts) {
    HostReport h;
    h.address = host_key(hp.host);  // box:2202 when another entry is on box too
    h.node_rank = hp.node_rank;
    h.is_master = hp.is_master;
    for (const auto& n : check_names(imports))
      h.checks.push_back(CheckResult{n, CheckStatus::kSkip, detail, ""});
    report.hosts.push_back(std::move(h));
  }
  return report;
}

CheckTally tally(const CheckReport& report) {
  CheckTally t;
  t.hosts = static_cast<int>(report.hosts.size());
  for (const auto& h : report.hosts)
    for (const auto& c : h.checks) {
      if (c.status == CheckStatus::kPass) ++t.passed;
      if (c.status == CheckStatus::kFail) ++t.failed;
      if (c.status == CheckStatus::kWarn) ++t.warnings;
      if (c.status == CheckStatus::kSkip) ++t.skipped;
    }
  return t;
}

std::string summary_line(const CheckReport& report) {
  CheckTally t = tally(report);
  std::string line = fmt::format("check: {} host{}, {} passed, {} failed, {} warning{}", t.hosts,
                                 t.hosts == 1 ? "" : "s", t.passed, t.failed, t.warnings,
                                 t.warnings == 1 ? "" : "s");
  if (t.skipped > 0) line += fmt::format(", {} skipped", t.skipped);
  return line;
}

std::string format_table(const CheckReport& report, bool color) {
  std::vector<std::string> cols = columns(report);
  std::vector<size_t> width(cols.size() + 1, 4);  // "host"
  for (const auto& h : report.hosts) width[0] = std::max(width[0], host_label(h).size());
  for (size_t c = 0; c < cols.size(); ++c) {
    width[c + 1] = header(cols[c]).size();
    for (const auto& h : report.hosts)
      if (const CheckResult* r = h.find(cols[c]))
        width[c + 1] = std::max(width[c + 1], cell(*r).size());
  }
  std::string out = summary_line(report) + "\n\n";
  std::string line = fmt::format("{:<{}}", "host", width[0]);
  for (size_t c = 0; c < cols.size(); ++c)
    line += fmt::format("  {:<{}}", header(cols[c]), width[c + 1]);
  out += line.substr(0, line.find_last_not_of(' ') + 1) + "\n";
  for (const auto& h : report.hosts) {
    line = fmt::format("{:<{}}", host_label(h), width[0]);
    std::string pad;
    for (size_t c = 0; c < cols.size(); ++c) {
      const CheckResult* r = h.find(cols[c]);
      std::string text = r ? cell(*r) : "";
      line += "  " + pad + paint(text, r ? r->status : CheckStatus::kSkip, color);
      pad = std::string(width[c + 1] - text.size(), ' ');
    }
    out += line + "\n";
  }
  bool any_master = std::any_of(report.hosts.begin(), report.hosts.end(),
                                [](const HostReport& h) { return h.is_master; });
  if (any_master) out += fmt::format("* master, scheduler at {}\n", report.master);
  out += reasons(report, CheckStatus::kFail, "failed", color);
  out += reasons(report, CheckStatus::kWarn, "warnings", color);
  return out;
}

namespace {

nlohmann::ordered_json perf_json(const PerfReport& perf, const CheckReport& report) {
  nlohmann::ordered_json out;
  out["min_ratio"] = perf.min_ratio;
  out["seconds"] = perf.seconds;
  out["retested"] = perf.retested;
  out["median_cpu"] = perf.median_cpu;
  out["median_mem_gbps"] = perf.median_mem_gbps;
  out["median_disk"] = nlohmann::ordered_json::object();
  for (const auto& [path, wr] : perf.median_disk)
    out["median_disk"][path] = {{"write_mbps", wr.first}, {"read_mbps", wr.second}};
  out["hosts"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < perf.hosts.size(); ++i) {
    const auto& h = perf.hosts[i];
    if (!h) continue;
    nlohmann::ordered_json j{{"address", report.hosts.at(i).address}};
    if (!h->error.empty()) {
      j["error"] = h->error;
      out["hosts"].push_back(std::move(j));
      continue;
    }
    j["cpus"] = h->cpus;
    j["kernel"] = h->kernel;
    j["cpu_per_cpu"] = h->cpu_median();
    j["cpu_each"] = h->cpu_each;
    j["mem_gbps"] = h->mem_gbps;
    j["disks"] = nlohmann::ordered_json::array();
    for (const auto& d : h->disks) {
      nlohmann::ordered_json dj{{"path", d.path}};
      if (d.error.empty()) {
        dj["write_mbps"] = d.write_mbps.value_or(0);
        dj["read_mbps"] = d.read_mbps.value_or(0);
      } else {
        dj["error"] = d.error;
      }
      j["disks"].push_back(std::move(dj));
    }
    j["accel_tool"] = h->accel_tool;
    if (!h->accel_error.empty()) j["accel_error"] = h->accel_error;
    j["accel"] = nlohmann::ordered_json::array();
    for (const auto& a : h->accel) {
      nlohmann::ordered_json aj{{"id", a.id}, {"name", a.name}};
      if (!a.health.empty()) aj["health"] = a.health;
      if (a.temp_c) aj["temp_c"] = *a.temp_c;
      if (a.util_pct) aj["util_pct"] = *a.util_pct;
      if (a.sm_mhz) aj["sm_mhz"] = *a.sm_mhz;
      if (a.max_sm_mhz) aj["max_sm_mhz"] = *a.max_sm_mhz;
      if (a.ecc_uncorrected) aj["ecc_uncorrected"] = *a.ecc_uncorrected;
      aj["hw_slowdown"] = a.hw_slowdown;
      aj["processes"] = a.processes;
      j["accel"].push_back(std::move(aj));
    }
    out["hosts"].push_back(std::move(j));
  }
  return out;
}

nlohmann::ordered_json net_json(const NetReport& net, const CheckReport& report) {
  nlohmann::ordered_json out;
  out["median_gbps"] = net.median_gbps;
  out["median_rtt_ms"] = net.median_rtt_ms;
  out["min_ratio"] = net.min_ratio;
  out["rounds"] = net.rounds;
  out["retested"] = net.retested;
  out["seconds"] = net.seconds;
  out["links"] = nlohmann::ordered_json::array();
  for (const auto& l : net.links) {
    nlohmann::ordered_json link{{"from", report.hosts[l.from].address},
                                {"to", report.hosts[l.to].address},
                                {"from_via", net.where.at(l.from)},
                                {"to_via", net.where.at(l.to)}};
    if (l.gbps) {
      link["gbps"] = *l.gbps;
      link["rtt_ms"] = l.rtt_ms;
    } else {
      link["error"] = l.error;
    }
    out["links"].push_back(std::move(link));
  }
  return out;
}

nlohmann::ordered_json collective_json(const CollectiveResult& c) {
  nlohmann::ordered_json out{{"ran", c.ran}, {"exit_status", c.status}, {"seconds", c.seconds}};
  out["ranks"] = nlohmann::ordered_json::object();
  for (const auto& [rank, seconds] : c.rank_seconds) out["ranks"][std::to_string(rank)] = seconds;
  out["cause"] = c.cause;
  out["failed_process"] = c.failed_process;
  out["failed_hosts"] = c.failed_hosts;
  out["last_lines"] = c.last_lines;
  out["log_dir"] = c.log_dir;
  return out;
}

}  // namespace

std::string format_json(const CheckReport& report) {
  CheckTally t = tally(report);
  nlohmann::ordered_json doc;
  doc["summary"] = {{"hosts", t.hosts},       {"passed", t.passed},   {"failed", t.failed},
                    {"warnings", t.warnings}, {"skipped", t.skipped}, {"ok", t.failed == 0}};
  doc["master"] = report.master;
  doc["hosts"] = nlohmann::ordered_json::object();
  for (const auto& h : report.hosts) {
    nlohmann::ordered_json host;
    host["node_rank"] = h.node_rank;
    host["master"] = h.is_master;
    host["checks"] = nlohmann::ordered_json::object();
    for (const auto& c : h.checks)
      host["checks"][c.name] = {
          {"status", status_name(c.status)}, {"detail", c.detail}, {"value", c.value}};
    doc["hosts"][h.address] = std::move(host);
  }
  if (report.perf) doc["perf"] = perf_json(*report.perf, report);
  if (report.net) doc["net"] = net_json(*report.net, report);
  if (report.collective) doc["net"]["collective"] = collective_json(*report.collective);
  // Replace invalid UTF-8 (a host may print anything) instead of throwing.
  return doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

int check_exit_code(const CheckReport& report) { return tally(report).failed == 0 ? 0 : 1; }

}  // namespace msrun_ssh
