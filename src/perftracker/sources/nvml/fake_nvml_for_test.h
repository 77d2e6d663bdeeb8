// The scripted state of the test suite's fake libnvidia-ml (fake_nvml_for_test.cc). The test
// dlopen()s the same fake the sampler loads and writes this struct through
// dlsym("fake_nvml_state").
#pragma once

#include "perftracker/sources/nvml/nvml_types.h"

struct FakeNvmlDevice {
  unsigned int util_gpu = 0;
  unsigned int util_memory = 0;
  unsigned int sm_clock = 0;
  unsigned int sm_clock_max = 0;
  unsigned long long throttle = 0;
  unsigned int temperature = 0;
  unsigned int power_mw = 0;
  unsigned int pcie_tx_kb = 0;
  unsigned int pcie_rx_kb = 0;
  int nvlink_links = 0;                  // links that answer; 0: no NVLink (NOT_SUPPORTED)
  unsigned long long nvlink_tx_kib = 0;  // per answering link
  unsigned long long nvlink_rx_kib = 0;
  nvmlReturn_t power_result = kNvmlSuccess;
  nvmlReturn_t temperature_result = kNvmlSuccess;
  unsigned int pids[4] = {};
  unsigned int num_pids = 0;
  nvmlReturn_t nvlink_fields_result = kNvmlSuccess;  // of the whole nvmlDeviceGetFieldValues call
  // GPM: what nvmlGpmMetricsGet reports between two samples of this device (the values current
  // when the later sample was read). NVLink metrics answer only where nvlink_links > 0.
  unsigned int gpm_supported = 1;  // nvmlGpmSupport_t::isSupportedDevice
  double gpm_sm_util = 0;          // percent
  double gpm_dram_bw_util = 0;     // percent
  double gpm_nvlink_rx_mib = 0;    // MiB/s
  double gpm_nvlink_tx_mib = 0;
  nvmlReturn_t gpm_metrics_result = kNvmlSuccess;  // of the whole nvmlGpmMetricsGet call
  nvmlReturn_t gpm_dram_result = kNvmlSuccess;     // of the DRAM_BW_UTIL metric
};

struct FakeNvmlState {
  nvmlReturn_t init_result = kNvmlSuccess;
  unsigned int count = 0;
  FakeNvmlDevice devices[4];
  int init_calls = 0;
  int shutdown_calls = 0;
  int gpm_calls = 0;         // calls of any nvmlGpm* function
  int gpm_samples_live = 0;  // allocated and not yet freed
  int gpm_bad_pairs = 0;     // nvmlGpmMetricsGet asked with samples out of order / of two devices
};
