// `perftracker probe` as a user runs it: the real binary and what it prints.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace perftracker {
namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out;  // stdout and stderr
};

Result Probe(const std::string& args) {
  Result r;
  const std::string cmd =
      std::string(PERFTRACKER_BINARY) + " probe --interval-ms 10 " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

void Write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

class ProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        fs::temp_directory_path() /
        ("perftracker-probe-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "-" + std::to_string(getpid()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(ProbeTest, SaysWhatIsMissingAndExitsZero) {
  const Result r = Probe("--nvml-library /nonexistent/libnvidia-ml.so.1 --sys-root " +
                         root_.string() + " --nccl-plugin /nonexistent/plugin.so");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("NVML    not available: NVML: cannot load /nonexistent/libnvidia-ml.so.1"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("NCCL    plugin /nonexistent/plugin.so does not load"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("RDMA    0 InfiniBand / RoCE port(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CUPTI   "), std::string::npos) << r.out;
}

TEST_F(ProbeTest, ChecksThePluginsExportsAndReadsRdmaPorts) {
  const fs::path port = root_ / "class/infiniband/mlx5_0/ports/1";
  Write(port / "state", "4: ACTIVE\n");
  Write(port / "counters/port_xmit_data", "1000\n");
  Write(port / "counters/port_rcv_data", "2000\n");
  const Result r = Probe("--nvml-library " + std::string(PERFTRACKER_FAKE_NVML) + " --sys-root " +
                         root_.string() + " --nccl-plugin " + std::string(PERFTRACKER_NCCL_PLUGIN));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("NVML    0 GPU(s)"), std::string::npos) << r.out;  // the fake has none
  EXPECT_NE(r.out.find("exports ncclProfiler_v5, ncclProfiler_v4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("RDMA    1 InfiniBand / RoCE port(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nic_link_up 1"), std::string::npos) << r.out;
  // A library that is no NCCL plugin is named as such.
  const Result other = Probe("--nccl-plugin " + std::string(PERFTRACKER_FAKE_NVML) +
                             " --sys-root " + root_.string());
  EXPECT_NE(other.out.find("exports nothing NCCL looks for"), std::string::npos) << other.out;
}

TEST_F(ProbeTest, BadOptionIsOneLineAndExitTwo) {
  const Result r = Probe("--interval-ms 0");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--interval-ms"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace perftracker
