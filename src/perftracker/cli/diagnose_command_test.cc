#include "perftracker/cli/diagnose_command.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace perftracker {
namespace {

namespace fs = std::filesystem;

std::string StragglerExample() {
  const char* src = std::getenv("PERFTRACKER_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") + "/examples/straggler";
}

fs::path TempPath(const std::string& name) {
  return fs::temp_directory_path() / ("perftracker_" + std::to_string(::getpid()) + "_" + name);
}

TEST(DiagnosePerfettoTest, ABadPathIsOneErrorLineAndExitCode2) {
  DiagnoseOptions options;
  options.paths = {StragglerExample()};
  options.perfetto_path = "/nonexistent-perftracker-dir/window.json";
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const int rc = RunDiagnose(options);
  const std::string out = testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
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
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const int rc = RunDiagnose(options);
  testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
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

}  // namespace
}  // namespace perftracker
