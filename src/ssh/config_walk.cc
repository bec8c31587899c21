// The lines of an ssh config and of the files it includes (config_walk.h).
#include "config_walk.h"

#include <fmt/format.h>
#include <glob.h>
#include <pwd.h>
#include <unistd.h>

#include <optional>
#include <vector>

#include "msrun_ssh/base.h"

namespace msrun_ssh {
namespace {

// The files a glob pattern names, in glob(3)'s order (none when it names none).
std::vector<std::string> glob_paths(const std::string& pattern) {
  std::vector<std::string> paths;
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  return paths;
}

// `value` up to a word that starts with '#' outside quotes: a comment, as OpenSSH splits its
// arguments ("Host a # was b" is the pattern a alone).
std::string_view without_comment(std::string_view value) {
  bool quoted = false;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] == '"') quoted = !quoted;
    if (value[i] == '#' && !quoted && (i == 0 || value[i - 1] == ' ' || value[i - 1] == '\t'))
      return trim(value.substr(0, i), " \t");
  }
  return value;
}

// A pattern of an Include: "~/" is the home, "~user/" that user's, a relative one under `base`.
std::string include_pattern(std::string_view word, const std::string& base) {
  if (word.starts_with("~/")) return config_home() + std::string(word.substr(1));
  if (word.starts_with('~')) {
    size_t slash = word.find('/');
    std::string user(word.substr(1, slash == std::string_view::npos ? word.npos : slash - 1));
    const passwd* pw = ::getpwnam(user.c_str());
    if (pw && pw->pw_dir)
      return pw->pw_dir + std::string(slash == std::string_view::npos ? "" : word.substr(slash));
  }
  if (word.starts_with('/')) return std::string(word);
  return fmt::format("{}/{}", base, word);
}

}  // namespace

std::string config_home() {
  const passwd* pw = ::getpwuid(::getuid());
  return pw && pw->pw_dir ? pw->pw_dir : "";
}

ConfigWalk walk_config(const std::string& path, const std::string& base,
                       const std::function<bool(const ConfigLine&)>& visit, int depth) {
  std::optional<std::string> text = read_whole_file(path);
  if (!text) return ConfigWalk::kMissing;
  if (depth > 16) return ConfigWalk::kTooDeep;
  size_t number = 0;
  for (std::string_view raw : split_lines(*text)) {
    ++number;
    std::string_view line = trim(raw, " \t\r");
    if (line.empty() || line.starts_with('#')) continue;
    size_t end = line.find_first_of(" \t=");
    std::string_view value = end == std::string_view::npos ? "" : trim(line.substr(end), " \t");
    if (value.starts_with('=')) value = trim(value.substr(1), " \t");
    value = without_comment(value);
    ConfigLine l{path, number, line, to_lower(line.substr(0, end)), line.substr(0, end), value};
    if (!visit(l)) return ConfigWalk::kStopped;
    if (l.keyword != "include") continue;
    for (std::string_view word : split_words(value)) {
      for (const std::string& included : glob_paths(include_pattern(word, base))) {
        ConfigWalk w = walk_config(included, base, visit, depth + 1);
        if (w != ConfigWalk::kRead && w != ConfigWalk::kMissing) return w;
      }
    }
  }
  return ConfigWalk::kRead;
}

bool glob_match(std::string_view s, std::string_view p) {
  size_t si = 0, pi = 0, star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
      ++si;
      ++pi;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

}  // namespace msrun_ssh
