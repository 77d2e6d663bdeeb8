#include "perftracker/core/rank_list.h"

#include <gtest/gtest.h>

namespace perftracker {
namespace {

TEST(RankListTest, ANoteSeparatesItemsWithACommaAndASpace) {
  EXPECT_EQ(FormatRanks({12, 3, 7, 8, 9}, SIZE_MAX, ", "), "3, 7-9, 12");
  EXPECT_EQ(FormatRanks({5, 3}, SIZE_MAX, ", "), "3, 5");
}

TEST(RankListTest, ALongNoteIsCutAfterAnItemAndSaysHowMany) {
  std::vector<int32_t> even;
  for (int32_t r = 0; r < 1000; r += 2) even.push_back(r);
  const std::string s = FormatRanks(even, 40, ", ");
  EXPECT_EQ(s.rfind("0, 2, 4, ", 0), 0u) << s;
  EXPECT_NE(s.find(", \u2026 (500 ranks)"), std::string::npos) << s;
  EXPECT_LE(s.size() - 2, 40u) << s;  // columns: "…" is one
}

}  // namespace
}  // namespace perftracker
