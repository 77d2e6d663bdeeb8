#include "perftracker/summary/iteration_breakdown.h"

namespace perftracker {

IterationBreakdown MeanBreakdown(const WorkerSummary& worker) {
  IterationBreakdown mean;
  if (worker.iterations.empty()) return mean;
  for (const IterationSummary& it : worker.iterations) {
    mean.duration_ns += static_cast<double>(it.duration_ns);
    mean.compute_ns += static_cast<double>(it.compute_ns);
    mean.communication_ns += static_cast<double>(it.communication_ns);
    mean.wait_ns += static_cast<double>(it.wait_ns);
    mean.data_ns += static_cast<double>(it.data_ns);
    mean.host_only_ns += static_cast<double>(it.host_only_ns);
  }
  const auto n = static_cast<double>(worker.iterations.size());
  for (double* part : {&mean.duration_ns, &mean.compute_ns, &mean.communication_ns, &mean.wait_ns,
                       &mean.data_ns, &mean.host_only_ns}) {
    *part /= n;
  }
  return mean;
}

}  // namespace perftracker
