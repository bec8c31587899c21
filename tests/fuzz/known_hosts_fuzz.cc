// Fuzzes KnownHostsIndex (src/ssh/known_hosts.cc), the known_hosts narrowing of the SSH pool.
// Input: the first line is the host to look up ("name" or "name:port"), the rest is the file.
//
// Properties, from ssh.h's promises and from the safety argument behind them (narrowing may hand
// a session too many lines, never too few of those libssh could match):
//  - every handed line is a line of the file (its tabs as spaces: libssh splits at spaces only),
//    in file order, none a comment or blank line;
//  - every line that names the host verbatim in its comma-separated host list (port 22: "name";
//    otherwise "[name]:port" or "name") is handed, whatever its case;
//  - every marker line (@...) is handed to every host; a line whose host list holds a wildcard or
//    a negation is handed exactly when its patterns match the name looked up, as ssh matches them
//    (known_hosts_patterns_match);
//  - the same lookup twice gives the same lines;
//  - under a HostKeyAlias (named_only): every handed line is a file line, and every line whose
//    host patterns match the name (known_hosts_patterns_match) is handed; a plain name matches
//    itself as a pattern;
//  - revoking_line names an @revoked line of the file holding the key it was asked for.
// Findings: any crash or sanitizer report, any exception, any property violation.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "msrun_ssh/ssh.h"

namespace {

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    out.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A file line as it is handed: tabs as spaces.
std::string handed(std::string_view line) {
  std::string out(line);
  std::replace(out.begin(), out.end(), '\t', ' ');
  return out;
}

std::string_view trim_left(std::string_view s) {
  size_t start = s.find_first_not_of(" \t\r");
  return start == std::string_view::npos ? std::string_view() : s.substr(start);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  size_t nl = input.find('\n');
  if (nl == std::string_view::npos || nl == 0 || nl > 64) return 0;
  std::string_view first = input.substr(0, nl), file = input.substr(nl + 1);
  std::string host(first);
  int port = 22;
  if (size_t colon = first.rfind(':'); colon != std::string_view::npos && colon > 0) {
    std::string_view digits = first.substr(colon + 1);
    if (digits.empty() || digits.size() > 5 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return 0;
    port = std::stoi(std::string(digits));
    host = std::string(first.substr(0, colon));
  }
  if (host.find_first_of(" \t\r,") != std::string::npos) return 0;

  msrun_ssh::KnownHostsIndex index(file);
  std::string got = index.lines_for(host, port);
  FUZZ_CHECK(got == index.lines_for(host, port), "two lookups of %s differ", host.c_str());
  FUZZ_CHECK(got.empty() || got.back() == '\n', "output does not end in a newline");

  std::vector<std::string_view> in = lines_of(file), out = lines_of(got);
  if (!got.empty() && out.back().empty()) out.pop_back();
  std::vector<std::string> in_handed;
  for (std::string_view line : in) in_handed.push_back(handed(line));
  // Handed lines are file lines, in order.
  size_t at = 0;
  for (std::string_view line : out) {
    while (at < in.size() && in_handed[at] != line) ++at;
    FUZZ_CHECK(at < in.size(), "handed line not in the file (or out of order): %.*s",
               static_cast<int>(line.size()), line.data());
    std::string_view body = trim_left(line);
    FUZZ_CHECK(!body.empty() && body.front() != '#', "comment or blank line handed");
    ++at;
  }
  // Lines that must be handed, and pattern lines that must not.
  std::string looked_up =
      port == 22 ? lower(host) : lower("[" + host + "]:" + std::to_string(port));
  std::vector<std::string> names{lower(host)};
  if (port != 22) names.push_back(looked_up);
  for (size_t i = 0; i < in.size(); ++i) {
    std::string_view line = in[i];
    std::string_view body = trim_left(line);
    if (body.empty() || body.front() == '#') continue;
    size_t end = body.find_first_of(" \t");
    if (end == std::string_view::npos || trim_left(body.substr(end)).empty()) continue;
    std::string_view hosts = body.substr(0, end);
    const bool patterned =
        hosts.front() != '@' && hosts.find_first_of("*?!") != std::string_view::npos;
    bool must = hosts.front() == '@';
    if (patterned) {
      must = msrun_ssh::known_hosts_patterns_match(hosts, looked_up);
      // Not handed when it does not match (a plain name it also holds aside: the same line).
      bool plain_too = false;
      for (const auto& n : names)
        for (size_t start = 0; start <= hosts.size() && !plain_too;) {
          size_t comma = hosts.find(',', start);
          plain_too =
              lower(hosts.substr(start, comma == hosts.npos ? hosts.npos : comma - start)) == n;
          if (comma == std::string_view::npos) break;
          start = comma + 1;
        }
      if (!must && !plain_too)
        FUZZ_CHECK(std::find(out.begin(), out.end(), in_handed[i]) == out.end(),
                   "pattern line handed to %s (port %d), which it does not match: %.*s",
                   host.c_str(), port, static_cast<int>(line.size()), line.data());
    }
    if (!must && !patterned && !hosts.starts_with("|1|")) {
      for (size_t start = 0; start <= hosts.size() && !must;) {
        size_t comma = hosts.find(',', start);
        std::string name =
            lower(hosts.substr(start, comma == hosts.npos ? hosts.npos : comma - start));
        must = std::find(names.begin(), names.end(), name) != names.end();
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
    }
    if (must)
      FUZZ_CHECK(std::find(out.begin(), out.end(), in_handed[i]) != out.end(),
                 "line for %s (port %d) not handed: %.*s", host.c_str(), port,
                 static_cast<int>(line.size()), line.data());
  }
  // Under an alias: the pattern lines that match it, as ssh matches them.
  std::string named_text = index.lines_for(host, port, true);
  std::vector<std::string_view> named = lines_of(named_text);
  for (std::string_view line : named)
    FUZZ_CHECK(
        line.empty() || std::find(in_handed.begin(), in_handed.end(), line) != in_handed.end(),
        "named_only handed a line not in the file: %.*s", static_cast<int>(line.size()),
        line.data());
  if (host.find_first_of("*?!") == std::string::npos && !host.empty())
    FUZZ_CHECK(msrun_ssh::known_hosts_patterns_match(host, lower(host)), "%s does not match itself",
               host.c_str());
  std::string blob;
  for (std::string_view line : in) {
    std::string_view body = trim_left(line);
    if (!body.starts_with("@revoked")) continue;
    size_t k = body.find_first_of(" \t");
    for (int field = 0; field < 2 && k != std::string_view::npos; ++field) {
      body = trim_left(body.substr(k));
      k = body.find_first_of(" \t");
    }
    if (k != std::string_view::npos) blob = std::string(trim_left(body.substr(k)));
    if (size_t sp = blob.find_first_of(" \t\r"); sp != std::string::npos) blob.resize(sp);
    break;
  }
  if (!blob.empty()) {
    size_t revoked = msrun_ssh::revoking_line(file, looked_up, blob);
    FUZZ_CHECK(revoked <= in.size(), "revoking_line %zu past the file's %zu lines", revoked,
               in.size());
    if (revoked > 0) {
      std::string_view line = in[revoked - 1];
      FUZZ_CHECK(line.find("@revoked") != std::string_view::npos &&
                     line.find(blob) != std::string_view::npos,
                 "revoking_line names a line that does not revoke the key: %.*s",
                 static_cast<int>(line.size()), line.data());
    }
  }
  (void)msrun_ssh::key_listed(file, "AAAA");
  return 0;
}
