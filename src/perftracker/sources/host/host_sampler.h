// HostSampler: the node collector's view of the host while a window runs — per training
// process CPU time, run-queue delay (CPU contention), context switches and memory, and per
// network interface the bytes sent and received. (Algorithm: see host_sampler.cc.)
//
// The seam is the file system: everything is read below proc_root and sys_root, so tests
// build a fixture tree with the real file formats (dynolog's test root). Missing processes
// and unreadable files are counted in stats(), never fatal.
//
// Not thread-safe: one collector thread calls Sample() periodically.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "perftracker/core/metric_sample.h"
#include "perftracker/core/metric_sampler.h"

namespace perftracker {

struct HostSamplerStats {
  uint64_t samples = 0;           // Sample() calls
  uint64_t vanished_pids = 0;     // asked for a pid whose /proc entry was gone
  uint64_t unreadable_files = 0;  // a file that could not be read or parsed
  std::string first_problem;      // the first unreadable file, with why
};

class HostSampler : public MetricSampler {
 public:
  explicit HostSampler(std::string proc_root = "/proc", std::string sys_root = "/sys");

  // Appends to *out the samples at now_ns for each pid and the host. Rates and fractions
  // come from the change since the previous Sample() that saw the same pid / interface, so
  // the first call yields only levels (kMemoryRssBytes). Per-pid samples carry
  // source = pid; interface samples carry source = the interface's ifindex.
  //   kCpuUtilization               CPU time of all threads / wall time (1.0 = one core)
  //   kRunQueueDelayFraction        time threads were runnable but waited for a CPU, summed
  //                                 over the process's threads / wall time
  //   kTimeslicesPerSec             times the process's threads were put on a CPU, per second
  //   kMainThreadRunQueueFraction / kMainThreadTimeslicesPerSec  the same for the main
  //                                 thread alone (tid == pid)
  //   kCommThreadRunQueueFraction / kCommThreadTimeslicesPerSec  the same summed over the
  //                                 pid's communication threads (SetCommThreads; not the
  //                                 main thread), those seen in both calls
  //   kVoluntaryCtxSwitchesPerSec   summed over threads
  //   kInvoluntaryCtxSwitchesPerSec summed over threads
  //   kMemoryRssBytes               resident set size
  //   kCpuStealFraction             the host's steal time over all its CPU time (/proc/stat:
  //                                 the hypervisor ran other guests), host-wide, given with
  //                                 each pid's CPU samples
  //   kNicTxBytesPerSec / kNicRxBytesPerSec  per interface except loopback (pid -1)
  void Sample(int64_t now_ns, const std::vector<int32_t>& pids,
              std::vector<PidSample>* out) override;
  // Kept while `pid` is asked for; the main thread (tid == pid) is never one of them.
  void SetCommThreads(int32_t pid, const std::vector<int32_t>& tids) override;

  const HostSamplerStats& stats() const { return stats_; }

 private:
  struct ThreadState {
    uint64_t cpu_ns = 0;
    uint64_t run_delay_ns = 0;
    uint64_t timeslices = 0;  // times put on a CPU (schedstat's third field)
    uint64_t voluntary = 0;
    uint64_t involuntary = 0;
  };
  struct PidState {
    int64_t time_ns = 0;
    uint64_t cpu_ticks = 0;
    std::map<int32_t, ThreadState> threads;
  };
  struct NicState {
    int64_t time_ns = 0;
    uint64_t tx_bytes = 0;
    uint64_t rx_bytes = 0;
  };

  struct HostCpuState {
    bool valid = false;
    uint64_t steal = 0;  // /proc/stat "cpu" line, clock ticks of all CPUs
    uint64_t total = 0;
  };

  bool SamplePid(int64_t now_ns, int32_t pid, std::vector<PidSample>* out);
  // The steal fraction since the previous call (reads /proc/stat); -1 when unknown.
  double SampleSteal();
  void SampleNics(int64_t now_ns, std::vector<PidSample>* out);
  void Unreadable(int32_t pid, const std::string& path, const char* why);  // pid -1: host-wide

  std::string proc_root_;
  std::string sys_root_;
  double ticks_per_s_ = 100;
  double page_bytes_ = 4096;
  std::map<int32_t, PidState> pids_;
  std::map<int32_t, std::set<int32_t>> comm_tids_;  // by pid
  std::map<std::string, NicState> nics_;
  HostCpuState host_cpu_;
  double steal_fraction_ = -1;  // of the current Sample() call's interval; -1 unknown
  HostSamplerStats stats_;
};

}  // namespace perftracker
