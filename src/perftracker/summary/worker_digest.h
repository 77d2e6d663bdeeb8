// WorkerDigest: the compact first view of one worker's window (progressive disclosure,
// docs/server.md "Fleet scale"). At fleet size a collector sends this (at most
// kMaxDigestBytes on the wire) instead of the full WorkerSummary (30-40 KB); the server
// screens the digests of every worker (localize/digest_screen.h) and asks only the suspects
// and a sample of their peers for the full summary.
//
// What it keeps: the iterations and their breakdown, every worker-level metric's level and
// fluctuation (one per metric id, in id order: the screen compares each of them across
// peers, and a metric left out here is one no screen can flag a worker by), and the
// heaviest functions (by inclusive time, then by self time, then by critical-path time),
// each by the 64-bit hash of its call-path key with its calls and times. Names, sketches
// and per-function metrics stay on the collector: the screen compares numbers, and the
// full summaries that it asks for name things.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "perftracker/summary/worker_summary.h"

namespace perftracker {

// Budgets that keep an encoded digest under kMaxDigestBytes whatever the summary.
inline constexpr size_t kMaxDigestBytes = 4096;
inline constexpr size_t kMaxDigestFunctions = 48;
inline constexpr size_t kMaxDigestIterations = 24;
// Worker-level metric entries a digest may carry. MakeWorkerDigest keeps one per metric id
// this build knows (kNumMetrics, 31 now: a GPU host with every sampler has all of them), so
// it never drops one; the decoder's bound is larger, so that a server reads the digest of a
// newer collector that knows more ids (it leaves out the ids it does not know, counted).
// 64 entries are ~600 bytes of the kMaxDigestBytes (DigestCodec tests the largest).
inline constexpr size_t kMaxDigestMetrics = 64;
static_assert(kNumMetrics <= kMaxDigestMetrics, "a digest keeps every worker-level metric");
inline constexpr size_t kMaxDigestHostBytes = 128;

struct DigestFunction {
  uint64_t key_hash = 0;  // KeyHash(WorkerSummary::Key(i))
  EventKind kind = EventKind::kTorchOp;
  uint64_t count = 0;
  int64_t total_ns = 0;
  int64_t self_ns = 0;
  int64_t critical_ns = 0;
};

struct WorkerDigest {
  int32_t rank = -1;
  std::string host;
  int64_t window_start_ns = 0;
  int64_t window_end_ns = 0;
  bool has_device = false;
  // Iterations of the window in order; the last kMaxDigestIterations when there were more
  // (iteration_total says how many).
  std::vector<IterationSummary> iterations;
  uint32_t iteration_total = 0;
  std::vector<DigestFunction> functions;       // heaviest first (see the header comment)
  uint32_t function_total = 0;                 // functions in the full summary
  std::vector<FunctionMetric> worker_metrics;  // one per metric id, in id order
  uint64_t events = 0;
  uint64_t dropped_events = 0;

  // Median iteration duration; the window length without iterations (as WorkerSummary).
  int64_t median_iteration_ns() const;
  size_t iteration_count() const { return iteration_total == 0 ? 1 : iteration_total; }
};

// FNV-1a, 64 bits: the same key hashes alike on every host and build.
uint64_t KeyHash(std::string_view key);

WorkerDigest MakeWorkerDigest(const WorkerSummary& summary);

}  // namespace perftracker
