#include "perftracker/report/format.h"

#include <gtest/gtest.h>

namespace perftracker::report {
namespace {

TEST(FormatRanksTest, CompressesRuns) {
  std::vector<int32_t> ranks = {7, 0, 1, 2, 3, 5};
  for (int32_t r = 8; r <= 1023; ++r) ranks.push_back(r);
  EXPECT_EQ(FormatRanks(ranks), "0-3,5,7-1023");
  EXPECT_EQ(FormatRanks({4, 2, 2, 1}), "1,2,4");  // runs of two stay listed
  EXPECT_EQ(FormatRanks({}), "");
}

TEST(FormatRanksTest, CutsLongListsAndSaysHowMany) {
  std::vector<int32_t> even;
  for (int32_t r = 0; r < 1000; r += 2) even.push_back(r);
  const std::string s = FormatRanks(even, 40);
  EXPECT_LE(DisplayWidth(s), 40u) << s;
  EXPECT_EQ(s.rfind("0,2,4,", 0), 0u) << s;
  EXPECT_NE(s.find("(500 ranks)"), std::string::npos) << s;
}

TEST(RanksLabelTest, SingleManyAndAll) {
  EXPECT_EQ(RanksLabel({2}, 8), "rank 2");
  EXPECT_EQ(RanksLabel({0, 1, 3}, 8), "ranks 0,1,3");
  EXPECT_EQ(RanksLabel({}, 8), "all 8 workers");
  EXPECT_EQ(RanksLabel({3, 2, 1, 0}, 4), "all 4 workers");
}

TEST(SanitizeTextTest, RepairsUtf8AndDropsControlCharacters) {
  EXPECT_EQ(SanitizeText("a\x1b[2Jb"), "a[2Jb");  // ESC cannot repaint the terminal
  EXPECT_EQ(SanitizeText("x\ty\nz"), "x y z");
  EXPECT_EQ(SanitizeText("\xff\xfe"), "\uFFFD\uFFFD");
  EXPECT_EQ(SanitizeText("\xc0\xaf"), "\uFFFD\uFFFD");  // overlong '/'
  EXPECT_EQ(SanitizeText("µs ✓"), "µs ✓");
}

TEST(EscapeHtmlTest, EscapesMarkupAndQuotes) {
  EXPECT_EQ(EscapeHtml("<script>alert(\"x\" & 'y')</script>"),
            "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;");
}

TEST(DisplayWidthTest, CountsCodePointsNotAnsiCodes) {
  EXPECT_EQ(DisplayWidth("41.2 µs"), 7u);
  EXPECT_EQ(DisplayWidth("\x1b[1;31mred\x1b[0m"), 3u);
}

TEST(TruncateTest, KeepsTheEndOrTheStart) {
  EXPECT_EQ(TruncateEnd("abcdefgh", 5), "abcd…");
  EXPECT_EQ(TruncateStart("a > b > leaf", 6), "… leaf");
  EXPECT_EQ(TruncateEnd("short", 10), "short");
  EXPECT_EQ(TruncateEnd("µµµµ", 3), "µµ…");
}

TEST(WrapTextTest, StaysWithinWidthAndSplitsLongWords) {
  const std::string text =
      "rank 2 is the straggler: block2 takes 2.0x its peers, costing 31% of each iteration "
      "void_at::native::(anonymous_namespace)::very_long_kernel_name_without_spaces<float,4>";
  const auto lines = WrapText(text, 30, "", "  ");
  ASSERT_GT(lines.size(), 3u);
  for (const auto& l : lines) EXPECT_LE(DisplayWidth(l), 30u) << l;
  EXPECT_EQ(lines[0], "rank 2 is the straggler:");
  EXPECT_EQ(lines[1].rfind("  ", 0), 0u);
  EXPECT_EQ(WrapText("", 30).size(), 1u);
}

}  // namespace
}  // namespace perftracker::report
