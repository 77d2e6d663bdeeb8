// RenderedFinding: a worded finding ready for ranking. Victims are filled in only for the
// findings that make the cut (FindingWording::FillVictims).
#pragma once

#include <cstdint>
#include <vector>

#include "perftracker/localize/diagnosis.h"

namespace perftracker::localize {

// A finding's named function as hardware evidence needs it to tell a slow function from a
// slow device (HardwareFindings::Context::function_times): its time per iteration on its
// worst culprit and its peers' median, in ns (-1: none named); its excess before any cap,
// the named function's and its merged parts' (the same layer's other kernels,
// WorkerFinding::excess()); its median call's duration over its peers' (0: unknown); and
// whether it runs on a device (a kernel).
struct NamedFunctionTime {
  float ns = -1;
  float peer_ns = -1;
  float excess_ns = -1;
  float p50_ratio = 0;
  bool on_device = false;
  // A late onset (JudgeLateOnsets): excess_ns is from the onset on, and p50_ratio compares
  // the median call from the onset on when the named function is the one that stepped; the
  // share of the window's iterations from the onset on turns excess_ns into a window mean.
  float onset_share = 1;
  // PT-STRAGGLER-UNTRACED: its untraced time sits before a function of the host thread (a
  // pause, code the profiler did not record: the thread's own), not before a kernel, copy or
  // collective (where a late transfer may start it).
  bool untraced_before_host_code = false;
};

struct RenderedFinding {
  Finding finding;
  bool wants_victims = false;
  std::vector<uint32_t> culprits;       // worker indices
  std::vector<uint32_t> extra_victims;  // workers whose wait findings it explained
  // The share of its loss in calls whose excess a later pipeline receive waited out (its
  // culprits' stage waits for another stage anyway): set by the rule that measured the loss
  // where it knows the calls (a link's transfers, FunctionSummary::slack_after_ns); the
  // pipeline-slack rule judges its cost to the job with it.
  float absorbed_share = 0;
  NamedFunctionTime function_time;
};

}  // namespace perftracker::localize
