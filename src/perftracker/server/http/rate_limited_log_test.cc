#include "perftracker/server/http/rate_limited_log.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace perftracker {
namespace {

TEST(RateLimitedLogTest, BurstThenSuppressedThenSummarized) {
  std::vector<std::string> lines;
  RateLimitedLog log([&](const std::string& l) { lines.push_back(l); }, 3,
                     std::chrono::seconds(10));
  const auto t0 = RateLimitedLog::Clock::time_point() + std::chrono::hours(1);
  for (int i = 0; i < 100; ++i) log.Log("refused " + std::to_string(i), t0);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[2], "refused 2");
  EXPECT_EQ(log.suppressed_total(), 97u);
  log.Log("refused later", t0 + std::chrono::seconds(5));
  EXPECT_EQ(lines.size(), 3u);
  log.Log("refused next period", t0 + std::chrono::seconds(11));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[3], "refused next period (98 similar lines suppressed before)");
  log.Log("again", t0 + std::chrono::seconds(12));
  EXPECT_EQ(lines.back(), "again");
}

}  // namespace
}  // namespace perftracker
