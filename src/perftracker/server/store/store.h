// Store: what the server keeps about jobs, durably. One interface, implementations in
// sibling folders: server/sqlite/ (one file, the default) and server/postgres/ (one
// database shared by several servers); server/open_store.h picks one from --store. Both run
// the same contract tests (store_contract_test.cc).
//
//   jobs ─┬─ workers      (rank, host, pid: who took part)
//         ├─ iterations   (each rank's always-on iteration times: the UI's time series)
//         ├─ windows      (id, reason, span, triggers, state)
//         │    ├─ summaries   (one WorkerSummary per rank per window)
//         │    └─ diagnoses   (the diagnosis JSON `diagnose --format json` writes, + text,
//         │                    + the path of the window's Perfetto export)
//         └─ baseline     (the window whose summaries describe this job when healthy)
//
// Contract for implementations:
// - Every method is safe to call from several threads at once.
// - A write that returned Ok survives a crash of the server process (SIGKILL) right after.
// - Bad input (unknown job for a child record, a window id reused with another span) is a
//   Status with one line naming the job / window / rank and the problem; it never corrupts
//   what is already stored.
// - Reads of something absent return NotFound naming it; list reads return empty vectors.
// - Job ids are opaque strings chosen by the collectors (`perftracker run` uses its run id).
// - Child records need their parent: UpsertWorker(s) / AppendIterations / PutWindow need the job
//   (UpsertJob first), PutSummary / PutSummaryBytes / PutDiagnosis / SetBaseline need the window
//   (PutWindow first); otherwise NotFound naming it. Window ids are 1 .. 2^63-1.
// - Window states only move forward: open -> diagnosed | abandoned, abandoned -> diagnosed
//   (late summaries); re-putting the same state updates reason / triggers / state_reason. Anything
//   else is InvalidArgument ("out-of-order update"), the stored window unchanged.
// - Lists are ordered: jobs newest first, workers and summaries by rank, windows by id,
//   iterations oldest first (end_ns > since_ns, strictly).
// (These contract notes were added with the SQLite implementation; no signature changed.)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "perftracker/core/status.h"
#include "perftracker/summary/worker_summary.h"

namespace perftracker {

struct JobRecord {
  std::string job_id;
  std::string title;  // what runs (the command line)
  int32_t world_size = 0;
  int64_t created_ns = 0;    // CLOCK_REALTIME
  int64_t last_seen_ns = 0;  // last registration / heartbeat
};

struct WorkerRecord {
  std::string job_id;
  int32_t rank = -1;
  std::string host;
  int32_t pid = 0;
  int64_t joined_ns = 0;
};

struct IterationPoint {
  int32_t rank = -1;
  int64_t end_ns = 0;
  int64_t duration_ns = 0;
};

enum class WindowState : uint8_t { kOpen = 0, kDiagnosed = 1, kAbandoned = 2 };

struct WindowRecord {
  std::string job_id;
  uint64_t window_id = 0;  // 1, 2, ... per job
  std::string reason;      // "slowdown" | "hang" | "manual"
  int64_t start_ns = 0;
  int64_t duration_ns = 0;
  std::vector<std::string> triggers;  // "rank 2: slowdown (mean 1.21x ...)"
  WindowState state = WindowState::kOpen;
  // Why the window is in its state, where that needs saying: for an abandoned window, why it
  // could not complete ("the server stopped before ..."); "" otherwise.
  std::string state_reason;
};

struct DiagnosisRecord {
  std::string job_id;
  uint64_t window_id = 0;
  std::string json;      // the schema of `perftracker diagnose --format json` (docs/report-json.md)
  std::string text;      // report/RenderText
  std::string top_code;  // the first finding's code, "" when none is material
  std::vector<int32_t> missing_ranks;
  int64_t created_ns = 0;
  // The window's Perfetto export (window-<id>.perfetto.json) as the server that wrote it
  // named it: an absolute path on that server's host; "" when none was written. The HTTP
  // server serves this file, and only this one, for the window (server/http/timeline_file.h).
  std::string perfetto_path;
};

class Store {
 public:
  virtual ~Store() = default;

  // Jobs and workers. Upserts replace the record with the same key.
  virtual Status UpsertJob(const JobRecord& job) = 0;
  // Several workers in one transaction (a collector's registration with all its ranks): all
  // of them or, on any error (a bad rank, a job not registered), none.
  virtual Status UpsertWorkers(const std::vector<WorkerRecord>& workers) = 0;
  Status UpsertWorker(const WorkerRecord& worker) { return UpsertWorkers({worker}); }
  virtual StatusOr<JobRecord> GetJob(const std::string& job_id) = 0;
  virtual StatusOr<std::vector<JobRecord>> ListJobs() = 0;  // newest first
  virtual StatusOr<std::vector<WorkerRecord>> ListWorkers(const std::string& job_id) = 0;

  // Always-on iteration times, batched. `since_ns` filters on end_ns; `limit` keeps the
  // newest points (0: all).
  virtual Status AppendIterations(const std::string& job_id,
                                  const std::vector<IterationPoint>& points) = 0;
  virtual StatusOr<std::vector<IterationPoint>> ListIterations(const std::string& job_id,
                                                               int64_t since_ns, size_t limit) = 0;

  // Windows, their summaries and diagnoses.
  virtual Status PutWindow(const WindowRecord& window) = 0;  // insert or update state
  virtual StatusOr<std::vector<WindowRecord>> ListWindows(const std::string& job_id) = 0;
  virtual StatusOr<WindowRecord> GetWindow(const std::string& job_id, uint64_t window_id) = 0;
  virtual Status PutSummary(const std::string& job_id, uint64_t window_id,
                            const WorkerSummary& summary) = 0;  // keyed by summary.rank
  // The same for a summary as it came over the wire: `encoded` is what
  // wire/summary_codec.h's EncodeWorkerSummary wrote for rank `rank`, already checked by the
  // caller (it decoded them); stored as they are, not encoded again.
  virtual Status PutSummaryBytes(const std::string& job_id, uint64_t window_id, int32_t rank,
                                 std::string_view encoded) = 0;
  virtual StatusOr<std::vector<WorkerSummary>> ListSummaries(const std::string& job_id,
                                                             uint64_t window_id) = 0;
  virtual Status PutDiagnosis(const DiagnosisRecord& diagnosis) = 0;
  virtual StatusOr<DiagnosisRecord> GetDiagnosis(const std::string& job_id, uint64_t window_id) = 0;

  // The job's healthy baseline: a window whose diagnosis had no material finding.
  virtual Status SetBaseline(const std::string& job_id, uint64_t window_id) = 0;
  virtual StatusOr<std::optional<uint64_t>> GetBaseline(const std::string& job_id) = 0;
};

}  // namespace perftracker
