// FunctionTable interns function identities into small dense ids.
//
// A function's identity is its kind, its name and the call stack it ran under. The table
// stores that as a tree: an entry is (kind, name, parent id), so interning the same code
// path on two workers yields the same key string, while the hot path only handles 32-bit
// ids. Sources that know no stack (a trace importer before nesting is rebuilt) intern
// with kNoParent; the summarizer re-interns nested calls under their parent.
//
// Invariants: ids are dense from 0 in interning order; an entry's parent always has a
// smaller id; names returned by Get() stay valid for the table's lifetime.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "perftracker/core/event.h"

namespace perftracker {

class FunctionTable {
 public:
  static constexpr uint32_t kNoParent = UINT32_MAX;

  struct Entry {
    std::string_view name;
    uint32_t parent = kNoParent;
    uint16_t depth = 0;  // 0 for a root
    EventKind kind = EventKind::kTorchOp;
  };

  uint32_t Intern(EventKind kind, std::string_view name, uint32_t parent = kNoParent);

  const Entry& Get(uint32_t id) const { return entries_[id]; }
  size_t size() const { return entries_.size(); }

  // The portable identity: "kind:name" of every frame from the root down, joined by " > ".
  std::string Key(uint32_t id) const;

 private:
  std::deque<std::string> names_;  // deque: stable addresses for the string_views
  std::vector<Entry> entries_;
  std::unordered_map<std::string, uint32_t> index_;
  std::string scratch_;
};

}  // namespace perftracker
