#include "perftracker/server/http/example_store_for_test.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "perftracker/core/realtime_clock.h"
#include "perftracker/pipeline/diagnosis_pipeline.h"
#include "perftracker/report/report.h"

namespace perftracker {

StatusOr<ExampleJob> FillStoreWithExample(Store* store, const std::string& traces_dir,
                                          const std::string& job_id) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(traces_dir, ec)) {
    if (entry.path().string().find(".json") != std::string::npos) {
      files.push_back(entry.path().string());
    }
  }
  if (ec || files.empty()) {
    return Status::NotFound("example traces: no trace files in " + traces_dir);
  }
  std::sort(files.begin(), files.end());

  DiagnosisPipeline pipeline;
  pipeline.AddTraceFiles(files);
  if (!pipeline.skipped().empty()) return Status::InvalidArgument(pipeline.skipped()[0].error);
  std::vector<WorkerSummary>& workers = pipeline.mutable_workers();
  for (WorkerSummary& w : workers) w.host = fmt::format("node-{}", w.rank / 2);
  std::sort(workers.begin(), workers.end(),
            [](const WorkerSummary& a, const WorkerSummary& b) { return a.rank < b.rank; });

  // Shift every time so the window ends now.
  int64_t window_start = INT64_MAX;
  int64_t window_end = INT64_MIN;
  for (const WorkerSummary& w : workers) {
    window_start = std::min(window_start, w.window_start_ns);
    window_end = std::max(window_end, w.window_end_ns);
  }
  const int64_t shift = RealtimeNs() - window_end;
  for (WorkerSummary& w : workers) {
    w.window_start_ns += shift;
    w.window_end_ns += shift;
    for (IterationSummary& it : w.iterations) it.start_ns += shift;
  }
  window_start += shift;
  window_end += shift;

  const Diagnosis diagnosis = pipeline.Diagnose();
  ReportInput input;
  input.diagnosis = &diagnosis;
  input.workers = &workers;
  input.title = traces_dir;

  JobRecord job;
  job.job_id = job_id;
  job.title = "torchrun --nproc_per_node 4 train.py (examples/straggler)";
  job.world_size = static_cast<int32_t>(workers.size());
  job.created_ns = window_start - 60'000'000'000;
  job.last_seen_ns = window_end;
  PERFTRACKER_RETURN_IF_ERROR(store->UpsertJob(job));
  std::vector<IterationPoint> points;
  for (const WorkerSummary& w : workers) {
    PERFTRACKER_RETURN_IF_ERROR(
        store->UpsertWorker({job_id, w.rank, w.host, 1000 + w.rank, job.created_ns}));
    for (const IterationSummary& it : w.iterations) {
      points.push_back({w.rank, it.start_ns + it.duration_ns, it.duration_ns});
    }
  }
  PERFTRACKER_RETURN_IF_ERROR(store->AppendIterations(job_id, points));

  WindowRecord window;
  window.job_id = job_id;
  window.window_id = 1;
  window.reason = "slowdown";
  window.start_ns = window_start;
  window.duration_ns = window_end - window_start;
  window.triggers = {"rank 1: slowdown (mean of last 50 iterations 1.35x the baseline)"};
  window.state = WindowState::kDiagnosed;
  PERFTRACKER_RETURN_IF_ERROR(store->PutWindow(window));
  for (const WorkerSummary& w : workers)
    PERFTRACKER_RETURN_IF_ERROR(store->PutSummary(job_id, 1, w));

  DiagnosisRecord record;
  record.job_id = job_id;
  record.window_id = 1;
  record.json = RenderJson(input);
  record.text = RenderText(input);
  record.top_code = diagnosis.findings.empty() ? "" : diagnosis.findings[0].code;
  record.created_ns = window_end;
  PERFTRACKER_RETURN_IF_ERROR(store->PutDiagnosis(record));

  ExampleJob example;
  example.job_id = job_id;
  example.top_code = record.top_code;
  if (!diagnosis.findings.empty()) {
    const Finding& top = diagnosis.findings[0];
    example.culprit_rank = top.workers.empty() ? -1 : top.workers[0];
    example.culprit_function_key = top.function_key;
  }
  return example;
}

}  // namespace perftracker
