// IbSampler: InfiniBand / RoCE port throughput and link state, and Ethernet carrier, from
// sysfs, for the node collector's windows (host-wide samples, like the NIC byte counters of
// HostSampler, which this does not repeat).
//
//   /sys/class/infiniband/<dev>/ports/<port>/counters/port_xmit_data, port_rcv_data
//       data octets divided by 4 (IBA PortXmitData / PortRcvData; the kernel's sysfs-class-
//       infiniband ABI document): bytes = 4 x the counter. A rate between two samples:
//       kIbTxBytesPerSec / kIbRxBytesPerSec (none on the first sample; a counter that went
//       backwards - reset, or a 32-bit counter that wrapped - restarts the rate)
//   /sys/class/infiniband/<dev>/ports/<port>/state   "4: ACTIVE" -> kNicLinkUp 1, else 0
//   /sys/class/net/<if>/carrier                       "1" -> kNicLinkUp 1, "0" (or unreadable
//       while operstate is "down") -> 0; loopback and interfaces configured down (no IFF_UP
//       in /sys/class/net/<if>/flags: nothing uses them) skipped
// Source ids: an IB port is 0x10000 + device number x 256 + port, the device number being
// its rank in the sorted device names (mlx5_0 -> 0, mlx5_1 -> 1 ...); an interface is its
// ifindex (as in HostSampler), so the two never collide on hosts with < 65536 interfaces.
//
// The seam is sys_root: tests build a fixture tree in a temp dir. Missing directories (a host
// without RDMA) are normal and silent; unreadable or malformed files are counted with the
// first one kept. Not thread-safe: one collector thread samples.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "perftracker/core/metric_sample.h"
#include "perftracker/core/metric_sampler.h"

namespace perftracker {

struct IbSamplerStats {
  uint64_t samples = 0;
  uint64_t ports = 0;       // IB / RoCE ports seen by the last sample
  uint64_t interfaces = 0;  // net interfaces seen by the last sample
  uint64_t unreadable_files = 0;
  std::string first_problem;
};

class IbSampler : public MetricSampler {
 public:
  explicit IbSampler(std::string sys_root = "/sys");

  void Sample(int64_t now_ns, std::vector<MetricSample>* out);
  // MetricSampler: host-wide samples (pid -1); `pids` is unused.
  void Sample(int64_t now_ns, const std::vector<int32_t>& pids,
              std::vector<PidSample>* out) override;

  const IbSamplerStats& stats() const { return stats_; }
  // The source id of IB port `port` of the n-th device (sorted by name).
  static uint32_t PortSource(uint32_t device_number, uint32_t port) {
    return 0x10000u + device_number * 256u + port;
  }

 private:
  struct PortState {
    int64_t time_ns = 0;
    uint64_t xmit = 0;
    uint64_t rcv = 0;
  };
  void SamplePorts(int64_t now_ns, std::vector<MetricSample>* out);
  void SampleCarrier(int64_t now_ns, std::vector<MetricSample>* out);
  void Problem(const std::string& path, const char* why);

  std::string sys_root_;
  std::map<std::string, PortState> ports_;  // "<dev>/<port>"
  IbSamplerStats stats_;
};

}  // namespace perftracker
