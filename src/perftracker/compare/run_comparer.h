// RunComparer: what got slower or faster from a baseline run to a current one, per function
// and per rank, and by how much per iteration.
//
// The runs are two windows of the same job (two trace sets, two stored windows, two report
// JSONs). Two healthy runs are never equal: on a loaded machine a run's iterations scatter by
// several percent and a later run may be slower as a whole. So a change must pass two bars:
//
// 1. Shared scale. Machine load, clock speed or a library that slows everything makes every
//    function slower by about the same factor. That factor is the median of the ratio
//    current / baseline self time over every (function, rank) pair the runs share whose self
//    time is at least kSharedMinShare of the iteration in both runs (each of its own run's
//    iteration: on a loaded machine preemptions inflate tiny operators 10-60x, and voting
//    with the larger share made two healthy runs at load 14 and 24 differ by x59.8 where
//    the iteration differed by x3), waits (below) left out: an unweighted median, so that one
//    function that changes, however large, is one vote (a weighted one followed a function
//    that held 46 % of the time from 255 ms to 50 ms and called everything 2.4x faster). A
//    function's change is measured beyond it: delta = current - scale x baseline (inclusive
//    time per iteration). The scale itself is reported as a change that every function
//    shares when its cost, (scale - 1) x the baseline iteration, passes the bar and the
//    median iteration moved beyond the bar the same way (on a loaded machine the ratios of a
//    few large functions scatter by 20 % while the iteration stays put). A factor that is not
//    such a change is noise and is not applied: delta = current - baseline.
//    Machine load. A shared factor that the machine's load explains is not a change of the
//    job: when both runs say how long their threads waited for a CPU (ProfileWorker::
//    cpu_stretch: a live window's host metrics, a trace's host-load event; on a VM its
//    host's steal time too), the ratio of the two stretches (median over ranks) is the
//    factor by which load alone lengthens CPU work.
//    When the factor's cost passes the bar and the load moved the same way, by at least
//    kLoadExplains of it (in log terms), the shared factor is reported as the machine's
//    (shared_explained_by_load, a note), not as a material change, and functions are
//    measured beyond it, whether or not the iteration moved with it (block2 slower on a
//    quieter machine moves the iteration the other way): a function slower on every rank
//    beyond the load is named, and the others are not called faster. The stretch is a model
//    (blocked time, e.g. waiting in a collective, is not stretched; several threads of one process
//    wait at once), hence a factor "explained" by a load that accounts for half of it; a
//    load that explains less leaves the factor material, with a note that says so. A factor
//    the load explains is applied whether or not its cost passes the bar.
//    Each rank's own load. The shared factor is the median rank's, but the ranks of one run
//    do not wait for a CPU alike on a loaded machine, and a rank whose load ratio is above
//    (below) the median has every CPU function stretched more (less). So rank r is measured
//    beyond scale_r = scale x its load ratio / the median load ratio (scale: the shared
//    factor when applied, else 1; a rank without a load ratio gets scale), and its bar
//    below uses scale_r (issue 11 §5: a baseline where ranks 0 and 1 waited 1.5x as long per
//    CPU second as ranks 2 and 3 named a healthy rank 3's aten::mm slower, and missed
//    block2's slowdown on rank 1).
// 2. Materiality per rank: |delta| >= max(material_share x scale x the rank's baseline
//    iteration, noise_sigmas x hypot(scale x standard error of the rank's mean iteration in
//    the baseline, the same in the current run)), scale being the rank's factor applied
//    (scale_r above; 1 when none is): delta compares the current run with the baseline multiplied
//    by it, so the baseline's noise and share are multiplied too. A slowdown measured on a machine
//    quieter than the baseline's (scale < 1) is not held to the busy baseline's noise; two
//    healthy runs, the current one busier, are held to more. The standard error is the
//    spread of one iteration (1.4826 x MAD of the iteration times) over sqrt(iterations).
//    A function's time per iteration scatters less than the whole iteration it is part of,
//    so the iteration's noise bounds it from above. On a quiet machine the share decides; on
//    a loaded one (iterations that scatter by 20 %) the noise does. What shifts between two
//    runs as a whole (load that comes and goes) is the shared scale's part, not a function's.
//    A rank's material delta is a change only when the job shares it or the rank does not:
//    the median delta over all ranks passes the median bar (every rank that passes is named),
//    or the rank's delta passes its bar beyond the median of the other ranks' deltas. A rank
//    that passes only as the high end of a change every rank made within the noise is not
//    named (a CPU-heavy GEMM stretched x1.6-1.7 on every rank of a busier run, beyond the
//    shared factor of x1.13, read +8.1 to +10.1 ms against a bar of 9.1 ms: "slower on rank 2").
//
// Waits. In synchronous training a rank's time in a collective (or a synchronization, or a
// torch communication operator) is the collective's own part, which every rank spends, plus
// the time it waits for the slowest rank; which rank arrives last, and so who waits, changes
// from run to run on a loaded machine (two healthy runs: one rank's all_reduce +76 ms per
// iteration, another's -70 ms). So a wait frame counts as its minimum over the ranks in each
// run, and its callers without the excess: a slower network raises every rank's wait and is
// found; a straggler's victims wait longer but the straggler's work is what is named.
//
// A slowdown shows in a function and in every caller above it. Functions whose delta is
// material on some rank form a forest along the call paths; from each root the comparer
// follows the child that explains at least kExplainsMost of its parent's delta, and names
// what the user wrote on that path: the deepest annotation (record_function), else the deepest
// Python function / data load / optimizer step, else the path's top (but the outermost wait
// on the path when there is one: that is communication); the path's end is where the time
// goes. Material functions outside the named subtree start new roots. Slowdowns and
// speedups are walked separately. A change's size is the median delta over the ranks on which
// it is material; changes are ranked by it.
#pragma once

#include "perftracker/compare/comparison.h"
#include "perftracker/compare/run_profile.h"
#include "perftracker/core/status.h"

namespace perftracker::compare {

struct CompareOptions {
  double material_share = 0.05;  // of the baseline iteration, as the localizer's default
  double noise_sigmas = 3;       // standard errors of the mean iteration
};

inline constexpr double kExplainsMost = 0.7;
// The share (in log terms) of the shared factor that the machine's load must explain.
inline constexpr double kLoadExplains = 0.5;
// A rank whose load ratio differs from the median rank's by at least this factor is listed in
// a note (every rank with a load ratio is measured beyond its own factor).
inline constexpr double kOwnLoadNoted = 1.1;

class RunComparer {
 public:
  explicit RunComparer(CompareOptions options = {}) : options_(options) {}

  // Both profiles must share one CallPathTree. Fails (InvalidArgument, one line) when they
  // cannot be two runs of one job: a run without workers, no rank in common, or no function
  // in common.
  StatusOr<Comparison> Compare(const RunProfile& baseline, const RunProfile& current) const;

 private:
  CompareOptions options_;
};

}  // namespace perftracker::compare
