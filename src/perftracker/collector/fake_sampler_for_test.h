// FakeSampler (tests only): a MetricSampler whose samples come from a function, and whose
// problems are whatever the test counts with AddProblem().
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "perftracker/core/metric_sampler.h"

namespace perftracker {

class FakeSampler : public MetricSampler {
 public:
  using SampleFn = std::function<void(int64_t now_ns, const std::vector<int32_t>& pids,
                                      std::vector<PidSample>* out)>;
  explicit FakeSampler(SampleFn sample = nullptr) : sample_(std::move(sample)) {}

  void Sample(int64_t now_ns, const std::vector<int32_t>& pids,
              std::vector<PidSample>* out) override {
    if (sample_) sample_(now_ns, pids, out);
    std::lock_guard<std::mutex> lock(mu_);
    for (const SampleProblemCount& p : each_call_) CountProblem(p.pid, p.problem, p.count);
  }
  void SetCommThreads(int32_t pid, const std::vector<int32_t>& tids) override {
    std::lock_guard<std::mutex> lock(mu_);
    comm_threads_[pid] = tids;
  }
  // What the collector last said of each pid's communication threads (any thread).
  std::map<int32_t, std::vector<int32_t>> comm_threads() {
    std::lock_guard<std::mutex> lock(mu_);
    return comm_threads_;
  }
  // Every later Sample() counts `count` of `problem` for `pid` (any thread).
  void AddProblem(int32_t pid, SampleProblem problem, uint64_t count) {
    std::lock_guard<std::mutex> lock(mu_);
    each_call_.push_back({pid, problem, count});
  }

 private:
  SampleFn sample_;
  std::mutex mu_;
  std::vector<SampleProblemCount> each_call_;
  std::map<int32_t, std::vector<int32_t>> comm_threads_;
};

}  // namespace perftracker
