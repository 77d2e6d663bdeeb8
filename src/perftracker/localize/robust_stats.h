// Robust statistics for comparing one value across the workers of a peer group.
//
// Median and MAD (median absolute deviation) instead of mean and standard deviation: one
// straggler among N peers must not drag the reference it is compared against. The robust
// z-score of x is (x - median) / (1.4826 * MAD); 1.4826 makes the MAD a consistent
// estimator of the standard deviation of normally distributed data, so z-scores read like
// ordinary ones (Iglewicz & Hoaglin's 3.5 is the usual outlier cut).
//
// MAD is 0 whenever more than half of the peers are identical (simulated jobs, counters,
// functions that run a fixed number of times); ScaleFloor() keeps the z-score finite and
// meaningful by never letting the scale fall below 1 % of the median or 1 microsecond.
#pragma once

#include <cstddef>
#include <span>

namespace perftracker {

inline constexpr double kMadToSigma = 1.4826;

struct RobustCenter {
  double median = 0;
  double mad = 0;
};

// Median of `values`; reorders them. 0 for an empty span. Even sizes average the two
// middle elements.
double MedianInPlace(std::span<float> values);

// The upper median of `values` (the element at size / 2 in sorted order: the median of an
// odd count, the larger middle one of an even count; with two values the larger); reorders
// them. 0 for an empty span.
double UpperMedianInPlace(std::span<float> values);

// The median of the other values when the one at `skip` is left out (leave-one-out: a
// worker against its peers), as MedianInPlace would give it, of values sorted ascending.
// O(1), so every worker of a large job can be compared with its peers in one sort. 0 when
// no other value is left.
double SortedMedianWithout(std::span<const float> sorted, size_t skip);

// Median and MAD of `values`; overwrites them with absolute deviations.
RobustCenter MedianAndMadInPlace(std::span<float> values);

// The scale robust z-scores divide by: 1.4826 * MAD, floored at max(relative_floor *
// |median|, absolute_floor).
double RobustScale(const RobustCenter& center, double relative_floor, double absolute_floor);

}  // namespace perftracker
