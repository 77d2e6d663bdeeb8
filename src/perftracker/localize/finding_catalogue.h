// The finding catalogue: every code a Diagnosis can contain, with its category, what it
// means and what to do. Codes are stable once released (reports, dashboards and alerts key
// on them); docs/findings.md documents each one and a test checks the two agree.
#pragma once

#include <span>
#include <string_view>

#include "perftracker/localize/diagnosis.h"

namespace perftracker {

namespace finding_codes {
// Peer comparison: one worker (or a few) unlike its peer group.
inline constexpr std::string_view kStragglerCompute = "PT-STRAGGLER-COMPUTE";
inline constexpr std::string_view kStragglerData = "PT-STRAGGLER-DATA";
inline constexpr std::string_view kStragglerComm = "PT-STRAGGLER-COMM";
inline constexpr std::string_view kStragglerSync = "PT-STRAGGLER-SYNC";
inline constexpr std::string_view kStragglerGc = "PT-STRAGGLER-GC";
inline constexpr std::string_view kStragglerMemcpy = "PT-STRAGGLER-MEMCPY";
inline constexpr std::string_view kStragglerUntraced = "PT-STRAGGLER-UNTRACED";
inline constexpr std::string_view kFunctionOnlyOnSome = "PT-FUNCTION-ONLY-ON-SOME";
// A straggler whose host shows CPU contention (run-queue delay far above its peers').
inline constexpr std::string_view kCpuContention = "PT-CPU-CONTENTION";
// Live mode: the job stopped making progress (HangAnalyzer).
inline constexpr std::string_view kHang = "PT-HANG";
// Expectations: problems every worker shares, found without peers.
inline constexpr std::string_view kHostBound = "PT-HOST-BOUND";
inline constexpr std::string_view kSyncCritical = "PT-SYNC-CRITICAL";
inline constexpr std::string_view kDataCritical = "PT-DATA-CRITICAL";
inline constexpr std::string_view kGc = "PT-GC";
inline constexpr std::string_view kPageableMemcpy = "PT-PAGEABLE-MEMCPY";
inline constexpr std::string_view kSerializedMemcpy = "PT-SERIALIZED-MEMCPY";
// Hardware evidence (hardware_findings.h): the GPU, a link or a NIC at fault.
inline constexpr std::string_view kGpuThrottled = "PT-GPU-THROTTLED";
inline constexpr std::string_view kGpuSlow = "PT-GPU-SLOW";
inline constexpr std::string_view kLinkDegraded = "PT-LINK-DEGRADED";
inline constexpr std::string_view kNicDegraded = "PT-NIC-DEGRADED";
inline constexpr std::string_view kNicFlapping = "PT-NIC-FLAPPING";
inline constexpr std::string_view kNetSlowLink = "PT-NET-SLOW-LINK";
inline constexpr std::string_view kLaunchBound = "PT-LAUNCH-BOUND";
// The input itself.
inline constexpr std::string_view kIncompleteData = "PT-INCOMPLETE-DATA";
}  // namespace finding_codes

struct CatalogueEntry {
  std::string_view code;
  FindingCategory category;
  // True when a finding's category follows the kind of the function at fault (the one
  // named in it) instead of `category`, which is then the most common case.
  bool category_from_function = false;
  std::string_view meaning;  // one sentence
  std::string_view action;   // what to do first
};

std::span<const CatalogueEntry> FindingCatalogue();
// nullptr for an unknown code.
const CatalogueEntry* FindCatalogueEntry(std::string_view code);

}  // namespace perftracker
