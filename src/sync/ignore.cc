// Excludes in gitignore syntax (sync.h): each pattern component is matched by fnmatch(3); `**`
// components and anchoring are handled here.
#include <fmt/format.h>
#include <fnmatch.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "msrun_ssh/base.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/sync.h"

namespace msrun_ssh {
namespace {

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string_view::npos) slash = path.size();
    if (slash > pos) parts.emplace_back(path.substr(pos, slash - pos));
    pos = slash + 1;
  }
  return parts;
}

bool glob(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

// Pattern components [pi..] against path components [si..]; "**" matches any number of them.
bool match_parts(const std::vector<std::string>& pat, size_t pi, const std::vector<std::string>& s,
                 size_t si) {
  for (; pi < pat.size(); ++pi, ++si) {
    if (pat[pi] == "**" && pi + 1 == pat.size()) return si < s.size();  // "a/**": inside a
    if (pat[pi] == "**") {
      for (size_t k = si; k <= s.size(); ++k)
        if (match_parts(pat, pi + 1, s, k)) return true;
      return false;
    }
    if (si >= s.size() || !glob(pat[pi], s[si])) return false;
  }
  return si == s.size();
}

// Drops trailing blanks unless escaped ("a\ " keeps one blank).
std::string_view trim_trailing(std::string_view line) {
  while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) {
    size_t backslashes = 0;
    for (size_t i = line.size() - 1; i > 0 && line[i - 1] == '\\'; --i) ++backslashes;
    if (backslashes % 2 == 1) break;
    line.remove_suffix(1);
  }
  return line;
}

}  // namespace

bool IgnoreRules::add(std::string_view line) {
  line = trim_trailing(line);
  if (line.empty() || line[0] == '#') return false;
  Rule r;
  if (line[0] == '!') {
    r.negated = true;
    line.remove_prefix(1);
  } else if (line.size() > 1 && line[0] == '\\' && (line[1] == '#' || line[1] == '!')) {
    line.remove_prefix(1);
  }
  if (!line.empty() && line.back() == '/') {
    r.dir_only = true;
    line.remove_suffix(1);
  }
  r.anchored = line.find('/') != std::string_view::npos;
  if (r.anchored) {
    r.parts = split_path(line);
    if (r.parts.empty()) return false;
  } else {
    if (line.empty()) return false;
    r.name = std::string(line);
  }
  rules_.push_back(std::move(r));
  return true;
}

void IgnoreRules::add_text(std::string_view text) {
  for (std::string_view line : split_lines(text)) add(line);
}

bool IgnoreRules::matches(std::string_view path, bool is_dir) const {
  std::vector<std::string> parts = split_path(path);
  if (parts.empty()) return false;
  bool excluded = false;
  for (const Rule& r : rules_) {
    if (r.dir_only && !is_dir) continue;
    bool hit = r.anchored ? match_parts(r.parts, 0, parts, 0) : glob(r.name, parts.back());
    if (hit) excluded = !r.negated;
  }
  return excluded;
}

bool IgnoreRules::excluded(std::string_view path, bool is_dir) const {
  for (size_t slash = path.find('/'); slash != std::string_view::npos;
       slash = path.find('/', slash + 1))
    if (slash > 0 && matches(path.substr(0, slash), true)) return true;
  return matches(path, is_dir);
}

IgnoreRules sync_rules(const std::string& dir, const std::vector<std::string>& extra,
                       const std::vector<std::string>& first) {
  IgnoreRules rules;
  for (const char* p : kDefaultExcludes) rules.add(p);
  for (const auto& p : first) rules.add(p);
  std::string path = dir + "/" + kIgnoreFile;
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) throw InputError(fmt::format("cannot read {}", path));
    rules.add_text(text.str());
  }
  for (const auto& p : extra) rules.add(p);
  return rules;
}

}  // namespace msrun_ssh
