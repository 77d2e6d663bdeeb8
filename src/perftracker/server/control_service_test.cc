// ControlService behind a real ControlServer (gRPC on loopback) with a SqliteStore: two
// collectors of one job, a window on both, summaries stored and diagnosed, the refusals a
// server owes bad or out-of-order messages, a collector gone mid-window, and a restart on
// the same store.
#include "perftracker/server/control_service.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "perftracker/core/realtime_clock.h"
#include "perftracker/server/sqlite/sqlite_store.h"
#include "perftracker/wire/control_client.h"
#include "perftracker/wire/summary_codec.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kMs = 1'000'000;

template <typename P>
bool Eventually(P p, int ms = 8000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (p()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A collector's stream, driven by hand.
struct Collector {
  std::unique_ptr<ControlClient> client;
  std::unique_ptr<ControlStream> stream;

  // The next message that is not a ControlRejected (those are returned by NextRejected).
  ServerMessage Next() {
    ServerMessage m;
    EXPECT_TRUE(stream->Read(&m));
    return m;
  }
};

WorkerSummary Summary(int32_t rank, int64_t start, int64_t end) {
  WorkerSummary s;
  s.rank = rank;
  s.host = rank < 4 ? "node-a" : "node-b";
  s.source = "live";
  s.window_start_ns = start;
  s.window_end_ns = end;
  return s;
}

class ControlServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("perftracker-control-service-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    StopServer();
    fs::remove_all(dir_);
  }

  // On a fresh SQLite store, or on `store` when given.
  void StartServer(Store* store_override = nullptr) {
    auto store = SqliteStore::Open((dir_ / "store.db").string());
    ASSERT_TRUE(store.ok()) << store.status().message();
    store_ = std::move(store).value();
    ControlServiceOptions o;
    o.coordinator.report_dir = (dir_ / "reports").string();
    o.coordinator.window_ns = 300 * kMs;
    o.coordinator.delay_ns = 50 * kMs;
    o.coordinator.wait_summaries_ns = 1500 * kMs;
    o.coordinator.cooldown_ns = 0;
    o.coordinator.log = [](std::string_view) {};
    o.store = store_override != nullptr ? store_override : store_.get();
    o.store_shared = shared_store_;
    o.report_poll_ms = 20;
    o.log = [this](std::string_view line) {
      std::lock_guard<std::mutex> lock(log_mu_);
      log_.emplace_back(line);
    };
    service_ = std::make_unique<ControlService>(o);
    ASSERT_TRUE(service_->Start().ok());
    ControlServerOptions so;
    so.log = [](std::string_view) {};
    auto server = ControlServer::Start(so, service_.get());
    ASSERT_TRUE(server.ok());
    server_ = std::move(server).value();
  }
  void StopServer() {
    if (server_) server_->Shutdown();
    if (service_) service_->Stop();
    server_.reset();
    service_.reset();
    store_.reset();
  }

  Collector Connect(const std::string& host, int first_rank, int ranks, int world) {
    ControlClientOptions o;
    o.address = "127.0.0.1:" + std::to_string(server_->port());
    Collector c;
    c.client = std::move(ControlClient::Create(o)).value();
    ControlRegistration r;
    r.job_id = "job-x";
    r.host = host;
    r.title = "train.py";
    for (int i = 0; i < ranks; ++i)
      r.ranks.push_back({first_rank + i, world, i, 1000 + first_rank + i, host});
    auto stream = c.client->Connect(r, 5000);
    EXPECT_TRUE(stream.ok()) << stream.status().message();
    if (stream.ok()) c.stream = std::move(stream).value();
    return c;
  }

  static WindowSpec WaitWindow(Collector& c) {
    for (;;) {
      ServerMessage m = c.Next();
      if (auto* w = std::get_if<WindowSpec>(&m)) return *w;
    }
  }
  static std::string NextRejected(Collector& c) {
    for (;;) {
      ServerMessage m = c.Next();
      if (auto* r = std::get_if<ControlRejected>(&m)) return r->error;
    }
  }

  // What a server killed mid-window leaves in the store: the job and its window, open.
  void StoreOpenWindow(uint64_t id, int64_t start_ns) {
    auto store = SqliteStore::Open((dir_ / "store.db").string());
    ASSERT_TRUE(store.ok()) << store.status().message();
    ASSERT_TRUE((*store)->UpsertJob({"job-x", "train.py", 1, start_ns, start_ns}).ok());
    WindowRecord w;
    w.job_id = "job-x";
    w.window_id = id;
    w.reason = "manual";
    w.start_ns = start_ns;
    w.duration_ns = 300 * kMs;
    ASSERT_TRUE((*store)->PutWindow(w).ok());
  }
  bool Logged(const std::string& text) {
    std::lock_guard<std::mutex> lock(log_mu_);
    for (const std::string& line : log_) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }

  fs::path dir_;
  bool shared_store_ = false;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<ControlServer> server_;
  std::mutex log_mu_;
  std::vector<std::string> log_;
};

// A store whose database is gone (PostgreSQL restarting): every write fails, reads find
// nothing.
class DownStore final : public Store {
 public:
  static Status Down() {
    return Status::Internal("store postgresql://db/pt: server closed the connection");
  }
  Status UpsertJob(const JobRecord&) override { return Down(); }
  Status UpsertWorkers(const std::vector<WorkerRecord>&) override { return Down(); }
  StatusOr<JobRecord> GetJob(const std::string&) override { return Down(); }
  StatusOr<std::vector<JobRecord>> ListJobs() override { return Down(); }
  StatusOr<std::vector<WorkerRecord>> ListWorkers(const std::string&) override { return Down(); }
  Status AppendIterations(const std::string&, const std::vector<IterationPoint>&) override {
    return Down();
  }
  StatusOr<std::vector<IterationPoint>> ListIterations(const std::string&, int64_t,
                                                       size_t) override {
    return Down();
  }
  Status PutWindow(const WindowRecord&) override { return Down(); }
  StatusOr<std::vector<WindowRecord>> ListWindows(const std::string&) override { return Down(); }
  StatusOr<WindowRecord> GetWindow(const std::string&, uint64_t) override { return Down(); }
  Status PutSummary(const std::string&, uint64_t, const WorkerSummary&) override { return Down(); }
  Status PutSummaryBytes(const std::string&, uint64_t, int32_t, std::string_view) override {
    return Down();
  }
  StatusOr<std::vector<WorkerSummary>> ListSummaries(const std::string&, uint64_t) override {
    return Down();
  }
  Status PutDiagnosis(const DiagnosisRecord&) override { return Down(); }
  StatusOr<DiagnosisRecord> GetDiagnosis(const std::string&, uint64_t) override { return Down(); }
  Status SetBaseline(const std::string&, uint64_t) override { return Down(); }
  StatusOr<std::optional<uint64_t>> GetBaseline(const std::string&) override { return Down(); }
};

// The job goes on without its store, and the server's log gets a few lines about it, not
// one per message: 200 iteration batches and a window against a store that is down.
TEST_F(ControlServiceTest, AStoreThatIsDownIsLoggedAFewTimesAndTheJobGoesOn) {
  DownStore down;
  StartServer(&down);
  Collector a = Connect("node-a", 0, 2, 2);
  for (int i = 1; i <= 200; ++i) a.stream->Write(ControlIterations{{{0, i * kMs, kMs}}});
  a.stream->Write(ControlTrigger{1, WindowReason::kSlowdown, "mean 1.3x the shortest"});
  const WindowSpec w = WaitWindow(a);  // after the batches: one stream, in order
  for (int r = 0; r < 2; ++r) {
    a.stream->Write(ControlSummary{
        w.id, r, EncodeWorkerSummary(Summary(r, w.start_ns, w.start_ns + w.duration_ns))});
  }
  const bool reported = Eventually([&] { return service_->Reports("job-x").size() == 1; });
  StopServer();  // before `down` goes: the service's thread writes reports to it
  ASSERT_TRUE(reported);
  std::lock_guard<std::mutex> lock(log_mu_);
  size_t store_lines = 0;
  for (const std::string& line : log_) {
    if (line.find(": store: ") != std::string::npos) ++store_lines;
  }
  EXPECT_GE(store_lines, 1u);
  // 5 per 10 s; the test may span a few periods on a busy machine, never 200 batches' worth.
  EXPECT_LE(store_lines, 20u) << "a line per failed write";
}

// A store that counts the job-row calls of the server on it (and passes every call on).
class CountingStore final : public Store {
 public:
  explicit CountingStore(Store* inner) : inner_(inner) {}
  std::atomic<int> get_job{0}, upsert_job{0}, upsert_workers{0};

  Status UpsertJob(const JobRecord& j) override {
    ++upsert_job;
    return inner_->UpsertJob(j);
  }
  Status UpsertWorkers(const std::vector<WorkerRecord>& w) override {
    ++upsert_workers;
    return inner_->UpsertWorkers(w);
  }
  StatusOr<JobRecord> GetJob(const std::string& id) override {
    ++get_job;
    return inner_->GetJob(id);
  }
  StatusOr<std::vector<JobRecord>> ListJobs() override { return inner_->ListJobs(); }
  StatusOr<std::vector<WorkerRecord>> ListWorkers(const std::string& id) override {
    return inner_->ListWorkers(id);
  }
  Status AppendIterations(const std::string& id, const std::vector<IterationPoint>& p) override {
    return inner_->AppendIterations(id, p);
  }
  StatusOr<std::vector<IterationPoint>> ListIterations(const std::string& id, int64_t since,
                                                       size_t limit) override {
    return inner_->ListIterations(id, since, limit);
  }
  Status PutWindow(const WindowRecord& w) override { return inner_->PutWindow(w); }
  StatusOr<std::vector<WindowRecord>> ListWindows(const std::string& id) override {
    return inner_->ListWindows(id);
  }
  StatusOr<WindowRecord> GetWindow(const std::string& id, uint64_t w) override {
    return inner_->GetWindow(id, w);
  }
  Status PutSummary(const std::string& id, uint64_t w, const WorkerSummary& s) override {
    return inner_->PutSummary(id, w, s);
  }
  Status PutSummaryBytes(const std::string& id, uint64_t w, int32_t rank,
                         std::string_view bytes) override {
    return inner_->PutSummaryBytes(id, w, rank, bytes);
  }
  StatusOr<std::vector<WorkerSummary>> ListSummaries(const std::string& id, uint64_t w) override {
    return inner_->ListSummaries(id, w);
  }
  Status PutDiagnosis(const DiagnosisRecord& d) override { return inner_->PutDiagnosis(d); }
  StatusOr<DiagnosisRecord> GetDiagnosis(const std::string& id, uint64_t w) override {
    return inner_->GetDiagnosis(id, w);
  }
  Status SetBaseline(const std::string& id, uint64_t w) override {
    return inner_->SetBaseline(id, w);
  }
  StatusOr<std::optional<uint64_t>> GetBaseline(const std::string& id) override {
    return inner_->GetBaseline(id);
  }

 private:
  Store* inner_;
};

// The job's row is read once per server and written when it changes (or once a second for
// its last_seen), not at every registration: a fleet re-registering after a restart read and
// wrote that one row once per collector. The worker rows are still written per registration.
TEST_F(ControlServiceTest, RegistrationsOfOneJobReadItsRowOnceAndWriteItWhenItChanges) {
  auto inner = SqliteStore::Open((dir_ / "counted.db").string());
  ASSERT_TRUE(inner.ok()) << inner.status().message();
  CountingStore store(inner->get());
  StartServer(&store);
  const auto start = std::chrono::steady_clock::now();
  std::vector<Collector> collectors;
  for (int i = 0; i < 40; ++i) collectors.push_back(Connect("node-" + std::to_string(i), i, 1, 40));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(store.get_job.load(), 1);
  EXPECT_LE(store.upsert_job.load(), 1 + static_cast<int>(seconds))
      << "the job row is written at every registration";
  EXPECT_EQ(store.upsert_workers.load(), 40);
  auto job = (*inner)->GetJob("job-x");
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->world_size, 40);
  EXPECT_EQ(job->title, "train.py");
  // A change is written at once.
  collectors.push_back(Connect("node-big", 40, 1, 64));
  job = (*inner)->GetJob("job-x");
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->world_size, 64);
  StopServer();  // before `store` goes
}

TEST_F(ControlServiceTest, TwoCollectorsOneWindowEverySummaryStoredAndDiagnosed) {
  StartServer();
  Collector a = Connect("node-a", 0, 4, 8);
  Collector b = Connect("node-b", 4, 4, 8);
  ASSERT_TRUE(Eventually([&] {
    auto jobs = service_->Jobs();
    return jobs.size() == 1 && jobs[0].ranks == 8 && jobs[0].collectors == 2;
  }));
  a.stream->Write(ControlIterations{{{0, 100, 10}, {1, 100, 12}}});
  b.stream->Write(ControlTrigger{6, WindowReason::kSlowdown, "mean 1.3x the shortest"});
  const WindowSpec wa = WaitWindow(a);
  const WindowSpec wb = WaitWindow(b);
  EXPECT_EQ(wa.id, 1u);
  EXPECT_EQ(wa.start_ns, wb.start_ns) << "the same wall-clock window on every host";
  EXPECT_EQ(wa.reason, WindowReason::kSlowdown);
  for (int r = 0; r < 8; ++r) {
    Collector& c = r < 4 ? a : b;
    c.stream->Write(ControlSummary{
        wa.id, r, EncodeWorkerSummary(Summary(r, wa.start_ns, wa.start_ns + wa.duration_ns))});
  }
  // The service stores the diagnosis, then the baseline: wait for both.
  ASSERT_TRUE(Eventually([&] {
    auto d = store_->GetDiagnosis("job-x", 1);
    auto baseline = store_->GetBaseline("job-x");
    return d.ok() && baseline.ok() && baseline->has_value();
  }));
  auto reports = service_->Reports("job-x");
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(reports[0].missing_ranks.empty());
  EXPECT_EQ(reports[0].diagnosis.num_workers, 8);
  EXPECT_TRUE(fs::exists(dir_ / "reports" / "job-x" / "window-1-slowdown.json"));

  auto job = store_->GetJob("job-x");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->world_size, 8);
  EXPECT_EQ(job->title, "train.py");
  EXPECT_EQ(store_->ListWorkers("job-x")->size(), 8u);
  EXPECT_EQ(store_->ListSummaries("job-x", 1)->size(), 8u);
  auto window = store_->GetWindow("job-x", 1);
  ASSERT_TRUE(window.ok());
  EXPECT_EQ(window->state, WindowState::kDiagnosed);
  EXPECT_EQ(window->start_ns, wa.start_ns);
  ASSERT_FALSE(window->triggers.empty());
  EXPECT_EQ(window->triggers[0], "rank 6: slowdown — mean 1.3x the shortest");
  auto d = store_->GetDiagnosis("job-x", 1);
  EXPECT_EQ(nlohmann::json::parse(d->json)["num_workers"], 8);
  EXPECT_EQ(store_->ListIterations("job-x", 0, 0)->size(), 2u);
  // No material finding: the window is the job's healthy baseline.
  EXPECT_EQ(store_->GetBaseline("job-x")->value_or(0), 1u);
}

// Wire forward compatibility: a newer collector's summary carries a metric this server does
// not know (steal time was metric 28 when it was new). An older server refused the whole
// summary, and the window was diagnosed without that rank. Now the rank is in, the value is
// left out, and the report's notes and the server's log say so, once for the window.
TEST_F(ControlServiceTest, ASummaryWithAMetricThisServerDoesNotKnowStillReachesTheLocalizer) {
  StartServer();
  Collector a = Connect("node-a", 0, 2, 2);
  a.stream->Write(ControlTrigger{0, WindowReason::kManual, ""});
  const WindowSpec w = WaitWindow(a);
  for (int r = 0; r < 2; ++r) {
    WorkerSummary s = Summary(r, w.start_ns, w.start_ns + w.duration_ns);
    s.worker_metrics.push_back({Metric::kCpuUtilization, 0.5, 0.0});
    if (r == 1) s.worker_metrics.push_back({static_cast<Metric>(999), 0.25, 0.0});
    a.stream->Write(ControlSummary{w.id, r, EncodeWorkerSummary(s)});
  }
  ASSERT_TRUE(Eventually([&] { return store_->GetDiagnosis("job-x", w.id).ok(); }));
  auto reports = service_->Reports("job-x");
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(reports[0].missing_ranks.empty());
  EXPECT_EQ(reports[0].diagnosis.num_workers, 2);
  const std::string line =
      "rank 1: 1 metric value this server does not know was left out (first: worker metric "
      "999): a newer collector? Upgrade the server to read them";
  const auto& notes = reports[0].diagnosis.notes;
  EXPECT_EQ(std::count(notes.begin(), notes.end(), line), 1) << ::testing::PrintToString(notes);
  EXPECT_TRUE(Logged("window 1: " + line));
  EXPECT_EQ(store_->ListSummaries("job-x", w.id)->size(), 2u);
}

TEST_F(ControlServiceTest, BadAndOutOfOrderMessagesAreRefusedWithALineAndNothingIsStored) {
  StartServer();
  Collector a = Connect("node-a", 0, 2, 2);
  a.stream->Write(ControlSummary{5, 0, EncodeWorkerSummary(Summary(0, 1, 2))});
  EXPECT_EQ(NextRejected(a),
            "summary of rank 0 for window 5: this server opened no such window for job job-x");
  a.stream->Write(ControlIterations{{{7, 100, 10}}});
  EXPECT_EQ(
      NextRejected(a),
      "iteration of rank 7, which this collector did not register (send worker_joined first)");
  // A trigger with a reason this server does not know opens a manual window (wire's
  // ControlConvertTest): a ControlTrigger holds only reasons this server knows.

  a.stream->Write(ControlTrigger{0, WindowReason::kManual, ""});
  const WindowSpec w = WaitWindow(a);
  std::string garbage = EncodeWorkerSummary(Summary(0, w.start_ns, w.start_ns + 1));
  garbage.resize(garbage.size() / 2);
  garbage += "\xff\xff\xff";
  a.stream->Write(ControlSummary{w.id, 0, garbage});
  const std::string bad = NextRejected(a);
  EXPECT_TRUE(bad.starts_with("summary of rank 0 for window 1: ")) << bad;
  a.stream->Write(
      ControlSummary{w.id, 1, EncodeWorkerSummary(Summary(0, w.start_ns, w.start_ns + 1))});
  EXPECT_EQ(NextRejected(a), "summary of rank 1 for window 1: the summary inside is rank 0's");
  EXPECT_TRUE(store_->ListSummaries("job-x", 1)->empty());

  // The good ones still go through, and the window is diagnosed.
  for (int r = 0; r < 2; ++r) {
    a.stream->Write(ControlSummary{
        w.id, r, EncodeWorkerSummary(Summary(r, w.start_ns, w.start_ns + w.duration_ns))});
  }
  ASSERT_TRUE(Eventually([&] { return store_->GetDiagnosis("job-x", 1).ok(); }));
  EXPECT_EQ(store_->ListSummaries("job-x", 1)->size(), 2u);
  a.stream->Write(
      ControlSummary{w.id, 0, EncodeWorkerSummary(Summary(0, w.start_ns, w.start_ns + 1))});
  EXPECT_EQ(NextRejected(a),
            "summary of rank 0 for window 1: that window is diagnosed already (too late)");
  ASSERT_TRUE(store_->CheckIntegrity().ok());
}

TEST_F(ControlServiceTest, ACollectorGoneMidWindowIsNamedAndTheWindowDoesNotWaitForIt) {
  StartServer();
  Collector a = Connect("node-a", 0, 2, 4);
  Collector b = Connect("node-b", 2, 2, 4);
  a.stream->Write(ControlTrigger{0, WindowReason::kSlowdown, ""});
  const WindowSpec w = WaitWindow(a);
  WaitWindow(b);
  b.stream->Cancel();  // node-b's collector dies
  for (int r = 0; r < 2; ++r) {
    a.stream->Write(ControlSummary{
        w.id, r, EncodeWorkerSummary(Summary(r, w.start_ns, w.start_ns + w.duration_ns))});
  }
  ASSERT_TRUE(Eventually([&] { return store_->GetDiagnosis("job-x", 1).ok(); }, 4000))
      << "reported once node-a's summaries are in, without waiting for wait_summaries";
  auto d = store_->GetDiagnosis("job-x", 1);
  EXPECT_EQ(d->missing_ranks, (std::vector<int32_t>{2, 3}));
  EXPECT_NE(d->json.find("rank 2 sent no summary"), std::string::npos);
}

// A worker of ten 40 ms iterations in step > block1, block2 (+ extra_ms per iteration),
// block3, loss.
WorkerSummary StepSummary(int32_t rank, int64_t start, int64_t end, double extra_ms) {
  WorkerSummary s = Summary(rank, start, end);
  constexpr int kIterations = 10;
  const int64_t iteration = static_cast<int64_t>((40 + extra_ms) * kMs);
  for (int i = 0; i < kIterations; ++i) {
    s.iterations.push_back({start + i * iteration, iteration + (i % 3) * 100'000, 0, 0, 0, 0, 0});
  }
  auto add = [&](const char* name, EventKind kind, uint32_t parent, double ms) {
    FunctionSummary f;
    f.name = name;
    f.kind = kind;
    f.parent = parent;
    f.count = kIterations;
    f.total_ns = static_cast<int64_t>(ms * kMs) * kIterations;
    f.self_ns = f.total_ns;
    s.functions.push_back(std::move(f));
    return static_cast<uint32_t>(s.functions.size() - 1);
  };
  const uint32_t step =
      add("train.py(9): step", EventKind::kPythonCall, FunctionSummary::kNoParent, 40 + extra_ms);
  add("block1", EventKind::kUserAnnotation, step, 10);
  add("block2", EventKind::kUserAnnotation, step, 12 + extra_ms);
  add("block3", EventKind::kUserAnnotation, step, 10);
  add("loss", EventKind::kUserAnnotation, step, 8);
  s.functions[step].self_ns = 0;
  return s;
}

TEST_F(ControlServiceTest, EachLaterWindowIsComparedWithTheJobsBaseline) {
  StartServer();
  Collector a = Connect("node-a", 0, 2, 2);
  for (uint64_t id : {1u, 2u}) {
    a.stream->Write(ControlTrigger{0, WindowReason::kManual, ""});
    const WindowSpec w = WaitWindow(a);
    ASSERT_EQ(w.id, id);
    for (int r = 0; r < 2; ++r) {
      // Window 2: block2 30 ms slower on both ranks, which no rank shows against its peer.
      a.stream->Write(
          ControlSummary{w.id, r,
                         EncodeWorkerSummary(StepSummary(r, w.start_ns, w.start_ns + w.duration_ns,
                                                         id == 2 ? 30 : 0))});
    }
    ASSERT_TRUE(Eventually([&] { return store_->GetDiagnosis("job-x", id).ok(); }));
  }
  ASSERT_EQ(store_->GetBaseline("job-x")->value_or(0), 1u);
  const fs::path compared = dir_ / "reports" / "job-x" / "window-2-vs-1.json";
  ASSERT_TRUE(Eventually([&] { return fs::exists(compared); }));
  std::ifstream in(compared);
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_FALSE(j["changes"].empty()) << j.dump(1);
  EXPECT_EQ(j["changes"][0]["function"], "block2");
  EXPECT_EQ(j["changes"][0]["workers"], nlohmann::json({0, 1}));
  // The HTML is written after the JSON: wait for it as well.
  EXPECT_TRUE(
      Eventually([&] { return fs::exists(dir_ / "reports" / "job-x" / "window-2-vs-1.html"); }));
  EXPECT_FALSE(fs::exists(dir_ / "reports" / "job-x" / "window-1-vs-1.json"));
  EXPECT_TRUE(Eventually([&] {
    return Logged("job job-x: window 2 vs baseline window 1: block2 is slower on all 2 workers");
  }));
}

TEST_F(ControlServiceTest, ARestartedServerContinuesTheJobsWindowIds) {
  StartServer();
  {
    Collector a = Connect("node-a", 0, 1, 1);
    a.stream->Write(ControlTrigger{0, WindowReason::kManual, ""});
    const WindowSpec w = WaitWindow(a);
    a.stream->Write(ControlSummary{
        w.id, 0, EncodeWorkerSummary(Summary(0, w.start_ns, w.start_ns + w.duration_ns))});
    ASSERT_TRUE(Eventually([&] { return store_->GetDiagnosis("job-x", 1).ok(); }));
    a.stream->Cancel();
  }
  StopServer();
  StartServer();
  ASSERT_TRUE(store_->GetDiagnosis("job-x", 1).ok()) << "the earlier report survives";
  Collector a = Connect("node-a", 0, 1, 1);
  a.stream->Write(ControlTrigger{0, WindowReason::kManual, ""});
  const WindowSpec w = WaitWindow(a);
  EXPECT_EQ(w.id, 2u) << "window ids continue the stored ones";
  a.stream->Write(ControlSummary{
      w.id, 0, EncodeWorkerSummary(Summary(0, w.start_ns, w.start_ns + w.duration_ns))});
  ASSERT_TRUE(Eventually([&] { return store_->GetDiagnosis("job-x", 2).ok(); }));
  EXPECT_EQ(store_->ListWindows("job-x")->size(), 2u);
  EXPECT_TRUE(fs::exists(dir_ / "reports" / "job-x" / "window-1-manual.json"));
  EXPECT_TRUE(fs::exists(dir_ / "reports" / "job-x" / "window-2-manual.json"))
      << "a restarted server does not overwrite the earlier report files";
  EXPECT_EQ(service_->TriggerWindow("nope").message(), "job nope is not known to this server");
}

// Issue 13 §4: a window left open by a killed server stayed "open" forever after a restart.
TEST_F(ControlServiceTest, AWindowLeftOpenByAKilledServerIsAbandonedWithItsReasonAtRestart) {
  StoreOpenWindow(1, RealtimeNs());
  StartServer();
  StatusOr<WindowRecord> w = store_->GetWindow("job-x", 1);
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w->state, WindowState::kAbandoned);
  EXPECT_NE(w->state_reason.find("the server stopped before the window completed (killed or "
                                 "crashed: its summaries were lost); found open when a server "
                                 "started at 20"),
            std::string::npos)
      << w->state_reason;
  EXPECT_TRUE(Logged("job job-x: window 1 abandoned: the server stopped"));
  // The job goes on: its next window is 2.
  Collector a = Connect("node-a", 0, 1, 1);
  a.stream->Write(ControlTrigger{0, WindowReason::kManual, ""});
  EXPECT_EQ(WaitWindow(a).id, 2u);
}

TEST_F(ControlServiceTest, OnASharedStoreAnotherServersLiveWindowStaysOpenUntilItsJobComesHere) {
  const int64_t now = RealtimeNs();
  StoreOpenWindow(1, now - 600'000 * kMs);  // ended 10 minutes ago: nobody waits for it
  StoreOpenWindow(2, now);                  // maybe another live server's
  shared_store_ = true;
  StartServer();
  EXPECT_EQ(store_->GetWindow("job-x", 1)->state, WindowState::kAbandoned);
  EXPECT_EQ(store_->GetWindow("job-x", 2)->state, WindowState::kOpen);
  // The job's collectors register here: the server that opened window 2 is gone.
  Collector a = Connect("node-a", 0, 1, 1);
  StatusOr<WindowRecord> w2 = store_->GetWindow("job-x", 2);
  ASSERT_TRUE(w2.ok());
  EXPECT_EQ(w2->state, WindowState::kAbandoned);
  EXPECT_NE(w2->state_reason.find("the server that opened it stopped before the window "
                                  "completed; found open when the job's collectors registered "
                                  "again at"),
            std::string::npos)
      << w2->state_reason;
}

TEST_F(ControlServiceTest, AWindowOpenWhenTheServerShutsDownIsStoredAbandoned) {
  StartServer();
  Collector a = Connect("node-a", 0, 1, 1);
  a.stream->Write(ControlTrigger{0, WindowReason::kManual, ""});
  const WindowSpec w = WaitWindow(a);
  ASSERT_TRUE(Eventually([&] { return store_->GetWindow("job-x", w.id).ok(); }));
  a.stream->Cancel();
  auto store = SqliteStore::Open((dir_ / "store.db").string());
  ASSERT_TRUE(store.ok());
  StopServer();  // no summary came: the window cannot complete
  StatusOr<WindowRecord> stored = (*store)->GetWindow("job-x", w.id);
  ASSERT_TRUE(stored.ok());
  if (stored->state == WindowState::kDiagnosed) {
    GTEST_SKIP() << "the coordinator diagnosed the window before the stop (busy machine)";
  }
  EXPECT_EQ(stored->state, WindowState::kAbandoned);
  EXPECT_EQ(stored->state_reason, "the server was shut down before the window completed");
}

// perftracker run --server: a hang confirmed at the job's slow end (DataLoader workers
// joining on a loaded machine), then every rank ends its training and the command exits 0:
// the hang is retracted on the server, in its store too, as plain `perftracker run` does. A
// non-zero exit on any host (a user's Ctrl-C of a hung job) keeps it.
TEST_F(ControlServiceTest, AHangAtTheJobsEndIsRetractedInTheStoreOnlyWhenEveryHostExitedZero) {
  StartServer();
  Collector a = Connect("node-a", 0, 1, 2);
  Collector b = Connect("node-b", 1, 1, 2);
  a.stream->Write(ControlTrigger{0, WindowReason::kHang, "no progress for 31 s"});
  const WindowSpec w = WaitWindow(a);
  WaitWindow(b);
  const std::string join =
      "Thread 1 (MainThread) (most recent call last):\n"
      "  File \"/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py\", line 1479, in "
      "_shutdown_workers\n    w.join(timeout=_utils.MP_STATUS_CHECK_INTERVAL)\n";
  // Two stack samples that show no progress confirm the hang; then the window ends.
  for (int sample = 0; sample < 2; ++sample) {
    for (auto [c, rank] : {std::pair<Collector*, int>{&a, 0}, {&b, 1}}) {
      while (!std::holds_alternative<ControlDumpStacks>(c->Next())) {
      }
      c->stream->Write(ControlStacks{w.id, rank, true, join});
    }
  }
  for (auto [c, rank] : {std::pair<Collector*, int>{&a, 0}, {&b, 1}}) {
    c->stream->Write(ControlSummary{
        w.id, rank, EncodeWorkerSummary(Summary(rank, w.start_ns, w.start_ns + 100 * kMs))});
  }
  ASSERT_TRUE(Eventually([&] {
    StatusOr<DiagnosisRecord> d = store_->GetDiagnosis("job-x", w.id);
    return d.ok() && d->top_code == "PT-HANG";
  })) << "no hang diagnosis stored";
  a.stream->Write(ControlTrainingEnded{0, "destroy_process_group"});
  b.stream->Write(ControlTrainingEnded{1, "destroy_process_group"});
  // node-b's command was stopped (SIGINT: 130), node-a's exited 0: the job did not exit 0.
  b.stream->Write(ControlJobExited{130});
  ASSERT_TRUE(Eventually([&] { return Logged("the command on node-b"); }));
  a.stream->Write(ControlJobExited{0});
  ASSERT_TRUE(Eventually([&] { return Logged("the command on node-a"); }));
  EXPECT_TRUE(Logged("job job-x: the command on node-a (") && Logged(") exited with code 0"));
  EXPECT_FALSE(service_->Reports("job-x").at(0).retracted) << "a host exited 130";
  StopServer();

  // Again, every host exiting 0: retracted, and the store holds the rewritten report.
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  log_.clear();
  StartServer();
  Collector c = Connect("node-a", 0, 1, 1);
  c.stream->Write(ControlTrigger{0, WindowReason::kHang, "no progress for 31 s"});
  const WindowSpec w2 = WaitWindow(c);
  for (int sample = 0; sample < 2;) {
    if (std::holds_alternative<ControlDumpStacks>(c.Next())) {
      c.stream->Write(ControlStacks{w2.id, 0, true, join});
      ++sample;
    }
  }
  c.stream->Write(ControlSummary{
      w2.id, 0, EncodeWorkerSummary(Summary(0, w2.start_ns, w2.start_ns + 100 * kMs))});
  ASSERT_TRUE(Eventually([&] {
    StatusOr<DiagnosisRecord> d = store_->GetDiagnosis("job-x", w2.id);
    return d.ok() && d->top_code == "PT-HANG";
  })) << "no hang diagnosis stored";
  c.stream->Write(ControlTrainingEnded{0, "interpreter exit"});
  c.stream->Write(ControlJobExited{0});
  ASSERT_TRUE(Eventually([&] {
    StatusOr<DiagnosisRecord> d = store_->GetDiagnosis("job-x", w2.id);
    return d.ok() && d->top_code.empty() &&
           d->json.find("exited 0: its end was slow, it did not hang") != std::string::npos;
  })) << "the stored diagnosis still names the hang";
  EXPECT_TRUE(service_->Reports("job-x").at(0).retracted);
}

}  // namespace
}  // namespace perftracker
