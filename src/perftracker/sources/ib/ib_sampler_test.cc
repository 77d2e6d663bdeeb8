#include "perftracker/sources/ib/ib_sampler.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace perftracker {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

// A fixture /sys with the kernel's file formats.
class IbSamplerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/perftracker-ib-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  void Write(const std::string& rel, const std::string& text) {
    const std::filesystem::path p = root_ + "/" + rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  void Port(const std::string& dev, int port, const std::string& state, uint64_t xmit,
            uint64_t rcv) {
    const std::string dir = "class/infiniband/" + dev + "/ports/" + std::to_string(port);
    Write(dir + "/state", state + "\n");
    Write(dir + "/counters/port_xmit_data", std::to_string(xmit) + "\n");
    Write(dir + "/counters/port_rcv_data", std::to_string(rcv) + "\n");
    Write(dir + "/link_layer", "InfiniBand\n");
  }
  static std::map<std::pair<Metric, uint32_t>, double> Index(const std::vector<MetricSample>& v) {
    std::map<std::pair<Metric, uint32_t>, double> m;
    for (const MetricSample& s : v) m[{s.metric, s.source}] = s.value;
    return m;
  }

  std::string root_;
};

TEST_F(IbSamplerTest, PortCountersAreFourByteUnitsTurnedIntoRates) {
  Port("mlx5_0", 1, "4: ACTIVE", 1000, 2000);
  Port("mlx5_1", 1, "1: DOWN", 0, 0);
  IbSampler sampler(root_);
  std::vector<MetricSample> out;
  sampler.Sample(10 * kSecond, &out);
  auto m = Index(out);
  const uint32_t p0 = IbSampler::PortSource(0, 1);
  const uint32_t p1 = IbSampler::PortSource(1, 1);
  EXPECT_EQ(m.at({Metric::kNicLinkUp, p0}), 1.0);
  EXPECT_EQ(m.at({Metric::kNicLinkUp, p1}), 0.0);
  EXPECT_EQ(m.count({Metric::kIbTxBytesPerSec, p0}), 0u);  // first sample: levels only
  EXPECT_EQ(sampler.stats().ports, 2u);

  // 0.5 s later: 250 M counter units sent = 1 GB, 125 M received = 500 MB.
  Port("mlx5_0", 1, "4: ACTIVE", 1000 + 250'000'000, 2000 + 125'000'000);
  out.clear();
  sampler.Sample(10 * kSecond + kSecond / 2, &out);
  m = Index(out);
  EXPECT_DOUBLE_EQ(m.at({Metric::kIbTxBytesPerSec, p0}), 2e9);
  EXPECT_DOUBLE_EQ(m.at({Metric::kIbRxBytesPerSec, p0}), 1e9);
  EXPECT_DOUBLE_EQ(m.at({Metric::kIbTxBytesPerSec, p1}), 0.0);
  for (const MetricSample& s : out) EXPECT_EQ(s.time_ns, 10 * kSecond + kSecond / 2);
  EXPECT_EQ(sampler.stats().unreadable_files, 0u);
}

TEST_F(IbSamplerTest, ACounterThatWentBackwardsRestartsTheRate) {
  Port("mlx5_0", 1, "4: ACTIVE", 5'000'000, 5'000'000);
  IbSampler sampler(root_);
  std::vector<MetricSample> out;
  sampler.Sample(kSecond, &out);
  Port("mlx5_0", 1, "4: ACTIVE", 100, 100);  // counters reset
  out.clear();
  sampler.Sample(2 * kSecond, &out);
  EXPECT_EQ(Index(out).count({Metric::kIbTxBytesPerSec, IbSampler::PortSource(0, 1)}), 0u);
  Port("mlx5_0", 1, "4: ACTIVE", 200, 100);
  out.clear();
  sampler.Sample(3 * kSecond, &out);
  EXPECT_DOUBLE_EQ(Index(out).at({Metric::kIbTxBytesPerSec, IbSampler::PortSource(0, 1)}), 400);
}

TEST_F(IbSamplerTest, CarrierGivesLinkStateOfEthernetInterfaces) {
  Write("class/net/lo/ifindex", "1\n");
  Write("class/net/lo/carrier", "1\n");
  Write("class/net/eth0/ifindex", "2\n");
  Write("class/net/eth0/carrier", "1\n");
  Write("class/net/eth1/ifindex", "3\n");
  Write("class/net/eth1/carrier", "0\n");
  Write("class/net/eth2/ifindex", "4\n");  // down: carrier unreadable
  Write("class/net/eth2/operstate", "down\n");
  Write("class/net/eth2/flags", "0x1003\n");  // configured up (IFF_UP): the link is down
  // Configured down (no IFF_UP, like an unused ifb0): not a link in use, no sample (it read
  // as a flapping NIC on every host that has one).
  Write("class/net/ifb0/ifindex", "5\n");
  Write("class/net/ifb0/operstate", "down\n");
  Write("class/net/ifb0/flags", "0x82\n");
  IbSampler sampler(root_);
  std::vector<PidSample> out;
  sampler.Sample(kSecond, {123}, &out);
  std::map<uint32_t, double> up;
  for (const PidSample& s : out) {
    EXPECT_EQ(s.pid, -1);  // host-wide
    if (s.sample.metric == Metric::kNicLinkUp) up[s.sample.source] = s.sample.value;
  }
  EXPECT_EQ(up.size(), 3u);  // no loopback, no ifb0
  EXPECT_EQ(up.at(2), 1.0);
  EXPECT_EQ(up.at(3), 0.0);
  EXPECT_EQ(up.at(4), 0.0);
  EXPECT_EQ(up.count(5), 0u);
  EXPECT_EQ(sampler.stats().interfaces, 3u);
}

TEST_F(IbSamplerTest, BrokenFilesAreCountedWithTheFirstKept) {
  Port("mlx5_0", 1, "4: ACTIVE", 1, 1);
  Write("class/infiniband/mlx5_0/ports/1/counters/port_rcv_data", "garbage\n");
  Write("class/infiniband/mlx5_0/ports/2/state", "weird\n");
  Write("class/net/eth9/carrier", "1\n");  // no ifindex
  IbSampler sampler(root_);
  std::vector<MetricSample> out;
  sampler.Sample(kSecond, &out);
  EXPECT_EQ(sampler.stats().unreadable_files, 4u);  // rcv_data, port 2 state + counters, eth9
  EXPECT_NE(sampler.stats().first_problem.find("mlx5_0/ports/1/counters"), std::string::npos)
      << sampler.stats().first_problem;
  EXPECT_EQ(Index(out).at({Metric::kNicLinkUp, IbSampler::PortSource(0, 1)}), 1.0);
}

TEST_F(IbSamplerTest, NoRdmaNoNetworkIsSilent) {
  IbSampler sampler(root_ + "/nonexistent");
  std::vector<MetricSample> out;
  sampler.Sample(kSecond, &out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(sampler.stats().unreadable_files, 0u);
}

TEST(IbSamplerRealSys, ThisHostsSysReadsCleanly) {
  IbSampler sampler;
  std::vector<MetricSample> out;
  sampler.Sample(kSecond, &out);
  for (const MetricSample& s : out) {
    if (s.metric == Metric::kNicLinkUp) {
      EXPECT_TRUE(s.value == 0.0 || s.value == 1.0);
    }
  }
  GTEST_LOG_(INFO) << "this host: " << sampler.stats().ports << " IB/RoCE ports, "
                   << sampler.stats().interfaces << " interfaces, "
                   << sampler.stats().unreadable_files << " unreadable files "
                   << sampler.stats().first_problem;
}

}  // namespace
}  // namespace perftracker
