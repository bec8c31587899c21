// The ground floor's string helpers (include/msrun_ssh/base.h).
#include "msrun_ssh/base.h"

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

namespace msrun_ssh {
namespace {

using Views = std::vector<std::string_view>;

TEST(Base, TrimDropsBlanksAtBothEnds) {
  EXPECT_EQ(trim("  a b\t"), "a b");
  EXPECT_EQ(trim(" \t "), "");
  EXPECT_EQ(trim("xxaxx", "x"), "a");
}

TEST(Base, SplitLinesKeepsEmptyLinesAndALastLineWithoutNewline) {
  EXPECT_EQ(split_lines(""), Views{});
  EXPECT_EQ(split_lines("a"), Views{"a"});
  EXPECT_EQ(split_lines("a\n"), Views{"a"});
  EXPECT_EQ(split_lines("a\n\nb"), (Views{"a", "", "b"}));
  EXPECT_EQ(split_lines("\n"), Views{""});
  EXPECT_EQ(split_lines("a\r\nb\n"), (Views{"a\r", "b"}));
}

TEST(Base, SplitWordsSkipsEveryRunOfBlanks) {
  EXPECT_EQ(split_words(""), Views{});
  EXPECT_EQ(split_words(" \t "), Views{});
  EXPECT_EQ(split_words("  a\t b  c "), (Views{"a", "b", "c"}));
  EXPECT_EQ(split_words("a,b,,c", ","), (Views{"a", "b", "c"}));
}

}  // namespace
}  // namespace msrun_ssh
