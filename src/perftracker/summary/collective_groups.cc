#include "perftracker/summary/collective_groups.h"

#include <string_view>

namespace perftracker {

bool CollectiveGroup::gloo_only() const {
  if (backend.empty()) return false;
  std::string_view rest = backend;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t colon = item.find(':');  // "cpu:gloo": a device's backend
    if (colon != std::string_view::npos) item.remove_prefix(colon + 1);
    if (item != "gloo") return false;
  }
  return true;
}

void CollectiveGroupRecorder::Declare(const ProcessGroupInfo& group) {
  if (group.id == 0) return;
  CollectiveGroup& g = declared_[group.id];
  g.name = group.name;
  g.ranks = group.ranks;
  g.size = group.size;
  g.backend = group.backend;
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
