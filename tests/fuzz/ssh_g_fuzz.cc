// Fuzzes the readers of OpenSSH's answer (src/ssh/ssh_config.cc): parse_ssh_g on `ssh -G`'s text,
// and, from the same bytes, expand_ssh_tokens and proxy_jump_command.
//
// Properties (ssh_config.h's promises):
//  - parse_ssh_g returns or throws std::runtime_error, nothing else; what it returns has a
//    hostname, a port in 1..65535, and as many identity files as the text has identityfile lines
//    (in their order);
//  - expand_ssh_tokens returns or throws std::runtime_error; a value without '%' and not starting
//    with "~/" comes back unchanged;
//  - proxy_jump_command returns or throws std::runtime_error; a command it returns ends with the
//    last hop, quoted, and holds no newline;
//  - match_words (a Match line's arguments) returns words that are not empty unless quoted, hold
//    no blank unless quoted and no quote or backslash; on a line without quotes or backslashes it
//    returns the blank-separated words.
// Findings: any crash or sanitizer report, any other exception, any property violation.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "msrun_ssh/base.h"
#include "msrun_ssh/ssh_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> identities;
  for (std::string_view rest = text; !rest.empty();) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.starts_with("identityfile ")) identities.emplace_back(line.substr(13));
  }
  try {
    msrun_ssh::SshHostConfig c = msrun_ssh::parse_ssh_g(text);
    FUZZ_CHECK(!c.hostname.empty(), "no hostname");
    FUZZ_CHECK(c.port >= 1 && c.port <= 65535, "port %d", c.port);
    FUZZ_CHECK(c.identity_files == identities, "%zu identity files, %zu lines",
               c.identity_files.size(), identities.size());
  } catch (const std::runtime_error&) {
  }
  msrun_ssh::SshHostConfig host;
  host.hostname = "h";
  msrun_ssh::SshTokens tokens{"/home/u", "u", "1000", "l.example", "n", &host};
  std::string value(text.substr(0, text.find('\n')));
  try {
    std::string out = msrun_ssh::expand_ssh_tokens(value, tokens);
    if (value.find('%') == std::string::npos && !value.starts_with("~/"))
      FUZZ_CHECK(out == value, "\"%s\" became \"%s\"", value.c_str(), out.c_str());
  } catch (const std::runtime_error&) {
  }
  if (auto words = msrun_ssh::match_words(value)) {
    for (const auto& w : *words)
      FUZZ_CHECK(w.find_first_of("\"'\\") == std::string::npos, "quote left in \"%s\"", w.c_str());
    if (value.find_first_of("\"'\\") == std::string::npos) {
      std::vector<std::string> plain;
      for (std::string_view w : msrun_ssh::split_words(value)) plain.emplace_back(w);
      FUZZ_CHECK(*words == plain, "\"%s\" split otherwise than at blanks", value.c_str());
    }
  } else {
    FUZZ_CHECK(value.find_first_of("\"'\\") != std::string::npos,
               "\"%s\" refused without a quote or backslash", value.c_str());
  }
  try {
    std::string cmd = msrun_ssh::proxy_jump_command(value, "/cfg");
    FUZZ_CHECK(cmd.find('\n') == std::string::npos, "newline in \"%s\"", cmd.c_str());
    FUZZ_CHECK(cmd.ends_with("'"), "unquoted last hop in \"%s\"", cmd.c_str());
  } catch (const std::runtime_error&) {
  }
  return 0;
}
