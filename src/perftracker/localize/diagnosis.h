// Diagnosis: the localizer's verdict for one window of one job: ranked findings, each with
// a stable catalogue code, the workers, the function, the resource, the time it costs and
// the evidence a person can check against the report.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace perftracker {

enum class FindingCategory : uint8_t {
  kCompute = 0,        // a worker's own computation is slow (straggler compute)
  kDataLoading = 1,    // data loading / input pipeline
  kCommunication = 2,  // collectives, network, NVLink/PCIe
  kSynchronization = 3,// host<->device synchronization on the critical path
  kHostOverhead = 4,   // Python / launch overhead leaving the device idle
  kGc = 5,             // garbage-collector pauses
  kCpuContention = 6,  // run-queue delay, noisy neighbours
  kGpuHardware = 7,    // throttled / slow GPU
  kMemory = 8,         // memcpy patterns, pageable copies
  kHang = 9,
  kDataQuality = 10,   // the input itself (missing workers, dropped events)
};

std::string_view FindingCategoryName(FindingCategory category);

struct Evidence {
  std::string label;  // "p50 duration on rank 2", "median p50 of peers"
  std::string value;  // "41.2 ms"
};

struct Finding {
  std::string code;  // stable catalogue code, e.g. "PT-STRAGGLER-FUNCTION" (docs/findings.md)
  FindingCategory category = FindingCategory::kCompute;
  std::string title;               // one line a person reads first
  std::vector<int32_t> workers;    // culprit ranks (empty = all workers)
  std::vector<int32_t> victims;    // ranks that wait for the culprits, if any
  std::string function;            // display name of the function at fault ("" if none)
  std::string function_key;        // its portable key (call path)
  std::string resource;            // "CPU", "GPU", "network", "data loader", ...
  double lost_ns_per_iteration = 0;
  double lost_share = 0;           // lost_ns_per_iteration / median iteration time
  bool material = false;           // lost_share at or above the materiality threshold
  std::vector<Evidence> evidence;
};

struct Diagnosis {
  int32_t num_workers = 0;
  double median_iteration_ns = 0;
  std::vector<Finding> findings;   // ranked: most time lost first; material ones before others
  std::vector<std::string> notes;  // skipped inputs, missing workers, data-quality remarks

  bool has_material_finding() const {
    for (const auto& f : findings) if (f.material) return true;
    return false;
  }
};

}  // namespace perftracker
