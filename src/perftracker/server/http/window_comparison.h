// Comparing two stored windows of a job (`perftracker compare --store`, the API's
// /compare, the live server's comparison of each window with the job's baseline): their
// stored WorkerSummaries, compared as two runs by compare::RunComparer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "perftracker/compare/comparison.h"
#include "perftracker/compare/run_comparer.h"
#include "perftracker/core/status.h"
#include "perftracker/server/store/store.h"

namespace perftracker {

// `baseline` unset: the job's baseline window (NotFound, saying how to mark one, when it has
// none). Errors are one line naming the job and window.
StatusOr<compare::Comparison> CompareStoredWindows(Store* store, const std::string& job_id,
                                                   std::optional<uint64_t> baseline,
                                                   uint64_t current,
                                                   const compare::CompareOptions& options = {});

// The job's baseline window, NotFound (one line: how one becomes the baseline) when none.
StatusOr<uint64_t> BaselineWindow(Store* store, const std::string& job_id);

}  // namespace perftracker
