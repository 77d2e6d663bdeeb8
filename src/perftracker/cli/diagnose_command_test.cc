#include "perftracker/cli/diagnose_command.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace perftracker {
namespace {

namespace fs = std::filesystem;

std::string StragglerExample() {
  const char* src = std::getenv("PERFTRACKER_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") + "/examples/straggler";
}

// RunDiagnose with its stdout and stderr captured.
struct Ran {
  int rc = 0;
  std::string out;
  std::string err;
};

Ran RunCaptured(const DiagnoseOptions& options) {
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  Ran r;
  r.rc = RunDiagnose(options);
  r.out = testing::internal::GetCapturedStdout();
  r.err = testing::internal::GetCapturedStderr();
  return r;
}

fs::path TempPath(const std::string& name) {
  return fs::temp_directory_path() / ("perftracker_" + std::to_string(::getpid()) + "_" + name);
}

TEST(DiagnosePerfettoTest, ABadPathIsOneErrorLineAndExitCode2) {
  DiagnoseOptions options;
  options.paths = {StragglerExample()};
  options.perfetto_path = "/nonexistent-perftracker-dir/window.json";
  const Ran ran = RunCaptured(options);
  const int rc = ran.rc;
  const std::string& out = ran.out;
  const std::string& err = ran.err;
  EXPECT_EQ(rc, 2);
  EXPECT_EQ(out, "");
  EXPECT_EQ(err,
            "perftracker: /nonexistent-perftracker-dir/window.json: cannot write the Perfetto "
            "trace: No such file or directory; give --perfetto a file in a writable directory\n");
}

TEST(DiagnosePerfettoTest, TheStragglerExampleIsExportedWithItsFindingOnRank2) {
  const fs::path path = TempPath("straggler.perfetto.json");
  DiagnoseOptions options;
  options.paths = {StragglerExample()};
  options.perfetto_path = path.string();
  options.jobs = 2;
  testing::internal::CaptureStdout();
  const int rc = RunDiagnose(options);
  const std::string out = testing::internal::GetCapturedStdout();
  ASSERT_EQ(rc, 0);
  EXPECT_NE(out.find("Perfetto trace: " + path.string()), std::string::npos) << out;
  std::ifstream in(path);
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
  fs::remove(path);
  ASSERT_FALSE(doc.is_discarded());
  std::set<std::string> processes;
  size_t block2_slices_on_rank2 = 0;
  size_t flows = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") processes.insert(e["args"]["name"]);
    if (e["ph"] == "X" && e["cat"] == "perftracker" && e["pid"] == 2 &&
        e["args"]["code"] == "PT-STRAGGLER-COMPUTE" && e["args"]["function"] == "block2") {
      ++block2_slices_on_rank2;
    }
    if (e["ph"] == "f") ++flows;
  }
  EXPECT_EQ(processes, (std::set<std::string>{"rank 0 (unknown host)", "rank 1 (unknown host)",
                                              "rank 2 (unknown host)", "rank 3 (unknown host)"}));
  EXPECT_GT(block2_slices_on_rank2, 0u);
  EXPECT_GT(flows, 0u);
  EXPECT_EQ(doc["otherData"]["events_aggregated"], 0);
}

TEST(DiagnosePerfettoTest, OverTheCapTheRestIsCountedNotCut) {
  const fs::path path = TempPath("capped.perfetto.json");
  DiagnoseOptions options;
  options.paths = {StragglerExample()};
  options.perfetto_path = path.string();
  options.perfetto_max_events = 1000;
  const Ran ran = RunCaptured(options);
  const int rc = ran.rc;
  const std::string& err = ran.err;
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(err.find("shortest aggregated per track"), std::string::npos) << err;
  std::ifstream in(path);
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
  fs::remove(path);
  ASSERT_FALSE(doc.is_discarded());
  const auto& other = doc["otherData"];
  EXPECT_LE(other["events_written"].get<uint64_t>(), 1000u);
  EXPECT_EQ(other["events_written"].get<uint64_t>() + other["events_aggregated"].get<uint64_t>(),
            other["events_total"].get<uint64_t>());
  // Every event is accounted for: drawn, or counted on its track.
  uint64_t drawn = 0;
  uint64_t counted = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] != "perftracker") ++drawn;
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"].contains("events_aggregated")) {
      counted += e["args"]["events_aggregated"].get<uint64_t>();
    }
  }
  EXPECT_EQ(drawn + counted, other["events_total"].get<uint64_t>());
}

// --ranks-per-host (issue 11): torch.profiler's traces name no host, so offline a process
// group inside one host could not be told from one across hosts. With N ranks per host, rank
// r ran on "host<r / N>": the report's workers and the Perfetto export's processes say so.
TEST(DiagnoseRanksPerHostTest, TracesWithoutHostsGetOneHostPerNRanks) {
  const fs::path path = TempPath("hosts.perfetto.json");
  DiagnoseOptions options;
  options.paths = {StragglerExample()};
  options.format = "json";
  options.ranks_per_host = 2;
  options.perfetto_path = path.string();
  const Ran ran = RunCaptured(options);
  const int rc = ran.rc;
  const std::string& out = ran.out;
  const std::string& err = ran.err;
  ASSERT_EQ(rc, 0) << err;
  EXPECT_EQ(err, "");
  const nlohmann::json report = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(report.is_discarded());
  std::map<int, std::string> hosts;
  for (const auto& w : report["workers"]) hosts[w["rank"].get<int>()] = w["host"];
  EXPECT_EQ(hosts,
            (std::map<int, std::string>{{0, "host0"}, {1, "host0"}, {2, "host1"}, {3, "host1"}}));
  std::ifstream in(path);
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
  fs::remove(path);
  ASSERT_FALSE(doc.is_discarded());
  std::set<std::string> processes;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") processes.insert(e["args"]["name"]);
  }
  EXPECT_EQ(processes, (std::set<std::string>{"rank 0 (host0)", "rank 1 (host0)", "rank 2 (host1)",
                                              "rank 3 (host1)"}));
}

TEST(DiagnoseRanksPerHostTest, AValueOutOfRangeIsOneErrorLineAndExitCode2) {
  for (int32_t n : {0, -3, (1 << 20) + 1}) {
    SCOPED_TRACE(n);
    DiagnoseOptions options;
    options.paths = {StragglerExample()};
    options.ranks_per_host = n;
    const Ran ran = RunCaptured(options);
    const int rc = ran.rc;
    const std::string& out = ran.out;
    const std::string& err = ran.err;
    EXPECT_EQ(rc, 2);
    EXPECT_EQ(out, "");
    EXPECT_EQ(err, fmt::format("perftracker: --ranks-per-host {}: must be 1..1048576 (the ranks "
                               "each host ran, e.g. 8 for 8 GPUs per node)\n",
                               n));
  }
}

}  // namespace
}  // namespace perftracker
