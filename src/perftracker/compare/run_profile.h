// RunProfile: what a comparison needs of one run (a trace set, a stored window, a report
// JSON): per worker, its iteration time and how much that time scatters, and per function
// (a node of a CallPathTree shared by the runs compared) its time per iteration.
//
// Per iteration, because two runs rarely cover the same number of iterations; inclusive
// time (the calls' whole duration) to follow a slowdown down the call path, self time to
// measure what every function shares (machine load slows everything alike).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "perftracker/compare/call_path_tree.h"
#include "perftracker/summary/worker_summary.h"

namespace perftracker::compare {

struct FunctionTimes {
  double inclusive_ns = 0;  // per iteration
  double self_ns = 0;       // per iteration
  double calls = 0;         // per iteration
};

struct ProfileWorker {
  int32_t rank = -1;
  std::string host;
  size_t iterations = 0;  // iteration markers seen; 0 = the window is one "iteration"
  double median_iteration_ns = 0;
  // 1.4826 x the MAD of the iteration times: how much one iteration scatters about the median
  // in this run (a robust standard deviation); 0 with fewer than two iterations.
  double iteration_spread_ns = 0;
  // How busy the machine was: how long each second of the worker's CPU work took, CpuStretch()
  // of the window's kCpuUtilization, kRunQueueDelayFraction and kCpuStealFraction (a live
  // collector's host sampler, or a trace's host-load event). 0 when unknown.
  double cpu_stretch = 0;
  std::unordered_map<uint32_t, FunctionTimes> functions;  // by CallPathTree node
};

class RunProfile {
 public:
  // `tree` is shared by the profiles to be compared and must outlive them.
  RunProfile(CallPathTree* tree, std::string title) : tree_(tree), title_(std::move(title)) {}

  // One worker from its window summary. With `paths`, only the functions whose call path's
  // hash (CallPathHashes) is in it are counted, and only their paths are interned (and the
  // key paths of functions with an explicit key, in order): a report that lists a few hundred
  // paths of a trace with Python stacks (one distinct path per 2-3 events) does not intern
  // all of them. The nodes it counts are those, and their times are what they are without.
  void AddSummary(const WorkerSummary& summary,
                  const std::unordered_set<uint64_t>* paths = nullptr);
  // A worker built elsewhere (the report JSON reader), with nodes of tree().
  void AddWorker(ProfileWorker worker) { workers_.push_back(std::move(worker)); }
  // False for a profile read from a report that carries no function times (the comparison
  // then covers iteration times only, and says so).
  void set_has_functions(bool has) { has_functions_ = has; }
  void AddNote(std::string note) { notes_.push_back(std::move(note)); }

  CallPathTree* tree() const { return tree_; }
  const std::string& title() const { return title_; }
  const std::vector<ProfileWorker>& workers() const { return workers_; }
  bool has_functions() const { return has_functions_; }
  const std::vector<std::string>& notes() const { return notes_; }
  // The worker of this rank, or nullptr.
  const ProfileWorker* Worker(int32_t rank) const;
  // The median of the workers' median iterations; 0 without workers.
  double median_iteration_ns() const;

 private:
  CallPathTree* tree_;
  std::string title_;
  std::vector<ProfileWorker> workers_;
  bool has_functions_ = true;
  std::vector<std::string> notes_;
};

// The hash (CallPathTree::FrameHash, KeyHash) of each function's call path, by index: equal
// for the functions AddSummary() counts in one node.
std::vector<uint64_t> CallPathHashes(const WorkerSummary& summary);

// How long each second of CPU work took, from a worker's CPU utilization and run-queue
// delay fraction (both per wall second, summed over its threads) and its host's steal
// fraction (-1 when unknown): 1 / (1 - steal) + run_queue / cpu, >= 1 (1 = never waited for a
// CPU, on a host that lost none to other guests). 0 when cpu or run_queue is unknown.
double CpuStretch(double cpu, double run_queue, double steal);
// The same of a worker's window: its kCpuUtilization, kRunQueueDelayFraction and
// kCpuStealFraction worker metrics. 0 when unknown.
double CpuStretch(const WorkerSummary& summary);

// 1.4826 x the median absolute deviation of `values` (reordered); 0 for fewer than two.
double RobustSpread(std::vector<double> values);
// The median of `values` (reordered); 0 for none.
double Median(std::vector<double> values);

}  // namespace perftracker::compare
