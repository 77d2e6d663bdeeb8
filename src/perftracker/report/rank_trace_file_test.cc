#include "perftracker/report/rank_trace_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace perftracker {
namespace {

namespace fs = std::filesystem;

std::string TempPath(const std::string& name) {
  return (fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()))).string();
}

// A rank whose recording kept 3 of 5 events (the cap), with a call path and two tracks.
RankTrace MakeRecording() {
  RankTrace r;
  r.rank = 3;
  r.host = "node-b";
  r.source = "pid 42";
  r.set_max_events(3);
  TrackInfo t;
  t.track_id = 7;
  t.name = "thread 99";
  r.OnTrack(t);
  t.track_id = 8;
  t.kind = TrackKind::kDeviceStream;
  t.device = 1;
  t.name = "stream 3";
  r.OnTrack(t);
  const uint32_t step = r.functions()->Intern(EventKind::kPythonCall, "train_step");
  const uint32_t mm = r.functions()->Intern(EventKind::kTorchOp, "aten::mm", step);
  for (int i = 0; i < 5; ++i) {
    Event e;
    e.kind = i % 2 == 0 ? EventKind::kPythonCall : EventKind::kTorchOp;
    e.function_id = i % 2 == 0 ? step : mm;
    e.track_id = i < 4 ? 7 : 8;
    e.start_ns = 1000 * i;
    e.end_ns = 1000 * i + 100 + i;
    e.payload = static_cast<uint64_t>(i);
    r.OnEvent(e);
  }
  return r;
}

TEST(RankTraceFileTest, ARecordingRoundTripsWithWhatItDidNotKeep) {
  const RankTrace r = MakeRecording();
  ASSERT_EQ(r.events().size(), 3u);
  ASSERT_EQ(r.not_recorded_count(), 2u);
  const std::string path = TempPath("rank-trace-file");
  ASSERT_TRUE(WriteRankTraceFile(path, r).ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  StatusOr<std::unique_ptr<RankTrace>> back = ReadRankTraceFile(path);
  fs::remove(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  const RankTrace& b = **back;
  EXPECT_EQ(b.rank, 3);
  EXPECT_EQ(b.host, "node-b");
  EXPECT_EQ(b.source, "pid 42");
  ASSERT_EQ(b.tracks().size(), 2u);
  EXPECT_EQ(b.tracks()[1].name, "stream 3");
  EXPECT_EQ(b.tracks()[1].device, 1);
  EXPECT_EQ(b.tracks()[1].kind, TrackKind::kDeviceStream);
  ASSERT_EQ(b.events().size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(b.events()[i].start_ns, r.events()[i].start_ns);
    EXPECT_EQ(b.events()[i].end_ns, r.events()[i].end_ns);
    EXPECT_EQ(b.events()[i].payload, r.events()[i].payload);
    EXPECT_EQ(b.functions().Key(b.events()[i].function_id),
              r.functions().Key(r.events()[i].function_id));
  }
  EXPECT_EQ(b.functions().Key(1), "python:train_step > torch_op:aten::mm");
  ASSERT_EQ(b.not_recorded().size(), 2u);
  EXPECT_EQ(b.not_recorded().at(7).count, 1u);
  EXPECT_EQ(b.not_recorded().at(7).ns, 103);
  EXPECT_EQ(b.not_recorded().at(8).count, 1u);
}

TEST(RankTraceFileTest, ATruncatedOrForeignFileIsOneClearError) {
  const RankTrace r = MakeRecording();
  const std::string path = TempPath("rank-trace-file-cut");
  ASSERT_TRUE(WriteRankTraceFile(path, r).ok());
  const auto size = fs::file_size(path);
  fs::resize_file(path, size - 7);
  StatusOr<std::unique_ptr<RankTrace>> back = ReadRankTraceFile(path);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find(path), std::string::npos);
  EXPECT_NE(back.status().message().find("not a perftracker rank trace"), std::string::npos);
  {
    std::ofstream out(path, std::ios::trunc);
    out << "{\"traceEvents\":[]}";
  }
  back = ReadRankTraceFile(path);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("wrong magic"), std::string::npos);
  fs::remove(path);
  EXPECT_FALSE(ReadRankTraceFile(path).ok());
}

TEST(RankTraceFileTest, AnEventWithTimesOutOfRangeMakesTheFileInvalid) {
  // A corrupted recording (issue 13): times beyond 2^62 ns from the epoch are refused on
  // read, as an event ending before its start is, so the export never computes with them.
  RankTrace r = MakeRecording();
  std::vector<Event> events = r.TakeEvents();
  events[1].start_ns = -9'200'000'000'000'000'000;
  events[1].end_ns = 9'200'000'000'000'000'000;
  r.AdoptEvents(events);
  const std::string path = TempPath("rank-trace-file-range");
  ASSERT_TRUE(WriteRankTraceFile(path, r).ok());
  StatusOr<std::unique_ptr<RankTrace>> back = ReadRankTraceFile(path);
  fs::remove(path);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("event 1 is invalid"), std::string::npos)
      << back.status().message();
}

}  // namespace
}  // namespace perftracker
