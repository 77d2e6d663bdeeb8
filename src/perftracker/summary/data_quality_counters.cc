#include "perftracker/summary/data_quality_counters.h"

namespace perftracker {

std::string_view DataQualitySeverityName(DataQualitySeverity severity) {
  switch (severity) {
    case DataQualitySeverity::kInfo:
      return "info";
    case DataQualitySeverity::kError:
      return "error";
    case DataQualitySeverity::kDataLoss:
      return "data_loss";
  }
  return "info";
}

bool HasDataQualityProblem(const SummaryStats& stats) {
  for (const DataQualityCounter& c : kDataQualityCounters) {
    if (stats.*c.count > 0) return true;
  }
  return false;
}

uint64_t LostEvents(const SummaryStats& stats) {
  uint64_t lost = 0;
  for (const DataQualityCounter& c : kDataQualityCounters) {
    if (c.severity != DataQualitySeverity::kInfo) lost += stats.*c.count;
  }
  return lost;
}

}  // namespace perftracker
