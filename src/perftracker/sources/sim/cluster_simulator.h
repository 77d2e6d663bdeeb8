// ClusterSimulator: whole-cluster, per-worker Event / MetricSample streams of a synchronous
// GPU training job (data, tensor and pipeline parallel), with natural noise and injected
// faults, from a Scenario. The streams are what the real sources emit (Kineto / CUPTI-like
// launches and kernels correlated to user annotations, NCCL collectives with bytes,
// NVML-like GPU samples, NIC samples per host), so they go through the real
// WindowSummarizer and Localizer.
//
// Model. Every rank runs the same program per iteration: data loading (host), a forward
// and a backward pass over `microbatches` x `layers_per_stage` layers (a kernel launched by
// the host, then the layer's kernel on the compute stream and, with tp > 1, a tensor-
// parallel all-reduce over NVLink), pipeline send / recv between stages (GPipe order:
// every stage's forward, then the backward in reverse stage order), the data-parallel
// gradient all-reduce in two buckets over the hosts' NICs, an optimizer step and a
// host-device synchronization that ends the iteration. Run() computes all ranks' timelines
// in lockstep, op by op, so synchronous semantics hold exactly: a collective ends when its
// last member arrives plus the transfer time at the slowest member's link rate, and the
// members that arrived early wait inside it (victims look like waiting, culprits like
// work). Each member's own transfer starts when the last member arrives and runs at its
// link's rate: a degraded link is continuously busy at its low rate (flat), healthy links
// burst and idle.
//
// Noise (seeded, deterministic): per-rank persistent speed (noise / 3), per-op jitter
// (noise), rare small hiccups, jitter on sampled metrics.
//
// Cost: O(ranks x ops) time; events are kept per rank (40 bytes each, about 60 per
// iteration and rank) and metric samples are generated on the fly in Emit().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "perftracker/core/event_sink.h"
#include "perftracker/core/function_table.h"
#include "perftracker/sources/sim/scenario.h"

namespace perftracker {

class ClusterSimulator {
 public:
  explicit ClusterSimulator(const Scenario& scenario);
  ~ClusterSimulator();
  ClusterSimulator(const ClusterSimulator&) = delete;
  ClusterSimulator& operator=(const ClusterSimulator&) = delete;

  // Computes every rank's timeline. Call once before Emit().
  void Run();

  int32_t num_ranks() const;
  std::string HostName(int32_t rank) const;
  // Resolves the function ids of emitted events (shared, read-only after Run()).
  const FunctionTable& functions() const;
  // Simulated time at which the earliest fault starts (ns since job start), -1 without.
  int64_t fault_onset_ns() const;
  // Events emitted for all ranks.
  uint64_t total_events() const;
  // The job's iteration times in order (ns): iteration k's is the mean over the ranks of
  // their k-th iteration (ProfilerStep). After Run(). What a fault costs is the difference
  // from the same scenario without it (`bench accuracy`'s counterfactual runs).
  std::vector<double> IterationNs() const;

  // Replays one rank's tracks, events and metric samples into `sink`. Safe to call
  // concurrently for different ranks after Run().
  void Emit(int32_t rank, EventSink& sink) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace perftracker
