#include "perftracker/core/function_table.h"

#include <gtest/gtest.h>

#include "perftracker/core/status.h"

namespace perftracker {
namespace {

TEST(FunctionTableTest, SamePathSameIdDifferentStackDifferentId) {
  FunctionTable t;
  uint32_t fwd = t.Intern(EventKind::kUserAnnotation, "forward");
  uint32_t bwd = t.Intern(EventKind::kUserAnnotation, "backward");
  uint32_t mm_fwd = t.Intern(EventKind::kTorchOp, "aten::mm", fwd);
  uint32_t mm_bwd = t.Intern(EventKind::kTorchOp, "aten::mm", bwd);
  EXPECT_NE(mm_fwd, mm_bwd);
  EXPECT_EQ(mm_fwd, t.Intern(EventKind::kTorchOp, "aten::mm", fwd));
  EXPECT_EQ(t.Get(mm_fwd).depth, 1);
  EXPECT_EQ(t.Key(mm_fwd), "annotation:forward > torch_op:aten::mm");
  // Kind is part of identity.
  EXPECT_NE(t.Intern(EventKind::kPythonCall, "forward"), fwd);
}

TEST(FunctionTableTest, NamesStayValidAsTableGrows) {
  FunctionTable t;
  uint32_t first = t.Intern(EventKind::kTorchOp, "first");
  std::string_view name = t.Get(first).name;
  for (int i = 0; i < 10000; ++i) t.Intern(EventKind::kTorchOp, "f" + std::to_string(i));
  EXPECT_EQ(name, "first");
  EXPECT_EQ(t.Get(first).name, "first");
  EXPECT_EQ(t.size(), 10001u);
}

TEST(StatusTest, CarriesMessage) {
  StatusOr<int> bad = Status::DataLoss("trace.json: truncated at byte 12");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "trace.json: truncated at byte 12");
  StatusOr<int> good = 7;
  EXPECT_EQ(*good, 7);
}

}  // namespace
}  // namespace perftracker
