#include "perftracker/sources/python/call_path_interner.h"

namespace perftracker {
namespace {
constexpr size_t kInitialCacheSlots = 256;
}  // namespace

CallPathCache::CallPathCache() : slots_(kInitialCacheSlots) {}

void CallPathCache::Insert(uint32_t parent, const void* key, uint32_t id) {
  if (key == nullptr) return;  // nullptr marks an empty slot; such keys are never cached
  if ((size_ + 1) * 2 > slots_.size()) {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    size_ = 0;
    for (const Slot& s : old) {
      if (s.key != nullptr) Insert(s.parent, s.key, s.id);
    }
  }
  const size_t mask = slots_.size() - 1;
  for (size_t i = Hash(parent, key) & mask;; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.key == nullptr) {
      s = {key, parent, id};
      ++size_;
      return;
    }
    if (s.key == key && s.parent == parent) {
      s.id = id;
      return;
    }
  }
}

void CallPathCache::Clear() {
  slots_.assign(kInitialCacheSlots, Slot{});
  size_ = 0;
}

CallPathInterner::CallPathInterner(AgentShm* shm) : shm_(shm) {
  const uint32_t capacity = shm_->header()->function_capacity;
  capacity_ = capacity;
  module_body_.reset(new std::atomic<uint8_t>[capacity]());
  code_path_limit_ = capacity - capacity / 16;
}

uint32_t CallPathInterner::Publish(uint32_t parent, EventKind kind, std::string_view name) {
  // mu_ held.
  if (!shm_->PublishFunction(next_id_, kind, name, parent)) {
    ++dropped_paths_;
    return kDropped;
  }
  return next_id_++;
}

uint32_t CallPathInterner::Intern(uint32_t parent, const void* key, EventKind kind,
                                  NameFn name_fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (hidden_.count(key) != 0) return kHidden;
  if (parent == kDropped) return kDropped;
  const PathKey pk{parent, static_cast<uint8_t>(kind), key};
  auto it = by_key_.find(pk);
  if (it != by_key_.end()) return it->second;
  if (next_id_ >= code_path_limit_) {
    ++dropped_paths_;
    return kDropped;
  }
  const std::string name = name_fn(key);
  constexpr std::string_view kModuleBody = "<module> (";
  const bool module_body = name.compare(0, kModuleBody.size(), kModuleBody) == 0;
  if (next_id_ < capacity_) module_body_[next_id_].store(module_body, std::memory_order_relaxed);
  const uint32_t id = Publish(parent, kind, name);
  if (id != kDropped) by_key_.emplace(pk, id);
  return id;
}

uint32_t CallPathInterner::InternName(uint32_t parent, EventKind kind, std::string_view name) {
  if (parent == kDropped || parent == kHidden) parent = kNoParent;
  std::string k;
  k.reserve(name.size() + 16);
  k.append(std::to_string(static_cast<int>(kind))).append("|");
  k.append(std::to_string(parent)).append("|").append(name);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_name_.find(k);
  if (it != by_name_.end()) return it->second;
  const uint32_t id = Publish(parent, kind, name);
  if (id != kDropped) by_name_.emplace(std::move(k), id);
  return id;
}

void CallPathInterner::Hide(const void* key) {
  std::lock_guard<std::mutex> lock(mu_);
  hidden_.insert(key);
}

uint32_t CallPathInterner::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_id_;
}

uint64_t CallPathInterner::dropped_paths() {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_paths_;
}

}  // namespace perftracker
