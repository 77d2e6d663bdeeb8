// WindowSummarizer: one worker's Event stream for one window -> WorkerSummary.
//
// Pipeline, per event:
//
//   OnEvent ─► validate (end >= start, known function id; else stats.malformed_events)
//          ─► window bounds, iteration markers (recorded at arrival: order-independent)
//          ─► per-track reorder buffer ─► Process(): nesting, identity, accounting
//
// Reorder buffer. Each track has a bounded min-heap ordered by (start, longer duration
// first, arrival). When it holds more than options.reorder_window events, the smallest is
// popped and processed, so an event may arrive up to reorder_window positions late and
// still nest correctly; parents (same start, longer) are processed before their children.
// An event that arrives after a later-ordered event of its track was already processed
// ("after its slot was flushed") is counted in stats.out_of_order_events and summarized
// flat: root stack, no idle gap.
//
// Late parents. A live source emits a call when it returns, so a parent arrives after all of
// its children; one whose window holds more than reorder_window events of its track (the
// outermost frames of a window with 755,393 events in 4 s on an H200) arrives after its
// children were processed as top-level frames (no enclosing call; iteration frames do not
// count). Its self time is its duration less those children: the track keeps the spans of
// its top-level frames (TrackState::roots, in start order, at most kMaxRootSpans, coarsened
// by merging neighbours beyond that), a late event takes the spans inside it as its
// children and replaces them with its own span, and a top-level frame processed later
// inside a late event (still buffered when it arrived) is subtracted from that event's self
// time. A late event inside an existing top-level span is a late child, not a parent: self
// = total, as before.
//
// Finish() drains host tracks first, then the others, and before a device event is
// processed the host tracks are advanced up to its start, so a kernel usually finds its
// launch already processed.
//
// Offline mode (SummarizerOptions::offline, for trace files): OnEvent only validates and
// appends the event to its track's lane (a deque, 32 bytes per event: KeptEvent); Finish() sorts
// each lane by (start, longer first, then a fixed order of kind / name / fields: never arrival) and
// processes all lanes merged by start time with the same Process() / ProcessLeaf() as below. Every
// event is nested in its place whatever the file order, no event is out of order, and any
// permutation of the input gives the same summary. A file that marks no iteration (no
// ProfilerStep#N on a host thread or a device stream) is one iteration: its window, the span
// median_iteration_ns() already assumes, so that its breakdown is known.
//
// Leaf lane. Host runtime calls (launch, other runtime API, sync) never contain anything,
// and trace files write them apart from the ops they ran in (Kineto: every cpu_op of a
// thread first, then the CUPTI stream of runtime calls and kernels), further than any
// reorder window. So they bypass the stack: as the main lane of a track runs, it records
// its user-level context over time (a step function: time -> identity parent, two points
// per user-level frame, at most kMaxContextPoints); a leaf looks its parent up there once
// the main lane has passed its start (immediately, for a late leaf), otherwise it waits in
// its own bounded heap. A leaf has no idle gap and is not subtracted from the self time of
// the op it ran in. Resolving a leaf first processes the main-lane events that start before
// it (exact for trace files; a live source that emits a long parent after the leaf's kernel
// was flushed would see that parent counted out of order).
//
// Nesting. Per track a stack of open frames (time containment). A processed event first
// closes the frames that ended at or before its start (their self time = duration minus
// the clipped durations of their direct children); a child that overruns its parent is
// clipped to the parent's end for the parent's accounting (clock rounding in traces).
//
// Identity. Functions are re-interned into the summarizer's own FunctionTable. The parent
// of a host call is the nearest enclosing *user-level* frame (annotation, python call,
// optimizer step, data load); torch ops, runtime calls etc. in between are skipped, so
// "aten::mm" under record_function "block" is "annotation:block > torch_op:aten::mm"
// however aten nests internally. Iteration frames (ProfilerStep#N) are transparent: not
// part of any key, not a function; they only define iterations. If the source already
// interned the function with a parent chain, that chain is used as is (source Key()).
// Device events (kernels, memcpy/memset, device collectives) take the user-level parent
// the host launch with the same correlation id had; the correlation map is a direct-mapped
// array (slot = id mod size; CUDA correlation ids are sequential, so this evicts the
// oldest) — an unknown or evicted launch gives a root key.
// The ops a key skips are not forgotten: a path whose host calls ran directly inside one
// same op (most of them) keeps that op's path beside its key (FunctionSummary::enclosing_op,
// "Enclosing ops" below). Without user-level frames (torch.profiler without with_stack) all ops are
// roots by their keys, and that link is all that says aten::mkldnn_convolution runs inside
// aten::_convolution inside aten::convolution inside aten::conv2d: the localizer's call-path
// collapse follows it, so that one slow chain is one finding.
//
// Iterations only. A function's figures (count, total, self, critical, idle gap, bytes, its
// grid bins and so its metric levels) count the part of its calls inside the span of the
// window's iterations, from the first marker's start to the last one's end: the localizer
// divides them by the number of iterations, and time before the first marker or after the
// last (setup, a DataLoader's worker join at the job's end, the partial iterations at a live
// window's edges) belongs to none of them. A call that straddles the span counts its inside
// part (a copy: that share of its bytes); a call wholly outside it is not counted. Host calls
// are clipped to the span of the host's markers, device calls to that of the device streams'
// markers (a trace's GPU-side ProfilerStep twins), and not at all when the device marks no
// iteration: a GPU runs behind its host, so the last iteration's kernels end after the
// host's last marker. The end of the span is final only in Finish() (a live marker arrives
// when its iteration ends); before it, calls are clipped at the start only. So a live call
// processed early (its track's reorder buffer overflowed) before any marker arrived, or one
// after the last marker processed before Finish(), is counted whole, as without markers.
// The grid rows (device busy, host threads' busy / communication / sync / data rows) keep
// every call: iterations sum them over their own spans.
//
// Time grid. Quantities that depend on what *other* tracks did at the same time (critical
// path on device workers, iteration breakdown, metric levels during a function) cannot be
// computed exactly in bounded memory when tracks arrive in any order. They are accumulated
// in a TimeGrid: at most kGridBins power-of-two-wide time bins, coarsened (bins merged in
// pairs) whenever the span of the window would need more. Each row of the grid sums one
// quantity per bin (device busy ns, device compute ns, per host thread: top-level busy,
// communication, sync and data-load ns; per metric: sample count, sum, sum of squares), and
// each function keeps a sparse list of (bin, ns it ran in the bin). The approximation:
// inside a bin, activities are assumed independent and uniformly spread. So
//  - a host call's critical time on a device worker = sum over bins of its ns in the bin x
//    (1 - device busy fraction of the bin), device busy = sum over device tracks clamped to
//    the bin width (overlapping streams are counted once only up to the bin width);
//  - a metric's level during a function = the samples of each bin weighted by the share of
//    the bin the function ran in (reported when at least one sample's worth of weight, only
//    for metrics of the function's resource: GPU for device work, PCIe/NVLink for copies,
//    NIC for collectives, CPU / run queue / RSS for host calls, see MetricRelevant);
//  - an iteration's breakdown sums the bins it covers, weighting its two edge bins by
//    overlap.
// The error is bounded by the bin width, i.e. window length / kGridBins (about 1 ms for a
// 4 s window).
//
// Iteration breakdown (IterationSummary), over the iteration's span, from the grid rows:
// device workers: compute = device kernels, communication = device collectives (both
// summed over streams, clamped per bin), wait = sync + host-side collectives on the
// iteration thread, data = data loading on the iteration thread, host_only = span minus
// device busy. Host-only workers: communication = collectives on any host thread (gloo runs
// them on its own threads), wait = sync, data = data loading, compute = the iteration
// thread's top-level busy time minus its communication, sync and data time.
// Ranges on a device stream that are not activity (Kineto's gpu_user_annotation) are
// containers: they give identity to the kernels inside, but no busy time.
//
// Receive slack: as outermost communication calls are processed (collectives; torch's c10d::
// ops and record_param_comms), each collective waits for the next point-to-point call of its
// side (host or device); a receive credits it with its wait, a send with nothing
// (summary/receive_slack.h, FunctionSummary::slack_after_ns).
//
// Onsets: at Finish() each function's time per iteration comes from its grid bins (a bin's
// time spread evenly over the bin) and FindStepOnset (step_onset.h) says where it steps up
// and stays up: FunctionSummary::onset_iteration / onset_ns, so that a fault that begins
// inside the window is judged by what it costs from then on, not diluted over the window.
//
// Critical path: device kernels, collectives and device-to-device copies (GPU work) count
// fully; host-device copies (memcpy) count for the part no kernel overlaps (bins x (1 - device
// compute fraction)): a copy the GPU runs beside its kernels costs nothing, one it runs alone is
// time the GPU computes nothing (the localizer's PT-SERIALIZED-MEMCPY). Host calls on a worker with
// device tracks count for the part not overlapped by device activity (above). On a host-only
// worker, calls on the thread that carries the iteration markers (else the busiest host thread)
// count fully, calls on other threads not at all.
//
// Memory: reorder buffers (tracks x 2 lanes x reorder_window x 48 bytes), the open-frame
// stacks (nesting depth), the context timelines (at most kMaxContextPoints x 16 bytes per
// host thread), the correlation array (8 MiB of zero pages, allocated on the first correlated
// launch, a page resident once a slot on it is written; offline, freed once every event is
// processed), the grid (rows x kGridBins x 8 bytes, rows
// allocated when first used, per-thread rows for at most kMaxHostTrackRows threads), per function
// accumulators (80 bytes; a function counted more than once adds its sketch and at most 2 x
// kGridBins sparse bins, see FunctionAcc), the call paths (CallPathTable, ~24 bytes each) and
// iteration markers. Live, nothing grows with the number of events. Offline, each event is kept
// until Finish() (32 bytes in a deque, KeptEvent; the context timelines only from the next leaf
// call on); see docs/performance.md for the measured peak RSS per event. Metric samples far outside
// the events' span widen the grid and so coarsen it.
#include "perftracker/summary/window_summarizer.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <memory>
#include <new>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "perftracker/core/event_time.h"
#include "perftracker/core/memory_trim.h"
#include "perftracker/core/point_to_point.h"
#include "perftracker/summary/call_path_table.h"
#include "perftracker/summary/collective_groups.h"
#include "perftracker/summary/receive_slack.h"
#include "perftracker/summary/step_onset.h"

namespace perftracker {
namespace {

constexpr int64_t kGridBins = 4096;
// Open frames per track: real traces nest a few dozen deep (Python stacks with with_stack
// ~100). An event that would open a deeper frame is counted in stats.deep_events and not
// summarized, so that a hostile file cannot make keys (one path per nested function) grow
// with the square of its depth: memory and time stay linear in the input.
constexpr size_t kMaxOpenFrames = 256;
constexpr size_t kMaxHostTrackRows = 32;
constexpr uint32_t kCorrelationSlots = 1u << 20;
// Per host track, at most this many user-level context changes are remembered for leaf
// calls that arrive late (2 per annotation / python call); the oldest quarter is dropped
// beyond it, and leaves from that far back get a root parent.
constexpr size_t kMaxContextPoints = 1u << 18;
constexpr uint32_t kNone = UINT32_MAX;
// Event flags a function's summary keeps: kSummaryEventFlags (worker_summary.h);
// kEventFlagOnDevice is also set for calls on a device track.
// A function reports a metric only when at least this many samples' worth of weight fell
// inside its executions.
constexpr double kMinMetricSampleWeight = 1.0;

// Sums of durations saturate instead of overflowing (a hostile file can hold many events
// of up to 2^63 ns each).
void AddSat(int64_t& sum, int64_t v) {
  if (__builtin_add_overflow(sum, v, &sum)) sum = v < 0 ? INT64_MIN : INT64_MAX;
}

bool IsUserLevel(EventKind kind) {
  return kind == EventKind::kUserAnnotation || kind == EventKind::kPythonCall ||
         kind == EventKind::kOptimizerStep || kind == EventKind::kDataLoad;
}

bool IsDeviceKind(EventKind kind) {
  return kind == EventKind::kGpuKernel || kind == EventKind::kMemcpy || kind == EventKind::kMemset;
}

// Device activity: what keeps a GPU busy. Other ranges on a device stream (Kineto's
// gpu_user_annotation) are only containers.
bool IsDeviceActivity(EventKind kind) {
  return IsDeviceKind(kind) || kind == EventKind::kCollective;
}

// Leaf calls: host-side runtime API calls never contain other calls, and trace files write
// them in a separate stream (Kineto: all cpu_ops first, then the CUPTI runtime + kernel
// activity), arbitrarily far from the ops they ran in. They bypass the nesting stack.
bool IsLeafKind(EventKind kind) {
  return kind == EventKind::kKernelLaunch || kind == EventKind::kRuntimeCall ||
         kind == EventKind::kSync;
}

bool MovesBytes(EventKind kind) {
  return kind == EventKind::kMemcpy || kind == EventKind::kMemset || kind == EventKind::kCollective;
}

// Which metrics describe a function's resource: GPU metrics for device work, PCIe / NVLink
// for copies and collectives, NIC for collectives, host metrics for host calls. Keeps the
// summary small (a metric costs ~9 bytes per function on the wire).
bool MetricRelevant(Metric m, EventKind kind, bool device) {
  const bool gpu = m == Metric::kGpuSmActivity || m == Metric::kGpuDramActivity ||
                   m == Metric::kGpuSmClockMhz || m == Metric::kGpuThrottleReasons ||
                   m == Metric::kGpuUtilization || m == Metric::kGpuMemoryUtilization ||
                   m == Metric::kGpuTemperatureC || m == Metric::kGpuPowerWatts ||
                   m == Metric::kGpuSmClockMaxMhz;
  const bool link = m == Metric::kPcieTxBytesPerSec || m == Metric::kPcieRxBytesPerSec ||
                    m == Metric::kNvlinkBytesPerSec;
  const bool nic = m == Metric::kNicTxBytesPerSec || m == Metric::kNicRxBytesPerSec ||
                   m == Metric::kIbTxBytesPerSec || m == Metric::kIbRxBytesPerSec ||
                   m == Metric::kNicLinkUp || m == Metric::kTcpSendBytesPerSec ||
                   m == Metric::kTcpDeliveryRateBytesPerSec || m == Metric::kTcpWireSecondsPerSec;
  const bool host = m == Metric::kCpuUtilization || m == Metric::kRunQueueDelayFraction ||
                    m == Metric::kMemoryRssBytes;
  if (device) {
    if (kind == EventKind::kCollective) return gpu || link || nic;
    if (kind == EventKind::kMemcpy || kind == EventKind::kMemset) return gpu || link;
    return gpu;
  }
  if (kind == EventKind::kCollective) return host || nic;
  return host;
}

// Categories tracked per host thread; a frame only adds to a category when no enclosing
// frame on its track already did (nested collectives are counted once).
enum HostCategory : uint8_t { kCatComm = 1, kCatSync = 2, kCatData = 4 };

uint8_t CategoryOf(EventKind kind) {
  switch (kind) {
    case EventKind::kCollective:
      return kCatComm;
    case EventKind::kSync:
      return kCatSync;
    case EventKind::kDataLoad:
      return kCatData;
    default:
      return 0;
  }
}

// Fixed number of time bins over the window; see the file comment.
class TimeGrid {
 public:
  int NewRow() {
    rows_.emplace_back();
    return static_cast<int>(rows_.size()) - 1;
  }
  int shift() const { return shift_; }
  int64_t width() const { return int64_t{1} << shift_; }
  bool empty() const { return !init_; }

  // Makes [start, end] addressable, coarsening or moving the grid if needed.
  void Cover(int64_t start, int64_t end) {
    if (!init_) {
      init_ = true;
      while ((end >> shift_) - (start >> shift_) + 1 > kGridBins) ++shift_;
      base_ = min_ = start >> shift_;
      max_ = end >> shift_;
      return;
    }
    for (;;) {
      const int64_t lo = std::min(min_, start >> shift_);
      const int64_t hi = std::max(max_, end >> shift_);
      if (hi - lo + 1 <= kGridBins) {
        if (lo < base_) {
          Rebase(hi - kGridBins + 1);  // room below: the grid is extending downwards
        } else if (hi >= base_ + kGridBins) {
          Rebase(lo);
        }
        min_ = lo;
        max_ = hi;
        return;
      }
      Coarsen();
    }
  }

  // Calls f(bin, overlap_ns) for each bin overlapping [start, end). Cover() first.
  template <typename F>
  void ForEachOverlap(int64_t start, int64_t end, F&& f) const {
    if (end <= start) return;
    for (int64_t bin = start >> shift_; bin <= (end - 1) >> shift_; ++bin) {
      const int64_t lo = std::max(start, bin << shift_);
      const int64_t hi = std::min(end, (bin + 1) << shift_);
      f(bin, hi - lo);
    }
  }

  void AddSpan(int row, int64_t start, int64_t end) {
    ForEachOverlap(start, end,
                   [&](int64_t bin, int64_t ns) { Slot(row, bin) += static_cast<double>(ns); });
  }
  void AddPoint(int row, int64_t time, double value) { Slot(row, time >> shift_) += value; }

  double At(int row, int64_t bin) const {
    const auto& r = rows_[static_cast<size_t>(row)];
    const int64_t rel = bin - base_;
    if (r.empty() || rel < 0 || rel >= kGridBins) return 0;
    return r[static_cast<size_t>(rel)];
  }
  // Fraction in [0,1] of bin `bin` that row `row` (ns per bin) covers.
  double Fraction(int row, int64_t bin) const {
    return std::min(1.0, At(row, bin) / static_cast<double>(width()));
  }
  // Sum of the row over [start, end), edge bins weighted by overlap; with `clamp`, a bin
  // counts at most its width (union approximation of overlapping tracks).
  double Sum(int row, int64_t start, int64_t end, bool clamp) const {
    if (row < 0 || !init_) return 0;
    double sum = 0;
    const double w = static_cast<double>(width());
    ForEachOverlap(start, end, [&](int64_t bin, int64_t ns) {
      double v = At(row, bin);
      if (clamp) v = std::min(v, w);
      sum += v * static_cast<double>(ns) / w;
    });
    return sum;
  }

 private:
  double& Slot(int row, int64_t bin) {
    auto& r = rows_[static_cast<size_t>(row)];
    if (r.empty()) r.assign(kGridBins, 0.0);
    return r[static_cast<size_t>(bin - base_)];
  }

  void Rebase(int64_t new_base) {
    for (auto& r : rows_) {
      if (r.empty()) continue;
      std::vector<double> moved(kGridBins, 0.0);
      for (int64_t i = 0; i < kGridBins; ++i) {
        const int64_t rel = base_ + i - new_base;
        if (rel >= 0 && rel < kGridBins)
          moved[static_cast<size_t>(rel)] = r[static_cast<size_t>(i)];
      }
      r = std::move(moved);
    }
    base_ = new_base;
  }

  void Coarsen() {
    const int64_t new_base = base_ >> 1;
    for (auto& r : rows_) {
      if (r.empty()) continue;
      std::vector<double> merged(kGridBins, 0.0);
      for (int64_t i = 0; i < kGridBins; ++i) {
        merged[static_cast<size_t>(((base_ + i) >> 1) - new_base)] += r[static_cast<size_t>(i)];
      }
      r = std::move(merged);
    }
    base_ = new_base;
    min_ >>= 1;
    max_ >>= 1;
    ++shift_;
  }

  bool init_ = false;
  int shift_ = 0;
  int64_t base_ = 0;  // bin index of slot 0
  int64_t min_ = 0;   // lowest and highest bin used
  int64_t max_ = 0;
  std::vector<std::vector<double>> rows_;
};

// A function's time per grid bin, sparse; bins recorded at `shift` are rescaled lazily
// when the grid coarsens.
struct SparseBins {
  int shift = 0;
  std::vector<std::pair<int64_t, double>> bins;

  void Add(int grid_shift, int64_t bin, double ns) {
    if (grid_shift != shift) Rescale(grid_shift);
    if (!bins.empty() && bins.back().first == bin) {
      bins.back().second += ns;
      return;
    }
    bins.emplace_back(bin, ns);
    if (bins.size() > 2 * static_cast<size_t>(kGridBins)) Compact();
  }
  void Rescale(int grid_shift) {
    for (auto& b : bins) b.first >>= (grid_shift - shift);
    shift = grid_shift;
    Compact();
  }
  void Compact() {
    std::sort(bins.begin(), bins.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    size_t out = 0;
    for (size_t i = 0; i < bins.size(); ++i) {
      if (out > 0 && bins[out - 1].first == bins[i].first) {
        bins[out - 1].second += bins[i].second;
      } else {
        bins[out++] = bins[i];
      }
    }
    bins.resize(out);
  }
};

// What a function (call path) keeps beyond its counters once it has run more than once: its
// call durations, its time per host track and per grid bin.
struct FunctionDetail {
  QuantileSketch durations;
  std::vector<std::pair<uint32_t, int64_t>> host_ns_by_track;  // (track index, ns)
  SparseBins bins;

  void AddHost(uint32_t track, int64_t ns) {
    for (auto& [t, v] : host_ns_by_track) {
      if (t == track) {
        AddSat(v, ns);
        return;
      }
    }
    host_ns_by_track.emplace_back(track, ns);
  }
};

// Per function (call path). Traces recorded with Python stacks hold about one distinct path
// per two events and most paths run once: a path keeps its first counted call as it is (its
// part inside the clip, duration and track) and only its second allocates a FunctionDetail
// (sketch, per-track times, sparse bins), replaying the first call into it. Finish() derives
// the same figures from a lone first call (bins of [first_lo, first_lo + total_ns) at the
// final grid shift: integer ns per bin, so exactly what adding them early and coarsening
// later gives).
struct FunctionAcc {
  uint64_t count = 0;
  int64_t total_ns = 0;
  int64_t self_ns = 0;
  int64_t idle_gap_ns = 0;
  int64_t device_ns = 0;  // time of calls on device tracks (all critical)
  uint64_t bytes = 0;
  // The first counted call (count >= 1): the start of its part inside the clip (its length
  // is total_ns while count == 1) and its duration.
  int64_t first_lo = 0;
  int64_t first_duration = 0;
  uint32_t first_host_track = kNone;  // its track when it counts as host time, else kNone
  uint32_t detail = kNone;            // index of its FunctionDetail, kNone while count <= 1
  uint8_t flags = 0;                  // the kinds of copy seen (kSummaryEventFlags)
  bool first_binned = false;          // the first call's time goes into the grid bins
  // The ops that enclosed its host calls (see "Enclosing ops"): a Misra-Gries summary with
  // two counters (op kNone: at the top or under a user-level frame) over `enclosing_calls`
  // votes.
  uint32_t enclosing_op = kNone;
  uint32_t enclosing_votes = 0;
  uint32_t other_op = kNone;
  uint32_t other_votes = 0;
  uint32_t enclosing_calls = 0;
};

// A vector that grows in fixed chunks: no element is ever moved and growth never holds the
// old and the new array at once (a doubling vector briefly holds 3x its size).
template <typename T>
class ChunkedVector {
 public:
  static constexpr size_t kChunk = 1024;
  T& operator[](size_t i) { return chunks_[i / kChunk][i % kChunk]; }
  const T& operator[](size_t i) const { return chunks_[i / kChunk][i % kChunk]; }
  size_t size() const { return size_; }
  T& emplace_back() {
    if (size_ % kChunk == 0) chunks_.push_back(std::make_unique<T[]>(kChunk));
    return (*this)[size_++];
  }
  // Frees the chunk that holds element i (its elements must not be used again).
  void ReleaseChunkOf(size_t i) { chunks_[i / kChunk].reset(); }
  static bool LastOfChunk(size_t i) { return i % kChunk == kChunk - 1; }

 private:
  std::vector<std::unique_ptr<T[]>> chunks_;
  size_t size_ = 0;
};

struct Pending {
  Event event;
  uint64_t seq = 0;
};

// Heap order: std::push_heap keeps the *largest* on top, so "less" means "later".
struct PendingLater {
  bool operator()(const Pending& a, const Pending& b) const {
    if (a.event.start_ns != b.event.start_ns) return a.event.start_ns > b.event.start_ns;
    if (a.event.duration_ns() != b.event.duration_ns()) {
      return a.event.duration_ns() < b.event.duration_ns();
    }
    return a.seq > b.seq;
  }
};

struct Frame {
  int64_t start = 0;
  int64_t end = 0;                   // clipped to the enclosing frame's end
  uint32_t function = kNone;         // kNone for iteration frames
  uint32_t identity_parent = kNone;  // parent for the keys of calls nested in this frame
  int64_t child_ns = 0;
  int64_t child_inside_ns = 0;  // the part of child_ns inside the iterations (see Inside)
  uint8_t categories = 0;       // categories open in this frame or its ancestors
  bool busy = false;            // a call that makes its track busy (idle gaps, top level)
};

struct Iteration {
  int64_t start = 0;
  int64_t end = 0;
};

// A top-level frame's span on its track (or several neighbours merged), and the part of it
// inside the iterations.
struct RootSpan {
  int64_t start = 0;
  int64_t end = 0;
  int64_t inside_ns = 0;
};
constexpr size_t kMaxRootSpans = 4096;

// An event summarized after its children (see "Late parents").
struct LateFrame {
  int64_t start = 0;
  int64_t end = 0;
  uint32_t function = 0;
};
constexpr size_t kMaxLateFrames = 64;

// The span from the first iteration marker's start to the last one's end, of the host's or
// the device's markers.
struct IterationHull {
  bool known = false;
  int64_t lo = 0;
  int64_t hi = 0;
};

// The time range a function's figures count: [lo, hi).
struct Clip {
  int64_t lo = INT64_MIN;
  int64_t hi = INT64_MAX;
};

// An event the offline mode keeps until Finish(): 32 bytes, not Event's 40 (a lane knows its
// track; the payload's bits above 32 ride in 16 spare bits, and a payload of 2^48 bytes or
// more, which no real copy has, is kept aside whole, as is a collective's with its process
// group, Event::group). On a long trace without Python stacks
// these are most of the peak (the 500 MB trace: 1.37 M events).
struct KeptEvent {
  static constexpr uint16_t kPayloadAside = UINT16_MAX;  // payload_low indexes the big ones
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint32_t function_id = 0;
  uint32_t correlation = 0;
  uint32_t payload_low = 0;
  uint16_t payload_high = 0;
  EventKind kind = EventKind::kTorchOp;
  uint8_t flags = 0;
};
static_assert(sizeof(KeptEvent) == 32);

struct TrackState {
  TrackInfo info;
  uint32_t index = 0;  // position in the summarizer's track list
  bool device = false;
  std::vector<Pending> heap;
  uint64_t seq = 0;
  size_t peak_buffered = 0;
  bool processed_any = false;
  int64_t last_start = 0;  // order key of the last processed event
  int64_t last_duration = 0;
  std::vector<Frame> stack;
  int busy_frames = 0;  // frames on the stack with Frame::busy
  int call_frames = 0;  // frames on the stack that are calls (not iteration frames)
  // Leaf lane (IsLeafKind on host tracks): its own bounded heap, no reorder requirement.
  std::vector<Pending> leaf_heap;
  // User-level context over time, recorded as the main lane runs: (time, identity parent
  // from then on). Times are non-decreasing. Leaves look their parent up here.
  std::deque<std::pair<int64_t, uint32_t>> context;
  // Live mode: spans of top-level frames and of late events, and the late events whose
  // self time top-level frames processed after them still reduce (see "Late parents").
  std::vector<RootSpan> roots;
  std::vector<LateFrame> late;
  bool has_toplevel = false;
  int64_t last_toplevel_end = 0;
  int64_t toplevel_busy_ns = 0;
  std::vector<Iteration> iterations;
  // Offline mode: every event of the main lane and of the leaf lane, sorted in Finish().
  // A deque grows in blocks (no copy of the whole lane, no 2x slack) and frees them as
  // Finish() consumes it.
  std::deque<KeptEvent> all_main;
  std::deque<KeptEvent> all_leaves;
  // Grid rows of this host thread (-1 = none: device track or over kMaxHostTrackRows).
  int row_busy = -1, row_comm = -1, row_sync = -1, row_data = -1;
};

}  // namespace

class WindowSummarizer::Impl {
 public:
  Impl(const FunctionTable* functions, SummarizerOptions options)
      : source_(functions), options_(options) {
    if (options_.reorder_window == 0) options_.reorder_window = 1;
    row_device_busy_ = grid_.NewRow();
    row_device_compute_ = grid_.NewRow();
    row_device_comm_ = grid_.NewRow();
    row_host_comm_ = grid_.NewRow();
  }

  void OnTrack(const TrackInfo& info) {
    TrackState& t = Track(info.track_id);
    t.info = info;
    if (info.kind == TrackKind::kDeviceStream) {
      t.device = true;
      has_device_ = true;
    }
  }

  void OnProcessGroup(const ProcessGroupInfo& group) { groups_.Declare(group); }

  void OnEvent(const Event& ev) {
    ++stats_.events;
    if (ev.end_ns < ev.start_ns) {
      Problem(stats_.malformed_events, ev, "end before start");
      return;
    }
    if (!TimeInRange(ev.start_ns) || !TimeInRange(ev.end_ns)) {
      Problem(stats_.malformed_events, ev, "time out of range (beyond 2^62 ns from the epoch)");
      return;
    }
    if (ev.function_id >= source_->size()) {
      Problem(stats_.malformed_events, ev, "unknown function id");
      return;
    }
    if (!window_init_) {
      window_init_ = true;
      window_start_ = ev.start_ns;
      window_end_ = ev.end_ns;
    } else {
      window_start_ = std::min(window_start_, ev.start_ns);
      window_end_ = std::max(window_end_, ev.end_ns);
    }
    const bool known = tracks_.count(ev.track_id) != 0;
    TrackState& t = Track(ev.track_id);
    if (!known && (IsDeviceKind(ev.kind) || (ev.flags & kEventFlagOnDevice))) {
      t.info.kind = TrackKind::kDeviceStream;
      t.device = true;
    }
    if (t.device || (ev.flags & kEventFlagOnDevice)) has_device_ = true;
    if (ev.kind == EventKind::kIteration) {
      t.iterations.push_back({ev.start_ns, ev.end_ns});
      IterationHull& hull = t.device || (ev.flags & kEventFlagOnDevice) ? device_hull_ : host_hull_;
      hull.lo = hull.known ? std::min(hull.lo, ev.start_ns) : ev.start_ns;
      hull.hi = hull.known ? std::max(hull.hi, ev.end_ns) : ev.end_ns;
      hull.known = true;
    }

    if (options_.offline) {
      std::deque<KeptEvent>& lane = !t.device && IsLeafKind(ev.kind) ? t.all_leaves : t.all_main;
      lane.push_back(Keep(ev));
      t.peak_buffered = std::max(t.peak_buffered, lane.size());
      return;
    }
    if (!t.device && IsLeafKind(ev.kind)) {
      if (t.processed_any && ev.start_ns < t.last_start) {
        ProcessLeaf(t, ev);  // its context is already known: no need to buffer it
        return;
      }
      t.leaf_heap.push_back({ev, t.seq++});
      std::push_heap(t.leaf_heap.begin(), t.leaf_heap.end(), PendingLater{});
      t.peak_buffered = std::max(t.peak_buffered, t.leaf_heap.size());
      if (t.leaf_heap.size() > options_.reorder_window) PopLeaf(t);
      return;
    }
    if (t.processed_any && (ev.start_ns < t.last_start ||
                            (ev.start_ns == t.last_start && ev.duration_ns() > t.last_duration))) {
      Problem(stats_.out_of_order_events, ev,
              "arrived after its place in the reorder buffer was flushed "
              "(raise SummarizerOptions::reorder_window)");
      if (ev.kind != EventKind::kIteration) ProcessFlat(t, ev);
      return;
    }
    t.heap.push_back({ev, t.seq++});
    std::push_heap(t.heap.begin(), t.heap.end(), PendingLater{});
    t.peak_buffered = std::max(t.peak_buffered, t.heap.size());
    if (t.heap.size() > options_.reorder_window) PopAndProcess(t);
  }

  void OnMetric(const MetricSample& sample) {
    const auto m = static_cast<size_t>(sample.metric);
    if (m >= static_cast<size_t>(kNumMetrics) || !std::isfinite(sample.value) ||
        !TimeInRange(sample.time_ns)) {
      return;
    }
    if (metric_rows_[m][0] < 0) {
      for (int& row : metric_rows_[m]) row = grid_.NewRow();
    }
    grid_.Cover(sample.time_ns, sample.time_ns);
    grid_.AddPoint(metric_rows_[m][0], sample.time_ns, 1.0);
    grid_.AddPoint(metric_rows_[m][1], sample.time_ns, sample.value);
    grid_.AddPoint(metric_rows_[m][2], sample.time_ns, sample.value * sample.value);
    metric_totals_[m][0] += 1;
    metric_totals_[m][1] += sample.value;
    metric_totals_[m][2] += sample.value * sample.value;
  }

  size_t peak_reorder_buffer() const {
    size_t peak = 0;
    for (const auto& t : track_list_) peak = std::max(peak, t->peak_buffered);
    return peak;
  }

  WorkerSummary Finish();
  size_t detailed_functions() const { return details_.size(); }

 private:
  TrackState& Track(uint32_t id) {
    auto it = tracks_.find(id);
    if (it != tracks_.end()) return *track_list_[it->second];
    tracks_.emplace(id, track_list_.size());
    track_list_.push_back(std::make_unique<TrackState>());
    TrackState& t = *track_list_.back();
    t.index = static_cast<uint32_t>(track_list_.size() - 1);
    t.info.track_id = id;
    t.info.name = "track " + std::to_string(id);
    return t;
  }
  static uint32_t TrackIndex(const TrackState& t) { return t.index; }

  // What a track's calls count towards per-iteration figures (see "Iterations only" in the
  // file comment): host calls the host markers' span, device calls the device markers' span;
  // the end is known only once every marker has arrived (Finish).
  Clip ClipOf(bool device) const {
    const IterationHull& hull = device ? device_hull_ : host_hull_;
    Clip clip;
    if (!hull.known) return clip;
    clip.lo = hull.lo;
    if (finishing_) clip.hi = hull.hi;
    return clip;
  }
  // The length of [start, end) inside the track's clip.
  int64_t Inside(const TrackState& t, int64_t start, int64_t end) const {
    const Clip clip = ClipOf(t.device);
    return std::max<int64_t>(0, std::min(end, clip.hi) - std::max(start, clip.lo));
  }

  void Problem(uint64_t& counter, const Event& ev, std::string_view what) {
    ++counter;
    if (stats_.first_problem.empty()) {
      stats_.first_problem = std::string(what) + ": event on track " + std::to_string(ev.track_id) +
                             ", function id " + std::to_string(ev.function_id) + ", start " +
                             std::to_string(ev.start_ns) + " ns, end " + std::to_string(ev.end_ns) +
                             " ns";
    }
  }

  void PopAndProcess(TrackState& t) {
    std::pop_heap(t.heap.begin(), t.heap.end(), PendingLater{});
    const Event ev = t.heap.back().event;
    t.heap.pop_back();
    if (t.device) AdvanceLeaves(ev.start_ns);
    Process(t, ev);
    // Leaves whose context the main lane has now passed can be resolved.
    while (!t.leaf_heap.empty() && t.leaf_heap.front().event.start_ns < t.last_start) PopLeaf(t);
  }

  void PopLeaf(TrackState& t) {
    std::pop_heap(t.leaf_heap.begin(), t.leaf_heap.end(), PendingLater{});
    const Event ev = t.leaf_heap.back().event;
    t.leaf_heap.pop_back();
    // Make the context at the leaf's start known (file order: the ops are all there).
    while (!t.heap.empty() && t.heap.front().event.start_ns <= ev.start_ns) {
      std::pop_heap(t.heap.begin(), t.heap.end(), PendingLater{});
      const Event op = t.heap.back().event;
      t.heap.pop_back();
      Process(t, op);
    }
    ProcessLeaf(t, ev);
  }

  // Resolves the leaves (launches) that start no later than `time`, so that a device
  // event finds the launch it correlates with.
  void AdvanceLeaves(int64_t time) {
    for (auto& tp : track_list_) {
      TrackState& h = *tp;
      if (h.device) continue;
      while (!h.leaf_heap.empty() && h.leaf_heap.front().event.start_ns <= time) PopLeaf(h);
    }
  }

  void Drain(TrackState& t) {
    while (!t.heap.empty()) PopAndProcess(t);
    while (!t.stack.empty()) CloseFrame(t);
  }
  void DrainLeaves(TrackState& t) {
    while (!t.leaf_heap.empty()) PopLeaf(t);
  }

  void RecordContext(TrackState& t, int64_t time, uint32_t parent) {
    if (t.device) return;
    auto& c = t.context;
    if (options_.offline) {
      // Offline, a track's leaves are processed in start order, after the main-lane events
      // that start before them: only the context from the next leaf's start on is ever read
      // (none once the track has no leaf left; a Python-only trace has none at all).
      if (t.all_leaves.empty()) {
        c.clear();
        return;
      }
      const int64_t next_leaf = t.all_leaves.front().start_ns;
      while (c.size() >= 2 && c[1].first <= next_leaf) c.pop_front();
    }
    if (!c.empty()) {
      time = std::max(time, c.back().first);
      if (c.back().second == parent) return;
      if (c.back().first == time) {
        c.back().second = parent;
        return;
      }
    } else if (parent == kNone) {
      return;
    }
    c.emplace_back(time, parent);
    if (c.size() > kMaxContextPoints) c.erase(c.begin(), c.begin() + kMaxContextPoints / 4);
  }
  static uint32_t ContextAt(const TrackState& t, int64_t time) {
    const auto& c = t.context;
    auto it = std::upper_bound(c.begin(), c.end(), time,
                               [](int64_t v, const auto& p) { return v < p.first; });
    return it == c.begin() ? kNone : std::prev(it)->second;
  }

  void CloseFrame(TrackState& t) {
    const Frame f = t.stack.back();
    t.stack.pop_back();
    RecordContext(t, f.end, t.stack.empty() ? kNone : t.stack.back().identity_parent);
    if (f.busy) --t.busy_frames;
    if (f.function == kNone) return;
    --t.call_frames;
    AddSat(functions_acc_[f.function].self_ns,
           std::max<int64_t>(0, Inside(t, f.start, f.end) - f.child_inside_ns));
  }

  uint32_t MapChain(uint32_t source_id) {
    if (chain_map_.size() <= source_id) chain_map_.resize(source_->size(), kNone);
    if (chain_map_[source_id] != kNone) return chain_map_[source_id];
    const auto& e = source_->Get(source_id);
    const uint32_t parent = e.parent == FunctionTable::kNoParent ? kNone : MapChain(e.parent);
    const uint32_t mine = Intern(LeafOf(source_id), parent);
    chain_map_[source_id] = mine;
    return mine;
  }

  // The leaf (kind, name) of source function `source_id`, interned once per source id.
  uint32_t LeafOf(uint32_t source_id) {
    if (source_leaf_.size() <= source_id) source_leaf_.resize(source_->size(), kNone);
    if (source_leaf_[source_id] == kNone) {
      const auto& e = source_->Get(source_id);
      source_leaf_[source_id] = paths_.InternLeaf(e.kind, e.name);
    }
    return source_leaf_[source_id];
  }

  uint32_t Intern(uint32_t leaf, uint32_t parent) {
    const uint32_t id = paths_.Intern(leaf, parent);
    while (functions_acc_.size() <= id) functions_acc_.emplace_back();
    return id;
  }

  // The summarizer's function id of `ev` nested under user-level function `parent`.
  uint32_t Resolve(const Event& ev, uint32_t parent) {
    const auto& e = source_->Get(ev.function_id);
    if (e.parent != FunctionTable::kNoParent) return MapChain(ev.function_id);
    return Intern(LeafOf(ev.function_id), parent);
  }

  // A function's second counted call: its lone first call moves into a new FunctionDetail
  // (its time, total_ns while count == 1, binned at the current grid shift).
  void Promote(FunctionAcc& acc) {
    acc.detail = static_cast<uint32_t>(details_.size());
    FunctionDetail& d = details_.emplace_back();
    d.durations.Add(static_cast<double>(acc.first_duration));
    if (acc.first_host_track != kNone) d.AddHost(acc.first_host_track, acc.total_ns);
    if (acc.first_binned) {
      const int shift = grid_.shift();
      grid_.ForEachOverlap(acc.first_lo, acc.first_lo + acc.total_ns, [&](int64_t bin, int64_t ns) {
        d.bins.Add(shift, bin, static_cast<double>(ns));
      });
    }
  }

  void RememberLaunch(uint32_t correlation, uint32_t parent) {
    if (!correlations_) {
      // An anonymous mapping of its own: fresh zero pages, resident only once a slot on them
      // is written (correlation ids are sequential: a trace touches one page per 512
      // launches). Not calloc: glibc serves 8 MiB as a mapping too, but freeing a malloc
      // mapping raises its mmap threshold to that size, and Finish() frees this one before
      // the summary is built (its array reserved whole, then in the brk heap among the pages
      // the events freed, not a mapping of its own: timesformer +0.1-0.2 MiB).
      void* p = ::mmap(nullptr, kCorrelationBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      correlations_.reset(static_cast<CorrelationSlot*>(p));
    }
    correlations_[correlation % kCorrelationSlots] = {correlation, parent};
  }
  uint32_t LaunchParent(uint32_t correlation) const {
    if (correlation == 0 || !correlations_) return kNone;
    const CorrelationSlot& slot = correlations_[correlation % kCorrelationSlots];
    return slot.correlation == correlation ? slot.parent : kNone;
  }

  void EnsureHostRows(TrackState& t) {
    if (t.device || t.row_busy >= 0 || host_tracks_with_rows_ >= kMaxHostTrackRows) return;
    ++host_tracks_with_rows_;
    t.row_busy = grid_.NewRow();
    t.row_comm = grid_.NewRow();
    t.row_sync = grid_.NewRow();
    t.row_data = grid_.NewRow();
  }

  // Accounting common to nested and flat events.
  void Account(TrackState& t, const Event& ev, uint32_t fn, bool toplevel,
               uint8_t open_categories) {
    FunctionAcc& acc = functions_acc_[fn];
    const int64_t dur = ev.duration_ns();
    const bool on_device = t.device || (ev.flags & kEventFlagOnDevice);
    const Clip clip = ClipOf(on_device);
    // The function's own figures count the part of the call inside the iterations (a call
    // wholly outside them is not counted); the grid rows below keep all of it (they are
    // summed over each iteration's span, and give the device-busy fraction of a time).
    const int64_t lo = std::max(ev.start_ns, clip.lo);
    const int64_t hi = std::min(ev.end_ns, clip.hi);
    const bool counted = lo < hi || (lo == hi && dur == 0);
    const int64_t inside = counted ? hi - lo : 0;
    if (counted) {
      if (acc.count == 1 && acc.detail == kNone) Promote(acc);
      ++acc.count;
      AddSat(acc.total_ns, inside);
      // A transfer that straddles an iteration boundary counts its inside share.
      const uint64_t bytes =
          !MovesBytes(ev.kind) ? 0
          : inside == dur
              ? ev.payload
              : static_cast<uint64_t>(static_cast<double>(ev.payload) *
                                      static_cast<double>(inside) / static_cast<double>(dur));
      acc.bytes += bytes;
      acc.flags |= (ev.flags & kSummaryEventFlags) | (on_device ? kEventFlagOnDevice : 0);
      if (ev.kind == EventKind::kCollective && ev.group != 0) {
        groups_.Add(fn, ev.group, inside, bytes);
      }
    }

    grid_.Cover(ev.start_ns, ev.end_ns);
    // A range on a stream (gpu_user_annotation) is time only: no bins, so it adds nothing to
    // the critical time of the host range of the same name (Kineto writes both) and never
    // makes a function's critical time exceed the iteration.
    const bool binned = !on_device || IsDeviceActivity(ev.kind);
    if (counted) {
      const uint32_t host_track = on_device ? kNone : TrackIndex(t);
      if (acc.count == 1) {
        acc.first_lo = lo;
        acc.first_duration = dur;
        acc.first_host_track = host_track;
        acc.first_binned = binned;
      } else {
        FunctionDetail& d = details_[acc.detail];
        d.durations.Add(static_cast<double>(dur));
        if (binned) {
          const int shift = grid_.shift();
          grid_.ForEachOverlap(lo, hi, [&](int64_t bin, int64_t ns) {
            d.bins.Add(shift, bin, static_cast<double>(ns));
          });
        }
        if (host_track != kNone) d.AddHost(host_track, inside);
      }
    }
    if (!binned) return;

    if (on_device) {
      AddSat(acc.device_ns, inside);
      // Device busy/compute/comm only for top-level device calls: nested device ranges
      // would count the same time twice.
      if (toplevel) {
        grid_.AddSpan(row_device_busy_, ev.start_ns, ev.end_ns);
        if (ev.kind == EventKind::kCollective) {
          grid_.AddSpan(row_device_comm_, ev.start_ns, ev.end_ns);
        } else if (ev.kind == EventKind::kGpuKernel) {
          grid_.AddSpan(row_device_compute_, ev.start_ns, ev.end_ns);
        }
      }
      return;
    }
    if (toplevel) AddSat(t.toplevel_busy_ns, dur);
    if (CategoryOf(ev.kind) == kCatComm && (open_categories & kCatComm) == 0) {
      grid_.AddSpan(row_host_comm_, ev.start_ns, ev.end_ns);
    }
    EnsureHostRows(t);
    if (t.row_busy < 0) return;
    if (toplevel) grid_.AddSpan(t.row_busy, ev.start_ns, ev.end_ns);
    const uint8_t cat = CategoryOf(ev.kind);
    if (cat != 0 && (open_categories & cat) == 0) {
      const int row = cat == kCatComm ? t.row_comm : cat == kCatSync ? t.row_sync : t.row_data;
      grid_.AddSpan(row, ev.start_ns, ev.end_ns);
    }
  }

  // An outermost communication call (a collective; torch's communication operators,
  // IsTorchCommunicationOp): a point-to-point call credits the
  // collectives before it (receive_slack.h); any other waits for the next one.
  void TrackReceiveSlack(const TrackState& t, const Event& ev, uint32_t fn, bool on_device) {
    if (ev.kind != EventKind::kCollective && ev.kind != EventKind::kTorchOp) return;
    if (point_to_point_.size() <= fn) point_to_point_.resize(fn + 1, kUnclassified);
    if (point_to_point_[fn] == kUnclassified) {
      const std::string_view name = paths_.Get(fn).name;
      const bool comm = ev.kind == EventKind::kCollective || IsTorchCommunicationOp(name);
      point_to_point_[fn] = comm ? static_cast<uint8_t>(PointToPointOf(name)) : kNotCommunication;
    }
    if (point_to_point_[fn] == kNotCommunication) return;
    // A call's own direction flags win over its function's (one name may serve both).
    const auto p2p = (ev.flags & (kEventFlagSend | kEventFlagReceive)) != 0
                         ? PointToPointOf(paths_.Get(fn).name, ev.flags)
                         : static_cast<PointToPoint>(point_to_point_[fn]);
    ReceiveSlack& slack = receive_slack_[on_device ? 1 : 0];
    if (p2p == PointToPoint::kNone) {
      slack.OnCollective(fn, ev.end_ns, Inside(t, ev.start_ns, ev.end_ns));
      return;
    }
    slack.OnPointToPoint(p2p, ev.start_ns, ev.end_ns, [this](uint32_t credited, int64_t ns) {
      AddSat(slack_after_[credited], ns);
    });
  }

  void ProcessFlat(TrackState& t, const Event& ev) {
    const uint32_t fn = Resolve(ev, kNone);
    const int64_t inside = Inside(t, ev.start_ns, ev.end_ns);
    AddSat(functions_acc_[fn].self_ns, inside - TakeLateChildren(t, ev, fn, inside));
    Account(t, ev, fn, /*toplevel=*/false, /*open_categories=*/0);
  }

  // A late event's children among the track's top-level spans (see "Late parents"): their
  // time inside the iterations, after which its own span replaces theirs. 0 for a late
  // child (inside an existing span) and in offline mode.
  int64_t TakeLateChildren(TrackState& t, const Event& ev, uint32_t fn, int64_t inside) {
    if (options_.offline) return 0;
    auto first = std::lower_bound(t.roots.begin(), t.roots.end(), ev.start_ns,
                                  [](const RootSpan& r, int64_t start) { return r.start < start; });
    if (first != t.roots.begin() && std::prev(first)->end > ev.start_ns) return 0;  // a child
    auto last = first;
    int64_t children = 0;
    while (last != t.roots.end() && last->end <= ev.end_ns) {
      children += last->inside_ns;
      ++last;
    }
    if (last != t.roots.end() && last->start < ev.end_ns) return 0;  // overlaps: not a parent
    first = t.roots.erase(first, last);
    t.roots.insert(first, RootSpan{ev.start_ns, ev.end_ns, inside});
    if (t.late.size() == kMaxLateFrames) t.late.erase(t.late.begin());
    t.late.push_back(LateFrame{ev.start_ns, ev.end_ns, fn});
    return std::min(children, inside);
  }

  // A top-level frame in live mode: a child of a late event it lies in, or a span of its own.
  void NoteTopLevel(TrackState& t, int64_t start, int64_t end) {
    if (options_.offline) return;
    const int64_t inside = Inside(t, start, end);
    const LateFrame* parent = nullptr;
    for (const LateFrame& l : t.late) {
      if (l.start <= start && end <= l.end &&
          (parent == nullptr || l.end - l.start < parent->end - parent->start)) {
        parent = &l;  // the innermost: late events nest, the shortest is inside the others
      }
    }
    if (parent != nullptr) {
      int64_t& self = functions_acc_[parent->function].self_ns;
      self = std::max<int64_t>(0, self - inside);
      return;
    }
    if (!t.roots.empty() && t.roots.back().start > start) return;  // not in start order
    t.roots.push_back(RootSpan{start, end, inside});
    if (t.roots.size() > kMaxRootSpans) {  // coarsen: merge neighbours
      size_t out = 0;
      for (size_t i = 0; i < t.roots.size(); i += 2) {
        RootSpan r = t.roots[i];
        if (i + 1 < t.roots.size()) {
          r.end = std::max(r.end, t.roots[i + 1].end);
          r.inside_ns += t.roots[i + 1].inside_ns;
        }
        t.roots[out++] = r;
      }
      t.roots.resize(out);
    }
  }

  // A leaf call: parent from the track's context timeline; no frame, no idle gap, and (the
  // price of the separate stream) not subtracted from the self time of the op it ran in.
  void ProcessLeaf(TrackState& t, const Event& ev) {
    const uint32_t parent = ContextAt(t, ev.start_ns);
    const uint32_t fn = Resolve(ev, parent);
    AddSat(functions_acc_[fn].self_ns, Inside(t, ev.start_ns, ev.end_ns));
    Account(t, ev, fn, /*toplevel=*/false, /*open_categories=*/0);
    if (ev.correlation != 0) RememberLaunch(ev.correlation, parent);
  }

  // Enclosing ops: a host call that is not user-level, directly inside an open call that is
  // not user-level either (an op in an op), has that call as its enclosing op; a call at the
  // top, under an iteration frame or a user-level frame has none. A path keeps the enclosing
  // op of more than half of its calls (FunctionSummary::enclosing_op), not of all: calls of
  // equal span (torch 1.13 writes µs: "evaluate_function: ReluBackward0" and the
  // "ReluBackward0" in it often start and end in the same µs) nest in the fixed tie order of
  // OfflineBefore, by name, which inverts them. The votes are a Misra-Gries summary of two
  // counters: a counter above half of the votes is a true majority, and a choice held by more
  // than 5/6 of the calls always ends above half (two choices: exact counts).
  void NoteEnclosingOp(uint32_t fn, const Frame* top, bool user_level) {
    uint32_t enclosing = kNone;
    if (!user_level && top != nullptr && top->function != kNone &&
        top->identity_parent != top->function) {
      enclosing = top->function;
    }
    FunctionAcc& acc = functions_acc_[fn];
    if (acc.enclosing_calls == UINT32_MAX) return;
    ++acc.enclosing_calls;
    if (acc.enclosing_votes > 0 && acc.enclosing_op == enclosing) {
      ++acc.enclosing_votes;
    } else if (acc.other_votes > 0 && acc.other_op == enclosing) {
      ++acc.other_votes;
    } else if (acc.enclosing_votes == 0) {
      acc.enclosing_op = enclosing;
      acc.enclosing_votes = 1;
    } else if (acc.other_votes == 0) {
      acc.other_op = enclosing;
      acc.other_votes = 1;
    } else {
      --acc.enclosing_votes;
      --acc.other_votes;
    }
  }
  static uint32_t EnclosingOpOf(const FunctionAcc& acc) {
    if (acc.enclosing_votes * uint64_t{2} > acc.enclosing_calls) return acc.enclosing_op;
    if (acc.other_votes * uint64_t{2} > acc.enclosing_calls) return acc.other_op;
    return kNone;
  }

  void Process(TrackState& t, const Event& ev) {
    t.processed_any = true;
    t.last_start = ev.start_ns;
    t.last_duration = ev.duration_ns();
    while (!t.stack.empty() && t.stack.back().end <= ev.start_ns) CloseFrame(t);
    if (t.stack.size() >= kMaxOpenFrames) {
      static const std::string kDeep =
          "nested deeper than " + std::to_string(kMaxOpenFrames) + " open calls (not summarized)";
      Problem(stats_.deep_events, ev, kDeep);
      return;
    }
    Frame* top = t.stack.empty() ? nullptr : &t.stack.back();
    Frame frame;
    frame.start = ev.start_ns;
    frame.end = top ? std::min(ev.end_ns, top->end) : ev.end_ns;
    // Iteration frames are transparent: a call under iteration frames only is top-level.
    if (t.call_frames == 0 && ev.kind != EventKind::kIteration) {
      NoteTopLevel(t, ev.start_ns, ev.end_ns);
    }
    if (top) {
      AddSat(top->child_ns, frame.end - frame.start);
      AddSat(top->child_inside_ns, Inside(t, frame.start, frame.end));
    }
    uint32_t parent = top ? top->identity_parent : kNone;
    const uint8_t open = top ? top->categories : 0;
    frame.categories = open | CategoryOf(ev.kind);

    if (ev.kind == EventKind::kIteration) {
      frame.identity_parent = parent;
      t.stack.push_back(frame);
      return;
    }
    const bool on_device = t.device || (ev.flags & kEventFlagOnDevice);
    if (on_device) {
      const uint32_t launch = LaunchParent(ev.correlation);
      if (launch != kNone) parent = launch;
    }
    const uint32_t fn = Resolve(ev, parent);
    const bool user_level = IsUserLevel(source_->Get(ev.function_id).kind) || IsUserLevel(ev.kind);
    if (!on_device) NoteEnclosingOp(fn, top, user_level);
    frame.busy = !on_device || IsDeviceActivity(ev.kind);
    const bool toplevel = frame.busy && t.busy_frames == 0;
    if (toplevel) {
      if (t.has_toplevel && ev.start_ns > t.last_toplevel_end) {
        AddSat(functions_acc_[fn].idle_gap_ns, Inside(t, t.last_toplevel_end, ev.start_ns));
      }
      t.last_toplevel_end = t.has_toplevel ? std::max(t.last_toplevel_end, ev.end_ns) : ev.end_ns;
      t.has_toplevel = true;
    }
    Account(t, ev, fn, toplevel, open);
    if ((open & kCatComm) == 0) TrackReceiveSlack(t, ev, fn, on_device);
    if (!on_device && ev.correlation != 0) RememberLaunch(ev.correlation, parent);

    frame.function = fn;
    frame.identity_parent = user_level ? fn : parent;
    t.stack.push_back(frame);
    ++t.call_frames;
    if (frame.busy) ++t.busy_frames;
    RecordContext(t, frame.start, frame.identity_parent);
  }

  KeptEvent Keep(const Event& ev) {
    KeptEvent k;
    k.start_ns = ev.start_ns;
    k.end_ns = ev.end_ns;
    k.function_id = ev.function_id;
    k.correlation = ev.correlation;
    k.kind = ev.kind;
    k.flags = ev.flags;
    if (ev.payload >> 32 < KeptEvent::kPayloadAside && ev.group == 0) {
      k.payload_low = static_cast<uint32_t>(ev.payload);
      k.payload_high = static_cast<uint16_t>(ev.payload >> 32);
    } else {
      k.payload_low = static_cast<uint32_t>(aside_.size());
      k.payload_high = KeptEvent::kPayloadAside;
      aside_.push_back({ev.payload, ev.group});
    }
    return k;
  }
  uint64_t Payload(const KeptEvent& k) const {
    if (k.payload_high == KeptEvent::kPayloadAside) return aside_[k.payload_low].payload;
    return uint64_t{k.payload_high} << 32 | k.payload_low;
  }
  Event Restore(const KeptEvent& k, const TrackState& t) const {
    Event ev;
    ev.start_ns = k.start_ns;
    ev.end_ns = k.end_ns;
    ev.payload = Payload(k);
    ev.function_id = k.function_id;
    ev.track_id = t.info.track_id;
    ev.correlation = k.correlation;
    ev.kind = k.kind;
    ev.flags = k.flags;
    if (k.payload_high == KeptEvent::kPayloadAside) ev.group = aside_[k.payload_low].group;
    return ev;
  }
  bool OfflineBefore(const KeptEvent& a, const KeptEvent& b) const;
  void SummarizeInStartOrder();
  void BuildIterations(WorkerSummary& out, std::vector<Iteration> its,
                       const TrackState* rows) const;
  void BuildMetrics(const std::vector<std::pair<int64_t, double>>& bins, bool device,
                    FunctionSummary& fs) const;
  StepOnset FindOnset(const std::vector<std::pair<int64_t, double>>& bins,
                      const std::vector<IterationSummary>& its,
                      std::vector<double>& per_iteration) const;

  const FunctionTable* source_;
  SummarizerOptions options_;
  CallPathTable paths_;                       // own function id -> (kind, name, parent)
  ChunkedVector<FunctionAcc> functions_acc_;  // by own function id
  ChunkedVector<FunctionDetail> details_;     // of functions counted more than once
  std::vector<uint32_t> source_leaf_;         // source id -> leaf id in paths_
  std::vector<uint32_t> chain_map_;           // source id -> own id (chained sources)
  // Own id -> PointToPoint by its name (kUnclassified until its first call, or
  // kNotCommunication); per side (host, device), the collectives waiting for their next
  // point-to-point call; per collective credited, FunctionSummary::slack_after_ns (a side map:
  // few functions are collectives).
  static constexpr uint8_t kUnclassified = 0xff;
  static constexpr uint8_t kNotCommunication = 0xfe;
  std::vector<uint8_t> point_to_point_;
  std::array<ReceiveSlack, 2> receive_slack_;
  std::unordered_map<uint32_t, int64_t> slack_after_;
  // slot -> (correlation, parent); a zero slot holds no launch (correlation ids are > 0).
  struct CorrelationSlot {
    uint32_t correlation;
    uint32_t parent;
  };
  static constexpr size_t kCorrelationBytes = kCorrelationSlots * sizeof(CorrelationSlot);
  struct Unmap {
    void operator()(CorrelationSlot* p) const { ::munmap(p, kCorrelationBytes); }
  };
  std::unique_ptr<CorrelationSlot[], Unmap> correlations_;
  std::unordered_map<uint32_t, size_t> tracks_;  // track id -> index
  std::vector<std::unique_ptr<TrackState>> track_list_;
  // Offline: payloads of 2^48 bytes or more, and those of collectives with a process group
  // (KeptEvent has no room for Event::group; collectives are few).
  struct Aside {
    uint64_t payload;
    uint16_t group;
  };
  std::vector<Aside> aside_;
  CollectiveGroupRecorder groups_;
  size_t host_tracks_with_rows_ = 0;
  TimeGrid grid_;
  int row_device_busy_ = -1, row_device_compute_ = -1, row_device_comm_ = -1;
  int row_host_comm_ = -1;  // outermost collectives on any host thread
  std::array<std::array<int, 3>, kNumMetrics> metric_rows_ = [] {
    std::array<std::array<int, 3>, kNumMetrics> rows{};
    for (auto& r : rows) r = {-1, -1, -1};
    return rows;
  }();
  std::array<std::array<double, 3>, kNumMetrics> metric_totals_{};  // count, sum, sum of squares
  bool has_device_ = false;
  IterationHull host_hull_;
  IterationHull device_hull_;
  bool finishing_ = false;  // every event has arrived: the iterations' span is final
  bool window_init_ = false;
  int64_t window_start_ = 0;
  int64_t window_end_ = 0;
  SummaryStats stats_;
};

// `bins`: the function's time per grid bin at the final shift; `device`: it ran on a device.
void WindowSummarizer::Impl::BuildMetrics(const std::vector<std::pair<int64_t, double>>& bins,
                                          bool device, FunctionSummary& fs) const {
  const double width = static_cast<double>(grid_.width());
  for (int m = 0; m < kNumMetrics; ++m) {
    const auto& rows = metric_rows_[static_cast<size_t>(m)];
    if (rows[0] < 0 || !MetricRelevant(static_cast<Metric>(m), fs.kind, device)) {
      continue;
    }
    double weight = 0, sum = 0, sum_sq = 0;
    for (const auto& [bin, ns] : bins) {
      const double n = grid_.At(rows[0], bin);
      if (n == 0) continue;
      const double w = std::min(1.0, ns / width);
      weight += w * n;
      sum += w * grid_.At(rows[1], bin);
      sum_sq += w * grid_.At(rows[2], bin);
    }
    if (weight < kMinMetricSampleWeight) continue;
    FunctionMetric fm;
    fm.metric = static_cast<Metric>(m);
    const double mean = sum / weight;
    // Rounded to float precision: levels need no more, and the wire form is float32.
    fm.mean = static_cast<float>(mean);
    fm.stddev = static_cast<float>(std::sqrt(std::max(0.0, sum_sq / weight - mean * mean)));
    fs.metrics.push_back(fm);
  }
}

// `rows`: the host thread whose wait / data / busy rows describe the iterations (the
// iteration thread, else the busiest host thread; none on a device-only worker).
void WindowSummarizer::Impl::BuildIterations(WorkerSummary& out, std::vector<Iteration> its,
                                             const TrackState* rows) const {
  const int row_comm = rows ? rows->row_comm : -1;
  const int row_sync = rows ? rows->row_sync : -1;
  const int row_data = rows ? rows->row_data : -1;
  const int row_busy = rows ? rows->row_busy : -1;
  std::sort(its.begin(), its.end(),
            [](const Iteration& a, const Iteration& b) { return a.start < b.start; });
  auto ns = [](double v) { return static_cast<int64_t>(std::llround(std::max(0.0, v))); };
  for (const Iteration& it : its) {
    IterationSummary s;
    s.start_ns = it.start;
    s.duration_ns = it.end - it.start;
    const double comm_host = grid_.Sum(row_comm, it.start, it.end, true);
    const double sync = grid_.Sum(row_sync, it.start, it.end, true);
    s.data_ns = ns(grid_.Sum(row_data, it.start, it.end, true));
    if (out.has_device) {
      s.compute_ns = ns(grid_.Sum(row_device_compute_, it.start, it.end, true));
      s.communication_ns = ns(grid_.Sum(row_device_comm_, it.start, it.end, true));
      s.wait_ns = ns(sync + comm_host);
      s.host_only_ns = ns(static_cast<double>(s.duration_ns) -
                          grid_.Sum(row_device_busy_, it.start, it.end, true));
    } else {
      // Collectives count on any host thread (gloo runs them on its own threads while the
      // iteration thread waits); compute is the iteration thread's own work.
      const double busy = grid_.Sum(row_busy, it.start, it.end, true);
      s.communication_ns = ns(grid_.Sum(row_host_comm_, it.start, it.end, true));
      s.wait_ns = ns(sync);
      s.compute_ns = ns(busy - comm_host - sync - static_cast<double>(s.data_ns));
    }
    out.iterations.push_back(s);
  }
}

// Offline tie order of two events of one track that start together: the longer first (it
// encloses the other), then the one that can enclose (iteration, then user-level ranges),
// then by kind, name and the remaining fields, so that the order never depends on arrival.
bool WindowSummarizer::Impl::OfflineBefore(const KeptEvent& a, const KeptEvent& b) const {
  if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
  const int64_t da = a.end_ns - a.start_ns;
  const int64_t db = b.end_ns - b.start_ns;
  if (da != db) return da > db;
  auto enclosing_rank = [](EventKind k) {
    return k == EventKind::kIteration ? 0 : IsUserLevel(k) ? 1 : 2;
  };
  if (enclosing_rank(a.kind) != enclosing_rank(b.kind)) {
    return enclosing_rank(a.kind) < enclosing_rank(b.kind);
  }
  if (a.kind != b.kind) return a.kind < b.kind;
  if (a.function_id != b.function_id) {
    const std::string_view na = source_->Get(a.function_id).name;
    const std::string_view nb = source_->Get(b.function_id).name;
    if (na != nb) return na < nb;
  }
  const uint64_t pa = Payload(a);
  const uint64_t pb = Payload(b);
  return std::tie(pa, a.correlation, a.flags) < std::tie(pb, b.correlation, b.flags);
}

// Offline: sorts every lane, then processes all lanes merged by start time (ties: a host
// thread's own events, then its runtime calls, then device events; then by track name), so
// a runtime call finds its context and a kernel its launch, as in a trace read in order.
void WindowSummarizer::Impl::SummarizeInStartOrder() {
  struct Lane {
    TrackState* track;
    std::deque<KeptEvent>* events;
    int rank;  // 0 host main lane, 1 host leaf lane, 2 device
  };
  auto before = [this](const KeptEvent& a, const KeptEvent& b) { return OfflineBefore(a, b); };
  std::vector<Lane> lanes;
  for (auto& tp : track_list_) {
    TrackState& t = *tp;
    std::sort(t.all_main.begin(), t.all_main.end(), before);
    std::sort(t.all_leaves.begin(), t.all_leaves.end(), before);
    if (!t.all_main.empty()) lanes.push_back({&t, &t.all_main, t.device ? 2 : 0});
    if (!t.all_leaves.empty()) lanes.push_back({&t, &t.all_leaves, 1});
  }
  // Heap of lane indices, earliest next event on top.
  auto later = [&lanes](size_t i, size_t j) {
    const Lane& a = lanes[i];
    const Lane& b = lanes[j];
    const int64_t sa = a.events->front().start_ns;
    const int64_t sb = b.events->front().start_ns;
    if (sa != sb) return sa > sb;
    if (a.rank != b.rank) return a.rank > b.rank;
    if (a.track->info.device != b.track->info.device) {
      return a.track->info.device > b.track->info.device;
    }
    if (a.track->info.name != b.track->info.name) return a.track->info.name > b.track->info.name;
    return i > j;
  };
  std::vector<size_t> heap(lanes.size());
  for (size_t i = 0; i < lanes.size(); ++i) heap[i] = i;
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const size_t i = heap.back();
    Lane& lane = lanes[i];
    const Event ev = Restore(lane.events->front(), *lane.track);
    lane.events->pop_front();
    if (lane.rank == 1) {
      ProcessLeaf(*lane.track, ev);
    } else {
      Process(*lane.track, ev);
    }
    if (lane.events->empty()) {
      heap.pop_back();
    } else {
      std::push_heap(heap.begin(), heap.end(), later);
    }
  }
  for (auto& t : track_list_)
    if (!t->device) Drain(*t);
  for (auto& t : track_list_)
    if (t->device) Drain(*t);
}

WorkerSummary WindowSummarizer::Impl::Finish() {
  finishing_ = true;
  if (options_.offline) {
    SummarizeInStartOrder();
    // Every event is processed: no launch is looked up again. The correlation array's written
    // pages (one per 512 launches) would otherwise stay resident while the summary is built.
    correlations_.reset();
    // Every event of the file was kept until now and is freed: its pages go back to the
    // system before the summary is built beside the accumulators, so that the two do not add
    // up in the peak (xdit_sd_3.5, 200,513 events: 38.2 -> 36.5 MiB).
    ReturnFreedMemoryToSystem();
  } else {
    for (auto& t : track_list_)
      if (!t->device) Drain(*t);
    for (auto& t : track_list_)
      if (!t->device) DrainLeaves(*t);
    for (auto& t : track_list_)
      if (t->device) Drain(*t);
  }

  WorkerSummary out;
  out.window_start_ns = window_start_;
  out.window_end_ns = window_end_;
  out.has_device = has_device_;
  out.stats = stats_;
  for (int m = 0; m < kNumMetrics; ++m) {
    const auto& [n, sum, sum_sq] = metric_totals_[static_cast<size_t>(m)];
    if (n == 0) continue;
    const double mean = sum / n;
    out.worker_metrics.push_back(
        {static_cast<Metric>(m), static_cast<float>(mean),
         static_cast<float>(std::sqrt(std::max(0.0, sum_sq / n - mean * mean)))});
  }

  // The iteration thread carries the most iteration markers (a host thread's ProfilerStep#N
  // first; a device stream's twin only when no host thread marks iterations); the critical
  // thread of a host-only worker is that one, else the busiest host thread.
  const TrackState* iter_track = nullptr;
  const TrackState* busiest = nullptr;
  auto marks_better = [](const TrackState& a, const TrackState& b) {
    if (a.device != b.device) return !a.device;
    if (a.iterations.size() != b.iterations.size()) {
      return a.iterations.size() > b.iterations.size();
    }
    return a.info.name < b.info.name;  // never the arrival order
  };
  for (const auto& tp : track_list_) {
    const TrackState& t = *tp;
    if (!t.iterations.empty() && (iter_track == nullptr || marks_better(t, *iter_track))) {
      iter_track = &t;
    }
    if (!t.device && t.info.kind == TrackKind::kHostThread &&
        (busiest == nullptr || t.toplevel_busy_ns > busiest->toplevel_busy_ns)) {
      busiest = &t;
    }
  }
  const TrackState* critical_track = iter_track && !iter_track->device ? iter_track : busiest;
  const uint32_t critical_index = critical_track ? TrackIndex(*critical_track) : kNone;

  // A trace file that marks no iteration is one iteration: its window (what
  // median_iteration_ns() already assumes), so that its breakdown (GPU idle while the host
  // works, ...) is known. Live windows without markers keep no iteration.
  std::vector<Iteration> spans;
  if (iter_track != nullptr) {
    spans = iter_track->iterations;
  } else if (options_.offline && window_init_) {
    spans.push_back({window_start_, window_end_});
  }
  BuildIterations(out, std::move(spans), critical_track);

  // Onsets (FindOnset) need enough iterations on both sides of a step.
  const bool onsets = out.iterations.size() >= kMinBefore + kMinAfter && !grid_.empty();
  std::vector<double> per_iteration(onsets ? out.iterations.size() : 0);
  const int shift = grid_.shift();
  std::vector<std::pair<int64_t, double>> lone_bins;  // a lone first call's bins
  out.functions.reserve(paths_.size());
  // One copy of each leaf's name, shared by every path that ends in it.
  std::vector<SharedString> leaf_names(paths_.leaves());
  for (uint32_t id = 0; id < paths_.size(); ++id) {
    FunctionAcc& acc = functions_acc_[id];
    FunctionDetail* detail = acc.detail == kNone ? nullptr : &details_[acc.detail];
    const std::vector<std::pair<int64_t, double>>* bins = &lone_bins;
    lone_bins.clear();
    if (detail != nullptr) {
      if (detail->bins.shift != shift) detail->bins.Rescale(shift);
      bins = &detail->bins.bins;
    } else if (acc.count > 0 && acc.first_binned) {
      // total_ns is the lone call's part inside the clip.
      grid_.ForEachOverlap(acc.first_lo, acc.first_lo + acc.total_ns, [&](int64_t bin, int64_t ns) {
        lone_bins.emplace_back(bin, static_cast<double>(ns));
      });
    }
    // The function's host time on `track`, and whether it ran there.
    auto host_ns = [&](uint32_t track) -> int64_t {
      if (detail == nullptr)
        return acc.count > 0 && acc.first_host_track == track ? acc.total_ns : 0;
      for (const auto& [t, v] : detail->host_ns_by_track)
        if (t == track) return v;
      return 0;
    };
    auto on_track = [&](uint32_t track) {
      if (detail == nullptr) return acc.count > 0 && acc.first_host_track == track;
      for (const auto& tv : detail->host_ns_by_track)
        if (tv.first == track) return true;
      return false;
    };
    const CallPathTable::Path e = paths_.Get(id);
    FunctionSummary fs;
    // fs.key stays empty: the key derives from the parent chain (WorkerSummary::Key).
    SharedString& leaf_name = leaf_names[e.leaf];
    if (leaf_name.empty()) leaf_name = e.name;
    fs.name = leaf_name;
    fs.kind = e.kind;
    fs.parent = e.parent == CallPathTable::kNone ? FunctionSummary::kNoParent : e.parent;
    if (const uint32_t op = EnclosingOpOf(acc); op < paths_.size()) fs.enclosing_op = op;
    fs.count = acc.count;
    fs.total_ns = acc.total_ns;
    fs.self_ns = acc.self_ns;
    fs.idle_gap_before_ns = acc.idle_gap_ns;
    fs.bytes = acc.bytes;
    fs.event_flags = acc.flags;
    if (const auto slack = slack_after_.find(id); slack != slack_after_.end()) {
      fs.slack_after_ns = std::clamp<int64_t>(slack->second, 0, acc.total_ns);
    }
    if (detail != nullptr && options_.median_durations && detail->durations.count() > 1) {
      // Exact: a one-value sketch's Quantile(q) is its value (quantile_sketch.h).
      fs.durations.Add(detail->durations.Quantile(0.5));
    } else if (detail != nullptr) {
      fs.durations = std::move(detail->durations);
    } else if (acc.count > 0) {
      fs.durations.Add(static_cast<double>(acc.first_duration));
    }
    if (acc.device_ns > 0 && e.kind == EventKind::kMemcpy &&
        (acc.flags & kEventFlagDeviceToDevice) == 0) {
      double exposed = 0;
      for (const auto& [bin, ns] : *bins) {
        exposed += ns * (1.0 - grid_.Fraction(row_device_compute_, bin));
      }
      fs.critical_ns = std::min(acc.device_ns, static_cast<int64_t>(std::llround(exposed)));
    } else if (acc.device_ns > 0) {
      fs.critical_ns = acc.device_ns;
    } else if (out.has_device) {
      double uncovered = 0;
      for (const auto& [bin, ns] : *bins) {
        uncovered += ns * (1.0 - grid_.Fraction(row_device_busy_, bin));
      }
      fs.critical_ns = std::min(acc.total_ns, static_cast<int64_t>(std::llround(uncovered)));
    } else if (critical_index != kNone) {
      fs.critical_ns = host_ns(critical_index);
    }
    // Metrics: device functions and functions that ran on the iteration (critical) thread.
    if (acc.device_ns > 0 || (critical_index != kNone && on_track(critical_index))) {
      BuildMetrics(*bins, acc.device_ns > 0, fs);
    }
    if (onsets && !bins->empty()) {
      const StepOnset onset = FindOnset(*bins, out.iterations, per_iteration);
      if (onset.iteration != 0) {
        fs.onset_iteration = onset.iteration;
        fs.onset_ns = static_cast<int64_t>(std::llround(onset.after_sum));
      }
    }
    // Done with this function: free what it held now, so that the summary reuses it.
    if (detail != nullptr) *detail = FunctionDetail{};
    if (ChunkedVector<FunctionAcc>::LastOfChunk(id)) {
      functions_acc_.ReleaseChunkOf(id);
      // The summary's vector was reserved whole (its own mapping), so the heap pages that
      // the released accumulators and details free cannot hold it: handed back now, each
      // chunk of paths, they do not stay resident beside the finished summary, where a
      // file's peak was (xdit_sd_3.5: 37.8 -> 35.7 MiB, owlv2 33.6 -> 31.5).
      if (options_.offline) ReturnFreedMemoryToSystem();
    }
    out.functions.push_back(std::move(fs));
  }
  out.collective_groups = groups_.Build();
  return out;
}

// A function's time per iteration from its grid bins (a bin's time spread evenly over the
// bin), and where it steps up (step_onset.h). `per_iteration`: scratch, its.size() long.
StepOnset WindowSummarizer::Impl::FindOnset(const std::vector<std::pair<int64_t, double>>& bins,
                                            const std::vector<IterationSummary>& its,
                                            std::vector<double>& per_iteration) const {
  const int shift = grid_.shift();
  const double width = static_cast<double>(grid_.width());
  std::fill(per_iteration.begin(), per_iteration.end(), 0.0);
  for (const auto& [bin, ns] : bins) {
    const int64_t lo = bin << shift;
    const int64_t hi = (bin + 1) << shift;
    // The first iteration that ends after the bin starts (iterations are sorted by start).
    auto it = std::upper_bound(
        its.begin(), its.end(), lo,
        [](int64_t t, const IterationSummary& s) { return t < s.start_ns + s.duration_ns; });
    for (; it != its.end() && it->start_ns < hi; ++it) {
      const int64_t overlap =
          std::min(hi, it->start_ns + it->duration_ns) - std::max(lo, it->start_ns);
      if (overlap > 0) {
        per_iteration[static_cast<size_t>(it - its.begin())] +=
            ns * static_cast<double>(overlap) / width;
      }
    }
  }
  return FindStepOnset(per_iteration);
}

WindowSummarizer::WindowSummarizer(const FunctionTable* functions, SummarizerOptions options)
    : impl_(std::make_unique<Impl>(functions, options)) {}
WindowSummarizer::~WindowSummarizer() = default;

void WindowSummarizer::OnTrack(const TrackInfo& track) { impl_->OnTrack(track); }
void WindowSummarizer::OnEvent(const Event& event) { impl_->OnEvent(event); }
void WindowSummarizer::OnMetric(const MetricSample& sample) { impl_->OnMetric(sample); }
void WindowSummarizer::OnProcessGroup(const ProcessGroupInfo& group) {
  impl_->OnProcessGroup(group);
}
WorkerSummary WindowSummarizer::Finish() { return impl_->Finish(); }
size_t WindowSummarizer::peak_reorder_buffer() const { return impl_->peak_reorder_buffer(); }
size_t WindowSummarizer::detailed_functions() const { return impl_->detailed_functions(); }

}  // namespace perftracker
