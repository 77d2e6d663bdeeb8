#include "perftracker/core/metric_sample.h"

namespace perftracker {

std::string_view MetricName(Metric metric) {
  switch (metric) {
    case Metric::kGpuSmActivity:
      return "gpu_sm_activity";
    case Metric::kGpuDramActivity:
      return "gpu_dram_activity";
    case Metric::kGpuSmClockMhz:
      return "gpu_sm_clock_mhz";
    case Metric::kGpuThrottleReasons:
      return "gpu_throttle_reasons";
    case Metric::kPcieTxBytesPerSec:
      return "pcie_tx_bytes_per_s";
    case Metric::kPcieRxBytesPerSec:
      return "pcie_rx_bytes_per_s";
    case Metric::kNvlinkBytesPerSec:
      return "nvlink_bytes_per_s";
    case Metric::kNicTxBytesPerSec:
      return "nic_tx_bytes_per_s";
    case Metric::kNicRxBytesPerSec:
      return "nic_rx_bytes_per_s";
    case Metric::kCpuUtilization:
      return "cpu_utilization";
    case Metric::kRunQueueDelayFraction:
      return "run_queue_delay_fraction";
    case Metric::kMemoryRssBytes:
      return "memory_rss_bytes";
    case Metric::kVoluntaryCtxSwitchesPerSec:
      return "voluntary_ctx_switches_per_s";
    case Metric::kInvoluntaryCtxSwitchesPerSec:
      return "involuntary_ctx_switches_per_s";
    case Metric::kGpuUtilization:
      return "gpu_utilization";
    case Metric::kGpuMemoryUtilization:
      return "gpu_memory_utilization";
    case Metric::kGpuTemperatureC:
      return "gpu_temperature_c";
    case Metric::kGpuPowerWatts:
      return "gpu_power_w";
    case Metric::kIbTxBytesPerSec:
      return "ib_tx_bytes_per_s";
    case Metric::kIbRxBytesPerSec:
      return "ib_rx_bytes_per_s";
    case Metric::kNicLinkUp:
      return "nic_link_up";
    case Metric::kGpuSmClockMaxMhz:
      return "gpu_sm_clock_max_mhz";
    case Metric::kTcpSendBytesPerSec:
      return "tcp_send_bytes_per_s";
    case Metric::kTcpDeliveryRateBytesPerSec:
      return "tcp_delivery_rate_bytes_per_s";
    case Metric::kMainThreadRunQueueFraction:
      return "main_thread_run_queue_delay_fraction";
    case Metric::kTimeslicesPerSec:
      return "timeslices_per_s";
    case Metric::kMainThreadTimeslicesPerSec:
      return "main_thread_timeslices_per_s";
    case Metric::kTcpWireSecondsPerSec:
      return "tcp_wire_seconds_per_s";
    case Metric::kCpuStealFraction:
      return "cpu_steal_fraction";
    case Metric::kCommThreadRunQueueFraction:
      return "comm_thread_run_queue_delay_fraction";
    case Metric::kCommThreadTimeslicesPerSec:
      return "comm_thread_timeslices_per_s";
  }
  return "unknown";
}

}  // namespace perftracker
