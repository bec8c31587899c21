// The per-host probe of `msrun-ssh check`: the command that runs the shell script that gathers
// facts on a host (src/remote/check_probe.sh), the parser of its `key=value` output, and the rules
// that turn facts into verdicts (see check.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "msrun_ssh/base.h"
#include "msrun_ssh/binding.h"
#include "msrun_ssh/check.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/stacks.h"
#include "remote/programs.h"

namespace msrun_ssh {
namespace {

void add_unique(std::vector<int>& to, const std::vector<int>& from) {
  to.insert(to.end(), from.begin(), from.end());
  std::sort(to.begin(), to.end());
  to.erase(std::unique(to.begin(), to.end()), to.end());
}

std::vector<int> minus(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

std::string join_ints(const std::vector<int>& v) { return fmt::format("{}", fmt::join(v, ",")); }

CheckResult probe_result(std::string name, CheckStatus status, std::string detail,
                         std::string value = "") {
  return CheckResult{std::move(name), status, std::move(detail), std::move(value)};
}

// The verdict of a check whose facts never came: the probe stopped before printing them.
CheckResult missing(const std::string& name, const ProbeFacts& facts) {
  std::string why = facts.get("probe_error");
  if (why.empty()) why = "the probe ended before this check (timed out or cut off)";
  return probe_result(name, CheckStatus::kFail, why);
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024 && u < 5) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

// The word after `key` in a line such as "198.18.1.10 dev eth0 src 198.18.1.11 uid 0".
std::string word_after(const std::string& line, const std::string& key) {
  std::string k = " " + key + " ";
  size_t pos = (" " + line + " ").find(k);
  if (pos == std::string::npos) return "";
  size_t start = pos + k.size() - 1;
  size_t end = line.find(' ', start);
  return line.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

CheckResult os_check(const ProbeFacts& f) {
  if (!f.has("kernel")) return missing("os", f);
  std::string os = f.get("os");
  std::string kernel = f.get("kernel");
  std::string release = word_after(kernel, "Linux");
  if (release.empty()) release = kernel.substr(0, kernel.find(' '));
  return probe_result("os", CheckStatus::kPass,
                      fmt::format("{}{}{}", os.empty() ? "unknown OS" : os, "; ", kernel), release);
}

// The tool the run binds with here (numactl with bind_numa, else taskset with bind_core) when the
// probe found it missing; "" when none is needed, it is there, or the probe did not say.
std::string missing_bind_tool(const HostExpectation& e, const ProbeFacts& f, bool numa) {
  bool numa_asked = e.auto_bind_numa || !e.manual_numa.empty();
  bool core_asked = e.auto_bind_core || !e.manual_cpus.empty();
  const char* tool = numa_asked ? "numactl" : core_asked ? "taskset" : nullptr;
  if (!tool || numa != numa_asked || !f.has("bind_tools")) return "";
  std::string have = " " + f.get("bind_tools") + " ";
  return have.find(fmt::format(" {} ", tool)) == std::string::npos ? tool : "";
}

CheckResult cpus_check(const HostExpectation& e, const ProbeFacts& f) {
  if (!f.has("cpus_allowed")) return missing("cpus", f);
  std::string text = f.get("cpus_allowed");
  if (text.empty())
    return probe_result("cpus", CheckStatus::kWarn,
                        "cannot read Cpus_allowed_list of a remote shell");
  std::vector<int> allowed;
  try {
    allowed = parse_cpu_list(text, "Cpus_allowed_list");
  } catch (const InputError&) {
    return probe_result("cpus", CheckStatus::kWarn,
                        fmt::format("cannot parse Cpus_allowed_list \"{}\"", text));
  }
  int n = static_cast<int>(allowed.size());
  std::string list = format_cpu_list(allowed);
  if (std::string tool = missing_bind_tool(e, f, false); !tool.empty())
    return probe_result("cpus", CheckStatus::kFail,
                        fmt::format("binding needs {}, which is not installed here", tool));
  std::vector<int> outside = minus(e.manual_cpus, allowed);
  if (!outside.empty())
    return probe_result("cpus", CheckStatus::kFail,
                        fmt::format("bind_core CPUs {} are not allowed here (allowed: {})",
                                    format_cpu_list(outside), list));
  if (n < e.processes && e.auto_bind_core)
    return probe_result("cpus", CheckStatus::kFail,
                        fmt::format("{} allowed CPUs ({}) cannot be split among {} processes "
                                    "(--bind_core=True)",
                                    n, list, e.processes));
  if (n < e.processes)
    return probe_result(
        "cpus", CheckStatus::kWarn,
        fmt::format("only {} allowed CPUs ({}) for {} processes", n, list, e.processes));
  return probe_result("cpus", CheckStatus::kPass,
                      fmt::format("{} ({} CPUs) for {} processes", list, n, e.processes),
                      std::to_string(n));
}

CheckResult numa_check(const HostExpectation& e, const ProbeFacts& f) {
  if (!f.has("numa_nodes")) return missing("numa", f);
  if (std::string tool = missing_bind_tool(e, f, true); !tool.empty())
    return probe_result("numa", CheckStatus::kFail,
                        fmt::format("binding needs {}, which is not installed here", tool));
  std::vector<int> ids;
  std::string listing;
  for (const auto& line : f.all("numa")) {
    size_t sp = line.find(' ');
    std::string id = line.substr(0, sp);
    std::string cpus = sp == std::string::npos ? "" : line.substr(sp + 1);
    if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) continue;
    ids.push_back(std::atoi(id.c_str()));
    listing +=
        fmt::format("{}{} ({})", listing.empty() ? "" : ", ", id, cpus.empty() ? "no CPUs" : cpus);
  }
  std::sort(ids.begin(), ids.end());
  if (ids.empty()) {
    if (!e.manual_numa.empty())
      return probe_result("numa", CheckStatus::kFail,
                          fmt::format("bind_numa names nodes {} but the host shows no NUMA node",
                                      join_ints(e.manual_numa)));
    if (e.auto_bind_numa)
      return probe_result("numa", CheckStatus::kWarn,
                          "--bind_numa asked for, but /sys/devices/system/node shows no NUMA node");
    return probe_result("numa", CheckStatus::kPass,
                        "no NUMA information (/sys/devices/system/node)", "-");
  }
  std::vector<int> absent = minus(e.manual_numa, ids);
  if (!absent.empty())
    return probe_result("numa", CheckStatus::kFail,
                        fmt::format("bind_numa names node(s) {} that do not exist here (nodes: {})",
                                    join_ints(absent), join_ints(ids)));
  return probe_result("numa", CheckStatus::kPass,
                      fmt::format("{} node{}: {}", ids.size(), ids.size() == 1 ? "" : "s", listing),
                      std::to_string(ids.size()));
}

// "RC COUNT" of one device tool; false when the tool is absent.
bool tool_result(const ProbeFacts& f, const char* key, int& rc, int& count) {
  if (!f.has(key)) return false;
  std::string v = f.get(key);
  rc = std::atoi(v.c_str());
  size_t sp = v.find(' ');
  count = sp == std::string::npos ? 0 : std::atoi(v.c_str() + sp + 1);
  return true;
}

CheckResult devices_check(const HostExpectation& e, const ProbeFacts& f) {
  if (!f.has("devices_probed")) return missing("devices", f);
  struct Tool {
    const char* key;
    const char* command;
    const char* kind;
    int rc = 0, count = 0;
    bool present = false;
  };
  Tool tools[] = {{"npu", "npu-smi info -l", "NPU"}, {"gpu", "nvidia-smi -L", "GPU"}};
  for (auto& t : tools) t.present = tool_result(f, t.key, t.rc, t.count);
  if (e.workers == 0)
    return probe_result("devices", CheckStatus::kPass, "no workers planned here", "-");
  for (auto& t : tools)
    if (t.present && t.rc != 0)
      return probe_result("devices", CheckStatus::kFail,
                          fmt::format("{} failed (exit {}): {}", t.command, t.rc,
                                      f.get(std::string(t.key) + "_error")));
  const Tool* use = nullptr;
  for (auto& t : tools)
    if (t.present && (!use || t.count > use->count)) use = &t;
  if (!use)
    return probe_result(
        "devices", CheckStatus::kWarn,
        fmt::format("no npu-smi or nvidia-smi here: no device found for {} worker{}", e.workers,
                    e.workers == 1 ? "" : "s"),
        "none");
  if (use->count == 0)
    return probe_result("devices", CheckStatus::kWarn,
                        fmt::format("{} lists no {} for {} worker{}", use->command, use->kind,
                                    e.workers, e.workers == 1 ? "" : "s"),
                        "none");
  int need = e.workers;
  for (int id : e.device_ids) need = std::max(need, id + 1);
  if (use->count < need)
    return probe_result(
        "devices", CheckStatus::kFail,
        fmt::format("{} worker{} need device ids {} but {} lists {} {}{}", e.workers,
                    e.workers == 1 ? "" : "s", join_ints(e.device_ids), use->command, use->count,
                    use->kind, use->count == 1 ? "" : "s"));
  return probe_result("devices", CheckStatus::kPass,
                      fmt::format("{} {}{} for {} worker{}", use->count, use->kind,
                                  use->count == 1 ? "" : "s", e.workers, e.workers == 1 ? "" : "s"),
                      fmt::format("{} {}", use->count, use->kind));
}

bool python_found(const ProbeFacts& f) {
  return !f.get("python_path").empty() && !f.has("python_error");
}

CheckResult python_check(const HostExpectation& e, const ProbeFacts& f) {
  if (!f.has("python_path")) return missing("python", f);
  std::string path = f.get("python_path");
  if (path.empty())
    return probe_result(
        "python", e.python_required ? CheckStatus::kFail : CheckStatus::kWarn,
        fmt::format("{} not found on the PATH of a remote shell (set --python or the "
                    "host file's python)",
                    e.python));
  if (f.has("python_error"))
    return probe_result(
        "python", CheckStatus::kFail,
        fmt::format("{} ({}) does not run: {}", e.python, path, f.get("python_error")));
  std::string version = f.get("python_version");
  return probe_result("python", CheckStatus::kPass, fmt::format("{} {}", path, version), version);
}

CheckResult import_check(const HostExpectation& e, const ProbeFacts& f, const std::string& m) {
  std::string name = "import:" + m;
  if (f.has("python_path") && !python_found(f))
    return probe_result(name, CheckStatus::kSkip, fmt::format("no working {}", e.python));
  for (const auto& ok : f.all("import_ok"))
    if (ok == m)
      return probe_result(name, CheckStatus::kPass, fmt::format("{} imports {}", e.python, m));
  for (const auto& bad : f.all("import_fail"))
    if (bad.rfind(m + " ", 0) == 0 || bad == m)
      return probe_result(name, CheckStatus::kFail,
                          fmt::format("import {}: {}", m,
                                      bad.size() > m.size() ? bad.substr(m.size() + 1) : "failed"));
  return missing(name, f);
}

bool workdir_entered(const ProbeFacts& f) {
  std::string w = f.get("workdir");
  return w == "writable" || w.rfind("unwritable", 0) == 0;
}

CheckResult workdir_check(const HostExpectation& e, const ProbeFacts& f) {
  if (!f.has("workdir")) return missing("workdir", f);
  std::string w = f.get("workdir");
  if (w == "writable")
    return probe_result("workdir", CheckStatus::kPass, fmt::format("{} is writable", e.workdir));
  if (w.rfind("unwritable", 0) == 0)
    return probe_result("workdir", CheckStatus::kFail,
                        fmt::format("cannot create a file in {}: {}", e.workdir,
                                    w.size() > 11 ? w.substr(11) : "unknown error"));
  if (w == "notdir")
    return probe_result("workdir", CheckStatus::kFail,
                        fmt::format("{} is not a directory", e.workdir));
  if (w == "noaccess")
    return probe_result("workdir", CheckStatus::kFail,
                        fmt::format("cannot enter {} (permission denied)", e.workdir));
  return probe_result("workdir", CheckStatus::kFail,
                      fmt::format("{} does not exist (or a parent is not a directory)", e.workdir));
}

CheckResult disk_check(const HostExpectation& e, const ProbeFacts& f) {
  if (!f.has("workdir")) return missing("disk", f);
  if (!workdir_entered(f))
    return probe_result("disk", CheckStatus::kSkip,
                        fmt::format("workdir {} unavailable", e.workdir));
  std::string kb = f.get("disk_kb");
  if (kb.empty() || kb.find_first_not_of("0123456789") != std::string::npos)
    return probe_result("disk", CheckStatus::kWarn,
                        fmt::format("df gives no free space for {}", e.workdir));
  double bytes = std::strtod(kb.c_str(), nullptr) * 1024;
  std::string free = human_bytes(bytes);
  if (bytes < 1024.0 * 1024 * 1024)
    return probe_result("disk", CheckStatus::kWarn,
                        fmt::format("only {} free in {} (below 1 GiB)", free, e.workdir));
  std::string shortv = free;
  shortv.erase(std::remove(shortv.begin(), shortv.end(), ' '), shortv.end());
  return probe_result("disk", CheckStatus::kPass, fmt::format("{} free in {}", free, e.workdir),
                      shortv);
}

CheckResult clock_check(const ProbeFacts& f, const ClockSample& c) {
  if (!f.has("clock") || c.received <= 0) return missing("clock", f);
  if (c.sent <= 0 || c.sent > c.received)
    return probe_result("clock", CheckStatus::kWarn, "the clock exchange with the launcher failed");
  bool whole = false;
  auto remote = parse_remote_time(f.get("clock"), &whole);
  if (!remote)
    return probe_result(
        "clock", CheckStatus::kWarn,
        fmt::format("cannot read the remote clock (date printed \"{}\")", f.get("clock")));
  double mid = (c.sent + c.received) / 2;
  double half = std::max(0.0, (c.received - c.sent) / 2) + (whole ? 1.0 : 0.0);
  double offset = *remote - mid;
  std::string detail = fmt::format("{:+.3f} s (±{:.3f} s) from the launcher's clock", offset, half);
  std::string value = fmt::format("{:+.3f}s", offset);
  double a = std::fabs(offset);
  if (a > 5) return probe_result("clock", CheckStatus::kFail, detail + ": more than 5 s", value);
  if (a > 0.5)
    return probe_result("clock", CheckStatus::kWarn, detail + ": more than 0.5 s", value);
  return probe_result("clock", CheckStatus::kPass, detail, value);
}

CheckResult route_check(const HostExpectation& e, const ProbeFacts& f) {
  if (f.has("route_error"))
    return probe_result(
        "route", CheckStatus::kWarn,
        fmt::format("cannot tell the interface to {}: {}", e.master_ip, f.get("route_error")));
  if (!f.has("route")) return missing("route", f);
  std::string r = f.get("route");
  std::string dev = word_after(r, "dev");
  if (dev.empty())
    return probe_result(
        "route", CheckStatus::kFail,
        fmt::format("no route to the master {}: {}", e.master_ip, r.empty() ? "?" : r));
  std::string src = word_after(r, "src");
  std::string via = word_after(r, "via");
  if (r.rfind("local ", 0) == 0)
    return probe_result("route", CheckStatus::kPass,
                        fmt::format("{} is a local address (dev {})", e.master_ip, dev), "local");
  return probe_result("route", CheckStatus::kPass,
                      fmt::format("to {} via {}{}{}", e.master_ip, dev,
                                  src.empty() ? "" : fmt::format(" (source {})", src),
                                  via.empty() ? "" : fmt::format(", gateway {}", via)),
                      dev);
}

// The script verdict of one probed host against `reference` (the launcher's checksum when
// `local`, else the majority's; `counts`: hosts per checksum).
CheckResult script_check(const HostExpectation& e, const ProbeFacts& f,
                         const std::string& reference, std::map<std::string, int>& counts,
                         bool local, const std::string& local_error, size_t hosts) {
  bool relative = e.script[0] != '/';
  std::string where = relative ? fmt::format("{} in {}", e.script, e.workdir) : e.script;
  std::string state = f.get("script");
  std::string sha = f.get("script_sha256");
  if (relative && f.has("workdir") && !workdir_entered(f))
    return probe_result("script", CheckStatus::kSkip,
                        fmt::format("workdir {} unavailable", e.workdir));
  if (state == "missing")
    return probe_result("script", CheckStatus::kFail, fmt::format("{} not found", where));
  if (state == "notfile")
    return probe_result("script", CheckStatus::kFail, fmt::format("{} is a directory", where));
  if (state == "unreadable")
    return probe_result("script", CheckStatus::kFail, fmt::format("{} is not readable", where));
  if (state == "nohash")
    return probe_result("script", CheckStatus::kFail,
                        fmt::format("cannot checksum {}: no sha256sum, shasum or openssl", where));
  if (sha.empty()) return missing("script", f);
  if (sha == reference) {
    std::string against = local ? "the launcher's copy"
                                : fmt::format("{} of {} hosts; no launcher copy: {}", counts[sha],
                                              hosts, local_error);
    return probe_result("script", CheckStatus::kPass,
                        fmt::format("{}: sha256 {} same as {}", where, sha.substr(0, 16), against),
                        sha.substr(0, 8));
  }
  std::string against = local ? fmt::format("the launcher's {}", reference.substr(0, 16))
                              : fmt::format("{} on {} other hosts (no launcher copy)",
                                            reference.substr(0, 16), counts[reference]);
  return probe_result(
      "script", CheckStatus::kFail,
      fmt::format("{}: sha256 {} differs from {}", where, sha.substr(0, 16), against));
}

// Why gdb cannot take a native backtrace of the job's processes on the host ("" when it can).
std::string native_stack_trouble(const ProbeFacts& f) {
  if (f.get("stack_gdb").empty()) return "gdb (with timeout) is not installed";
  std::string scope = f.get("ptrace_scope");
  if (scope == "3" || ((scope == "1" || scope == "2") && f.get("uid") != "0"))
    return fmt::format("gdb may not attach (kernel.yama.ptrace_scope={})", scope);
  return "";
}

// Whether `msrun-ssh stack` gets Python stacks (faulthandler, in the run's interpreter) and
// native ones (gdb) on the host.
CheckResult stacks_check(const HostExpectation& e, const ProbeFacts& f) {
  if (!f.has("stack_gdb")) return missing("stacks", f);
  std::string no_gdb = native_stack_trouble(f);
  std::string gdb = no_gdb.empty() ? fmt::format("native stacks ({})", f.get("stack_gdb"))
                                   : "no native stacks: " + no_gdb;
  if (python_found(f))
    return probe_result(
        "stacks", CheckStatus::kPass,
        fmt::format("Python stacks (faulthandler on {}); {}", kStackSignalName, gdb),
        no_gdb.empty() ? "python+gdb" : "python");
  return probe_result("stacks", CheckStatus::kWarn,
                      fmt::format("no Python stacks (no working {}); {}{}", e.python, gdb,
                                  no_gdb.empty() ? "" : "; stack shows the /proc state only"));
}

}  // namespace

HostExpectation expectation_for(const Plan& plan, size_t h, const Options& o) {
  const HostPlan& hp = plan.hosts.at(h);
  HostExpectation e;
  e.address = host_key(hp.host);
  e.is_master = hp.is_master;
  e.processes = static_cast<int>(hp.processes.size());
  for (const auto& p : hp.processes) {
    if (p.role == Role::kWorker) {
      ++e.workers;
      if (std::optional<int> id = device_number(p.bind_key)) e.device_ids.push_back(*id);
    }
    add_unique(e.manual_cpus, p.cpus);
    add_unique(e.manual_numa, p.numa_nodes);
  }
  std::sort(e.device_ids.begin(), e.device_ids.end());
  BindRequest binding = binding_in_effect(o, hp.host);
  e.auto_bind_core = binding.core.mode == BindCore::Mode::kAuto;
  e.auto_bind_numa = binding.numa.mode == BindNuma::Mode::kAuto;
  e.env = hp.host.env;
  for (const auto& [n, v] : o.env) set_env(e.env, n, v);
  e.python = !o.python.empty() ? o.python : !hp.host.python.empty() ? hp.host.python : "python3";
  e.imports = o.imports;
  const std::string& s = o.task_script;
  bool none = s.empty();  // check without TASK_SCRIPT
  bool python_task = s.ends_with(".py") || s == "python" || s == "python3" || s == "pytest";
  e.python_required = none || python_task || !o.imports.empty();
  if (none)
    e.script_note = "no TASK_SCRIPT given";
  else if (s.ends_with(".py") || s.find('/') != std::string::npos)
    e.script = s;
  else
    e.script_note = fmt::format("TASK_SCRIPT \"{}\" is a program, not a file", s);
  e.workdir = hp.host.workdir;
  e.master_ip = plan.master_ip;
  e.master_port = plan.master_port;
  return e;
}

std::string probe_command(const HostExpectation& e) {
  std::vector<std::string> words{"env", "--"};
  for (const auto& [n, v] : e.env) words.push_back(fmt::format("{}={}", n, v));
  words.insert(words.end(), {"/bin/sh", "-c", std::string(remote::kCheckProbeSh), "msrun-ssh-check",
                             e.workdir, e.python, e.script, e.master_ip});
  words.insert(words.end(), e.imports.begin(), e.imports.end());
  return "exec " + shell_join(words);
}

bool ProbeFacts::has(std::string_view key) const {
  return std::any_of(values.begin(), values.end(), [&](const auto& kv) { return kv.first == key; });
}

std::string ProbeFacts::get(std::string_view key) const {
  for (const auto& [k, v] : values)
    if (k == key) return v;
  return "";
}

std::vector<std::string> ProbeFacts::all(std::string_view key) const {
  std::vector<std::string> out;
  for (const auto& [k, v] : values)
    if (k == key) out.push_back(v);
  return out;
}

ProbeFacts parse_probe(std::string_view output) {
  ProbeFacts facts;
  size_t nul = output.find('\0');
  if (nul != std::string_view::npos) output = output.substr(0, nul);
  for (std::string_view line : split_lines(output)) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t eq = line.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    std::string_view key = line.substr(0, eq);
    // Keys are [a-z0-9_]: anything else is noise from a login script, not a probe line.
    if (key.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string_view::npos)
      continue;
    facts.values.emplace_back(std::string(key), std::string(line.substr(eq + 1)));
  }
  return facts;
}

std::optional<double> parse_remote_time(std::string_view text, bool* whole_seconds) {
  size_t dot = text.find_first_of(".,");  // bash's $EPOCHREALTIME uses the locale's separator
  std::string_view secs = text.substr(0, dot);
  std::string_view frac = dot == std::string_view::npos ? "" : text.substr(dot + 1);
  if (secs.empty() || secs.size() > 12 || secs.find_first_not_of("0123456789") != secs.npos)
    return std::nullopt;
  double t = std::strtod(std::string(secs).c_str(), nullptr);
  bool digits = !frac.empty() && frac.find_first_not_of("0123456789") == frac.npos;
  if (digits) t += std::strtod(("0." + std::string(frac)).c_str(), nullptr);
  if (whole_seconds) *whole_seconds = !digits;
  return t;
}

std::vector<CheckResult> evaluate_probe(const HostExpectation& e, const ProbeFacts& f,
                                        const ClockSample& clock) {
  std::vector<CheckResult> out{os_check(f), cpus_check(e, f), numa_check(e, f), devices_check(e, f),
                               python_check(e, f)};
  for (const auto& m : e.imports) out.push_back(import_check(e, f, m));
  out.push_back(workdir_check(e, f));
  out.push_back(clock_check(f, clock));
  out.push_back(disk_check(e, f));
  out.push_back(route_check(e, f));
  out.push_back(stacks_check(e, f));
  return out;
}

std::vector<CheckResult> script_checks(const std::vector<HostExpectation>& es,
                                       const std::vector<const ProbeFacts*>& facts,
                                       const std::optional<std::string>& local_sha,
                                       const std::string& local_error) {
  // The reference: the launcher's copy, else the checksum most hosts have.
  std::map<std::string, int> counts;
  for (const auto* f : facts)
    if (f && f->has("script_sha256")) ++counts[f->get("script_sha256")];
  std::string reference = local_sha.value_or("");
  if (!local_sha)
    for (const auto& [sha, n] : counts)
      if (reference.empty() || n > counts[reference]) reference = sha;
  std::vector<CheckResult> out;
  for (size_t i = 0; i < es.size(); ++i) {
    const ProbeFacts* f = i < facts.size() ? facts[i] : nullptr;
    if (es[i].script.empty())
      out.push_back(probe_result("script", CheckStatus::kSkip, es[i].script_note));
    else if (!f)
      out.push_back(probe_result("script", CheckStatus::kSkip, "host not probed"));
    else
      out.push_back(script_check(es[i], *f, reference, counts, local_sha.has_value(), local_error,
                                 es.size()));
  }
  return out;
}

void compare_hosts(CheckReport& report) {
  std::map<std::string, int> counts;
  for (const auto& h : report.hosts)
    if (const CheckResult* c = h.find("python"); c && c->status == CheckStatus::kPass)
      ++counts[c->value];
  if (counts.size() < 2) return;
  std::string majority;
  for (const auto& [v, n] : counts)
    if (majority.empty() || n > counts[majority]) majority = v;
  for (auto& h : report.hosts)
    if (CheckResult* c = h.find("python");
        c && c->status == CheckStatus::kPass && c->value != majority) {
      c->status = CheckStatus::kWarn;
      c->detail += fmt::format(": differs from {} on {} of {} hosts", majority, counts[majority],
                               report.hosts.size());
    }
}

void validate_imports(const std::vector<std::string>& imports) {
  for (const auto& m : imports) {
    bool ok = !m.empty();
    bool start = true;
    for (char c : m) {
      bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
      bool digit = c >= '0' && c <= '9';
      if (c == '.') {
        ok = ok && !start;
        start = true;
      } else {
        ok = ok && (alpha || (digit && !start));
        start = false;
      }
    }
    if (!ok || start)
      throw InputError(
          fmt::format("--import={}: not a Python module name (want e.g. "
                      "\"numpy\" or \"mindspore.nn\")",
                      m));
  }
}

}  // namespace msrun_ssh
