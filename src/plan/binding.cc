#include "msrun_ssh/binding.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "msrun_ssh/base.h"
#include "msrun_ssh/error.h"

namespace msrun_ssh {
namespace {

constexpr int kMaxCpu = 65535;

bool parse_uint(std::string_view s, int& out) {
  if (s.empty() || s.size() > 6) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && out >= 0;
}

constexpr size_t kMaxSpecFile = 1 << 20;  // a --bind_numa file: far more than any machine needs

// `text` as an error quotes it: whole when it is at most `limit` bytes, else its start (cut
// between UTF-8 characters) and "...".
std::string shown(std::string_view text, size_t limit) {
  if (text.size() <= limit) return std::string(text);
  size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return std::string(text.substr(0, cut)) + "...";
}

// The JSON object `text` holds. An error names where the parser stopped and why, and quotes the
// text (its first 200 bytes) when `from_file` is false; a file is named in `what` instead.
nlohmann::json parse_json_object(std::string_view text, std::string_view what, bool from_file) {
  std::string quoted = from_file ? "" : ": " + shown(text, 200);
  // nlohmann's parser takes a NUL for the end of the text and would pass over what follows.
  if (size_t nul = text.find('\0'); nul != std::string_view::npos)
    throw InputError(
        fmt::format("{}: not valid JSON (a NUL byte at offset {}){}", what, nul, quoted));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ...; last read: 'TOKEN'",
    // and out_of_range for a number too large ("[json.exception.out_of_range.406] number overflow
    // parsing '1e999'"). The token may be the rest of the text (an unterminated string): cut.
    std::string_view why = e.what();
    if (size_t at = why.find("] "); why.starts_with('[') && at != std::string_view::npos)
      why.remove_prefix(at + 2);
    if (why.starts_with("parse error at ")) why.remove_prefix(15);
    throw InputError(
        fmt::format("{}: {} ({}){}", what,
                    from_file ? "not valid JSON" : "not a boolean (True/False) nor valid JSON",
                    shown(why, 160), quoted));
  }
  // Its type's name, not its text: dump() recurses as deep as the value nests.
  if (!j.is_object())
    throw InputError(fmt::format("{}: expected a JSON object, got {}{}{}", what,
                                 j.is_null()    ? ""
                                 : j.is_array() ? "an "
                                                : "a ",
                                 j.type_name(), quoted));
  return j;
}

}  // namespace

bool parse_bool_word(std::string_view text, bool& out) {
  // Any capitals, as msrun compares value.lower() with "true".
  const std::string word = to_lower(text);
  if (word == "true" || word == "1") {
    out = true;
    return true;
  }
  if (word == "false" || word == "0") {
    out = false;
    return true;
  }
  return false;
}

BindRequest binding_in_effect(const BindRequest& command_line, const BindRequest& host_file) {
  BindRequest out;
  out.core = command_line.core.mode != BindCore::Mode::kUnset ? command_line.core : host_file.core;
  out.numa = command_line.numa.mode != BindNuma::Mode::kUnset ? command_line.numa : host_file.numa;
  return out;
}

std::optional<int> device_number(std::string_view key) {
  constexpr std::string_view kPrefix = "device";
  if (key.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  std::string_view digits = key.substr(kPrefix.size());
  int n = 0;
  if (digits.find_first_not_of("0123456789") != std::string_view::npos || !parse_uint(digits, n))
    return std::nullopt;
  return n;
}

void validate_bind_key(const std::string& key, std::string_view what) {
  if (key == "scheduler" || device_number(key)) return;
  throw InputError(fmt::format(
      "{}: unknown key \"{}\" (expected \"scheduler\" or \"device<N>\", as msrun)", what, key));
}

std::vector<int> parse_cpu_list(std::string_view text, std::string_view what) {
  // A bitmap, not a list of every id: a long list of wide ranges costs time in its length only.
  std::vector<bool> seen;
  std::string_view rest = trim(text);
  if (rest.empty()) throw InputError(fmt::format("{}: empty CPU list", what));
  while (true) {
    size_t comma = rest.find(',');
    std::string_view item = trim(rest.substr(0, comma));
    size_t dash = item.find('-');
    int lo = 0, hi = 0;
    bool ok = dash == std::string_view::npos
                  ? parse_uint(item, lo) && ((hi = lo), true)
                  : parse_uint(item.substr(0, dash), lo) && parse_uint(item.substr(dash + 1), hi);
    if (!ok) throw InputError(fmt::format("{}: bad CPU range \"{}\"", what, item));
    if (hi < lo) throw InputError(fmt::format("{}: reversed CPU range \"{}\"", what, item));
    if (hi > kMaxCpu)
      throw InputError(fmt::format("{}: CPU id out of range in \"{}\"", what, item));
    if (seen.size() <= static_cast<size_t>(hi)) seen.resize(static_cast<size_t>(hi) + 1);
    std::fill(seen.begin() + lo, seen.begin() + hi + 1, true);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  std::vector<int> cpus;
  for (size_t c = 0; c < seen.size(); ++c)
    if (seen[c]) cpus.push_back(static_cast<int>(c));
  return cpus;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? std::to_string(cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

std::string msrun_cpu_list_value(const std::vector<int>& cpus) {
  return fmt::format("[{}]", fmt::join(cpus, ", "));
}

BindCore parse_bind_core(std::string_view text, std::string_view what) {
  BindCore spec;
  bool on = false;
  if (parse_bool_word(trim(text), on)) {
    spec.mode = on ? BindCore::Mode::kAuto : BindCore::Mode::kOff;
    return spec;
  }
  nlohmann::json j = parse_json_object(text, what, false);
  spec.mode = BindCore::Mode::kManual;
  for (auto& [key, value] : j.items()) {
    validate_bind_key(key, what);
    std::string where = fmt::format("{} key \"{}\"", what, key);
    if (!value.is_array())
      throw InputError(fmt::format("{}: expected a list of CPU ranges", where));
    spec.ranges[key];  // an empty list: that process is not bound (msrun skips it)
    for (const auto& range : value) {
      if (!range.is_string())
        throw InputError(fmt::format("{}: expected CPU ranges as strings like \"0-3\"", where));
      parse_cpu_list(range.get<std::string>(), where);
      spec.ranges[key].push_back(range.get<std::string>());
    }
  }
  return spec;
}

BindNuma parse_bind_numa(std::string_view text, std::string_view what) {
  BindNuma spec;
  bool on = false;
  if (parse_bool_word(trim(text), on)) {
    spec.mode = on ? BindNuma::Mode::kAuto : BindNuma::Mode::kOff;
    return spec;
  }
  std::string body(text);
  std::string where(what);
  const bool from_file = trim(text).ends_with(".json");
  if (from_file) {
    std::string path(trim(text)), why;
    std::optional<std::string> read = read_whole_file(path, kMaxSpecFile, why);
    if (!read) throw InputError(fmt::format("{}: cannot read file {}: {}", what, path, why));
    body = std::move(*read);
    where = fmt::format("{} (file {})", what, path);
  }
  nlohmann::json j = parse_json_object(body, where, from_file);
  spec.mode = BindNuma::Mode::kManual;
  for (auto& [name, value] : j.items()) {
    const std::string key = name;  // a structured binding cannot be captured by clang 14
    validate_bind_key(key, where);
    std::string at = fmt::format("{} key \"{}\"", where, key);
    auto add = [&](const nlohmann::json& v) {
      if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > 4095)
        throw InputError(fmt::format("{}: expected NUMA node ids (0-4095)", at));
      spec.nodes[key].push_back(v.get<int>());
    };
    if (value.is_array()) {
      if (value.empty()) throw InputError(fmt::format("{}: empty NUMA node list", at));
      for (const auto& v : value) add(v);
    } else {
      add(value);
    }
  }
  return spec;
}

}  // namespace msrun_ssh
