#include "perftracker/server/http/api_token.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

namespace perftracker {
namespace {

TEST(ApiTokenTest, ConstantTimeEqualsIsEquality) {
  EXPECT_TRUE(ConstantTimeEquals("s3cret-token-abcdef", "s3cret-token-abcdef"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("s3cret-token-abcdeg", "s3cret-token-abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("X3cret-token-abcdef", "s3cret-token-abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret", "s3cret-token-abcdef"));  // prefix
  EXPECT_FALSE(ConstantTimeEquals("s3cret-token-abcdef-and-more", "s3cret-token-abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("", "s3cret-token-abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("abc", ""));
  // Bytes past the expected length, or zero bytes, never make a match.
  EXPECT_FALSE(ConstantTimeEquals(std::string("abc\0", 4), "abc"));
  EXPECT_FALSE(ConstantTimeEquals("ab", std::string("ab\0", 3)));
  // Every single-bit difference at every position is caught.
  const std::string expected = "0123456789abcdef0123";
  for (size_t i = 0; i < expected.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string presented = expected;
      presented[i] = static_cast<char>(presented[i] ^ (1 << bit));
      EXPECT_FALSE(ConstantTimeEquals(presented, expected)) << i << " " << bit;
    }
  }
}

TEST(ApiTokenTest, GeneratedTokensAreLongAndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 20; ++i) {
    StatusOr<std::string> token = GenerateApiToken();
    ASSERT_TRUE(token.ok());
    EXPECT_EQ(token->size(), 64u);
    EXPECT_EQ(token->find_first_not_of("0123456789abcdef"), std::string::npos);
    seen.insert(*token);
  }
  EXPECT_EQ(seen.size(), 20u);
}

TEST(ApiTokenTest, ReadTokenFile) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("api_token_test." + std::to_string(getpid())))
          .string();
  { std::ofstream(path) << "  0123456789abcdef0123  \nsecond line ignored\n"; }
  StatusOr<std::string> token = ReadApiTokenFile(path);
  ASSERT_TRUE(token.ok()) << token.status().message();
  EXPECT_EQ(*token, "0123456789abcdef0123");
  { std::ofstream(path) << "short\n"; }
  token = ReadApiTokenFile(path);
  ASSERT_FALSE(token.ok());
  EXPECT_NE(token.status().message().find("token file " + path + ": the token has 5 characters"),
            std::string::npos)
      << token.status().message();
  { std::ofstream(path) << "\n"; }
  EXPECT_NE(ReadApiTokenFile(path).status().message().find("empty"), std::string::npos);
  std::remove(path.c_str());
  token = ReadApiTokenFile(path);
  EXPECT_EQ(token.status().code(), StatusCode::kNotFound);
  EXPECT_NE(token.status().message().find(path), std::string::npos);
}

TEST(ApiTokenTest, AFifoIsRefusedNotWaitedOn) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("api_token_fifo." + std::to_string(getpid())))
          .string();
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  StatusOr<std::string> token = ReadApiTokenFile(path);
  std::remove(path.c_str());
  ASSERT_FALSE(token.ok());
  EXPECT_NE(token.status().message().find("token file " + path + ": is a FIFO"), std::string::npos)
      << token.status().message();
}

}  // namespace
}  // namespace perftracker
