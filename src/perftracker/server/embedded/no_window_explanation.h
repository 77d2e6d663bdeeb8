// ExplainNoWindow: why a `perftracker run` took no window, from what the agents reported.
//
// A run that ends without a window leaves the user asking whether the job was fine or
// perftracker saw nothing. The agents send every closed iteration to the coordinator, so
// the run can say which it was: no rank reported an iteration (the detector never learned
// the loop), too few iterations for the moving mean, or the iteration time never rose
// enough. The rise is computed the way each agent's IterationDetector computes its trigger
// (detect/iteration_detector.cc): the mean of the last N iterations against the shortest
// such mean before it, over the whole run (no window, hence no re-arm).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace perftracker {

// durations_ns: each rank's iteration durations, oldest first (ranks without any may be
// absent). window_iterations and slowdown_ratio: the detector's settings the agents ran
// with. Returns one or two lines, each starting "perftracker: " and ending in '\n'.
std::string ExplainNoWindow(const std::map<int32_t, std::vector<int64_t>>& durations_ns,
                            int window_iterations, double slowdown_ratio);

}  // namespace perftracker
