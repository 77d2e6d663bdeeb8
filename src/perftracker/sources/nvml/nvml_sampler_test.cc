#include "perftracker/sources/nvml/nvml_sampler.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "perftracker/sources/nvml/fake_nvml_for_test.h"

namespace perftracker {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

// The fake library's scripted state (the same object the sampler's dlopen sees).
FakeNvmlState* State(const char* path) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);  // kept open for the test binary's life
  EXPECT_NE(lib, nullptr) << dlerror();
  auto* state = static_cast<FakeNvmlState*>(dlsym(lib, "fake_nvml_state"));
  EXPECT_NE(state, nullptr);
  *state = FakeNvmlState{};
  return state;
}

std::map<Metric, double> ByMetric(const std::vector<MetricSample>& samples, uint32_t source) {
  std::map<Metric, double> m;
  for (const MetricSample& s : samples) {
    if (s.source == source) m[s.metric] = s.value;
  }
  return m;
}

class NvmlSamplerTest : public ::testing::Test {
 protected:
  NvmlSamplerOptions Options(const char* path) {
    NvmlSamplerOptions o;
    o.library = path;
    o.log = [this](std::string_view line) { log.emplace_back(line); };
    return o;
  }
  std::vector<std::string> log;
};

TEST_F(NvmlSamplerTest, EveryMetricWithItsUnits) {
  FakeNvmlState* fake = State(PERFTRACKER_FAKE_NVML);
  fake->count = 2;
  FakeNvmlDevice& d = fake->devices[1];
  d.util_gpu = 87;
  d.util_memory = 40;
  d.sm_clock = 1410;
  d.sm_clock_max = 1980;
  d.throttle = 0x20;  // SW thermal slowdown
  d.temperature = 83;
  d.power_mw = 612'500;
  d.pcie_tx_kb = 1000;
  d.pcie_rx_kb = 3000;
  d.nvlink_links = 4;
  d.nvlink_tx_kib = 100;
  d.nvlink_rx_kib = 50;

  NvmlSampler sampler(Options(PERFTRACKER_FAKE_NVML));
  std::vector<MetricSample> out;
  sampler.SampleDevices(10 * kSecond, &out);
  EXPECT_TRUE(sampler.stats().available);
  EXPECT_EQ(sampler.stats().devices, 2u);
  auto m = ByMetric(out, 1);
  EXPECT_DOUBLE_EQ(m.at(Metric::kGpuUtilization), 0.87);
  EXPECT_DOUBLE_EQ(m.at(Metric::kGpuMemoryUtilization), 0.40);
  EXPECT_DOUBLE_EQ(m.at(Metric::kGpuSmClockMhz), 1410);
  EXPECT_DOUBLE_EQ(m.at(Metric::kGpuSmClockMaxMhz), 1980);
  EXPECT_DOUBLE_EQ(m.at(Metric::kGpuThrottleReasons), 32);
  EXPECT_DOUBLE_EQ(m.at(Metric::kGpuTemperatureC), 83);
  EXPECT_DOUBLE_EQ(m.at(Metric::kGpuPowerWatts), 612.5);
  EXPECT_DOUBLE_EQ(m.at(Metric::kPcieTxBytesPerSec), 1000 * 1024.0);
  EXPECT_DOUBLE_EQ(m.at(Metric::kPcieRxBytesPerSec), 3000 * 1024.0);
  EXPECT_EQ(m.count(Metric::kNvlinkBytesPerSec), 0u);  // a rate needs two samples
  for (const MetricSample& s : out) EXPECT_EQ(s.time_ns, 10 * kSecond);

  // 0.5 s later each of the 4 links moved 1000 KiB more TX and 500 KiB more RX.
  d.nvlink_tx_kib += 1000;
  d.nvlink_rx_kib += 500;
  out.clear();
  sampler.SampleDevices(10 * kSecond + kSecond / 2, &out);
  m = ByMetric(out, 1);
  EXPECT_DOUBLE_EQ(m.at(Metric::kNvlinkBytesPerSec), 4 * 1500 * 1024.0 / 0.5);
  // Device 0 has no NVLink: said once, never a metric.
  EXPECT_EQ(ByMetric(out, 0).count(Metric::kNvlinkBytesPerSec), 0u);
  int nvlink_lines = 0;
  for (const std::string& l : log) nvlink_lines += l.find("NVLink") != std::string::npos;
  EXPECT_EQ(nvlink_lines, 1);
}

TEST_F(NvmlSamplerTest, FailuresAreSaidOnceAndTheRestGoesOn) {
  FakeNvmlState* fake = State(PERFTRACKER_FAKE_NVML);
  fake->count = 1;
  fake->devices[0].power_result = kNvmlErrorNotSupported;
  fake->devices[0].temperature_result = kNvmlErrorGpuIsLost;
  fake->devices[0].sm_clock = 1000;
  NvmlSampler sampler(Options(PERFTRACKER_FAKE_NVML));
  std::vector<MetricSample> out;
  sampler.SampleDevices(1, &out);
  sampler.SampleDevices(2, &out);
  sampler.SampleDevices(3, &out);
  int power = 0;
  int temp = 0;
  int clock = 0;
  for (const MetricSample& s : out) {
    power += s.metric == Metric::kGpuPowerWatts;
    temp += s.metric == Metric::kGpuTemperatureC;
    clock += s.metric == Metric::kGpuSmClockMhz;
  }
  EXPECT_EQ(power, 0);
  EXPECT_EQ(temp, 0);
  EXPECT_EQ(clock, 3);
  int power_lines = 0;
  int temp_lines = 0;
  for (const std::string& l : log) {
    power_lines += l.find("nvmlDeviceGetPowerUsage: Not Supported") != std::string::npos;
    temp_lines += l.find("nvmlDeviceGetTemperature: GPU is lost") != std::string::npos;
  }
  EXPECT_EQ(power_lines, 1);
  EXPECT_EQ(temp_lines, 1);
  EXPECT_EQ(sampler.stats().failed_queries, 3u);  // the lost GPU was asked each time
}

TEST_F(NvmlSamplerTest, MissingFunctionsAreNamedOnceAndOthersSampled) {
  FakeNvmlState* fake = State(PERFTRACKER_FAKE_NVML_MINIMAL);
  fake->count = 1;
  fake->devices[0].throttle = 4;
  fake->devices[0].util_gpu = 50;
  NvmlSampler sampler(Options(PERFTRACKER_FAKE_NVML_MINIMAL));
  std::vector<MetricSample> out;
  sampler.SampleDevices(1, &out);
  sampler.SampleDevices(2, &out);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("lacks nvmlDeviceGetPowerUsage nvmlDeviceGetFieldValues "
                        "nvmlDeviceGetComputeRunningProcesses_v3"),
            std::string::npos)
      << log[0];
  const auto m = ByMetric(out, 0);
  EXPECT_DOUBLE_EQ(m.at(Metric::kGpuThrottleReasons), 4);  // the older function's name
  EXPECT_DOUBLE_EQ(m.at(Metric::kGpuUtilization), 0.5);
  EXPECT_EQ(m.count(Metric::kGpuPowerWatts), 0u);
}

TEST_F(NvmlSamplerTest, MissingLibraryIsSaidOnceAndNothingIsSampled) {
  NvmlSampler sampler(Options("/nonexistent/libnvidia-ml.so.1"));
  std::vector<MetricSample> out;
  std::vector<PidSample> pid_out;
  sampler.SampleDevices(1, &out);
  sampler.Sample(2, {100}, &pid_out);
  EXPECT_TRUE(out.empty());
  EXPECT_TRUE(pid_out.empty());
  EXPECT_FALSE(sampler.stats().available);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("cannot load /nonexistent/libnvidia-ml.so.1"), std::string::npos);
  EXPECT_NE(log[0].find("no GPU metrics in the reports"), std::string::npos);
}

TEST_F(NvmlSamplerTest, InitFailureWithoutDriverIsSaidOnce) {
  FakeNvmlState* fake = State(PERFTRACKER_FAKE_NVML);
  fake->init_result = kNvmlErrorDriverNotLoaded;
  NvmlSampler sampler(Options(PERFTRACKER_FAKE_NVML));
  std::vector<MetricSample> out;
  sampler.SampleDevices(1, &out);
  sampler.SampleDevices(2, &out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(fake->init_calls, 1);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("nvmlInit_v2 failed: Driver Not Loaded"), std::string::npos) << log[0];
}

TEST_F(NvmlSamplerTest, EachRankGetsItsOwnGpu) {
  FakeNvmlState* fake = State(PERFTRACKER_FAKE_NVML);
  fake->count = 3;
  for (unsigned int i = 0; i < 3; ++i) fake->devices[i].sm_clock = 1000 + i;
  fake->devices[0].pids[0] = 500;  // rank on GPU 0
  fake->devices[0].num_pids = 1;
  fake->devices[1].pids[0] = 999;  // a process we were not asked about
  fake->devices[1].num_pids = 1;
  // GPU 2 lists nobody; pid 700 is there by hint (another pid namespace).
  NvmlSampler sampler(Options(PERFTRACKER_FAKE_NVML));
  sampler.SetDeviceOfPid(700, 2);
  std::vector<PidSample> out;
  sampler.Sample(kSecond, {500, 700}, &out);
  std::map<int32_t, double> clock_of;
  for (const PidSample& s : out) {
    if (s.sample.metric == Metric::kGpuSmClockMhz) clock_of[s.pid] = s.sample.value;
  }
  EXPECT_EQ(clock_of.size(), 2u);
  EXPECT_DOUBLE_EQ(clock_of.at(500), 1000);
  EXPECT_DOUBLE_EQ(clock_of.at(700), 1002);
  EXPECT_EQ(fake->shutdown_calls, 0);
  for (const std::string& l : log) EXPECT_EQ(l.find("none of the"), std::string::npos) << l;
}

TEST_F(NvmlSamplerTest, RanksNvmlCannotSeeAreSaidOnce) {
  FakeNvmlState* fake = State(PERFTRACKER_FAKE_NVML);
  fake->count = 2;
  fake->devices[0].pids[0] = 4242;  // host pid of a containerized rank
  fake->devices[0].num_pids = 1;
  NvmlSampler sampler(Options(PERFTRACKER_FAKE_NVML));
  std::vector<PidSample> out;
  sampler.Sample(kSecond, {17, 18}, &out);  // the ranks' pids in their own namespace
  sampler.Sample(2 * kSecond, {17, 18}, &out);
  EXPECT_TRUE(out.empty());
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("none of the 2 training processes"), std::string::npos) << log[0];
  sampler.SetDeviceOfPid(17, 0);  // e.g. from LOCAL_RANK
  sampler.Sample(3 * kSecond, {17, 18}, &out);
  EXPECT_FALSE(out.empty());
  for (const PidSample& s : out) EXPECT_EQ(s.pid, 17);
}

TEST_F(NvmlSamplerTest, RateOptionSkipsEarlyCalls) {
  FakeNvmlState* fake = State(PERFTRACKER_FAKE_NVML);
  fake->count = 1;
  NvmlSamplerOptions o = Options(PERFTRACKER_FAKE_NVML);
  o.min_interval_ns = kSecond / 2;
  o.gpm = false;  // GPM adds metrics from the second sample on; this counts samples per call
  NvmlSampler sampler(o);
  std::vector<MetricSample> out;
  sampler.SampleDevices(kSecond, &out);
  const size_t first = out.size();
  EXPECT_GT(first, 0u);
  sampler.SampleDevices(kSecond + kSecond / 10, &out);  // too soon
  EXPECT_EQ(out.size(), first);
  sampler.SampleDevices(2 * kSecond, &out);
  EXPECT_EQ(out.size(), 2 * first);
  EXPECT_EQ(sampler.stats().samples, 2u);
}

int CountLines(const std::vector<std::string>& log, const std::string& part) {
  int n = 0;
  for (const std::string& l : log) n += l.find(part) != std::string::npos;
  return n;
}

TEST_F(NvmlSamplerTest, GpmActivityFromTheSecondSampleOnAndUnsupportedDeviceSaidOnce) {
  FakeNvmlState* fake = State(PERFTRACKER_FAKE_NVML);
  fake->count = 2;
  fake->devices[0].gpm_sm_util = 63.5;
  fake->devices[0].gpm_dram_bw_util = 41;
  fake->devices[1].gpm_supported = 0;  // pre-Hopper
  fake->devices[1].util_gpu = 20;
  fake->devices[1].gpm_sm_util = 99;  // never asked for
  {
    NvmlSampler sampler(Options(PERFTRACKER_FAKE_NVML));
    std::vector<MetricSample> out;
    sampler.SampleDevices(kSecond, &out);  // the first sample: nothing to compare with
    for (uint32_t dev : {0u, 1u}) {
      EXPECT_EQ(ByMetric(out, dev).count(Metric::kGpuSmActivity), 0u);
      EXPECT_EQ(ByMetric(out, dev).count(Metric::kGpuDramActivity), 0u);
    }
    EXPECT_DOUBLE_EQ(ByMetric(out, 1).at(Metric::kGpuUtilization), 0.2);

    out.clear();
    sampler.SampleDevices(2 * kSecond, &out);
    auto m = ByMetric(out, 0);
    EXPECT_DOUBLE_EQ(m.at(Metric::kGpuSmActivity), 0.635);
    EXPECT_DOUBLE_EQ(m.at(Metric::kGpuDramActivity), 0.41);
    m = ByMetric(out, 1);
    EXPECT_EQ(m.count(Metric::kGpuSmActivity), 0u);
    EXPECT_EQ(m.count(Metric::kGpuDramActivity), 0u);
    EXPECT_DOUBLE_EQ(m.at(Metric::kGpuUtilization), 0.2);  // the rest goes on

    fake->devices[0].gpm_sm_util = 10;
    out.clear();
    sampler.SampleDevices(3 * kSecond, &out);
    EXPECT_DOUBLE_EQ(ByMetric(out, 0).at(Metric::kGpuSmActivity), 0.10);

    EXPECT_EQ(CountLines(log, "nvmlGpmQueryDeviceSupport"), 1);
    EXPECT_EQ(CountLines(log,
                         "nvmlGpmQueryDeviceSupport (GPM: SM / DRAM activity, Hopper or "
                         "newer): Not Supported (not supported by this GPU: not sampled)"),
              1);
    EXPECT_EQ(sampler.stats().failed_queries, 0u);
    EXPECT_EQ(fake->gpm_bad_pairs, 0);  // always (previous, current) of the same device
    EXPECT_EQ(fake->gpm_samples_live, 2);
  }
  EXPECT_EQ(fake->gpm_samples_live, 0);  // freed by the destructor
  EXPECT_EQ(fake->shutdown_calls, 1);
}

TEST_F(NvmlSamplerTest, GpmNvlinkOnlyWhereFieldCountersGiveNothing) {
  FakeNvmlState* fake = State(PERFTRACKER_FAKE_NVML);
  fake->count = 2;
  for (FakeNvmlDevice& d : fake->devices) {
    d.nvlink_links = 4;
    d.gpm_nvlink_rx_mib = 300;
    d.gpm_nvlink_tx_mib = 100;
  }
  fake->devices[1].nvlink_fields_result = kNvmlErrorNotSupported;  // field counters: nothing
  NvmlSampler sampler(Options(PERFTRACKER_FAKE_NVML));
  std::vector<MetricSample> out;
  sampler.SampleDevices(kSecond, &out);
  fake->devices[0].nvlink_tx_kib += 1024;  // each of 4 links: 1 MiB in 1 s
  out.clear();
  sampler.SampleDevices(2 * kSecond, &out);
  EXPECT_DOUBLE_EQ(ByMetric(out, 0).at(Metric::kNvlinkBytesPerSec), 4 * 1024 * 1024.0);
  EXPECT_DOUBLE_EQ(ByMetric(out, 1).at(Metric::kNvlinkBytesPerSec), 400 * 1024 * 1024.0);
  EXPECT_EQ(sampler.stats().failed_queries, 0u);
}

TEST_F(NvmlSamplerTest, GpmFailuresAreCountedAndSkipped) {
  FakeNvmlState* fake = State(PERFTRACKER_FAKE_NVML);
  fake->count = 1;
  FakeNvmlDevice& d = fake->devices[0];
  d.nvlink_links = 2;
  d.gpm_sm_util = 50;
  d.gpm_metrics_result = kNvmlErrorGpuIsLost;
  d.util_gpu = 70;
  NvmlSampler sampler(Options(PERFTRACKER_FAKE_NVML));
  std::vector<MetricSample> out;
  for (int i = 1; i <= 3; ++i) sampler.SampleDevices(i * kSecond, &out);
  EXPECT_EQ(ByMetric(out, 0).count(Metric::kGpuSmActivity), 0u);
  EXPECT_DOUBLE_EQ(ByMetric(out, 0).at(Metric::kGpuUtilization), 0.7);
  EXPECT_EQ(sampler.stats().failed_queries, 2u);  // the 2nd and 3rd calls
  EXPECT_EQ(CountLines(log, "nvmlGpmMetricsGet: GPU is lost (the sample is skipped; said once)"),
            1);

  // The call succeeds again, one metric does not: the other is sampled, the failure counted.
  d.gpm_metrics_result = kNvmlSuccess;
  d.gpm_dram_result = kNvmlErrorGpuIsLost;
  out.clear();
  sampler.SampleDevices(4 * kSecond, &out);
  EXPECT_DOUBLE_EQ(ByMetric(out, 0).at(Metric::kGpuSmActivity), 0.5);
  EXPECT_EQ(ByMetric(out, 0).count(Metric::kGpuDramActivity), 0u);
  EXPECT_EQ(sampler.stats().failed_queries, 3u);
  EXPECT_EQ(CountLines(log, "NVML_GPM_METRIC_DRAM_BW_UTIL"), 1);
  EXPECT_EQ(fake->gpm_bad_pairs, 0);
}

TEST_F(NvmlSamplerTest, LibraryWithoutGpmSamplesTheRest) {
  FakeNvmlState* fake = State(PERFTRACKER_FAKE_NVML_MINIMAL);
  fake->count = 1;
  fake->devices[0].util_gpu = 30;
  fake->devices[0].gpm_sm_util = 80;
  NvmlSampler sampler(Options(PERFTRACKER_FAKE_NVML_MINIMAL));
  std::vector<MetricSample> out;
  for (int i = 1; i <= 3; ++i) sampler.SampleDevices(i * kSecond, &out);
  const auto m = ByMetric(out, 0);
  EXPECT_DOUBLE_EQ(m.at(Metric::kGpuUtilization), 0.3);
  EXPECT_EQ(m.count(Metric::kGpuSmActivity), 0u);
  EXPECT_EQ(m.count(Metric::kGpuDramActivity), 0u);
  ASSERT_EQ(log.size(), 1u);  // the one "lacks" line names them with the others
  EXPECT_NE(log[0].find("nvmlGpmQueryDeviceSupport nvmlGpmSampleAlloc nvmlGpmSampleFree "
                        "nvmlGpmSampleGet nvmlGpmMetricsGet: those metrics are not sampled"),
            std::string::npos)
      << log[0];
  EXPECT_EQ(sampler.stats().failed_queries, 0u);
}

TEST_F(NvmlSamplerTest, GpmOptionOffNeverCallsGpm) {
  FakeNvmlState* fake = State(PERFTRACKER_FAKE_NVML);
  fake->count = 2;
  fake->devices[0].gpm_sm_util = 80;
  NvmlSamplerOptions o = Options(PERFTRACKER_FAKE_NVML);
  o.gpm = false;
  {
    NvmlSampler sampler(o);
    std::vector<MetricSample> out;
    for (int i = 1; i <= 3; ++i) sampler.SampleDevices(i * kSecond, &out);
    std::vector<PidSample> pid_out;
    sampler.SetDeviceOfPid(7, 0);
    sampler.Sample(4 * kSecond, {7}, &pid_out);
    EXPECT_FALSE(out.empty());
    EXPECT_FALSE(pid_out.empty());
    for (const MetricSample& s : out) EXPECT_NE(s.metric, Metric::kGpuSmActivity);
  }
  EXPECT_EQ(fake->gpm_calls, 0);
  EXPECT_EQ(CountLines(log, "Gpm"), 0);
}

}  // namespace
}  // namespace perftracker
