// MetricSampler: what every node-side sampler (the host's /proc, its TCP connections, RDMA
// ports, the GPUs through NVML) is to the collector: called periodically during a window with
// the training processes' pids, it appends their samples and the host-wide ones.
//
// A sampler computes rates against its previous call, so the first call may return only
// levels. It is not thread-safe: one collector thread calls Sample(). Problems (a vanished
// pid, an unreadable file, a failed query) are never fatal: a sampler counts them in its own
// stats and, per process, as SampleProblems that the collector takes after each call and
// counts into the window summaries of the workers they concern (the data-quality counters,
// summary/data_quality_counters.h), so that a report says its metrics are short.
#pragma once

#include <cstdint>
#include <vector>

#include "perftracker/core/metric_sample.h"

namespace perftracker {

// A sample and the process it belongs to.
struct PidSample {
  int32_t pid = -1;  // -1 for host-wide samples (network interfaces, RDMA ports, links)
  MetricSample sample;
};

// What a sampler could not read.
enum class SampleProblem : uint8_t {
  kProcessGone,  // the process had exited: its /proc entries were gone
  kUnreadable,   // a file, the socket table or a library query failed
  kTruncated,    // a reading stopped at a bound (TcpSampler::kMaxSockets sockets of a pid)
};

// How often `problem` happened for `pid` (-1: the host's own metrics, which every worker of
// the host shares).
struct SampleProblemCount {
  int32_t pid = -1;
  SampleProblem problem = SampleProblem::kUnreadable;
  uint64_t count = 0;
};

class MetricSampler {
 public:
  virtual ~MetricSampler() = default;
  // Appends to *out the samples at now_ns (CLOCK_REALTIME) for each of pids and the host.
  virtual void Sample(int64_t now_ns, const std::vector<int32_t>& pids,
                      std::vector<PidSample>* out) = 0;

  // The threads of `pid` that run its communication (the OS thread ids its agent saw
  // complete collectives: docs/agent-protocol.md, `comm_thread`), for the following Sample()
  // calls; empty: none known. A sampler of per-thread counters samples them as a role of
  // their own (HostSampler's kCommThread* metrics); the others ignore it.
  virtual void SetCommThreads(int32_t /*pid*/, const std::vector<int32_t>& /*tids*/) {}

  // Appends to *out the problems counted since the last call, one entry per pid and kind,
  // and forgets them.
  void TakeProblems(std::vector<SampleProblemCount>* out);

 protected:
  void CountProblem(int32_t pid, SampleProblem problem, uint64_t count = 1);

 private:
  std::vector<SampleProblemCount> problems_;
};

}  // namespace perftracker
