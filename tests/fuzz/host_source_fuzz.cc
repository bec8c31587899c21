// Fuzzes the host sources' parsers (src/hostfile/source.cc). The first byte picks the parser (its
// distance from '0', modulo 5: the seeds start with a digit), the rest is its input:
//
//   0  expand_slurm_counts   against a reference of the grammar  N | N "(x" M ")", comma-separated,
//                            N 0..1024, M 1..16384, at most 16384 counts
//   1  expand_node_list      names valid, unique, <= 16384; without brackets: the comma-separated
//                            words themselves, without the blanks around them
//   2  parse_pbs_nodefile    hosts in order of first appearance, slots = lines per host (1..1024),
//                            messages located "fuzz.nodes:"
//   3  slurm_allocation      SLURM_JOB_NODELIST = the input up to the first newline,
//                            SLURM_TASKS_PER_NODE = the rest (when there is a newline, with
//                            SLURM_NTASKS set): one count per host; messages name a SLURM_
//                            variable
//   4  parse_lsf_hosts       against a reference reading of "HOST SLOTS" pairs
//
// Findings: any crash or sanitizer report; any exception other than InputError; a result breaking
// the properties above.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "msrun_ssh/base.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/host_source.h"

namespace {

using msrun_ssh::Allocation;

constexpr size_t kMaxHosts = 16384;
constexpr long kMaxSlots = 1024;

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == s.npos ? s.npos : end - start));
    if (end == s.npos) return out;
    start = end + 1;
  }
}

// A decimal number of digits only, saturated at 10^12.
std::optional<long long> digits(std::string_view s) {
  if (s.empty()) return std::nullopt;
  long long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = std::min(v * 10 + (c - '0'), 1000000000000LL);
  }
  return v;
}

// The counts the grammar gives, or nullopt where expand_slurm_counts must throw.
std::optional<std::vector<int>> reference_counts(std::string_view text) {
  std::vector<int> out;
  for (std::string_view item : split(text, ',')) {
    std::string_view n = item, m = "1";
    if (size_t open = item.find("(x"); open != item.npos && item.ends_with(')')) {
      n = item.substr(0, open);
      m = item.substr(open + 2, item.size() - open - 3);
    }
    auto count = digits(n);
    auto times = digits(m);
    if (!count || !times || *count > kMaxSlots || *times < 1 ||
        *times > static_cast<long long>(kMaxHosts))
      return std::nullopt;
    if (out.size() + static_cast<size_t>(*times) > kMaxHosts) return std::nullopt;
    out.insert(out.end(), static_cast<size_t>(*times), static_cast<int>(*count));
  }
  return out;
}

void check_names(const std::vector<std::string>& names) {
  FUZZ_CHECK(!names.empty() && names.size() <= kMaxHosts, "%zu names", names.size());
  std::set<std::string> seen;
  for (const auto& n : names) {
    FUZZ_CHECK(!n.empty(), "empty name");
    for (char c : n)
      FUZZ_CHECK(fuzz::allowed_address_char(c), "name \"%s\" has byte 0x%02x", n.c_str(),
                 static_cast<unsigned char>(c));
    FUZZ_CHECK(seen.insert(n).second, "name \"%s\" twice", n.c_str());
  }
}

void check_allocation(const Allocation& a) {
  check_names(a.addresses);
  FUZZ_CHECK(a.slots.empty() || a.slots.size() == a.addresses.size(), "%zu slots for %zu hosts",
             a.slots.size(), a.addresses.size());
  FUZZ_CHECK(a.slots.empty() == a.slots_from.empty(), "slots_from \"%s\" with %zu slots",
             a.slots_from.c_str(), a.slots.size());
  for (int s : a.slots) FUZZ_CHECK(s >= 0 && s <= kMaxSlots, "slot count %d", s);
}

void fuzz_counts(std::string_view text) {
  auto want = reference_counts(text);
  try {
    std::vector<int> got = msrun_ssh::expand_slurm_counts(text);
    FUZZ_CHECK(want.has_value(), "accepted what the grammar refuses (%zu counts)", got.size());
    FUZZ_CHECK(got == *want, "%zu counts, expected %zu (or different values)", got.size(),
               want->size());
  } catch (const msrun_ssh::InputError& e) {
    FUZZ_CHECK(!want, "refused %zu valid counts: %s", want->size(), e.what());
  }
}

void fuzz_node_list(std::string_view text) {
  try {
    std::vector<std::string> names = msrun_ssh::expand_node_list(text);
    check_names(names);
    if (text.find_first_of("[]") == text.npos) {
      std::vector<std::string_view> words = split(text, ',');
      FUZZ_CHECK(words.size() == names.size(), "%zu names of %zu words", names.size(),
                 words.size());
      // Blanks around a word are dropped, as ClusterShell drops them.
      for (size_t i = 0; i < words.size(); ++i)
        FUZZ_CHECK(msrun_ssh::trim(words[i], " \t\n\r\v\f") == names[i], "name %zu is \"%s\"", i,
                   names[i].c_str());
    }
  } catch (const msrun_ssh::InputError&) {
  }
}

void fuzz_pbs(std::string_view text) {
  try {
    Allocation a = msrun_ssh::parse_pbs_nodefile(text, "fuzz.nodes");
    check_allocation(a);
    // The reference: non-blank lines trimmed, hosts in order of first appearance.
    std::vector<std::string> order;
    std::map<std::string, int> lines;
    for (std::string_view line : split(text, '\n')) {
      size_t b = line.find_first_not_of(" \t\r\v\f");
      if (b == line.npos) continue;
      std::string name(line.substr(b, line.find_last_not_of(" \t\r\v\f") + 1 - b));
      if (lines[name]++ == 0) order.push_back(name);
    }
    FUZZ_CHECK(a.addresses == order, "%zu hosts, expected %zu (or another order)",
               a.addresses.size(), order.size());
    for (size_t i = 0; i < order.size(); ++i)
      FUZZ_CHECK(a.slots[i] == lines[order[i]], "host %zu: %d slots, %d lines", i, a.slots[i],
                 lines[order[i]]);
  } catch (const msrun_ssh::InputError& e) {
    FUZZ_CHECK(std::string_view(e.what()).starts_with("fuzz.nodes:"), "not located: %s", e.what());
  }
}

void fuzz_slurm(std::string_view text) {
  size_t nl = text.find('\n');
  std::string list(text.substr(0, nl));
  std::optional<std::string> tasks;
  if (nl != text.npos) tasks = std::string(text.substr(nl + 1));
  msrun_ssh::GetEnv getenv = [&](const char* name) -> const char* {
    if (std::string_view(name) == "SLURM_JOB_NODELIST") return list.c_str();
    if (std::string_view(name) == "SLURM_TASKS_PER_NODE" && tasks) return tasks->c_str();
    // Tasks were asked for (else SLURM_TASKS_PER_NODE holds CPUs and counts no workers).
    if (std::string_view(name) == "SLURM_NTASKS" && tasks) return "1";
    return nullptr;
  };
  try {
    Allocation a = msrun_ssh::slurm_allocation(getenv);
    check_allocation(a);
    FUZZ_CHECK(a.slots.empty() == !tasks, "%zu slots with%s SLURM_TASKS_PER_NODE", a.slots.size(),
               tasks ? "" : "out");
    // C strings end at a NUL byte: compare with what the variables hold.
    if (tasks) {
      auto want = reference_counts(tasks->c_str());
      FUZZ_CHECK(want && *want == a.slots, "slots differ from the reference");
    }
  } catch (const msrun_ssh::InputError& e) {
    FUZZ_CHECK(std::string_view(e.what()).starts_with("SLURM_"), "no variable named: %s", e.what());
  }
}

void fuzz_lsf(std::string_view text) {
  // The reference: whitespace-separated words, read as pairs.
  std::istringstream in{std::string(text)};
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  try {
    Allocation a = msrun_ssh::parse_lsf_hosts(text);
    check_allocation(a);
    FUZZ_CHECK(words.size() == 2 * a.addresses.size(), "%zu words, %zu hosts", words.size(),
               a.addresses.size());
    for (size_t i = 0; i < a.addresses.size(); ++i) {
      FUZZ_CHECK(a.addresses[i] == words[2 * i], "host %zu is \"%s\"", i, a.addresses[i].c_str());
      auto n = digits(words[2 * i + 1]);
      FUZZ_CHECK(n && *n == a.slots[i] && *n >= 1, "host %zu: %d slots from \"%s\"", i, a.slots[i],
                 words[2 * i + 1].c_str());
    }
  } catch (const msrun_ssh::InputError& e) {
    FUZZ_CHECK(std::string_view(e.what()).starts_with("LSB_MCPU_HOSTS="), "no variable named: %s",
               e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (static_cast<unsigned char>(data[0] - '0') % 5) {
      case 0:
        fuzz_counts(text);
        break;
      case 1:
        fuzz_node_list(text);
        break;
      case 2:
        fuzz_pbs(text);
        break;
      case 3:
        fuzz_slurm(text);
        break;
      default:
        fuzz_lsf(text);
    }
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "unexpected exception: %s", e.what());
  }
  return 0;
}
