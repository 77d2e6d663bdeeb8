// The data-quality counters: the one table of what went wrong with a worker's input, each
// with a severity (Perfetto's stats table). Sources, the collector's rings and the
// summarizer count into SummaryStats (worker_summary.h); the localizer's notes and the JSON
// report read every counter through this table, so that a new counter is one row here and
// one field there, and reaches the report without further code.
//
// Severities: kInfo (every event counts, something was simplified: a name cut, an event
// counted flat because it came too late to nest, an invalid function slot; or the host
// metrics are short: samples missed, reads failed), kError (records were unusable and left
// out: malformed), kDataLoss (events never reached the summary or were not summarized: full
// rings, nesting beyond the summarizer's limit). The error and data-loss counters make the
// share of a worker's events lost, which makes its data incomplete (PT-INCOMPLETE-DATA).
#pragma once

#include <cstdint>
#include <string_view>

#include "perftracker/summary/worker_summary.h"

namespace perftracker {

enum class DataQualitySeverity : uint8_t { kInfo, kError, kDataLoss };

std::string_view DataQualitySeverityName(DataQualitySeverity severity);  // "info", ...

struct DataQualityCounter {
  std::string_view name;  // the JSON key (report "stats", "data_quality")
  DataQualitySeverity severity;
  // How a note says it after the count: "3 dropped", "2 names truncated".
  std::string_view phrase;
  // A table's column header (the HTML report's input problems).
  std::string_view column;
  uint64_t SummaryStats::*count;
  // Listed in a worker's note even at 0 ("0 dropped, 0 malformed, 3 out-of-order of N
  // events"): the event counters a reader checks together. The others only when non-zero.
  bool noted_at_zero = false;
};

// Every counter of SummaryStats but `events` (the total they are counted against). The
// lost-event share (LostEvents) sums the kError and kDataLoss rows: only event counts may
// have those severities.
inline constexpr DataQualityCounter kDataQualityCounters[] = {
    {"dropped_events", DataQualitySeverity::kDataLoss, "dropped", "dropped",
     &SummaryStats::dropped_events, true},
    {"malformed_events", DataQualitySeverity::kError, "malformed", "malformed",
     &SummaryStats::malformed_events, true},
    {"out_of_order_events", DataQualitySeverity::kInfo, "out-of-order", "out of order",
     &SummaryStats::out_of_order_events, true},
    {"deep_events", DataQualitySeverity::kDataLoss, "nested too deep to summarize", "too deep",
     &SummaryStats::deep_events},
    {"names_truncated", DataQualitySeverity::kInfo, "names truncated", "names cut",
     &SummaryStats::names_truncated},
    {"invalid_function_events", DataQualitySeverity::kInfo,
     "events of invalid function slots (counted, call path lost)", "invalid function",
     &SummaryStats::invalid_function_events},
    // The host metrics: not events, so never part of the events lost.
    {"metric_samples_process_gone", DataQualitySeverity::kInfo,
     "metric samples missed (process gone)", "metrics: process gone",
     &SummaryStats::metric_samples_process_gone},
    {"metric_reads_failed", DataQualitySeverity::kInfo, "metric reads failed",
     "metrics: reads failed", &SummaryStats::metric_reads_failed},
    {"metric_readings_truncated", DataQualitySeverity::kInfo,
     "metric readings cut at a bound (TCP sockets)", "metrics: cut",
     &SummaryStats::metric_readings_truncated},
    // Not events either: a span of the window without GPU data.
    {"gpu_untraced_ms", DataQualitySeverity::kInfo,
     "ms of the window without GPU tracing (perftracker gave CUPTI to the job's torch.profiler)",
     "GPU untraced (ms)", &SummaryStats::gpu_untraced_ms},
};

// True when any counter of `stats` is non-zero.
bool HasDataQualityProblem(const SummaryStats& stats);
// The events lost: the sum of the error and data-loss counters.
uint64_t LostEvents(const SummaryStats& stats);

}  // namespace perftracker
