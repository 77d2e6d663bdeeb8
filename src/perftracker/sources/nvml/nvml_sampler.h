// NvmlSampler: per-GPU hardware metrics from NVML, for the node collector's windows.
//
// NVML is the driver's library (libnvidia-ml.so.1); it is dlopen()ed on first use with the
// functions resolved by name from our own declarations (nvml_types.h), so perftracker builds
// and runs without it. A missing library, a missing function or a device that does not
// support a query is said once (log) and sampling goes on with what exists.
//
// Metrics per device (MetricSample::source = NVML device index):
//   kGpuUtilization, kGpuMemoryUtilization   nvmlDeviceGetUtilizationRates, percent / 100
//   kGpuSmClockMhz                           nvmlDeviceGetClockInfo(SM)
//   kGpuSmClockMaxMhz                        nvmlDeviceGetMaxClockInfo(SM) (read once)
//   kGpuThrottleReasons                      nvmlDeviceGetCurrentClocksEventReasons (or the
//                                            older ...ClocksThrottleReasons): the bit mask
//   kGpuTemperatureC                         nvmlDeviceGetTemperature(GPU)
//   kGpuPowerWatts                           nvmlDeviceGetPowerUsage, mW / 1000
//   kPcieTxBytesPerSec, kPcieRxBytesPerSec   nvmlDeviceGetPcieThroughput, KB/s x 1024 (NVML
//                                            samples a 20 ms interval itself)
//   kNvlinkBytesPerSec                       nvmlDeviceGetFieldValues, NVLink data TX + RX
//                                            counters (KiB) summed over links, as a rate
//                                            between two samples (none on the first)
//   kGpuSmActivity, kGpuDramActivity         GPM (Hopper and newer): SM_UTIL, DRAM_BW_UTIL,
//                                            percent / 100
//   kNvlinkBytesPerSec (GPM)                 where the field-value counters give nothing:
//                                            GPM NVLINK_TOTAL_RX + _TX_PER_SEC, MiB/s x 2^20
//
// GPM: NVML computes its metrics between two samples the caller took. Each device with GPM
// support owns two sample buffers (allocated when the device is first sampled, freed in the
// destructor before nvmlShutdown): `prev`, read by the previous call that sampled the device,
// and `cur`. A call reads into `cur`, asks nvmlGpmMetricsGet for (prev, cur) when there is a
// prev, then swaps the two: the first call gives no GPM metrics, every later one covers the
// time since the previous call. A device without GPM (nvmlGpmQueryDeviceSupport says no:
// pre-Hopper) or a driver without the functions is said once like any unsupported query; a
// failing nvmlGpmMetricsGet or metric is counted in failed_queries and skipped; the rest goes on.
//
// Which rank a GPU belongs to: Sample() maps each device's compute processes
// (nvmlDeviceGetComputeRunningProcesses_v3) to the pids asked for, plus explicit hints
// (SetDeviceOfPid, e.g. from LOCAL_RANK) for pids NVML cannot see (another pid namespace).
//
// Not thread-safe: one collector thread samples.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "perftracker/core/metric_sample.h"
#include "perftracker/core/metric_sampler.h"
#include "perftracker/sources/nvml/nvml_types.h"

namespace perftracker {

struct NvmlSamplerOptions {
  std::string library = "libnvidia-ml.so.1";
  // Rate: a Sample() sooner than this after the previous one returns nothing (0: every call).
  int64_t min_interval_ns = 0;
  bool nvlink = true;
  bool gpm = true;  // SM / DRAM activity through NVML's GPM API (Hopper and newer)
  std::function<void(std::string_view)> log;  // default: stderr, "perftracker: ..."
};

struct NvmlSamplerStats {
  uint64_t samples = 0;         // Sample()/SampleDevices() calls that read the devices
  uint64_t failed_queries = 0;  // NVML calls that failed (other than "not supported")
  uint32_t devices = 0;
  bool available = false;  // library loaded and nvmlInit_v2 succeeded
};

class NvmlSampler : public MetricSampler {
 public:
  explicit NvmlSampler(NvmlSamplerOptions options = {});
  ~NvmlSampler();
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;

  // Every device's metrics at now_ns (source = device index).
  void SampleDevices(int64_t now_ns, std::vector<MetricSample>* out);
  // MetricSampler: the same metrics, each device's given to the pids running on it.
  void Sample(int64_t now_ns, const std::vector<int32_t>& pids,
              std::vector<PidSample>* out) override;
  // A pid's device when NVML does not list the pid (containers: other pid namespace).
  void SetDeviceOfPid(int32_t pid, uint32_t device) { device_hint_[pid] = device; }

  // Loads the library and initializes NVML if not done yet; false when unavailable.
  bool Init();
  const NvmlSamplerStats& stats() const { return stats_; }

 private:
  struct Fns {
    nvmlInit_v2_fn init = nullptr;
    nvmlShutdown_fn shutdown = nullptr;
    nvmlErrorString_fn error_string = nullptr;
    nvmlDeviceGetCount_v2_fn count = nullptr;
    nvmlDeviceGetHandleByIndex_v2_fn handle = nullptr;
    nvmlDeviceGetUtilizationRates_fn utilization = nullptr;
    nvmlDeviceGetClockInfo_fn clock = nullptr;
    nvmlDeviceGetClockInfo_fn max_clock = nullptr;
    nvmlDeviceGetClocksEventReasons_fn throttle = nullptr;
    nvmlDeviceGetTemperature_fn temperature = nullptr;
    nvmlDeviceGetPowerUsage_fn power = nullptr;
    nvmlDeviceGetPcieThroughput_fn pcie = nullptr;
    nvmlDeviceGetFieldValues_fn field_values = nullptr;
    nvmlDeviceGetComputeRunningProcesses_v3_fn processes = nullptr;
    nvmlGpmQueryDeviceSupport_fn gpm_support = nullptr;  // all five or none
    nvmlGpmSampleAlloc_fn gpm_alloc = nullptr;
    nvmlGpmSampleFree_fn gpm_free = nullptr;
    nvmlGpmSampleGet_fn gpm_sample = nullptr;
    nvmlGpmMetricsGet_fn gpm_metrics = nullptr;
  };
  struct Device {
    nvmlDevice_t handle = nullptr;
    double max_sm_clock = -1;
    uint32_t unsupported = 0;  // bit per Query: "not supported" answered once, not asked again
    bool have_nvlink = false;
    int64_t nvlink_time_ns = 0;
    unsigned long long nvlink_kib = 0;
    nvmlGpmSample_t gpm_prev = nullptr;  // both set, or neither: no GPM on this device
    nvmlGpmSample_t gpm_cur = nullptr;
    bool have_gpm_prev = false;
  };
  enum Query : uint32_t {
    kUtilization = 1u << 0,
    kClock = 1u << 1,
    kThrottle = 1u << 2,
    kTemperature = 1u << 3,
    kPower = 1u << 4,
    kPcie = 1u << 5,
    kNvlink = 1u << 6,
    kProcesses = 1u << 7,
    kGpm = 1u << 8,         // support query, sample buffers, nvmlGpmSampleGet
    kGpmMetrics = 1u << 9,  // nvmlGpmMetricsGet itself
    kGpmSmUtil = 1u << 10,  // one metric's nvmlReturn
    kGpmDramBwUtil = 1u << 11,
    kGpmNvlink = 1u << 12,
  };

  bool Due(int64_t now_ns);
  void SampleDevice(uint32_t index, Device& d, int64_t now_ns, std::vector<MetricSample>* out);
  // Asks d for GPM support and allocates its two sample buffers (said once when unsupported).
  void InitGpm(Device& d);
  // Reads d's GPM sample; appends the metrics since the previous one (none the first time).
  void SampleGpm(uint32_t index, Device& d, int64_t now_ns, std::vector<MetricSample>* out);
  // False (and said once per query) when the call failed.
  bool Ok(Device& d, Query q, const char* what, nvmlReturn_t r);
  std::string ErrorText(nvmlReturn_t r) const;
  void Log(const std::string& line);

  NvmlSamplerOptions options_;
  void* lib_ = nullptr;
  bool tried_ = false;
  bool initialized_ = false;
  Fns fn_;
  std::vector<Device> devices_;
  uint32_t said_ = 0;  // Query bits already reported
  bool said_unmatched_ = false;
  int64_t last_sample_ns_ = 0;
  bool sampled_once_ = false;
  std::map<int32_t, uint32_t> device_hint_;
  std::vector<nvmlProcessInfo_v2_t> process_buf_;
  NvmlSamplerStats stats_;
};

}  // namespace perftracker
