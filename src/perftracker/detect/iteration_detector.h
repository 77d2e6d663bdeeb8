// IterationDetector: the always-on, near-zero-cost part of the agent. Learns what one
// training iteration is from a stream of markers (data-loader next(), optimizer step()),
// keeps per-iteration times and fires a trigger on a slowdown or a hang.
// (Algorithm and invariants: see iteration_detector.cc's header comment.)
//
// Threading: OnMarker() and CheckSlowdown() are called by the training thread (hot path:
// no allocation, no locks, no syscalls); CheckHang() by one background thread; Rearm() and
// the accessors from any thread. They share only atomics.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "perftracker/core/window_reason.h"

namespace perftracker {

struct DetectorOptions {
  int learn_repeats = 10;        // M: identical marker sequences needed to learn the iteration
  int relearn_after = 200;       // K: unmatched markers before learning starts again
  int window_iterations = 50;    // N: iterations in the moving mean
  double slowdown_ratio = 0.05;  // fire when mean(last N) > (1 + this) x the recent shortest mean
  // Hang: no marker for max(hang_factor x the mean iteration, hang_longest_factor x the
  // longest of the last N iterations, min_hang_ns). 4 (not 5) so that the report, with every
  // rank's stacks, is written within 5 x the mean iteration.
  double hang_factor = 4.0;
  double hang_longest_factor = 1.5;  // a job whose iterations vary a lot is given more time
  // Never call a hang before this much silence. Real jobs pause for seconds without a
  // marker (a checkpoint save, an evaluation without a DataLoader, torch.compile
  // recompiling, a slow shared filesystem), and NCCL's own watchdog waits 10 minutes
  // (TORCH_NCCL heartbeat: 8). 30 s lets such pauses pass and still reports a real hang 20x
  // sooner than NCCL; a pause that is longer is retracted once the job moves again. (It was
  // 0.5 s: on a loaded machine a scheduler stall of 4 ranks on 2 cores was called a hang.)
  int64_t min_hang_ns = 30'000'000'000;
};

enum class Marker : uint8_t { kDataLoaderNext = 0, kOptimizerStep = 1 };

struct Trigger {
  WindowReason reason = WindowReason::kSlowdown;  // kSlowdown or kHang
  std::string detail;  // "mean of last 50 iterations 131 ms is 12% above the shortest 117 ms"
};

class IterationDetector {
 public:
  explicit IterationDetector(DetectorOptions options = {});

  // Feeds one marker. Returns true when it closes an iteration; then *iteration_start_ns and
  // *iteration_end_ns hold its bounds.
  bool OnMarker(Marker marker, int64_t time_ns, int64_t* iteration_start_ns,
                int64_t* iteration_end_ns);
  // After an iteration closed: a slowdown trigger. While the slowdown lasts and no Rearm()
  // came, it fires again every window_iterations iterations (the server may have refused the
  // first: a window was open or had just closed); once the mean is back under the bar it
  // stays silent.
  std::optional<Trigger> CheckSlowdown();
  // From a timer: a hang trigger when no marker arrived for HangLimitNs(), at most once
  // until a marker arrives again.
  std::optional<Trigger> CheckHang(int64_t now_ns);
  // The silence that makes a hang now (0 until learned), and the time at which the current
  // silence becomes one (INT64_MAX until learned or once reported): the timer sleeps until
  // then, so a hang is called when it is due, not up to a timer period later.
  int64_t HangLimitNs() const;
  int64_t HangDueNs() const;
  // A window began recording (any thread): the iterations from now until Rearm() are the
  // ones the window saw.
  void WindowBegan();
  // After a window has been taken: the baseline restarts from the mean of the iterations the
  // window saw (at least window_iterations / 4 of them; else from the current moving mean),
  // so a job that is slower after the window than during it (a fault that began late in the
  // window, which the window hardly saw) fires again, and a slowdown the window saw does not.
  void Rearm();
  // Any thread: new trigger thresholds (slowdown_ratio, hang_factor, hang_longest_factor,
  // min_hang_ns; the other options size the detector and cannot change).
  void SetThresholds(const DetectorOptions& options);

  bool learned() const;
  int64_t mean_iteration_ns() const;  // 0 until learned
  uint64_t iterations() const;
  int64_t last_marker_ns() const;

 private:
  // Longest learnable iteration, in markers (e.g. 32 micro-batches of gradient accumulation
  // plus a few optimizer steps fit comfortably).
  static constexpr int kMaxPatternMarkers = 64;

  void Learn(Marker marker, int64_t time_ns, bool* closed, int64_t* start_ns, int64_t* end_ns);
  void Track(Marker marker, int64_t time_ns, bool* closed, int64_t* start_ns, int64_t* end_ns);
  void Unlearn();
  void RecordIteration(int64_t duration_ns);
  void ApplyPendingRearm();

  DetectorOptions options_;

  // --- Training thread only (OnMarker, CheckSlowdown). All buffers are sized in the
  // constructor and never grow: OnMarker never allocates.
  // Learning: the recent markers and their times (oldest first), at most
  // learn_repeats x kMaxPatternMarkers + 1 of them.
  std::vector<Marker> history_;
  std::vector<int64_t> history_ns_;
  size_t history_size_ = 0;
  bool has_prev_ = false;
  Marker prev_ = Marker::kDataLoaderNext;
  // Tracking: the learned pattern (starts with a next, ends with a step).
  std::vector<Marker> pattern_;
  size_t pattern_len_ = 0;
  size_t pos_ = 0;         // index in pattern_ of the next expected marker
  bool in_sync_ = false;   // the markers since iteration_start_ns_ matched the pattern
  bool complete_ = false;  // ... and all of it: the next pattern start closes the iteration
  int64_t iteration_start_ns_ = 0;
  int unmatched_ = 0;  // markers that did not match since the last closed iteration
  // Durations of the last window_iterations iterations (a ring) and their sum.
  std::vector<int64_t> durations_;
  size_t ring_next_ = 0;
  size_t ring_count_ = 0;
  int64_t ring_sum_ = 0;
  double shortest_mean_ns_ = 0;  // shortest full-window mean since the last Rearm (0 = none)
  double last_mean_ns_ = 0;      // the latest full-window mean
  bool slowdown_fired_ = false;
  uint64_t fired_at_iteration_ = 0;  // iterations_ when the last slowdown trigger fired
  // The iterations closed since WindowBegan() (their sum and count), for Rearm().
  bool in_window_ = false;
  int64_t window_sum_ns_ = 0;
  int64_t window_count_ = 0;

  // --- Shared with the timer / control threads.
  // The thresholds SetThresholds() may change (options_ keeps the start values).
  std::atomic<double> slowdown_ratio_{0};
  std::atomic<double> hang_factor_{0};
  std::atomic<double> hang_longest_factor_{0};
  std::atomic<int64_t> min_hang_ns_{0};
  std::atomic<bool> rearm_requested_{false};
  std::atomic<bool> window_began_{false};
  std::atomic<int64_t> last_marker_ns_{0};
  std::atomic<uint8_t> last_marker_{0};
  std::atomic<int64_t> mean_ns_{0};
  std::atomic<int64_t> longest_ns_{0};  // the longest of the last N iterations
  std::atomic<uint64_t> iterations_{0};
  std::atomic<bool> learned_{false};
  // The last_marker_ns_ a hang was reported for (CheckHang fires once per silence).
  std::atomic<int64_t> hang_reported_for_ns_{INT64_MIN};
};

}  // namespace perftracker
