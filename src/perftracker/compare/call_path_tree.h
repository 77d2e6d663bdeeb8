// CallPathTree: the call paths of two runs, interned once as a tree of frames.
//
// A function's portable identity is its call path, "kind:name" frames joined by " > "
// (WorkerSummary::Key()). Comparing two runs needs the same path to be the same node in both,
// and needs a node's children (a slowdown of a function shows in every caller; the comparer
// walks down to the frame that explains it). Building every key as a string would repeat each
// ancestor's frames in every descendant (Python stacks are ~50 frames deep), so the tree
// stores one frame per node and builds a key string only when a report asks for it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace perftracker::compare {

class CallPathTree {
 public:
  // The virtual root above every top-level frame; it has no frame of its own.
  static constexpr uint32_t kRoot = 0;

  CallPathTree();

  // The node of frame kind:name under `parent`, created when new.
  uint32_t Intern(uint32_t parent, std::string_view kind, std::string_view name);
  // The node of a whole key ("python:a > torch_op:b"); a frame without a ':' has kind "".
  uint32_t InternKey(std::string_view key);

  // A 64-bit hash of a call path, built frame by frame as Intern() builds nodes: the same
  // node always has the same hash (distinct nodes rarely share one), so a caller can choose
  // the paths it needs before interning any. kRootHash is the root's.
  static constexpr uint64_t kRootHash = 0x6a09e667f3bcc908ull;
  // The hash of frame kind:name under the node of hash `parent`.
  static uint64_t FrameHash(uint64_t parent, std::string_view kind, std::string_view name);
  // The hash of InternKey(key)'s node.
  static uint64_t KeyHash(std::string_view key);

  uint32_t parent(uint32_t node) const { return nodes_[node].parent; }
  const std::string& kind(uint32_t node) const { return nodes_[node].kind; }
  const std::string& name(uint32_t node) const { return nodes_[node].name; }
  const std::vector<uint32_t>& children(uint32_t node) const { return nodes_[node].children; }
  // True when `ancestor` is `node` or lies on its path to the root.
  bool IsAncestor(uint32_t ancestor, uint32_t node) const;
  // The key of the node's path, "" for the root.
  std::string Key(uint32_t node) const;
  size_t size() const { return nodes_.size(); }

 private:
  struct Node {
    uint32_t parent = kRoot;
    std::string kind;
    std::string name;
    std::vector<uint32_t> children;
  };
  std::vector<Node> nodes_;
  // parent, '\0', kind, '\0', name -> node.
  std::unordered_map<std::string, uint32_t> index_;
};

}  // namespace perftracker::compare
