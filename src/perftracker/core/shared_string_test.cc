#include "perftracker/core/shared_string.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace perftracker {
namespace {

TEST(SharedStringTest, HoldsItsTextInOnePointer) {
  static_assert(sizeof(SharedString) == sizeof(void*));
  const SharedString empty;
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.view(), "");
  EXPECT_STREQ(empty.data(), "");
  EXPECT_TRUE(SharedString("").empty());  // the empty string allocates nothing

  std::string source = "torch/nn/modules/module.py(1520): _call_impl";
  SharedString s = source;
  source[0] = 'X';  // a copy of its own
  EXPECT_EQ(s, "torch/nn/modules/module.py(1520): _call_impl");
  EXPECT_EQ(s.size(), 44u);
  EXPECT_STREQ(s.data(), "torch/nn/modules/module.py(1520): _call_impl");
  EXPECT_EQ(s.str(), std::string(s.view()));
  EXPECT_TRUE(s < std::string_view("u"));
  EXPECT_EQ("kind:" + s, "kind:torch/nn/modules/module.py(1520): _call_impl");
  std::ostringstream os;
  os << s;
  EXPECT_EQ(os.str(), s.view());
}

TEST(SharedStringTest, CopiesShareTheTextAndOutliveTheirSource) {
  std::vector<SharedString> names;
  {
    const SharedString leaf("aten::mm");
    for (int i = 0; i < 100; ++i) names.push_back(leaf);
    EXPECT_TRUE(names[0].SharesTextWith(leaf));
  }
  for (const SharedString& n : names) EXPECT_EQ(n, "aten::mm");
  SharedString moved = std::move(names[0]);
  EXPECT_TRUE(names[0].empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_TRUE(moved.SharesTextWith(names[1]));
  names[1] = names[1];  // self-assignment keeps it
  EXPECT_EQ(names[1], "aten::mm");
  names[2] = "other";
  EXPECT_EQ(names[2], "other");
  EXPECT_FALSE(names[2].SharesTextWith(names[3]));
  EXPECT_EQ(std::hash<SharedString>()(moved), std::hash<std::string_view>()("aten::mm"));
}

TEST(SharedStringTest, CopiesOnManyThreadsCountTheirReferences) {
  const SharedString name("kernel:sm90_gemm");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&name] {
      for (int i = 0; i < 10000; ++i) {
        SharedString copy = name;
        SharedString other = copy;
        other = SharedString();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(name, "kernel:sm90_gemm");
}

}  // namespace
}  // namespace perftracker
