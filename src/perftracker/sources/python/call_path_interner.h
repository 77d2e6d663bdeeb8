// CallPathInterner: gives every distinct call path (a function plus the whole call stack it
// was called under) a small dense id, and publishes each new id to the AgentShm function
// table so the collector can resolve it.
//
// A path is built incrementally, as the shadow stack grows: id(path + f) =
// Intern(id(path), key(f)), where key(f) is a stable pointer identifying the function (for
// Python: its PyCodeObject*, kept alive by the caller). So one lookup per call, whatever the
// depth, and the same path always yields the same id (within one process), while the same
// function under two different stacks yields two ids. The function table stores (kind,
// name, parent id), which is exactly the FunctionTable tree the summarizer re-keys from.
//
// Two levels:
//  - CallPathCache: per thread, no locks, an open-addressing hash map (parent, key) -> id
//    (linear probing, power-of-two capacity, grows at 1/2 load). This is the hot path.
//  - CallPathInterner: process wide, mutex-guarded, consulted on a cache miss (once per new
//    path per thread); it assigns the next id and publishes it before returning, so an
//    event carrying the id can be pushed right away (AgentShm's invariant).
//
// Bounded memory: when the shm function table is full, Intern returns kDropped; a path
// under a kDropped parent is kDropped too, so children of an unpublishable frame collapse
// into a few cache entries. Callers drop (and count) events whose id is kDropped.
// The last 1/16 of the table is kept for named functions (collectives, data loading, GC,
// iterations): Python paths stop before it, so a process whose code paths filled the table
// (a large library imported inside a window: torch 2.x's first optimizer imports
// torch._dynamo and sympy, thousands of paths) still records its iterations and
// collectives. A named function under a dropped path is published at the root: it loses
// its call stack, not its time.
// Hidden keys (perftracker's own wrapper functions) resolve to kHidden: the caller makes the
// frame transparent, so wrappers never appear in any path (ShadowStack).
// Module bodies ("<module> (file.py:1)") are marked as they are published (IsModuleBody):
// one that runs under a hidden frame (importlib's, which the agent hides) is an import, and
// ShadowStack records it as one call with nothing beneath it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "perftracker/core/agent_shm.h"
#include "perftracker/core/event.h"
#include "perftracker/core/function_table.h"

namespace perftracker {

class CallPathCache {
 public:
  static constexpr uint32_t kMiss = UINT32_MAX - 2;

  CallPathCache();
  uint32_t Find(uint32_t parent, const void* key) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = Hash(parent, key) & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.key == key && s.parent == parent) return s.id;
      if (s.key == nullptr) return kMiss;
    }
  }
  void Insert(uint32_t parent, const void* key, uint32_t id);
  size_t size() const { return size_; }
  void Clear();

 private:
  struct Slot {
    const void* key = nullptr;
    uint32_t parent = 0;
    uint32_t id = 0;
  };
  static size_t Hash(uint32_t parent, const void* key) {
    uint64_t h = (reinterpret_cast<uintptr_t>(key) >> 4) ^ (uint64_t{parent} << 32 | parent);
    h *= 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>(h >> 20);
  }
  std::vector<Slot> slots_;
  size_t size_ = 0;
};

class CallPathInterner {
 public:
  static constexpr uint32_t kNoParent = FunctionTable::kNoParent;  // UINT32_MAX
  static constexpr uint32_t kDropped = UINT32_MAX - 1;
  static constexpr uint32_t kHidden = UINT32_MAX - 3;

  // Produces the display name of a key ("qualname (file.py:12)") on first interning.
  using NameFn = std::string (*)(const void* key);

  explicit CallPathInterner(AgentShm* shm);  // not owned, must outlive this

  // The id of `key` called under `parent` (kNoParent for a root); kHidden for a hidden key,
  // kDropped when the function table is full or the parent was dropped.
  uint32_t Intern(uint32_t parent, const void* key, EventKind kind, NameFn name_fn);
  // Same for functions identified by name (collectives, data loading, GC, iterations).
  uint32_t InternName(uint32_t parent, EventKind kind, std::string_view name);
  // Marks `key` as perftracker's own: Intern(any parent, key) returns kHidden from now on.
  void Hide(const void* key);
  // True when `id` is a published path whose function is a module body (its name starts
  // with "<module> ("). Lock-free: the mark is stored before the id is published, and a
  // thread only sees an id through Intern (the mutex) or its own cache of Intern's answers.
  bool IsModuleBody(uint32_t id) const {
    return id < capacity_ && module_body_[id].load(std::memory_order_relaxed) != 0;
  }

  uint32_t size();
  // Paths that could not be published because the function table was full.
  uint64_t dropped_paths();

 private:
  struct PathKey {
    uint32_t parent;
    uint8_t kind;
    const void* key;
    bool operator==(const PathKey&) const = default;
  };
  struct PathKeyHash {
    size_t operator()(const PathKey& k) const {
      return std::hash<const void*>()(k.key) ^ (size_t{k.parent} * 0x9E3779B97F4A7C15ull) ^ k.kind;
    }
  };
  uint32_t Publish(uint32_t parent, EventKind kind, std::string_view name);

  AgentShm* shm_;
  std::mutex mu_;
  std::unordered_map<PathKey, uint32_t, PathKeyHash> by_key_;
  std::unordered_map<std::string, uint32_t> by_name_;  // "kind|parent|name"
  std::unordered_set<const void*> hidden_;
  uint32_t next_id_ = 0;
  uint32_t capacity_ = 0;
  std::unique_ptr<std::atomic<uint8_t>[]> module_body_;  // one per id, capacity_ of them
  uint32_t code_path_limit_ = 0;  // ids at or above it are kept for named functions
  uint64_t dropped_paths_ = 0;
};

}  // namespace perftracker
