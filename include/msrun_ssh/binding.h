// Binding requests: what the user asked for with --bind_core / --bind_numa or a host's
// `bind_core` / `bind_numa` key. Parsing only; the allocation itself lives in topology.h.
//
// Keys follow msrun: "scheduler" for the scheduler process and "device<N>" for the worker that
// drives physical device N (N taken from the host's ASCEND_RT_VISIBLE_DEVICES /
// CUDA_VISIBLE_DEVICES when set, else the worker's local index).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace msrun_ssh {

struct BindCore {
  enum class Mode { kUnset, kOff, kAuto, kManual };
  Mode mode = Mode::kUnset;
  // Manual mode: key -> CPU ranges as written ("0-11", "24"), each validated by parse_cpu_list;
  // none: that process is not bound (msrun's empty list).
  std::map<std::string, std::vector<std::string>> ranges;
  bool operator==(const BindCore&) const = default;
};

struct BindNuma {
  enum class Mode { kUnset, kOff, kAuto, kManual };
  Mode mode = Mode::kUnset;
  // Manual mode: key -> NUMA node ids.
  std::map<std::string, std::vector<int>> nodes;
  bool operator==(const BindNuma&) const = default;
};

// What one host is asked for: its bind_core and bind_numa.
struct BindRequest {
  BindCore core;
  BindNuma numa;
  bool operator==(const BindRequest&) const = default;
};

// The binding in effect on a host: bind_core and bind_numa each from the command line when it
// sets one (any mode but kUnset), else the host file's. The only place this rule is written.
BindRequest binding_in_effect(const BindRequest& command_line, const BindRequest& host_file);

// Parses a --bind_core value: a boolean word (True/False/true/false/1/0) or a JSON object
// {"scheduler": ["0-3"], "device0": ["4-9", "20-25"]}. Throws InputError naming `what` (the
// option or host the value came from) on any syntax error, unknown key or bad range.
BindCore parse_bind_core(std::string_view text, std::string_view what);

// Parses a --bind_numa value: a boolean word, a JSON object {"scheduler": 0, "device0": [0, 1]},
// or the path of a file (ending in .json) holding such an object. Throws InputError.
BindNuma parse_bind_numa(std::string_view text, std::string_view what);

// N of a bind key "device<N>" (N: 1 to 6 decimal digits), the physical device a worker drives;
// nullopt for anything else ("scheduler", "device", "device-1", "device1a", "device1234567").
std::optional<int> device_number(std::string_view key);

// Checks one key of a bind dict: "scheduler" or "device<N>" (device_number). Throws InputError
// naming `what` and the key.
void validate_bind_key(const std::string& key, std::string_view what);

// Parses a Linux CPU list ("0-3,8,10-11") into sorted, unique CPU ids. Throws InputError naming
// `what` on syntax errors, reversed ranges or ids above 65535.
std::vector<int> parse_cpu_list(std::string_view text, std::string_view what);

// Formats sorted CPU ids back into the compact list form ("0-3,8").
std::string format_cpu_list(const std::vector<int>& cpus);

// MSRUN_CPU_LIST's value in msrun's format: Python's str() of the list, "[4, 5, 6]", which
// MindSpore's set_cpu_affinity reads back with ast.literal_eval.
std::string msrun_cpu_list_value(const std::vector<int>& cpus);

// Parses a boolean word as msrun accepts it: True/False/true/false/1/0. Returns false from the
// function (and leaves `out` alone) for anything else.
bool parse_bool_word(std::string_view text, bool& out);

}  // namespace msrun_ssh
