#include "perftracker/summary/collective_groups.h"

namespace perftracker {

void CollectiveGroupRecorder::Declare(const ProcessGroupInfo& group) {
  if (group.id == 0) return;
  CollectiveGroup& g = declared_[group.id];
  g.name = group.name;
  g.ranks = group.ranks;
  g.size = group.size;
}

void CollectiveGroupRecorder::Add(uint32_t function, uint16_t group, int64_t inside_ns,
                                  uint64_t bytes) {
  CollectiveGroupCalls& c = calls_[{function, group}];
  ++c.count;
  c.total_ns += inside_ns;
  c.bytes += bytes;
}

CollectiveGroups CollectiveGroupRecorder::Build() const {
  CollectiveGroups out;
  std::map<uint16_t, uint32_t> index;
  for (const auto& [key, c] : calls_) {
    const auto declared = declared_.find(key.second);
    if (declared == declared_.end()) continue;  // a group no source described: not known
    auto [it, inserted] = index.try_emplace(key.second, static_cast<uint32_t>(out.groups.size()));
    if (inserted) out.groups.push_back(declared->second);
    CollectiveGroupCalls row = c;
    row.function = key.first;
    row.group = it->second;
    out.calls.push_back(row);
  }
  return out;
}

}  // namespace perftracker
