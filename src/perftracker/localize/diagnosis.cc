#include "perftracker/localize/diagnosis.h"

namespace perftracker {

std::string_view FindingCategoryName(FindingCategory category) {
  switch (category) {
    case FindingCategory::kCompute: return "compute";
    case FindingCategory::kDataLoading: return "data_loading";
    case FindingCategory::kCommunication: return "communication";
    case FindingCategory::kSynchronization: return "synchronization";
    case FindingCategory::kHostOverhead: return "host_overhead";
    case FindingCategory::kGc: return "gc";
    case FindingCategory::kCpuContention: return "cpu_contention";
    case FindingCategory::kGpuHardware: return "gpu_hardware";
    case FindingCategory::kMemory: return "memory";
    case FindingCategory::kHang: return "hang";
    case FindingCategory::kDataQuality: return "data_quality";
  }
  return "unknown";
}

}  // namespace perftracker
