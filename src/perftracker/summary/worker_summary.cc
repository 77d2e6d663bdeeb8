#include "perftracker/summary/worker_summary.h"

#include <algorithm>

namespace perftracker {

int64_t WorkerSummary::median_iteration_ns() const {
  if (iterations.empty()) return window_ns();
  std::vector<int64_t> d;
  d.reserve(iterations.size());
  for (const auto& it : iterations) d.push_back(it.duration_ns);
  std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2), d.end());
  return d[d.size() / 2];
}

}  // namespace perftracker
