// ShadowStack: one thread's stack of open Python calls, each with its call-path id (the
// function plus the whole stack under it, interned by CallPathInterner).
//
// Push interns (parent = the top's id, key = the function's code object) in three steps,
// cheapest first: (1) the top frame remembers the last child it pushed and that child's id
// (a loop calling the same function, or recursion, hits this one-entry memo: one compare);
// (2) the thread's CallPathCache (open addressing, no lock); (3) the process-wide
// CallPathInterner (a mutex, once per new path per thread).
//
// Hidden functions (perftracker's own wrappers) are pushed as *transparent* frames: they
// carry their parent's id, so their callees' paths skip them, and they never emit. Keeping
// them on the stack keeps the stack a mirror of the interpreter's frame chain, which the
// frame-evaluation hook checks on every call (PythonProfiler).
//
// Imports are one call each. A module body that starts under a hidden frame is an import
// (the agent hides importlib's frames: `<module>` runs under `_call_with_frames_removed`);
// it is recorded as one call of that `<module>` under the importing frame, and every frame
// above it is transparent (the import's time is the module's). Without this, importing a
// large library inside a window (torch 2.x's first optimizer step imports torch._dynamo
// and sympy: thousands of functions run at import time) spent the function table on paths
// no diagnosis reads, and the job's own functions that came later lost their call paths.
// The main script's `<module>` runs under runpy or the interpreter, never a hidden frame.
//
// Bounded: at most kMaxDepth frames; a push beyond that is not recorded (counted in
// too_deep()). Frames are matched by identity (the interpreter frame's address plus its code
// object) so that returns of frames that were never pushed are ignored and missed returns
// (frames above the returning one) are closed too. Storage is allocated once, up front: no
// allocation on the hot path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "perftracker/core/event.h"
#include "perftracker/sources/python/call_path_interner.h"

namespace perftracker {

class ShadowStack {
 public:
  static constexpr size_t kMaxDepth = 1024;

  struct Frame {
    const void* frame;  // the interpreter frame (identity only, never dereferenced here)
    const void* key;    // the function (PyCodeObject*)
    int64_t start_ns;
    uint32_t id;        // path id (kDropped when unpublishable); a hidden frame: its parent's id
    uint8_t flags;      // kHiddenFrame | kImportFrame
    uint32_t child_id;  // memo: id of the last child pushed on this frame
    const void* child_key;  // memo: that child's key (nullptr: none yet)
  };

  enum class PushResult : uint8_t { kRecorded, kHidden, kTooDeep };
  static constexpr uint8_t kHiddenFrame = 1;  // transparent: never emitted
  // An import, or a frame inside one: the frames above it are hidden.
  static constexpr uint8_t kImportFrame = 2;

  ShadowStack(CallPathInterner* interner, EventKind kind, CallPathInterner::NameFn name_fn)
      : interner_(interner), kind_(kind), name_fn_(name_fn), frames_(new Frame[kMaxDepth]) {}
  ShadowStack(const ShadowStack&) = delete;
  ShadowStack& operator=(const ShadowStack&) = delete;

  // Pushes `frame` running function `key`, started at `now_ns`.
  PushResult Push(const void* frame, const void* key, int64_t now_ns) {
    if (depth_ == kMaxDepth) [[unlikely]] {
      ++too_deep_;
      return PushResult::kTooDeep;
    }
    uint32_t id;
    uint32_t parent = CallPathInterner::kNoParent;
    bool under_hidden = false;
    if (depth_ != 0) {
      Frame& top = frames_[depth_ - 1];
      parent = top.id;
      if (top.flags != 0) [[unlikely]] {
        if ((top.flags & kImportFrame) != 0) {  // inside an import: transparent, not interned
          frames_[depth_++] =
              Frame{frame, key, now_ns, parent, kHiddenFrame | kImportFrame, 0, nullptr};
          return PushResult::kHidden;
        }
        under_hidden = true;
      }
      if (top.child_key == key) {
        id = top.child_id;
      } else {
        id = Resolve(parent, key);
        top.child_key = key;
        top.child_id = id;
      }
    } else {
      id = Resolve(parent, key);
    }
    const bool hidden = id == CallPathInterner::kHidden;
    uint8_t flags = hidden ? kHiddenFrame : 0;
    if (under_hidden && !hidden && interner_->IsModuleBody(id)) [[unlikely]] {
      flags = kImportFrame;
    }
    frames_[depth_++] = Frame{frame, key, now_ns, hidden ? parent : id, flags, 0, nullptr};
    return hidden ? PushResult::kHidden : PushResult::kRecorded;
  }

  // Closes `frame` and every frame above it (missed returns), innermost first, calling
  // emit(const Frame&) for each non-hidden one. False (nothing closed) when `frame` is not
  // on the stack. The common case (the top returns) costs one compare.
  template <typename Emit>
  bool Pop(const void* frame, Emit&& emit) {
    if (depth_ != 0 && frames_[depth_ - 1].frame == frame) [[likely]] {
      --depth_;
      if ((frames_[depth_].flags & kHiddenFrame) == 0) emit(frames_[depth_]);
      return true;
    }
    for (size_t i = depth_; i-- > 0;) {
      if (frames_[i].frame != frame) continue;
      PopTo(i, emit);
      return true;
    }
    return false;
  }

  // The index of the innermost frame that is (`frame`, `key`), or -1.
  ptrdiff_t Find(const void* frame, const void* key) const {
    for (size_t i = depth_; i-- > 0;) {
      if (frames_[i].frame == frame && frames_[i].key == key) return static_cast<ptrdiff_t>(i);
    }
    return -1;
  }

  // Closes the frames above `depth` (innermost first), as Pop does.
  template <typename Emit>
  void PopTo(size_t depth, Emit&& emit) {
    while (depth_ > depth) {
      --depth_;
      if ((frames_[depth_].flags & kHiddenFrame) == 0) emit(frames_[depth_]);
    }
  }

  template <typename Emit>
  void PopAll(Emit&& emit) {
    PopTo(0, emit);
  }

  // True when the top frame is (`frame`, `key`); false on an empty stack.
  bool TopIs(const void* frame, const void* key) const {
    return depth_ != 0 && frames_[depth_ - 1].frame == frame && frames_[depth_ - 1].key == key;
  }
  uint32_t top_id() const {
    return depth_ == 0 ? CallPathInterner::kNoParent : frames_[depth_ - 1].id;
  }
  size_t depth() const { return depth_; }
  const Frame& frame(size_t i) const { return frames_[i]; }
  uint64_t too_deep() const { return too_deep_; }
  // Counts a call its caller's depth already kept off the stack (see PythonProfiler).
  void CountTooDeep() { ++too_deep_; }
  const CallPathCache& cache() const { return cache_; }

 private:
  uint32_t Resolve(uint32_t parent, const void* key) {
    uint32_t id = cache_.Find(parent, key);
    if (id == CallPathCache::kMiss) [[unlikely]] {
      id = interner_->Intern(parent, key, kind_, name_fn_);
      cache_.Insert(parent, key, id);
    }
    return id;
  }

  CallPathInterner* interner_;
  EventKind kind_;
  CallPathInterner::NameFn name_fn_;
  CallPathCache cache_;
  std::unique_ptr<Frame[]> frames_;
  size_t depth_ = 0;
  uint64_t too_deep_ = 0;
};

}  // namespace perftracker
