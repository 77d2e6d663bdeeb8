// Scenario: a training job, the faults injected into it and the diagnosis expected, read
// from a JSON file (docs/scenarios.md). The same format drives both executors: the
// simulator (sources/sim, whole clusters of any size) and real jobs on this machine
// (`perftracker bench accuracy --executor real`).
//
// Validation is strict and happens once, here: an unknown key, a wrong type, a fault that
// targets a rank or host the job does not have, or a parallel layout that does not multiply
// up to the ranks is one error line naming the file and the field (`scenarios/x.json:
// faults[1].ranks[0]: rank 9 is not in [0, 8)`).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "perftracker/core/status.h"

namespace perftracker {

enum class ScenarioExecutor : uint8_t { kSim = 0, kReal = 1 };

enum class FaultKind : uint8_t {
  // Simulated GPU-cluster faults.
  kGpuThrottle,     // lower SM clock, throttle reason bits, longer kernels
  kGpuSlow,         // longer kernels without hardware evidence (a slower part, a neighbour)
  kNvlinkDegraded,  // intra-node collectives slower, low NVLink throughput
  kPcieDegraded,    // host<->device copies slower, low PCIe throughput
  kNicDegraded,     // inter-node transfers of one host capped low (flat)
  kNicFlapping,     // the host's NIC goes down for periods (link-down samples)
  kLaunchBound,     // every rank: many tiny kernels, launch overhead leaves the GPU idle
  kHostSync,        // every rank: host-device synchronizations with slow wake-ups
  kUntracedPause,   // the host thread stalls outside every traced function (a sleep)
  // Faults both executors know.
  kSlowData,       // one rank's data loading is slower
  kSlowDataAll,    // every rank's data loading is too slow
  kSlowCompute,    // extra compute in one module on one rank
  kCpuContention,  // one rank starved of CPU
  kGc,             // garbage-collector pauses on one rank
  kGcAll,          // garbage-collector pauses on every rank
  kHang,           // real only: one rank stops
  kNetRateLimit,   // real only: one rank behind a rate-limited link (netns + tc tbf)
  kPause,          // real only: one rank pauses `magnitude` s in a plain function, now and then

  // Real only: code only the fault ranks run (magnitude: rounds of it per step).
  kExtraAnnotation,  // in a record_function block
  kExtraFunction,    // in a plain Python function
};

std::string_view FaultKindName(FaultKind kind);

struct ScenarioFault {
  FaultKind kind = FaultKind::kGpuThrottle;
  std::vector<int32_t> ranks;  // targeted ranks (union with the ranks of `hosts`)
  std::vector<int32_t> hosts;
  // Onset: sim: iteration index; real: training step.
  int32_t start = 0;
  // Strength: slowdown factor for time-like faults (2 = twice as long), see docs.
  double magnitude = 2.0;
};

struct ScenarioJob {
  int32_t ranks = 8;
  int32_t dp = 0, tp = 1, pp = 1;  // dp = ranks / (tp * pp) when left out
  int32_t gpus_per_host = 8;
  double model_params_b = 7;    // billions of parameters (sets bytes and compute)
  int32_t iterations = 12;      // sim: iterations in the diagnosed window
  int32_t steps = 300;          // real: training steps
  int32_t loader_workers = 0;   // real: DataLoader worker processes per rank
  double teardown_seconds = 0;  // real: work after destroy_process_group() before exiting
  int32_t microbatches = 2;
  int32_t layers_per_stage = 4;
  double noise = 0.03;  // sim: relative jitter of durations
  // sim: false = the trace holds device activity only (no host thread events; the
  // iteration markers are the GPU-side twins), as a GPU-only Kineto export.
  bool host_trace = true;
  // sim: true = each collective names its process group (tp, dp, pp: the global ranks of its
  // members, as torch 2.x Kineto traces' "Process Group Ranks" do); false = no groups, as an
  // older trace.
  bool process_groups = false;
  // real: "" (every rank runs the same model) or "two_models" (the first half of the ranks
  // trains one model, the second half another: two roles in one job).
  std::string roles;
  uint64_t seed = 1;
  int32_t hosts() const { return (ranks + gpus_per_host - 1) / gpus_per_host; }
  int32_t HostOf(int32_t rank) const { return rank / gpus_per_host; }
};

// Whether an expected finding must be material. The ground truth decides: a fault that costs
// the job a material share of the iteration must be a material finding; one the job absorbs
// (hidden in a pipeline bubble or in slack before a collective) must be named, but as minor;
// between the two, either is right.
enum class ExpectedMateriality : uint8_t { kMaterial = 0, kMinor = 1, kEither = 2 };

// One expected finding: its code (or only its category) and its culprit workers.
struct ExpectedFinding {
  std::string code;              // "" = any code of `category`
  std::string category;          // FindingCategoryName, "" = any category of `code`
  std::vector<int32_t> workers;  // exact culprit set; empty = not checked (job-wide findings)
  ExpectedMateriality material = ExpectedMateriality::kMaterial;
};

struct Scenario {
  std::string path;
  std::string name;
  std::string description;
  ScenarioExecutor executor = ScenarioExecutor::kSim;
  ScenarioJob job;
  std::vector<ScenarioFault> faults;
  // Healthy: no material finding is expected. Otherwise the top-ranked findings (as many
  // as listed) must be these, in any order, each material or minor as it says.
  bool healthy = false;
  std::vector<ExpectedFinding> expected;
  // Findings that must not be material (e.g. PT-HANG for a job that only pauses).
  std::vector<ExpectedFinding> absent;
  // Real: judge the diagnosis `perftracker run` prints when the job has ended (the most
  // important window's), instead of the first report after the fault's onset.
  bool judge_final = false;

  // Every rank a fault targets (its ranks and the ranks of its hosts), sorted.
  std::vector<int32_t> TargetRanks(const ScenarioFault& fault) const;
};

// Parses and validates one scenario. `path` names the file in error messages.
StatusOr<Scenario> ParseScenario(std::string_view json_text, const std::string& path);
StatusOr<Scenario> LoadScenario(const std::string& path);

}  // namespace perftracker
