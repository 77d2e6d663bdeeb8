// IterationDetector: the always-on, near-zero-cost part of the agent. Learns what one
// training iteration is from a stream of markers (data-loader next(), optimizer step()),
// keeps per-iteration times and fires a trigger on a slowdown or a hang.
// (Algorithm and invariants: see iteration_detector.cc's header comment.)
//
// Threading: OnMarker() is called by the training thread (hot path: no allocation after
// learning, no locks, no syscalls); CheckHang() by one background thread. They share only
// atomics.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace perftracker {

struct DetectorOptions {
  int learn_repeats = 10;       // M: identical marker sequences needed to learn the iteration
  int relearn_after = 200;      // K: unmatched markers before learning starts again
  int window_iterations = 50;   // N: iterations in the moving mean
  double slowdown_ratio = 0.05; // fire when mean(last N) > (1 + this) x the recent shortest mean
  double hang_factor = 5.0;     // fire when nothing happens for this x the mean iteration
  int64_t min_hang_ns = 2'000'000'000;  // never call a hang before this much silence
};

enum class Marker : uint8_t { kDataLoaderNext = 0, kOptimizerStep = 1 };

enum class TriggerReason : uint8_t { kSlowdown = 0, kHang = 1 };

struct Trigger {
  TriggerReason reason = TriggerReason::kSlowdown;
  std::string detail;  // "mean of last 50 iterations 131 ms is 12% above the shortest 117 ms"
};

class IterationDetector {
 public:
  explicit IterationDetector(DetectorOptions options = {});

  // Feeds one marker. Returns true when it closes an iteration; then *iteration_start_ns and
  // *iteration_end_ns hold its bounds.
  bool OnMarker(Marker marker, int64_t time_ns, int64_t* iteration_start_ns,
                int64_t* iteration_end_ns);
  // After an iteration closed: a slowdown trigger, at most once until Rearm().
  std::optional<Trigger> CheckSlowdown();
  // From a timer: a hang trigger when no marker arrived for hang_factor x the mean
  // iteration (and at least min_hang_ns), at most once until a marker arrives again.
  std::optional<Trigger> CheckHang(int64_t now_ns);
  // After a window has been taken: forget the baseline so the next trigger needs new evidence.
  void Rearm();

  bool learned() const;
  int64_t mean_iteration_ns() const;  // 0 until learned
  uint64_t iterations() const;
  int64_t last_marker_ns() const;

 private:
  DetectorOptions options_;
  // ... implementation state (owned by the detect helper)
  std::vector<Marker> pattern_;
  std::vector<Marker> candidate_;
  std::vector<int64_t> durations_;  // ring of the last window_iterations durations
  std::atomic<int64_t> last_marker_ns_{0};
  std::atomic<int64_t> mean_ns_{0};
  std::atomic<uint64_t> iterations_{0};
  std::atomic<bool> hang_fired_{false};
  std::atomic<bool> learned_{false};
};

}  // namespace perftracker
