// `perftracker diagnose`: offline diagnosis of per-rank trace files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "perftracker/sources/kineto/kineto_importer.h"

namespace CLI {
class App;
}

namespace perftracker {

struct DiagnoseOptions {
  std::vector<std::string> paths;
  std::string format = "text";
  std::string html_path;
  std::string perfetto_path;  // --perfetto: Trace Event Format export of the window
  size_t perfetto_max_events = 2'000'000;  // the export's cap (docs/perfetto-export.md)
  std::optional<int32_t> rank;
  // --ranks-per-host: where the traces name no hosts (or one for all), rank r ran on host
  // "host<r / N>" (consecutive ranks per host, as torchrun places them).
  std::optional<int32_t> ranks_per_host;
  std::string time_unit = "auto";
  double material_share = 0.05;
  int jobs = 0;  // import threads; 0 = one per core
  bool color = false;
};

// Registers the subcommand; `options` must outlive the app.
CLI::App* AddDiagnoseCommand(CLI::App& app, DiagnoseOptions* options);

// Runs the diagnosis and returns the process exit code:
// 0 = diagnosed, every input imported; 1 = diagnosed, some inputs skipped (named on stderr);
// 2 = bad usage or nothing could be diagnosed (one error line on stderr).
int RunDiagnose(const DiagnoseOptions& options);

}  // namespace perftracker
