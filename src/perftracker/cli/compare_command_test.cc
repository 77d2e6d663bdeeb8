// `perftracker compare --store`: two stored windows of a live job, read back from an SQLite
// store as `perftracker server` (or run) wrote them.
#include "perftracker/cli/compare_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "perftracker/core/function_table.h"
#include "perftracker/server/open_store.h"
#include "perftracker/summary/window_summarizer.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kMs = 1'000'000;

// A rank's summary of 20 iterations of step > (forward, six layers of 10 ms), through the
// summarizer; `forward_ms` the forward's length, with a jitter of a few % per iteration.
WorkerSummary Summary(int32_t rank, int64_t forward_ms) {
  FunctionTable table;
  const uint32_t step = table.Intern(EventKind::kPythonCall, "train.py:9 step");
  const uint32_t forward = table.Intern(EventKind::kPythonCall, "model.py:20 forward", step);
  std::vector<uint32_t> layers;
  for (int l = 0; l < 6; ++l) {
    layers.push_back(table.Intern(EventKind::kPythonCall,
                                  "model.py:" + std::to_string(40 + l) + " layer", step));
  }
  const uint32_t iteration = table.Intern(EventKind::kIteration, "iteration");
  WindowSummarizer s(&table);
  auto ev = [&](uint32_t fn, EventKind kind, int64_t a, int64_t b) {
    Event e;
    e.start_ns = a;
    e.end_ns = b;
    e.function_id = fn;
    e.kind = kind;
    e.track_id = 1;
    s.OnEvent(e);
  };
  int64_t t = 1'000'000 * kMs;
  for (int i = 0; i < 20; ++i) {
    const int64_t fwd = forward_ms * kMs + (i % 3) * kMs / 2;
    const int64_t len = fwd + 60 * kMs;
    ev(iteration, EventKind::kIteration, t, t + len);
    ev(step, EventKind::kPythonCall, t, t + len);
    ev(forward, EventKind::kPythonCall, t, t + fwd);
    for (int l = 0; l < 6; ++l) {
      const int64_t a = t + fwd + l * 10 * kMs;
      ev(layers[static_cast<size_t>(l)], EventKind::kPythonCall, a, a + 10 * kMs);
    }
    t += len;
  }
  WorkerSummary out = s.Finish();
  out.rank = rank;
  out.host = "node-a";
  out.source = "live";
  return out;
}

class CompareStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = fs::temp_directory_path() /
            ("perftracker-compare-store-" + std::to_string(getpid()) + ".db");
    fs::remove(path_);
    StatusOr<std::unique_ptr<Store>> store = OpenStore(path_.string());
    ASSERT_TRUE(store.ok()) << store.status().message();
    JobRecord job;
    job.job_id = "j1";
    job.title = "train.py";
    job.world_size = 4;
    ASSERT_TRUE((*store)->UpsertJob(job).ok());
    // Windows 1 and 2 healthy; in window 3 every rank's forward takes 3x longer (a slowdown
    // that no rank shows against its peers).
    for (uint64_t w = 1; w <= 3; ++w) {
      WindowRecord record;
      record.job_id = "j1";
      record.window_id = w;
      record.reason = "manual";
      record.start_ns = static_cast<int64_t>(w) * 1000;
      record.duration_ns = 1000;
      record.state = WindowState::kDiagnosed;
      ASSERT_TRUE((*store)->PutWindow(record).ok());
      for (int32_t rank = 0; rank < 4; ++rank) {
        ASSERT_TRUE((*store)->PutSummary("j1", w, Summary(rank, w == 3 ? 60 : 20)).ok());
      }
    }
    ASSERT_TRUE((*store)->SetBaseline("j1", 1).ok());
    WindowRecord empty;
    empty.job_id = "j1";
    empty.window_id = 4;
    empty.reason = "manual";
    empty.state = WindowState::kAbandoned;
    ASSERT_TRUE((*store)->PutWindow(empty).ok());
  }
  void TearDown() override {
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path_.string() + suffix);
  }

  struct Result {
    int rc = 0;
    std::string out;
    std::string err;
  };
  Result Compare(const std::string& baseline, const std::string& current,
                 const std::string& job = "j1", const std::string& format = "json") {
    CompareCommandOptions o;
    o.store = path_.string();
    o.job = job;
    o.baseline = baseline;
    o.current = current;
    o.format = format;
    testing::internal::CaptureStdout();
    testing::internal::CaptureStderr();
    Result r;
    r.rc = RunCompare(o);
    r.out = testing::internal::GetCapturedStdout();
    r.err = testing::internal::GetCapturedStderr();
    return r;
  }

  fs::path path_;
};

TEST_F(CompareStoreTest, ASlowdownEveryRankSharesIsNamedAgainstTheBaselineWindow) {
  const Result r = Compare("baseline", "3");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const nlohmann::json c = nlohmann::json::parse(r.out);
  EXPECT_EQ(c["kind"], "comparison");
  EXPECT_EQ(c["baseline"]["title"], "job j1 window 1");
  EXPECT_EQ(c["current"]["title"], "job j1 window 3");
  EXPECT_TRUE(c["has_material_change"].get<bool>());
  ASSERT_FALSE(c["changes"].empty()) << r.out;
  EXPECT_EQ(c["changes"][0]["function"], "model.py:20 forward");
  EXPECT_EQ(c["changes"][0]["direction"], "slower");
  EXPECT_EQ(c["changes"][0]["workers"], nlohmann::json::array({0, 1, 2, 3}));
  EXPECT_NEAR(c["changes"][0]["delta_ms_per_iteration"].get<double>(), 40, 2);
}

TEST_F(CompareStoreTest, TwoHealthyWindowsHaveNoMaterialChangeAndTextIsTheDefault) {
  const Result r = Compare("1", "2", "j1", "text");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("no material change", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("job j1 window 1"), std::string::npos) << r.out;
}

TEST_F(CompareStoreTest, BadWindowsAndJobsAreOneLineAndExitCode2) {
  const struct {
    std::string baseline, current, job, message;
  } cases[] = {
      {"1", "3", "", "perftracker: --store needs --job ID: the job whose windows to compare\n"},
      {"x", "3", "j1",
       "perftracker: with --store, BASELINE must be a window id (a positive integer or "
       "'baseline'), not 'x'\n"},
      {"1", "baseline", "j1",
       "perftracker: with --store, CURRENT must be a window id (a positive integer), not "
       "'baseline'\n"},
      {"1", "4", "j1", "perftracker: job j1 window 4: no worker summaries are stored for it\n"},
  };
  for (const auto& c : cases) {
    const Result r = Compare(c.baseline, c.current, c.job);
    EXPECT_EQ(r.rc, 2) << c.message;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, c.message);
  }
  // A window or a job the store does not hold: one line that names it.
  for (const auto& [job, current] : {std::pair<std::string, std::string>{"j1", "9"},
                                     std::pair<std::string, std::string>{"nope", "1"}}) {
    const Result r = Compare("1", current, job);
    EXPECT_EQ(r.rc, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(job), std::string::npos) << r.err;
  }
  const Result none = Compare("baseline", "2", "nope");
  EXPECT_EQ(none.rc, 2);
  EXPECT_EQ(none.err, "perftracker: store: no job nope\n");
}

}  // namespace
}  // namespace perftracker
