#include "perftracker/core/function_table.h"

#include <cstring>

namespace perftracker {

uint32_t FunctionTable::Intern(EventKind kind, std::string_view name, uint32_t parent) {
  // Lookup key: kind byte, parent id bytes, then the name. Reuses one scratch buffer so a
  // hit allocates nothing.
  scratch_.resize(1 + sizeof(parent));
  scratch_[0] = static_cast<char>(kind);
  std::memcpy(scratch_.data() + 1, &parent, sizeof(parent));
  scratch_.append(name);
  auto it = index_.find(scratch_);
  if (it != index_.end()) return it->second;

  const auto id = static_cast<uint32_t>(entries_.size());
  names_.emplace_back(name);
  Entry e;
  e.name = names_.back();
  e.parent = parent;
  e.kind = kind;
  e.depth = parent == kNoParent ? 0 : static_cast<uint16_t>(entries_[parent].depth + 1);
  entries_.push_back(e);
  index_.emplace(scratch_, id);
  return id;
}

std::string FunctionTable::Key(uint32_t id) const {
  std::vector<uint32_t> chain;
  for (uint32_t cur = id; cur != kNoParent; cur = entries_[cur].parent) chain.push_back(cur);
  std::string key;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    if (!key.empty()) key += " > ";
    key += EventKindName(entries_[*it].kind);
    key += ':';
    key += entries_[*it].name;
  }
  return key;
}

}  // namespace perftracker
