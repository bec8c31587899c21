// Node sets (src/hostfile/nodeset.cc): expansion order, zero padding, lists, several groups and
// every malformed pattern with its exact message.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "msrun_ssh/hostfile.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

using Names = std::vector<std::string>;

// The message of the InputError that expanding `pattern` throws, or "no error".
std::string error_of(std::string_view pattern) {
  return test::error_of([&] { expand_nodeset(pattern); });
}

TEST(Nodeset, PlainNameIsItself) { EXPECT_EQ(expand_nodeset("node1"), Names{"node1"}); }

TEST(Nodeset, IpAddressIsItself) { EXPECT_EQ(expand_nodeset("198.18.0.1"), Names{"198.18.0.1"}); }

TEST(Nodeset, RangeKeepsZeroPadding) {
  EXPECT_EQ(expand_nodeset("node[01-03]"), (Names{"node01", "node02", "node03"}));
}

TEST(Nodeset, PaddingCrossesADecade) {
  EXPECT_EQ(expand_nodeset("n[08-11]"), (Names{"n08", "n09", "n10", "n11"}));
  EXPECT_EQ(expand_nodeset("n[098-101]"), (Names{"n098", "n099", "n100", "n101"}));
}

TEST(Nodeset, NoPaddingWithoutLeadingZero) {
  EXPECT_EQ(expand_nodeset("n[8-11]"), (Names{"n8", "n9", "n10", "n11"}));
}

TEST(Nodeset, WidthComesFromTheLowerBound) {
  // "01-100": the first bound says two digits; 100 is wider and stays as it is (Slurm's rule).
  Names names = expand_nodeset("n[01-100]");
  ASSERT_EQ(names.size(), 100u);
  EXPECT_EQ(names.front(), "n01");
  EXPECT_EQ(names[98], "n99");
  EXPECT_EQ(names.back(), "n100");
  EXPECT_EQ(expand_nodeset("n[00-2]"), (Names{"n00", "n01", "n02"}));
  EXPECT_EQ(expand_nodeset("n[1-010]").back(), "n10");
}

// ClusterShell's forms: steps, blanks, comma lists at the top level, long numbers.
TEST(Nodeset, StepsTakeEveryKthNumber) {
  EXPECT_EQ(expand_nodeset("n[1-10/3]"), (Names{"n1", "n4", "n7", "n10"}));
  EXPECT_EQ(expand_nodeset("n[01-10/4,12]"), (Names{"n01", "n05", "n09", "n12"}));
  EXPECT_EQ(expand_nodeset("n[1-3/10000000000]"), Names{"n1"});
  EXPECT_EQ(expand_nodeset("n[2-8/03]"), (Names{"n2", "n5", "n8"}));
}

TEST(Nodeset, BlanksAroundThePartsAreDropped) {
  EXPECT_EQ(expand_nodeset("n[1-3, 7]"), (Names{"n1", "n2", "n3", "n7"}));
  EXPECT_EQ(expand_nodeset("n[ 1 - 2 /1 ]"), (Names{"n1", "n2"}));
  EXPECT_EQ(expand_nodeset(" a ,\tb "), (Names{"a", "b"}));
}

TEST(Nodeset, CommaListsOfNodeSetsKeepTheirOrder) {
  EXPECT_EQ(expand_nodeset("node[1-3,5],gpu01"),
            (Names{"node1", "node2", "node3", "node5", "gpu01"}));
  EXPECT_EQ(expand_nodeset("b, a[1-2]"), (Names{"b", "a1", "a2"}));
}

TEST(Nodeset, LongNumbers) {
  EXPECT_EQ(expand_nodeset("n[9999999998-10000000001]"),
            (Names{"n9999999998", "n9999999999", "n10000000000", "n10000000001"}));
  EXPECT_EQ(expand_nodeset("n[123456789012345678901234567890123456789012]"),
            Names{"n123456789012345678901234567890123456789012"});
  EXPECT_EQ(expand_nodeset("n[9999999999999999998-9999999999999999999]").size(), 2u);
}

TEST(Nodeset, SingleZeroIsNotPadding) {
  EXPECT_EQ(expand_nodeset("n[0-2]"), (Names{"n0", "n1", "n2"}));
}

TEST(Nodeset, ListAndRange) {
  EXPECT_EQ(expand_nodeset("n[1-3,7]"), (Names{"n1", "n2", "n3", "n7"}));
}

TEST(Nodeset, ListKeepsOrderAsWritten) {
  EXPECT_EQ(expand_nodeset("n[7,1-2,05]"), (Names{"n7", "n1", "n2", "n05"}));
}

TEST(Nodeset, SingleElementGroup) { EXPECT_EQ(expand_nodeset("n[5]"), Names{"n5"}); }

TEST(Nodeset, SuffixAfterGroup) {
  EXPECT_EQ(expand_nodeset("node[1-2].cluster.local"),
            (Names{"node1.cluster.local", "node2.cluster.local"}));
}

TEST(Nodeset, GroupOnly) { EXPECT_EQ(expand_nodeset("[1-2]"), (Names{"1", "2"})); }

TEST(Nodeset, IpRange) {
  EXPECT_EQ(expand_nodeset("198.18.0.[1-3]"), (Names{"198.18.0.1", "198.18.0.2", "198.18.0.3"}));
}

TEST(Nodeset, GroupsMultiply) {
  EXPECT_EQ(expand_nodeset("r[1-2]n[1-2]"), (Names{"r1n1", "r1n2", "r2n1", "r2n2"}));
}

// Slurm's order (scontrol show hostnames): the last group fastest, then the first, the second, ...
// A group of one counts: it is the last here.
TEST(Nodeset, ThreeGroupsMultiplyInSlurmsOrder) {
  EXPECT_EQ(expand_nodeset("a[1-2]-[01,03]x[9]"),
            (Names{"a1-01x9", "a2-01x9", "a1-03x9", "a2-03x9"}));
  EXPECT_EQ(expand_nodeset("n[1-2][3-4][5-6]"),
            (Names{"n135", "n136", "n235", "n236", "n145", "n146", "n245", "n246"}));
  EXPECT_EQ(expand_nodeset("a[1-2]b[3-4]c[5-6]d[7-8]").size(), 16u);
  EXPECT_EQ(expand_nodeset("a[1-2]b[3-4]c[5-6]d[7-8]")[4], "a1b4c5d7");
}

// The forms only Slurm reads (ClusterShell refuses them) are read only as Slurm reads them.
TEST(Nodeset, SlurmFormsOnlyAsSlurmReadsThem) {
  EXPECT_EQ(expand_nodeset("n[1-2][3-4]"), (Names{"n13", "n14", "n23", "n24"}));
  EXPECT_EQ(expand_nodeset("n[9-010]").size(), 2u);
  for (const char* refused : {"n[01-100/25]", "n[1-010/3]", "n[1-2][1-4/2]", "n[01 - 100]",
                              "n[1-2][ 3-4]", "n[01-100]x", "n[1-2][3-4]-ib"})
    EXPECT_THROW(expand_nodeset(refused), InputError) << refused;
  EXPECT_EQ(error_of("n[01-100]-ib"),
            "\"n[01-100]-ib\": bounds padded to different widths are Slurm's form, and Slurm "
            "reads them only without text after the last \"]\" (ClusterShell refuses them)");
  EXPECT_EQ(error_of("n[1-2][1-4/2]"),
            "\"n[1-2][1-4/2]\": groups side by side are Slurm's form, and Slurm reads them only "
            "without a step (ClusterShell refuses them)");
}

// Digits right after a group with a step: refused by ClusterShell and by Slurm.
TEST(Nodeset, DigitsAfterAStepAreRefused) {
  EXPECT_EQ(error_of("n[1-9/2]0"),
            "\"n[1-9/2]0\": digits right after a group with a step (\"n[1-9/2]0\"), which "
            "neither ClusterShell nor Slurm reads");
  EXPECT_EQ(expand_nodeset("n[1-9/4]x0"), (Names{"n1x0", "n5x0", "n9x0"}));
}

// Digits after a group are appended to its bounds by ClusterShell; a bound that ends with a blank
// cannot take them ("1 0"), one that starts with one can.
TEST(Nodeset, DigitsAfterABoundEndingWithABlankAreRefused) {
  EXPECT_EQ(expand_nodeset("n[ 1-3]0"), (Names{"n10", "n20", "n30"}));
  EXPECT_EQ(expand_nodeset("n[1, 3]0"), (Names{"n10", "n30"}));
  for (const char* refused : {"n[1 -3]0", "n[1-3 ]0", "n[1 ,3]0", "n[1-3\n]0"})
    EXPECT_THROW(expand_nodeset(refused), InputError) << refused;
  EXPECT_EQ(expand_nodeset("n[1-3 ]x0"), (Names{"n1x0", "n2x0", "n3x0"}));
}

// Digits alone between two groups make them side by side, as ClusterShell reads it: Slurm's form.
TEST(Nodeset, DigitsBetweenGroupsAreSideBySide) {
  EXPECT_EQ(expand_nodeset("n[1-2]0[3-4]"), (Names{"n103", "n104", "n203", "n204"}));
  EXPECT_THROW(expand_nodeset("n[1-2]0[3-4 ]"), InputError);
  EXPECT_EQ(expand_nodeset("n[1-2]0x[3-4 ]").size(), 4u);
}

// A step of any length, leading zeros dropped, as ClusterShell reads it.
TEST(Nodeset, LongSteps) {
  EXPECT_EQ(expand_nodeset("n[1-3/99999999999999999999]"), (Names{"n1"}));
  EXPECT_EQ(expand_nodeset("n[1-3/0000000000000000000002]"), (Names{"n1", "n3"}));
  EXPECT_THROW(expand_nodeset("n[1-3/000]"), InputError);
}

// Every ASCII blank ClusterShell strips: a node list wrapped over lines (a TOML multi-line string).
TEST(Nodeset, LineEndsAndOtherBlanksAreBlanks) {
  EXPECT_EQ(expand_nodeset("\nnode[1-2],\r\n node[5-6]\n"),
            (Names{"node1", "node2", "node5", "node6"}));
  EXPECT_EQ(expand_nodeset("n[1-3\n]"), (Names{"n1", "n2", "n3"}));
  EXPECT_EQ(expand_nodeset("n[1,\v\f2]"), (Names{"n1", "n2"}));
}

TEST(Nodeset, LargestAllowedRange) {
  Names names = expand_nodeset("n[0-16383]");
  ASSERT_EQ(names.size(), 16384u);
  EXPECT_EQ(names.back(), "n16383");
}

// Every malformed pattern, with its exact message.
TEST(Nodeset, MalformedPatternsAreErrors) {
  EXPECT_THROW(expand_nodeset("n[3-1]"), InputError);
  const test::Case kCases[] = {
      {"n[3-1]", "bad node set range \"3-1\": reversed"},
      {"n[1-3", "unmatched \"[\" in node set"},
      {"n[1]x[", "unmatched \"[\" in node set"},
      {"n1-3]", "unmatched \"]\" in node set"},
      {"n[1]]", "unmatched \"]\" in node set"},
      {"]n[1]", "unmatched \"]\" in node set"},
      {"n[]", "empty node set \"[]\""},
      {"n[1,]", "empty item in node set \"[1,]\" (item 2)"},
      {"n[,1]", "empty item in node set \"[,1]\" (item 1)"},
      {"n[1:3]", "bad node set range \"1:3\""},  // a typo for "-", no IPv6 address
      {"[fe80::1]",
       "a node set's group holds numbers; an IPv6 address is written without brackets "
       "(\"fe80::1\")"},
      {"n[a-c]", "bad node set range \"a-c\""},  // not a number
      {"n[1-]", "bad node set range \"1-\""},
      {"n[-1]", "bad node set range \"-1\""},
      {"n[+1]", "bad node set range \"+1\""},
      {"n[1-2-3]", "bad node set range \"1-2-3\""},
      {"n[1 0-3]", "bad node set range \"1 0-3\""},
      {"n[1/2]", "bad node set range \"1/2\": a step needs a range (\"1-9/2\")"},
      {"n[1-4/0]", "bad node set range \"1-4/0\": a step of 0"},
      {"n[1-4/]", "bad node set range \"1-4/\""},
      {"n[1-4/2/2]", "bad node set range \"1-4/2/2\""},
      {"n[1-99999999999999999999]",
       "bad node set range \"1-99999999999999999999\": a bound has more than 19 digits"},
      {"n[0-16384]", "node set expands to more than 16384 names"},
      {"a,,b", "empty item in a comma-separated node set"},
      {"a,", "empty item in a comma-separated node set"},
      {"n[0-9999],m[0-9999]", "node set expands to more than 16384 names"},
      {"a[0-999]b[0-999]", "node set expands to more than 16384 names"},
      {"n[1-[2]]", "nested \"[\" in node set"},
      {"n[[1]]", "nested \"[\" in node set"},
      {"", "empty host name"},
  };
  for (const auto& c : kCases) EXPECT_EQ(error_of(c.input), c.expected) << c.input;
}

}  // namespace
}  // namespace msrun_ssh

namespace msrun_ssh {
namespace {

// ClusterShell takes digits right before a group into its numbers ("gpu1[8-12]" is its
// gpu[18-112]), Slurm keeps them as text: where the two disagree the node set is refused; where
// the group's numbers are of one length they agree (nodeset_oracle_test checks both).
TEST(Nodeset, DigitsRightBeforeAGroupWhoseNumbersDifferInLengthAreRefused) {
  for (const char* ambiguous :
       {"gpu1[8-12]", "n1[9,10]", "n0[9-10/1]", "r2[97-109]", "n1[8-9,10-12]"})
    EXPECT_NE(error_of(ambiguous).find("which ClusterShell and Slurm read differently"),
              std::string::npos)
        << ambiguous;
  // No run of consecutive numbers spans two lengths: both read n15, n110.
  EXPECT_EQ(expand_nodeset("n1[5,10]"), (Names{"n15", "n110"}));
  EXPECT_EQ(expand_nodeset("n1[5,100]"), (Names{"n15", "n1100"}));
  EXPECT_EQ(expand_nodeset("n1[0-2]"), (Names{"n10", "n11", "n12"}));
  EXPECT_EQ(expand_nodeset("n1[08-10]"), (Names{"n108", "n109", "n110"}));
  EXPECT_EQ(expand_nodeset("n1[1-5/2]"), (Names{"n11", "n13", "n15"}));
  EXPECT_EQ(expand_nodeset("n[8-12]"), (Names{"n8", "n9", "n10", "n11", "n12"}));
}

// Single numbers count toward the names' limit as ranges do (8 million of them took 350 MB), and
// what an error quotes of a long value is cut (a 16 MB node set was printed whole, twice).
TEST(Nodeset, SingleNumbersCountAndLongValuesAreQuotedCut) {
  std::string singles;
  for (int i = 0; i <= 16384; ++i) singles += (i ? "," : "") + std::to_string(i);
  EXPECT_EQ(error_of("n[" + singles + "]"), "node set expands to more than 16384 names");
  std::string ones = test::comma_list("1", 10000);
  std::string message = error_of("n[" + ones + ",,1]");
  EXPECT_LT(message.size(), 200u) << message.substr(0, 300);
  EXPECT_NE(message.find("\"... (item 10001)"), std::string::npos) << message.substr(0, 300);
  EXPECT_NE(error_of("n[" + std::string(300, '7') + "]").find("longer than a host name"),
            std::string::npos);
}

// A name too long is refused as the node set is read, not after every group was made (4 million
// groups of one word took half a GB first).
TEST(Nodeset, ANameTooLongIsRefusedAsItGrows) {
  std::string many = "n";
  for (int i = 0; i < 100000; ++i) many += "x[1]";
  std::string start = "n";  // the first 64 bytes of its first name
  while (start.size() < 64) start += "x1";
  start.resize(64);
  EXPECT_EQ(error_of(many), "the name \"" + start +
                                "\"... is longer than a host name may be (more than 253 "
                                "characters)");
}

TEST(Nodeset, ManyRangesInOneGroupFailBeforeExpanding) {
  std::string body = test::comma_list("0-99999", 200);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(expand_nodeset("n[" + body + "]"), InputError);
  // Expanding first cost seconds and a gigabyte; the limit is checked before anything is built.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

}  // namespace
}  // namespace msrun_ssh
