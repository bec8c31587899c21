// Fuzzes expand_nodeset (src/hostfile/nodeset.cc) against the promises of hostfile.h and against
// an independent reference expansion written here from the documented grammar (ClusterShell's
// node sets, docs/host-file.md):
//
//   pattern := set ("," set)*        the commas outside brackets; blanks around a set dropped
//   set     := (literal | "[" item ("," item)* "]")*      literal: no "[", "]" nor ","
//   item    := B NUM B | B NUM B "-" B NUM B ("/" B NUM B)?     B: blanks (space, tab, line ends)
//
// A lone NUM is any run of digits, kept as written; a range's NUMs have 1..19 digits, lo <= hi,
// a step >= 1 (default 1), and give lo, lo+step, ... <= hi, zero-padded to the width of lo when
// lo starts with '0' and has more than one digit. Groups multiply in Slurm's order within a set
// (Slurm's forms, digits after a group and digits before one as nodeset.cc says);
// sets follow each other; at most 16384 names in all; no set is empty.
//
// Findings: any crash or sanitizer report; any exception other than InputError; success with an
// empty name, more than 16384 names, or a name holding a bracket; success/failure or names that
// differ from the reference.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/hostfile.h"

namespace {

constexpr size_t kMaxNames = 16384;
constexpr size_t kMaxCompared = 5000;         // names compared one by one (else count, first, last)
constexpr size_t kMaxScannedBytes = 1 << 20;  // names scanned one by one (else only those compared)

struct Item {
  std::string lone;  // a lone number, as written; else the range below
  uint64_t lo = 0, step = 1, count = 1;
  size_t width = 0;
  bool stepped = false, uneven = false, blank_ends_bound = false;
};
struct Segment {
  std::string literal;      // before the group
  std::vector<Item> group;  // empty: no group (the trailing literal)
  uint64_t size = 1;        // names of the group
};
struct Set {
  std::vector<Segment> segments;
  size_t count = 1;
};

bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string_view strip(std::string_view s) {
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

bool digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

bool parse_num(std::string_view s, uint64_t& out) {
  if (!digits(s) || s.size() > 19) return false;
  out = 0;
  for (char c : s) out = out * 10 + static_cast<uint64_t>(c - '0');
  return true;
}

std::string number(uint64_t v, size_t width) {
  std::string s = std::to_string(v);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

bool ends_blank(std::string_view s) { return !s.empty() && blank(s.back()); }

bool padded(std::string_view s) { return s.size() > 1 && s[0] == '0'; }

bool parse_item(std::string_view text, Item& it) {
  size_t slash = text.find('/');
  std::string_view range = text.substr(0, slash);
  size_t dash = range.find('-');
  it.blank_ends_bound = ends_blank(range.substr(0, dash)) ||
                        (dash != std::string_view::npos && ends_blank(range.substr(dash + 1)));
  std::string_view lo_s = strip(range.substr(0, dash));
  if (dash == std::string_view::npos) {
    if (slash != std::string_view::npos || !digits(lo_s)) return false;
    it.lone = std::string(lo_s);
    return true;
  }
  uint64_t hi = 0;
  std::string_view hi_s = strip(range.substr(dash + 1));
  if (!parse_num(lo_s, it.lo) || !parse_num(hi_s, hi) || hi < it.lo) return false;
  it.uneven = (padded(lo_s) || padded(hi_s)) && lo_s.size() != hi_s.size();
  if (slash != std::string_view::npos) {
    // A step of any length, leading zeros dropped; past 64 bits it is past every range.
    std::string_view step = strip(text.substr(slash + 1));
    if (!digits(step)) return false;
    while (step.size() > 1 && step[0] == '0') step.remove_prefix(1);
    if (step.size() > 19)
      it.step = UINT64_MAX;
    else if (!parse_num(step, it.step))
      return false;
    if (it.step == 0) return false;
    it.stepped = true;
  }
  it.count = (hi - it.lo) / it.step + 1;
  it.width = lo_s.size() > 1 && lo_s[0] == '0' ? lo_s.size() : 0;
  return true;
}

// One set (no comma outside brackets); false where expand_nodeset must throw. Slurm's forms
// (bounds padded to different widths; groups side by side or with digits alone between them)
// only without a step, blanks in a group or text after the last group; digits right after a
// group never after a step or a bound ending with a blank.
bool parse_set(std::string_view p, Set& set) {
  size_t pos = 0;
  bool stepped = false, uneven = false, blanks = false, side_by_side = false;
  while (true) {
    Segment seg;
    while (pos < p.size() && p[pos] != '[' && p[pos] != ']') seg.literal += p[pos++];
    if (!set.segments.empty() && pos < p.size() && p[pos] == '[' &&
        (seg.literal.empty() || digits(seg.literal)))
      side_by_side = true;
    if (pos == p.size()) {
      set.segments.push_back(seg);
      if ((uneven || side_by_side) && (stepped || blanks || !seg.literal.empty())) return false;
      return true;
    }
    if (p[pos] == ']') return false;  // stray "]"
    size_t close = p.find_first_of("[]", pos + 1);
    if (close == std::string_view::npos || p[close] == '[') return false;  // unmatched / nested
    std::string_view body = p.substr(pos + 1, close - pos - 1);
    if (strip(body).empty()) return false;
    for (char c : body) blanks = blanks || blank(c);
    bool group_step = false, group_blank_end = false;
    seg.size = 0;
    for (size_t start = 0;;) {
      size_t comma = body.find(',', start);
      std::string_view text = body.substr(start, comma == body.npos ? body.npos : comma - start);
      Item it;
      if (strip(text).empty() || !parse_item(text, it) || it.count > kMaxNames) return false;
      seg.size += it.count;
      if (seg.size > kMaxNames) return false;
      stepped = stepped || it.stepped;
      uneven = uneven || it.uneven;
      group_step = group_step || it.stepped;
      group_blank_end = group_blank_end || it.blank_ends_bound;
      seg.group.push_back(it);
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    // Digits right before a group with two consecutive numbers, neither zero-padded, written with
    // different lengths ("9" and "10"): ClusterShell and Slurm read it differently, and it is
    // refused.
    if (!seg.literal.empty() && seg.literal.back() >= '0' && seg.literal.back() <= '9') {
      std::map<uint64_t, size_t> length_of;
      for (const Item& it : seg.group)
        for (uint64_t k = 0; k < it.count; ++k) {
          std::string w = it.lone.empty() ? number(it.lo + k * it.step, it.width) : it.lone;
          uint64_t v = 0;
          if (!padded(w) && parse_num(w, v)) length_of.emplace(v, w.size());
        }
      for (const auto& [v, length] : length_of) {
        auto next = length_of.find(v + 1);
        if (next != length_of.end() && next->second != length) return false;
      }
    }
    if (set.count * seg.size > kMaxNames) return false;  // both <= 16384: no overflow
    set.count *= seg.size;
    set.segments.push_back(std::move(seg));
    pos = close + 1;
    if (pos < p.size() && p[pos] >= '0' && p[pos] <= '9' && (group_step || group_blank_end))
      return false;
  }
}

// Returns false where expand_nodeset must throw. `count` is the number of names.
bool reference_parse(std::string_view p, std::vector<Set>& sets, size_t& count) {
  count = 0;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= p.size(); ++i) {
    if (i < p.size() && p[i] != ',') {
      depth += p[i] == '[' ? 1 : p[i] == ']' ? -1 : 0;
      continue;
    }
    if (i < p.size() && depth > 0) continue;
    std::string_view text = strip(p.substr(start, i - start));
    Set set;
    if (text.empty() || !parse_set(text, set)) return false;
    count += set.count;
    if (count > kMaxNames) return false;
    sets.push_back(std::move(set));
    start = i + 1;
  }
  return true;
}

// The name with index `index` (0-based) of one set, by mixed-radix decomposition in Slurm's
// order: the last group varies fastest, then the first, the second, ...
std::string set_name(const Set& set, size_t index) {
  const auto& segments = set.segments;
  std::vector<std::string> parts(segments.size());
  std::vector<size_t> groups;
  for (size_t i = 0; i < segments.size(); ++i)
    if (!segments[i].group.empty()) groups.push_back(i);
  std::vector<size_t> turn;
  if (!groups.empty()) turn.push_back(groups.back());
  for (size_t g = 0; g + 1 < groups.size(); ++g) turn.push_back(groups[g]);
  for (size_t i : turn) {
    const Segment& seg = segments[i];
    FUZZ_CHECK(seg.size > 0, "reference: empty group");
    uint64_t k = index % seg.size;
    index /= seg.size;
    for (const Item& it : seg.group) {
      if (k < it.count) {
        parts[i] = it.lone.empty() ? number(it.lo + k * it.step, it.width) : it.lone;
        break;
      }
      k -= it.count;
    }
  }
  std::string name;
  for (size_t i = 0; i < segments.size(); ++i) name += segments[i].literal + parts[i];
  return name;
}

// The longest name of a set with a group (0 without one: a plain name is checked by its user): the
// literals and each group's longest word, the last of a range being its longest.
size_t longest_name(const Set& set) {
  size_t length = 0;
  bool grouped = false;
  for (const Segment& seg : set.segments) {
    length += seg.literal.size();
    size_t word = 0;
    for (const Item& it : seg.group)
      word =
          std::max(word, it.lone.empty() ? number(it.lo + (it.count - 1) * it.step, it.width).size()
                                         : it.lone.size());
    length += word;
    grouped = grouped || !seg.group.empty();
  }
  return grouped ? length : 0;
}

std::string reference_name(const std::vector<Set>& sets, size_t index) {
  for (const Set& set : sets) {
    if (index < set.count) return set_name(set, index);
    index -= set.count;
  }
  FUZZ_CHECK(false, "reference: index past the names");
  return {};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view pattern(reinterpret_cast<const char*>(data), size);
  std::vector<Set> sets;
  size_t count = 0;
  bool valid = reference_parse(pattern, sets, count);
  // A set whose longest name is longer than a host name may be (253) is refused, saying so.
  bool too_long = false;
  for (const Set& set : sets) too_long = too_long || longest_name(set) > 253;
  std::vector<std::string> names;
  try {
    names = msrun_ssh::expand_nodeset(pattern);
  } catch (const msrun_ssh::InputError& e) {
    bool said_long =
        std::string_view(e.what()).find("longer than a host name") != std::string_view::npos;
    FUZZ_CHECK(!valid || (too_long && said_long),
               "expand_nodeset refused a valid pattern (%zu names): %s", count, e.what());
    return 0;
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "unexpected exception: %s", e.what());
  }
  FUZZ_CHECK(!names.empty(), "no names");
  FUZZ_CHECK(names.size() <= kMaxNames, "%zu names", names.size());
  // Every name is looked at when the names are small in all; a pattern that expands into
  // megabytes (16384 names of a kilobyte) has its sampled names compared with the reference
  // below instead: scanning 16 MB under the sanitizers' instrumentation takes seconds per input.
  size_t bytes = 0;
  for (const auto& n : names) bytes += n.size();
  if (bytes <= kMaxScannedBytes) {
    for (const auto& n : names) {
      FUZZ_CHECK(!n.empty(), "empty name");
      FUZZ_CHECK(n.find_first_of("[]") == std::string::npos, "bracket in \"%s\"", n.c_str());
    }
  }
  FUZZ_CHECK(valid, "expand_nodeset accepted a pattern the grammar refuses (%zu names)",
             names.size());
  FUZZ_CHECK(!too_long, "expand_nodeset accepted names longer than a host name may be");
  FUZZ_CHECK(names.size() == count, "%zu names, expected %zu", names.size(), count);
  if (pattern.find_first_of("[],") == std::string_view::npos)
    FUZZ_CHECK(names.size() == 1 && names[0] == strip(pattern), "a plain name was changed");
  if (count <= kMaxCompared) {
    for (size_t i = 0; i < count; ++i) {
      std::string want = reference_name(sets, i);
      FUZZ_CHECK(names[i] == want, "name %zu is \"%s\", expected \"%s\"", i, names[i].c_str(),
                 want.c_str());
    }
  } else {
    for (size_t i : {size_t{0}, count / 2, count - 1}) {
      std::string want = reference_name(sets, i);
      FUZZ_CHECK(names[i] == want, "name %zu is \"%s\", expected \"%s\"", i, names[i].c_str(),
                 want.c_str());
    }
  }
  return 0;
}
