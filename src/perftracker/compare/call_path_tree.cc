#include "perftracker/compare/call_path_tree.h"

#include <algorithm>
#include <functional>

namespace perftracker::compare {
namespace {

constexpr std::string_view kSeparator = " > ";

// splitmix64's finalizer.
uint64_t Mix(uint64_t h) {
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

// Calls f(kind, name) for each frame of `key`, as InternKey() splits it.
template <typename F>
void ForEachFrame(std::string_view key, F&& f) {
  while (!key.empty()) {
    const size_t end = key.find(kSeparator);
    const std::string_view frame = key.substr(0, end);
    const size_t colon = frame.find(':');
    if (colon == std::string_view::npos) {
      f(std::string_view(), frame);
    } else {
      f(frame.substr(0, colon), frame.substr(colon + 1));
    }
    if (end == std::string_view::npos) break;
    key.remove_prefix(end + kSeparator.size());
  }
}

}  // namespace

uint64_t CallPathTree::FrameHash(uint64_t parent, std::string_view kind, std::string_view name) {
  const std::hash<std::string_view> hash;
  return Mix(Mix(parent ^ hash(kind)) ^ hash(name));
}

uint64_t CallPathTree::KeyHash(std::string_view key) {
  uint64_t h = kRootHash;
  ForEachFrame(key,
               [&](std::string_view kind, std::string_view name) { h = FrameHash(h, kind, name); });
  return h;
}

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
  ForEachFrame(
      key, [&](std::string_view kind, std::string_view name) { node = Intern(node, kind, name); });
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
