// StepOnset: where a function's time per iteration steps up and stays up (a fault that
// begins inside the window: GC pauses from iteration 9 of 12, a layer that slows down).
// Averaged over the whole window such a fault is diluted (15 ms from iteration 9 of 12 is
// 3.75 ms per iteration); from its onset on it costs its full size in every iteration, and
// that is what the localizer judges it by.
//
// A step at iteration k (the first iteration of the higher level) is reported when every
// iteration from k on is above every iteration before it, the two levels differ by at least
// kMinStepSigmas standard deviations of the iterations about their own level and by
// kMinStepShare of the higher level, and at least kMinBefore iterations precede it and
// kMinAfter follow (a baseline and a level: not one slow iteration, nor the two that one
// burst of load makes when a rank loses its core for a few ms in each of two iterations in
// a row; a preempted CPU op on a busy host steps from 2 to 6 ms like that). Of the qualifying
// steps, the one with the largest step x sqrt(k (n - k) / n) (the two-sample statistic) wins.
// Independent noise almost never passes: it needs a gap of several standard deviations
// between the two groups of iterations.
#pragma once

#include <cstdint>
#include <span>

namespace perftracker {

struct StepOnset {
  uint32_t iteration = 0;  // first iteration of the higher level; 0 = no step
  double after_sum = 0;    // time in the iterations from `iteration` on
  double before_mean = 0;  // mean time per iteration before it
  double after_mean = 0;   // and from it on
};

inline constexpr uint32_t kMinBefore = 3;
inline constexpr uint32_t kMinAfter = 3;
inline constexpr double kMinStepSigmas = 4;
inline constexpr double kMinStepShare = 0.1;

// `per_iteration`: the function's time in each iteration, in order.
StepOnset FindStepOnset(std::span<const double> per_iteration);

}  // namespace perftracker
