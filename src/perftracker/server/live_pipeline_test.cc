// The live pipeline without Python: fake agents (shared memory + control socket) -> the
// NodeCollector -> the embedded WindowCoordinator -> report files.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "perftracker/collector/fake_agent_for_test.h"
#include "perftracker/collector/fake_sampler_for_test.h"
#include "perftracker/collector/node_collector.h"
#include "perftracker/server/window_coordinator.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kMs = 1'000'000;

class LivePipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = fs::temp_directory_path() / ("perftracker-live-test-" + std::to_string(getpid()) + "-" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    socket_ = "/tmp/perftracker-live-" + std::to_string(getpid()) + ".sock";
    unlink(socket_.c_str());
  }
  void TearDown() override {
    if (collector_) collector_->Stop();
    if (coordinator_) coordinator_->Stop();
    fs::remove_all(dir_);
  }

  // record_events > 0: the window's timeline (recordings merged into a Perfetto trace).
  // sampler_, when set, samples host metrics.
  void Start(int64_t wait_summaries_ms, size_t record_events = 0, int64_t window_ms = 400) {
    CoordinatorOptions co;
    co.perfetto = record_events > 0;
    co.report_dir = (dir_ / "reports").string();
    co.window_ns = window_ms * kMs;
    co.delay_ns = 100 * kMs;
    co.wait_summaries_ns = wait_summaries_ms * kMs;
    co.log = [](std::string_view) {};
    coordinator_ = std::make_unique<WindowCoordinator>(co);
    CollectorOptions o;
    o.socket_path = socket_;
    o.drain_interval_ms = 10;
    o.finish_grace_ms = 300;
    o.log = [](std::string_view) {};
    o.sampler = sampler_;
    if (record_events > 0) {
      o.record_dir = (dir_ / "reports" / "recordings").string();
      o.record_events = record_events;
    }
    collector_ = std::make_unique<NodeCollector>(o, coordinator_.get());
    coordinator_->AddCollector(collector_.get());
    ASSERT_TRUE(coordinator_->Start().ok());
    ASSERT_TRUE(collector_->Start().ok());
  }

  // An agent's window: `iterations` of step > (forward, backward), forward taking
  // forward_ms, each iteration marked; then window_done.
  static void Play(FakeAgent& agent, const nlohmann::json& window, int64_t forward_ms,
                   uint64_t dropped = 0) {
    const int64_t start = window["start_ns"].get<int64_t>();
    const int64_t duration = window["duration_ns"].get<int64_t>();
    const uint32_t train = agent.Publish(EventKind::kPythonCall, "train.py:5 train");
    const uint32_t step = agent.Publish(EventKind::kPythonCall, "train.py:9 step", train);
    const uint32_t forward = agent.Publish(EventKind::kPythonCall, "model.py:20 forward", step);
    const uint32_t backward = agent.Publish(EventKind::kPythonCall, "model.py:40 backward", step);
    const uint32_t iteration = agent.Publish(EventKind::kIteration, "iteration", train);
    // Every rank runs the same iterations (synchronous training): the fast ones wait in
    // backward for the slow one.
    const int64_t len = 40 * kMs;
    for (int64_t t = start + kMs; t + len < start + duration; t += len) {
      agent.Push(forward, t, t + forward_ms * kMs);
      agent.Push(backward, t + forward_ms * kMs, t + len);
      agent.Push(step, t, t + len);
      agent.Push(iteration, t, t + len, EventKind::kIteration);
    }
    agent.WindowDone(window["window"].get<uint64_t>(), dropped);
  }

  // The agents of ranks 0 .. n-1 of an n-rank job, connected, their hellos landed.
  void JoinAgents(int n, const std::string& tag, std::vector<std::unique_ptr<FakeAgent>>* agents) {
    for (int r = 0; r < n; ++r) {
      agents->push_back(std::make_unique<FakeAgent>(r, n, tag));
      ASSERT_TRUE(agents->back()->Connect(socket_));
      agents->back()->Hello();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  bool WaitForReport(int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      if (coordinator_->last_report()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  static nlohmann::json ReadJson(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return nlohmann::json::parse(ss.str());
  }

  fs::path dir_;
  std::string socket_;
  std::unique_ptr<WindowCoordinator> coordinator_;
  std::unique_ptr<NodeCollector> collector_;
  std::shared_ptr<FakeSampler> sampler_;
};

TEST_F(LivePipelineTest, ATriggerFromOneRankDiagnosesTheSlowRankFromEveryRanksRings) {
  Start(5000);
  std::vector<std::unique_ptr<FakeAgent>> agents;
  ASSERT_NO_FATAL_FAILURE(JoinAgents(4, "live", &agents));
  // Rank 2's detector fires.
  agents[2]->SendJson({{"type", "trigger"}, {"rank", 2}, {"reason", "slowdown"},
                       {"detail", "mean of last 50 iterations is 30% above the shortest"}});
  for (auto& a : agents) {
    auto w = a->WaitFor("window", 3000);
    ASSERT_TRUE(w) << "rank " << a->rank() << " got no window";
    Play(*a, *w, a->rank() == 2 ? 30 : 10);
  }
  ASSERT_TRUE(WaitForReport(5000));
  const WindowReport report = *coordinator_->last_report();
  EXPECT_TRUE(report.missing_ranks.empty());
  const nlohmann::json j = ReadJson(report.json_path);
  EXPECT_EQ(j["num_workers"], 4);
  ASSERT_FALSE(j["findings"].empty());
  const auto& top = j["findings"][0];
  EXPECT_TRUE(top["material"].get<bool>());
  EXPECT_EQ(top["workers"], nlohmann::json::array({2}));
  EXPECT_EQ(top["function"], "model.py:20 forward");
  EXPECT_EQ(top["function_key"],
            "python:train.py:5 train > python:train.py:9 step > python:model.py:20 forward");
  EXPECT_TRUE(fs::exists(report.html_path));
  for (const auto& w : j["workers"]) {
    EXPECT_EQ(w["iterations"].get<int>(), 9) << w.dump();
    EXPECT_EQ(w["stats"]["dropped_events"], 0);
  }
}

// What went wrong on the way from the agents to the summaries reaches the window's report,
// each count under its data-quality counter with its severity and in a note: events the
// agent dropped (its window_done count), events of a function slot that failed validation,
// and host metrics the collector's sampler could not read (a host-wide problem: every
// worker's).
TEST_F(LivePipelineTest, DroppedEventsInvalidSlotsAndUnreadMetricsReachTheReport) {
  sampler_ = std::make_shared<FakeSampler>();
  sampler_->AddProblem(-1, SampleProblem::kUnreadable, 2);
  Start(5000, 0, /*window_ms=*/1500);
  std::vector<std::unique_ptr<FakeAgent>> agents;
  ASSERT_NO_FATAL_FAILURE(JoinAgents(4, "quality", &agents));
  agents[2]->SendJson({{"type", "trigger"}, {"rank", 2}, {"reason", "slowdown"}, {"detail", "x"}});
  for (auto& a : agents) {
    auto w = a->WaitFor("window", 3000);
    ASSERT_TRUE(w) << "rank " << a->rank() << " got no window";
    uint64_t dropped = 0;
    if (a->rank() == 1) {
      // A slot whose parent is not below it (a corrupt table), and 4 events of it before
      // the first iteration (start + 1 ms).
      const uint32_t corrupt = a->Publish(EventKind::kPythonCall, "corrupt", 99);
      const int64_t start = (*w)["start_ns"].get<int64_t>();
      for (int64_t i = 0; i < 4; ++i) {
        a->Push(corrupt, start + i * 100'000, start + i * 100'000 + 10'000);
      }
      dropped = 3;
    }
    Play(*a, *w, 10, dropped);
  }
  ASSERT_TRUE(WaitForReport(10000));
  const nlohmann::json j = ReadJson(coordinator_->last_report()->json_path);
  std::map<std::string, nlohmann::json> counters;
  for (const auto& c : j["data_quality"]) counters[c["counter"].get<std::string>()] = c;
  ASSERT_EQ(counters.count("dropped_events"), 1u) << j["data_quality"].dump();
  EXPECT_EQ(counters["dropped_events"]["severity"], "data_loss");
  EXPECT_EQ(counters["dropped_events"]["total"], 3);
  EXPECT_EQ(counters["dropped_events"]["workers"], nlohmann::json::array({1}));
  ASSERT_EQ(counters.count("invalid_function_events"), 1u) << j["data_quality"].dump();
  EXPECT_EQ(counters["invalid_function_events"]["severity"], "info");
  EXPECT_EQ(counters["invalid_function_events"]["total"], 4);
  EXPECT_EQ(counters["invalid_function_events"]["workers"], nlohmann::json::array({1}));
  ASSERT_EQ(counters.count("metric_reads_failed"), 1u) << j["data_quality"].dump();
  EXPECT_EQ(counters["metric_reads_failed"]["severity"], "info");
  EXPECT_EQ(counters["metric_reads_failed"]["workers"], nlohmann::json::array({0, 1, 2, 3}));
  for (const auto& w : j["workers"]) {
    const uint64_t failed = w["stats"]["metric_reads_failed"].get<uint64_t>();
    EXPECT_EQ(failed % 2, 0u) << "2 per sample in the window: " << w.dump();
    EXPECT_GT(failed, 0u) << w.dump();
  }
  bool noted = false;
  for (const auto& n : j["notes"]) {
    const std::string note = n.get<std::string>();
    if (note.rfind("rank 1: 3 dropped, 0 malformed, 0 out-of-order of ", 0) == 0) {
      noted = note.find("; 4 events of invalid function slots") != std::string::npos &&
              note.find("metric reads failed") != std::string::npos;
    }
  }
  EXPECT_TRUE(noted) << j["notes"].dump();
}

TEST_F(LivePipelineTest, TheWindowsTimelineMergesEveryRanksRecordingAndDrawsTheFinding) {
  Start(5000, 100'000);
  std::vector<std::unique_ptr<FakeAgent>> agents;
  ASSERT_NO_FATAL_FAILURE(JoinAgents(4, "timeline", &agents));
  agents[2]->SendJson({{"type", "trigger"}, {"rank", 2}, {"reason", "slowdown"}, {"detail", "x"}});
  for (auto& a : agents) {
    auto w = a->WaitFor("window", 3000);
    ASSERT_TRUE(w) << "rank " << a->rank() << " got no window";
    Play(*a, *w, a->rank() == 2 ? 30 : 10);
  }
  ASSERT_TRUE(WaitForReport(5000));
  const WindowReport report = *coordinator_->last_report();
  ASSERT_EQ(report.perfetto_path, (dir_ / "reports" / "window-1.perfetto.json").string());
  const nlohmann::json j = ReadJson(report.json_path);
  const nlohmann::json doc = ReadJson(report.perfetto_path);
  // One process per rank; each rank's events are the events its window summarized.
  std::map<int, int64_t> events;
  std::map<int, std::string> names;
  int64_t finding_slices = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") {
      names[e["pid"].get<int>()] = e["args"]["name"].get<std::string>();
    } else if (e["ph"] == "X" && e["cat"] != "perftracker") {
      ++events[e["pid"].get<int>()];
    } else if (e["ph"] == "X" && e["pid"] == 2 &&
               e["name"].get<std::string>().find("model.py:20 forward") != std::string::npos) {
      ++finding_slices;
    }
  }
  ASSERT_EQ(names.size(), 4u);
  for (const auto& w : j["workers"]) {
    const int rank = w["rank"].get<int>();
    EXPECT_EQ(names[rank].rfind("rank " + std::to_string(rank) + " (", 0), 0u) << names[rank];
    EXPECT_EQ(events[rank], w["stats"]["events"].get<int64_t>()) << "rank " << rank;
  }
  EXPECT_EQ(finding_slices, 9) << "one slice per forward call of the culprit";
  EXPECT_EQ(doc["otherData"]["events_aggregated"], 0);
  // Merged and removed; linked from the HTML report.
  EXPECT_TRUE(fs::is_empty(dir_ / "reports" / "recordings"));
  std::ifstream html(report.html_path);
  std::stringstream ss;
  ss << html.rdbuf();
  EXPECT_NE(ss.str().find("href=\"window-1.perfetto.json\""), std::string::npos);
}

TEST_F(LivePipelineTest, EventsOverTheRecordingCapAreCountedNotSilentlyCut) {
  Start(5000, 10);
  std::vector<std::unique_ptr<FakeAgent>> agents;
  ASSERT_NO_FATAL_FAILURE(JoinAgents(2, "capped", &agents));
  agents[0]->SendJson({{"type", "trigger"}, {"rank", 0}, {"reason", "manual"}, {"detail", "x"}});
  for (auto& a : agents) {
    auto w = a->WaitFor("window", 3000);
    ASSERT_TRUE(w);
    Play(*a, *w, 10);
  }
  ASSERT_TRUE(WaitForReport(5000));
  const WindowReport report = *coordinator_->last_report();
  const nlohmann::json j = ReadJson(report.json_path);
  const nlohmann::json doc = ReadJson(report.perfetto_path);
  int64_t window_events = 0;
  for (const auto& w : j["workers"]) window_events += w["stats"]["events"].get<int64_t>();
  EXPECT_EQ(doc["otherData"]["events_total"].get<int64_t>(), window_events);
  EXPECT_EQ(doc["otherData"]["events_written"], 20);
  EXPECT_EQ(doc["otherData"]["events_aggregated"].get<int64_t>(), window_events - 20);
  for (const auto& r : doc["otherData"]["ranks"]) {
    EXPECT_EQ(r["events_not_recorded"].get<int64_t>(), r["events"].get<int64_t>() - 10);
  }
}

TEST_F(LivePipelineTest, AnAgentKilledMidWindowIsNamedMissingAfterTheTimeout) {
  // 3 s for the live ranks' summaries: at load 30 (2 cores) the collector's summaries of the
  // three that played came after a 0.7 s wait, and every rank was named missing.
  Start(3000);
  std::vector<std::unique_ptr<FakeAgent>> agents;
  ASSERT_NO_FATAL_FAILURE(JoinAgents(4, "killed", &agents));
  agents[0]->SendJson({{"type", "trigger"}, {"rank", 0}, {"reason", "slowdown"}});
  std::vector<nlohmann::json> windows;
  for (auto& a : agents) {
    auto w = a->WaitFor("window", 3000);
    ASSERT_TRUE(w);
    windows.push_back(*w);
  }
  agents[3]->Disconnect();  // killed: no bye, no window_done
  for (int r = 0; r < 3; ++r) Play(*agents[static_cast<size_t>(r)], windows[static_cast<size_t>(r)], 10);
  ASSERT_TRUE(WaitForReport(20000));
  const WindowReport report = *coordinator_->last_report();
  EXPECT_EQ(report.missing_ranks, std::vector<int32_t>{3});
  const nlohmann::json j = ReadJson(report.json_path);
  EXPECT_EQ(j["num_workers"], 3);
  bool named = false;
  for (const auto& n : j["notes"]) {
    named |= n.get<std::string>().starts_with("rank 3 sent no summary (agent gone?");
  }
  EXPECT_TRUE(named) << j["notes"].dump(1);
}

}  // namespace
}  // namespace perftracker
