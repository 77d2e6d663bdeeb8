#include "perftracker/summary/step_onset.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace perftracker {

StepOnset FindStepOnset(std::span<const double> x) {
  StepOnset best;
  const size_t n = x.size();
  if (n < kMinBefore + kMinAfter) return best;
  // Prefix sums, prefix max and suffix min: every split in O(1) after O(n).
  std::vector<double> sum(n + 1, 0), sum_sq(n + 1, 0), prefix_max(n), suffix_min(n);
  for (size_t i = 0; i < n; ++i) {
    sum[i + 1] = sum[i] + x[i];
    sum_sq[i + 1] = sum_sq[i] + x[i] * x[i];
    prefix_max[i] = i == 0 ? x[i] : std::max(prefix_max[i - 1], x[i]);
  }
  for (size_t i = n; i-- > 0;)
    suffix_min[i] = i + 1 == n ? x[i] : std::min(suffix_min[i + 1], x[i]);
  double best_score = 0;
  for (size_t k = kMinBefore; k + kMinAfter <= n; ++k) {
    if (suffix_min[k] <= prefix_max[k - 1]) continue;
    const auto nb = static_cast<double>(k);
    const auto na = static_cast<double>(n - k);
    const double before = sum[k] / nb;
    const double after = (sum[n] - sum[k]) / na;
    const double step = after - before;
    if (step < kMinStepShare * after) continue;
    // Pooled variance about each level.
    const double ss_before = sum_sq[k] - nb * before * before;
    const double ss_after = (sum_sq[n] - sum_sq[k]) - na * after * after;
    const double sigma = std::sqrt(std::max(0.0, ss_before + ss_after) / static_cast<double>(n));
    if (step < kMinStepSigmas * sigma) continue;
    const double score = step * std::sqrt(nb * na / static_cast<double>(n));
    if (score > best_score) {
      best_score = score;
      best.iteration = static_cast<uint32_t>(k);
      best.after_sum = sum[n] - sum[k];
      best.before_mean = before;
      best.after_mean = after;
    }
  }
  return best;
}

}  // namespace perftracker
