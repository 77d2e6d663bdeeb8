#include "perftracker/server/store_recorder.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "perftracker/server/sqlite/sqlite_store.h"

namespace perftracker {
namespace {

// What the coordinator would have received.
struct RecordingLink : CoordinatorLink {
  std::vector<std::string> calls;
  void OnWorkerJoined(const WorkerInfo& w) override {
    calls.push_back("joined " + std::to_string(w.rank));
  }
  void OnWorkerLeft(int32_t rank, bool) override {
    calls.push_back("left " + std::to_string(rank));
  }
  void OnTrainingEnded(int32_t rank, const std::string&) override {
    calls.push_back("ended " + std::to_string(rank));
  }
  void OnIteration(int32_t, int64_t, int64_t) override { calls.push_back("iteration"); }
  void OnTrigger(int32_t rank, WindowReason, const std::string&) override {
    calls.push_back("trigger " + std::to_string(rank));
  }
  void OnStacks(uint64_t, int32_t rank, bool, const std::string&) override {
    calls.push_back("stacks " + std::to_string(rank));
  }
  void OnSummary(uint64_t window, WorkerSummary s) override {
    calls.push_back("summary " + std::to_string(window) + " " + std::to_string(s.rank));
  }
};

std::unique_ptr<SqliteStore> MemoryStore() {
  auto store = SqliteStore::Open(":memory:");
  EXPECT_TRUE(store.ok()) << store.status().message();
  return std::move(store.value());
}

TEST(StoreRecorderTest, TheRunsJobWindowsSummariesAndDiagnosesReachTheStore) {
  auto store = MemoryStore();
  RecordingLink next;
  std::vector<std::string> said;
  StoreRecorder rec(store.get(), "run-1", "python train.py", &next,
                    [&said](std::string_view l) { said.emplace_back(l); });
  ASSERT_TRUE(rec.Begin().ok());
  for (int32_t r = 0; r < 2; ++r) rec.OnWorkerJoined({r, 2, r, 100 + r, "node0"});
  for (int i = 0; i < 300; ++i) rec.OnIteration(i % 2, 1'000'000 * (i + 1), 900'000);
  // A full batch is written at once; the rest waits for the window or the end.
  auto early = store->ListIterations("run-1", 0, 100000);
  ASSERT_TRUE(early.ok());
  EXPECT_EQ(early->size(), StoreRecorder::kIterationBatch);

  rec.OnTrigger(1, WindowReason::kSlowdown, "slowdown: mean 1.3x the shortest");
  rec.StartWindow({1, 5'000'000'000, 4'000'000'000, WindowReason::kSlowdown});
  auto window = store->GetWindow("run-1", 1);
  ASSERT_TRUE(window.ok()) << window.status().message();
  EXPECT_EQ(window->state, WindowState::kOpen);
  ASSERT_EQ(window->triggers.size(), 1u);
  EXPECT_EQ(window->triggers[0], "rank 1: slowdown: mean 1.3x the shortest");
  EXPECT_EQ(store->ListIterations("run-1", 0, 100000)->size(), 300u);

  for (int32_t r = 0; r < 2; ++r) {
    WorkerSummary s;
    s.rank = r;
    s.host = "node0";
    rec.OnSummary(1, s);
  }
  WorkerSummary stray;
  stray.rank = 0;
  rec.OnSummary(7, stray);  // a window the coordinator never opened: forwarded, not stored
  EXPECT_EQ(store->ListSummaries("run-1", 1)->size(), 2u);

  // The report's JSON as the coordinator rendered it (the store takes it from the report,
  // not from the file).
  WindowReport report;
  report.id = 1;
  report.reason = WindowReason::kSlowdown;
  report.json = R"({"schema_version": 1, "findings": []})";
  report.json_path = testing::TempDir() + "/no-such-dir/window-1-slowdown.json";
  report.text = "perftracker: no material finding";
  // A relative report directory: the store keeps the export's absolute path (a server
  // started elsewhere serves it).
  report.perfetto_path = "reports/./window-1.perfetto.json";
  // Window 2 opened for a hang that was retracted before its report: no report.
  rec.StartWindow({2, 9'000'000'000, 2'000'000'000, WindowReason::kHang});
  rec.StoreReports({report});
  rec.StoreReports({report});  // already stored: nothing happens twice

  EXPECT_EQ(store->GetWindow("run-1", 1)->state, WindowState::kDiagnosed);
  EXPECT_EQ(store->GetWindow("run-1", 2)->state, WindowState::kAbandoned);
  auto diagnosis = store->GetDiagnosis("run-1", 1);
  ASSERT_TRUE(diagnosis.ok()) << diagnosis.status().message();
  EXPECT_NE(diagnosis->json.find("schema_version"), std::string::npos);
  EXPECT_EQ(diagnosis->top_code, "");
  EXPECT_EQ(diagnosis->perfetto_path,
            (std::filesystem::current_path() / "reports" / "window-1.perfetto.json").string());
  auto baseline = store->GetBaseline("run-1");
  ASSERT_TRUE(baseline.ok());
  ASSERT_TRUE(baseline->has_value());  // healthy: the job's baseline
  EXPECT_EQ(**baseline, 1u);
  auto job = store->GetJob("run-1");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->world_size, 2);
  EXPECT_EQ(job->title, "python train.py");
  EXPECT_EQ(store->ListWorkers("run-1")->size(), 2u);
  EXPECT_EQ(rec.failures(), 0u);
  EXPECT_TRUE(said.empty());
  // Everything reached the coordinator, in order.
  EXPECT_EQ(next.calls.front(), "joined 0");
  EXPECT_EQ(std::count(next.calls.begin(), next.calls.end(), "iteration"), 300);
  EXPECT_EQ(next.calls.back(), "summary 7 0");
}

TEST(StoreRecorderTest, AFailingStoreIsSaidOnceAndTheCoordinatorStillGetsEverything) {
  auto store = MemoryStore();
  RecordingLink next;
  std::vector<std::string> said;
  // No Begin(): the job's row is missing, so every child write fails.
  StoreRecorder rec(store.get(), "run-2", "", &next,
                    [&said](std::string_view l) { said.emplace_back(l); });
  rec.OnWorkerJoined({0, 0, 0, 100, "node0"});
  rec.StartWindow({1, 1, 1, WindowReason::kManual});
  WorkerSummary s;
  s.rank = 0;
  rec.OnSummary(1, s);
  EXPECT_GE(rec.failures(), 2u);
  ASSERT_EQ(said.size(), 1u);  // the first failure, once
  EXPECT_NE(said[0].find("store: "), std::string::npos) << said[0];
  EXPECT_NE(said[0].find("the run goes on"), std::string::npos) << said[0];
  EXPECT_EQ(next.calls, (std::vector<std::string>{"joined 0", "summary 1 0"}));
}

}  // namespace
}  // namespace perftracker
