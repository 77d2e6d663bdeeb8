// The store and the JSON API at the scale of issue 6's load target: 2,000 workers each
// uploading a realistic summary (the real summaries of examples/straggler, replicated with
// new ranks) for one window.
//
//   build/src/perftracker/server/http/store_api_benchmark --benchmark_min_time=1
//
// With PERFTRACKER_BENCH_STORE=postgresql://... the same benchmarks run on that PostgreSQL
// database (PostgresStore) instead of an SQLite file; the job "bench-job" is deleted from
// it before each benchmark (docs/performance.md).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "perftracker/server/http/example_store_for_test.h"
#include "perftracker/server/http/json_api.h"
#include "perftracker/server/sqlite/sqlite_store.h"
#if PERFTRACKER_HAVE_POSTGRES
#include "perftracker/server/postgres/postgres_store.h"
#endif
#include "perftracker/wire/summary_codec.h"

namespace perftracker {
namespace {

constexpr int kWorkers = 2000;

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("store_api_benchmark." + std::to_string(getpid()) + "." + name))
      .string();
}

void RemoveStore(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
}

// The four real summaries of examples/straggler.
const std::vector<WorkerSummary>& RealSummaries() {
  static const std::vector<WorkerSummary> summaries = [] {
    const char* src = std::getenv("PERFTRACKER_SOURCE_DIR");
    const std::string traces = std::string(src != nullptr ? src : ".") + "/examples/straggler";
    const std::string path = TempPath("example");
    std::vector<WorkerSummary> out;
    {
      auto store = SqliteStore::Open(path);
      if (store.ok() && FillStoreWithExample(store->get(), traces, "job").ok()) {
        out = *(*store)->ListSummaries("job", 1);
      }
    }
    RemoveStore(path);
    if (out.empty()) std::abort();  // set PERFTRACKER_SOURCE_DIR to the repository
    return out;
  }();
  return summaries;
}

WorkerSummary SummaryForRank(int rank) {
  WorkerSummary s = RealSummaries()[static_cast<size_t>(rank) % RealSummaries().size()];
  s.rank = rank;
  return s;
}

constexpr const char* kJob = "bench-job";

// The PostgreSQL URL to measure instead of SQLite ("" for SQLite).
std::string PostgresUrl() {
  const char* url = std::getenv("PERFTRACKER_BENCH_STORE");
  return url != nullptr ? url : "";
}

std::unique_ptr<Store> OpenStore(const std::string& path) {
  if (!PostgresUrl().empty()) {
#if PERFTRACKER_HAVE_POSTGRES
    const std::string url = PostgresUrl();
    {
      auto conn = PgConnection::Open(url, url, 10);
      if (!conn.ok()) std::abort();
      // Tables may not exist yet (a new database): the store creates them below.
      (void)(*conn)->ExecScript(
          "DELETE FROM summaries WHERE job_id = 'bench-job';"
          "DELETE FROM diagnoses WHERE job_id = 'bench-job';"
          "DELETE FROM windows WHERE job_id = 'bench-job';"
          "DELETE FROM iterations WHERE job_id = 'bench-job';"
          "DELETE FROM workers WHERE job_id = 'bench-job';"
          "DELETE FROM jobs WHERE job_id = 'bench-job';");
    }
    auto store = PostgresStore::Open(url);
    if (!store.ok()) std::abort();
    return std::move(store).value();
#else
    std::abort();  // built without libpq
#endif
  }
  RemoveStore(path);
  auto store = SqliteStore::Open(path);
  if (!store.ok()) std::abort();
  return std::move(store).value();
}

std::unique_ptr<Store> NewStore(const std::string& path) {
  std::unique_ptr<Store> store = OpenStore(path);
  if (!store->UpsertJob({kJob, "bench", kWorkers, 1, 1}).ok()) std::abort();
  WindowRecord w;
  w.job_id = kJob;
  w.window_id = 1;
  w.reason = "slowdown";
  w.start_ns = 1;
  w.duration_ns = 10;
  if (!store->PutWindow(w).ok()) std::abort();
  return store;
}

// One summary upload: encode + one committed transaction.
void BM_PutSummary(benchmark::State& state) {
  const std::string path = TempPath("put");
  auto store = NewStore(path);
  std::vector<WorkerSummary> summaries;
  for (int r = 0; r < kWorkers; ++r) summaries.push_back(SummaryForRank(r));
  size_t i = 0;
  size_t bytes = 0;
  for (auto _ : state) {
    const WorkerSummary& s = summaries[i++ % summaries.size()];
    if (!store->PutSummary(kJob, 1, s).ok()) std::abort();
  }
  for (const auto& s : RealSummaries()) bytes += EncodeWorkerSummary(s).size();
  state.counters["summary_bytes"] = static_cast<double>(bytes / RealSummaries().size());
  state.SetItemsProcessed(state.iterations());
  store.reset();
  RemoveStore(path);
}
BENCHMARK(BM_PutSummary)->Unit(benchmark::kMicrosecond);

// One iteration of every worker: a batch of kWorkers points in one transaction.
void BM_AppendIterations(benchmark::State& state) {
  const std::string path = TempPath("iter");
  auto store = NewStore(path);
  std::vector<IterationPoint> batch(kWorkers);
  int64_t t = 0;
  for (auto _ : state) {
    for (int r = 0; r < kWorkers; ++r) batch[r] = {r, ++t, 50'000'000};
    if (!store->AppendIterations(kJob, batch).ok()) std::abort();
  }
  state.SetItemsProcessed(state.iterations() * kWorkers);
  store.reset();
  RemoveStore(path);
}
BENCHMARK(BM_AppendIterations)->Unit(benchmark::kMillisecond);

class FullWindow {
 public:
  FullWindow() : path_(TempPath("full")), store_(NewStore(path_)) {
    for (int r = 0; r < kWorkers; ++r) {
      if (!store_->PutSummary(kJob, 1, SummaryForRank(r)).ok()) std::abort();
    }
  }
  ~FullWindow() {
    store_.reset();
    RemoveStore(path_);
  }
  Store* store() { return store_.get(); }

 private:
  std::string path_;
  std::unique_ptr<Store> store_;
};

// Reading back a whole window (what the localizer of a restarted server needs).
void BM_ListSummaries(benchmark::State& state) {
  FullWindow window;
  for (auto _ : state) {
    auto summaries = window.store()->ListSummaries(kJob, 1);
    if (!summaries.ok() || summaries->size() != kWorkers) std::abort();
  }
  state.SetItemsProcessed(state.iterations() * kWorkers);
}
BENCHMARK(BM_ListSummaries)->Unit(benchmark::kMillisecond);

// The heat map's request: top 30 functions on 2,000 workers.
void BM_ApiSummariesTop30(benchmark::State& state) {
  FullWindow window;
  JsonApi api(window.store(), nullptr);
  size_t bytes = 0;
  for (auto _ : state) {
    ApiResponse r = api.GetSummaries(kJob, "1", "30", "");
    if (r.status != 200) std::abort();
    bytes = r.body.size();
  }
  state.counters["response_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_ApiSummariesTop30)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace perftracker

BENCHMARK_MAIN();
