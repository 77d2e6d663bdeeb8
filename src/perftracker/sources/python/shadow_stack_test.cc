#include "perftracker/sources/python/shadow_stack.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include "perftracker/core/function_table.h"

namespace perftracker {
namespace {

// Stand-ins for PyCodeObject*: any stable address works as a key.
struct FakeCode {
  const char* name;
};
FakeCode kMain{"main"}, kTrain{"train_step"}, kForward{"forward"}, kLoad{"load_batch"};

std::string FakeName(const void* key) { return static_cast<const FakeCode*>(key)->name; }

class ShadowStackTest : public ::testing::Test {
 protected:
  void Open(uint32_t functions) {
    path_ = "/dev/shm/perftracker-test-shadow-" + std::to_string(getpid());
    AgentShmOptions o;
    o.num_rings = 1;
    o.ring_capacity = 8;
    o.function_capacity = functions;
    auto shm = AgentShm::Create(path_, 0, o);
    ASSERT_TRUE(shm.ok()) << shm.status().message();
    shm_ = std::move(shm.value());
    interner_ = std::make_unique<CallPathInterner>(shm_.get());
  }
  void SetUp() override { Open(16); }
  void TearDown() override { unlink(path_.c_str()); }

  std::unique_ptr<ShadowStack> NewStack() {
    return std::make_unique<ShadowStack>(interner_.get(), EventKind::kPythonCall, &FakeName);
  }

  // The portable key of a published id, rebuilt from the shm function table exactly like the
  // collector does (name, parent chain).
  std::string KeyOf(uint32_t id) {
    FunctionTable table;
    std::vector<uint32_t> mapped;
    for (uint32_t i = 0; i < shm_->functions_published(); ++i) {
      const FunctionSlot& s = shm_->function(i);
      mapped.push_back(
          table.Intern(static_cast<EventKind>(s.kind), std::string_view(s.name, s.name_len),
                       s.parent == FunctionTable::kNoParent ? s.parent : mapped[s.parent]));
    }
    return table.Key(mapped.at(id));
  }

  std::string path_;
  std::unique_ptr<AgentShm> shm_;
  std::unique_ptr<CallPathInterner> interner_;
};

using Push = ShadowStack::PushResult;

TEST_F(ShadowStackTest, SamePathSameIdDifferentStackDifferentId) {
  auto stack = NewStack();
  int f1, f2, f3, f4;
  std::vector<ShadowStack::Frame> closed;
  auto emit = [&](const ShadowStack::Frame& f) { closed.push_back(f); };
  ASSERT_EQ(stack->Push(&f1, &kMain, 0), Push::kRecorded);
  ASSERT_EQ(stack->Push(&f2, &kTrain, 1), Push::kRecorded);
  ASSERT_EQ(stack->Push(&f3, &kForward, 2), Push::kRecorded);
  const uint32_t forward_under_train = stack->top_id();
  ASSERT_TRUE(stack->Pop(&f3, emit));
  ASSERT_TRUE(stack->Pop(&f2, emit));
  // forward called directly from main: another identity.
  ASSERT_EQ(stack->Push(&f4, &kForward, 3), Push::kRecorded);
  const uint32_t forward_under_main = stack->top_id();
  EXPECT_NE(forward_under_main, forward_under_train);
  ASSERT_TRUE(stack->Pop(&f4, emit));
  // The same stack again: the same identity.
  ASSERT_EQ(stack->Push(&f2, &kTrain, 4), Push::kRecorded);
  ASSERT_EQ(stack->Push(&f3, &kForward, 5), Push::kRecorded);
  EXPECT_EQ(stack->top_id(), forward_under_train);
  EXPECT_EQ(KeyOf(forward_under_train), "python:main > python:train_step > python:forward");
  EXPECT_EQ(KeyOf(forward_under_main), "python:main > python:forward");
  ASSERT_EQ(closed.size(), 3u);
  EXPECT_EQ(closed[0].id, forward_under_train);
  EXPECT_EQ(closed[0].start_ns, 2);
  // Another thread's stack (its own cache) resolves the same path to the same id.
  auto other = NewStack();
  other->Push(&f1, &kMain, 0);
  other->Push(&f2, &kTrain, 0);
  other->Push(&f3, &kForward, 0);
  EXPECT_EQ(other->top_id(), forward_under_train);
  EXPECT_EQ(interner_->size(), 4u);  // main, main>train, main>train>forward, main>forward
}

TEST_F(ShadowStackTest, ChildMemoNeverLeaksToAnotherParent) {
  // The one-entry memo sits on the parent frame: a slot reused by another function (same
  // address, the usual case for interpreter frames) must not inherit the old memo.
  auto stack = NewStack();
  int f1, f2, f3;
  auto ignore = [](const ShadowStack::Frame&) {};
  stack->Push(&f1, &kMain, 0);
  stack->Push(&f2, &kTrain, 0);
  stack->Push(&f3, &kForward, 0);
  const uint32_t train_forward = stack->top_id();
  stack->Pop(&f3, ignore);
  stack->Pop(&f2, ignore);
  stack->Push(&f2, &kLoad, 0);  // same frame address, another function
  stack->Push(&f3, &kForward, 0);
  EXPECT_NE(stack->top_id(), train_forward);
  EXPECT_EQ(KeyOf(stack->top_id()), "python:main > python:load_batch > python:forward");
  stack->Pop(&f3, ignore);
  stack->Pop(&f2, ignore);
  // main's memo now says load_batch; train_step under main resolves through the cache.
  stack->Push(&f2, &kTrain, 0);
  stack->Push(&f3, &kForward, 0);
  EXPECT_EQ(stack->top_id(), train_forward);
}

TEST_F(ShadowStackTest, UnknownReturnsAreIgnoredAndMissedReturnsClosed) {
  auto stack = NewStack();
  int f1, f2, f3, never_pushed;
  std::vector<const void*> closed;
  auto emit = [&](const ShadowStack::Frame& f) { closed.push_back(f.frame); };
  stack->Push(&f1, &kMain, 0);
  stack->Push(&f2, &kTrain, 0);
  stack->Push(&f3, &kForward, 0);
  EXPECT_FALSE(stack->Pop(&never_pushed, emit));  // entered before the hook was installed
  EXPECT_TRUE(closed.empty());
  EXPECT_TRUE(stack->Pop(&f2, emit));  // f3's return was missed: closed with f2
  EXPECT_THAT(closed, ::testing::ElementsAre(&f3, &f2));
  EXPECT_EQ(stack->depth(), 1u);
}

TEST_F(ShadowStackTest, FindMatchesFrameAndFunctionAndPopToClosesTheFramesAbove) {
  // What the eval hook does when the interpreter's frame chain shows frames returned unseen.
  auto stack = NewStack();
  int f1, f2, f3;
  std::vector<const void*> closed;
  auto emit = [&](const ShadowStack::Frame& f) { closed.push_back(f.frame); };
  stack->Push(&f1, &kMain, 0);
  stack->Push(&f2, &kTrain, 0);
  stack->Push(&f3, &kForward, 0);
  EXPECT_EQ(stack->Find(&f2, &kTrain), 1);
  EXPECT_EQ(stack->Find(&f2, &kLoad), -1);  // same address, another function: not that frame
  EXPECT_TRUE(stack->TopIs(&f3, &kForward));
  EXPECT_FALSE(stack->TopIs(&f3, &kTrain));
  stack->PopTo(1, emit);
  EXPECT_THAT(closed, ::testing::ElementsAre(&f3, &f2));
  EXPECT_TRUE(stack->TopIs(&f1, &kMain));
  stack->PopAll(emit);
  EXPECT_EQ(stack->depth(), 0u);
  EXPECT_FALSE(stack->TopIs(nullptr, nullptr));
}

TEST_F(ShadowStackTest, HiddenFunctionsAreTransparent) {
  FakeCode wrapper{"perftracker_wrapper"};
  interner_->Hide(&wrapper);
  auto stack = NewStack();
  int f1, f2, f3;
  std::vector<const void*> closed;
  auto emit = [&](const ShadowStack::Frame& f) { closed.push_back(f.frame); };
  stack->Push(&f1, &kMain, 0);
  const uint32_t main_id = stack->top_id();
  EXPECT_EQ(stack->Push(&f2, &wrapper, 0), Push::kHidden);
  EXPECT_EQ(stack->top_id(), main_id);  // callees attach to the wrapper's caller
  ASSERT_EQ(stack->Push(&f3, &kLoad, 0), Push::kRecorded);
  EXPECT_EQ(KeyOf(stack->top_id()), "python:main > python:load_batch");
  EXPECT_EQ(stack->depth(), 3u);  // the wrapper stays on the stack (mirrors the interpreter)
  EXPECT_TRUE(stack->Pop(&f3, emit));
  EXPECT_TRUE(stack->Pop(&f2, emit));  // the wrapper's return: nothing emitted
  EXPECT_THAT(closed, ::testing::ElementsAre(&f3));
  // Again, through the memo: still hidden.
  EXPECT_EQ(stack->Push(&f2, &wrapper, 0), Push::kHidden);
}

// An import inside a window: importlib's frames are hidden, so the imported module's body
// starts under a hidden frame. It is one call under the importer; what runs inside it (the
// module's own functions, nested imports) is transparent and takes no function-table slot.
// Before, every function a large library runs at import time took a slot (torch 2.11's
// first optimizer step imports torch._dynamo and sympy): the table filled, and the job's
// own calls after the import lost their call paths.
TEST_F(ShadowStackTest, AnImportIsOneCallUnderTheImporter) {
  FakeCode find_and_load{"_find_and_load"}, module_a{"<module> (a.py:1)"},
      module_b{"<module> (b.py:1)"}, helper{"helper"};
  interner_->Hide(&find_and_load);
  auto stack = NewStack();  // 16 slots: 15 for code paths
  std::vector<const void*> closed;
  auto emit = [&](const ShadowStack::Frame& f) { closed.push_back(f.frame); };
  int f_main, f_train, f_load, f_a, f_load2, f_b, f_after;
  std::vector<int> f_helpers(40);
  stack->Push(&f_main, &kMain, 0);
  stack->Push(&f_train, &kTrain, 1);
  ASSERT_EQ(stack->Push(&f_load, &find_and_load, 2), Push::kHidden);
  ASSERT_EQ(stack->Push(&f_a, &module_a, 3), Push::kRecorded);
  EXPECT_EQ(KeyOf(stack->top_id()), "python:main > python:train_step > python:<module> (a.py:1)");
  const uint32_t import_id = stack->top_id();
  const uint32_t published = shm_->functions_published();
  // 40 distinct functions at import time, and a nested import: all transparent.
  std::vector<FakeCode> codes(40, FakeCode{"fn"});  // distinct keys, as code objects are
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(stack->Push(&f_helpers[i], &codes[i], 4), Push::kHidden);
    EXPECT_EQ(stack->top_id(), import_id);
    EXPECT_TRUE(stack->Pop(&f_helpers[i], emit));
  }
  EXPECT_EQ(stack->Push(&f_load2, &find_and_load, 5), Push::kHidden);
  EXPECT_EQ(stack->Push(&f_b, &module_b, 6), Push::kHidden);
  EXPECT_EQ(stack->Push(&f_helpers[0], &helper, 7), Push::kHidden);
  EXPECT_EQ(shm_->functions_published(), published);
  EXPECT_EQ(interner_->dropped_paths(), 0u);
  // The import returns: one call, the module's; then the job's own calls have their paths.
  EXPECT_TRUE(stack->Pop(&f_a, emit));
  EXPECT_THAT(closed, ::testing::ElementsAre(&f_a));
  EXPECT_TRUE(stack->Pop(&f_load, emit));
  ASSERT_EQ(stack->Push(&f_after, &kForward, 8), Push::kRecorded);
  EXPECT_EQ(KeyOf(stack->top_id()), "python:main > python:train_step > python:forward");
}

// A module body that is not imported (the main script, run by the interpreter or runpy;
// exec() of a script from a visible frame) is an ordinary frame: its callees are recorded.
TEST_F(ShadowStackTest, AModuleBodyNotUnderAHiddenFrameIsNotAnImport) {
  FakeCode main_module{"<module> (train.py:1)"};
  auto stack = NewStack();
  int f1, f2, f3;
  ASSERT_EQ(stack->Push(&f1, &kMain, 0), Push::kRecorded);
  ASSERT_EQ(stack->Push(&f2, &main_module, 1), Push::kRecorded);
  ASSERT_EQ(stack->Push(&f3, &kTrain, 2), Push::kRecorded);
  EXPECT_EQ(KeyOf(stack->top_id()),
            "python:main > python:<module> (train.py:1) > python:train_step");
}

TEST_F(ShadowStackTest, FullFunctionTableDropsPathsAndTheirChildren) {
  auto stack = NewStack();  // 16 function slots: 15 for code paths, 1 for named functions
  std::vector<int> frames(40);
  for (int i = 0; i < 15; ++i) ASSERT_EQ(stack->Push(&frames[i], &kMain, 0), Push::kRecorded);
  EXPECT_NE(stack->top_id(), CallPathInterner::kDropped);
  stack->Push(&frames[15], &kTrain, 0);
  EXPECT_EQ(stack->top_id(), CallPathInterner::kDropped);
  stack->Push(&frames[16], &kForward, 0);
  EXPECT_EQ(stack->top_id(), CallPathInterner::kDropped);
  EXPECT_EQ(shm_->functions_published(), 15u);
  EXPECT_GE(interner_->dropped_paths(), 1u);
}

TEST_F(ShadowStackTest, DeepRecursionIsRecordedUpToTheBoundThenCounted) {
  TearDown();
  Open(2 * ShadowStack::kMaxDepth);
  auto stack = NewStack();
  const size_t depth = ShadowStack::kMaxDepth + 10;
  std::vector<int> frames(depth);
  std::vector<uint32_t> ids;
  for (size_t i = 0; i < depth; ++i) {
    const Push r = stack->Push(&frames[i], &kTrain, static_cast<int64_t>(i));
    EXPECT_EQ(r, i < ShadowStack::kMaxDepth ? Push::kRecorded : Push::kTooDeep) << i;
    if (r == Push::kRecorded) ids.push_back(stack->top_id());
  }
  EXPECT_EQ(stack->depth(), ShadowStack::kMaxDepth);
  EXPECT_EQ(stack->too_deep(), 10u);
  // Recursion: every level is its own path (the function under a longer stack).
  EXPECT_EQ(std::set<uint32_t>(ids.begin(), ids.end()).size(), ids.size());
  size_t emitted = 0;
  auto emit = [&](const ShadowStack::Frame&) { ++emitted; };
  for (size_t i = depth; i-- > 0;) {
    EXPECT_EQ(stack->Pop(&frames[i], emit), i < ShadowStack::kMaxDepth) << i;
  }
  EXPECT_EQ(emitted, ShadowStack::kMaxDepth);
  EXPECT_EQ(stack->depth(), 0u);
}

}  // namespace
}  // namespace perftracker
