// NodeSampler: the collector's one sampler of a host, every MetricSampler of sources/ in
// turn: the processes' /proc (sources/host/HostSampler), their TCP connections (TcpSampler),
// RDMA ports and link state (sources/ib/IbSampler) and the GPUs (sources/nvml/NvmlSampler,
// libnvidia-ml when present; a host without it says so once). Their problems are its own
// (TakeProblems), so the collector counts them into the workers' window summaries.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "perftracker/core/metric_sampler.h"

namespace perftracker {

class TcpSampler;

class NodeSampler : public MetricSampler {
 public:
  explicit NodeSampler(const std::string& proc_root = "/proc",
                       const std::string& sys_root = "/sys");
  ~NodeSampler() override;

  void Sample(int64_t now_ns, const std::vector<int32_t>& pids,
              std::vector<PidSample>* out) override;
  void SetCommThreads(int32_t pid, const std::vector<int32_t>& tids) override;

 private:
  std::vector<std::unique_ptr<MetricSampler>> samplers_;
  TcpSampler* tcp_ = nullptr;  // in samplers_
  bool tcp_told_ = false;      // its first problem was logged
};

// The collector's sampler of this host (a NodeSampler).
std::unique_ptr<MetricSampler> MakeHostSampler(const std::string& proc_root = "/proc",
                                               const std::string& sys_root = "/sys");

}  // namespace perftracker
