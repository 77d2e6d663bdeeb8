// The Store contract (store.h), run on every backend: each backend's test binary compiles
// this file and instantiates StoreContractTest (store_contract_test.h).
#include "perftracker/server/store/store_contract_test.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace perftracker {

namespace fs = std::filesystem;

void StoreContractTest::SetUp() {
  std::string tmpl = (fs::temp_directory_path() / "store_contract_test.XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  dir_ = tmpl;
}

void StoreContractTest::TearDown() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

std::string StoreContractTest::NewLocation() {
  StatusOr<std::string> location = GetParam().new_location(dir_);
  EXPECT_TRUE(location.ok()) << location.status().message();
  return location.ok() ? *location : std::string();
}

std::unique_ptr<Store> StoreContractTest::OpenOrDie(const std::string& location,
                                                    size_t max_iterations_per_job) {
  StatusOr<std::unique_ptr<Store>> store = GetParam().open(location, max_iterations_per_job);
  EXPECT_TRUE(store.ok()) << store.status().message();
  return store.ok() ? std::move(store).value() : nullptr;
}

JobRecord Job(const std::string& id, int64_t created_ns) {
  JobRecord job;
  job.job_id = id;
  job.title = "torchrun train.py " + id;
  job.world_size = 4;
  job.created_ns = created_ns;
  job.last_seen_ns = created_ns + 5;
  return job;
}

WindowRecord Window(const std::string& job, uint64_t id, WindowState state) {
  WindowRecord w;
  w.job_id = job;
  w.window_id = id;
  w.reason = "slowdown";
  w.start_ns = static_cast<int64_t>(id) * 1'000'000'000;
  w.duration_ns = 10'000'000'000;
  w.triggers = {"rank 2: slowdown (mean 1.21x)", "rank \"3\": hang"};
  w.state = state;
  return w;
}

WorkerSummary Summary(int32_t rank) {
  WorkerSummary s;
  s.rank = rank;
  s.host = "node-" + std::to_string(rank / 2);
  s.source = "collector 10.0.0.1:7000";
  s.window_start_ns = 1'000'000'000;
  s.window_end_ns = 11'000'000'000;
  s.iterations.push_back({1'000'000'000, 80'000'000, 50'000'000, 20'000'000, 5'000'000, 0, 0});
  FunctionSummary f;
  f.key = "python:train.py:99 Block2.forward";
  f.name = "Block2.forward";
  f.kind = EventKind::kPythonCall;
  f.count = 120;
  f.total_ns = 42'000'000LL * (rank + 1);
  f.self_ns = f.total_ns;
  for (int i = 0; i < 120; ++i) f.durations.Add(350'000.0 * (rank + 1));
  s.functions.push_back(f);
  return s;
}

namespace {

TEST_P(StoreContractTest, JobsAndWorkers) {
  auto store = OpenOrDie(NewLocation());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->UpsertJob(Job("a", 100)).ok());
  ASSERT_TRUE(store->UpsertJob(Job("b", 200)).ok());
  JobRecord changed = Job("a", 100);
  changed.world_size = 8;
  changed.last_seen_ns = 999;
  ASSERT_TRUE(store->UpsertJob(changed).ok());

  StatusOr<JobRecord> a = store->GetJob("a");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->world_size, 8);
  EXPECT_EQ(a->last_seen_ns, 999);
  EXPECT_EQ(a->title, "torchrun train.py a");

  StatusOr<std::vector<JobRecord>> jobs = store->ListJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].job_id, "b");  // newest first
  EXPECT_EQ((*jobs)[1].job_id, "a");

  StatusOr<JobRecord> missing = store->GetJob("nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);

  ASSERT_TRUE(store->UpsertWorker({"a", 1, "node-1", 4242, 7}).ok());
  ASSERT_TRUE(store->UpsertWorker({"a", 0, "node-0", 4141, 6}).ok());
  ASSERT_TRUE(store->UpsertWorker({"a", 1, "node-9", 4343, 8}).ok());  // replaces rank 1
  StatusOr<std::vector<WorkerRecord>> workers = store->ListWorkers("a");
  ASSERT_TRUE(workers.ok());
  ASSERT_EQ(workers->size(), 2u);
  EXPECT_EQ((*workers)[0].rank, 0);
  EXPECT_EQ((*workers)[1].host, "node-9");
  EXPECT_EQ((*workers)[1].pid, 4343);
  EXPECT_TRUE(store->ListWorkers("nope")->empty());

  Status orphan = store->UpsertWorker({"ghost", 0, "h", 1, 1});
  EXPECT_EQ(orphan.code(), StatusCode::kNotFound);
  EXPECT_NE(orphan.message().find("job ghost is not registered"), std::string::npos)
      << orphan.message();
  EXPECT_EQ(store->UpsertWorker({"a", -1, "h", 1, 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->UpsertJob(Job("")).code(), StatusCode::kInvalidArgument);
}

// A collector's registration stores all its ranks in one call: all of them, or none when one
// is bad or the job is not there.
TEST_P(StoreContractTest, WorkersOfARegistrationAreStoredTogetherOrNotAtAll) {
  auto store = OpenOrDie(NewLocation());
  ASSERT_TRUE(store->UpsertJob(Job("a")).ok());
  std::vector<WorkerRecord> batch;
  for (int r = 0; r < 50; ++r) batch.push_back({"a", r, "node-7", 1000 + r, 5});
  ASSERT_TRUE(store->UpsertWorkers(batch).ok());
  ASSERT_TRUE(store->UpsertWorkers({}).ok());
  StatusOr<std::vector<WorkerRecord>> workers = store->ListWorkers("a");
  ASSERT_TRUE(workers.ok());
  ASSERT_EQ(workers->size(), 50u);
  EXPECT_EQ((*workers)[49].pid, 1049);

  std::vector<WorkerRecord> bad = {{"a", 60, "node-8", 1, 6}, {"a", -2, "node-8", 2, 6}};
  EXPECT_EQ(store->UpsertWorkers(bad).code(), StatusCode::kInvalidArgument);
  std::vector<WorkerRecord> orphan = {{"a", 61, "node-8", 1, 6}, {"ghost", 0, "node-8", 2, 6}};
  Status st = store->UpsertWorkers(orphan);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("job ghost is not registered"), std::string::npos) << st.message();
  EXPECT_EQ(store->ListWorkers("a")->size(), 50u);  // neither batch left a row
}

TEST_P(StoreContractTest, Iterations) {
  auto store = OpenOrDie(NewLocation());
  ASSERT_TRUE(store->UpsertJob(Job("j")).ok());
  std::vector<IterationPoint> points;
  for (int i = 1; i <= 10; ++i) points.push_back({i % 2, i * 100, 80 + i});
  ASSERT_TRUE(store->AppendIterations("j", points).ok());

  StatusOr<std::vector<IterationPoint>> all = store->ListIterations("j", 0, 0);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 10u);
  EXPECT_EQ((*all)[0].end_ns, 100);
  EXPECT_EQ((*all)[9].duration_ns, 90);

  StatusOr<std::vector<IterationPoint>> since = store->ListIterations("j", 500, 0);
  ASSERT_EQ(since->size(), 5u);  // strictly after 500
  EXPECT_EQ(since->front().end_ns, 600);

  StatusOr<std::vector<IterationPoint>> newest = store->ListIterations("j", 0, 3);
  ASSERT_EQ(newest->size(), 3u);  // the newest three, oldest first
  EXPECT_EQ((*newest)[0].end_ns, 800);
  EXPECT_EQ((*newest)[2].end_ns, 1000);
  EXPECT_EQ((*newest)[2].rank, 0);

  EXPECT_TRUE(store->ListIterations("other", 0, 0)->empty());
  EXPECT_EQ(store->AppendIterations("ghost", points).code(), StatusCode::kNotFound);
  // A bad point rejects the whole batch.
  std::vector<IterationPoint> bad = {{0, 2000, 5}, {-3, 2001, 5}};
  Status st = store->AppendIterations("j", bad);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rank -3"), std::string::npos) << st.message();
  EXPECT_EQ(store->ListIterations("j", 0, 0)->size(), 10u);
}

TEST_P(StoreContractTest, IterationHistoryIsCappedPerJob) {
  auto store = OpenOrDie(NewLocation(), /*max_iterations_per_job=*/100);
  ASSERT_TRUE(store->UpsertJob(Job("big")).ok());
  ASSERT_TRUE(store->UpsertJob(Job("small")).ok());
  ASSERT_TRUE(store->AppendIterations("small", {{0, 1, 10}, {1, 2, 10}}).ok());
  int64_t t = 0;
  for (int batch = 0; batch < 100; ++batch) {
    std::vector<IterationPoint> points;
    for (int r = 0; r < 10; ++r) points.push_back({r, ++t, 50});
    ASSERT_TRUE(store->AppendIterations("big", points).ok());
  }
  StatusOr<std::vector<IterationPoint>> kept = store->ListIterations("big", 0, 0);
  ASSERT_TRUE(kept.ok());
  // At most the cap plus what arrived since the last prune (cap / 8, rounded to batches).
  EXPECT_GE(kept->size(), 100u);
  EXPECT_LE(kept->size(), 100u + 20u);
  EXPECT_EQ(kept->back().end_ns, 1000);                         // the newest are the ones kept
  EXPECT_EQ(store->ListIterations("small", 0, 0)->size(), 2u);  // other jobs untouched
}

TEST_P(StoreContractTest, WindowsSummariesDiagnosesBaseline) {
  auto store = OpenOrDie(NewLocation());
  ASSERT_TRUE(store->UpsertJob(Job("j")).ok());
  EXPECT_EQ(store->PutWindow(Window("ghost", 1)).code(), StatusCode::kNotFound);
  EXPECT_EQ(store->PutWindow(Window("j", 0)).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(store->PutWindow(Window("j", 2)).ok());
  ASSERT_TRUE(store->PutWindow(Window("j", 1)).ok());

  StatusOr<std::vector<WindowRecord>> windows = store->ListWindows("j");
  ASSERT_TRUE(windows.ok());
  ASSERT_EQ(windows->size(), 2u);
  EXPECT_EQ((*windows)[0].window_id, 1u);
  EXPECT_EQ((*windows)[0].triggers, Window("j", 1).triggers);
  EXPECT_EQ((*windows)[0].state, WindowState::kOpen);

  // Same span, new state: an update. Another span: refused, the stored window unchanged.
  WindowRecord diagnosed = Window("j", 1, WindowState::kDiagnosed);
  diagnosed.triggers.push_back("rank 5: slowdown");
  ASSERT_TRUE(store->PutWindow(diagnosed).ok());
  StatusOr<WindowRecord> w1 = store->GetWindow("j", 1);
  ASSERT_TRUE(w1.ok());
  EXPECT_EQ(w1->state, WindowState::kDiagnosed);
  EXPECT_EQ(w1->triggers.size(), 3u);
  WindowRecord moved = Window("j", 1, WindowState::kDiagnosed);
  moved.start_ns += 1;
  Status reuse = store->PutWindow(moved);
  EXPECT_EQ(reuse.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(reuse.message().find("job j window 1 already exists with another span"),
            std::string::npos)
      << reuse.message();
  Status back = store->PutWindow(Window("j", 1, WindowState::kOpen));
  EXPECT_EQ(back.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(back.message().find("is diagnosed; it cannot become open"), std::string::npos)
      << back.message();
  EXPECT_EQ(store->GetWindow("j", 1)->state, WindowState::kDiagnosed);
  // An abandoned window keeps its reason (issue 13 §4); late summaries may still complete it.
  WindowRecord abandoned = Window("j", 2, WindowState::kAbandoned);
  abandoned.state_reason = "the server stopped before the window completed";
  ASSERT_TRUE(store->PutWindow(abandoned).ok());
  EXPECT_EQ(store->GetWindow("j", 2)->state_reason, abandoned.state_reason);
  EXPECT_EQ(store->ListWindows("j")->at(1).state_reason, abandoned.state_reason);
  EXPECT_EQ(store->GetWindow("j", 1)->state_reason, "");
  ASSERT_TRUE(store->PutWindow(Window("j", 2, WindowState::kDiagnosed)).ok());
  EXPECT_EQ(store->GetWindow("j", 2)->state_reason, "");
  EXPECT_EQ(store->GetWindow("j", 9).status().code(), StatusCode::kNotFound);

  // Summaries round-trip through their wire bytes, keyed by rank.
  EXPECT_EQ(store->PutSummary("j", 7, Summary(0)).code(), StatusCode::kNotFound);
  for (int32_t r : {3, 0, 1, 2}) ASSERT_TRUE(store->PutSummary("j", 1, Summary(r)).ok());
  WorkerSummary replaced = Summary(2);
  replaced.host = "node-replaced";
  ASSERT_TRUE(store->PutSummary("j", 1, replaced).ok());
  StatusOr<std::vector<WorkerSummary>> summaries = store->ListSummaries("j", 1);
  ASSERT_TRUE(summaries.ok()) << summaries.status().message();
  ASSERT_EQ(summaries->size(), 4u);
  for (int32_t r = 0; r < 4; ++r) EXPECT_EQ((*summaries)[r].rank, r);
  EXPECT_EQ((*summaries)[2].host, "node-replaced");
  ASSERT_EQ((*summaries)[3].functions.size(), 1u);
  EXPECT_EQ((*summaries)[3].functions[0].name, "Block2.forward");
  EXPECT_EQ((*summaries)[3].functions[0].total_ns, 4 * 42'000'000LL);
  EXPECT_EQ((*summaries)[3].functions[0].durations.count(), 120u);
  EXPECT_TRUE(store->ListSummaries("j", 2)->empty());

  // Diagnoses.
  DiagnosisRecord d;
  d.job_id = "j";
  d.window_id = 1;
  d.json = R"({"schema_version":1,"findings":[{"code":"PT-STRAGGLER-COMPUTE"}]})";
  d.text = "rank 2 is the straggler";
  d.top_code = "PT-STRAGGLER-COMPUTE";
  d.missing_ranks = {5, 6};
  d.created_ns = 77;
  d.perfetto_path = "/var/lib/perftracker/reports/window-1.perfetto.json";
  ASSERT_TRUE(store->PutDiagnosis(d).ok());
  StatusOr<DiagnosisRecord> got = store->GetDiagnosis("j", 1);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->json, d.json);
  EXPECT_EQ(got->text, d.text);
  EXPECT_EQ(got->top_code, d.top_code);
  EXPECT_EQ(got->missing_ranks, d.missing_ranks);
  EXPECT_EQ(got->created_ns, 77);
  EXPECT_EQ(got->perfetto_path, d.perfetto_path);
  StatusOr<DiagnosisRecord> none = store->GetDiagnosis("j", 2);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("job j window 2 has no diagnosis"), std::string::npos);
  d.window_id = 3;
  EXPECT_EQ(store->PutDiagnosis(d).code(), StatusCode::kNotFound);

  // Baseline.
  StatusOr<std::optional<uint64_t>> base = store->GetBaseline("j");
  ASSERT_TRUE(base.ok());
  EXPECT_FALSE(base->has_value());
  EXPECT_EQ(store->SetBaseline("j", 5).code(), StatusCode::kNotFound);
  ASSERT_TRUE(store->SetBaseline("j", 1).ok());
  EXPECT_EQ(store->GetBaseline("j")->value(), 1u);
  ASSERT_TRUE(store->UpsertJob(Job("j")).ok());  // re-registration keeps the baseline
  EXPECT_EQ(store->GetBaseline("j")->value(), 1u);
  EXPECT_EQ(store->GetBaseline("ghost").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(GetParam().check_integrity(store.get()).ok());
}

TEST_P(StoreContractTest, ReopenAfterClose) {
  const std::string path = NewLocation();
  {
    auto store = OpenOrDie(path);
    ASSERT_TRUE(store->UpsertJob(Job("j")).ok());
    ASSERT_TRUE(store->PutWindow(Window("j", 1, WindowState::kDiagnosed)).ok());
    ASSERT_TRUE(store->PutSummary("j", 1, Summary(2)).ok());
    ASSERT_TRUE(store->SetBaseline("j", 1).ok());
  }
  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->GetJob("j")->title, "torchrun train.py j");
  EXPECT_EQ(store->GetWindow("j", 1)->state, WindowState::kDiagnosed);
  EXPECT_EQ(store->ListSummaries("j", 1)->at(0).rank, 2);
  EXPECT_EQ(store->GetBaseline("j")->value(), 1u);
}

TEST_P(StoreContractTest, ConcurrentWritersAndReaders) {
  auto store = OpenOrDie(NewLocation());
  ASSERT_TRUE(store->UpsertJob(Job("j")).ok());
  constexpr int kWriters = 4;
  constexpr int kWindowsPerWriter = 25;
  std::atomic<bool> failed{false};
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kWriters; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kWindowsPerWriter; ++i) {
        const uint64_t id = static_cast<uint64_t>(t * kWindowsPerWriter + i + 1);
        if (!store->PutWindow(Window("j", id)).ok() ||
            !store->PutSummary("j", id, Summary(t)).ok() ||
            !store->AppendIterations("j", {{t, static_cast<int64_t>(id), 5}}).ok()) {
          failed = true;
        }
      }
    });
  }
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&] {
      while (!done) {
        if (!store->ListWindows("j").ok() || !store->ListIterations("j", 0, 10).ok()) {
          failed = true;
        }
      }
    });
  }
  for (int t = 0; t < kWriters; ++t) threads[t].join();
  done = true;
  for (size_t t = kWriters; t < threads.size(); ++t) threads[t].join();
  EXPECT_FALSE(failed);
  EXPECT_EQ(store->ListWindows("j")->size(), size_t{kWriters * kWindowsPerWriter});
  EXPECT_EQ(store->ListIterations("j", 0, 0)->size(), size_t{kWriters * kWindowsPerWriter});
  EXPECT_EQ(store->ListSummaries("j", kWindowsPerWriter * 2)->at(0).rank, 1);
  EXPECT_TRUE(GetParam().check_integrity(store.get()).ok());
}

TEST_P(StoreContractTest, TwoStoresOnOneLocationWaitForEachOther) {
  const std::string location = NewLocation();
  auto first = OpenOrDie(location);
  auto second = OpenOrDie(location);
  ASSERT_TRUE(first->UpsertJob(Job("j")).ok());
  std::thread other([&] {
    for (uint64_t id = 1; id <= 50; ++id) EXPECT_TRUE(second->PutWindow(Window("j", id)).ok());
  });
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(first->AppendIterations("j", {{0, i, 1}}).ok());
  other.join();
  EXPECT_EQ(first->ListWindows("j")->size(), 50u);
  EXPECT_EQ(second->ListIterations("j", -1, 0)->size(), 50u);
}

// A child process writes windows and acknowledges each one whose PutSummary returned Ok on
// a pipe; the parent SIGKILLs it mid-stream. Every acknowledged write must be there after
// reopening, and the store must pass its backend's integrity check.
TEST_P(StoreContractTest, SurvivesSigkillMidStream) {
  const std::string path = NewLocation();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    StatusOr<std::unique_ptr<Store>> store = GetParam().open(path, 1'000'000);
    if (!store.ok() || !(*store)->UpsertJob(Job("crash")).ok()) _exit(3);
    for (uint32_t id = 1;; ++id) {
      if (!(*store)->PutWindow(Window("crash", id)).ok()) _exit(4);
      std::vector<IterationPoint> batch;
      for (int r = 0; r < 64; ++r) batch.push_back({r, static_cast<int64_t>(id), 1000 + r});
      if (!(*store)->AppendIterations("crash", batch).ok()) _exit(5);
      if (!(*store)->PutSummary("crash", id, Summary(static_cast<int32_t>(id % 8))).ok()) {
        _exit(6);
      }
      if (write(fds[1], &id, sizeof(id)) != sizeof(id)) _exit(7);
    }
  }
  close(fds[1]);
  uint32_t acked = 0;
  uint32_t id = 0;
  while (acked < 150 && read(fds[0], &id, sizeof(id)) == sizeof(id)) acked = id;
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "the writer exited early with " << WEXITSTATUS(wstatus);
  while (read(fds[0], &id, sizeof(id)) == sizeof(id)) acked = id;  // acks still in the pipe
  close(fds[0]);
  ASSERT_GE(acked, 150u);

  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(GetParam().check_integrity(store.get()).ok());
  StatusOr<std::vector<WindowRecord>> windows = store->ListWindows("crash");
  ASSERT_TRUE(windows.ok());
  ASSERT_GE(windows->size(), acked);
  StatusOr<std::vector<IterationPoint>> points = store->ListIterations("crash", 0, 0);
  ASSERT_GE(points->size(), size_t{acked} * 64);
  for (uint32_t w = 1; w <= acked; ++w) {
    StatusOr<std::vector<WorkerSummary>> s = store->ListSummaries("crash", w);
    ASSERT_TRUE(s.ok()) << s.status().message();
    ASSERT_EQ(s->size(), 1u) << "window " << w << " lost its acknowledged summary";
    EXPECT_EQ((*s)[0].rank, static_cast<int32_t>(w % 8));
  }
  // The store is writable again after the crash.
  EXPECT_TRUE(store->PutWindow(Window("crash", acked + 1000)).ok());
}

}  // namespace
}  // namespace perftracker
