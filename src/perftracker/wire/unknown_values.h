// UnknownValues: what a decoder left out of a message because a newer peer sent a value
// this perftracker does not know: a metric id, an event kind, an event flag or a finding
// category added by a later version. Collectors and servers of a large cluster are upgraded
// at different times, so such a value is skipped and counted here, never fatal to the
// message; data that is corrupt (lengths, indices out of range, negative times) is still
// refused with its one line (docs/server.md, "Versions").
#pragma once

#include <cstdint>
#include <string>

namespace perftracker {

struct UnknownValues {
  uint64_t metrics = 0;    // metric levels (a function's or the worker's) of unknown ids
  uint64_t functions = 0;  // functions of an unknown event kind, with every function below
  uint64_t findings = 0;   // findings of an unknown category
  // Functions whose event flags carry bits it does not know (kSummaryEventFlags): those bits
  // are left out, the known ones kept.
  uint64_t event_flags = 0;
  std::string first;  // where the first one was: "function 4 (aten::mm): metric 28"

  uint64_t total() const { return metrics + functions + findings + event_flags; }
  // Adds `other`'s counts; its `first` is kept only when this one has none.
  void Merge(const UnknownValues& other);
  // What was left out, for a person: "2 metric values and 1 function", "1 event flag value";
  // "" when nothing was.
  std::string Describe() const;
};

}  // namespace perftracker
