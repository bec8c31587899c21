// The ssh room's one reading of an ssh config file's lines, for the two readers that look at a
// config themselves: the grouping of names by their Host and Match lines (ssh_config.cc) and the
// check of what libssh would read otherwise than ssh (fallback_config.cc); and OpenSSH's pattern
// lists, which Host lines and known_hosts host fields (known_hosts.cc) share.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace msrun_ssh {

// One line of a config: its keyword (lower-cased, and as written) and its value (after the
// blanks or the "=" that separate them).
struct ConfigLine {
  const std::string& path;
  size_t number;          // from 1
  std::string_view text;  // the line, trimmed
  std::string keyword;
  std::string_view keyword_as_written;
  std::string_view value;
};

enum class ConfigWalk {
  kRead,     // every line visited
  kMissing,  // `path` itself could not be read (ssh skips such a file)
  kTooDeep,  // Includes nested deeper than 16 files
  kStopped,  // the visitor returned false
};

// The home directory of the user running the launcher ("" when unknown).
std::string config_home();

// Visits every line of config `path` but blank lines and comments, in ssh's order: the lines of
// the files an Include names (relative names under `base`, "~/" under the home directory, each
// pattern's matches in glob(3)'s order) where the Include stands, after the Include line itself
// (so that a visitor may refuse it first). A file an Include names that cannot be read is
// skipped, as ssh skips it. `visit` returning false stops the walk.
ConfigWalk walk_config(const std::string& path, const std::string& base,
                       const std::function<bool(const ConfigLine&)>& visit, int depth = 0);

// OpenSSH's pattern matching (match.c's match_pattern): "*" any run, "?" any one character,
// case-sensitive (callers lower-case both sides where ssh does).
bool glob_match(std::string_view s, std::string_view p);

// OpenSSH's pattern list (match_pattern_list): `name` against each pattern; a matching
// "!pattern" decides against, else any match decides for.
template <typename Patterns>
bool pattern_list_matches(std::string_view name, const Patterns& patterns) {
  bool any = false;
  for (std::string_view p : patterns) {
    bool negated = p.starts_with('!');
    if (!glob_match(name, negated ? p.substr(1) : p)) continue;
    if (negated) return false;
    any = true;
  }
  return any;
}

}  // namespace msrun_ssh
