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
      mapped.push_back(
          table.Intern(static_cast<EventKind>(s.kind), std::string_view(s.name, s.name_len),
                       s.parent == FunctionTable::kNoParent ? s.parent : mapped[s.parent]));
    }
    return table.Key(mapped.at(id));
  }

  std::string path_;
  std::unique_ptr<AgentShm> shm_;
};

using CallPathInternerTest = ShmFixture;

TEST_F(CallPathInternerTest, PathsInternIncrementallyHiddenAndDroppedPropagate) {
  CallPathInterner interner(shm_.get());
  const uint32_t main_id =
      interner.Intern(CallPathInterner::kNoParent, &kMain, EventKind::kPythonCall, &FakeName);
  const uint32_t train = interner.Intern(main_id, &kTrain, EventKind::kPythonCall, &FakeName);
  EXPECT_EQ(train, interner.Intern(main_id, &kTrain, EventKind::kPythonCall, &FakeName));
  const uint32_t forward = interner.Intern(train, &kForward, EventKind::kPythonCall, &FakeName);
  EXPECT_EQ(KeyOf(forward), "python:main > python:train_step > python:forward");
  EXPECT_NE(forward, interner.Intern(main_id, &kForward, EventKind::kPythonCall, &FakeName));
  interner.Hide(&kLoad);
  EXPECT_EQ(interner.Intern(main_id, &kLoad, EventKind::kPythonCall, &FakeName),
            CallPathInterner::kHidden);
  EXPECT_EQ(interner.Intern(CallPathInterner::kDropped, &kTrain, EventKind::kPythonCall, &FakeName),
            CallPathInterner::kDropped);
  EXPECT_EQ(interner.size(), 4u);
}

TEST_F(CallPathInternerTest, NamedFunctionsInternUnderTheirParent) {
  CallPathInterner interner(shm_.get());
  const uint32_t root = interner.InternName(CallPathInterner::kNoParent, EventKind::kGc, "gc");
  EXPECT_EQ(root, interner.InternName(CallPathInterner::kNoParent, EventKind::kGc, "gc"));
  const uint32_t nested = interner.InternName(root, EventKind::kCollective, "all_reduce");
  EXPECT_NE(root, nested);
  EXPECT_EQ(KeyOf(nested), "gc:gc > collective:all_reduce");
}

// Seen on torch 2.11 (H200 machine): the first optimizer of a window imported
// torch._dynamo and sympy, whose code paths filled the table, and the window's all_reduce
// calls were lost. Code paths now stop short of the last 1/16 of the table, which named
// functions keep; one under a dropped path is published at the root.
TEST_F(CallPathInternerTest, AFullTableOfCodePathsStillTakesCollectivesAndIterations) {
  CallPathInterner interner(shm_.get());  // 16 slots: code paths get 15
  std::vector<FakeCode> codes(40, FakeCode{"imported"});
  uint32_t parent = CallPathInterner::kNoParent;
  for (FakeCode& c : codes) {
    parent = interner.Intern(parent, &c, EventKind::kPythonCall, &FakeName);
  }
  EXPECT_EQ(parent, CallPathInterner::kDropped);
  EXPECT_EQ(interner.size(), 15u);
  EXPECT_EQ(interner.dropped_paths(), 1u);  // the rest hang under a dropped parent
  const uint32_t coll =
      interner.InternName(parent, EventKind::kCollective, "torch.distributed.all_reduce");
  ASSERT_NE(coll, CallPathInterner::kDropped);
  EXPECT_EQ(KeyOf(coll), "collective:torch.distributed.all_reduce");
  EXPECT_EQ(interner.InternName(parent, EventKind::kCollective, "torch.distributed.all_reduce"),
            coll);
  // The reserve is the last slot here; once it is used, named functions are dropped too.
  EXPECT_EQ(interner.InternName(CallPathInterner::kNoParent, EventKind::kGc, "gc"),
            CallPathInterner::kDropped);
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
