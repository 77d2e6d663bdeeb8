#include "perftracker/sources/nvml/nvml_sampler.h"

#include <dlfcn.h>

#include <cstdio>
#include <set>
#include <utility>

namespace perftracker {
namespace {

template <typename Fn>
Fn Sym(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

constexpr double kKiB = 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

void Append(std::vector<MetricSample>* out, uint32_t source, int64_t time_ns, Metric metric,
            double value) {
  MetricSample s;
  s.time_ns = time_ns;
  s.value = value;
  s.source = source;
  s.metric = metric;
  out->push_back(s);
}

}  // namespace

NvmlSampler::NvmlSampler(NvmlSamplerOptions options) : options_(std::move(options)) {
  if (!options_.log) {
    options_.log = [](std::string_view line) {
      std::fprintf(stderr, "perftracker: %.*s\n", static_cast<int>(line.size()), line.data());
    };
  }
}

NvmlSampler::~NvmlSampler() {
  if (initialized_) {
    for (Device& d : devices_) {
      if (d.gpm_prev != nullptr) fn_.gpm_free(d.gpm_prev);
      if (d.gpm_cur != nullptr) fn_.gpm_free(d.gpm_cur);
    }
    if (fn_.shutdown != nullptr) fn_.shutdown();
  }
  if (lib_ != nullptr) dlclose(lib_);
}

void NvmlSampler::Log(const std::string& line) { options_.log(line); }

std::string NvmlSampler::ErrorText(nvmlReturn_t r) const {
  if (fn_.error_string != nullptr) {
    if (const char* s = fn_.error_string(r)) return s;
  }
  return "NVML error " + std::to_string(r);
}

bool NvmlSampler::Init() {
  if (tried_) return initialized_;
  tried_ = true;
  lib_ = dlopen(options_.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib_ == nullptr) {
    const char* e = dlerror();
    Log("NVML: cannot load " + options_.library + " (" + (e != nullptr ? e : "?") +
        "): no GPU metrics in the reports (no NVIDIA driver on this host?); the job goes on");
    return false;
  }
  fn_.init = Sym<nvmlInit_v2_fn>(lib_, "nvmlInit_v2");
  fn_.shutdown = Sym<nvmlShutdown_fn>(lib_, "nvmlShutdown");
  fn_.error_string = Sym<nvmlErrorString_fn>(lib_, "nvmlErrorString");
  fn_.count = Sym<nvmlDeviceGetCount_v2_fn>(lib_, "nvmlDeviceGetCount_v2");
  fn_.handle = Sym<nvmlDeviceGetHandleByIndex_v2_fn>(lib_, "nvmlDeviceGetHandleByIndex_v2");
  if (fn_.init == nullptr || fn_.count == nullptr || fn_.handle == nullptr) {
    Log("NVML: " + options_.library +
        " has no nvmlInit_v2 / nvmlDeviceGetCount_v2 / nvmlDeviceGetHandleByIndex_v2 (not "
        "NVML, or older than driver 340?): no GPU metrics");
    return false;
  }
  std::vector<std::string> missing;
  auto want = [&](auto* slot, const char* name) {
    *slot = Sym<std::remove_reference_t<decltype(*slot)>>(lib_, name);
    if (*slot == nullptr) missing.emplace_back(name);
  };
  want(&fn_.utilization, "nvmlDeviceGetUtilizationRates");
  want(&fn_.clock, "nvmlDeviceGetClockInfo");
  want(&fn_.max_clock, "nvmlDeviceGetMaxClockInfo");
  fn_.throttle =
      Sym<nvmlDeviceGetClocksEventReasons_fn>(lib_, "nvmlDeviceGetCurrentClocksEventReasons");
  if (fn_.throttle == nullptr) want(&fn_.throttle, "nvmlDeviceGetCurrentClocksThrottleReasons");
  want(&fn_.temperature, "nvmlDeviceGetTemperature");
  want(&fn_.power, "nvmlDeviceGetPowerUsage");
  want(&fn_.pcie, "nvmlDeviceGetPcieThroughput");
  if (options_.nvlink) want(&fn_.field_values, "nvmlDeviceGetFieldValues");
  want(&fn_.processes, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (options_.gpm) {
    want(&fn_.gpm_support, "nvmlGpmQueryDeviceSupport");
    want(&fn_.gpm_alloc, "nvmlGpmSampleAlloc");
    want(&fn_.gpm_free, "nvmlGpmSampleFree");
    want(&fn_.gpm_sample, "nvmlGpmSampleGet");
    want(&fn_.gpm_metrics, "nvmlGpmMetricsGet");
    if (fn_.gpm_support == nullptr || fn_.gpm_alloc == nullptr || fn_.gpm_free == nullptr ||
        fn_.gpm_sample == nullptr || fn_.gpm_metrics == nullptr) {
      fn_.gpm_support = nullptr;  // GPM needs all five (older drivers have none)
      fn_.gpm_alloc = nullptr;
      fn_.gpm_free = nullptr;
      fn_.gpm_sample = nullptr;
      fn_.gpm_metrics = nullptr;
    }
  }
  if (!missing.empty()) {
    std::string line = "NVML: " + options_.library + " lacks";
    for (const std::string& m : missing) line += " " + m;
    Log(line + ": those metrics are not sampled");
  }
  const nvmlReturn_t r = fn_.init();
  if (r != kNvmlSuccess) {
    Log("NVML: nvmlInit_v2 failed: " + ErrorText(r) +
        " (no NVIDIA driver loaded?): no GPU metrics; the job goes on");
    return false;
  }
  initialized_ = true;
  unsigned int count = 0;
  if (const nvmlReturn_t c = fn_.count(&count); c != kNvmlSuccess) {
    Log("NVML: nvmlDeviceGetCount_v2 failed: " + ErrorText(c) + ": no GPU metrics");
    count = 0;
  }
  for (unsigned int i = 0; i < count; ++i) {
    Device d;
    if (const nvmlReturn_t h = fn_.handle(i, &d.handle); h != kNvmlSuccess) {
      Log("NVML: GPU " + std::to_string(i) + ": no handle: " + ErrorText(h) + "; skipped");
      d.handle = nullptr;
    } else if (fn_.max_clock != nullptr) {
      unsigned int mhz = 0;
      if (fn_.max_clock(d.handle, kNvmlClockSm, &mhz) == kNvmlSuccess) d.max_sm_clock = mhz;
    }
    devices_.push_back(d);
  }
  stats_.devices = count;
  stats_.available = true;
  return true;
}

bool NvmlSampler::Ok(Device& d, Query q, const char* what, nvmlReturn_t r) {
  if (r == kNvmlSuccess) return true;
  if (r == kNvmlErrorNotSupported) {
    d.unsupported |= q;
  } else {
    ++stats_.failed_queries;
    // Host-wide: a device's metrics go to the pids on it, but which pid a failed query
    // would have reached is not known here.
    CountProblem(-1, SampleProblem::kUnreadable);
  }
  if ((said_ & q) == 0) {
    said_ |= q;
    Log(std::string("NVML: ") + what + ": " + ErrorText(r) +
        (r == kNvmlErrorNotSupported ? " (not supported by this GPU: not sampled)"
                                     : " (the sample is skipped; said once)"));
  }
  return false;
}

bool NvmlSampler::Due(int64_t now_ns) {
  if (sampled_once_ && options_.min_interval_ns > 0 &&
      now_ns - last_sample_ns_ < options_.min_interval_ns) {
    return false;
  }
  sampled_once_ = true;
  last_sample_ns_ = now_ns;
  return true;
}

void NvmlSampler::SampleDevice(uint32_t index, Device& d, int64_t now_ns,
                               std::vector<MetricSample>* out) {
  if (d.handle == nullptr) return;
  auto emit = [&](Metric metric, double value) { Append(out, index, now_ns, metric, value); };
  if (fn_.utilization != nullptr && (d.unsupported & kUtilization) == 0) {
    nvmlUtilization_t u{};
    if (Ok(d, kUtilization, "nvmlDeviceGetUtilizationRates", fn_.utilization(d.handle, &u))) {
      emit(Metric::kGpuUtilization, u.gpu / 100.0);
      emit(Metric::kGpuMemoryUtilization, u.memory / 100.0);
    }
  }
  if (fn_.clock != nullptr && (d.unsupported & kClock) == 0) {
    unsigned int mhz = 0;
    if (Ok(d, kClock, "nvmlDeviceGetClockInfo(SM)", fn_.clock(d.handle, kNvmlClockSm, &mhz))) {
      emit(Metric::kGpuSmClockMhz, mhz);
    }
  }
  if (d.max_sm_clock >= 0) emit(Metric::kGpuSmClockMaxMhz, d.max_sm_clock);
  if (fn_.throttle != nullptr && (d.unsupported & kThrottle) == 0) {
    unsigned long long reasons = 0;
    if (Ok(d, kThrottle, "nvmlDeviceGetCurrentClocksEventReasons",
           fn_.throttle(d.handle, &reasons))) {
      emit(Metric::kGpuThrottleReasons, static_cast<double>(reasons));
    }
  }
  if (fn_.temperature != nullptr && (d.unsupported & kTemperature) == 0) {
    unsigned int c = 0;
    if (Ok(d, kTemperature, "nvmlDeviceGetTemperature",
           fn_.temperature(d.handle, kNvmlTemperatureGpu, &c))) {
      emit(Metric::kGpuTemperatureC, c);
    }
  }
  if (fn_.power != nullptr && (d.unsupported & kPower) == 0) {
    unsigned int mw = 0;
    if (Ok(d, kPower, "nvmlDeviceGetPowerUsage", fn_.power(d.handle, &mw))) {
      emit(Metric::kGpuPowerWatts, mw / 1000.0);
    }
  }
  if (fn_.pcie != nullptr && (d.unsupported & kPcie) == 0) {
    unsigned int tx = 0;
    unsigned int rx = 0;
    if (Ok(d, kPcie, "nvmlDeviceGetPcieThroughput",
           fn_.pcie(d.handle, kNvmlPcieUtilTxBytes, &tx)) &&
        Ok(d, kPcie, "nvmlDeviceGetPcieThroughput",
           fn_.pcie(d.handle, kNvmlPcieUtilRxBytes, &rx))) {
      emit(Metric::kPcieTxBytesPerSec, tx * kKiB);
      emit(Metric::kPcieRxBytesPerSec, rx * kKiB);
    }
  }
  if (fn_.field_values != nullptr && (d.unsupported & kNvlink) == 0) {
    nvmlFieldValue_t fields[2 * kNvmlNvlinkMaxLinks] = {};
    for (unsigned int link = 0; link < kNvmlNvlinkMaxLinks; ++link) {
      fields[2 * link].fieldId = kNvmlFiNvlinkThroughputDataTx;
      fields[2 * link].scopeId = link;
      fields[2 * link + 1].fieldId = kNvmlFiNvlinkThroughputDataRx;
      fields[2 * link + 1].scopeId = link;
    }
    const nvmlReturn_t r = fn_.field_values(d.handle, 2 * kNvmlNvlinkMaxLinks, fields);
    if (Ok(d, kNvlink, "nvmlDeviceGetFieldValues(NVLink throughput)", r)) {
      unsigned long long kib = 0;
      int links = 0;
      for (const nvmlFieldValue_t& f : fields) {
        if (f.nvmlReturn != kNvmlSuccess) continue;
        kib += f.value.ullVal;
        ++links;
      }
      if (links == 0) {
        // No link answered: a GPU without NVLink. Said once, not asked again.
        Ok(d, kNvlink, "nvmlDeviceGetFieldValues(NVLink throughput)", kNvmlErrorNotSupported);
      } else {
        if (d.have_nvlink && now_ns > d.nvlink_time_ns && kib >= d.nvlink_kib) {
          const double seconds = static_cast<double>(now_ns - d.nvlink_time_ns) / 1e9;
          emit(Metric::kNvlinkBytesPerSec,
               static_cast<double>(kib - d.nvlink_kib) * kKiB / seconds);
        }
        d.have_nvlink = true;
        d.nvlink_time_ns = now_ns;
        d.nvlink_kib = kib;
      }
    }
  }
  if (fn_.gpm_support != nullptr && (d.unsupported & (kGpm | kGpmMetrics)) == 0) {
    if (d.gpm_cur == nullptr) InitGpm(d);
    if (d.gpm_cur != nullptr) SampleGpm(index, d, now_ns, out);
  }
}

void NvmlSampler::InitGpm(Device& d) {
  nvmlGpmSupport_t support{};
  support.version = kNvmlGpmSupportVersion;
  nvmlReturn_t r = fn_.gpm_support(d.handle, &support);
  if (r == kNvmlSuccess && support.isSupportedDevice == 0) r = kNvmlErrorNotSupported;
  if (!Ok(d, kGpm, "nvmlGpmQueryDeviceSupport (GPM: SM / DRAM activity, Hopper or newer)", r)) {
    return;
  }
  nvmlGpmSample_t a = nullptr;
  nvmlGpmSample_t b = nullptr;
  if (!Ok(d, kGpm, "nvmlGpmSampleAlloc", fn_.gpm_alloc(&a))) return;
  if (!Ok(d, kGpm, "nvmlGpmSampleAlloc", fn_.gpm_alloc(&b))) {
    fn_.gpm_free(a);
    return;
  }
  d.gpm_prev = a;
  d.gpm_cur = b;
  d.have_gpm_prev = false;
}

void NvmlSampler::SampleGpm(uint32_t index, Device& d, int64_t now_ns,
                            std::vector<MetricSample>* out) {
  if (!Ok(d, kGpm, "nvmlGpmSampleGet", fn_.gpm_sample(d.handle, d.gpm_cur))) return;
  if (d.have_gpm_prev && (d.unsupported & kGpmMetrics) == 0) {
    nvmlGpmMetricsGet_t get{};
    get.version = kNvmlGpmMetricsGetVersion;
    get.sample1 = d.gpm_prev;
    get.sample2 = d.gpm_cur;
    auto ask = [&](Query q, unsigned int id) {
      if ((d.unsupported & q) != 0) return -1;
      get.metrics[get.numMetrics].metricId = id;
      return static_cast<int>(get.numMetrics++);
    };
    const int sm = ask(kGpmSmUtil, kNvmlGpmMetricSmUtil);
    const int dram = ask(kGpmDramBwUtil, kNvmlGpmMetricDramBwUtil);
    // NVLink from GPM only where the field-value counters give nothing (none, or unsupported).
    int rx = -1;
    int tx = -1;
    if (options_.nvlink && (fn_.field_values == nullptr || (d.unsupported & kNvlink) != 0)) {
      rx = ask(kGpmNvlink, kNvmlGpmMetricNvlinkTotalRxPerSec);
      tx = ask(kGpmNvlink, kNvmlGpmMetricNvlinkTotalTxPerSec);
    }
    if (get.numMetrics > 0 && Ok(d, kGpmMetrics, "nvmlGpmMetricsGet", fn_.gpm_metrics(&get))) {
      auto value = [&](int i, Query q, const char* what, double* v) {
        if (i < 0 || !Ok(d, q, what, get.metrics[i].nvmlReturn)) return false;
        *v = get.metrics[i].value;
        return true;
      };
      double v = 0;
      if (value(sm, kGpmSmUtil, "nvmlGpmMetricsGet(NVML_GPM_METRIC_SM_UTIL)", &v)) {
        Append(out, index, now_ns, Metric::kGpuSmActivity, v / 100.0);
      }
      if (value(dram, kGpmDramBwUtil, "nvmlGpmMetricsGet(NVML_GPM_METRIC_DRAM_BW_UTIL)", &v)) {
        Append(out, index, now_ns, Metric::kGpuDramActivity, v / 100.0);
      }
      double rx_mib = 0;
      double tx_mib = 0;
      if (value(rx, kGpmNvlink, "nvmlGpmMetricsGet(NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC)",
                &rx_mib) &&
          value(tx, kGpmNvlink, "nvmlGpmMetricsGet(NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC)",
                &tx_mib)) {
        Append(out, index, now_ns, Metric::kNvlinkBytesPerSec, (rx_mib + tx_mib) * kMiB);
      }
    }
  }
  // The sample just read starts the next interval.
  std::swap(d.gpm_prev, d.gpm_cur);
  d.have_gpm_prev = true;
}

void NvmlSampler::SampleDevices(int64_t now_ns, std::vector<MetricSample>* out) {
  if (!Init() || !Due(now_ns)) return;
  ++stats_.samples;
  for (uint32_t i = 0; i < devices_.size(); ++i) SampleDevice(i, devices_[i], now_ns, out);
}

void NvmlSampler::Sample(int64_t now_ns, const std::vector<int32_t>& pids,
                         std::vector<PidSample>* out) {
  if (!Init() || !Due(now_ns)) return;
  ++stats_.samples;
  const std::set<int32_t> wanted(pids.begin(), pids.end());
  std::vector<MetricSample> samples;
  bool any_matched = false;
  for (uint32_t i = 0; i < devices_.size(); ++i) {
    Device& d = devices_[i];
    if (d.handle == nullptr) continue;
    std::set<int32_t> on_device;
    if (fn_.processes != nullptr && (d.unsupported & kProcesses) == 0) {
      process_buf_.resize(64);
      for (int attempt = 0; attempt < 3; ++attempt) {
        auto n = static_cast<unsigned int>(process_buf_.size());
        const nvmlReturn_t r = fn_.processes(d.handle, &n, process_buf_.data());
        if (r == kNvmlErrorInsufficientSize) {
          process_buf_.resize(static_cast<size_t>(n) + 16);
          continue;
        }
        if (Ok(d, kProcesses, "nvmlDeviceGetComputeRunningProcesses_v3", r)) {
          for (unsigned int p = 0; p < n && p < process_buf_.size(); ++p) {
            const auto pid = static_cast<int32_t>(process_buf_[p].pid);
            if (wanted.count(pid) != 0) on_device.insert(pid);
          }
        }
        break;
      }
    }
    for (const auto& [pid, device] : device_hint_) {
      if (device == i && wanted.count(pid) != 0) on_device.insert(pid);
    }
    if (on_device.empty()) continue;
    any_matched = true;
    samples.clear();
    SampleDevice(i, d, now_ns, &samples);
    for (int32_t pid : on_device) {
      for (const MetricSample& s : samples) out->push_back(PidSample{pid, s});
    }
  }
  if (!any_matched && !wanted.empty() && !devices_.empty() && !said_unmatched_) {
    said_unmatched_ = true;
    Log("NVML: none of the " + std::to_string(wanted.size()) +
        " training processes is among the "
        "compute processes NVML lists on " +
        std::to_string(devices_.size()) +
        " GPU(s) (not on a GPU yet, or another pid namespace): their GPU metrics are not "
        "sampled until they are");
  }
}

}  // namespace perftracker
