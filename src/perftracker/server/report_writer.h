// ReportWriter: writes one window's report files into the report directory:
//   window-<id>-<reason>.json   the schema of `perftracker diagnose --format json`
//                               (report/RenderJson with diagnose's `skipped_inputs`, empty)
//   window-<id>-<reason>.html   report/RenderHtml
//   window-<id>-stacks.txt      the per-rank Python stacks (hang windows only)
//   window-<id>-vs-<base>.json  what changed since the job's baseline window <base>
//   window-<id>-vs-<base>.html  (`perftracker compare --format json` / --html, docs/compare.md)
//   window-<id>.perfetto.json   the window's timeline (WindowCoordinator, --perfetto)
// Each file is written to a temporary name and renamed, so a reader never sees half a file.
// These names are made and read here only (the Python tools that read a report directory:
// scripts/report_files.py, the same rule).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "perftracker/compare/comparison.h"
#include "perftracker/core/status.h"
#include "perftracker/report/report.h"
#include "perftracker/wire/coordinator_link.h"

namespace perftracker {

struct WrittenReport {
  std::string json;  // the JSON file's contents
  std::string json_path;
  std::string html_path;
  std::string stacks_path;
};

// The file names, without the directory: "window-3-slowdown" (+ ".json" / ".html"),
// "window-3-vs-1" (+ ".json" / ".html"), "window-3.perfetto.json", "window-3-stacks.txt".
std::string WindowReportStem(uint64_t window, WindowReason reason);
std::string ComparisonReportStem(uint64_t window, uint64_t baseline);
std::string TimelineFileName(uint64_t window);
std::string StacksFileName(uint64_t window);

// A window report's JSON file, "window-<id>-<reason>.json": its window and reason. Every
// other file of a report directory (the timeline, a comparison with the baseline, the
// stacks, the HTML) is nullopt.
struct WindowReportFile {
  uint64_t window = 0;
  WindowReason reason = WindowReason::kManual;
};
std::optional<WindowReportFile> ParseWindowReportFileName(std::string_view file_name);

// Creates `dir` (and parents) if needed; an error names the directory.
Status EnsureReportDir(const std::string& dir);

// The comparison of window `window` with the baseline window `baseline`; returns the JSON
// file's path.
StatusOr<std::string> WriteComparisonReport(const std::string& dir, uint64_t window,
                                            uint64_t baseline,
                                            const compare::Comparison& comparison);

StatusOr<WrittenReport> WriteWindowReport(const std::string& dir, uint64_t window,
                                          WindowReason reason, const ReportInput& input,
                                          const std::map<int32_t, std::string>& stacks);

}  // namespace perftracker
