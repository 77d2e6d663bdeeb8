// Reports of a Diagnosis: terminal text (default), JSON (stable schema, docs/report-json.md),
// and one self-contained HTML file.
#pragma once

#include <string>
#include <vector>

#include "perftracker/localize/diagnosis.h"
#include "perftracker/summary/worker_summary.h"

namespace perftracker {

struct ReportInput {
  const Diagnosis* diagnosis = nullptr;
  // The workers' summaries, for the heat map and per-worker iteration times. May be empty
  // (then those sections are left out).
  const std::vector<WorkerSummary>* workers = nullptr;
  std::string title;  // e.g. the inputs diagnosed
};

struct TextOptions {
  bool color = false;
  int width = 100;
};

std::string RenderText(const ReportInput& input, const TextOptions& options = {});
std::string RenderJson(const ReportInput& input);
std::string RenderHtml(const ReportInput& input);

}  // namespace perftracker
