// perftracker_ui_fixture: a test-only server for the web UI and /metrics. It fills a
// SqliteStore with the real diagnosis of examples/straggler (a 4-rank torch job whose rank 2
// is a compute straggler), feeds the same job's iteration times, window and finding to the
// server's metrics, and serves both with HttpServer until SIGINT / SIGTERM. It prints one
// line "listening <port>" on stdout once it serves (test_web.py waits for it). Window 1 has
// its Perfetto export (window-1.perfetto.json beside the store) and is the job's baseline;
// window 2 is the same job with the straggler's function slower on every rank.
//
//   perftracker_ui_fixture --traces examples/straggler --store /tmp/s.db --token T [--port N]
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "perftracker/server/http/example_store_for_test.h"
#include "perftracker/server/http/http_server.h"
#include "perftracker/server/metrics/server_metrics.h"
#include "perftracker/server/sqlite/sqlite_store.h"

namespace {

using namespace perftracker;

// A job whose every name is markup or script, as a hostile (or unlucky) training script
// could produce: the UI must show it as text and run none of it.
constexpr const char* kHostile = "<img src=x onerror=\"document.body.dataset.pwned=1\">";

constexpr const char* kAbandonedReason =
    "the server stopped before the window completed (killed or crashed: its summaries were "
    "lost); found open when the server restarted at 2026-11-26 00:41:02 UTC";

Status AddHostileJob(Store* store) {
  const std::string h = kHostile;
  PERFTRACKER_RETURN_IF_ERROR(store->UpsertJob({"hostile",
                                                "<script>document.body.dataset.pwned=2"
                                                "</script> " +
                                                    h,
                                                1, 1'000'000'000, 2'000'000'000}));
  PERFTRACKER_RETURN_IF_ERROR(store->UpsertWorker({"hostile", 0, h, 1, 1}));
  WindowRecord w;
  w.job_id = "hostile";
  w.window_id = 1;
  w.reason = h;
  w.start_ns = 1'000'000'000;
  w.duration_ns = 1'000'000'000;
  w.triggers = {h};
  w.state = WindowState::kDiagnosed;
  PERFTRACKER_RETURN_IF_ERROR(store->PutWindow(w));
  WorkerSummary s;
  s.rank = 0;
  s.host = h;
  s.window_start_ns = w.start_ns;
  s.window_end_ns = w.start_ns + w.duration_ns;
  FunctionSummary f;
  f.key = "python:" + h;
  f.name = h;
  f.count = 3;
  f.total_ns = 3'000'000;
  f.durations.Add(1e6, 3);
  s.functions.push_back(f);
  PERFTRACKER_RETURN_IF_ERROR(store->PutSummary("hostile", 1, s));
  nlohmann::json finding = {{"code", "PT-" + h},
                            {"category", h},
                            {"title", h},
                            {"workers", {0}},
                            {"victims", nlohmann::json::array()},
                            {"victims_wait_in", h},
                            {"function", h},
                            {"function_key", f.key},
                            {"resource", h},
                            {"lost_ms_per_iteration", 1.0},
                            {"lost_share", 0.5},
                            {"material", true},
                            {"evidence", {{{"label", h}, {"value", h}}}}};
  nlohmann::json diagnosis = {{"schema_version", 1},
                              {"verdict", h},
                              {"num_workers", 1},
                              {"median_iteration_ms", 2.0},
                              {"findings", {finding}},
                              {"notes", {h}},
                              {"workers", nlohmann::json::array()}};
  DiagnosisRecord d;
  d.job_id = "hostile";
  d.window_id = 1;
  d.json = diagnosis.dump();
  d.text = h;
  d.top_code = "PT-" + h;
  return store->PutDiagnosis(d);
}

// A 64-rank job with only iteration times (one every 100 ms per rank for 30 s; rank 13
// takes 1.5x from the middle on): the job page's chart for jobs too wide for a line per rank.
// Its one window was left open by a server that was killed, and closed as abandoned when the
// server restarted (what WindowCoordinator writes then): the job page shows why.
Status AddWideJob(Store* store) {
  constexpr int kRanks = 64;
  constexpr int kIterations = 300;
  const int64_t start = 1'700'000'000'000'000'000;
  PERFTRACKER_RETURN_IF_ERROR(
      store->UpsertJob({"wide", "torchrun --nnodes 32 train.py", kRanks, start, start}));
  for (int r = 0; r < kRanks; ++r) {
    PERFTRACKER_RETURN_IF_ERROR(
        store->UpsertWorker({"wide", r, "node-" + std::to_string(r / 8), 100 + r, start}));
  }
  std::vector<IterationPoint> points;
  for (int i = 0; i < kIterations; ++i) {
    for (int r = 0; r < kRanks; ++r) {
      const int64_t duration = (r == 13 && i > kIterations / 2 ? 150'000'000 : 100'000'000) +
                               (r * 7919 + i * 104729) % 5'000'000;
      points.push_back({r, start + (i + 1) * 100'000'000LL, duration});
    }
  }
  PERFTRACKER_RETURN_IF_ERROR(store->AppendIterations("wide", points));
  WindowRecord w;
  w.job_id = "wide";
  w.window_id = 1;
  w.reason = "slowdown";
  w.start_ns = start + 20'000'000'000LL;
  w.duration_ns = 5'000'000'000LL;
  w.triggers = {"rank 13: slowdown"};
  w.state = WindowState::kAbandoned;
  w.state_reason = kAbandonedReason;
  return store->PutWindow(w);
}

// Window 2's slowdown of the culprit's function on every rank, as a share of the iteration:
// well above every rank's bar (7-14 ms of a ~44 ms iteration: the example's iterations scatter).
constexpr double kSlowerShare = 0.6;

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"perftracker_ui_fixture: serves a store holding a real diagnosis (tests only)"};
  std::string traces;
  std::string store_path;
  std::string job_id = "job-17";
  HttpServerOptions options;
  app.add_option("--traces", traces, "folder of rank*.json.gz traces")->required();
  app.add_option("--store", store_path, "SQLite store to create or fill")->required();
  app.add_option("--job", job_id, "job id");
  app.add_option("--token", options.token, "API token")->required();
  app.add_option("--host", options.host, "address to bind");
  app.add_option("--port", options.port, "port (0: any)");
  app.add_option("--tls-cert", options.tls_cert_file, "PEM certificate");
  app.add_option("--tls-key", options.tls_key_file, "PEM key");
  bool hostile = false;
  app.add_flag("--hostile", hostile, "also store a job whose names are all HTML / script");
  bool wide = false;
  app.add_flag("--wide", wide, "also store a 64-rank job with iteration times only");
  CLI11_PARSE(app, argc, argv);

  StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(store_path);
  if (!store.ok()) {
    std::fprintf(stderr, "perftracker_ui_fixture: %s\n", store.status().message().c_str());
    return 2;
  }
  // Window 1's Perfetto export beside the store, as a live server writes it into its report
  // directory; window 2 has the culprit's function slower on every rank, and window 1 is the
  // job's baseline (as if a user marked it): the compare view's pair.
  ExampleOptions example_options;
  example_options.perfetto_path =
      (std::filesystem::absolute(store_path).parent_path() / "window-1.perfetto.json").string();
  StatusOr<ExampleJob> example =
      FillStoreWithExample(store->get(), traces, job_id, example_options);
  Status added = example.ok() ? AddSlowerWindow(store->get(), job_id, 2,
                                                example->culprit_function_key, kSlowerShare)
                              : example.status();
  if (added.ok()) added = (*store)->SetBaseline(job_id, 1);
  if (!added.ok()) {
    std::fprintf(stderr, "perftracker_ui_fixture: %s\n", added.message().c_str());
    return 2;
  }

  if (hostile) {
    Status st = AddHostileJob(store->get());
    if (!st.ok()) {
      std::fprintf(stderr, "perftracker_ui_fixture: %s\n", st.message().c_str());
      return 2;
    }
  }
  if (wide) {
    Status st = AddWideJob(store->get());
    if (!st.ok()) {
      std::fprintf(stderr, "perftracker_ui_fixture: %s\n", st.message().c_str());
      return 2;
    }
  }

  ServerMetrics metrics;
  StatusOr<std::vector<IterationPoint>> points = (*store)->ListIterations(job_id, 0, 0);
  if (points.ok()) {
    for (const IterationPoint& p : *points) metrics.RecordIteration(job_id, p.rank, p.duration_ns);
  }
  metrics.RecordTrigger(job_id, "slowdown");
  metrics.RecordWindow(job_id, WindowMetricState::kOpened);
  metrics.RecordWindow(job_id, WindowMetricState::kDiagnosed);
  if (!example->top_code.empty()) metrics.RecordFinding(job_id, example->top_code);
  metrics.CollectorConnected();

  HttpServer server(store->get(), &metrics, nullptr, options);
  Status st = server.Start();
  if (!st.ok()) {
    std::fprintf(stderr, "perftracker_ui_fixture: %s\n", st.message().c_str());
    return 2;
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::printf("listening %d\n", server.port());
  std::fflush(stdout);
  while (!g_stop) pause();
  server.Stop();
  return 0;
}
