#include "perftracker/cli/probe_command.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include "perftracker/cli/run_command.h"
#include "perftracker/core/metric_sample.h"
#include "perftracker/core/realtime_clock.h"
#include "perftracker/core/units.h"
#include "perftracker/sources/ib/ib_sampler.h"
#include "perftracker/sources/nvml/nvml_sampler.h"
#ifdef PERFTRACKER_HAVE_CUPTI
#include "perftracker/sources/cupti/cupti_api.h"
#endif

namespace perftracker {
namespace {

std::string Value(Metric metric, double v) {
  switch (metric) {
    case Metric::kGpuUtilization:
    case Metric::kGpuMemoryUtilization:
    case Metric::kGpuSmActivity:
    case Metric::kGpuDramActivity:
      return FormatShare(v);
    case Metric::kGpuSmClockMhz:
    case Metric::kGpuSmClockMaxMhz:
      return fmt::format("{:.0f} MHz", v);
    case Metric::kGpuThrottleReasons:
      return fmt::format("0x{:x}", static_cast<uint64_t>(v));
    case Metric::kGpuTemperatureC:
      return fmt::format("{:.0f} C", v);
    case Metric::kGpuPowerWatts:
      return fmt::format("{:.1f} W", v);
    case Metric::kPcieTxBytesPerSec:
    case Metric::kPcieRxBytesPerSec:
    case Metric::kNvlinkBytesPerSec:
    case Metric::kIbTxBytesPerSec:
    case Metric::kIbRxBytesPerSec:
      return FormatByteRate(v);
    default:
      return fmt::format("{:g}", v);
  }
}

// The last value of every (source, metric) in `samples`, printed one source per line.
void PrintSources(const std::vector<MetricSample>& samples, const char* what) {
  std::map<uint32_t, std::map<Metric, double>> last;
  for (const MetricSample& s : samples) last[s.source][s.metric] = s.value;
  for (const auto& [source, metrics] : last) {
    std::string line;
    for (const auto& [metric, value] : metrics) {
      line += fmt::format("{}{} {}", line.empty() ? "" : ", ", MetricName(metric),
                          Value(metric, value));
    }
    fmt::print("  {} {}: {}\n", what, source, line);
  }
}

// NVML's part of the report; `samples` are the second of two samples (`available`: Init()).
void PrintNvml(const NvmlSampler& nvml, bool available, const std::vector<std::string>& said,
               const std::vector<MetricSample>& samples) {
  if (!available) {
    fmt::print("NVML    not available");
    for (const auto& line : said) fmt::print(": {}", line);
    fmt::print("\n");
    return;
  }
  fmt::print("NVML    {} GPU(s), {} metric values in the second sample\n", nvml.stats().devices,
             samples.size());
  PrintSources(samples, "GPU");
  for (const auto& line : said) fmt::print("  note: {}\n", line);
}

void ProbeCupti() {
#ifdef PERFTRACKER_HAVE_CUPTI
  auto api = LoadCuptiApi();
  if (!api.ok()) {
    fmt::print("CUPTI   not available: {}\n", api.status().message());
    return;
  }
  std::string where = "libcupti";
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(api.value().subscribe), &info) != 0 &&
      info.dli_fname != nullptr) {
    where = info.dli_fname;
  }
  CUpti_SubscriberHandle subscriber = nullptr;
  const CUptiResult r = api.value().subscribe(
      &subscriber, [](void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}, nullptr);
  if (r == CUPTI_SUCCESS) {
    api.value().unsubscribe(subscriber);
    fmt::print("CUPTI   {}: a subscription succeeds: GPU kernel tracing works in windows\n", where);
  } else {
    fmt::print("CUPTI   {}: cuptiSubscribe: {} (no GPU driver, or another CUPTI client)\n", where,
               CuptiResultText(api.value(), r));
  }
#else
  fmt::print("CUPTI   not built (no CUDA toolkit headers at build time)\n");
#endif
}

void ProbeNcclPlugin(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    fmt::print("NCCL    plugin {} does not load: {}\n", path, e != nullptr ? e : "?");
    return;
  }
  std::string found;
  for (const char* sym : {"ncclProfiler_v5", "ncclProfiler_v4"}) {
    if (dlsym(handle, sym) != nullptr) found += (found.empty() ? "" : ", ") + std::string(sym);
  }
  fmt::print("NCCL    plugin {}: exports {} (perftracker run sets NCCL_PROFILER_PLUGIN to it)\n",
             path, found.empty() ? std::string("nothing NCCL looks for") : found);
  dlclose(handle);
}

// The RDMA part; `samples` are the second of two samples.
void PrintRdma(const IbSampler& ib, const std::vector<MetricSample>& samples) {
  fmt::print("RDMA    {} InfiniBand / RoCE port(s), {} network interface(s) with carrier state\n",
             ib.stats().ports, ib.stats().interfaces);
  std::vector<MetricSample> ports;
  for (const MetricSample& s : samples) {
    if (s.source >= 0x10000) ports.push_back(s);
  }
  PrintSources(ports, "port");
  if (!ib.stats().first_problem.empty()) {
    fmt::print("  note: {} unreadable file(s), first {}\n", ib.stats().unreadable_files,
               ib.stats().first_problem);
  }
}

}  // namespace

CLI::App* AddProbeCommand(CLI::App& app, ProbeOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "probe",
      "Show what this host offers perftracker's hardware sources: GPUs and their metrics "
      "(NVML), GPU kernel tracing (CUPTI), the NCCL profiler plugin, RDMA ports. Changes "
      "nothing.");
  cmd->add_option("--interval-ms", o->interval_ms, "Time between the two samples (rates)")
      ->check(CLI::Range(10, 60'000))
      ->capture_default_str();
  cmd->add_option("--nccl-plugin", o->nccl_plugin, "The NCCL profiler plugin to check")
      ->default_str("the one perftracker run uses");
  cmd->add_option("--sys-root", o->sys_root, "Where /sys is (a copy, for tests)")
      ->capture_default_str();
  cmd->add_option("--nvml-library", o->nvml_library, "The NVML library to load")
      ->capture_default_str();
  return cmd;
}

int RunProbe(const ProbeOptions& o) {
  std::vector<std::string> said;
  NvmlSamplerOptions nvml_options;
  nvml_options.library = o.nvml_library;
  nvml_options.log = [&said](std::string_view line) { said.emplace_back(line); };
  NvmlSampler nvml(nvml_options);
  const bool nvml_available = nvml.Init();
  IbSampler ib(o.sys_root);
  // Rates (and GPM metrics) come from two samples: both samplers share one wait.
  std::vector<MetricSample> gpu, rdma;
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) usleep(static_cast<useconds_t>(o.interval_ms) * 1000);
    gpu.clear();
    rdma.clear();
    if (nvml_available) nvml.SampleDevices(RealtimeNs(), &gpu);
    ib.Sample(RealtimeNs(), &rdma);
  }
  PrintNvml(nvml, nvml_available, said, gpu);
  ProbeCupti();
  ProbeNcclPlugin(o.nccl_plugin.empty() ? DefaultNcclPlugin() : o.nccl_plugin);
  PrintRdma(ib, rdma);
  return 0;
}

}  // namespace perftracker
