#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "msrun_ssh/base.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/hostfile.h"

namespace msrun_ssh {
namespace {

// Far above any real cluster, low enough that a typo cannot make the launcher plan for millions.
constexpr size_t kMaxNames = 16384;
// A host name's length at most (not_a_host): a set whose longest name is longer is refused before
// its names are made (16,384 names of a 100 KB pattern each took gigabytes).
constexpr size_t kMaxNameLength = 253;
// Digits of a range's bound: 19 fit in 64 bits. A single number may be any length.
constexpr size_t kMaxDigits = 19;
// What ClusterShell strips around a node set's parts (Python's blanks, ASCII ones): a node list
// wrapped over lines in a TOML multi-line string reads as on one line.
constexpr std::string_view kBlanks = " \t\n\r\v\f";
using Wide = std::uint64_t;

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The error of a node set past kMaxNames names.
InputError too_many_names() {
  return InputError(fmt::format("node set expands to more than {} names", kMaxNames));
}

bool has_blank(std::string_view s) { return s.find_first_of(kBlanks) != std::string_view::npos; }

// A range's bound as a number; nullopt when it is not one (empty, a sign, a blank inside, too
// long).
std::optional<Wide> wide_number(std::string_view s) {
  if (!all_digits(s) || s.size() > kMaxDigits) return std::nullopt;
  Wide v = 0;
  for (char c : s) v = v * 10 + static_cast<unsigned>(c - '0');
  return v;
}

// A range's step as a number, leading zeros dropped; one too large for 64 bits is the largest
// (a step past the range's end: its first bound alone, as ClusterShell reads it).
std::optional<Wide> step_number(std::string_view s) {
  if (!all_digits(s)) return std::nullopt;
  size_t first = s.find_first_not_of('0');
  if (first == std::string_view::npos) return Wide{0};
  s.remove_prefix(first);
  return s.size() > kMaxDigits ? std::numeric_limits<Wide>::max() : *wide_number(s);
}

// `v` in decimal, zero-padded to `width` digits.
std::string decimal(Wide v, size_t width) {
  std::string out;
  do {
    out += static_cast<char>('0' + static_cast<int>(v % 10));
    v /= 10;
  } while (v != 0);
  if (out.size() < width) out.append(width - out.size(), '0');
  std::reverse(out.begin(), out.end());
  return out;
}

// "07" is zero-padded; "0" and "7" are not.
bool padded(std::string_view digits) { return digits.size() > 1 && digits[0] == '0'; }

// What a bracket group holds beside its words: the forms that only one of ClusterShell and Slurm
// reads, and what each refuses around them.
struct GroupForm {
  bool step = false;          // a "/N" step: ClusterShell's, refused by Slurm
  bool uneven_width = false;  // bounds padded to different widths ("01-100"): Slurm's only
  bool blank = false;         // blanks inside (Slurm reads them its own way: "n[ 1-3]" is n01..n03)
  bool blank_ends_bound = false;  // a bound ends with a blank ("[1 -3]", "[1-3 ]")
};

bool ends_with_blank(std::string_view s) {
  return !s.empty() && kBlanks.find(s.back()) != std::string_view::npos;
}

// One item of a bracket group, blanks around its parts allowed (as ClusterShell): "7", "01-16",
// "1-10/2". Appends its words to `out`.
void expand_item(std::string_view item, std::vector<std::string>& out, GroupForm& form) {
  auto bad = [&](std::string_view why) {
    return InputError(
        fmt::format("bad node set range {}{}", in_quotes_cut(trim(item, kBlanks)), why));
  };
  size_t slash = item.find('/');
  std::string_view range = item.substr(0, slash);
  size_t dash = range.find('-');
  form.blank_ends_bound =
      form.blank_ends_bound || ends_with_blank(range.substr(0, dash)) ||
      (dash != std::string_view::npos && ends_with_blank(range.substr(dash + 1)));
  std::string_view lo_s = trim(range.substr(0, dash), kBlanks);
  if (dash == std::string_view::npos) {
    if (slash != std::string_view::npos) throw bad(": a step needs a range (\"1-9/2\")");
    if (!all_digits(lo_s)) throw bad("");
    if (out.size() + 1 > kMaxNames) throw too_many_names();
    if (lo_s.size() > kMaxNameLength)
      throw bad(
          fmt::format(": longer than a host name may be (at most {} characters)", kMaxNameLength));
    out.emplace_back(lo_s);  // a single number stands as written
    return;
  }
  std::string_view hi_s = trim(range.substr(dash + 1), kBlanks);
  std::optional<Wide> lo = wide_number(lo_s), hi = wide_number(hi_s), step = Wide{1};
  if (slash != std::string_view::npos) {
    step = step_number(trim(item.substr(slash + 1), kBlanks));
    form.step = true;
  }
  if (!lo || !hi || !step) {
    bool long_number = (lo_s.size() > kMaxDigits && all_digits(lo_s)) ||
                       (hi_s.size() > kMaxDigits && all_digits(hi_s));
    throw bad(long_number ? fmt::format(": a bound has more than {} digits", kMaxDigits) : "");
  }
  if (*hi < *lo) throw bad(": reversed");
  if (*step == 0) throw bad(": a step of 0");
  Wide count = (*hi - *lo) / *step + 1;
  // Checked before expanding: many ranges of one group must not allocate past the limit first.
  if (count > kMaxNames || out.size() + static_cast<size_t>(count) > kMaxNames)
    throw too_many_names();
  // "01-16" pads every name to 2 digits. Bounds of different widths, one of them padded, are
  // Slurm's form, where the first bound alone decides: "01-100" is n01 .. n99, n100
  // (ClusterShell refuses them: "padding length mismatch"; docs/host-file.md).
  form.uneven_width =
      form.uneven_width || ((padded(lo_s) || padded(hi_s)) && lo_s.size() != hi_s.size());
  size_t width = padded(lo_s) ? lo_s.size() : 0;
  for (Wide i = 0; i < count; ++i) out.push_back(decimal(*lo + i * *step, width));
}

// Expands the inside of one bracket group ("01-03, 7, 10-20/5") into its words, padding kept.
std::vector<std::string> expand_group(std::string_view body, GroupForm& form) {
  std::vector<std::string> out;
  if (trim(body, kBlanks).empty()) throw InputError("empty node set \"[]\"");
  form.blank = has_blank(body);
  const std::string_view whole = body;
  while (true) {
    size_t comma = body.find(',');
    std::string_view item = body.substr(0, comma);
    if (trim(item, kBlanks).empty())
      throw InputError(fmt::format("empty item in node set {} (item {})",
                                   in_quotes_cut(fmt::format("[{}]", whole)),
                                   std::count(whole.data(), item.data(), ',') + 1));
    expand_item(item, out, form);
    if (comma == std::string_view::npos) break;
    body = body.substr(comma + 1);
  }
  return out;
}

// The forms only Slurm reads (bounds of different widths, groups side by side: ClusterShell
// refuses both) are read only as Slurm reads them: without a step or blanks in a group, and with
// nothing after the last "]" (Slurm refuses all three there, and ClusterShell the whole set).
void check_slurm_form(std::string_view pattern, const std::vector<GroupForm>& forms,
                      bool side_by_side, bool text_after) {
  bool uneven = std::any_of(forms.begin(), forms.end(), [](auto& f) { return f.uneven_width; });
  if (!uneven && !side_by_side) return;
  std::string_view what = uneven ? "bounds padded to different widths" : "groups side by side";
  std::string_view but;
  if (std::any_of(forms.begin(), forms.end(), [](auto& f) { return f.step; }))
    but = "a step";
  else if (std::any_of(forms.begin(), forms.end(), [](auto& f) { return f.blank; }))
    but = "blanks inside a group";
  else if (text_after)
    but = "text after the last \"]\"";
  else
    return;
  throw InputError(fmt::format(
      "{}: {} are Slurm's form, and Slurm reads them only without {} (ClusterShell refuses "
      "them)",
      in_quotes_cut(pattern), what, but));
}

// Whether `words` (a group's numbers as written) hold two consecutive numbers, neither
// zero-padded, of different lengths ("9" and "10"; ClusterShell keeps "010" apart from "9").
bool run_spans_lengths(const std::vector<std::string>& words) {
  std::map<Wide, size_t> length_of;
  for (const auto& w : words)
    if (auto v = wide_number(w); v && !padded(w)) length_of.emplace(*v, w.size());
  for (const auto& [v, length] : length_of) {
    auto next = length_of.find(v + 1);
    if (next != length_of.end() && next->second != length) return true;
  }
  return false;
}

// One node set without a top-level comma: literal text and bracket groups.
std::vector<std::string> expand_one(std::string_view pattern) {
  // The pattern as literal text each followed by a bracket group's words, then the trailing
  // literal; the names are then built each once, in one pass. At most 14 groups of two or more
  // words fit under kMaxNames, so the work is about the size of the names, however many segments.
  struct Segment {
    std::string literal;
    std::vector<std::string> words;  // empty: the trailing literal
  };
  std::vector<Segment> segments{Segment{}};
  std::vector<GroupForm> forms;
  bool side_by_side = false;
  size_t count = 1;
  size_t pos = 0;
  // The longest name's length so far, checked as it grows: 4 million groups of one word each
  // ("nx[1]x[1]...", 16 MB) were made into segments first, half a GB.
  size_t longest = 0;
  auto check_longest = [&] {
    if (longest <= kMaxNameLength || forms.empty()) return;  // a name alone: not_a_host's
    std::string start;
    for (const Segment& seg : segments) {
      start += seg.literal;
      if (!seg.words.empty()) start += seg.words.front();
      if (start.size() > 64) break;
    }
    throw InputError(
        fmt::format("the name {} is longer than a host name may be (more than {} characters)",
                    in_quotes_cut(start), kMaxNameLength));
  };
  while (true) {
    size_t open = pattern.find('[', pos);
    size_t close_stray = pattern.find(']', pos);
    if (close_stray != std::string_view::npos && close_stray < open)
      throw InputError("unmatched \"]\" in node set");
    segments.back().literal += pattern.substr(pos, open - pos);
    longest += std::min(open, pattern.size()) - pos;
    check_longest();
    if (open == std::string_view::npos) break;
    // Groups side by side, or with digits alone between them ("n[1-2]0[3-4]"): ClusterShell's
    // "illegal reopening bracket".
    side_by_side =
        side_by_side || (pos > 0 && (open == pos || all_digits(pattern.substr(pos, open - pos))));
    size_t close = pattern.find(']', open);
    if (close == std::string_view::npos) throw InputError("unmatched \"[\" in node set");
    std::string_view body = pattern.substr(open + 1, close - open - 1);
    if (body.find('[') != std::string_view::npos) throw InputError("nested \"[\" in node set");
    if (std::count(body.begin(), body.end(), ':') >= 2)  // "fe80::1"; "01:16" is a bad range
      throw InputError(fmt::format(
          "a node set's group holds numbers; an IPv6 address is written without brackets ({})",
          in_quotes_cut(body)));
    GroupForm form;
    std::vector<std::string> words = expand_group(body, form);
    // Digits right before a group are taken by ClusterShell into the bounds of each run of
    // consecutive numbers it holds ("gpu1[8-12]" is its gpu[18-112], 95 names) and stay text for
    // Slurm (gpu18, gpu19, gpu110, ...): the two agree unless a run spans numbers of different
    // lengths ("n1[5,10]" is n15, n110 for both).
    if (open > 0 && pattern[open - 1] >= '0' && pattern[open - 1] <= '9' &&
        run_spans_lengths(words))
      throw InputError(fmt::format(
          "{}: digits right before a group with consecutive numbers of different lengths, which "
          "ClusterShell and Slurm read differently (\"gpu1[8-12]\": ClusterShell's gpu18 .. "
          "gpu112, Slurm's gpu18, gpu19, gpu110 .. gpu112); put the digits inside the group "
          "(\"gpu[18-19,110-112]\") or pad its numbers to one length",
          in_quotes_cut(pattern)));
    // Digits right after a group ("n[1-3]0": n10, n20, n30) are appended to its bounds by
    // ClusterShell, which cannot do it after a step ("illegal trailing digits after range with
    // steps") or after a bound that ends with a blank ("[1-3 ]0"); Slurm reads neither.
    if (close + 1 < pattern.size() && pattern[close + 1] >= '0' && pattern[close + 1] <= '9' &&
        (form.step || form.blank_ends_bound))
      throw InputError(fmt::format(
          "{}: digits right after a group with {}, which neither ClusterShell nor Slurm "
          "reads",
          in_quotes_cut(pattern),
          form.step ? "a step (\"n[1-9/2]0\")" : "a blank after a bound (\"n[1-3 ]0\")"));
    if (count * words.size() > kMaxNames) throw too_many_names();
    count *= words.size();
    longest += std::max_element(words.begin(), words.end(), [](auto& a, auto& b) {
                 return a.size() < b.size();
               })->size();
    forms.push_back(form);
    segments.back().words = std::move(words);
    check_longest();
    segments.emplace_back();
    pos = close + 1;
  }
  if (pattern.empty()) throw InputError("empty host name");
  check_slurm_form(pattern, forms, side_by_side, !segments.back().literal.empty());
  // Slurm's order (`scontrol show hostnames`): the last group varies fastest, then the first, the
  // second, ... up to the one before the last: "a[1-2]b[1-2]" is a1b1, a1b2, a2b1, a2b2, and
  // "a[1-2]b[1-2]c[1-2]" is a1b1c1, a1b1c2, a2b1c1, a2b1c2, a1b2c1, ...
  size_t groups = segments.size() - 1;
  std::vector<size_t> turn;  // the groups, fastest first
  if (groups > 0) turn.push_back(groups - 1);
  for (size_t g = 0; g + 1 < groups; ++g) turn.push_back(g);
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
    for (size_t g : turn) {
      if (++at[g] < segments[g].words.size()) break;
      at[g] = 0;
    }
  }
  return names;
}

}  // namespace

std::vector<std::string_view> split_node_sets(std::string_view value) {
  std::vector<std::string_view> items;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= value.size(); ++i) {
    if (i == value.size() || (value[i] == ',' && depth == 0)) {
      items.push_back(value.substr(start, i - start));
      start = i + 1;
    } else if (value[i] == '[') {
      ++depth;
    } else if (value[i] == ']') {
      --depth;
    }
  }
  return items;
}

std::vector<std::string> expand_nodeset(std::string_view pattern) {
  // A comma outside brackets separates node sets ("node[1-3,5], gpu01", as Slurm prints them);
  // blanks around each are dropped, as ClusterShell drops them.
  std::vector<std::string> names;
  for (std::string_view set : split_node_sets(pattern)) {
    std::string_view item = trim(set, kBlanks);
    if (item.empty())
      throw InputError(pattern.find(',') == std::string_view::npos
                           ? "empty host name"
                           : "empty item in a comma-separated node set");
    std::vector<std::string> more = expand_one(item);
    if (names.size() + more.size() > kMaxNames) throw too_many_names();
    if (names.empty())
      names = std::move(more);
    else
      names.insert(names.end(), std::make_move_iterator(more.begin()),
                   std::make_move_iterator(more.end()));
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
