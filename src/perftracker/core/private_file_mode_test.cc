#include "perftracker/core/private_file_mode.h"

#include <gtest/gtest.h>

namespace perftracker {
namespace {

TEST(PrivateFileMode, OwnerOnlyUnlessToldOtherwise) {
  EXPECT_EQ(PrivateFileMode(), 0600u);
  EXPECT_EQ(PrivateDirMode(), 0700u);
  ASSERT_TRUE(SetPrivateFileMode("0640").ok());
  EXPECT_EQ(PrivateFileMode(), 0640u);
  EXPECT_EQ(PrivateDirMode(), 0750u);
  EXPECT_NE(SetPrivateFileMode("0755").message().find("only read and write bits"),
            std::string::npos);
  EXPECT_NE(SetPrivateFileMode("0440").message().find("the owner must keep read and write"),
            std::string::npos);
  EXPECT_NE(SetPrivateFileMode("rw-r").message().find("expected an octal file mode"),
            std::string::npos);
  EXPECT_EQ(PrivateFileMode(), 0640u) << "a refused mode changes nothing";
  ASSERT_TRUE(SetPrivateFileMode("600").ok());
  EXPECT_EQ(PrivateFileMode(), 0600u);
}

}  // namespace
}  // namespace perftracker
