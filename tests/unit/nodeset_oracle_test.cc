// The node-set differential test: msrun-ssh's expansion against ClusterShell's NodeSet (the
// reference) on a corpus of hand-written and generated node sets. Both must accept the same node
// sets and give the same set of names; a node set that only msrun-ssh refuses must fall under one
// of the documented rules (docs/host-file.md, node sets): a name twice, more than 16384 names, a
// character no host name has, a range's bound of 20 digits or more, a sign in a number,
// ClusterShell's set operators and groups. Where only ClusterShell refuses, the documented
// differences are Slurm's forms ("n[01-100]", which Slurm prints, and groups side by side), and
// then Slurm's `scontrol show hostnames` must give the same names in the same order, or refuse
// too. ClusterShell sorts; the order is Slurm's: wherever Slurm gives the same names as msrun-ssh,
// it must give them in the same order. Skips loudly without ClusterShell or scontrol (CI installs
// python3-clustershell and slurm-client).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "msrun_ssh/base.h"
#include "msrun_ssh/hostfile.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

// Why a case may differ from ClusterShell; kSame: it may not.
enum class Rule { kSame, kLong, kSign, kOperator };

struct OracleCase {
  std::string input;
  Rule rule = Rule::kSame;
};

// Hand-written: every form ClusterShell's syntax has that the host file accepts, its corners, and
// the documented refusals.
std::vector<OracleCase> hand_cases() {
  std::vector<OracleCase> c = {
      {"node1"},
      {"198.18.0.1"},
      {"n[1-10/2]"},
      {"n[1-3, 7]"},
      {"node[1-3,5],gpu01"},
      {"n[9999999998-10000000001]"},
      {"n[01-10]"},
      {"n[08-11]"},
      {"a1, b2"},
      {"n[1-3] "},
      {"n[ 1-3]"},
      {"n[1 -3]"},
      {"n[1-3 ]"},
      {"n[3-1]"},
      {"n[0-0]"},
      {"n[1-10/3]"},
      {"n[1-2/0]"},
      {"n[1-3]x[1-2]"},
      {"n[1-4/2,7]"},
      {"n[01-10/4]"},
      {"n1,n01"},
      {"n[00-02]"},
      {"n[9-11]p"},
      {"n[1-3/1]"},
      {"x[1-2],,y"},
      {"n[1-3,]"},
      {"n[,1]"},
      {"n[]"},
      {"n[1-3]]"},
      {"n[[1]"},
      {"n[1-]"},
      {"n[a-b]"},
      {"n[1-3/]"},
      {"n[1/2]"},
      {"n[ 1]"},
      {"n[1 ]"},
      {"n[1,  2]"},
      {"n[1-3/2-4]"},
      {"[1-3]"},
      {"[1-3]n"},
      {"n[1--3]"},
      {"n[1-3//2]"},
      {"n[1-3/2/2]"},
      {"n[1-3/02]"},
      {"n[2-8/3]"},
      {"n[00001-00003]"},
      {"x[0-1]y[00-01]z"},
      {"n[0-10]"},
      {"n[09-10]"},
      {"n[1-3/5]"},
      {"n[5-5/2]"},
      {"n[007]"},
      {"n[0]"},
      {"n[00]"},
      {"n1[0-2]"},
      {"n[1-2]-[3-4]"},
      {"n[1-2]a,b[3-4]c"},
      {"n[12345678901234567890]"},
      {"n[1-3/10000000000]"},
      {"n[1-3],"},
      {",a"},
      {"n[1-2] ,b"},
      {"n[1-2], b"},
      {"a , b"},
      {"n[1-2,4-5/1]"},
      {"n[ 1 - 3 ]"},
      {"n[1 , 2]"},
      {"n[1\t,2]"},
      {"n[-]"},
      {"n[1-2],\tb"},
      {"n[1-3/ 2]"},
      {" a"},
      {"a b"},
      {"a,a"},
      {"n[1,1]"},
      {"n[1-3],n[2-4]"},
      {"n[0-99999]"},
      {"a[0-200]b[0-200]"},
      {"node_1"},
      {"n[1-2]_x"},
      {"n[01-100]"},
      {"n[1-010]"},
      {"n[00-9]"},
      {"n[010-9]"},
      {"n[0001-10]"},
      {"n[01-1]"},
      {"node-[1-2].ib.example"},
      {"10.0.[0-1].[1-2]"},
      {"n[9999999999999999998-9999999999999999999]"},
      // Slurm's order and forms (review of 2026-12-05)
      {"n[1-2][3-4][5-6]"},
      {"a[1-2]b[3-4]c[5]"},
      {"n[1-2]0[3-4]"},
      {"n[1-2]0[3-4 ]"},
      {"n[1-9/2]0"},
      {"n[1-5/1]0"},
      // Digits right before a group (review of 2026-12-07): ClusterShell takes them into the
      // numbers, Slurm keeps them as text; refused where the two disagree.
      {"gpu1[8-12]"},
      {"n1[9,10]"},
      {"n0[9-10/1]"},
      {"r2[97-109]"},
      {"n1[08-12]"},
      {"n1[1-9/2]"},
      {"n1[1,3]"},
      {"n01[1-2]"},
      {"n1[001-003]"},
      {"n1[0-2]x[1-2]"},
      {"n1[5,10]"},
      {"n1[5,100]"},
      {"n1[8-9,10-12]"},
      {"n1[9,11]"},
      {"n1[7,8,10]"},
      {"n1[8,9,010]"},
      {"n1[008-012]"},
      {"[fe80::1]"},
      {"n[01-100/25]"},
      {"n[1-010/3]"},
      {"n[1-2][1-4/2]"},
      {"n[01 - 100]"},
      {"n[1-2][ 3-4]"},
      {"n[01-100]x"},
      {"n[1-2][3-4]-ib"},
      {"n[1-3 ]0"},
      {"n[ 1-3]0"},
      {"n[1 ,3]0"},
      {"n[1-3/99999999999999999999]"},
      {"n[1-3/0000000000000000000002]"},
      {"\nnode[1-3],\nnode[5-6]"},
      {"n[1-3\n]"},
      {"n[1-3]\r\n,n5"},
      {"n[1-99999999999999999999]", Rule::kLong},
      {"n[+1]", Rule::kSign},
      {"n[-1]", Rule::kSign},
      {"n[1-3-5]", Rule::kSign},
      {"n[1-3/-1]", Rule::kSign},
      {"n[1-3]!n2", Rule::kOperator},
      {"n[1-3]&n[2-4]", Rule::kOperator},
      {"n[1-3]^n[2-4]", Rule::kOperator},
      {"@all", Rule::kOperator},
  };
  return c;
}

// A generated node set in ClusterShell's syntax: 1-3 comma-separated sets, each of literal text
// and up to 2 bracket groups of numbers, ranges and steps, zero padding, long numbers and blanks.
class Generator {
 public:
  explicit Generator(unsigned seed) : rng_(seed) {}

  std::string node_sets() {
    std::string out;
    int sets = pick(1, 3);
    for (int i = 0; i < sets; ++i) {
      if (i > 0) out += blanks() + "," + blanks();
      out += node_set(i);
    }
    return blanks() + out + blanks();
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(int percent) { return pick(1, 100) <= percent; }
  std::string blanks() { return chance(15) ? (chance(80) ? " " : chance(50) ? "\t " : "\n") : ""; }

  std::string number(int value, int width) { return fmt::format("{:0{}}", value, width); }

  std::string item() {
    int width = chance(30) ? pick(2, 4) : 0;
    if (chance(5))
      return std::to_string(pick(1, 9)) + std::string(static_cast<size_t>(pick(9, 18)), '7');
    int lo = pick(0, 120);
    if (chance(35)) return blanks() + number(lo, width) + blanks();
    int hi = lo + pick(0, 14);
    if (chance(3)) std::swap(lo, hi);  // reversed: refused by both
    // Mostly bounds of one width; sometimes ClusterShell's "padding length mismatch".
    int hi_width = width > 0 && chance(10) ? 0 : width;
    std::string range =
        blanks() + number(lo, width) + blanks() + "-" + blanks() + number(hi, hi_width) + blanks();
    if (chance(30)) range += "/" + blanks() + std::to_string(pick(1, 5)) + blanks();
    return range;
  }

  std::string group() {
    std::string out = "[";
    int items = pick(1, 3);
    for (int i = 0; i < items; ++i) {
      if (i > 0) out += ',';
      out += item();
    }
    return out + "]";
  }

  std::string node_set(int index) {
    static const char* const kHeads[] = {"n", "node", "gpu-", "r1n", "a.b", "198.18.0.", "x"};
    std::string out = kHeads[pick(0, 6)];
    out += static_cast<char>('a' + index);              // different sets rarely share names
    if (chance(15)) out += std::to_string(pick(0, 9));  // digits right before the first group
    int groups = chance(10) ? 3 : pick(0, 2);
    for (int g = 0; g < groups; ++g) {
      out += group();
      // Text between groups mostly (else side by side: Slurm's form), after the last sometimes,
      // and now and then digits (after a step: refused by both).
      if (g + 1 < groups ? chance(85) : chance(40))
        out += chance(10) ? "0" : chance(50) ? ".ib" : "-p";
    }
    if (chance(3)) out += chance(50) ? "[" : "]";  // malformed now and then
    return out;
  }

  std::mt19937 rng_;
};

struct Answer {
  bool ok = false;
  std::vector<std::string> names;  // sorted, duplicates kept
  std::vector<std::string> order;  // ours only: as expanded
  std::string error;
};

Answer ours(const std::string& input) {
  Answer a;
  try {
    a.order = expand_nodeset(input);
    a.ok = true;
  } catch (const InputError& e) {
    a.error = e.what();
  }
  a.names = a.order;
  std::sort(a.names.begin(), a.names.end());
  return a;
}

// ClusterShell's answers for `inputs`, in order (an empty vector when it is not installed).
std::vector<Answer> clustershell(const std::vector<std::string>& inputs) {
  test::TempDir dir;
  std::string cases = dir.path() + "/cases.jsonl";
  {
    std::ofstream out(cases);
    for (const auto& i : inputs) out << nlohmann::json(i).dump() << "\n";
  }
  int status = 0;
  std::string output = test::shell_output("/usr/bin/python3 " + std::string(MSRUN_SSH_SOURCE_DIR) +
                                              "/tests/data/nodeset/nodeset_oracle.py <" + cases,
                                          &status);
  std::vector<Answer> answers;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return answers;
  size_t pos = 0;
  while (pos < output.size()) {
    size_t nl = output.find('\n', pos);
    auto j = nlohmann::json::parse(output.substr(pos, nl - pos));
    Answer a;
    a.ok = j.contains("names");
    if (a.ok)
      a.names = j["names"].get<std::vector<std::string>>();
    else
      a.error = j["error"].get<std::string>();
    answers.push_back(std::move(a));
    pos = nl == std::string::npos ? output.size() : nl + 1;
  }
  return answers;
}

// Slurm's expansion of each of `inputs` (`scontrol show hostnames`, in its order; nullopt when
// it refuses one), in order; an empty vector without scontrol.
std::vector<std::optional<std::vector<std::string>>> slurm(const std::vector<std::string>& inputs) {
  std::vector<std::optional<std::vector<std::string>>> answers;
  if (std::system("command -v scontrol >/dev/null 2>&1") != 0) return answers;
  // scontrol wants a configuration even to expand a host list; a minimal one does.
  test::TempDir dir;
  std::string conf =
      dir.write("slurm.conf",
                "ClusterName=t\nSlurmctldHost=localhost\nNodeName=n1\nPartitionName=p Nodes=n1\n");
  std::string cases;
  for (const auto& i : inputs) cases += i + '\0';
  std::string file = dir.write("cases", cases);
  // One answer per input, each ended by a NUL: "+" and its names a line each, or "-".
  int status = 0;
  std::string script =
      "while IFS= read -r -d '' x; do "
      "if o=$(scontrol show hostnames \"$x\" 2>/dev/null); then printf '+%s\\0' \"$o\"; "
      "else printf -- '-\\0'; fi; done";
  std::string out = test::shell_output(
      "SLURM_CONF=" + conf + " bash -c " + shell_quote(script) + " <" + file, &status);
  if (status != 0) return {};
  for (size_t pos = 0; pos < out.size();) {
    size_t end = out.find('\0', pos);
    if (end == std::string::npos) break;
    std::string_view one(out.data() + pos, end - pos);
    if (one.empty() || one[0] != '+') {
      answers.emplace_back(std::nullopt);
    } else {
      std::vector<std::string> names;
      for (auto line : split_lines(one.substr(1))) names.emplace_back(line);
      answers.emplace_back(std::move(names));
    }
    pos = end + 1;
  }
  return answers;
}

std::vector<std::string> unique(std::vector<std::string> sorted) {
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  return sorted;
}

// "" when msrun-ssh's answer agrees with ClusterShell's (`ref`) and Slurm's (`slurm`) under the
// documented rules, else why not.
std::string disagreement(const OracleCase& c, const Answer& mine, const Answer& ref,
                         const std::optional<std::vector<std::string>>& slurm, int& same,
                         int& same_order) {
  bool names_ok = mine.ok && std::all_of(mine.names.begin(), mine.names.end(), valid_host_name);
  bool no_twice = unique(mine.names).size() == mine.names.size();
  if (c.rule != Rule::kSame) {
    // Documented refusals: the host file must refuse them, whatever ClusterShell does.
    return names_ok ? "accepted a documented refusal" : "";
  }
  // The order: wherever Slurm gives the names we give, it gives them in our order.
  if (mine.ok && slurm) {
    std::vector<std::string> sorted = *slurm;
    std::sort(sorted.begin(), sorted.end());
    if (sorted == mine.names) {
      if (*slurm != mine.order)
        return fmt::format("Slurm's names in another order: {}", fmt::join(*slurm, " "));
      ++same_order;
    }
  }
  if (mine.ok && ref.ok) {
    if (unique(mine.names) != ref.names) return "different names";
    if (names_ok && no_twice) ++same;
    // Else the host file refuses it: a name twice, or a character no host name has.
    return "";
  }
  if (!mine.ok && !ref.ok) return "";
  if (mine.ok) {
    // Only ClusterShell refuses: allowed for Slurm's forms alone (bounds padded to different
    // widths, which Slurm prints: "n[01-100]"; groups side by side), and Slurm must give the
    // same names in the same order.
    bool slurm_form = ref.error.find("padding length mismatch") != std::string::npos ||
                      ref.error.find("illegal reopening bracket") != std::string::npos;
    if (!slurm_form) return "accepted what ClusterShell refuses: " + ref.error;
    // A list: each of its node sets is a case of its own.
    if (split_node_sets(c.input).size() > 1) return "";
    if (!slurm) return "accepted what both ClusterShell and Slurm refuse";
    if (*slurm != mine.order) return "names other than Slurm's";
    return "";
  }
  // Only msrun-ssh refuses: allowed for the size limit, and for digits right before a group
  // where ClusterShell's names are not Slurm's.
  if (mine.error.find("more than 16384 names") != std::string::npos && ref.names.size() > 16384)
    return "";
  if (mine.error.find("which ClusterShell and Slurm read differently") != std::string::npos) {
    std::optional<std::vector<std::string>> theirs = slurm;
    if (theirs) std::sort(theirs->begin(), theirs->end());
    if (!theirs || *theirs != ref.names) return "";
    return "refused digits before a group where ClusterShell and Slurm agree";
  }
  return "refused what ClusterShell accepts: " + mine.error;
}

TEST(NodesetOracle, AgreesWithClusterShell) {
  std::vector<OracleCase> cases = hand_cases();
  Generator gen(20261202);
  std::set<std::string> seen;
  for (const auto& c : cases) seen.insert(c.input);
  for (int i = 0; i < 2000 && cases.size() < 600; ++i)
    if (std::string s = gen.node_sets(); seen.insert(s).second) cases.push_back({s});
  // Each node set of a comma-separated list is a case of its own too: where ClusterShell refuses
  // the list for one Slurm form in it, that one is held to Slurm alone.
  for (size_t i = 0, n = cases.size(); i < n && cases.size() < 900; ++i) {
    std::vector<std::string_view> sets = split_node_sets(cases[i].input);
    if (sets.size() < 2 || cases[i].rule != Rule::kSame) continue;
    for (std::string_view set : sets)
      if (std::string one(trim(set, " \t\n")); !one.empty() && seen.insert(one).second)
        cases.push_back({one});
  }
  std::vector<std::string> inputs;
  for (const auto& c : cases) inputs.push_back(c.input);
  std::vector<Answer> ref = clustershell(inputs);
  if (ref.empty())
    GTEST_SKIP() << "SKIPPED LOUDLY: ClusterShell is not installed (apt-get install "
                    "python3-clustershell); the node-set differential did not run";
  std::vector<std::optional<std::vector<std::string>>> slurm_ref = slurm(inputs);
  if (slurm_ref.empty())
    GTEST_SKIP() << "SKIPPED LOUDLY: Slurm's scontrol is not installed (apt-get install "
                    "slurm-client); the node-set differential did not run";
  ASSERT_EQ(ref.size(), cases.size());
  ASSERT_EQ(slurm_ref.size(), cases.size());
  int same = 0, same_order = 0, refused_by_both = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    Answer mine = ours(cases[i].input);
    std::string why = disagreement(cases[i], mine, ref[i], slurm_ref[i], same, same_order);
    refused_by_both += !mine.ok && !ref[i].ok;
    EXPECT_EQ(why, "") << "node set \"" << cases[i].input << "\": ours "
                       << (mine.ok ? fmt::format("{}", fmt::join(mine.names, " ")) : mine.error)
                       << "; ClusterShell "
                       << (ref[i].ok ? fmt::format("{}", fmt::join(ref[i].names, " "))
                                     : ref[i].error);
  }
  // The corpus is a real one: most cases are node sets both accept with the same names.
  EXPECT_GE(cases.size(), 550u);
  EXPECT_GE(same, 300) << "cases accepted alike";
  EXPECT_GE(same_order, 80) << "cases where Slurm gives our names, so its order was compared";
  EXPECT_GE(refused_by_both, 20) << "cases refused alike";
}

}  // namespace
}  // namespace msrun_ssh
