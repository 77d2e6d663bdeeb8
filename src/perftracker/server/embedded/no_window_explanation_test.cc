#include "perftracker/server/embedded/no_window_explanation.h"

#include <gtest/gtest.h>

namespace perftracker {
namespace {

std::vector<int64_t> Ms(std::initializer_list<int> ms) {
  std::vector<int64_t> out;
  for (int m : ms) out.push_back(int64_t{m} * 1'000'000);
  return out;
}

std::vector<int64_t> Repeat(int ms, int times) {
  return std::vector<int64_t>(static_cast<size_t>(times), int64_t{ms} * 1'000'000);
}

TEST(ExplainNoWindowTest, NoIterationSaysTheDetectorNeverLearnedTheLoopAndWhatToDo) {
  const std::string text = ExplainNoWindow({{0, {}}, {1, {}}}, 50, 0.15);
  EXPECT_EQ(text.rfind("perftracker: no rank reported a training iteration: ", 0), 0u) << text;
  EXPECT_NE(text.find("perftracker.step()"), std::string::npos) << text;
  EXPECT_NE(text.find("--trigger-at-seconds"), std::string::npos) << text;
}

TEST(ExplainNoWindowTest, TooFewIterationsForTheMovingMean) {
  EXPECT_EQ(ExplainNoWindow({{0, Ms({10, 12, 14})}, {1, Ms({11, 13})}}, 50, 0.05),
            "perftracker: the detector saw 2-3 iterations on 2 ranks (median 12.0 ms); a "
            "slowdown needs 50 iterations (--window-iterations) before it can trigger\n");
}

// The README's demo on a machine whose other load ended as the fault began: the iteration
// time was ~80 ms before the fault and after it, so the detector rightly saw no rise.
TEST(ExplainNoWindowTest, ARiseUnderTheBarNamesTheRankTheRiseAndTheBar) {
  std::vector<int64_t> flat = Repeat(80, 100);
  std::vector<int64_t> rising = Repeat(80, 50);
  const std::vector<int64_t> slower = Repeat(88, 50);  // the last 50: 10 % above
  rising.insert(rising.end(), slower.begin(), slower.end());
  EXPECT_EQ(ExplainNoWindow({{0, flat}, {2, rising}, {3, flat}}, 50, 0.15),
            "perftracker: the detector saw 100 iterations on 3 ranks (median 80.0 ms); the "
            "mean of 50 iterations rose at most 10% above the shortest before it (rank 2), "
            "under the 15% of --slowdown-ratio\n");
}

// The baseline is the shortest mean *before* a window, as in the detector: a job that was
// slow first and fast later never rose.
TEST(ExplainNoWindowTest, AJobThatGotFasterDidNotRise) {
  std::vector<int64_t> d = Repeat(120, 60);
  const std::vector<int64_t> fast = Repeat(60, 60);
  d.insert(d.end(), fast.begin(), fast.end());
  const std::string text = ExplainNoWindow({{0, d}}, 20, 0.05);
  EXPECT_NE(text.find("on 1 rank (median"), std::string::npos) << text;
  EXPECT_NE(text.find("; the mean of 20 iterations never rose above the shortest before it\n"),
            std::string::npos)
      << text;
}

TEST(ExplainNoWindowTest, ARiseOverTheBarWithoutAWindowSaysSo) {
  std::vector<int64_t> d = Repeat(50, 50);
  const std::vector<int64_t> slow = Repeat(75, 50);
  d.insert(d.end(), slow.begin(), slow.end());
  const std::string text = ExplainNoWindow({{1, d}}, 50, 0.15);
  EXPECT_NE(text.find("rose 50% above the shortest before it (rank 1), over the 15% of "
                      "--slowdown-ratio, yet no window was taken"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace perftracker
