// PerfettoWriter: a window's raw events, every rank on one timeline, with the diagnosis drawn
// on it, as Trace Event Format JSON (what Perfetto UI and chrome://tracing open).
//
// Layout: one process per rank (pid = rank, named "rank N (host)"), one thread per track
// (host thread, GPU stream, communicator; thread_name metadata), and per finding one
// "perftracker #K CODE" track on each rank it involves:
//   - on a culprit rank, a slice over each call of the finding's function (overlapping calls
//     merged), args = code, message, function, resource, time lost;
//   - on a victim rank, a "waits for rank C" slice over the collective it waited in, and a
//     flow arrow ("ph" "s" / "f") from the culprit's call to that wait.
// Events keep the Kineto category their kind comes from (cpu_op, kernel, gpu_memcpy, ...), so
// perftracker's own importer reads an exported rank back as the same events.
//
// Clock alignment: ranks on different hosts have different clocks. A collective ends at about
// the same moment on every rank that takes part, so collective end times are sync points:
// the calls of the same collective (same name) on rank r and on the reference rank (the
// lowest) are paired in order, and rank r's offset is the median of their end differences.
// The pairing tolerates a few calls more or fewer at either end (a live window cut by a
// skewed clock): of the call shifts within +-3, the one whose median difference is nearest
// the prior is taken (prior: 0 for clocks counting from the epoch, which NTP keeps within
// milliseconds; the difference of the first events for relative clocks). This assumes the
// true skew is below half a collective's period. Host-side and device-side ends are
// estimated apart and the side whose differences agree best (smallest spread) is used:
// device-side ends (the collective's kernel) are the true sync points, while host-side ends
// of asynchronous collectives are enqueue times. Ranks on one host with epoch clocks read
// one clock: they get one offset (the median of theirs; 0 on the reference's host). Every
// timestamp of rank r is written minus its offset; the offset, the number of sync points and
// the spread of the differences (their median absolute deviation: how far a collective's end
// may sit from the reference's after alignment) are in the rank's metadata (process_labels,
// "perftracker_rank" args) and in otherData. A rank with no collective in common with the
// reference keeps offset 0, and says so. Traces whose times are relative (each rank's start
// near 0) could get negative times: every rank is then shifted by the same amount
// (otherData.time_shift_ns), which keeps the alignment.
//
// Size cap: at most options.max_events slices are written (2 M by default: a file Perfetto UI
// and chrome://tracing still open). Beyond it each rank keeps its share of the cap, chosen
// as its longest events (short ones are invisible at a window's zoom and dropping them keeps
// nesting intact); the rest is aggregated per track into a count and a total time (the
// thread_name args) and per rank and in total (otherData), never silently cut. Finding
// annotations are drawn from all events, before the cap.
//
// Nesting: slices of one track must nest for a viewer to draw them; Kineto's µs times often
// end a child 1 µs after its parent. A slice that starts inside another and ends past it is
// written clipped at that one's end, counted (events_clipped, clipped_ns: in the rank's
// metadata and otherData).
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "perftracker/core/status.h"
#include "perftracker/localize/diagnosis.h"
#include "perftracker/report/rank_trace.h"

namespace perftracker {

struct PerfettoOptions {
  size_t max_events = 2'000'000;         // trace slices written, all ranks together
  size_t max_slices_per_finding = 4096;  // merged call intervals drawn per finding and rank
  size_t max_flows_per_finding = 64;     // culprit -> victim arrows per finding
  std::string generator = "perftracker diagnose --perfetto";  // otherData.generator
};

struct PerfettoRankAlignment {
  int32_t rank = -1;
  int64_t offset_ns = 0;   // subtracted from every timestamp of this rank
  size_t sync_points = 0;  // collective ends paired with the reference rank's
  // Median absolute deviation of the paired end differences: how far a single collective's
  // end may sit from the reference's after alignment (large when the ends are not in step,
  // e.g. asynchronous collectives recorded at their enqueue).
  int64_t spread_ns = 0;
  std::string host;          // the rank's host ("" when unknown)
  bool device_side = false;  // the sync points are device-side collective ends (kernels)
  size_t shifted_keys = 0;   // collectives whose calls were paired with a shift (see below)
  // > 1: the offset is shared by this many ranks of the host (one clock), the median of
  // their estimates (0 on the reference's host).
  size_t host_ranks = 0;
};

struct PerfettoStats {
  uint64_t events_total = 0;       // raw events of all ranks
  uint64_t events_written = 0;     // as slices
  uint64_t events_aggregated = 0;  // beyond the cap: counted per track, not drawn
  // Slices that started inside another of their track and ended past it, written clipped at
  // its end (slices of a track must nest), and the time cut off.
  uint64_t events_clipped = 0;
  int64_t clipped_ns = 0;
  uint64_t annotations = 0;        // finding slices and instants
  uint64_t flows = 0;              // culprit -> victim arrows
};

class PerfettoWriter {
 public:
  explicit PerfettoWriter(PerfettoOptions options = {}) : options_(options) {}

  // `rank` must outlive Write(); ranks are written in rank order.
  void AddRank(const RankTrace* rank);

  // The per-rank clock offsets (reference: the lowest rank), as Write() applies them.
  std::vector<PerfettoRankAlignment> EstimateAlignment() const;

  // Writes the whole JSON document; fails only when `out` fails.
  Status Write(const Diagnosis& diagnosis, std::ostream* out);

  const PerfettoStats& stats() const { return stats_; }

 private:
  PerfettoOptions options_;
  std::vector<const RankTrace*> ranks_;
  PerfettoStats stats_;
};

}  // namespace perftracker
