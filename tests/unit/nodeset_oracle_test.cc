// The node-set differential test: msrun-ssh's expansion against ClusterShell's NodeSet (the
// reference) on a corpus of hand-written and generated node sets. Both must accept the same node
// sets and give the same set of names; a node set that only msrun-ssh refuses must fall under one
// of the documented rules (docs/host-file.md, node sets): a name twice, more than 16384 names, a
// character no host name has, a range's bound of 20 digits or more, a sign in a number,
// ClusterShell's set operators and groups. Where only ClusterShell refuses, the documented
// differences are Slurm's forms ("n[01-100]", which Slurm prints, and groups side by side), and
// then Slurm's `scontrol show hostnames` must agree. Skips loudly without ClusterShell (CI installs
// python3-clustershell).
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
  std::string blanks() { return chance(15) ? (chance(80) ? " " : "\t ") : ""; }

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
    out += static_cast<char>('a' + index);  // different sets rarely share names
    int groups = pick(0, 2);
    for (int g = 0; g < groups; ++g) {
      out += group();
      if (g + 1 < groups ? chance(85) : chance(40)) out += chance(50) ? ".ib" : "-p";
    }
    if (chance(3)) out += chance(50) ? "[" : "]";  // malformed now and then
    return out;
  }

  std::mt19937 rng_;
};

struct Answer {
  bool ok = false;
  std::vector<std::string> names;  // sorted, duplicates kept
  std::string error;
};

Answer ours(const std::string& input) {
  Answer a;
  try {
    a.names = expand_nodeset(input);
    a.ok = true;
  } catch (const InputError& e) {
    a.error = e.what();
  }
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

// Slurm's expansion of `input` (`scontrol show hostnames`, sorted), or nullopt without scontrol.
std::optional<std::vector<std::string>> slurm_hostnames(const std::string& input) {
  static const bool have = std::system("command -v scontrol >/dev/null 2>&1") == 0;
  if (!have) return std::nullopt;
  // scontrol wants a configuration even to expand a host list; a minimal one does.
  static const test::TempDir dir;
  static const std::string conf =
      dir.write("slurm.conf",
                "ClusterName=t\nSlurmctldHost=localhost\nNodeName=n1\nPartitionName=p Nodes=n1\n");
  int status = 0;
  std::string out = test::shell_output(
      "SLURM_CONF=" + conf + " scontrol show hostnames " + shell_quote(input) + " 2>/dev/null",
      &status);
  std::vector<std::string> names;
  if (status != 0) return names;  // refused: never equal to an accepted expansion
  for (size_t pos = 0; pos < out.size();) {
    size_t nl = out.find('\n', pos);
    names.push_back(out.substr(pos, nl - pos));
    pos = nl == std::string::npos ? out.size() : nl + 1;
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> unique(std::vector<std::string> sorted) {
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  return sorted;
}

// "" when msrun-ssh's answer agrees with ClusterShell's under the documented rules, else why not.
std::string disagreement(const OracleCase& c, const Answer& mine, const Answer& ref, int& same) {
  bool names_ok = mine.ok && std::all_of(mine.names.begin(), mine.names.end(), valid_host_name);
  bool no_twice = unique(mine.names).size() == mine.names.size();
  if (c.rule != Rule::kSame) {
    // Documented refusals: the host file must refuse them, whatever ClusterShell does.
    return names_ok ? "accepted a documented refusal" : "";
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
    // widths, which Slurm prints: "n[01-100]"; groups side by side), and Slurm, when it can read
    // the node set (one group, no steps, no blanks), must give the same names.
    bool slurm_form = ref.error.find("padding length mismatch") != std::string::npos ||
                      ref.error.find("illegal reopening bracket") != std::string::npos;
    if (!slurm_form) return "accepted what ClusterShell refuses: " + ref.error;
    if (c.input.find_first_of("/ \t") != std::string::npos ||
        c.input.find('[') != c.input.rfind('['))
      return "";
    std::optional<std::vector<std::string>> slurm = slurm_hostnames(c.input);
    if (slurm && *slurm != mine.names) return "names other than Slurm's";
    return "";
  }
  // Only msrun-ssh refuses: allowed for the size limit alone.
  return mine.error.find("more than 16384 names") != std::string::npos && ref.names.size() > 16384
             ? ""
             : "refused what ClusterShell accepts: " + mine.error;
}

TEST(NodesetOracle, AgreesWithClusterShell) {
  std::vector<OracleCase> cases = hand_cases();
  Generator gen(20261202);
  std::set<std::string> seen;
  for (const auto& c : cases) seen.insert(c.input);
  for (int i = 0; i < 2000 && cases.size() < 600; ++i)
    if (std::string s = gen.node_sets(); seen.insert(s).second) cases.push_back({s});
  std::vector<std::string> inputs;
  for (const auto& c : cases) inputs.push_back(c.input);
  std::vector<Answer> ref = clustershell(inputs);
  if (ref.empty())
    GTEST_SKIP() << "SKIPPED LOUDLY: ClusterShell is not installed (apt-get install "
                    "python3-clustershell); the node-set differential did not run";
  ASSERT_EQ(ref.size(), cases.size());
  int same = 0, refused_by_both = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    Answer mine = ours(cases[i].input);
    std::string why = disagreement(cases[i], mine, ref[i], same);
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
  EXPECT_GE(refused_by_both, 20) << "cases refused alike";
}

}  // namespace
}  // namespace msrun_ssh
