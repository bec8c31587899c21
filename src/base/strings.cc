// The ground floor's strings, the shell's quoting and paths (base.h).
#include <fmt/format.h>

#include "msrun_ssh/base.h"

namespace msrun_ssh {

std::string_view trim(std::string_view s, std::string_view blanks) {
  const size_t first = s.find_first_not_of(blanks);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(blanks) - first + 1);
}

std::string shell_quote(std::string_view word) {
  std::string out = "'";
  for (char c : word) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  out += '\'';
  return out;
}

std::string absolute_path(const std::string& path, const std::string& cwd) {
  if (path.starts_with('/') || cwd.empty()) return path;
  return cwd.ends_with('/') ? cwd + path : fmt::format("{}/{}", cwd, path);
}

}  // namespace msrun_ssh
