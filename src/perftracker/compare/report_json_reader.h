// Reads the JSON report perftracker writes (docs/report-json.md: `diagnose --format json`, a
// live window's window-<id>.json) into a RunProfile: its workers' iteration times and spread
// and its `functions` table. A report written before the table existed gives a profile
// without function times (has_functions() false).
#pragma once

#include <string>
#include <string_view>

#include "perftracker/compare/run_profile.h"
#include "perftracker/core/status.h"

namespace perftracker::compare {

// True when `prefix` (the first bytes of a file) looks like a perftracker report rather than
// a trace: a JSON object whose first fields are "schema_version" and "generator".
bool LooksLikeReportJson(std::string_view prefix);

// Parses `json` (the file at `path`, named in errors) into `profile`. One-line errors: not
// JSON, not a perftracker report, a comparison given for a report, a newer schema, a report
// without workers.
Status ReadReportJson(std::string_view json, const std::string& path, RunProfile* profile);

}  // namespace perftracker::compare
