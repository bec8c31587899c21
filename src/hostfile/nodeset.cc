#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <tuple>
#include <utility>

#include "msrun_ssh/error.h"
#include "msrun_ssh/hostfile.h"

namespace msrun_ssh {
namespace {

// Far above any real cluster, low enough that a typo cannot make the launcher plan for millions.
constexpr size_t kMaxNames = 16384;

// Expands the inside of one bracket group ("01-03,7") into its words, padding kept.
std::vector<std::string> expand_group(std::string_view body) {
  std::vector<std::string> out;
  if (body.empty()) throw InputError("empty node set \"[]\"");
  while (true) {
    size_t comma = body.find(',');
    std::string_view item = body.substr(0, comma);
    size_t dash = item.find('-');
    std::string_view lo_s = item.substr(0, dash);
    std::string_view hi_s = dash == std::string_view::npos ? lo_s : item.substr(dash + 1);
    auto number = [&](std::string_view s, unsigned long& v) {
      if (s.empty() || s.size() > 9) return false;
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      return ec == std::errc() && p == s.data() + s.size();
    };
    unsigned long lo = 0, hi = 0;
    if (!number(lo_s, lo) || !number(hi_s, hi))
      throw InputError(fmt::format("bad node set range \"{}\"", item));
    if (hi < lo) throw InputError(fmt::format("reversed node set range \"{}\"", item));
    if (hi - lo >= kMaxNames)
      throw InputError(fmt::format("node set range \"{}\" is too large", item));
    // Checked before expanding: many ranges of one group must not allocate past the limit first.
    if (out.size() + (hi - lo + 1) > kMaxNames)
      throw InputError(fmt::format("node set expands to more than {} names", kMaxNames));
    // Zero padding: "01-16" pads to the width of the first bound when it starts with 0.
    size_t width = lo_s.size() > 1 && lo_s[0] == '0' ? lo_s.size() : 0;
    for (unsigned long v = lo; v <= hi; ++v) out.push_back(fmt::format("{:0{}}", v, width));
    if (comma == std::string_view::npos) break;
    body = body.substr(comma + 1);
  }
  return out;
}

}  // namespace

std::vector<std::string> expand_nodeset(std::string_view pattern) {
  // The pattern as literal text each followed by a group of two or more words (a group of one is
  // literal text); the names are then built each once, in one pass. At most 14 groups of two or
  // more fit under kMaxNames, so the work is about the size of the names, however many segments.
  struct Segment {
    std::string literal;
    std::vector<std::string> words;  // empty: the trailing literal
  };
  std::vector<Segment> segments{Segment{}};
  size_t count = 1;
  size_t pos = 0;
  while (true) {
    size_t open = pattern.find('[', pos);
    size_t close_stray = pattern.find(']', pos);
    if (close_stray != std::string_view::npos && close_stray < open)
      throw InputError("unmatched \"]\" in node set");
    segments.back().literal += pattern.substr(pos, open - pos);
    if (open == std::string_view::npos) break;
    size_t close = pattern.find(']', open);
    if (close == std::string_view::npos) throw InputError("unmatched \"[\" in node set");
    std::string_view body = pattern.substr(open + 1, close - open - 1);
    if (body.find('[') != std::string_view::npos) throw InputError("nested \"[\" in node set");
    std::vector<std::string> words = expand_group(body);
    if (count * words.size() > kMaxNames)
      throw InputError(fmt::format("node set expands to more than {} names", kMaxNames));
    count *= words.size();
    if (words.size() == 1) {
      segments.back().literal += words[0];
    } else {
      segments.back().words = std::move(words);
      segments.emplace_back();
    }
    pos = close + 1;
  }
  if (pattern.empty()) throw InputError("empty host name");
  // Left to right, the last group varying fastest: "a[1-2]b[1-2]" is a1b1, a1b2, a2b1, a2b2.
  std::vector<std::string> names;
  names.reserve(count);
  std::vector<size_t> at(segments.size(), 0);
  for (size_t n = 0; n < count; ++n) {
    std::string name;
    for (size_t i = 0; i < segments.size(); ++i) {
      name += segments[i].literal;
      if (!segments[i].words.empty()) name += segments[i].words[at[i]];
    }
    names.push_back(std::move(name));
    for (size_t i = segments.size(); i-- > 0;) {
      if (segments[i].words.empty()) continue;
      if (++at[i] < segments[i].words.size()) break;
      at[i] = 0;
    }
  }
  return names;
}

namespace {

// A name split around its last run of digits: "node07" -> {"node", "07", ""}.
struct NameParts {
  std::string head, digits, tail;
};

NameParts split_last_number(const std::string& name) {
  size_t end = name.find_last_of("0123456789");
  if (end == std::string::npos) return {name, "", ""};
  size_t begin = end;
  while (begin > 0 && name[begin - 1] >= '0' && name[begin - 1] <= '9') --begin;
  return {name.substr(0, begin), name.substr(begin, end + 1 - begin), name.substr(end + 1)};
}

// "1","2","3","7" (sorted by value) -> "1-3,7"; zero-padded words keep their width.
std::string fold_numbers(std::vector<std::string> words) {
  std::sort(words.begin(), words.end(), [](const std::string& a, const std::string& b) {
    return std::tuple(a.size(), a) < std::tuple(b.size(), b);
  });
  words.erase(std::unique(words.begin(), words.end()), words.end());
  auto value = [](const std::string& w) { return std::stoull(w.size() > 18 ? "0" : w); };
  std::string out;
  for (size_t i = 0; i < words.size();) {
    size_t j = i;
    // "09"-"10" and "9"-"10" are ranges; "9" then "010" is not (the padding would change).
    auto next_of = [&](const std::string& a, const std::string& b) {
      bool padded = b.size() > 1 && b[0] == '0';
      return a.size() <= 18 && b.size() <= 18 && (a.size() == b.size() || !padded) &&
             value(b) == value(a) + 1;
    };
    while (j + 1 < words.size() && next_of(words[j], words[j + 1])) ++j;
    if (!out.empty()) out += ',';
    out += words[i];
    if (j > i) out += "-" + words[j];
    i = j + 1;
  }
  return out;
}

}  // namespace

std::string fold_nodeset(const std::vector<std::string>& names) {
  // Names that differ only in their last number fold together.
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> groups;
  std::vector<std::string> plain;  // names without a number
  for (const auto& n : names) {
    NameParts p = split_last_number(n);
    if (p.digits.empty())
      plain.push_back(n);
    else
      groups[{p.head, p.tail}].push_back(p.digits);
  }
  std::sort(plain.begin(), plain.end());
  plain.erase(std::unique(plain.begin(), plain.end()), plain.end());
  std::string out;
  for (const auto& n : plain) {
    if (!out.empty()) out += ',';
    out += n;
  }
  for (auto& [key, numbers] : groups) {
    const auto& [head, tail] = key;
    if (!out.empty()) out += ',';
    std::string folded = fold_numbers(numbers);
    bool one = folded.find_first_of(",-") == std::string::npos;
    out += head;
    out += one ? folded : fmt::format("[{}]", folded);
    out += tail;
  }
  return out;
}

}  // namespace msrun_ssh
