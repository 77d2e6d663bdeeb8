#include "perftracker/detect/iteration_detector.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string_view>
#include <thread>
#include <vector>

// Counts heap allocations while enabled (to check that OnMarker never allocates). The
// replacement pair is malloc / free on both sides; GCC cannot see that through the inlined
// `new TestClass` of gtest and warns about a mismatch, hence the suppression.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
std::atomic<bool> g_count_allocations{false};
std::atomic<uint64_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  if (g_count_allocations.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace perftracker {
namespace {

constexpr int64_t kMs = 1'000'000;

// Drives a detector with a fake clock: each iteration's markers are spread evenly over its
// duration, the iteration starting at its first marker.
class Driver {
 public:
  explicit Driver(DetectorOptions options = {}) : detector_(options) {}

  // Feeds `markers` ("N" = data-loader next, "S" = optimizer step) spread over duration_ns.
  // Returns how many iterations closed.
  int Iteration(std::string_view markers, int64_t duration_ns) {
    int closed = 0;
    const int64_t step = duration_ns / static_cast<int64_t>(markers.size());
    for (char c : markers) {
      int64_t start = 0;
      int64_t end = 0;
      if (detector_.OnMarker(c == 'N' ? Marker::kDataLoaderNext : Marker::kOptimizerStep, now_,
                             &start, &end)) {
        ++closed;
        closed_.push_back({start, end});
      }
      now_ += step;
    }
    now_ += duration_ns - step * static_cast<int64_t>(markers.size());
    return closed;
  }
  int Repeat(std::string_view markers, int64_t duration_ns, int times) {
    int closed = 0;
    for (int i = 0; i < times; ++i) closed += Iteration(markers, duration_ns);
    return closed;
  }

  IterationDetector& detector() { return detector_; }
  int64_t now() const { return now_; }
  struct Span {
    int64_t start;
    int64_t end;
  };
  const std::vector<Span>& closed() const { return closed_; }

 private:
  IterationDetector detector_;
  int64_t now_ = 1'000'000'000'000;
  std::vector<Span> closed_;
};

DetectorOptions Options(int m = 10, int k = 200, int n = 50) {
  DetectorOptions o;
  o.learn_repeats = m;
  o.relearn_after = k;
  o.window_iterations = n;
  return o;
}

TEST(IterationDetectorTest, LearnsAfterMIdenticalRepeats) {
  Driver d(Options(10));
  // The 10th repetition completes only when the 11th repetition's first next arrives.
  EXPECT_EQ(d.Repeat("NS", 100 * kMs, 10), 0);
  EXPECT_FALSE(d.detector().learned());
  EXPECT_EQ(d.detector().mean_iteration_ns(), 0);
  EXPECT_EQ(d.Iteration("NS", 100 * kMs), 1);  // learned at its first marker
  EXPECT_TRUE(d.detector().learned());
  // The 10 repetitions seen while learning are the first iterations.
  EXPECT_EQ(d.detector().iterations(), 10u);
  EXPECT_EQ(d.detector().mean_iteration_ns(), 100 * kMs);
  EXPECT_EQ(d.Repeat("NS", 100 * kMs, 5), 5);
  EXPECT_EQ(d.detector().iterations(), 15u);
}

TEST(IterationDetectorTest, NotLearnedWithFewerRepeats) {
  Driver d(Options(10));
  d.Repeat("NS", 100 * kMs, 9);
  d.Iteration("N", 10 * kMs);
  EXPECT_FALSE(d.detector().learned());
}

TEST(IterationDetectorTest, IterationsTileTime) {
  Driver d(Options(3));
  d.Repeat("NS", 80 * kMs, 3);
  const int64_t learned_from = d.now() - 3 * 80 * kMs;
  d.Iteration("NS", 120 * kMs);  // learned here
  d.Repeat("NS", 90 * kMs, 6);
  d.Iteration("N", 1 * kMs);  // closes the last
  ASSERT_GE(d.closed().size(), 2u);
  EXPECT_EQ(d.closed().front().start, learned_from + 2 * 80 * kMs);
  int64_t sum = 0;
  for (size_t i = 0; i < d.closed().size(); ++i) {
    if (i > 0) {
      EXPECT_EQ(d.closed()[i].start, d.closed()[i - 1].end) << i;
    }
    sum += d.closed()[i].end - d.closed()[i].start;
  }
  // The first reported span is the last learning repetition (the others came with it).
  EXPECT_EQ(sum, 80 * kMs + 120 * kMs + 6 * 90 * kMs);
  EXPECT_EQ(d.detector().iterations(), 3u + 1 + 6);
}

TEST(IterationDetectorTest, GradientAccumulationIsOneIteration) {
  Driver d(Options(5));
  d.Repeat("NNNNS", 200 * kMs, 6);
  EXPECT_TRUE(d.detector().learned());
  EXPECT_EQ(d.detector().mean_iteration_ns(), 200 * kMs);
  const uint64_t before = d.detector().iterations();
  EXPECT_EQ(d.Repeat("NNNNS", 200 * kMs, 4), 4);  // one per 4 micro-batches, not per next
  EXPECT_EQ(d.detector().iterations(), before + 4);
}

TEST(IterationDetectorTest, AlternatingPatternLearnsTheFullPeriod) {
  // N S alternating with N S S (e.g. a discriminator step every other iteration): the
  // period is "N S N S S", not either half.
  Driver d(Options(4));
  for (int i = 0; i < 6; ++i) d.Iteration("NSNSS", 100 * kMs);
  ASSERT_TRUE(d.detector().learned());
  EXPECT_EQ(d.detector().mean_iteration_ns(), 100 * kMs);
  const uint64_t before = d.detector().iterations();
  d.Repeat("NSNSS", 100 * kMs, 3);
  EXPECT_EQ(d.detector().iterations(), before + 3);
}

TEST(IterationDetectorTest, ShortestPatternWins) {
  Driver d(Options(2));
  d.Repeat("NS", 10 * kMs, 8);
  EXPECT_TRUE(d.detector().learned());
  EXPECT_EQ(d.detector().mean_iteration_ns(), 10 * kMs);  // "N S", not "N S N S"
}

TEST(IterationDetectorTest, ADisruptionIsNotAnIterationAndResyncs) {
  Driver d(Options(3, 200, 4));
  d.Repeat("NS", 100 * kMs, 10);
  const uint64_t before = d.detector().iterations();
  // An evaluation pass: nexts without a step.
  d.Iteration("NNNNNNNN", 800 * kMs);
  d.Repeat("NS", 100 * kMs, 5);
  EXPECT_TRUE(d.detector().learned());
  // The iteration broken by the eval pass and the pass itself are not counted; the one that
  // resyncs at the first boundary is closed by the next one.
  EXPECT_EQ(d.detector().iterations(), before + 4);
  EXPECT_EQ(d.detector().mean_iteration_ns(), 100 * kMs);
}

TEST(IterationDetectorTest, RelearnsAfterKUnmatchedMarkers) {
  Driver d(Options(3, 20, 5));
  d.Repeat("NS", 100 * kMs, 10);
  ASSERT_TRUE(d.detector().learned());
  // The loop changes to 2-step accumulation: one next per iteration does not match.
  int unlearned_after = -1;
  for (int i = 0; i < 40 && unlearned_after < 0; ++i) {
    d.Iteration("NNS", 150 * kMs);
    if (!d.detector().learned()) unlearned_after = i + 1;
  }
  ASSERT_GT(unlearned_after, 0) << "never relearned";
  EXPECT_GE(unlearned_after, 6);  // needs K = 20 unmatched markers, not one
  d.Repeat("NNS", 150 * kMs, 4);
  EXPECT_TRUE(d.detector().learned());
  EXPECT_EQ(d.detector().mean_iteration_ns(), 150 * kMs);
}

TEST(IterationDetectorTest, ExtraStepsEveryIterationRelearn) {
  // Old pattern "N S", new "N S S": each repetition completes, then an extra step breaks it.
  Driver d(Options(3, 10, 5));
  d.Repeat("NS", 100 * kMs, 10);
  d.Repeat("NSS", 90 * kMs, 30);
  EXPECT_TRUE(d.detector().learned());
  EXPECT_EQ(d.detector().mean_iteration_ns(), 90 * kMs);
}

TEST(IterationDetectorTest, SlowdownFiresAbove5PercentNotAt4) {
  for (const auto& [slow_ms, fires] : {std::pair{104, false}, std::pair{106, true}}) {
    Driver d(Options(10, 200, 50));
    d.Repeat("NS", 100 * kMs, 80);
    EXPECT_FALSE(d.detector().CheckSlowdown().has_value());
    std::optional<Trigger> trigger;
    for (int i = 0; i < 100 && !trigger; ++i) {
      d.Iteration("NS", slow_ms * kMs);
      trigger = d.detector().CheckSlowdown();
    }
    EXPECT_EQ(trigger.has_value(), fires) << slow_ms << " ms";
    if (trigger) {
      EXPECT_EQ(trigger->reason, WindowReason::kSlowdown);
      EXPECT_NE(trigger->detail.find("above the shortest 100 ms"), std::string::npos)
          << trigger->detail;
    }
  }
}

TEST(IterationDetectorTest, SlowdownNeedsAFullWindow) {
  Driver d(Options(2, 200, 50));
  d.Repeat("NS", 100 * kMs, 20);
  d.Repeat("NS", 200 * kMs, 20);
  EXPECT_FALSE(d.detector().CheckSlowdown().has_value());  // 41 < 50 iterations
}

TEST(IterationDetectorTest, SlowdownFiresAgainEveryNIterationsUntilRearm) {
  Driver d(Options(5, 200, 10));
  d.Repeat("NS", 100 * kMs, 20);
  d.Repeat("NS", 150 * kMs, 10);
  ASSERT_TRUE(d.detector().CheckSlowdown().has_value());
  // Not again before N (10) more iterations.
  for (int i = 0; i < 9; ++i) {
    d.Iteration("NS", 200 * kMs);
    EXPECT_FALSE(d.detector().CheckSlowdown().has_value()) << i;
  }
  d.Iteration("NS", 200 * kMs);
  // Still slow N iterations later and no window was taken (the server refused the trigger):
  // it fires again.
  const auto again = d.detector().CheckSlowdown();
  ASSERT_TRUE(again.has_value());
  EXPECT_NE(again->detail.find("fired again"), std::string::npos) << again->detail;
  d.detector().Rearm();
  EXPECT_FALSE(d.detector().CheckSlowdown().has_value());  // baseline is now the slow mean
  d.Repeat("NS", 200 * kMs, 10);
  EXPECT_FALSE(d.detector().CheckSlowdown().has_value());
  d.Repeat("NS", 250 * kMs, 10);
  const auto trigger = d.detector().CheckSlowdown();
  ASSERT_TRUE(trigger.has_value());
  // The baseline after Rearm: the window then held 9 x 200 ms and 1 x 150 ms (the last
  // 200 ms iteration closes only at the next iteration's first marker).
  EXPECT_NE(trigger->detail.find("shortest 195 ms"), std::string::npos) << trigger->detail;
}

TEST(IterationDetectorTest, ASlowdownThatClearedDoesNotFireAgain) {
  // A trigger the server refused (a window was open) whose slowdown passed: nothing more.
  Driver d(Options(5, 200, 10));
  d.Repeat("NS", 100 * kMs, 20);
  d.Repeat("NS", 150 * kMs, 10);
  ASSERT_TRUE(d.detector().CheckSlowdown().has_value());
  for (int i = 0; i < 40; ++i) {
    d.Iteration("NS", 100 * kMs);
    EXPECT_FALSE(d.detector().CheckSlowdown().has_value()) << i;
  }
}

TEST(IterationDetectorTest, ASlowdownThatBeganLateInAWindowFiresAfterIt) {
  // Another rank's noise opened a window; this rank's fault began in its second half, more
  // than N iterations before its end: the moving mean is all slow iterations when the
  // window closes, and the window saw less than half of the fault. After the window the
  // job is slower than during it.
  DetectorOptions o = Options(5, 200, 20);
  o.slowdown_ratio = 0.15;
  Driver d(o);
  d.Repeat("NS", 100 * kMs, 40);
  d.detector().WindowBegan();
  d.Repeat("NS", 100 * kMs, 35);
  d.Repeat("NS", 150 * kMs, 25);
  d.detector().Rearm();
  d.Repeat("NS", 150 * kMs, 20);
  const auto trigger = d.detector().CheckSlowdown();
  ASSERT_TRUE(trigger.has_value());
  // The baseline is what the window saw: 36 x 100 ms and 25 x 150 ms (iterations close at
  // the next one's first marker): 120.5 ms, three significant digits: "120 ms".
  EXPECT_NE(trigger->detail.find("shortest 120 ms"), std::string::npos) << trigger->detail;
}

TEST(IterationDetectorTest, ASlowdownTheWindowSawDoesNotFireAgain) {
  // The window was taken for this slowdown (the moving mean was still rising when it
  // fired): after the window the job is as slow as during it, nothing new.
  Driver d(Options(5, 200, 20));
  d.Repeat("NS", 100 * kMs, 40);
  d.Repeat("NS", 150 * kMs, 8);
  ASSERT_TRUE(d.detector().CheckSlowdown().has_value());
  d.detector().WindowBegan();
  d.Repeat("NS", 150 * kMs, 40);
  d.detector().Rearm();
  for (int i = 0; i < 60; ++i) {
    d.Iteration("NS", 150 * kMs);
    EXPECT_FALSE(d.detector().CheckSlowdown().has_value()) << i;
  }
}

TEST(IterationDetectorTest, AWindowWithFewIterationsRearmsFromTheMovingMean) {
  // 3 iterations (< N / 4) are too few to be the baseline (their 90 ms would make the
  // 150 ms after the window 67 % slower): the current moving mean (141 ms) is.
  DetectorOptions o = Options(5, 200, 20);
  o.slowdown_ratio = 0.15;
  Driver d(o);
  d.Repeat("NS", 100 * kMs, 40);
  d.Repeat("NS", 150 * kMs, 20);
  d.detector().WindowBegan();
  d.Repeat("NS", 90 * kMs, 3);
  d.detector().Rearm();
  d.Repeat("NS", 150 * kMs, 30);
  const auto trigger = d.detector().CheckSlowdown();
  EXPECT_FALSE(trigger.has_value()) << trigger->detail;
}

TEST(IterationDetectorTest, RecentShortestIsTheBaseline) {
  // The job speeds up (warm-up done): the faster mean becomes the baseline.
  Driver d(Options(5, 200, 10));
  d.Repeat("NS", 130 * kMs, 20);
  d.Repeat("NS", 100 * kMs, 20);
  EXPECT_FALSE(d.detector().CheckSlowdown().has_value());
  d.Repeat("NS", 120 * kMs, 10);
  EXPECT_TRUE(d.detector().CheckSlowdown().has_value());
}

TEST(IterationDetectorTest, HangAtFiveTimesTheMean) {
  DetectorOptions o = Options(5, 200, 10);
  o.hang_factor = 5;
  o.min_hang_ns = 100 * kMs;
  Driver d(o);
  d.Repeat("NS", 100 * kMs, 10);
  d.Iteration("N", 1);  // the last marker
  const int64_t last = d.detector().last_marker_ns();
  EXPECT_FALSE(d.detector().CheckHang(last + 400 * kMs).has_value());
  EXPECT_FALSE(d.detector().CheckHang(last + 500 * kMs).has_value());
  const auto hang = d.detector().CheckHang(last + 501 * kMs);
  ASSERT_TRUE(hang.has_value());
  EXPECT_EQ(hang->reason, WindowReason::kHang);
  EXPECT_NE(hang->detail.find("mean iteration 100 ms"), std::string::npos) << hang->detail;
  EXPECT_NE(hang->detail.find("data-loader next"), std::string::npos) << hang->detail;
  // Once per silence...
  EXPECT_FALSE(d.detector().CheckHang(last + 900 * kMs).has_value());
  // ... and again after progress resumed and stopped again.
  int64_t s = 0, e = 0;
  d.detector().OnMarker(Marker::kOptimizerStep, last + 1000 * kMs, &s, &e);
  EXPECT_FALSE(d.detector().CheckHang(last + 1400 * kMs).has_value());
  EXPECT_TRUE(d.detector().CheckHang(last + 1600 * kMs).has_value());
}

TEST(IterationDetectorTest, DefaultHangIsFourTimesTheMeanAndDueThen) {
  // The default leaves one mean iteration for the second stack sample and the report
  // (within 5x), for iterations long enough that 4x is above the 30 s minimum silence.
  Driver d(Options(5, 200, 10));
  d.Repeat("NS", 10'000 * kMs, 10);
  EXPECT_EQ(d.detector().HangLimitNs(), 40'000 * kMs);
  const int64_t last = d.detector().last_marker_ns();
  EXPECT_EQ(d.detector().HangDueNs(), last + 40'000 * kMs + 1);
  EXPECT_FALSE(d.detector().CheckHang(last + 40'000 * kMs).has_value());
  EXPECT_TRUE(d.detector().CheckHang(d.detector().HangDueNs()).has_value());
  EXPECT_EQ(d.detector().HangDueNs(), INT64_MAX);  // reported: nothing due until progress
  int64_t s = 0, e = 0;
  d.detector().OnMarker(Marker::kDataLoaderNext, last + 50'000 * kMs, &s, &e);
  // Progress re-arms it (the closed 50 s iteration raises the limit itself).
  EXPECT_EQ(d.detector().HangDueNs(), last + 50'000 * kMs + d.detector().HangLimitNs() + 1);
}

TEST(IterationDetectorTest, DefaultMinimumSilenceIsThirtySeconds) {
  // Short iterations: 4x the mean is far below what real jobs pause for (a checkpoint,
  // evaluation, recompilation): no hang before 30 s of silence.
  Driver d(Options(5, 200, 10));
  d.Repeat("NS", 300 * kMs, 10);
  EXPECT_EQ(d.detector().HangLimitNs(), 30'000 * kMs);
  const int64_t last = d.detector().last_marker_ns();
  EXPECT_FALSE(d.detector().CheckHang(last + 5'000 * kMs).has_value());
  EXPECT_FALSE(d.detector().CheckHang(last + 30'000 * kMs).has_value());
  EXPECT_TRUE(d.detector().CheckHang(last + 30'001 * kMs).has_value());
}

TEST(IterationDetectorTest, NoisyIterationsGetMoreTimeBeforeAHang) {
  // One iteration of the last N took 1 s among 100 ms ones: silence up to 1.5 x that is
  // not yet a hang (the job's own variability), though it is far above 4 x the mean.
  DetectorOptions o = Options(5, 200, 10);
  o.min_hang_ns = 0;
  Driver d(o);
  d.Repeat("NS", 100 * kMs, 10);
  d.Repeat("NS", 1'000 * kMs, 1);
  d.Repeat("NS", 100 * kMs, 5);
  const int64_t mean = d.detector().mean_iteration_ns();
  EXPECT_LT(4 * mean, 1'500 * kMs);
  EXPECT_EQ(d.detector().HangLimitNs(), 1'500 * kMs);
  const int64_t last = d.detector().last_marker_ns();
  EXPECT_FALSE(d.detector().CheckHang(last + 1'400 * kMs).has_value());
  EXPECT_TRUE(d.detector().CheckHang(last + 1'501 * kMs).has_value());
}

TEST(IterationDetectorTest, NoHangBeforeMinHangNs) {
  DetectorOptions o = Options(5, 200, 10);
  o.min_hang_ns = 2'000 * kMs;
  Driver d(o);
  d.Repeat("NS", 100 * kMs, 10);
  const int64_t last = d.detector().last_marker_ns();
  EXPECT_FALSE(d.detector().CheckHang(last + 1'900 * kMs).has_value());
  EXPECT_TRUE(d.detector().CheckHang(last + 2'001 * kMs).has_value());
}

TEST(IterationDetectorTest, NoHangBeforeLearning) {
  DetectorOptions o = Options(10);
  o.min_hang_ns = 0;
  Driver d(o);
  d.Repeat("NS", 100 * kMs, 9);
  EXPECT_FALSE(d.detector().learned());
  EXPECT_FALSE(d.detector().CheckHang(d.now() + 3'600'000 * kMs).has_value());
  IterationDetector fresh;
  EXPECT_FALSE(fresh.CheckHang(INT64_MAX / 2).has_value());
}

TEST(IterationDetectorTest, LongPatternsAreNotLearnedButHarmless) {
  Driver d(Options(3));
  std::string huge(100, 'N');
  huge += 'S';
  d.Repeat(huge, 100 * kMs, 10);
  EXPECT_FALSE(d.detector().learned());
}

TEST(IterationDetectorTest, OnMarkerNeverAllocates) {
  // Learning, tracking, disruptions, relearning and the moving window: all in buffers sized
  // by the constructor.
  Driver d(Options(10, 20, 50));
  int64_t s = 0, e = 0;
  g_allocations = 0;
  g_count_allocations = true;
  for (int i = 0; i < 300; ++i) {
    d.detector().OnMarker(Marker::kDataLoaderNext, i * 100 * kMs, &s, &e);
    d.detector().OnMarker(Marker::kOptimizerStep, i * 100 * kMs + 50 * kMs, &s, &e);
    if (i % 50 == 0)
      d.detector().OnMarker(Marker::kOptimizerStep, i * 100 * kMs + 60 * kMs, &s, &e);
  }
  for (int i = 0; i < 100; ++i)
    d.detector().OnMarker(Marker::kDataLoaderNext, 40'000 * kMs + i, &s, &e);
  g_count_allocations = false;
  EXPECT_EQ(g_allocations.load(), 0u);
  EXPECT_GT(d.detector().iterations(), 0u);
  // The counter itself works.
  g_count_allocations = true;
  auto* probe = new int(7);
  g_count_allocations = false;
  delete probe;
  EXPECT_EQ(g_allocations.load(), 1u);
}

TEST(IterationDetectorTest, ConcurrentHangCheckerAndRearm) {
  // Smoke test for ThreadSanitizer: the training thread feeds markers while a timer thread
  // checks for hangs and a control thread rearms.
  DetectorOptions o = Options(3, 50, 8);
  o.min_hang_ns = 0;
  o.hang_factor = 1.0;
  IterationDetector detector(o);
  std::atomic<bool> done{false};
  std::atomic<int64_t> clock{1'000'000};
  std::atomic<int> hangs{0};
  std::thread timer([&] {
    while (!done.load()) {
      if (detector.CheckHang(clock.load() + 5'000)) hangs.fetch_add(1);
      (void)detector.mean_iteration_ns();
      (void)detector.iterations();
    }
  });
  std::thread control([&] {
    while (!done.load()) {
      detector.Rearm();
      std::this_thread::yield();
    }
  });
  int slowdowns = 0;
  for (int i = 0; i < 20'000; ++i) {
    int64_t s = 0, e = 0;
    const int64_t t = clock.fetch_add(i % 1000 < 500 ? 100 : 150);
    detector.OnMarker(i % 2 == 0 ? Marker::kDataLoaderNext : Marker::kOptimizerStep, t, &s, &e);
    if (detector.CheckSlowdown()) ++slowdowns;
  }
  done.store(true);
  timer.join();
  control.join();
  EXPECT_TRUE(detector.learned());
  EXPECT_GT(detector.iterations(), 9'000u);
  EXPECT_GE(hangs.load(), 0);
  EXPECT_GE(slowdowns, 0);
}

}  // namespace
}  // namespace perftracker
