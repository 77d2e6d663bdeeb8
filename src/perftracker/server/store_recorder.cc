#include "perftracker/server/store_recorder.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "perftracker/core/realtime_clock.h"

namespace perftracker {

WindowRecord WindowRecordOf(const std::string& job_id, const WindowSpec& spec,
                            std::vector<std::string> triggers, WindowState state) {
  WindowRecord r;
  r.job_id = job_id;
  r.window_id = spec.id;
  r.reason = std::string(WindowReasonName(spec.reason));
  r.start_ns = spec.start_ns;
  r.duration_ns = spec.duration_ns;
  r.triggers = std::move(triggers);
  r.state = state;
  return r;
}

DiagnosisRecord DiagnosisRecordOf(const std::string& job_id, uint64_t window_id,
                                  const WindowReport& report) {
  DiagnosisRecord d;
  d.job_id = job_id;
  d.window_id = window_id;
  d.json = report.json;
  d.text = report.text;
  for (const Finding& f : report.diagnosis.findings) {
    if (f.material) {
      d.top_code = f.code;
      break;
    }
  }
  d.missing_ranks = report.missing_ranks;
  d.created_ns = RealtimeNs();
  if (!report.perfetto_path.empty()) {
    // Absolute: `perftracker server --store` may serve it from another working directory.
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::absolute(report.perfetto_path, ec);
    d.perfetto_path = ec ? report.perfetto_path : absolute.lexically_normal().string();
  }
  return d;
}

StoreRecorder::StoreRecorder(Store* store, std::string job_id, std::string title,
                             CoordinatorLink* next, std::function<void(std::string_view)> log)
    : store_(store),
      job_id_(std::move(job_id)),
      title_(std::move(title)),
      next_(next),
      log_(std::move(log)) {
  if (!log_) {
    log_ = [](std::string_view line) {
      std::fprintf(stderr, "perftracker: %.*s\n", static_cast<int>(line.size()), line.data());
    };
  }
}

Status StoreRecorder::Begin() {
  JobRecord job;
  job.job_id = job_id_;
  job.title = title_;
  job.created_ns = job.last_seen_ns = RealtimeNs();
  return store_->UpsertJob(job);
}

void StoreRecorder::Check(const Status& status) {
  if (status.ok()) return;
  if (failures_++ == 0)
    log_("store: " + status.message() + " (the run goes on; reports are files)");
}

uint64_t StoreRecorder::failures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failures_;
}

void StoreRecorder::OnWorkerJoined(const WorkerInfo& worker) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (worker.rank >= 0) {
      Check(store_->UpsertWorker({job_id_, worker.rank, worker.host, worker.pid, RealtimeNs()}));
    }
    if (worker.world_size > world_size_) {
      world_size_ = worker.world_size;
      JobRecord job;
      job.job_id = job_id_;
      job.title = title_;
      job.world_size = world_size_;
      StatusOr<JobRecord> stored = store_->GetJob(job_id_);
      job.created_ns = stored.ok() ? stored->created_ns : RealtimeNs();
      job.last_seen_ns = RealtimeNs();
      Check(store_->UpsertJob(job));
    }
  }
  next_->OnWorkerJoined(worker);
}

void StoreRecorder::OnWorkerLeft(int32_t rank, bool clean) { next_->OnWorkerLeft(rank, clean); }

void StoreRecorder::OnTrainingEnded(int32_t rank, const std::string& detail) {
  next_->OnTrainingEnded(rank, detail);
}

void StoreRecorder::OnIteration(int32_t rank, int64_t end_ns, int64_t duration_ns) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    iterations_.push_back({rank, end_ns, duration_ns});
    if (iterations_.size() >= kIterationBatch) FlushIterationsLocked();
  }
  next_->OnIteration(rank, end_ns, duration_ns);
}

void StoreRecorder::FlushIterationsLocked() {
  if (iterations_.empty()) return;
  Check(store_->AppendIterations(job_id_, iterations_));
  iterations_.clear();
}

void StoreRecorder::OnTrigger(int32_t rank, WindowReason reason, const std::string& detail) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    triggers_.push_back("rank " + std::to_string(rank) + ": " +
                        (detail.empty() ? std::string(WindowReasonName(reason)) : detail));
  }
  next_->OnTrigger(rank, reason, detail);
}

void StoreRecorder::OnStacks(uint64_t window, int32_t rank, bool available,
                             const std::string& text) {
  next_->OnStacks(window, rank, available, text);
}

void StoreRecorder::OnSummary(uint64_t window, WorkerSummary summary) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (windows_.count(window) != 0) Check(store_->PutSummary(job_id_, window, summary));
  }
  next_->OnSummary(window, std::move(summary));
}

void StoreRecorder::OnWindowRecording(uint64_t window, int32_t rank, const std::string& path) {
  next_->OnWindowRecording(window, rank, path);  // a file on this host: not stored
}

WindowRecord StoreRecorder::Record(const WindowSpec& spec, WindowState state) const {
  auto it = window_triggers_.find(spec.id);
  return WindowRecordOf(
      job_id_, spec, it != window_triggers_.end() ? it->second : std::vector<std::string>{}, state);
}

void StoreRecorder::StartWindow(const WindowSpec& window) {
  std::lock_guard<std::mutex> lock(mu_);
  if (windows_.count(window.id) != 0) return;
  windows_[window.id] = window;
  window_triggers_[window.id] = std::move(triggers_);
  triggers_.clear();
  FlushIterationsLocked();  // the UI's time series reaches the window's start
  Check(store_->PutWindow(Record(window, WindowState::kOpen)));
}

void StoreRecorder::StoreReports(const std::vector<WindowReport>& reports) {
  std::lock_guard<std::mutex> lock(mu_);
  FlushIterationsLocked();
  for (size_t i = reports_stored_; i < reports.size(); ++i) {
    const WindowReport& r = reports[i];
    WindowSpec spec;
    auto it = windows_.find(r.id);
    if (it != windows_.end()) {
      spec = it->second;
    } else {
      spec.id = r.id;
    }
    spec.reason = r.reason;
    Status st = store_->PutWindow(Record(spec, WindowState::kDiagnosed));
    const DiagnosisRecord d = DiagnosisRecordOf(job_id_, r.id, r);
    if (st.ok() && !d.json.empty()) st = store_->PutDiagnosis(d);
    if (st.ok() && d.top_code.empty() && !baseline_set_) {
      st = store_->SetBaseline(job_id_, r.id);
      baseline_set_ = st.ok();
    }
    Check(st);
  }
  reports_stored_ = reports.size();
  for (const auto& [id, spec] : windows_) {
    const bool reported = std::any_of(reports.begin(), reports.end(),
                                      [id = id](const WindowReport& r) { return r.id == id; });
    if (reported) continue;
    WindowRecord abandoned = Record(spec, WindowState::kAbandoned);
    abandoned.state_reason =
        "no diagnosis: the run ended before the window completed, or the hang that opened it "
        "ended before its report";
    Check(store_->PutWindow(abandoned));
  }
}

}  // namespace perftracker
