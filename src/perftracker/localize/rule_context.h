// RuleContext: what every localizer rule reads (a non-owning view built by Localizer::Finish
// once the job table is complete and the peer groups are known), and the constants several
// rules share. Tests can build one by hand around a small JobTable.
#pragma once

#include <cstddef>

#include "perftracker/localize/job_table.h"
#include "perftracker/localize/localizer.h"
#include "perftracker/localize/peer_assignment.h"

namespace perftracker::localize {

// Peer statistics need at least this many workers in a group.
inline constexpr size_t kMinPeers = 3;
// A child anomaly "explains" its parent's when it carries this share of the excess (also:
// extra GC explains a straggler's excess).
inline constexpr double kExplainsMost = 0.7;
// A callee that is no outlier of its own carries its anomalous caller's excess only when it
// holds more than this share of that (anomalous) excess: a majority, so never noise beside a
// caller whose excess lies in its own code (call_path_collapse.h).
inline constexpr double kCarriesMajority = 0.5;
// MAD floors (see robust_stats.h).
inline constexpr double kScaleRelativeFloor = 0.01;
inline constexpr double kScaleAbsoluteFloorNs = 1000;
// A wait anomaly is explained by another worker's work anomaly this large (relative);
// a worker is a victim when it waits this share of the culprit's excess longer.
inline constexpr double kVictimShare = 0.5;
// Lists of workers in a finding are capped; the full count goes into the evidence.
inline constexpr size_t kMaxListedWorkers = 1024;

struct RuleContext {
  const JobTable* job = nullptr;
  const LocalizerOptions* options = nullptr;
  const PeerAssignment* peers = nullptr;
  double iteration_ns = 0;  // the job's median iteration
  double material_ns = 0;   // options->material_share of it
  double report_ns = 0;     // options->report_share of it
  // No worker completed an iteration (a hang window, the job's start or end): each worker's
  // one "iteration" is its whole window (JobTable divides by one), so iteration_ns is the
  // median window's wall time, a time is the window's, a share is of its wall time, and a
  // finding is material when it takes material_share of that wall time. Rules word it so:
  // nothing is "per iteration" then (the phrases below).
  bool window_only = false;
  // After a time: "/iter", or " in the window".
  const char* per() const { return window_only ? " in the window" : "/iter"; }
  // After a count or a label: " per iteration", or " in the window".
  const char* per_word() const { return window_only ? " in the window" : " per iteration"; }
  // After a share: "of the iteration", or "of the window's wall time".
  const char* of() const { return window_only ? "of the window's wall time" : "of the iteration"; }
};

}  // namespace perftracker::localize
