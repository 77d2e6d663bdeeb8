// The part of NVML's C ABI that NvmlSampler uses, declared from NVML's documentation (no NVML
// header ships with the CUDA toolkit; the library, libnvidia-ml.so.1, comes with the driver).
// Shared by the sampler (which dlopen()s the real library) and the test suite's fake library.
#pragma once

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
}  // extern "C"
