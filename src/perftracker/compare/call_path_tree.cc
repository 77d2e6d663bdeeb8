#include "perftracker/compare/call_path_tree.h"

#include <algorithm>

namespace perftracker::compare {
namespace {

constexpr std::string_view kSeparator = " > ";

}  // namespace

CallPathTree::CallPathTree() { nodes_.emplace_back(); }

uint32_t CallPathTree::Intern(uint32_t parent, std::string_view kind, std::string_view name) {
  std::string id = std::to_string(parent);
  id.push_back('\0');
  id.append(kind);
  id.push_back('\0');
  id.append(name);
  auto [it, inserted] = index_.try_emplace(std::move(id), static_cast<uint32_t>(nodes_.size()));
  if (inserted) {
    Node node;
    node.parent = parent;
    node.kind = std::string(kind);
    node.name = std::string(name);
    nodes_.push_back(std::move(node));
    nodes_[parent].children.push_back(it->second);
  }
  return it->second;
}

uint32_t CallPathTree::InternKey(std::string_view key) {
  uint32_t node = kRoot;
  while (!key.empty()) {
    const size_t end = key.find(kSeparator);
    const std::string_view frame = key.substr(0, end);
    const size_t colon = frame.find(':');
    if (colon == std::string_view::npos) {
      node = Intern(node, "", frame);
    } else {
      node = Intern(node, frame.substr(0, colon), frame.substr(colon + 1));
    }
    if (end == std::string_view::npos) break;
    key.remove_prefix(end + kSeparator.size());
  }
  return node;
}

bool CallPathTree::IsAncestor(uint32_t ancestor, uint32_t node) const {
  while (true) {
    if (node == ancestor) return true;
    if (node == kRoot) return false;
    node = nodes_[node].parent;
  }
}

std::string CallPathTree::Key(uint32_t node) const {
  std::vector<uint32_t> path;
  for (uint32_t n = node; n != kRoot; n = nodes_[n].parent) path.push_back(n);
  std::reverse(path.begin(), path.end());
  std::string key;
  for (uint32_t n : path) {
    if (!key.empty()) key.append(kSeparator);
    if (!nodes_[n].kind.empty()) {
      key.append(nodes_[n].kind);
      key.push_back(':');
    }
    key.append(nodes_[n].name);
  }
  return key;
}

}  // namespace perftracker::compare
