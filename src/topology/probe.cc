// The remote topology probe: the command that prints a host's topology (src/remote/topology.sh),
// and its parsers.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <utility>

#include "msrun_ssh/base.h"
#include "msrun_ssh/binding.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/topology.h"
#include "remote/programs.h"

namespace msrun_ssh {
namespace {

constexpr std::string_view kWhat = "topology probe";

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::pair<std::string_view, std::string_view> split_line(std::string_view text) {
  size_t nl = text.find('\n');
  if (nl == std::string_view::npos) return {text, {}};
  return {text.substr(0, nl), text.substr(nl + 1)};
}

// The probe's output from its "allowed:" line on (whatever a login script printed before it is
// dropped).
std::string_view from_allowed_line(std::string_view text) {
  for (std::string_view rest = text; !rest.empty(); rest = split_line(rest).second)
    if (starts_with(rest, "allowed:")) return rest;
  std::string head(text.substr(0, 80));
  std::replace(head.begin(), head.end(), '\n', ' ');
  throw InputError(
      fmt::format("{}: no \"allowed:\" line in the output (it starts: \"{}\")", kWhat, head));
}

[[noreturn]] void bad_line(std::string_view line) {
  throw InputError(fmt::format("{}: bad line \"{}\"", kWhat, line));
}

int parse_int(std::string_view s, int base, std::string_view line) {
  s = trim(s, " \t\r");
  if (base == 16 && (starts_with(s, "0x") || starts_with(s, "0X"))) s.remove_prefix(2);
  bool negative = base == 10 && starts_with(s, "-");
  if (negative) s.remove_prefix(1);
  int value = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), value, base);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) bad_line(line);
  return negative ? -value : value;
}

std::vector<int> cpu_list(std::string_view text, std::string_view line) {
  if (trim(text, " \t\r").empty()) return {};
  return parse_cpu_list(text, fmt::format("{}: line \"{}\"", kWhat, line));
}

struct PciFacts {
  int vendor = 0, pci_class = 0, numa = -1;
};

// The facts of a sysfs dump, before they become a Topology.
struct SysfsFacts {
  std::vector<int> allowed, online;
  bool has_allowed = false;
  std::map<int, int> core_id, package_id;  // CPU -> id
  std::vector<NumaNode> nodes;
  std::map<std::string, PciFacts> pci;  // bus id -> facts
};

// "<prefix><N>/<rest>" -> N and rest, for cpuN/ and nodeN/ paths.
std::pair<int, std::string_view> numbered(std::string_view path, std::string_view prefix,
                                          std::string_view line) {
  size_t slash = path.find('/');
  if (!starts_with(path, prefix) || slash == std::string_view::npos) bad_line(line);
  return {parse_int(path.substr(prefix.size(), slash - prefix.size()), 10, line),
          path.substr(slash + 1)};
}

void parse_pci_file(SysfsFacts& f, std::string_view path, std::string_view value,
                    std::string_view line) {
  size_t slash = path.find('/');
  if (slash == std::string_view::npos) bad_line(line);
  std::string bus = to_lower(path.substr(0, slash));
  std::string_view file = path.substr(slash + 1);
  PciFacts& pci = f.pci[bus];
  if (file == "vendor")
    pci.vendor = parse_int(value, 16, line);
  else if (file == "class")
    pci.pci_class = parse_int(value, 16, line) >> 8;  // drop prog-if
  else if (file == "numa_node")
    pci.numa = parse_int(value, 10, line);
}

void parse_cpu_file(SysfsFacts& f, std::string_view path, std::string_view value,
                    std::string_view line) {
  if (path == "online") {
    f.online = cpu_list(value, line);
    return;
  }
  auto [cpu, file] = numbered(path, "cpu", line);
  if (file == "topology/core_id")
    f.core_id[cpu] = parse_int(value, 10, line);
  else if (file == "topology/physical_package_id")
    f.package_id[cpu] = parse_int(value, 10, line);
}

// One "PATH:VALUE" line of grep -H. Values never hold ':' but PCI bus ids in paths do.
void parse_sys_line(SysfsFacts& f, std::string_view line) {
  size_t colon = line.rfind(':');
  if (colon == std::string_view::npos) bad_line(line);
  std::string_view path = line.substr(0, colon), value = trim(line.substr(colon + 1), " \t\r");
  if (starts_with(path, "/sys/devices/system/cpu/")) {
    parse_cpu_file(f, path.substr(24), value, line);
  } else if (starts_with(path, "/sys/devices/system/node/")) {
    auto [node, file] = numbered(path.substr(25), "node", line);
    if (file == "cpulist") f.nodes.push_back(NumaNode{node, cpu_list(value, line)});
  } else if (starts_with(path, "/sys/bus/pci/devices/")) {
    parse_pci_file(f, path.substr(21), value, line);
  }
}

void parse_sysfs_line(SysfsFacts& f, std::string_view line) {
  line = trim(line, " \t\r");
  if (line.empty()) return;
  if (starts_with(line, "/sys/")) return parse_sys_line(f, line);
  size_t colon = line.find(':');
  std::string_view key = line.substr(0, colon);
  std::string_view value =
      colon == std::string_view::npos ? "" : trim(line.substr(colon + 1), " \t\r");
  if (key == "allowed") {
    f.allowed = cpu_list(value, line);
    f.has_allowed = true;
  } else if (key == "format") {
    if (value != "sysfs")
      throw InputError(fmt::format("{}: expected format sysfs, got \"{}\"", kWhat, value));
  } else {
    throw InputError(fmt::format("{}: unexpected line \"{}\"", kWhat, line));
  }
}

// Cores from the per-CPU ids; online CPUs without topology files are a core each.
std::vector<Core> cores_of(const SysfsFacts& f) {
  std::map<std::pair<int, int>, std::vector<int>> by_id;  // (package, core id) -> CPUs
  for (auto [cpu, core] : f.core_id) {
    auto pkg = f.package_id.find(cpu);
    by_id[{pkg == f.package_id.end() ? -1 : pkg->second, core}].push_back(cpu);
  }
  std::vector<Core> cores;
  cores.reserve(by_id.size() + f.online.size());
  for (auto& [key, cpus] : by_id) cores.push_back(Core{key.first, -1, std::move(cpus)});
  for (int cpu : f.online)
    if (!f.core_id.count(cpu)) cores.push_back(Core{-1, -1, {cpu}});
  return cores;
}

Topology topology_of(SysfsFacts f) {
  Topology t;
  t.source = "sysfs";
  t.cores = cores_of(f);
  t.numa_nodes = std::move(f.nodes);
  for (const auto& [bus, pci] : f.pci)
    if (std::string kind = device_kind(pci.vendor, pci.pci_class); !kind.empty())
      t.devices.push_back(Device{kind, bus, pci.vendor, pci.pci_class, pci.numa});
  t.allowed_cpus = f.has_allowed ? f.allowed : f.online;
  normalize_topology(t);
  if (t.allowed_cpus.empty())
    throw InputError(fmt::format("{}: no allowed CPU is online (allowed: {}, online: {})", kWhat,
                                 f.has_allowed ? format_cpu_list(f.allowed) : "not given",
                                 f.online.empty() ? "not given" : format_cpu_list(f.online)));
  return t;
}

// src/remote/topology.sh on one line: its lines, each a complete command, joined by "; ".
std::string one_line(std::string_view script) {
  std::string out;
  for (std::string_view rest = script; !rest.empty();) {
    auto [line, next] = split_line(rest);
    if (!line.empty()) {
      if (!out.empty()) out += "; ";
      out += line;
    }
    rest = next;
  }
  return out;
}

}  // namespace

std::string topology_probe_command() {
  return "sh -c " + shell_quote(one_line(remote::kTopologySh));
}

std::string binding_probe_command() {
  return "command -v taskset; command -v numactl; " + topology_probe_command();
}

bool probe_found_tool(std::string_view output, std::string_view tool) {
  for (std::string_view rest = output; !rest.empty();) {
    auto [line, next] = split_line(rest);
    if (starts_with(line, "allowed:")) return false;
    line = trim(line, " \t\r");
    if (line.size() > tool.size() && line.ends_with(tool) &&
        line[line.size() - tool.size() - 1] == '/')
      return true;
    rest = next;
  }
  return false;
}

Topology topology_from_sysfs_probe(std::string_view text) {
  SysfsFacts facts;
  for (std::string_view rest = text; !rest.empty();) {
    auto [line, next] = split_line(rest);
    parse_sysfs_line(facts, line);
    rest = next;
  }
  return topology_of(std::move(facts));
}

namespace {

// The leading decimal number of `s` (blanks before it skipped), or -1.
int leading_number(std::string_view s) {
  s = trim(s, " \t");
  int n = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end == s.data() || n < 0) return -1;
  if (end != s.data() + s.size() && *end != ' ' && *end != '\t') return -1;
  return n;
}

// "0000:C1:00.0" -> "0000:c1:00.0"; "" when `s` is no PCI bus id.
std::string pci_bus_id(std::string_view s) {
  s = trim(s, " \t");
  static constexpr std::string_view kShape = "hhhh:hh:hh.d";
  if (s.size() != kShape.size()) return "";
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
    bool ok = kShape[i] == 'h'   ? std::isxdigit(static_cast<unsigned char>(c)) != 0
              : kShape[i] == 'd' ? c >= '0' && c <= '7'
                                 : c == kShape[i];
    if (!ok) return "";
    out += c;
  }
  return out;
}

}  // namespace

std::vector<std::string> npu_logic_order_of(std::string_view probe_output) {
  std::map<std::pair<int, int>, std::string> bus;  // (NPU, chip) -> its Bus-Id
  std::map<int, std::pair<int, int>> chip_of;      // logic id -> (NPU, chip)
  int npu = -1;
  for (std::string_view rest = probe_output; !rest.empty();) {
    auto [line, next] = split_line(rest);
    rest = next;
    if (starts_with(line, "allowed:")) break;
    if (starts_with(line, "npu-info: ")) {
      // "| 0     910B2  | OK  | ..." (an NPU), then "| 0 [Phy-ID] | 0000:C1:00.0 | ..." (a chip).
      std::vector<std::string_view> cells = split_words(line.substr(10), "|");
      if (cells.size() < 2) continue;
      std::string id = pci_bus_id(cells[1]);
      int first = leading_number(cells[0]);  // the NPU's id, or the chip's
      if (!id.empty() && npu >= 0 && first >= 0)
        bus[{npu, first}] = id;
      else if (id.empty() && first >= 0)
        npu = first;
    } else if (starts_with(line, "npu-map: ")) {
      std::vector<std::string_view> words = split_words(line.substr(9));
      if (words.size() < 3) continue;
      int n = leading_number(words[0]), c = leading_number(words[1]), l = leading_number(words[2]);
      if (n >= 0 && c >= 0 && l >= 0) chip_of[l] = {n, c};
    }
  }
  std::vector<std::string> order;
  for (const auto& [logic, chip] : chip_of) {
    auto it = bus.find(chip);
    if (logic != static_cast<int>(order.size()) || it == bus.end() ||
        std::find(order.begin(), order.end(), it->second) != order.end())
      return {};
    order.push_back(it->second);
  }
  return order;
}

namespace {

// The topology a probe's output gives from its "allowed:" line on (`rest`).
Topology topology_after_allowed(std::string_view rest) {
  auto [allowed_line, after_allowed] = split_line(rest);
  auto [format_line, body] = split_line(after_allowed);
  std::string_view format = trim(format_line, " \t\r");
  if (format == "format: sysfs") return topology_from_sysfs_probe(rest);
  if (format != "format: hwloc-xml")
    throw InputError(
        fmt::format("{}: unknown format line \"{}\" (expected \"format: hwloc-xml\" "
                    "or \"format: sysfs\")",
                    kWhat, format));
  std::vector<int> allowed = cpu_list(trim(allowed_line.substr(8), " \t\r"), allowed_line);
  if (allowed.empty())
    throw InputError(fmt::format("{}: the \"allowed:\" line lists no CPU", kWhat));
  return topology_from_hwloc_xml(body, allowed);
}

}  // namespace

Topology parse_probe_output(std::string_view text) {
  Topology topo = topology_after_allowed(from_allowed_line(text));
  topo.npu_logic_order = npu_logic_order_of(text);
  return topo;
}

}  // namespace msrun_ssh
