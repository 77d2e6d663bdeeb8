// TcpSampler: the node collector's view of each training process's TCP connections while a
// window runs — how many bytes they delivered, and at what rate the busiest one delivered
// them (the kernel's own measure of the path's rate). A rank behind a slow link (a NIC
// negotiated down, a rate-limited port, a congested uplink) delivers at a fraction of its
// peers' rate: the localizer's PT-NET-SLOW-LINK. (Algorithm: see tcp_sampler.cc.)
//
// Reads the processes' own sockets (pidfd_getfd + getsockopt(TCP_INFO)), so it works in
// any network namespace; it needs ptrace rights over the pids (their ancestor, as
// `perftracker run` is, or the same user without Yama restrictions, or root). A pid it may
// not read is reported once in stats() and skipped, never fatal.
//
// Not thread-safe: one collector thread calls Sample() periodically.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "perftracker/core/metric_sampler.h"

namespace perftracker {

struct TcpSamplerStats {
  uint64_t samples = 0;             // Sample() calls
  uint64_t vanished_pids = 0;       // asked for a pid that was gone
  uint64_t unreadable_pids = 0;     // pids whose sockets could not be read (permission)
  uint64_t truncated = 0;           // samples that stopped at kMaxSockets sockets of one pid
  uint64_t host_local_skipped = 0;  // connection readings left out: both ends on this host
  std::string first_problem;
};

class TcpSampler : public MetricSampler {
 public:
  // Sockets read per pid and sample at most (a bound on the cost of a process with very
  // many connections; the largest senders are almost always among the first fds).
  static constexpr int kMaxSockets = 256;
  // A connection counts as busy in an interval when it delivered at least this much.
  static constexpr uint64_t kBusyBytes = 64 * 1024;

  // host_local: also sample connections whose two ends are on this host (tests use
  // loopback connections); perftracker leaves them out (tcp_sampler.cc).
  explicit TcpSampler(std::string proc_root = "/proc", bool host_local = false);
  ~TcpSampler();
  TcpSampler(const TcpSampler&) = delete;
  TcpSampler& operator=(const TcpSampler&) = delete;

  // Appends per pid (source 0), from the second call that saw the pid on:
  //   kTcpSendBytesPerSec          bytes its established TCP connections delivered (acked by
  //                                the peer) per second, summed
  //   kTcpDeliveryRateBytesPerSec  the kernel's latest delivery-rate estimate of the
  //                                connection that delivered the most, when it was busy
  //                                (>= kBusyBytes in the interval)
  //   kTcpWireSecondsPerSec        the seconds its busy connections took to deliver what
  //                                they delivered, each at its delivery-rate estimate, per
  //                                second (0 when none was busy)
  void Sample(int64_t now_ns, const std::vector<int32_t>& pids,
              std::vector<PidSample>* out) override;

  const TcpSamplerStats& stats() const { return stats_; }

  // The rate at which a busy connection's bytes count in the wire time: its rate sample, or,
  // when the kernel marked the sample app-limited (the sender had too little to send to fill
  // the path: a lower bound of the path's rate, draft-cheng-iccrg-delivery-rate-estimation),
  // the connection's best sample so far when that is higher (as BBR's max filter takes
  // app-limited samples only when they raise it).
  static uint64_t TcpRateForWireTime(uint64_t sample, bool app_limited, uint64_t best);

 private:
  struct PidState {
    int pidfd = -1;
    bool denied = false;
    int64_t time_ns = 0;
    std::map<uint64_t, uint64_t> acked;  // socket inode -> tcpi_bytes_acked at time_ns
    // socket inode -> the highest delivery rate sampled on it (bytes per second): what an
    // app-limited sample, a lower bound, is lifted to (TcpRateForWireTime).
    std::map<uint64_t, uint64_t> best_rate;
  };

  bool SamplePid(int64_t now_ns, int32_t pid, PidState* state, std::vector<PidSample>* out);
  void Problem(const std::string& what);

  std::string proc_root_;
  bool host_local_;
  std::map<int32_t, PidState> pids_;
  TcpSamplerStats stats_;
};

}  // namespace perftracker
