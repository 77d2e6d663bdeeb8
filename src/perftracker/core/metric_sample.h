// MetricSample: one hardware / host measurement at a point in time (NVML, /proc, NIC, ...).
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

namespace perftracker {

enum class Metric : uint16_t {
  kGpuSmActivity = 0,    // fraction 0..1
  kGpuDramActivity = 1,  // fraction 0..1
  kGpuSmClockMhz = 2,
  kGpuThrottleReasons = 3,  // bit mask
  kPcieTxBytesPerSec = 4,
  kPcieRxBytesPerSec = 5,
  kNvlinkBytesPerSec = 6,
  kNicTxBytesPerSec = 7,
  kNicRxBytesPerSec = 8,
  kCpuUtilization = 9,          // fraction of one core
  kRunQueueDelayFraction = 10,  // run-queue wait time / wall time
  kMemoryRssBytes = 11,
  kVoluntaryCtxSwitchesPerSec = 12,    // all threads of a process (blocking, waiting)
  kInvoluntaryCtxSwitchesPerSec = 13,  // all threads of a process (preempted: contention)
  kGpuUtilization = 14,                // fraction 0..1 of time a kernel ran (NVML utilization.gpu)
  kGpuMemoryUtilization = 15,          // fraction 0..1 of time device memory was read or written
  kGpuTemperatureC = 16,
  kGpuPowerWatts = 17,
  kIbTxBytesPerSec = 18,  // InfiniBand / RoCE port (source: port index)
  kIbRxBytesPerSec = 19,
  kNicLinkUp = 20,           // 1 link up, 0 down (carrier / IB port state); flaps show as 0s
  kGpuSmClockMaxMhz = 21,    // the GPU's maximum SM clock (the expectation for kGpuSmClockMhz)
  kTcpSendBytesPerSec = 22,  // bytes a process's TCP connections delivered (peer acked)
  kTcpDeliveryRateBytesPerSec = 23,  // the kernel's delivery rate of its busiest connection
  // The run-queue wait of a process's main thread (tid == pid: the training loop's) / wall
  // time: 0..1. The process-wide kRunQueueDelayFraction sums every thread (gloo, autograd,
  // the agent's), whose waits blur whether the training thread itself was starved.
  kMainThreadRunQueueFraction = 24,
  // How often a process's threads were put on a CPU (schedstat's third field, summed over
  // threads) per second, and its main thread's alone: the run-queue delay per timeslice
  // (delay fraction / this rate) is how crowded the CPUs it ran on were, whatever share of
  // the time the thread wanted to run or how often it woke.
  kTimeslicesPerSec = 25,
  kMainThreadTimeslicesPerSec = 26,
  // Seconds a process's busy TCP connections took to deliver what they delivered, at the
  // kernel's delivery rate of each when it was sampled, per second of wall time: the time
  // its bytes spent on their paths. Bytes delivered / this is its delivery rate weighted by
  // bytes (a harmonic mean), which a few samples of a burst at line rate cannot inflate.
  kTcpWireSecondsPerSec = 27,
  // The share of the host's CPU time taken by the hypervisor for other guests (/proc/stat's
  // steal over all of its CPU time: 0..1, host-wide). On a VM a thread's second of CPU work
  // then takes 1 / (1 - steal) seconds, a stretch that no run-queue wait shows: the thread
  // was running, from the guest's view, while its virtual CPU was not.
  kCpuStealFraction = 28,
  // The run-queue wait / wall time (summed, may exceed 1) and the turns on a CPU per second
  // of a process's communication threads: those its agent saw complete a collective that
  // another thread started (gloo's worker threads, which run DDP's all-reduce during
  // backward; docs/agent-protocol.md, `comm_thread`). A crowded CPU slows them without the
  // training thread showing it; compared across ranks, the same role waits alike per turn.
  kCommThreadRunQueueFraction = 29,
  kCommThreadTimeslicesPerSec = 30,
};
inline constexpr int kNumMetrics = 31;

std::string_view MetricName(Metric metric);

struct MetricSample {
  int64_t time_ns = 0;
  double value = 0;
  uint32_t source = 0;  // device index, interface index or thread id the sample belongs to
  Metric metric = Metric::kGpuSmActivity;
  uint16_t reserved = 0;
};
static_assert(std::is_trivially_copyable_v<MetricSample>);

}  // namespace perftracker
