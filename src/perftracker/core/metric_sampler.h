// MetricSampler: what every node-side sampler (the host's /proc, its TCP connections, RDMA
// ports, the GPUs through NVML) is to the collector: called periodically during a window with
// the training processes' pids, it appends their samples and the host-wide ones.
//
// A sampler computes rates against its previous call, so the first call may return only
// levels. It is not thread-safe: one collector thread calls Sample(). Problems (a vanished
// pid, an unreadable file, a missing library) are counted in the sampler's own stats, never
// fatal.
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

class MetricSampler {
 public:
  virtual ~MetricSampler() = default;
  // Appends to *out the samples at now_ns (CLOCK_REALTIME) for each of pids and the host.
  virtual void Sample(int64_t now_ns, const std::vector<int32_t>& pids,
                      std::vector<PidSample>* out) = 0;
};

}  // namespace perftracker
