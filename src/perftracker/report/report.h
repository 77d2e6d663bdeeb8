// Reports of a Diagnosis: terminal text (default), JSON (stable schema, docs/report-json.md),
// and one self-contained HTML file.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "perftracker/localize/diagnosis.h"
#include "perftracker/summary/worker_summary.h"

namespace perftracker {

// An input file `perftracker diagnose` could not read.
struct SkippedInput {
  std::string path;
  std::string error;
};

struct ReportInput {
  const Diagnosis* diagnosis = nullptr;
  // The workers' summaries, for the heat map and per-worker iteration times. May be empty
  // (then those sections are left out).
  const std::vector<WorkerSummary>* workers = nullptr;
  std::string title;  // e.g. the inputs diagnosed
  // When set, the JSON report ends with `skipped_inputs` (what `diagnose --format json` and
  // the server's window reports write; an empty array when nothing was skipped).
  const std::vector<SkippedInput>* skipped_inputs = nullptr;
  // The window's Perfetto / Chrome trace, a file next to the HTML report: linked from it.
  std::string perfetto_file{};
};

struct TextOptions {
  bool color = false;
  int width = 100;
};

// Caps that keep the HTML usable and small (well under 2 MB) for jobs of any size; what is
// left out is said on the page. Rows and bars beyond a cap are chosen as culprits, then
// victims, then the slowest workers, then an even sample over ranks.
struct HtmlOptions {
  size_t max_heatmap_rows = 48;
  size_t max_heatmap_columns = 30;
  size_t max_chart_bars = 1024;
};

// Terminal text: the verdict first, fits one screen (~40 lines of at most options.width
// columns) for a normal diagnosis.
std::string RenderText(const ReportInput& input, const TextOptions& options = {});
// JSON, schema_version 1 (docs/report-json.md).
std::string RenderJson(const ReportInput& input);
// The same bytes written to `out` as they are made: the `functions` table (one entry per
// call path, ~1 MB of keys on a trace with Python stacks) never exists whole in memory.
// False when a write failed.
bool WriteJson(const ReportInput& input, std::FILE* out);
// One self-contained HTML file: inline CSS, SVG and JS, no network references.
std::string RenderHtml(const ReportInput& input, const HtmlOptions& options = {});

}  // namespace perftracker
