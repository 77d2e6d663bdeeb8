#include "perftracker/server/http/json_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>
#include <vector>

#include "perftracker/report/compare_report.h"
#include "perftracker/server/http/window_comparison.h"

namespace perftracker {
namespace {

using nlohmann::json;

// Strings come from user code (function names, command lines): invalid UTF-8 becomes
// U+FFFD instead of an exception.
std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

ApiResponse Ok(const json& value, int status = 200) { return {status, Dump(value)}; }

int HttpStatusOf(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kDataLoss:
    case StatusCode::kInternal:
      return 500;
  }
  return 500;
}

ApiResponse FromStatus(const Status& status) {
  return JsonApi::Error(HttpStatusOf(status), status.message());
}

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

// Rounds to the microsecond: enough for a chart, and keeps the JSON short.
double RoundMs(double ms) { return std::round(ms * 1000.0) / 1000.0; }

template <typename T>
std::optional<T> ParseInt(std::string_view text) {
  T value{};
  if (text.empty()) return std::nullopt;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// A shown copy of a user-supplied parameter in an error message: bounded and printable.
std::string Quote(std::string_view text) {
  std::string out = "'";
  for (char c : text.substr(0, 64)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  if (text.size() > 64) out += "...";
  return out + "'";
}

std::optional<uint64_t> ParseWindowId(std::string_view text) {
  std::optional<uint64_t> id = ParseInt<uint64_t>(text);
  if (!id || *id == 0 || *id > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return id;
}

std::string_view StateName(WindowState state) {
  switch (state) {
    case WindowState::kOpen:
      return "open";
    case WindowState::kDiagnosed:
      return "diagnosed";
    case WindowState::kAbandoned:
      return "abandoned";
  }
  return "unknown";
}

json JobJson(const JobRecord& job) {
  return {{"job_id", job.job_id},
          {"title", job.title},
          {"world_size", job.world_size},
          {"created_ms", Ms(job.created_ns)},
          {"last_seen_ms", Ms(job.last_seen_ns)}};
}

json WindowJson(const WindowRecord& w) {
  return {{"window_id", w.window_id},      {"reason", w.reason},
          {"start_ms", Ms(w.start_ns)},    {"duration_ms", Ms(w.duration_ns)},
          {"triggers", w.triggers},        {"state", StateName(w.state)},
          {"state_reason", w.state_reason}};
}

}  // namespace

ApiResponse JsonApi::Error(int status, const std::string& message) {
  return {status, Dump(json{{"error", message}})};
}

ApiResponse JsonApi::ListJobs() {
  StatusOr<std::vector<JobRecord>> jobs = store_->ListJobs();
  if (!jobs.ok()) return FromStatus(jobs.status());
  json out = json::array();
  for (const JobRecord& job : *jobs) {
    json j = JobJson(job);
    StatusOr<std::vector<WindowRecord>> windows = store_->ListWindows(job.job_id);
    if (!windows.ok()) return FromStatus(windows.status());
    j["windows"] = windows->size();
    j["latest_top_code"] = "";
    j["latest_window_id"] = nullptr;
    // The newest diagnosed window's verdict.
    for (auto it = windows->rbegin(); it != windows->rend(); ++it) {
      StatusOr<DiagnosisRecord> d = store_->GetDiagnosis(job.job_id, it->window_id);
      if (!d.ok()) continue;
      j["latest_top_code"] = d->top_code;
      j["latest_window_id"] = it->window_id;
      break;
    }
    out.push_back(std::move(j));
  }
  return Ok(json{{"jobs", std::move(out)}});
}

ApiResponse JsonApi::GetJob(const std::string& job_id) {
  StatusOr<JobRecord> job = store_->GetJob(job_id);
  if (!job.ok()) return FromStatus(job.status());
  StatusOr<std::vector<WorkerRecord>> workers = store_->ListWorkers(job_id);
  if (!workers.ok()) return FromStatus(workers.status());
  StatusOr<std::vector<WindowRecord>> windows = store_->ListWindows(job_id);
  if (!windows.ok()) return FromStatus(windows.status());
  StatusOr<std::optional<uint64_t>> baseline = store_->GetBaseline(job_id);
  if (!baseline.ok()) return FromStatus(baseline.status());

  json w = json::array();
  for (const WorkerRecord& worker : *workers) {
    w.push_back({{"rank", worker.rank},
                 {"host", worker.host},
                 {"pid", worker.pid},
                 {"joined_ms", Ms(worker.joined_ns)}});
  }
  json win = json::array();
  for (const WindowRecord& window : *windows) {
    json j = WindowJson(window);
    StatusOr<DiagnosisRecord> d = store_->GetDiagnosis(job_id, window.window_id);
    j["has_diagnosis"] = d.ok();
    j["top_code"] = d.ok() ? d->top_code : "";
    j["has_perfetto"] = d.ok() && !d->perfetto_path.empty();
    win.push_back(std::move(j));
  }
  json out = {{"job", JobJson(*job)}, {"workers", std::move(w)}, {"windows", std::move(win)}};
  out["baseline_window"] = baseline->has_value() ? json(**baseline) : json(nullptr);
  return Ok(out);
}

ApiResponse JsonApi::ListIterations(const std::string& job_id, std::string_view since,
                                    std::string_view limit) {
  int64_t since_ns = 0;
  if (!since.empty()) {
    std::optional<int64_t> parsed = ParseInt<int64_t>(since);
    if (!parsed) {
      return Error(400, "bad 'since' " + Quote(since) +
                            ": expected an integer time in ns (the 'next_since' of the last "
                            "answer)");
    }
    since_ns = *parsed;
  }
  size_t max_points = limits_.default_iteration_points;
  if (!limit.empty()) {
    std::optional<uint64_t> parsed = ParseInt<uint64_t>(limit);
    if (!parsed || *parsed == 0 || *parsed > limits_.max_iteration_points) {
      return Error(400, fmt::format("bad 'limit' {}: expected 1 .. {}", Quote(limit),
                                    limits_.max_iteration_points));
    }
    max_points = *parsed;
  }
  StatusOr<JobRecord> job = store_->GetJob(job_id);
  if (!job.ok()) return FromStatus(job.status());
  StatusOr<std::vector<IterationPoint>> points =
      store_->ListIterations(job_id, since_ns, max_points);
  if (!points.ok()) return FromStatus(points.status());
  json arr = json::array();
  int64_t next_since = since_ns;
  for (const IterationPoint& p : *points) {
    arr.push_back({p.rank, Ms(p.end_ns), RoundMs(Ms(p.duration_ns))});
    next_since = std::max(next_since, p.end_ns);
  }
  return Ok(json{
      {"job_id", job_id}, {"points", std::move(arr)}, {"next_since", std::to_string(next_since)}});
}

ApiResponse JsonApi::ListWindows(const std::string& job_id) {
  StatusOr<JobRecord> job = store_->GetJob(job_id);
  if (!job.ok()) return FromStatus(job.status());
  StatusOr<std::vector<WindowRecord>> windows = store_->ListWindows(job_id);
  if (!windows.ok()) return FromStatus(windows.status());
  json arr = json::array();
  for (const WindowRecord& window : *windows) {
    json j = WindowJson(window);
    StatusOr<DiagnosisRecord> d = store_->GetDiagnosis(job_id, window.window_id);
    j["has_diagnosis"] = d.ok();
    j["top_code"] = d.ok() ? d->top_code : "";
    j["has_perfetto"] = d.ok() && !d->perfetto_path.empty();
    arr.push_back(std::move(j));
  }
  return Ok(json{{"job_id", job_id}, {"windows", std::move(arr)}});
}

ApiResponse JsonApi::GetDiagnosis(const std::string& job_id, std::string_view window_id) {
  std::optional<uint64_t> id = ParseWindowId(window_id);
  if (!id) {
    return Error(400, "bad window id " + Quote(window_id) + ": expected a positive integer");
  }
  StatusOr<DiagnosisRecord> d = store_->GetDiagnosis(job_id, *id);
  if (!d.ok()) return FromStatus(d.status());
  json diagnosis = json::parse(d->json, nullptr, /*allow_exceptions=*/false);
  if (diagnosis.is_discarded()) {
    return Error(
        500, fmt::format("job {} window {}: the stored diagnosis is not valid JSON", job_id, *id));
  }
  return Ok(json{{"job_id", job_id},
                 {"window_id", *id},
                 {"top_code", d->top_code},
                 {"missing_ranks", d->missing_ranks},
                 {"created_ms", Ms(d->created_ns)},
                 {"text", d->text},
                 {"diagnosis", std::move(diagnosis)}});
}

ApiResponse JsonApi::GetSummaries(const std::string& job_id, std::string_view window_id,
                                  std::string_view top, std::string_view function_key) {
  std::optional<uint64_t> id = ParseWindowId(window_id);
  if (!id) {
    return Error(400, "bad window id " + Quote(window_id) + ": expected a positive integer");
  }
  size_t top_n = limits_.default_summary_functions;
  if (!top.empty()) {
    std::optional<uint64_t> parsed = ParseInt<uint64_t>(top);
    if (!parsed || *parsed == 0 || *parsed > limits_.max_summary_functions) {
      return Error(400, fmt::format("bad 'top' {}: expected 1 .. {}", Quote(top),
                                    limits_.max_summary_functions));
    }
    top_n = *parsed;
  }
  StatusOr<WindowRecord> window = store_->GetWindow(job_id, *id);
  if (!window.ok()) return FromStatus(window.status());
  StatusOr<std::vector<WorkerSummary>> summaries = store_->ListSummaries(job_id, *id);
  if (!summaries.ok()) return FromStatus(summaries.status());

  // Choose the functions: the one asked for, or the top ones by total time over workers.
  std::unordered_map<std::string, double> total_by_key;
  std::unordered_map<std::string, const FunctionSummary*> first_by_key;
  for (const WorkerSummary& s : *summaries) {
    for (size_t i = 0; i < s.functions.size(); ++i) {
      const FunctionSummary& f = s.functions[i];
      std::string key = s.Key(i);
      total_by_key[key] += static_cast<double>(f.total_ns);
      first_by_key.emplace(std::move(key), &f);
    }
  }
  std::vector<std::string> keys;
  if (!function_key.empty()) {
    if (first_by_key.count(std::string(function_key)) == 0) {
      return Error(404, fmt::format("job {} window {}: no worker ran a function with key {}",
                                    job_id, *id, Quote(function_key)));
    }
    keys.emplace_back(function_key);
  } else {
    for (const auto& [key, total] : total_by_key) keys.push_back(key);
    std::sort(keys.begin(), keys.end(), [&](const std::string& a, const std::string& b) {
      const double ta = total_by_key[a];
      const double tb = total_by_key[b];
      return ta != tb ? ta > tb : a < b;
    });
    if (keys.size() > top_n) keys.resize(top_n);
  }
  std::unordered_map<std::string, size_t> index;
  json functions = json::array();
  for (const std::string& key : keys) {
    const FunctionSummary* f = first_by_key[key];
    index.emplace(key, functions.size());
    functions.push_back({{"key", key}, {"name", f->name}, {"kind", EventKindName(f->kind)}});
  }

  json workers = json::array();
  for (const WorkerSummary& s : *summaries) {
    json rows = json::array();
    for (size_t i = 0; i < s.functions.size(); ++i) {
      const FunctionSummary& f = s.functions[i];
      auto it = index.find(s.Key(i));
      if (it == index.end()) continue;
      rows.push_back({it->second, f.count, RoundMs(Ms(f.total_ns)),
                      RoundMs(f.durations.Quantile(0.5) / 1e6),
                      RoundMs(f.durations.Quantile(0.99) / 1e6)});
    }
    workers.push_back({{"rank", s.rank},
                       {"host", s.host},
                       {"iterations", s.iterations.size()},
                       {"median_iteration_ms", RoundMs(Ms(s.median_iteration_ns()))},
                       {"functions", std::move(rows)}});
  }
  return Ok(json{{"job_id", job_id},
                 {"window_id", *id},
                 {"columns", {"function", "count", "total_ms", "p50_ms", "p99_ms"}},
                 {"functions", std::move(functions)},
                 {"workers", std::move(workers)}});
}

ApiResponse JsonApi::CompareWindows(const std::string& job_id, std::string_view baseline,
                                    std::string_view current) {
  StatusOr<JobRecord> job = store_->GetJob(job_id);
  if (!job.ok()) return FromStatus(job.status());
  std::optional<uint64_t> base;
  if (!baseline.empty()) {
    base = ParseWindowId(baseline);
    if (!base) {
      return Error(400, "bad baseline window " + Quote(baseline) + ": expected a positive integer");
    }
  } else {
    StatusOr<uint64_t> b = BaselineWindow(store_, job_id);
    if (!b.ok()) return FromStatus(b.status());
    base = *b;
  }
  std::optional<uint64_t> cur;
  if (!current.empty()) {
    cur = ParseWindowId(current);
    if (!cur) {
      return Error(400, "bad current window " + Quote(current) + ": expected a positive integer");
    }
  } else {
    StatusOr<std::vector<WindowRecord>> windows = store_->ListWindows(job_id);
    if (!windows.ok()) return FromStatus(windows.status());
    for (auto it = windows->rbegin(); it != windows->rend() && !cur; ++it) {
      if (it->state == WindowState::kDiagnosed) cur = it->window_id;
    }
    if (!cur) return Error(404, fmt::format("job {} has no diagnosed window yet", job_id));
  }
  StatusOr<compare::Comparison> c = CompareStoredWindows(store_, job_id, base, *cur);
  if (!c.ok()) return FromStatus(c.status());
  json out = json::parse(RenderComparisonJson(*c));
  out["job_id"] = job_id;
  out["baseline_window"] = *base;
  out["current_window"] = *cur;
  return Ok(out);
}

ApiResponse JsonApi::OpenTimeline(const std::string& job_id, std::string_view window_id,
                                  std::unique_ptr<TimelineFile>* file) {
  std::optional<uint64_t> id = ParseWindowId(window_id);
  if (!id) {
    return Error(400, "bad window id " + Quote(window_id) + ": expected a positive integer");
  }
  StatusOr<WindowRecord> window = store_->GetWindow(job_id, *id);
  if (!window.ok()) return FromStatus(window.status());
  StatusOr<std::unique_ptr<TimelineFile>> opened = TimelineFile::Open(store_, job_id, *id);
  if (!opened.ok()) return FromStatus(opened.status());
  *file = std::move(opened).value();
  return {200, ""};
}

ApiResponse JsonApi::SetBaseline(const std::string& job_id, std::string_view window) {
  std::optional<uint64_t> id = ParseWindowId(window);
  if (!id) {
    return Error(400, "bad window " + Quote(window) +
                          ": expected a positive integer (POST .../baseline?window=N)");
  }
  Status st = store_->SetBaseline(job_id, *id);
  if (!st.ok()) return FromStatus(st);
  return Ok(json{{"job_id", job_id}, {"baseline_window", *id}});
}

ApiResponse JsonApi::Trigger(const std::string& job_id) {
  StatusOr<JobRecord> job = store_->GetJob(job_id);
  if (!job.ok()) return FromStatus(job.status());
  if (actions_ == nullptr) {
    return Error(501, "this server cannot open windows (it serves a store without collectors)");
  }
  Status st = actions_->TriggerWindow(job_id);
  if (!st.ok()) return FromStatus(st);
  return Ok(json{{"job_id", job_id}, {"status", "window requested"}}, 202);
}

}  // namespace perftracker
