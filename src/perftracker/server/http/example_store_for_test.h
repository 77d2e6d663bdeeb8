// Test support: fills a Store with a real job: the per-rank traces of examples/straggler
// (rank 2 is a compute straggler) imported and summarized as `perftracker diagnose` does,
// localized, and stored as window 1 with its summaries, the JSON and text reports, the
// workers and each rank's iteration times. Used by the HTTP tests and the UI fixture.
#pragma once

#include <string>

#include "perftracker/core/status.h"
#include "perftracker/server/store/store.h"

namespace perftracker {

struct ExampleJob {
  std::string job_id;
  std::string top_code;       // the diagnosis' first finding's code
  int32_t culprit_rank = -1;  // its first culprit worker
  std::string culprit_function_key;
};

// `traces_dir`: a folder of rank*.json.gz files (examples/straggler). Times are shifted so
// the window ends at the current time, as if the job had just run.
StatusOr<ExampleJob> FillStoreWithExample(Store* store, const std::string& traces_dir,
                                          const std::string& job_id);

}  // namespace perftracker
