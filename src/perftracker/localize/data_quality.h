// Data quality (algorithm step 8): missing / duplicate / unranked workers and every
// data-quality counter with a count (summary/data_quality_counters.h: dropped, malformed,
// out-of-order, too deep, names truncated) become notes; a worker whose data is badly
// incomplete (at least kIncompleteShare of its events lost: the error and data-loss
// counters; or an empty summary) becomes a PT-INCOMPLETE-DATA finding, so that findings
// about it read as less certain. In a hang window (hang_window) an empty summary is the
// hang's doing (a rank's calls are still open: it is stuck, or waits in C++ for one that
// is) and says so, and a badly incomplete profile is a note: the hang leads the report.
#pragma once

#include "perftracker/localize/diagnosis.h"
#include "perftracker/localize/job_table.h"

namespace perftracker::localize {

// Appends notes and at most one finding to `d`.
void CheckDataQuality(const JobTable& job, Diagnosis& d, bool hang_window = false);

}  // namespace perftracker::localize
