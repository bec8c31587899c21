// Fuzzes the binding parsers of src/plan/binding.cc with the same input three ways:
//  - parse_bind_core(text): booleans or a JSON object of CPU-range lists;
//  - parse_bind_numa(text): booleans or a JSON object of NUMA ids (never the file form: inputs
//    whose trimmed text ends in ".json" are skipped, the fuzzer must not read files);
//  - parse_cpu_list(text) and format_cpu_list: the result is sorted, unique, within 0..65535, and
//    format -> parse gives the same list back (and formatting again the same text).
//
// Findings: any crash or sanitizer report; any exception other than InputError; an InputError
// that does not start with the `what` it was given; results breaking binding.h's promises.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "msrun_ssh/binding.h"
#include "msrun_ssh/error.h"

namespace {

using msrun_ssh::InputError;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool is_bool_word(std::string_view s) {
  bool b = false;
  return msrun_ssh::parse_bool_word(s, b);
}

bool valid_key(const std::string& key) {
  try {
    msrun_ssh::validate_bind_key(key, "check");
    return true;
  } catch (const InputError&) {
    return false;
  }
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// parse_cpu_list, with InputError as nullopt-like `ok = false`.
std::vector<int> cpu_list(std::string_view text, bool& ok) {
  try {
    ok = true;
    return msrun_ssh::parse_cpu_list(text, "--cpus");
  } catch (const InputError& e) {
    FUZZ_CHECK(starts_with(e.what(), "--cpus: "), "message without its what: %s", e.what());
    ok = false;
    return {};
  }
}

void check_cpu_list(std::string_view text) {
  bool ok = false;
  std::vector<int> cpus = cpu_list(text, ok);
  if (!ok) return;
  FUZZ_CHECK(!cpus.empty(), "empty CPU list accepted");
  for (size_t i = 0; i < cpus.size(); ++i) {
    FUZZ_CHECK(cpus[i] >= 0 && cpus[i] <= 65535, "CPU %d", cpus[i]);
    if (i > 0) FUZZ_CHECK(cpus[i - 1] < cpus[i], "not sorted/unique at %zu", i);
  }
  std::string formatted = msrun_ssh::format_cpu_list(cpus);
  bool again_ok = false;
  std::vector<int> again = cpu_list(formatted, again_ok);
  FUZZ_CHECK(again_ok, "format_cpu_list gave an unparsable \"%s\"", formatted.c_str());
  FUZZ_CHECK(again == cpus, "\"%s\" does not parse back to the same %zu CPUs", formatted.c_str(),
             cpus.size());
  FUZZ_CHECK(msrun_ssh::format_cpu_list(again) == formatted, "formatting is not stable: \"%s\"",
             formatted.c_str());
}

void check_bind_core(std::string_view text) {
  msrun_ssh::BindCore spec;
  try {
    spec = msrun_ssh::parse_bind_core(text, "--bind_core");
  } catch (const InputError& e) {
    FUZZ_CHECK(starts_with(e.what(), "--bind_core"), "message without its what: %s", e.what());
    return;
  }
  using Mode = msrun_ssh::BindCore::Mode;
  FUZZ_CHECK(spec.mode != Mode::kUnset, "bind_core parsed to kUnset");
  FUZZ_CHECK((spec.mode != Mode::kManual) == is_bool_word(trim(text)),
             "mode %d for a %sboolean word", static_cast<int>(spec.mode),
             is_bool_word(trim(text)) ? "" : "non-");
  if (spec.mode != Mode::kManual) {
    FUZZ_CHECK(spec.ranges.empty(), "ranges outside manual mode");
    return;
  }
  for (const auto& [key, ranges] : spec.ranges) {
    FUZZ_CHECK(valid_key(key), "key \"%s\" accepted", key.c_str());
    FUZZ_CHECK(!ranges.empty(), "key \"%s\" with no ranges", key.c_str());
    for (const auto& r : ranges) {
      bool ok = false;
      cpu_list(r, ok);
      FUZZ_CHECK(ok, "range \"%s\" of \"%s\" accepted", r.c_str(), key.c_str());
    }
  }
}

void check_bind_numa(std::string_view text) {
  if (trim(text).size() >= 5 && trim(text).substr(trim(text).size() - 5) == ".json") return;
  msrun_ssh::BindNuma spec;
  try {
    spec = msrun_ssh::parse_bind_numa(text, "--bind_numa");
  } catch (const InputError& e) {
    FUZZ_CHECK(starts_with(e.what(), "--bind_numa"), "message without its what: %s", e.what());
    return;
  }
  using Mode = msrun_ssh::BindNuma::Mode;
  FUZZ_CHECK(spec.mode != Mode::kUnset, "bind_numa parsed to kUnset");
  FUZZ_CHECK((spec.mode != Mode::kManual) == is_bool_word(trim(text)),
             "mode %d for a %sboolean word", static_cast<int>(spec.mode),
             is_bool_word(trim(text)) ? "" : "non-");
  if (spec.mode != Mode::kManual) {
    FUZZ_CHECK(spec.nodes.empty(), "nodes outside manual mode");
    return;
  }
  for (const auto& [key, nodes] : spec.nodes) {
    FUZZ_CHECK(valid_key(key), "key \"%s\" accepted", key.c_str());
    FUZZ_CHECK(!nodes.empty(), "key \"%s\" with no nodes", key.c_str());
    for (int n : nodes) FUZZ_CHECK(n >= 0 && n <= 4095, "NUMA node %d", n);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    check_bind_core(text);
    check_bind_numa(text);
    check_cpu_list(text);
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "unexpected exception: %s", e.what());
  }
  return 0;
}
