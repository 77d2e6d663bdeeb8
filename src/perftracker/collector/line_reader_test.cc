#include "perftracker/collector/line_reader.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace perftracker {
namespace {

TEST(LineReaderTest, SplitsLinesAcrossArbitraryChunks) {
  const std::string input = "{\"a\":1}\n{\"b\":2}\r\n\n{\"c\":3}\n";
  for (size_t chunk = 1; chunk <= input.size(); ++chunk) {
    LineReader reader;
    std::vector<std::string> lines;
    for (size_t i = 0; i < input.size(); i += chunk) reader.Feed(input.substr(i, chunk), &lines);
    ASSERT_EQ(lines.size(), 3u) << "chunk " << chunk;
    EXPECT_EQ(lines[0], "{\"a\":1}");
    EXPECT_EQ(lines[1], "{\"b\":2}");  // '\r' stripped
    EXPECT_EQ(lines[2], "{\"c\":3}");
    EXPECT_EQ(reader.buffered(), 0u);
  }
}

TEST(LineReaderTest, KeepsAnIncompleteLineUntilItsNewline) {
  LineReader reader;
  std::vector<std::string> lines;
  reader.Feed("{\"type\":", &lines);
  EXPECT_TRUE(lines.empty());
  reader.Feed("\"bye\"}\n", &lines);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "{\"type\":\"bye\"}");
}

TEST(LineReaderTest, DropsAnOversizedLineWithoutBufferingItAndRecovers) {
  LineReader reader(16);
  std::vector<std::string> lines;
  reader.Feed("short\n", &lines);
  // 100 bytes in small chunks, then a newline, then a good line.
  for (int i = 0; i < 10; ++i) reader.Feed("0123456789", &lines);
  EXPECT_LE(reader.buffered(), 16u);
  reader.Feed("\nafter\n", &lines);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "short");
  EXPECT_EQ(lines[1], "after");
  EXPECT_EQ(reader.oversized_lines(), 1u);
}

TEST(LineReaderTest, ALineOfExactlyTheLimitIsKept) {
  LineReader reader(8);
  std::vector<std::string> lines;
  reader.Feed("12345678\n123456789\nok\n", &lines);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "12345678");
  EXPECT_EQ(lines[1], "ok");
  EXPECT_EQ(reader.oversized_lines(), 1u);
}

}  // namespace
}  // namespace perftracker
