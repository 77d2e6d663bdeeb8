#include "perftracker/compare/run_profile.h"

#include <algorithm>
#include <cmath>

namespace perftracker::compare {
namespace {

// Makes the MAD a consistent estimator of the standard deviation of normal data.
constexpr double kMadToSigma = 1.4826;

}  // namespace

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower =
      *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

double RobustSpread(std::vector<double> values) {
  if (values.size() < 2) return 0;
  const double center = Median(values);
  for (double& v : values) v = std::fabs(v - center);
  return kMadToSigma * Median(std::move(values));
}

void RunProfile::AddSummary(const WorkerSummary& summary) {
  ProfileWorker worker;
  worker.rank = summary.rank;
  worker.host = summary.host;
  worker.iterations = summary.iterations.size();
  worker.median_iteration_ns = static_cast<double>(summary.median_iteration_ns());
  std::vector<double> durations;
  durations.reserve(summary.iterations.size());
  for (const IterationSummary& it : summary.iterations) {
    durations.push_back(static_cast<double>(it.duration_ns));
  }
  worker.iteration_spread_ns = RobustSpread(std::move(durations));

  // Parents precede their children in a summary (WorkerSummary::Key()), so one pass interns
  // each function under its parent's node; a function with an explicit key is interned by it.
  const double iterations = static_cast<double>(summary.iteration_count());
  std::vector<uint32_t> node_of(summary.functions.size(), CallPathTree::kRoot);
  for (size_t i = 0; i < summary.functions.size(); ++i) {
    const FunctionSummary& f = summary.functions[i];
    uint32_t node;
    if (!f.key.empty()) {
      node = tree_->InternKey(f.key);
    } else {
      const uint32_t parent =
          f.parent < i ? node_of[f.parent] : static_cast<uint32_t>(CallPathTree::kRoot);
      node = tree_->Intern(parent, EventKindName(f.kind), f.name);
    }
    node_of[i] = node;
    FunctionTimes& t = worker.functions[node];
    t.inclusive_ns += static_cast<double>(f.total_ns) / iterations;
    t.self_ns += static_cast<double>(f.self_ns) / iterations;
    t.calls += static_cast<double>(f.count) / iterations;
  }
  workers_.push_back(std::move(worker));
}

const ProfileWorker* RunProfile::Worker(int32_t rank) const {
  for (const ProfileWorker& w : workers_) {
    if (w.rank == rank) return &w;
  }
  return nullptr;
}

double RunProfile::median_iteration_ns() const {
  std::vector<double> medians;
  medians.reserve(workers_.size());
  for (const ProfileWorker& w : workers_) medians.push_back(w.median_iteration_ns);
  return Median(std::move(medians));
}

}  // namespace perftracker::compare
