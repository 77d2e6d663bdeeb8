#include "perftracker/collector/node_sampler.h"

#include <cstdio>

#include "perftracker/sources/host/host_sampler.h"
#include "perftracker/sources/host/tcp_sampler.h"
#include "perftracker/sources/ib/ib_sampler.h"
#include "perftracker/sources/nvml/nvml_sampler.h"

namespace perftracker {

NodeSampler::NodeSampler(const std::string& proc_root, const std::string& sys_root) {
  samplers_.push_back(std::make_unique<HostSampler>(proc_root, sys_root));
  // Each rank's TCP connections: what they deliver, and at what rate (PT-NET-SLOW-LINK).
  auto tcp = std::make_unique<TcpSampler>(proc_root);
  tcp_ = tcp.get();
  samplers_.push_back(std::move(tcp));
  // RDMA ports and link state (sysfs, host-wide), then the GPUs (each GPU's samples given to
  // the pids running on it): docs/gpu-sources.md.
  samplers_.push_back(std::make_unique<IbSampler>(sys_root));
  samplers_.push_back(std::make_unique<NvmlSampler>());
}

NodeSampler::~NodeSampler() = default;

void NodeSampler::Sample(int64_t now_ns, const std::vector<int32_t>& pids,
                         std::vector<PidSample>* out) {
  std::vector<SampleProblemCount> problems;
  for (const auto& sampler : samplers_) {
    sampler->Sample(now_ns, pids, out);
    sampler->TakeProblems(&problems);
  }
  for (const SampleProblemCount& p : problems) CountProblem(p.pid, p.problem, p.count);
  if (!tcp_told_ && !tcp_->stats().first_problem.empty()) {
    tcp_told_ = true;
    std::fprintf(stderr, "perftracker: TCP samples: %s\n", tcp_->stats().first_problem.c_str());
  }
}

void NodeSampler::SetCommThreads(int32_t pid, const std::vector<int32_t>& tids) {
  for (const auto& sampler : samplers_) sampler->SetCommThreads(pid, tids);
}

std::unique_ptr<MetricSampler> MakeHostSampler(const std::string& proc_root,
                                               const std::string& sys_root) {
  return std::make_unique<NodeSampler>(proc_root, sys_root);
}

}  // namespace perftracker
