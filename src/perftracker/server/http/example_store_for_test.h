// Test support: fills a Store with a real job: the per-rank traces of examples/straggler
// (rank 2 is a compute straggler) imported and summarized as `perftracker diagnose` does,
// localized, and stored as window 1 with its summaries, the JSON and text reports, the
// workers and each rank's iteration times. Used by the HTTP tests and the UI fixture.
// AddSlowerWindow() adds a later window of the same job in which one function is slower on
// every rank (what `perftracker compare` and the UI's compare view must name).
#pragma once

#include <cstdint>
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

struct ExampleOptions {
  // When set, window 1's Perfetto export (what `diagnose --perfetto` writes) is written to
  // this absolute path and recorded with its diagnosis, as a live server does.
  std::string perfetto_path;
};

// `traces_dir`: a folder of rank*.json.gz files (examples/straggler). Times are shifted so
// the window ends at the current time, as if the job had just run.
StatusOr<ExampleJob> FillStoreWithExample(Store* store, const std::string& traces_dir,
                                          const std::string& job_id,
                                          const ExampleOptions& options = {});

// Window `window_id` of the example job: window 1's summaries (stored first) with the
// function of key `function_key` taking `extra_share` of the median iteration more on every
// rank (its callers and the iterations longer by as much), starting a minute after window 1,
// localized and stored with its diagnosis.
Status AddSlowerWindow(Store* store, const std::string& job_id, uint64_t window_id,
                       const std::string& function_key, double extra_share);

}  // namespace perftracker
