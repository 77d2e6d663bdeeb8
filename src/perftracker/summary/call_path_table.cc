#include "perftracker/summary/call_path_table.h"

namespace perftracker {

uint32_t CallPathTable::InternLeaf(EventKind kind, std::string_view name) {
  scratch_.assign(1, static_cast<char>(kind));
  scratch_.append(name);
  auto it = leaf_index_.find(scratch_);
  if (it != leaf_index_.end()) return it->second;
  const auto id = static_cast<uint32_t>(leaves_.size());
  names_.emplace_back(name);
  leaves_.push_back({names_.back(), kind});
  leaf_index_.emplace(scratch_, id);
  return id;
}

uint32_t CallPathTable::Intern(uint32_t leaf, uint32_t parent) {
  if (2 * (nodes_.size() + 1) > slots_.size()) Grow();
  const size_t mask = slots_.size() - 1;
  for (size_t i = Hash(leaf, parent) & mask;; i = (i + 1) & mask) {
    const uint32_t id = slots_[i];
    if (id == kNone) {
      const auto fresh = static_cast<uint32_t>(nodes_.size());
      nodes_.push_back({leaf, parent});
      slots_[i] = fresh;
      return fresh;
    }
    if (nodes_[id].leaf == leaf && nodes_[id].parent == parent) return id;
  }
}

void CallPathTable::Grow() {
  std::vector<uint32_t> slots(slots_.empty() ? 64 : 2 * slots_.size(), kNone);
  const size_t mask = slots.size() - 1;
  for (uint32_t id = 0; id < nodes_.size(); ++id) {
    size_t i = Hash(nodes_[id].leaf, nodes_[id].parent) & mask;
    while (slots[i] != kNone) i = (i + 1) & mask;
    slots[i] = id;
  }
  slots_ = std::move(slots);
}

}  // namespace perftracker
