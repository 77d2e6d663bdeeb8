// HardwareFindings: names the hardware at fault from the metrics the sources sample (NVML
// clocks and throttle reasons, NVLink / PCIe / NIC throughput, link state) next to the
// time each worker spends. Part of the Localizer (DESIGN.md "How localization thinks", 5).
//
// Per worker it keeps one compact record (about 100 bytes): device compute per iteration,
// SM clock and its maximum, throttle reasons, NIC link state, and for each link kind (NIC,
// NVLink, PCIe) the time per iteration of the functions that move bytes over it with the
// time-weighted mean and mean square of the link's throughput during them.
//
// Rules (thresholds in hardware_findings.cc):
//  - Slow device: a worker's device compute per iteration exceeds its peer group's median
//    by a robust outlier margin. Compared: the device compute less the device code only a
//    minority of the group runs (a first or last pipeline stage's embedding or head: that
//    PT-FUNCTION-ONLY-ON-SOME finding, not a slower device); with: the group's workers
//    without clock evidence (a throttled half of a group is no reference). With clock
//    evidence (SM clock well below its maximum and the job's median clock, or throttle
//    reasons set where the job's median has none) it is PT-GPU-THROTTLED; without it, and
//    unless one function explains most of the excess (then the peer comparison's
//    PT-STRAGGLER-COMPUTE stands, or its PT-FUNCTION-ONLY-ON-SOME on the host: extra code,
//    not a slower device), PT-GPU-SLOW. A kernel that stepped up inside the window
//    (late_onset_rule.h) is compared per call from its onset on: a device slow from
//    iteration 8 of 12 leaves the window's median call a healthy one. Compute straggler
//    findings on those workers are absorbed (their function becomes evidence).
//  - Degraded link: a transfer over a healthy link runs at the link's rate; on a degraded
//    link it runs continuously at a low rate (flat), and the workers on healthy links burst
//    and then wait for it. The "burst rate" E[x^2] / E[x] of the throughput samples during
//    the transfers is the rate a link reaches when it sends; a worker whose burst rate is
//    below kDegradedRateShare of the job's median is on a degraded link, and loses
//    bytes / rate - bytes / median rate per iteration (the bytes its transfer-carrying
//    functions move on the wire per iteration: twice the payload for collectives, as a
//    ring all-reduce sends; D their time per iteration). The NIC's samples are transmit rates: a
//    point-to-point receive, which transmits nothing and mostly waits for its sender, is not in its
//    pool, and a point-to-point send moves its payload once. NIC: PT-NIC-DEGRADED; NVLink or PCIe:
//    PT-LINK-DEGRADED. The burst rate must also be consistent with the bytes moved (bytes / rate at
//    most kConsistentShare x D): a worker that mostly waited inside its collectives has only
//    background samples there, and a low rate that could not have moved its bytes is no evidence.
//    A host-wide link (NIC, NVLink) of a host holding at least kLargeHostShare of the workers
//    that use the link is compared with the other hosts' links, not with a median its own ranks
//    set. A link that degrades inside the window (its largest transfer function that steps up,
//    FunctionSummary::onset_iteration, does so at iteration k of n) is judged by its rate from
//    the onset on (RateAfterOnset: the burst rate is the byte-weighted mean of the rates) and
//    costs per iteration from the onset on, at most the step its transfer function took there.
//  - Slow network link (TCP, per process: TcpSampler): a worker's delivery rate (the bytes
//    it delivered over the time they took at the kernel's rate samples: a byte-weighted
//    harmonic mean, which the few samples of a burst at line rate cannot inflate as they
//    inflate the samples' mean) is below kSlowLinkShare of its peers' median, and the bytes
//    it sends per iteration take at that rate at least kSlowLinkExplains of its
//    communication time: PT-NET-SLOW-LINK. A receiver that acknowledges late (it is behind the slow
//    link) does not lower its senders' rate sample, so the rank behind the link is the one named.
//  - Flapping NIC: link-down samples (kNicLinkUp < 1 on average) during the window:
//    PT-NIC-FLAPPING.
//  Link findings absorb the peer comparison's communication / memcpy straggler findings
//  (they are the symptom), and take the larger of the two time estimates.
//  - Launch-bound: a PT-HOST-BOUND job whose kernels are mostly tiny (median call below
//    kTinyKernelNs) becomes PT-LAUNCH-BOUND.
// Findings about several workers are grouped by host: a host all of whose workers are
// culprits is named as the host ("node0003 (all 8 ranks)").
//
// Intra-node and inter-node traffic (issue 11). A collective whose process group has all its
// ranks on one host (the summaries' host names; summary/collective_groups.h) moves its bytes
// over NVLink, not the NIC: a tensor-parallel all-reduce inside a host that ran while a
// data-parallel one kept the NIC busy would otherwise count its time and bytes (often the
// larger part) in the NIC's pool. So the NIC's pool, the NIC's time (PT-NIC-FLAPPING) and the
// communication time PT-NET-SLOW-LINK compares a rank's bytes with take the inter-node part
// only, and the NVLink pool the intra-node part only. A group spans hosts when two of its
// ranks are on different hosts; a call whose group is not known (an older summary, a source
// without groups, ranks without a host name or outside the job, a list cut short) counts in
// both pools as before. SplitByHost() sorts them once every worker is added.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "perftracker/localize/diagnosis.h"
#include "perftracker/localize/rendered_finding.h"
#include "perftracker/localize/sketch_median.h"
#include "perftracker/summary/worker_summary.h"

namespace perftracker {

class HardwareFindings {
 public:
  struct Context {
    double iteration_ns = 0;
    double material_ns = 0;
    double report_ns = 0;
    const std::vector<uint32_t>* worker_group = nullptr;  // peer group of each worker
    // Per finding given to Apply (same order; may be null): its named function's times.
    const std::vector<localize::NamedFunctionTime>* function_times = nullptr;
  };
  struct Added {
    Finding finding;
    std::vector<uint32_t> culprits;  // worker indices (Add order)
    // The share of its loss that fell where the culprits' pipeline stage waits anyway (the
    // least over its culprits; RenderedFinding::absorbed_share).
    float absorbed_share = 0;
  };

  // Call once per worker, in the Localizer's Add order. `p50`, when given, holds by function
  // index the p50 call duration JobTable::Add just computed (JobTable::LastP50s; NaN where it
  // computed none): each kernel's median is then not computed twice.
  void Add(const WorkerSummary& worker, std::span<const double> p50 = {});
  // Once all workers are added, before Apply: the collectives of known process groups go to
  // the NIC (inter-node) or NVLink (intra-node) pool.
  void SplitByHost();

  // Relabels `findings` in place, sets drop[i] for the ones it absorbs, returns new ones.
  std::vector<Added> Apply(const Context& ctx, const std::vector<Finding*>& findings,
                           std::vector<bool>& drop) const;

 private:
  struct Pool {
    float time_ns = 0;  // per iteration
    float mean = 0;     // time-weighted mean throughput, bytes/s
    float mean_sq = 0;  // time-weighted mean of squares
    float bytes = 0;    // bytes the functions moved, per iteration
    // Of time_ns, the time a wait in the next pipeline receive followed (before any send):
    // FunctionSummary::slack_after_ns.
    float slack_ns = 0;
    // Where the time of its largest transfer function that steps up inside the window does
    // (FunctionSummary::onset_iteration; 0: none does) and the worker's iterations.
    uint32_t onset = 0;
    uint32_t iterations = 0;
    // That function's time per iteration from the onset on minus before it (0: no onset).
    float step_ns = 0;
    float BurstRate() const { return mean > 0 ? mean_sq / mean : 0; }
  };
  // A pool's sums while a worker's calls are added (time-weighted).
  struct Acc {
    double t = 0, s = 0, s2 = 0, bytes = 0, slack = 0;
    // Of its transfer functions whose time steps up inside the window, the largest: its time,
    // its onset (FunctionSummary::onset_iteration) and its time from there on (onset_ns).
    // A function that mostly waits for its peers rarely shows the step; one that moves its own
    // bytes does.
    double largest_t = 0;
    uint32_t onset = 0;
    double onset_t = 0;
    void Add(const Acc& o) {
      t += o.t;
      s += o.s;
      s2 += o.s2;
      bytes += o.bytes;
      slack += o.slack;
      TakeOnset(o.largest_t, o.onset, o.onset_t);
    }
    void TakeOnset(double function_t, uint32_t function_onset, double function_onset_t) {
      if (function_onset == 0 || function_t <= largest_t) return;
      largest_t = function_t;
      onset = function_onset;
      onset_t = function_onset_t;
    }
  };
  // A worker's traffic in one process group, until the job's hosts are known.
  struct GroupTraffic {
    uint32_t group = 0;  // index in groups_
    Acc nic, nvlink;
    double collective_ns = 0;  // its collectives' time (the comparable ones: see Add)
  };
  // What a worker whose summary names process groups keeps for SplitByHost.
  struct Grouped {
    uint32_t worker = 0;
    double iters = 1;
    Acc nic, nvlink;           // calls of no known group
    double collective_ns = 0;  // all its (comparable) collectives' time
    std::vector<GroupTraffic> groups;
  };
  struct JobGroup {
    std::vector<int32_t> ranks;
    uint32_t size = 0;
    // Its backend moves every byte through sockets (gloo): no NVLink path inside a host, so
    // never intra-node (see SplitByHost).
    bool sockets = false;
  };
  static Pool ToPool(const Acc& a, double iters);
  static double RateAfterOnset(const Pool& p, double burst, double median);
  static bool SocketsOnly(const CollectiveGroup& group);
  struct Record {
    int32_t rank = -1;
    uint32_t host = 0;
    float compute_ns = 0;
    // Where its device compute per iteration steps up and stays up (FindStepOnset over the
    // iterations; 0: no step), its level from then on and its iterations.
    uint32_t compute_onset = 0;
    float compute_after_ns = 0;
    uint32_t compute_iterations = 0;
    // How much longer its iterations are from that onset on than before it (median against
    // median): what the job loses per iteration by whatever began there, at most.
    float iteration_step_ns = 0;
    float clock = -1, clock_max = -1, throttle = -1, temperature = -1, power = -1;
    float link_up = -1;
    float tcp_rate = -1;      // its TCP delivery rate, bytes/s (see Add)
    float tcp_send = -1;      // bytes/s its TCP connections delivered (mean)
    float comm_ns = 0;        // communication per iteration (inter-node: SplitByHost)
    float intra_node_ns = 0;  // collectives inside one host per iteration (SplitByHost)
    float iteration_ns = 0;   // mean iteration
    float tiny_kernel_share = -1;
    Pool nic, nvlink, pcie;
  };

  std::string HostPhrase(const std::vector<uint32_t>& culprits) const;
  // Keeps the culprits of a host-wide link (NIC, NVLink) only where their host is named as
  // a whole, and adds the host's other ranks that use the link.
  void WholeHosts(const Pool Record::*pool, std::vector<uint32_t>& culprits,
                  std::vector<float>& lost) const;
  Finding LinkFinding(const Context& ctx, const char* link, const std::vector<uint32_t>& culprits,
                      const std::vector<float>& lost, float median_rate,
                      const Pool Record::*pool) const;

  std::vector<Record> records_;
  std::vector<Grouped> grouped_;
  std::vector<JobGroup> groups_;
  std::map<std::pair<std::vector<int32_t>, uint32_t>, uint32_t> group_index_;
  std::vector<std::string> hosts_;
  std::vector<uint32_t> host_workers_;
  std::unordered_map<std::string, uint32_t> host_index_;
  // A kernel's p50 when Add() is given none (QuantileSketch::Quantile(0.5) with memoized
  // bucket values: std::pow per kernel was a tenth of the localizer's ingest with 120 kernels
  // a worker).
  localize::SketchMedian sketch_median_;
};

}  // namespace perftracker
