// CallPathTable: the summarizer's call paths, interned compactly.
//
// A call path is (leaf, parent path): the leaf is a (kind, name) pair, interned once however
// many paths end in it, and a path costs 8 bytes plus its slot in an open-addressing index
// (load at most 1/2). Traces recorded with Python stacks hold about one distinct path per two
// events (~50 frames deep, every distinct stack its own path), so the per-path cost is what
// bounds the summarizer's memory there; FunctionTable (a name copy and a string-keyed hash
// node per entry, ~220 bytes) is for the sources' few distinct names.
//
// Invariants: path ids are dense from 0 in interning order; a path's parent has a smaller id;
// names returned by Leaf()/Get() stay valid for the table's lifetime.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "perftracker/core/event.h"

namespace perftracker {

class CallPathTable {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  struct Path {
    std::string_view name;
    EventKind kind = EventKind::kTorchOp;
    uint32_t parent = kNone;
    uint32_t leaf = 0;  // its leaf's id, dense from 0 (< leaves())
  };

  // The leaf id of (kind, name).
  uint32_t InternLeaf(EventKind kind, std::string_view name);
  // The path id of leaf `leaf` under path `parent` (kNone: a root).
  uint32_t Intern(uint32_t leaf, uint32_t parent);

  Path Get(uint32_t id) const {
    const Node& n = nodes_[id];
    const Leaf& l = leaves_[n.leaf];
    return {l.name, l.kind, n.parent, n.leaf};
  }
  size_t size() const { return nodes_.size(); }
  size_t leaves() const { return leaves_.size(); }

 private:
  struct Leaf {
    std::string_view name;  // into names_
    EventKind kind = EventKind::kTorchOp;
  };
  struct Node {
    uint32_t leaf = 0;
    uint32_t parent = kNone;
  };
  static uint64_t Hash(uint32_t leaf, uint32_t parent) {
    const uint64_t h = ((uint64_t{leaf} << 32) | parent) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 31);
  }
  void Grow();

  std::deque<std::string> names_;  // deque: stable addresses for the string_views
  std::vector<Leaf> leaves_;
  std::unordered_map<std::string, uint32_t> leaf_index_;  // kind byte + name -> leaf id
  std::vector<Node> nodes_;
  std::vector<uint32_t> slots_;  // path ids, kNone = empty; size a power of two
  std::string scratch_;
};

}  // namespace perftracker
