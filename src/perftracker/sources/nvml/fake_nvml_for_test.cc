// A fake libnvidia-ml.so for the NVML sampler's tests: the same C ABI (nvml_types.h), values
// scripted through fake_nvml_state. Built twice: complete, and with FAKE_NVML_MINIMAL (no power,
// no field values, no process list, no GPM, only the older throttle-reasons name) to test
// functions that a library lacks.
#include "perftracker/sources/nvml/fake_nvml_for_test.h"

extern "C" {

__attribute__((visibility("default"))) FakeNvmlState fake_nvml_state;

namespace {
FakeNvmlDevice* Dev(nvmlDevice_t d) { return reinterpret_cast<FakeNvmlDevice*>(d); }
}  // namespace

__attribute__((visibility("default"))) nvmlReturn_t nvmlInit_v2() {
  ++fake_nvml_state.init_calls;
  return fake_nvml_state.init_result;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlShutdown() {
  ++fake_nvml_state.shutdown_calls;
  return kNvmlSuccess;
}
__attribute__((visibility("default"))) const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case kNvmlErrorNotSupported:
      return "Not Supported";
    case kNvmlErrorDriverNotLoaded:
      return "Driver Not Loaded";
    case kNvmlErrorGpuIsLost:
      return "GPU is lost";
    default:
      return "Unknown Error";
  }
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* n) {
  *n = fake_nvml_state.count;
  return kNvmlSuccess;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i,
                                                                                  nvmlDevice_t* d) {
  if (i >= fake_nvml_state.count || i >= 4) return 2;
  *d = reinterpret_cast<nvmlDevice_t>(&fake_nvml_state.devices[i]);
  return kNvmlSuccess;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUtilizationRates(
    nvmlDevice_t d, nvmlUtilization_t* u) {
  u->gpu = Dev(d)->util_gpu;
  u->memory = Dev(d)->util_memory;
  return kNvmlSuccess;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type,
                                                                           unsigned int* mhz) {
  if (type != kNvmlClockSm) return 2;
  *mhz = Dev(d)->sm_clock;
  return kNvmlSuccess;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d,
                                                                              int type,
                                                                              unsigned int* mhz) {
  if (type != kNvmlClockSm) return 2;
  *mhz = Dev(d)->sm_clock_max;
  return kNvmlSuccess;
}
#ifndef FAKE_NVML_MINIMAL
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(
    nvmlDevice_t d, unsigned long long* reasons) {
  *reasons = Dev(d)->throttle;
  return kNvmlSuccess;
}
#else
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(
    nvmlDevice_t d, unsigned long long* reasons) {
  *reasons = Dev(d)->throttle;
  return kNvmlSuccess;
}
#endif
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d,
                                                                             int sensor,
                                                                             unsigned int* c) {
  if (sensor != kNvmlTemperatureGpu) return 2;
  if (Dev(d)->temperature_result != kNvmlSuccess) return Dev(d)->temperature_result;
  *c = Dev(d)->temperature;
  return kNvmlSuccess;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d,
                                                                                int counter,
                                                                                unsigned int* kb) {
  *kb = counter == kNvmlPcieUtilTxBytes ? Dev(d)->pcie_tx_kb : Dev(d)->pcie_rx_kb;
  return kNvmlSuccess;
}
#ifndef FAKE_NVML_MINIMAL
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d,
                                                                            unsigned int* mw) {
  if (Dev(d)->power_result != kNvmlSuccess) return Dev(d)->power_result;
  *mw = Dev(d)->power_mw;
  return kNvmlSuccess;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetFieldValues(
    nvmlDevice_t d, int n, nvmlFieldValue_t* values) {
  if (Dev(d)->nvlink_fields_result != kNvmlSuccess) return Dev(d)->nvlink_fields_result;
  for (int i = 0; i < n; ++i) {
    nvmlFieldValue_t& v = values[i];
    v.valueType = kNvmlValueTypeUnsignedLongLong;
    if (static_cast<int>(v.scopeId) >= Dev(d)->nvlink_links) {
      v.nvmlReturn = kNvmlErrorNotSupported;
      continue;
    }
    if (v.fieldId == kNvmlFiNvlinkThroughputDataTx) {
      v.nvmlReturn = kNvmlSuccess;
      v.value.ullVal = Dev(d)->nvlink_tx_kib;
    } else if (v.fieldId == kNvmlFiNvlinkThroughputDataRx) {
      v.nvmlReturn = kNvmlSuccess;
      v.value.ullVal = Dev(d)->nvlink_rx_kib;
    } else {
      v.nvmlReturn = 2;
    }
  }
  return kNvmlSuccess;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(
    nvmlDevice_t d, unsigned int* count, nvmlProcessInfo_v2_t* infos) {
  const unsigned int n = Dev(d)->num_pids;
  if (*count < n) {
    *count = n;
    return kNvmlErrorInsufficientSize;
  }
  for (unsigned int i = 0; i < n; ++i) {
    infos[i] = nvmlProcessInfo_v2_t{Dev(d)->pids[i], 1u << 30, 0xffffffffu, 0xffffffffu};
  }
  *count = n;
  return kNvmlSuccess;
}

// GPM. A sample remembers its device and the order it was read in; nvmlGpmMetricsGet checks
// the pair the way the sampler must use it (same device, sample1 read before sample2).
struct FakeGpmSample {
  FakeNvmlDevice* device = nullptr;
  unsigned long long sequence = 0;  // 0: never read
};
namespace {
unsigned long long gpm_sequence = 0;
FakeGpmSample* Sample(nvmlGpmSample_t s) { return reinterpret_cast<FakeGpmSample*>(s); }
constexpr nvmlReturn_t kNvmlErrorInvalidArgument = 2;
constexpr nvmlReturn_t kNvmlErrorArgumentVersionMismatch = 25;
}  // namespace

__attribute__((visibility("default"))) nvmlReturn_t nvmlGpmQueryDeviceSupport(
    nvmlDevice_t d, nvmlGpmSupport_t* support) {
  ++fake_nvml_state.gpm_calls;
  if (support->version != kNvmlGpmSupportVersion) return kNvmlErrorArgumentVersionMismatch;
  support->isSupportedDevice = Dev(d)->gpm_supported;
  return kNvmlSuccess;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t* s) {
  ++fake_nvml_state.gpm_calls;
  ++fake_nvml_state.gpm_samples_live;
  *s = reinterpret_cast<nvmlGpmSample_t>(new FakeGpmSample);
  return kNvmlSuccess;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t s) {
  ++fake_nvml_state.gpm_calls;
  --fake_nvml_state.gpm_samples_live;
  delete Sample(s);
  return kNvmlSuccess;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t d,
                                                                     nvmlGpmSample_t s) {
  ++fake_nvml_state.gpm_calls;
  if (Dev(d)->gpm_supported == 0) return kNvmlErrorNotSupported;
  Sample(s)->device = Dev(d);
  Sample(s)->sequence = ++gpm_sequence;
  return kNvmlSuccess;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t* get) {
  ++fake_nvml_state.gpm_calls;
  if (get->version != kNvmlGpmMetricsGetVersion) return kNvmlErrorArgumentVersionMismatch;
  const FakeGpmSample* first = Sample(get->sample1);
  const FakeGpmSample* second = Sample(get->sample2);
  if (get->numMetrics > kNvmlGpmMetricMax || first == nullptr || second == nullptr ||
      first->device == nullptr || first->device != second->device || first->sequence == 0 ||
      first->sequence >= second->sequence) {
    ++fake_nvml_state.gpm_bad_pairs;
    return kNvmlErrorInvalidArgument;
  }
  const FakeNvmlDevice& dev = *second->device;
  if (dev.gpm_metrics_result != kNvmlSuccess) return dev.gpm_metrics_result;
  for (unsigned int i = 0; i < get->numMetrics; ++i) {
    nvmlGpmMetric_t& m = get->metrics[i];
    m.nvmlReturn = kNvmlSuccess;
    switch (m.metricId) {
      case kNvmlGpmMetricSmUtil:
        m.value = dev.gpm_sm_util;
        break;
      case kNvmlGpmMetricDramBwUtil:
        m.nvmlReturn = dev.gpm_dram_result;
        m.value = dev.gpm_dram_bw_util;
        break;
      case kNvmlGpmMetricNvlinkTotalRxPerSec:
      case kNvmlGpmMetricNvlinkTotalTxPerSec:
        if (dev.nvlink_links == 0) {
          m.nvmlReturn = kNvmlErrorNotSupported;
        } else {
          m.value = m.metricId == kNvmlGpmMetricNvlinkTotalRxPerSec ? dev.gpm_nvlink_rx_mib
                                                                    : dev.gpm_nvlink_tx_mib;
        }
        break;
      default:
        m.nvmlReturn = kNvmlErrorInvalidArgument;
    }
  }
  return kNvmlSuccess;
}
#endif

}  // extern "C"
