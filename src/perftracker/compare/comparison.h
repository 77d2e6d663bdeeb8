// Comparison: what changed from a baseline run to a current one, per function and per rank
// (RunComparer's result; rendered as text, JSON and HTML by report/compare_report.h, which
// also words its verdict).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace perftracker::compare {

enum class ChangeDirection : uint8_t { kSlower = 0, kFaster = 1 };

// One rank's time per iteration in a changed function.
struct RankChange {
  int32_t rank = -1;
  double baseline_ns = 0;
  double current_ns = 0;
  // current - shared_scale x baseline: the change beyond what every function shares.
  double delta_ns = 0;
  bool material = false;  // |delta_ns| is above this rank's bar
};

struct FunctionChange {
  ChangeDirection direction = ChangeDirection::kSlower;
  std::string function;      // display name of the named frame (what the user wrote)
  std::string function_key;  // its call path, as in the report JSON's function_key
  std::string kind;          // its kind: "annotation", "python", "torch_op", ...
  // The deepest frame below the named one that explains most of the change ("aten::addmm"),
  // "" when that is the named frame itself.
  std::string time_goes_into;
  std::vector<int32_t> workers;  // ranks on which the change is material
  // Medians over `workers`, per iteration.
  double baseline_ns = 0;
  double current_ns = 0;
  double delta_ns = 0;
  // |delta_ns| over the baseline's median iteration.
  double delta_share = 0;
  std::vector<RankChange> ranks;  // every rank the two runs share, by rank
};

// One rank's iteration time in both runs.
struct WorkerChange {
  int32_t rank = -1;
  std::string host;
  double baseline_iteration_ns = 0;
  double current_iteration_ns = 0;
  double baseline_spread_ns = 0;
  double current_spread_ns = 0;
  // The smallest change of a function's time per iteration on this rank that counts as
  // material: max(material share x baseline iteration, noise sigmas x the combined standard
  // error of the two runs' mean iteration).
  double bar_ns = 0;
  bool material = false;  // the iteration time changed by at least bar_ns
  // The factor this rank's functions are measured beyond (current - scale x baseline): the
  // shared factor when applied (else 1), times the rank's own load ratio over the median
  // rank's when both runs say how long its threads waited for a CPU.
  double scale = 1;
};

struct Comparison {
  std::string baseline_title;
  std::string current_title;
  int32_t baseline_workers = 0;
  int32_t current_workers = 0;
  double baseline_iteration_ns = 0;  // median over workers
  double current_iteration_ns = 0;
  // What every function shares: the median ratio of current to baseline self time over the
  // functions that take >= 1 % of the iteration in both runs (1 = unchanged). Machine load, clocks
  // or a library that slows everything alike move it; one function's change does not.
  double shared_scale = 1;
  // shared_scale's cost per iteration: (shared_scale - 1) x baseline median iteration, and
  // whether it is a change of the job: above the median rank's bar, with the median
  // iteration moved beyond the bar the same way.
  double shared_delta_ns = 0;
  bool shared_material = false;
  // How much longer each CPU second took in the current run than in the baseline (the
  // median over ranks of the ratio of ProfileWorker::cpu_stretch; 0 when a run does not
  // say), and whether that explains the shared factor (it is then not material).
  double machine_scale = 0;
  bool shared_explained_by_load = false;
  double median_bar_ns = 0;
  // The options the bars were drawn with (CompareOptions).
  double material_share = 0;
  double noise_sigmas = 0;
  bool compared_functions = true;       // false when a report carried no function times
  std::vector<FunctionChange> changes;  // material ones only, largest |delta| first
  std::vector<WorkerChange> workers;    // ranks present in both runs
  std::vector<std::string> notes;

  bool has_material_change() const { return !changes.empty() || shared_material; }
};

}  // namespace perftracker::compare
