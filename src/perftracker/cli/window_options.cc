#include "perftracker/cli/window_options.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <CLI/CLI.hpp>

#include "perftracker/core/private_file_mode.h"

namespace perftracker {
void AddWindowOptions(CLI::App* cmd, WindowOptions* o, int max_windows_limit) {
  cmd->add_option("--window-seconds", o->window_seconds, "Length of a profiling window")
      ->check(CLI::Range(0.1, 3600.0))
      ->default_val(o->window_seconds);
  cmd->add_option(
         "--window-min-iterations", o->window_min_iterations,
         "A window lasts --window-seconds and, when some rank has completed fewer than this "
         "many iterations in it by then, until every rank has (at most "
         "--window-max-seconds): a length in seconds alone may hold no whole iteration "
         "of a job with long iterations; 0: exactly --window-seconds")
      ->check(CLI::Range(0, 1000))
      ->default_val(o->window_min_iterations);
  cmd->add_option("--window-max-seconds", o->window_max_seconds,
                  "The longest a window waits for --window-min-iterations")
      ->check(CLI::Range(0.1, 86400.0))
      ->default_val(o->window_max_seconds);
  cmd->add_option("--window-delay-ms", o->window_delay_ms,
                  "A window starts this long after its trigger, at the same wall-clock time on "
                  "every rank")
      ->check(CLI::Range(0, 60000))
      ->default_val(o->window_delay_ms);
  cmd->add_option("--wait-summaries-seconds", o->wait_summaries_seconds,
                  "After a window's end, diagnose without the summaries still missing after "
                  "this long (the report names the ranks)")
      ->check(CLI::Range(0.1, 3600.0))
      ->default_val(o->wait_summaries_seconds);
  cmd->add_option("--cooldown-seconds", o->cooldown_seconds,
                  "After a window's report, ignore a job's triggers for this long")
      ->check(CLI::Range(0.0, 1e6))
      ->default_val(o->cooldown_seconds);
  cmd->add_option("--max-windows", o->max_windows, "At most this many windows per job")
      ->check(CLI::Range(0, max_windows_limit))
      ->default_val(o->max_windows);
}

void AddReportModeOption(CLI::App* cmd) {
  cmd->add_option_function<std::string>(
         "--report-mode",
         [](const std::string& mode) {
           const Status st = SetPrivateFileMode(mode);
           if (!st.ok()) throw CLI::ValidationError(st.message());
         },
         "Mode of the report files and of a new store (default 0600: the owner's only; they "
         "name hosts, paths and code), e.g. 0640 to share them with the directory's group; "
         "directories created for them get x where r is set")
      ->type_name("MODE");
}

int64_t SecondsToNs(double s) { return static_cast<int64_t>(std::llround(s * 1e9)); }

void ApplyWindowOptions(const WindowOptions& o, CoordinatorOptions* co) {
  co->window_ns = SecondsToNs(o.window_seconds);
  co->window_min_iterations = o.window_min_iterations;
  co->window_max_ns = SecondsToNs(std::max(o.window_max_seconds, o.window_seconds));
  co->delay_ns = int64_t{o.window_delay_ms} * 1'000'000;
  co->wait_summaries_ns = SecondsToNs(o.wait_summaries_seconds);
  co->cooldown_ns = SecondsToNs(o.cooldown_seconds);
  co->max_windows = o.max_windows;
}

}  // namespace perftracker
