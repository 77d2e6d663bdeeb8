// IterationBreakdown: a worker's mean iteration and where its time went (compute,
// communication, waiting, data loading, host-only), each IterationSummary duration averaged
// over the worker's iterations. The localizer's worker table, its hardware findings and the
// report's per-worker rows all read it from MeanBreakdown(), so they agree to the bit.
#pragma once

#include "perftracker/summary/worker_summary.h"

namespace perftracker {

struct IterationBreakdown {
  double duration_ns = 0;
  double compute_ns = 0;
  double communication_ns = 0;
  double wait_ns = 0;
  double data_ns = 0;
  double host_only_ns = 0;
};

// The mean of each part over worker.iterations; all zero when there are none (each reader
// falls back to what suits it, e.g. the median iteration or the window).
IterationBreakdown MeanBreakdown(const WorkerSummary& worker);

}  // namespace perftracker
