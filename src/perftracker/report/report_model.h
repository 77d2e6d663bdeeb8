// ReportModel: what every report format shows, computed once from a ReportInput: the
// verdict sentence, the top finding, each worker's role (culprit, victim, peer) and
// iteration breakdown, which workers to show when a job is too large to show them all, and
// which collective the victims wait in.
//
// The text, JSON and HTML renderers only lay this out, so the three agree on every number.
// The model never changes the diagnosis: it reads the localizer's verdict and, when the
// workers' summaries are given, adds per-worker detail from them.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "perftracker/localize/diagnosis.h"
#include "perftracker/report/report.h"
#include "perftracker/summary/worker_summary.h"

namespace perftracker::report {

enum class WorkerRole : uint8_t {
  kPeer = 0,
  kCulprit = 1,  // named by a material finding
  kVictim = 2,   // waits for a culprit of a material finding
};

std::string_view WorkerRoleName(WorkerRole role);

// One worker's row: its iteration time and where that time went.
struct WorkerRow {
  int32_t rank = -1;
  const WorkerSummary* summary = nullptr;
  WorkerRole role = WorkerRole::kPeer;
  size_t iterations = 0;  // iteration markers seen in the window
  double median_iteration_ns = 0;
  double mean_iteration_ns = 0;
  // Shares of the summed iteration time. They can add up to more than 1: compute and
  // communication run concurrently on different streams.
  double compute_share = 0;
  double communication_share = 0;
  double wait_share = 0;
  double data_share = 0;
  double host_only_share = 0;

  bool has_breakdown() const {
    return compute_share + communication_share + wait_share + data_share > 0;
  }
};

class ReportModel {
 public:
  explicit ReportModel(const ReportInput& input);

  const Diagnosis& diagnosis() const { return *diagnosis_; }
  const std::string& title() const { return title_; }
  // The diagnosis' worker count, or the number of summaries when it has none.
  int32_t num_workers() const { return num_workers_; }
  // The diagnosis' median iteration, or the median of the workers' medians.
  double median_iteration_ns() const { return median_iteration_ns_; }
  // The first material finding, or nullptr when the job looks healthy.
  const Finding* top() const { return top_; }
  size_t material_count() const { return material_count_; }
  // Without a material finding: the first minor one that names some workers but not all
  // (a straggler that costs the job little), or nullptr when none does.
  const Finding* minor_straggler() const { return minor_straggler_; }
  // No worker completed an iteration in the window (a hang window, the job's start or end;
  // known from the summaries): a finding's time is the window's, its share of the window's
  // wall time, and nothing is "per iteration".
  bool window_only() const { return window_only_; }
  // What a finding costs, as the report's "lost" line says it: "1.2 ms per iteration, 3.0%
  // of iteration time"; "1.2 ms in the window, 3.0% of its wall time (no iteration
  // completed)"; for a hang "no progress for 31.0 s".
  std::string LostPhrase(const Finding& finding) const;
  // The short form for a one-line finding: "1.2 ms/iter (3.0%)", "1.2 ms in the window
  // (3.0%)", "no progress for 31.0 s".
  std::string ShortLostPhrase(const Finding& finding) const;

  // One sentence: "rank 2 is the straggler: <title>, costing 31% of each iteration
  // (12.8 ms)", "no material finding: rank 5 is the straggler: <title of the minor
  // finding>, costing 2.9% of each iteration" or "no material finding: the 8 workers behave
  // alike (median iteration 41.2 ms)".
  std::string Verdict() const;

  // Workers sorted by rank; empty when no summaries were given.
  const std::vector<WorkerRow>& workers() const { return workers_; }
  WorkerRole RoleOf(int32_t rank) const;

  // At most max_rows indices into workers(), chosen so that a capped view still tells the
  // story: culprits first, then victims, then the slowest remaining workers, then an even
  // sample over ranks. Returned in that priority order.
  std::vector<size_t> SelectWorkers(size_t max_rows) const;

  // The collective or synchronization function (display name) in which the finding's
  // victims spend the most extra time per iteration compared with its culprits; "" when
  // unknown (no summaries, no victims, or no such function).
  std::string VictimWait(const Finding& finding) const;

  // The worker's per-iteration time in the function with this key, or -1 if it never ran.
  static double PerIterationNs(const WorkerSummary& worker, const std::string& key);

 private:
  static const Diagnosis& EmptyDiagnosis();
  // "rank 2 is the straggler: <title>, costing 31% of each iteration (12.8 ms)".
  std::string Sentence(const Finding& finding) const;

  const Diagnosis* diagnosis_;
  std::string title_;
  int32_t num_workers_ = 0;
  double median_iteration_ns_ = 0;
  const Finding* top_ = nullptr;
  const Finding* minor_straggler_ = nullptr;
  size_t material_count_ = 0;
  bool window_only_ = false;
  std::vector<WorkerRow> workers_;
  std::unordered_map<int32_t, WorkerRole> roles_;
  std::unordered_map<int32_t, size_t> row_of_rank_;
};

}  // namespace perftracker::report
