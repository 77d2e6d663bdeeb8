// The profiling-window options that `perftracker run` (its embedded server) and
// `perftracker server` share, declared once: the same flag names, ranges, defaults and help
// on both commands, and one mapping onto the coordinator's CoordinatorOptions.
#pragma once

#include <cstdint>

#include "perftracker/server/window_coordinator.h"

namespace CLI {
class App;
}

namespace perftracker {

struct WindowOptions {
  double window_seconds = 20;
  int window_min_iterations = 3;
  double window_max_seconds = 120;
  int window_delay_ms = 300;
  double wait_summaries_seconds = 10;
  double cooldown_seconds = 30;
  int max_windows = 3;  // the command's default: set it before AddWindowOptions
};

// Registers --window-seconds, --window-min-iterations, --window-max-seconds,
// --window-delay-ms, --wait-summaries-seconds, --cooldown-seconds and --max-windows on
// `cmd`; --max-windows takes at most `max_windows_limit`. `options` must outlive the app.
void AddWindowOptions(CLI::App* cmd, WindowOptions* options, int max_windows_limit);

// Registers --report-mode (the mode of report files and of a new store).
void AddReportModeOption(CLI::App* cmd);

// Seconds given on the command line as nanoseconds, rounded.
int64_t SecondsToNs(double seconds);

// Sets the window fields of `co` from `options` (a window lasts at least --window-seconds
// even when --window-max-seconds is shorter).
void ApplyWindowOptions(const WindowOptions& options, CoordinatorOptions* co);

}  // namespace perftracker
