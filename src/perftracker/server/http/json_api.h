// JsonApi: the JSON API of the server (/api/v1/...), as functions from request parameters to
// a status and a body, without sockets: HttpServer routes requests here, tests call it
// directly. Parameters arrive as the raw strings of the URL; validating them (a window id
// that is not a number, a limit out of range) is part of the API and answers 400 with
// {"error": "..."}. Absent jobs / windows / diagnoses answer 404; a store failure 500.
//
// Times: nanosecond values (CLOCK_REALTIME, ~1.7e18) do not fit a JavaScript number
// exactly, so every time is given as `*_ms` (a double, milliseconds since the epoch), and
// the one value a client sends back (`next_since` of the iterations) as a decimal string.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "perftracker/server/http/job_actions.h"
#include "perftracker/server/http/timeline_file.h"
#include "perftracker/server/store/store.h"

namespace perftracker {

struct ApiResponse {
  int status = 200;
  std::string body;  // JSON
};

struct JsonApiLimits {
  size_t default_iteration_points = 20000;
  size_t max_iteration_points = 200000;
  size_t default_summary_functions = 40;
  size_t max_summary_functions = 1000;
};

class JsonApi {
 public:
  // `actions` may be null (a read-only server): the trigger endpoint then answers 501.
  JsonApi(Store* store, JobActions* actions, JsonApiLimits limits = {})
      : store_(store), actions_(actions), limits_(limits) {}

  // GET /api/v1/jobs: every job, newest first, with its window count and latest verdict.
  ApiResponse ListJobs();
  // GET /api/v1/jobs/{job}: the job, its workers, windows (with their top finding code and
  // whether they have a Perfetto export) and baseline window.
  ApiResponse GetJob(const std::string& job_id);
  // GET /api/v1/jobs/{job}/iterations?since=NS&limit=N: points [rank, end_ms, duration_ms]
  // after `since` (exclusive, ns), the newest `limit`, oldest first.
  ApiResponse ListIterations(const std::string& job_id, std::string_view since,
                             std::string_view limit);
  // GET /api/v1/jobs/{job}/windows
  ApiResponse ListWindows(const std::string& job_id);
  // GET /api/v1/jobs/{job}/windows/{id}/diagnosis: the stored diagnosis (the schema of
  // `diagnose --format json`) under "diagnosis", with the text report and missing ranks.
  ApiResponse GetDiagnosis(const std::string& job_id, std::string_view window_id);
  // GET /api/v1/jobs/{job}/windows/{id}/summaries?top=N&function=KEY: per worker, per
  // function [index, count, total_ms, p50_ms, p99_ms] for the `top` functions by total
  // time over all workers, or only the function with key KEY (a finding's drill-down).
  ApiResponse GetSummaries(const std::string& job_id, std::string_view window_id,
                           std::string_view top, std::string_view function_key);
  // GET /api/v1/jobs/{job}/compare?baseline=A&current=B: what changed from window A (default:
  // the job's baseline window) to window B (default: the newest window with summaries), as
  // `perftracker compare --format json` (docs/compare.md), with "job_id",
  // "baseline_window" and "current_window" added.
  ApiResponse CompareWindows(const std::string& job_id, std::string_view baseline,
                             std::string_view current);
  // GET /api/v1/jobs/{job}/windows/{id}/perfetto: the window's Perfetto export, the file the
  // store recorded for it (TimelineFile: path-safe). Status 200 with `*file` open, or an
  // error answer (400 bad id, 404 no such window / export / file).
  ApiResponse OpenTimeline(const std::string& job_id, std::string_view window_id,
                           std::unique_ptr<TimelineFile>* file);
  // POST /api/v1/jobs/{job}/baseline?window=N: makes window N the job's baseline (the
  // window later windows are compared with).
  ApiResponse SetBaseline(const std::string& job_id, std::string_view window);
  // POST /api/v1/jobs/{job}/trigger: asks for a window on every worker now (202).
  ApiResponse Trigger(const std::string& job_id);

  // {"error": message} with `status`.
  static ApiResponse Error(int status, const std::string& message);

 private:
  Store* store_;
  JobActions* actions_;
  JsonApiLimits limits_;
};

}  // namespace perftracker
