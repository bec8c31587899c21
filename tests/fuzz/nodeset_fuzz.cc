// Fuzzes expand_nodeset (src/hostfile/nodeset.cc) against the promises of hostfile.h and against
// an independent reference expansion written here from the documented grammar:
//
//   pattern := (literal | "[" item ("," item)* "]")*      literal: no "[" nor "]"
//   item    := NUM | NUM "-" NUM                          NUM: 1..9 decimal digits, lo <= hi
//
// with zero padding to the width of the lower bound when it starts with '0' (and has more than
// one digit), groups multiplying left to right, at most 16384 names in all (the implementation
// also refuses one range spanning 16384 values or more), and no empty name.
//
// Findings: any crash or sanitizer report; any exception other than InputError; success with an
// empty name, more than 16384 names, or a name holding a bracket; success/failure or names that
// differ from the reference.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/hostfile.h"

namespace {

constexpr size_t kMaxNames = 16384;
constexpr size_t kMaxCompared = 5000;  // names compared one by one (else count, first, last)

struct Item {
  unsigned long lo = 0, hi = 0;
  size_t width = 0;
};

struct Segment {
  std::string literal;      // before the group
  std::vector<Item> group;  // empty: no group (the trailing literal)
};

bool parse_num(std::string_view s, unsigned long& out) {
  if (s.empty() || s.size() > 9) return false;
  out = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    out = out * 10 + static_cast<unsigned long>(c - '0');
  }
  return true;
}

// Returns false where expand_nodeset must throw. `count` is the number of names.
bool reference_parse(std::string_view p, std::vector<Segment>& segments, size_t& count) {
  count = 1;
  size_t pos = 0;
  while (true) {
    Segment seg;
    while (pos < p.size() && p[pos] != '[' && p[pos] != ']') seg.literal += p[pos++];
    if (pos == p.size()) {
      segments.push_back(seg);
      break;
    }
    if (p[pos] == ']') return false;  // stray "]"
    size_t close = p.find_first_of("[]", pos + 1);
    if (close == std::string_view::npos || p[close] == '[') return false;  // unmatched / nested
    std::string_view body = p.substr(pos + 1, close - pos - 1);
    size_t group_size = 0;
    size_t start = 0;
    while (true) {
      size_t comma = body.find(',', start);
      std::string_view item =
          body.substr(start, comma == std::string_view::npos ? body.npos : comma - start);
      size_t dash = item.find('-');
      std::string_view lo_s = item.substr(0, dash);
      std::string_view hi_s = dash == std::string_view::npos ? lo_s : item.substr(dash + 1);
      Item it;
      if (!parse_num(lo_s, it.lo) || !parse_num(hi_s, it.hi) || it.hi < it.lo) return false;
      if (it.hi - it.lo >= kMaxNames) return false;
      it.width = lo_s.size() > 1 && lo_s[0] == '0' ? lo_s.size() : 0;
      seg.group.push_back(it);
      group_size += it.hi - it.lo + 1;
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    if (count * group_size > kMaxNames) return false;  // both factors <= 1e5 * 1e5: no overflow
    count *= group_size;
    segments.push_back(std::move(seg));
    pos = close + 1;
  }
  return !p.empty();  // the only way to get an empty name: an empty pattern
}

std::string number(unsigned long v, size_t width) {
  std::string s = std::to_string(v);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// The name with index `index` (0-based) of the expansion, by mixed-radix decomposition.
std::string reference_name(const std::vector<Segment>& segments, size_t index) {
  std::vector<std::string> parts(segments.size());
  for (size_t i = segments.size(); i-- > 0;) {
    const Segment& seg = segments[i];
    if (seg.group.empty()) continue;
    size_t size = 0;
    for (const Item& it : seg.group) size += it.hi - it.lo + 1;
    FUZZ_CHECK(size > 0, "reference: empty group");  // every item holds lo..hi, lo <= hi
    size_t k = index % size;
    index /= size;
    for (const Item& it : seg.group) {
      size_t n = it.hi - it.lo + 1;
      if (k < n) {
        parts[i] = number(it.lo + k, it.width);
        break;
      }
      k -= n;
    }
  }
  std::string name;
  for (size_t i = 0; i < segments.size(); ++i) name += segments[i].literal + parts[i];
  return name;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view pattern(reinterpret_cast<const char*>(data), size);
  std::vector<Segment> segments;
  size_t count = 0;
  bool valid = reference_parse(pattern, segments, count);
  std::vector<std::string> names;
  try {
    names = msrun_ssh::expand_nodeset(pattern);
  } catch (const msrun_ssh::InputError& e) {
    FUZZ_CHECK(!valid, "expand_nodeset refused a valid pattern (%zu names): %s", count, e.what());
    return 0;
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "unexpected exception: %s", e.what());
  }
  FUZZ_CHECK(!names.empty(), "no names");
  FUZZ_CHECK(names.size() <= kMaxNames, "%zu names", names.size());
  for (const auto& n : names) {
    FUZZ_CHECK(!n.empty(), "empty name");
    FUZZ_CHECK(n.find_first_of("[]") == std::string::npos, "bracket in \"%s\"", n.c_str());
  }
  FUZZ_CHECK(valid, "expand_nodeset accepted a pattern the grammar refuses (%zu names)",
             names.size());
  FUZZ_CHECK(names.size() == count, "%zu names, expected %zu", names.size(), count);
  if (pattern.find_first_of("[]") == std::string_view::npos)
    FUZZ_CHECK(names.size() == 1 && names[0] == pattern, "a plain name was changed");
  if (count <= kMaxCompared) {
    for (size_t i = 0; i < count; ++i) {
      std::string want = reference_name(segments, i);
      FUZZ_CHECK(names[i] == want, "name %zu is \"%s\", expected \"%s\"", i, names[i].c_str(),
                 want.c_str());
    }
  } else {
    for (size_t i : {size_t{0}, count / 2, count - 1}) {
      std::string want = reference_name(segments, i);
      FUZZ_CHECK(names[i] == want, "name %zu is \"%s\", expected \"%s\"", i, names[i].c_str(),
                 want.c_str());
    }
  }
  return 0;
}
