#include "perftracker/server/embedded/no_window_explanation.h"

#include <algorithm>
#include <limits>

#include <fmt/core.h>

namespace perftracker {
namespace {

struct Rise {
  double ratio = 0;  // mean of N / shortest earlier mean of N, minus 1 (0 when fewer than N)
  bool full = false;
};

// The detector's rule over one rank's whole history: the largest rise of an N-mean over the
// shortest N-mean up to it.
Rise LargestRise(const std::vector<int64_t>& d, size_t n) {
  Rise out;
  if (n == 0 || d.size() < n) return out;
  out.full = true;
  int64_t sum = 0;
  double shortest = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < d.size(); ++i) {
    sum += d[i];
    if (i >= n) sum -= d[i - n];
    if (i + 1 < n) continue;
    const double mean = static_cast<double>(sum) / static_cast<double>(n);
    shortest = std::min(shortest, mean);
    if (shortest > 0) out.ratio = std::max(out.ratio, mean / shortest - 1.0);
  }
  return out;
}

double MedianMs(std::vector<int64_t> all) {
  if (all.empty()) return 0;
  const size_t mid = all.size() / 2;
  std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(mid), all.end());
  return static_cast<double>(all[mid]) / 1e6;
}

}  // namespace

std::string ExplainNoWindow(const std::map<int32_t, std::vector<int64_t>>& durations_ns,
                            int window_iterations, double slowdown_ratio) {
  size_t ranks = 0;
  size_t fewest = std::numeric_limits<size_t>::max();
  size_t most = 0;
  std::vector<int64_t> all;
  for (const auto& [rank, d] : durations_ns) {
    if (d.empty()) continue;
    ++ranks;
    fewest = std::min(fewest, d.size());
    most = std::max(most, d.size());
    all.insert(all.end(), d.begin(), d.end());
  }
  if (ranks == 0) {
    return "perftracker: no rank reported a training iteration: the detector learns the loop "
           "from DataLoader next() and optimizer.step() (a loop without them can call "
           "perftracker.step() once per iteration); --trigger-at-seconds takes a window "
           "anyway\n";
  }
  const std::string count = fewest == most
                                ? fmt::format("{} iteration{}", most, most == 1 ? "" : "s")
                                : fmt::format("{}-{} iterations", fewest, most);
  std::string out =
      fmt::format("perftracker: the detector saw {} on {} rank{} (median {:.1f} ms); ", count,
                  ranks, ranks == 1 ? "" : "s", MedianMs(std::move(all)));
  const size_t n = static_cast<size_t>(std::max(window_iterations, 1));
  int32_t worst_rank = -1;
  Rise worst;
  for (const auto& [rank, d] : durations_ns) {
    const Rise r = LargestRise(d, n);
    if (r.full && (worst_rank < 0 || r.ratio > worst.ratio)) {
      worst = r;
      worst_rank = rank;
    }
  }
  if (worst_rank < 0) {
    return out + fmt::format(
                     "a slowdown needs {} iterations (--window-iterations) before it can "
                     "trigger\n",
                     n);
  }
  const int rise_pct = static_cast<int>(worst.ratio * 100.0 + 0.5);
  const int bar_pct = static_cast<int>(slowdown_ratio * 100.0 + 0.5);
  if (rise_pct == 0) {
    return out +
           fmt::format("the mean of {} iterations never rose above the shortest before it\n", n);
  }
  if (worst.ratio <= slowdown_ratio) {
    return out + fmt::format(
                     "the mean of {} iterations rose at most {}% above the shortest before it "
                     "(rank {}), under the {}% of --slowdown-ratio\n",
                     n, rise_pct, worst_rank, bar_pct);
  }
  return out + fmt::format(
                   "the mean of {} iterations rose {}% above the shortest before it (rank {}), "
                   "over the {}% of --slowdown-ratio, yet no window was taken (the lines above "
                   "say why)\n",
                   n, rise_pct, worst_rank, bar_pct);
}

}  // namespace perftracker
