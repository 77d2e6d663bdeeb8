#include "perftracker/core/metric_sampler.h"

namespace perftracker {

void MetricSampler::TakeProblems(std::vector<SampleProblemCount>* out) {
  out->insert(out->end(), problems_.begin(), problems_.end());
  problems_.clear();
}

void MetricSampler::CountProblem(int32_t pid, SampleProblem problem, uint64_t count) {
  for (SampleProblemCount& p : problems_) {
    if (p.pid == pid && p.problem == problem) {
      p.count += count;
      return;
    }
  }
  problems_.push_back({pid, problem, count});
}

}  // namespace perftracker
