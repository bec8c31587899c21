#include <gtest/gtest.h>

#include "msrun_ssh/error.h"
#include "msrun_ssh/hostfile.h"

namespace msrun_ssh {
namespace {

using Names = std::vector<std::string>;

TEST(Nodeset, PlainNameIsItself) { EXPECT_EQ(expand_nodeset("node1"), Names{"node1"}); }

TEST(Nodeset, RangeKeepsZeroPadding) {
  EXPECT_EQ(expand_nodeset("node[01-03]"), (Names{"node01", "node02", "node03"}));
}

TEST(Nodeset, ListAndRange) {
  EXPECT_EQ(expand_nodeset("n[1-3,7]"), (Names{"n1", "n2", "n3", "n7"}));
}

TEST(Nodeset, GroupsMultiply) {
  EXPECT_EQ(expand_nodeset("r[1-2]n[1-2]"), (Names{"r1n1", "r1n2", "r2n1", "r2n2"}));
}

TEST(Nodeset, ReversedRangeIsAnError) {
  EXPECT_THROW(expand_nodeset("n[3-1]"), InputError);
}

}  // namespace
}  // namespace msrun_ssh
