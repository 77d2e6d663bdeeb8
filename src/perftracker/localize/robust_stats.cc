#include "perftracker/localize/robust_stats.h"

#include <algorithm>
#include <cmath>

namespace perftracker {

double UpperMedianInPlace(std::span<float> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  return values[mid];
}

double MedianInPlace(std::span<float> values) {
  if (values.empty()) return 0;
  const double upper = UpperMedianInPlace(values);
  if (values.size() % 2 == 1) return upper;
  const size_t mid = values.size() / 2;
  // nth_element leaves every element before `mid` <= values[mid]: the lower middle is
  // their maximum.
  const double lower =
      *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

double SortedMedianWithout(std::span<const float> sorted, size_t skip) {
  if (sorted.size() < 2) return 0;
  const size_t m = sorted.size() - 1;  // the others
  auto at = [&](size_t k) { return static_cast<double>(sorted[k < skip ? k : k + 1]); };
  const size_t mid = m / 2;
  return m % 2 == 1 ? at(mid) : (at(mid - 1) + at(mid)) / 2;
}

RobustCenter MedianAndMadInPlace(std::span<float> values) {
  RobustCenter c;
  c.median = MedianInPlace(values);
  for (float& v : values) v = static_cast<float>(std::fabs(static_cast<double>(v) - c.median));
  c.mad = MedianInPlace(values);
  return c;
}

double RobustScale(const RobustCenter& center, double relative_floor, double absolute_floor) {
  return std::max(
      {kMadToSigma * center.mad, relative_floor * std::fabs(center.median), absolute_floor});
}

}  // namespace perftracker
