// StoreRecorder: `perftracker run`'s embedded store (docs/live-mode.md, "The run's store").
//
// It sits between the node collector and the embedded WindowCoordinator: a CoordinatorLink
// that forwards every call to the coordinator, and a CollectorControl the coordinator tells
// when a window opens. On the way it writes what the server's ControlService writes for a
// job of a remote collector: the job, its workers, the always-on iteration times (in batches
// of kIterationBatch), each window when it opens (with the triggers since the last one),
// every rank's summary, and, from StoreReports(), each window's diagnosis (the report's JSON
// and text) and the job's healthy baseline (the first window without a material finding).
// `perftracker server --store <the file>` then serves the run in its web UI and JSON API.
//
// The job is never harmed by the store: a failing write is logged (the first one, then a
// count at the end) and the call goes on to the coordinator unchanged. Thread-safe: the
// collector's thread, the coordinator's thread and the caller of StoreReports() call in.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "perftracker/core/status.h"
#include "perftracker/server/store/store.h"
#include "perftracker/server/window_coordinator.h"
#include "perftracker/wire/coordinator_link.h"

namespace perftracker {

// The store's row for a coordinator's window (ControlService's jobs and StoreRecorder).
WindowRecord WindowRecordOf(const std::string& job_id, const WindowSpec& spec,
                            std::vector<std::string> triggers, WindowState state);

// The store's row for a window's report: the JSON file's contents, the text, the first
// material finding's code ("" when none is material), the missing ranks, the absolute path of
// the window's Perfetto export ("" when none).
DiagnosisRecord DiagnosisRecordOf(const std::string& job_id, uint64_t window_id,
                                  const WindowReport& report);

class StoreRecorder : public CoordinatorLink, public CollectorControl {
 public:
  static constexpr size_t kIterationBatch = 256;

  // `store` and `next` are not owned and must outlive the recorder.
  StoreRecorder(Store* store, std::string job_id, std::string title, CoordinatorLink* next,
                std::function<void(std::string_view)> log = {});

  // Writes the job's row; an error here means the store cannot be used at all.
  Status Begin();
  // The windows' diagnoses (call with the coordinator's reports once it has stopped; reports
  // already stored are skipped), then the iterations still buffered. A window that opened
  // and has no report (a hang trigger retracted before its report: the coordinator dropped
  // the window) is marked abandoned.
  void StoreReports(const std::vector<WindowReport>& reports);
  uint64_t failures() const;

  // CoordinatorLink: recorded, then forwarded.
  void OnWorkerJoined(const WorkerInfo& worker) override;
  void OnWorkerLeft(int32_t rank, bool clean) override;
  void OnTrainingEnded(int32_t rank, const std::string& detail) override;
  void OnIteration(int32_t rank, int64_t end_ns, int64_t duration_ns) override;
  void OnTrigger(int32_t rank, WindowReason reason, const std::string& detail) override;
  void OnStacks(uint64_t window, int32_t rank, bool available, const std::string& text) override;
  void OnSummary(uint64_t window, WorkerSummary summary) override;
  void OnWindowRecording(uint64_t window, int32_t rank, const std::string& path) override;

  // CollectorControl: the coordinator opened a window.
  void StartWindow(const WindowSpec& window) override;
  void DumpStacks(uint64_t) override {}
  void EndWindowNow(uint64_t) override {}

 private:
  void Check(const Status& status);  // mu_ held
  void FlushIterationsLocked();
  WindowRecord Record(const WindowSpec& spec, WindowState state) const;

  Store* store_;
  const std::string job_id_;
  const std::string title_;
  CoordinatorLink* next_;
  std::function<void(std::string_view)> log_;

  mutable std::mutex mu_;
  int32_t world_size_ = 0;
  std::vector<IterationPoint> iterations_;
  std::vector<std::string> triggers_;  // since the last window opened
  std::map<uint64_t, WindowSpec> windows_;
  std::map<uint64_t, std::vector<std::string>> window_triggers_;
  size_t reports_stored_ = 0;
  bool baseline_set_ = false;
  uint64_t failures_ = 0;
};

}  // namespace perftracker
