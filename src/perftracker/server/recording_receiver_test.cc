#include "perftracker/server/recording_receiver.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace perftracker {
namespace {

namespace fs = std::filesystem;

class RecordingReceiverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("perftracker-receiver-test-" + std::to_string(getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static ControlWindowRecording Chunk(int32_t rank, uint64_t offset, std::string data, bool last) {
    ControlWindowRecording c;
    c.window = 3;
    c.rank = rank;
    c.offset = offset;
    c.data = std::move(data);
    c.last = last;
    return c;
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  fs::path dir_;
};

TEST_F(RecordingReceiverTest, ChunksOfSeveralRanksInterleavedMakeOneFileEach) {
  RecordingReceiver r((dir_ / "recordings").string());
  std::string done;
  ASSERT_TRUE(r.Add(Chunk(0, 0, "abc", false), &done).ok());
  EXPECT_EQ(done, "");
  ASSERT_TRUE(r.Add(Chunk(1, 0, "xy", false), &done).ok());
  ASSERT_TRUE(r.Add(Chunk(0, 3, "def", true), &done).ok());
  EXPECT_EQ(done, (dir_ / "recordings" / "window-3-rank-0.ptrace").string());
  EXPECT_EQ(Read(done), "abcdef");
  ASSERT_TRUE(r.Add(Chunk(1, 2, "", true), &done).ok());
  EXPECT_EQ(Read(done), "xy");
  // Raw events name code and hosts: the directory and the files are the owner's only.
  EXPECT_EQ(fs::status(dir_ / "recordings").permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_EQ(fs::status(done).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
}

TEST_F(RecordingReceiverTest, ALostChunkDropsTheRanksFileWithAClearError) {
  RecordingReceiver r(dir_.string());
  std::string done;
  ASSERT_TRUE(r.Add(Chunk(2, 0, "abc", false), &done).ok());
  const Status gap = r.Add(Chunk(2, 10, "def", true), &done);
  EXPECT_FALSE(gap.ok());
  EXPECT_EQ(gap.message(),
            "recording of rank 2 for window 3: a chunk at byte 10 where 3 bytes were received (a "
            "chunk was lost on the way)");
  EXPECT_EQ(done, "");
  EXPECT_TRUE(fs::is_empty(dir_)) << "the partial file is removed";
  const Status orphan = r.Add(Chunk(4, 5, "x", true), &done);
  EXPECT_FALSE(orphan.ok());
  EXPECT_NE(orphan.message().find("without the ones before it"), std::string::npos);
}

TEST_F(RecordingReceiverTest, ARecordingOverTheLimitIsRefusedAndUnfinishedPartsGoWithTheReceiver) {
  {
    RecordingReceiver r(dir_.string(), /*max_bytes=*/4);
    std::string done;
    ASSERT_TRUE(r.Add(Chunk(0, 0, "abc", false), &done).ok());
    const Status over = r.Add(Chunk(0, 3, "de", true), &done);
    EXPECT_EQ(over.message(), "recording of rank 0 for window 3: over the limit of 4 bytes");
    ASSERT_TRUE(r.Add(Chunk(1, 0, "ab", false), &done).ok());
    EXPECT_FALSE(fs::is_empty(dir_));
  }
  EXPECT_TRUE(fs::is_empty(dir_)) << "a stream that broke leaves no part behind";
}

}  // namespace
}  // namespace perftracker
