#include "perftracker/wire/unknown_values.h"

#include <vector>

namespace perftracker {

void UnknownValues::Merge(const UnknownValues& other) {
  metrics += other.metrics;
  functions += other.functions;
  findings += other.findings;
  event_flags += other.event_flags;
  if (first.empty()) first = other.first;
}

std::string UnknownValues::Describe() const {
  std::vector<std::string> parts;
  const auto count = [&](uint64_t n, const char* one, const char* many) {
    if (n > 0) parts.push_back(std::to_string(n) + " " + (n == 1 ? one : many));
  };
  count(metrics, "metric value", "metric values");
  count(functions, "function", "functions");
  count(findings, "finding", "findings");
  count(event_flags, "event flag value", "event flag values");
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += i + 1 == parts.size() ? " and " : ", ";
    out += parts[i];
  }
  return out;
}

}  // namespace perftracker
