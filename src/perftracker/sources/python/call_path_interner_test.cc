#include "perftracker/sources/python/call_path_interner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

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

class ShmFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = "/dev/shm/perftracker-test-interner-" + std::to_string(getpid());
    AgentShmOptions o;
    o.num_rings = 2;
    o.ring_capacity = 8;
    o.function_capacity = 16;
    auto shm = AgentShm::Create(path_, 0, o);
    ASSERT_TRUE(shm.ok()) << shm.status().message();
    shm_ = std::move(shm.value());
  }
  void TearDown() override { unlink(path_.c_str()); }

  // The portable key of a published id, rebuilt from the shm function table exactly like the
  // collector does (name, parent chain).
  std::string KeyOf(uint32_t id) {
    FunctionTable table;
    std::vector<uint32_t> mapped;
    for (uint32_t i = 0; i < shm_->functions_published(); ++i) {
      const FunctionSlot& s = shm_->function(i);
      mapped.push_back(table.Intern(static_cast<EventKind>(s.kind),
                                    std::string_view(s.name, s.name_len),
                                    s.parent == FunctionTable::kNoParent ? s.parent
                                                                         : mapped[s.parent]));
    }
    return table.Key(mapped.at(id));
  }

  std::string path_;
  std::unique_ptr<AgentShm> shm_;
};

using ShadowStackTest = ShmFixture;

TEST_F(ShadowStackTest, SamePathSameIdDifferentStackDifferentId) {
  CallPathInterner interner(shm_.get());
  ShadowStack stack(&interner, EventKind::kPythonCall, &FakeName);
  int f1, f2, f3, f4;  // frame identities
  std::vector<ShadowStack::Frame> closed;
  auto emit = [&](const ShadowStack::Frame& f) { closed.push_back(f); };

  ASSERT_TRUE(stack.Push(&f1, &kMain, 0));
  ASSERT_TRUE(stack.Push(&f2, &kTrain, 1));
  ASSERT_TRUE(stack.Push(&f3, &kForward, 2));
  const uint32_t forward_under_train = stack.top_id();
  ASSERT_TRUE(stack.Pop(&f3, emit));
  ASSERT_TRUE(stack.Pop(&f2, emit));
  // Same function, called directly from main: a different path, a different id.
  ASSERT_TRUE(stack.Push(&f4, &kForward, 3));
  const uint32_t forward_under_main = stack.top_id();
  EXPECT_NE(forward_under_train, forward_under_main);
  ASSERT_TRUE(stack.Pop(&f4, emit));
  // The first path again (other frame objects): the same id, through the cache.
  ASSERT_TRUE(stack.Push(&f2, &kTrain, 4));
  ASSERT_TRUE(stack.Push(&f3, &kForward, 5));
  EXPECT_EQ(stack.top_id(), forward_under_train);

  EXPECT_EQ(KeyOf(forward_under_train),
            "python:main > python:train_step > python:forward");
  EXPECT_EQ(KeyOf(forward_under_main), "python:main > python:forward");

  // A second thread's stack (own cache, shared interner) gets the same ids for the same path.
  ShadowStack other(&interner, EventKind::kPythonCall, &FakeName);
  ASSERT_TRUE(other.Push(&f1, &kMain, 0));
  ASSERT_TRUE(other.Push(&f2, &kTrain, 0));
  ASSERT_TRUE(other.Push(&f3, &kForward, 0));
  EXPECT_EQ(other.top_id(), forward_under_train);
  EXPECT_EQ(interner.size(), 4u);  // main, main>train, main>train>forward, main>forward
}

TEST_F(ShadowStackTest, UnknownReturnsAreIgnoredAndMissedReturnsClosed) {
  CallPathInterner interner(shm_.get());
  ShadowStack stack(&interner, EventKind::kPythonCall, &FakeName);
  int f1, f2, f3, never_pushed;
  std::vector<const void*> closed;
  auto emit = [&](const ShadowStack::Frame& f) { closed.push_back(f.frame); };
  stack.Push(&f1, &kMain, 0);
  stack.Push(&f2, &kTrain, 0);
  stack.Push(&f3, &kForward, 0);
  EXPECT_FALSE(stack.Pop(&never_pushed, emit));  // entered before the hook was installed
  EXPECT_TRUE(closed.empty());
  EXPECT_TRUE(stack.Pop(&f2, emit));  // f3's return was missed: closed with f2
  EXPECT_THAT(closed, ::testing::ElementsAre(&f3, &f2));
  EXPECT_EQ(stack.depth(), 1u);
}

TEST_F(ShadowStackTest, HiddenFunctionsAreNotPartOfAnyPath) {
  CallPathInterner interner(shm_.get());
  FakeCode wrapper{"perftracker_wrapper"};
  interner.Hide(&wrapper);
  ShadowStack stack(&interner, EventKind::kPythonCall, &FakeName);
  int f1, f2, f3;
  stack.Push(&f1, &kMain, 0);
  EXPECT_FALSE(stack.Push(&f2, &wrapper, 0));
  ASSERT_TRUE(stack.Push(&f3, &kLoad, 0));
  EXPECT_EQ(KeyOf(stack.top_id()), "python:main > python:load_batch");
}

TEST_F(ShadowStackTest, FullFunctionTableDropsPathsAndTheirChildren) {
  CallPathInterner interner(shm_.get());  // 16 slots
  ShadowStack stack(&interner, EventKind::kPythonCall, &FakeName);
  std::vector<int> frames(40);
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(stack.Push(&frames[i], &kMain, 0));
  EXPECT_NE(stack.top_id(), CallPathInterner::kDropped);
  stack.Push(&frames[16], &kTrain, 0);
  EXPECT_EQ(stack.top_id(), CallPathInterner::kDropped);
  stack.Push(&frames[17], &kForward, 0);
  EXPECT_EQ(stack.top_id(), CallPathInterner::kDropped);
  EXPECT_EQ(shm_->functions_published(), 16u);
  EXPECT_GE(interner.dropped_paths(), 1u);
}

TEST_F(ShadowStackTest, NamedFunctionsInternUnderTheirParent) {
  CallPathInterner interner(shm_.get());
  const uint32_t root = interner.InternName(CallPathInterner::kNoParent, EventKind::kGc, "gc");
  EXPECT_EQ(root, interner.InternName(CallPathInterner::kNoParent, EventKind::kGc, "gc"));
  const uint32_t nested = interner.InternName(root, EventKind::kCollective, "all_reduce");
  EXPECT_NE(root, nested);
  EXPECT_EQ(KeyOf(nested), "gc:gc > collective:all_reduce");
}

TEST(CallPathCacheTest, GrowsAndFindsEverything) {
  CallPathCache cache;
  std::vector<int> keys(5000);
  for (uint32_t i = 0; i < keys.size(); ++i) cache.Insert(i % 7, &keys[i], i);
  for (uint32_t i = 0; i < keys.size(); ++i) EXPECT_EQ(cache.Find(i % 7, &keys[i]), i);
  EXPECT_EQ(cache.Find(99, &keys[0]), CallPathCache::kMiss);
  EXPECT_EQ(cache.size(), keys.size());
}

}  // namespace
}  // namespace perftracker
