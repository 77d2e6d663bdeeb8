#include "perftracker/server/http/example_store_for_test.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "perftracker/core/realtime_clock.h"
#include "perftracker/localize/localizer.h"
#include "perftracker/pipeline/diagnosis_pipeline.h"
#include "perftracker/report/perfetto_writer.h"
#include "perftracker/report/report.h"

namespace perftracker {

StatusOr<ExampleJob> FillStoreWithExample(Store* store, const std::string& traces_dir,
                                          const std::string& job_id,
                                          const ExampleOptions& options) {
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

  PipelineOptions pipeline_options;
  pipeline_options.keep_events = !options.perfetto_path.empty();
  DiagnosisPipeline pipeline(std::move(pipeline_options));
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
  if (!options.perfetto_path.empty()) {
    std::vector<std::unique_ptr<RankTrace>> traces = pipeline.TakeTraces();
    PerfettoWriter writer;
    for (const auto& t : traces) writer.AddRank(t.get());
    std::ofstream out(options.perfetto_path, std::ios::binary | std::ios::trunc);
    PERFTRACKER_RETURN_IF_ERROR(writer.Write(diagnosis, &out));
    out.close();
    if (!out) return Status::Internal("example: cannot write " + options.perfetto_path);
  }
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
  record.perfetto_path = options.perfetto_path;
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

Status AddSlowerWindow(Store* store, const std::string& job_id, uint64_t window_id,
                       const std::string& function_key, double extra_share) {
  StatusOr<WindowRecord> first = store->GetWindow(job_id, 1);
  if (!first.ok()) return first.status();
  StatusOr<std::vector<WorkerSummary>> summaries = store->ListSummaries(job_id, 1);
  if (!summaries.ok()) return summaries.status();
  constexpr int64_t kGapNs = 60'000'000'000;
  const int64_t shift = first->duration_ns + kGapNs;
  Localizer localizer;
  for (WorkerSummary& w : *summaries) {
    const double iteration = static_cast<double>(w.median_iteration_ns());
    const int64_t extra_per_iteration = static_cast<int64_t>(extra_share * iteration);
    const int64_t extra = extra_per_iteration * static_cast<int64_t>(w.iteration_count());
    bool found = false;
    for (size_t i = 0; i < w.functions.size() && !found; ++i) {
      if (w.Key(i) != function_key) continue;
      found = true;
      w.functions[i].self_ns += extra;
      // The function and every caller above it take longer by as much.
      for (uint32_t j = static_cast<uint32_t>(i); j < w.functions.size();
           j = w.functions[j].parent) {
        w.functions[j].total_ns += extra;
        if (w.functions[j].parent >= j) break;  // a root (kNoParent, or a malformed link)
      }
    }
    if (!found) {
      return Status::NotFound(
          fmt::format("example: rank {} has no function {}", w.rank, function_key));
    }
    w.window_start_ns += shift;
    w.window_end_ns += shift;
    for (IterationSummary& it : w.iterations) {
      it.start_ns += shift;
      it.duration_ns += extra_per_iteration;
    }
    localizer.Add(w);
  }
  const Diagnosis diagnosis = localizer.Finish();

  WindowRecord window = *first;
  window.window_id = window_id;
  window.reason = "manual";
  window.start_ns += shift;
  window.triggers = {"manual: from the web UI"};
  window.state = WindowState::kDiagnosed;
  PERFTRACKER_RETURN_IF_ERROR(store->PutWindow(window));
  for (const WorkerSummary& w : *summaries) {
    PERFTRACKER_RETURN_IF_ERROR(store->PutSummary(job_id, window_id, w));
  }
  ReportInput input;
  input.diagnosis = &diagnosis;
  input.workers = &*summaries;
  input.title = fmt::format("{} window {}", job_id, window_id);
  DiagnosisRecord record;
  record.job_id = job_id;
  record.window_id = window_id;
  record.json = RenderJson(input);
  record.text = RenderText(input);
  for (const Finding& f : diagnosis.findings) {
    if (f.material) {
      record.top_code = f.code;
      break;
    }
  }
  record.created_ns = window.start_ns + window.duration_ns;
  return store->PutDiagnosis(record);
}

}  // namespace perftracker
