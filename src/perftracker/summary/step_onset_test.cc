#include "perftracker/summary/step_onset.h"

#include <gtest/gtest.h>

#include <vector>

namespace perftracker {
namespace {

TEST(StepOnset, GcPausesFromIterationNineOfTwelve) {
  // sim-gc-late-64: 15 ms pauses from iteration 9 on, none before.
  std::vector<double> x(12, 0);
  for (size_t i = 9; i < 12; ++i) x[i] = 15e6 + 0.3e6 * static_cast<double>(i % 2);
  const StepOnset s = FindStepOnset(x);
  EXPECT_EQ(s.iteration, 9u);
  EXPECT_NEAR(s.after_sum, 45.6e6, 1);
  EXPECT_NEAR(s.after_mean, 15.2e6, 1);
  EXPECT_EQ(s.before_mean, 0);
}

TEST(StepOnset, ALayerThatSlowsDownOverNoise) {
  std::vector<double> x{6.8, 7.0, 6.6, 6.9, 7.1, 6.7, 27.0, 26.5, 27.4, 26.9};
  const StepOnset s = FindStepOnset(x);
  EXPECT_EQ(s.iteration, 6u);
  EXPECT_NEAR(s.after_mean, 26.95, 1e-9);
}

TEST(StepOnset, NoStepInNoiseASingleSlowIterationOrASlowStart) {
  // Noise whose last iterations happen to be the largest: no gap of several sigmas.
  EXPECT_EQ(
      FindStepOnset(std::vector<double>{10, 9.8, 10.1, 9.9, 10.0, 10.2, 10.3, 10.4}).iteration, 0u);
  // One slow iteration at the end is not a level, nor two (a burst of load on a busy host:
  // a CPU op preempted in the last two iterations of 15).
  EXPECT_EQ(FindStepOnset(std::vector<double>{1, 1, 1, 1, 1, 1, 1, 9}).iteration, 0u);
  EXPECT_EQ(FindStepOnset(std::vector<double>{2.0, 2.1, 2.0, 2.2, 2.0, 2.1, 2.0, 2.0, 2.1, 2.0, 2.2,
                                              2.0, 2.1, 6.1, 6.3})
                .iteration,
            0u);
  // Three are.
  EXPECT_EQ(FindStepOnset(std::vector<double>{2.0, 2.1, 2.0, 2.2, 2.0, 2.1, 2.0, 2.0, 2.1, 2.0, 2.2,
                                              2.0, 6.0, 6.1, 6.3})
                .iteration,
            12u);
  // Slow first iterations (warm-up) are a step down, never an onset.
  EXPECT_EQ(FindStepOnset(std::vector<double>{9, 9, 9, 1, 1, 1, 1, 1}).iteration, 0u);
  // A steady fault over the whole window has no onset.
  EXPECT_EQ(FindStepOnset(std::vector<double>{5, 5, 5, 5, 5, 5}).iteration, 0u);
  // Too few iterations for a baseline and a level.
  EXPECT_EQ(FindStepOnset(std::vector<double>{0, 0, 9, 9}).iteration, 0u);
  EXPECT_EQ(FindStepOnset(std::vector<double>{}).iteration, 0u);
}

TEST(StepOnset, APauseEveryOtherIterationIsNoLevel) {
  // Intermittent pauses after the onset: not every later iteration is above the earlier ones.
  EXPECT_EQ(FindStepOnset(std::vector<double>{0, 0, 0, 0, 0, 0, 15, 0, 15, 0, 15, 0}).iteration,
            0u);
}

}  // namespace
}  // namespace perftracker
