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
};

struct FakeNvmlState {
  nvmlReturn_t init_result = kNvmlSuccess;
  unsigned int count = 0;
  FakeNvmlDevice devices[4];
  int init_calls = 0;
  int shutdown_calls = 0;
};
