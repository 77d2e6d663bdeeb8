// IterationDetector — learning the training iteration from markers, and the triggers.
//
// Markers: the agent reports every DataLoader-iterator next() (N) and Optimizer.step() (S).
// A training loop repeats one fixed marker sequence per iteration: "N S" plainly, "N N N N S"
// with 4-step gradient accumulation, "N S S" with two optimizers, "N S N S S" for loops
// that alternate. An iteration always starts with an N and ends with an S, so it can only
// begin at a *boundary*: an N right after an S.
//
// Learning (the seed system's rule): at every boundary the detector looks for the shortest
// sequence h[b..n) of the recent markers h (b itself a boundary, so it starts with N and
// ends with S) such that the last M = learn_repeats x L markers are M identical repetitions
// of it. The first such sequence is the pattern. Shortest first, so "N S" repeated is
// learned as "N S", not "N S N S". The M repetitions just seen become the first M
// iterations (their times are in the history), so the moving window fills at once.
// The history holds at most M x kMaxPatternMarkers + 1 markers; longer patterns are never
// learned (the detector then stays silent, which is the safe failure).
//
// Tracking: once learned, each marker is compared with the next expected one of the
// pattern. A matched repetition completes at its last S but is only *closed* when the next
// repetition's first N arrives: an iteration is [time of its first N, time of the next
// iteration's first N). Consecutive iterations therefore tile time: their durations sum to
// the wall time between the first and the last start, data loading included, and an
// iteration's end is the next one's start. A marker that does not match breaks the current
// repetition: it is abandoned (a disrupted stretch — an evaluation pass, a checkpoint — is
// not an iteration and its time is not counted) and the detector resynchronizes at the next
// boundary. Markers that do not match are counted; the count resets when an iteration
// closes; at K = relearn_after the pattern is forgotten (with the durations and the
// baseline: the loop changed) and learning starts again from the current marker.
//
// Slowdown: durations of the last N = window_iterations iterations sit in a ring with a
// running sum (exact integer ns). Once N exist, every closed iteration yields the N-mean;
// the shortest N-mean since the last Rearm() is the baseline ("recent shortest"). A
// slowdown is pending when the N-mean exceeds (1 + slowdown_ratio) x the baseline;
// CheckSlowdown() reports it, and again every N iterations while it lasts and no Rearm()
// came: the server refuses a trigger while a window is open or just closed (its cooldown),
// and a slowdown that is still there when the server can take a window must reach it.
// Rearm() comes after a window and may come from another thread: it only raises a flag that
// the training thread applies. The baseline then restarts from the mean of the iterations
// the window saw (WindowBegan() marks its start), so only a job slower than during the
// window fires again: a slowdown the window saw does not, one that began late in the window
// (a window another rank's noise opened) does. A window that saw fewer than N / 4
// iterations is too short a sample: the baseline restarts from the current N-mean.
//
// Hang: CheckHang(now) runs on a timer thread. It reads four atomics (learned, the last
// marker's time, the mean and the longest of the last N iterations) and fires when now -
// last marker exceeds max(hang_factor x mean, hang_longest_factor x longest, min_hang_ns),
// once per silence: it remembers the last-marker time it fired for, so a new marker re-arms
// it without OnMarker writing any extra shared state. What keeps it from calling a pause a
// hang: nothing before the iteration is learned (startup, compilation and the first data
// loading are legitimately long, and are not in the mean); any marker ends a silence
// (gradient accumulation's data-loader nexts count); the longest-iteration term gives a
// job whose iterations already vary a lot (a loaded machine) proportionally more time; and
// the absolute floor (30 s by default) lets the pauses of real jobs pass. A pause longer
// than all of these (a long checkpoint save) fires: the server then confirms the hang with
// a second stack sample and retracts it when the job moves again
// (server/window_coordinator.h).
//
// Invariants: OnMarker and CheckSlowdown run on one thread and never allocate (all buffers
// are sized in the constructor); the cross-thread state is only atomics with relaxed order
// (each is a self-contained value; a stale read costs at most one timer period).
#include "perftracker/detect/iteration_detector.h"

#include <algorithm>
#include <cstdio>

#include "perftracker/core/units.h"

namespace perftracker {
namespace {

const char* MarkerName(Marker marker) {
  return marker == Marker::kDataLoaderNext ? "data-loader next" : "optimizer step";
}

DetectorOptions Sanitized(DetectorOptions o) {
  o.learn_repeats = std::max(o.learn_repeats, 1);
  o.relearn_after = std::max(o.relearn_after, 1);
  o.window_iterations = std::max(o.window_iterations, 1);
  o.slowdown_ratio = std::max(o.slowdown_ratio, 0.0);
  o.hang_factor = std::max(o.hang_factor, 0.0);
  o.hang_longest_factor = std::max(o.hang_longest_factor, 0.0);
  o.min_hang_ns = std::max<int64_t>(o.min_hang_ns, 0);
  return o;
}

}  // namespace

IterationDetector::IterationDetector(DetectorOptions options)
    : options_(Sanitized(options)),
      history_(static_cast<size_t>(options_.learn_repeats) * kMaxPatternMarkers + 1),
      history_ns_(history_.size()),
      pattern_(kMaxPatternMarkers),
      durations_(static_cast<size_t>(options_.window_iterations)) {
  SetThresholds(options_);
}

void IterationDetector::SetThresholds(const DetectorOptions& options) {
  const DetectorOptions o = Sanitized(options);
  slowdown_ratio_.store(o.slowdown_ratio, std::memory_order_relaxed);
  hang_factor_.store(o.hang_factor, std::memory_order_relaxed);
  hang_longest_factor_.store(o.hang_longest_factor, std::memory_order_relaxed);
  min_hang_ns_.store(o.min_hang_ns, std::memory_order_relaxed);
}

bool IterationDetector::OnMarker(Marker marker, int64_t time_ns, int64_t* iteration_start_ns,
                                 int64_t* iteration_end_ns) {
  last_marker_ns_.store(time_ns, std::memory_order_relaxed);
  last_marker_.store(static_cast<uint8_t>(marker), std::memory_order_relaxed);
  bool closed = false;
  int64_t start = 0;
  int64_t end = 0;
  if (pattern_len_ == 0) {
    Learn(marker, time_ns, &closed, &start, &end);
  } else {
    Track(marker, time_ns, &closed, &start, &end);
  }
  has_prev_ = true;
  prev_ = marker;
  if (closed) {
    if (iteration_start_ns != nullptr) *iteration_start_ns = start;
    if (iteration_end_ns != nullptr) *iteration_end_ns = end;
  }
  return closed;
}

void IterationDetector::Learn(Marker marker, int64_t time_ns, bool* closed, int64_t* start_ns,
                              int64_t* end_ns) {
  const bool boundary =
      marker == Marker::kDataLoaderNext && has_prev_ && prev_ == Marker::kOptimizerStep;
  const size_t m = static_cast<size_t>(options_.learn_repeats);
  const size_t n = history_size_;
  if (boundary) {
    // Candidate starts b, most recent first (L = n - b grows).
    for (size_t b = n; b-- > 0;) {
      const size_t len = n - b;
      if (len > static_cast<size_t>(kMaxPatternMarkers) || len * m > n) break;
      if (history_[b] != Marker::kDataLoaderNext ||
          (b > 0 && history_[b - 1] != Marker::kOptimizerStep)) {
        continue;
      }
      const size_t first = n - len * m;
      bool repeats = true;
      for (size_t i = first; i < b && repeats; ++i) {
        repeats = history_[i] == history_[b + (i - first) % len];
      }
      if (!repeats) continue;
      // Learned: the pattern is h[b..n); the M repetitions are the first iterations.
      std::copy(history_.begin() + static_cast<std::ptrdiff_t>(b),
                history_.begin() + static_cast<std::ptrdiff_t>(n), pattern_.begin());
      pattern_len_ = len;
      for (size_t r = 0; r < m; ++r) {
        const int64_t rep_start = history_ns_[first + r * len];
        const int64_t rep_end = r + 1 < m ? history_ns_[first + (r + 1) * len] : time_ns;
        RecordIteration(rep_end - rep_start);
        *start_ns = rep_start;
        *end_ns = rep_end;
      }
      *closed = true;
      history_size_ = 0;
      iteration_start_ns_ = time_ns;
      pos_ = 1;  // a pattern has at least two markers: it starts with N and ends with S
      in_sync_ = true;
      complete_ = false;
      unmatched_ = 0;
      learned_.store(true, std::memory_order_relaxed);
      return;
    }
  }
  if (history_size_ == history_.size()) {
    // Full: keep the newer half (amortized O(1) per marker, no allocation).
    const size_t keep = history_.size() / 2;
    std::copy(history_.end() - static_cast<std::ptrdiff_t>(keep), history_.end(), history_.begin());
    std::copy(history_ns_.end() - static_cast<std::ptrdiff_t>(keep), history_ns_.end(),
              history_ns_.begin());
    history_size_ = keep;
  }
  history_[history_size_] = marker;
  history_ns_[history_size_] = time_ns;
  ++history_size_;
}

void IterationDetector::Track(Marker marker, int64_t time_ns, bool* closed, int64_t* start_ns,
                              int64_t* end_ns) {
  if (in_sync_) {
    if (marker == pattern_[pos_]) {
      if (pos_ == 0) {
        // Only reachable with complete_ set: the next repetition starts, the last closes.
        *closed = true;
        *start_ns = iteration_start_ns_;
        *end_ns = time_ns;
        RecordIteration(time_ns - iteration_start_ns_);
        unmatched_ = 0;
        iteration_start_ns_ = time_ns;
        complete_ = false;
      }
      pos_ = pos_ + 1 == pattern_len_ ? 0 : pos_ + 1;
      if (pos_ == 0) complete_ = true;
      return;
    }
    in_sync_ = false;
    complete_ = false;
    ++unmatched_;
  } else {
    // Every marker spent out of sync counts, except the one that resynchronizes.
    const bool boundary = marker == pattern_[0] && has_prev_ && prev_ == Marker::kOptimizerStep;
    if (!boundary) ++unmatched_;
  }
  if (unmatched_ >= options_.relearn_after) {
    Unlearn();
    Learn(marker, time_ns, closed, start_ns, end_ns);
    return;
  }
  // Resynchronize at a boundary (possibly the marker that just broke the repetition).
  if (marker == pattern_[0] && has_prev_ && prev_ == Marker::kOptimizerStep) {
    in_sync_ = true;
    iteration_start_ns_ = time_ns;
    pos_ = 1;
    complete_ = false;
  }
}

void IterationDetector::Unlearn() {
  pattern_len_ = 0;
  pos_ = 0;
  in_sync_ = false;
  complete_ = false;
  unmatched_ = 0;
  history_size_ = 0;
  ring_next_ = 0;
  ring_count_ = 0;
  ring_sum_ = 0;
  shortest_mean_ns_ = 0;
  last_mean_ns_ = 0;
  slowdown_fired_ = false;
  learned_.store(false, std::memory_order_relaxed);
  mean_ns_.store(0, std::memory_order_relaxed);
  longest_ns_.store(0, std::memory_order_relaxed);
}

void IterationDetector::RecordIteration(int64_t duration_ns) {
  duration_ns = std::max<int64_t>(duration_ns, 0);  // a clock step back is not negative work
  if (window_began_.load(std::memory_order_relaxed) &&
      window_began_.exchange(false, std::memory_order_relaxed)) {
    in_window_ = true;
    window_sum_ns_ = 0;
    window_count_ = 0;
  }
  if (in_window_) {
    window_sum_ns_ += duration_ns;
    ++window_count_;
  }
  const size_t window = durations_.size();
  if (ring_count_ == window) {
    ring_sum_ -= durations_[ring_next_];
  } else {
    ++ring_count_;
  }
  durations_[ring_next_] = duration_ns;
  ring_sum_ += duration_ns;
  ring_next_ = ring_next_ + 1 == window ? 0 : ring_next_ + 1;
  mean_ns_.store(ring_sum_ / static_cast<int64_t>(ring_count_), std::memory_order_relaxed);
  // The longest of the ring: a scan of N values per iteration (N = 50: tens of ns).
  int64_t longest = 0;
  for (size_t i = 0; i < ring_count_; ++i) longest = std::max(longest, durations_[i]);
  longest_ns_.store(longest, std::memory_order_relaxed);
  iterations_.fetch_add(1, std::memory_order_relaxed);
  if (ring_count_ == window) {
    last_mean_ns_ = static_cast<double>(ring_sum_) / static_cast<double>(window);
    ApplyPendingRearm();
    if (shortest_mean_ns_ == 0 || last_mean_ns_ < shortest_mean_ns_) {
      shortest_mean_ns_ = last_mean_ns_;
    }
  }
}

void IterationDetector::ApplyPendingRearm() {
  if (!rearm_requested_.exchange(false, std::memory_order_relaxed)) return;
  slowdown_fired_ = false;
  const int64_t enough = std::max<int64_t>(1, options_.window_iterations / 4);
  if (in_window_ && window_count_ >= enough) {
    // The mean of what the window saw.
    shortest_mean_ns_ = static_cast<double>(window_sum_ns_) / static_cast<double>(window_count_);
  } else {
    // The current window (if it is full).
    shortest_mean_ns_ = ring_count_ == durations_.size() ? last_mean_ns_ : 0;
  }
  in_window_ = false;
}

std::optional<Trigger> IterationDetector::CheckSlowdown() {
  ApplyPendingRearm();
  if (shortest_mean_ns_ <= 0) return std::nullopt;
  const uint64_t iterations = iterations_.load(std::memory_order_relaxed);
  // Fired already: again only after N more iterations (the server refused it, or has not
  // answered yet).
  if (slowdown_fired_ &&
      iterations - fired_at_iteration_ < static_cast<uint64_t>(options_.window_iterations)) {
    return std::nullopt;
  }
  if (last_mean_ns_ <=
      (1.0 + slowdown_ratio_.load(std::memory_order_relaxed)) * shortest_mean_ns_) {
    return std::nullopt;
  }
  const bool again = slowdown_fired_;
  slowdown_fired_ = true;
  fired_at_iteration_ = iterations;
  char buf[200];
  std::snprintf(buf, sizeof(buf), "mean of last %d iterations %s is %s above the shortest %s%s",
                options_.window_iterations, FormatDuration(last_mean_ns_).c_str(),
                FormatShare(last_mean_ns_ / shortest_mean_ns_ - 1.0).c_str(),
                FormatDuration(shortest_mean_ns_).c_str(),
                again ? " (still slow: fired again)" : "");
  return Trigger{WindowReason::kSlowdown, buf};
}

int64_t IterationDetector::HangLimitNs() const {
  if (!learned_.load(std::memory_order_relaxed)) return 0;
  const int64_t mean = mean_ns_.load(std::memory_order_relaxed);
  if (mean <= 0) return 0;
  const double longest = static_cast<double>(longest_ns_.load(std::memory_order_relaxed));
  return static_cast<int64_t>(
      std::max({hang_factor_.load(std::memory_order_relaxed) * static_cast<double>(mean),
                hang_longest_factor_.load(std::memory_order_relaxed) * longest,
                static_cast<double>(min_hang_ns_.load(std::memory_order_relaxed))}));
}

int64_t IterationDetector::HangDueNs() const {
  const int64_t limit = HangLimitNs();
  if (limit <= 0) return INT64_MAX;
  const int64_t last = last_marker_ns_.load(std::memory_order_relaxed);
  if (hang_reported_for_ns_.load(std::memory_order_relaxed) == last) return INT64_MAX;
  return last + limit + 1;
}

std::optional<Trigger> IterationDetector::CheckHang(int64_t now_ns) {
  const int64_t limit = HangLimitNs();
  if (limit <= 0) return std::nullopt;
  const int64_t last = last_marker_ns_.load(std::memory_order_relaxed);
  const int64_t mean = mean_ns_.load(std::memory_order_relaxed);
  const int64_t silence = now_ns - last;
  if (silence <= limit) return std::nullopt;
  if (hang_reported_for_ns_.exchange(last, std::memory_order_relaxed) == last) {
    return std::nullopt;
  }
  const auto last_kind = static_cast<Marker>(last_marker_.load(std::memory_order_relaxed));
  char buf[200];
  std::snprintf(buf, sizeof(buf),
                "no progress for %s (%.1f x the mean iteration %s); last marker: %s",
                FormatDuration(static_cast<double>(silence)).c_str(),
                static_cast<double>(silence) / static_cast<double>(mean),
                FormatDuration(static_cast<double>(mean)).c_str(), MarkerName(last_kind));
  return Trigger{WindowReason::kHang, buf};
}

void IterationDetector::Rearm() { rearm_requested_.store(true, std::memory_order_relaxed); }

void IterationDetector::WindowBegan() { window_began_.store(true, std::memory_order_relaxed); }

bool IterationDetector::learned() const { return learned_.load(std::memory_order_relaxed); }

int64_t IterationDetector::mean_iteration_ns() const {
  return learned_.load(std::memory_order_relaxed) ? mean_ns_.load(std::memory_order_relaxed) : 0;
}

uint64_t IterationDetector::iterations() const {
  return iterations_.load(std::memory_order_relaxed);
}

int64_t IterationDetector::last_marker_ns() const {
  return last_marker_ns_.load(std::memory_order_relaxed);
}

}  // namespace perftracker
