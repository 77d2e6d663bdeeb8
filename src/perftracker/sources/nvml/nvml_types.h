// The part of NVML's C ABI that NvmlSampler uses, declared from NVML's documentation (no NVML
// header ships with the CUDA toolkit; the library, libnvidia-ml.so.1, comes with the driver).
// Shared by the sampler (which dlopen()s the real library) and the test suite's fake library.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

typedef int nvmlReturn_t;  // an enum in nvml.h; int-sized
inline constexpr nvmlReturn_t kNvmlSuccess = 0;
inline constexpr nvmlReturn_t kNvmlErrorNotSupported = 3;
inline constexpr nvmlReturn_t kNvmlErrorInsufficientSize = 7;
inline constexpr nvmlReturn_t kNvmlErrorDriverNotLoaded = 9;
inline constexpr nvmlReturn_t kNvmlErrorGpuIsLost = 15;

typedef struct nvmlDevice_st* nvmlDevice_t;

typedef struct {
  unsigned int gpu;     // percent of the last sample period a kernel was executing
  unsigned int memory;  // percent of the last sample period device memory was read or written
} nvmlUtilization_t;

// nvmlClockType_t
inline constexpr int kNvmlClockSm = 1;
// nvmlTemperatureSensors_t
inline constexpr int kNvmlTemperatureGpu = 0;
// nvmlPcieUtilCounter_t
inline constexpr int kNvmlPcieUtilTxBytes = 0;
inline constexpr int kNvmlPcieUtilRxBytes = 1;

// nvmlProcessInfo_t of nvmlDeviceGetComputeRunningProcesses_v3.
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;

typedef union {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  signed int siVal;
  unsigned short usVal;
} nvmlValue_t;

// nvmlValueType_t
inline constexpr int kNvmlValueTypeUnsignedLongLong = 3;

typedef struct {
  unsigned int fieldId;
  unsigned int scopeId;  // for NVLink fields: the link
  long long timestamp;
  long long latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
} nvmlFieldValue_t;

// Field ids (nvml.h): NVLink data throughput counters, KiB, per link (scopeId).
inline constexpr unsigned int kNvmlFiNvlinkThroughputDataTx = 138;
inline constexpr unsigned int kNvmlFiNvlinkThroughputDataRx = 139;
inline constexpr unsigned int kNvmlNvlinkMaxLinks = 18;

// GPM (GPU Performance Monitoring, Hopper and newer): metrics computed by the library between
// two samples the caller took. Ids, layouts and versions from NVIDIA's nvml.h: NVML 12.2.140 in
// NVIDIA/go-nvml (pkg/nvml/nvml.h) and the newer copy in NVIDIA/DCGM (sdk/nvidia/nvml/nvml.h),
// which agree on all of the following.
// Opaque, from nvmlGpmSampleAlloc (DCGM's form; go-nvml wraps the same pointer in a struct).
typedef struct nvmlGpmSample_st* nvmlGpmSample_t;

typedef struct {
  unsigned int version;            // in: kNvmlGpmSupportVersion
  unsigned int isSupportedDevice;  // out
} nvmlGpmSupport_t;
inline constexpr unsigned int kNvmlGpmSupportVersion = 1;  // NVML_GPM_SUPPORT_VERSION

typedef struct {
  unsigned int metricId;    // in: a kNvmlGpmMetric* id
  nvmlReturn_t nvmlReturn;  // out: value is valid only when this is kNvmlSuccess
  double value;             // out
  struct {
    char* shortName;
    char* longName;
    char* unit;
  } metricInfo;  // out: may be null
} nvmlGpmMetric_t;

// NVML_GPM_METRIC_MAX grows with the driver while NVML_GPM_METRICS_GET_VERSION stays 1: 98 in
// NVML 12.2.140 (go-nvml), 166 in DCGM's copy, 210 in NVIDIA's pynvml.py (nvidia-ml-py, as
// vendored in ray-project/ray python/ray/_private/thirdparty/pynvml/pynvml.py). The library can
// only go by numMetrics, so any array size above the metrics asked for is the same ABI; the
// largest of these is used.
inline constexpr unsigned int kNvmlGpmMetricMax = 210;
inline constexpr unsigned int kNvmlGpmMetricsGetVersion = 1;  // NVML_GPM_METRICS_GET_VERSION

typedef struct {
  unsigned int version;     // in: kNvmlGpmMetricsGetVersion
  unsigned int numMetrics;  // in: entries of metrics[] used
  nvmlGpmSample_t sample1;  // in: the earlier sample
  nvmlGpmSample_t sample2;  // in: the later sample
  nvmlGpmMetric_t metrics[kNvmlGpmMetricMax];
} nvmlGpmMetricsGet_t;

// nvmlGpmMetricId_t (nvml.h comments give the units).
inline constexpr unsigned int kNvmlGpmMetricSmUtil = 2;                // percent of SMs busy
inline constexpr unsigned int kNvmlGpmMetricDramBwUtil = 10;           // percent of peak DRAM BW
inline constexpr unsigned int kNvmlGpmMetricNvlinkTotalRxPerSec = 60;  // MiB/s, all links
inline constexpr unsigned int kNvmlGpmMetricNvlinkTotalTxPerSec = 61;  // MiB/s, all links

typedef nvmlReturn_t (*nvmlInit_v2_fn)();
typedef nvmlReturn_t (*nvmlShutdown_fn)();
typedef const char* (*nvmlErrorString_fn)(nvmlReturn_t);
typedef nvmlReturn_t (*nvmlDeviceGetCount_v2_fn)(unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByIndex_v2_fn)(unsigned int, nvmlDevice_t*);
typedef nvmlReturn_t (*nvmlDeviceGetUtilizationRates_fn)(nvmlDevice_t, nvmlUtilization_t*);
typedef nvmlReturn_t (*nvmlDeviceGetClockInfo_fn)(nvmlDevice_t, int, unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetClocksEventReasons_fn)(nvmlDevice_t, unsigned long long*);
typedef nvmlReturn_t (*nvmlDeviceGetTemperature_fn)(nvmlDevice_t, int, unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetPowerUsage_fn)(nvmlDevice_t, unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetPcieThroughput_fn)(nvmlDevice_t, int, unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetFieldValues_fn)(nvmlDevice_t, int, nvmlFieldValue_t*);
typedef nvmlReturn_t (*nvmlDeviceGetComputeRunningProcesses_v3_fn)(nvmlDevice_t, unsigned int*,
                                                                   nvmlProcessInfo_v2_t*);
typedef nvmlReturn_t (*nvmlGpmQueryDeviceSupport_fn)(nvmlDevice_t, nvmlGpmSupport_t*);
typedef nvmlReturn_t (*nvmlGpmSampleAlloc_fn)(nvmlGpmSample_t*);
typedef nvmlReturn_t (*nvmlGpmSampleFree_fn)(nvmlGpmSample_t);
typedef nvmlReturn_t (*nvmlGpmSampleGet_fn)(nvmlDevice_t, nvmlGpmSample_t);
typedef nvmlReturn_t (*nvmlGpmMetricsGet_fn)(nvmlGpmMetricsGet_t*);
}  // extern "C"

// The layouts above on LP64 (Linux x86-64 / aarch64), as nvml.h's definitions lay them out.
static_assert(sizeof(nvmlGpmSupport_t) == 8);
static_assert(offsetof(nvmlGpmMetric_t, value) == 8);
static_assert(sizeof(nvmlGpmMetric_t) == 40);
static_assert(offsetof(nvmlGpmMetricsGet_t, sample1) == 8);
static_assert(offsetof(nvmlGpmMetricsGet_t, metrics) == 24);
