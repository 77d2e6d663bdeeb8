#include "perftracker/agent/control_channel.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace perftracker {
namespace {

class ControlChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = "/tmp/perftracker-channel-test-" + std::to_string(getpid()) + ".sock";
    unlink(path_.c_str());
    listen_fd_ = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    ASSERT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(listen(listen_fd_, 4), 0);
  }
  void TearDown() override {
    if (listen_fd_ >= 0) close(listen_fd_);
    unlink(path_.c_str());
  }
  std::string path_;
  int listen_fd_ = -1;
};

// Writes all of `data` to a blocking socket (the peer reads it concurrently).
bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Reads as the agent's control thread does: waits for the socket only when no complete line
// is buffered, until the channel reports the peer gone. Records each call's line count and
// the largest buffer seen after a call.
struct ReadResult {
  std::vector<std::string> lines;
  std::vector<size_t> per_call;
  size_t max_buffered = 0;
};
ReadResult ReadUntilClosed(ControlChannel* ch) {
  ReadResult r;
  for (;;) {
    if (!ch->has_buffered_lines()) {
      pollfd pfd{ch->fd(), POLLIN, 0};
      if (poll(&pfd, 1, 60'000) <= 0) break;  // a minute without data: the test fails below
    }
    std::vector<std::string> got;
    const bool ok = ch->ReadLines(&got);
    r.per_call.push_back(got.size());
    r.max_buffered = std::max(r.max_buffered, ch->buffered_bytes());
    r.lines.insert(r.lines.end(), got.begin(), got.end());
    if (!ok) break;
  }
  return r;
}

TEST_F(ControlChannelTest, LinesBothWays) {
  ControlChannel ch;
  ASSERT_TRUE(ch.Connect(path_).ok());
  const int peer = accept(listen_fd_, nullptr, nullptr);
  ASSERT_GE(peer, 0);
  ASSERT_TRUE(ch.SendLine(R"({"type":"hello"})"));
  char buf[64] = {};
  ASSERT_EQ(read(peer, buf, sizeof(buf)), 17);
  EXPECT_EQ(std::string(buf), "{\"type\":\"hello\"}\n");

  const std::string in = "{\"a\":1}\n{\"b\":";
  ASSERT_EQ(write(peer, in.data(), in.size()), static_cast<ssize_t>(in.size()));
  std::vector<std::string> lines;
  usleep(10000);
  EXPECT_TRUE(ch.ReadLines(&lines));
  ASSERT_EQ(lines.size(), 1u);  // the second line is not complete yet
  EXPECT_EQ(lines[0], "{\"a\":1}");
  ASSERT_EQ(write(peer, "2}\n", 3), 3);
  usleep(10000);
  lines.clear();
  EXPECT_TRUE(ch.ReadLines(&lines));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "{\"b\":2}");
  close(peer);
}

// A collector that floods the socket: every line arrives, in order, at most
// kMaxLinesPerRead per call, also the ones still buffered when the peer closes.
TEST_F(ControlChannelTest, AFloodIsDeliveredInOrderInBoundedSteps) {
  ControlChannel ch;
  ASSERT_TRUE(ch.Connect(path_).ok());
  const int peer = accept(listen_fd_, nullptr, nullptr);
  ASSERT_GE(peer, 0);
  constexpr int kLines = 20000;  // ~600 KB: more than the socket buffer holds
  std::string flood;
  for (int i = 0; i < kLines; ++i)
    flood += R"({"type":"end_window","window":)" + std::to_string(i) + "}\n";
  std::thread writer([&] {
    WriteAll(peer, flood);
    close(peer);
  });
  const ReadResult r = ReadUntilClosed(&ch);
  writer.join();

  ASSERT_EQ(r.lines.size(), static_cast<size_t>(kLines));
  for (int i = 0; i < kLines; ++i) {
    ASSERT_EQ(r.lines[i], R"({"type":"end_window","window":)" + std::to_string(i) + "}")
        << "line " << i;
  }
  size_t largest = 0;
  for (size_t n : r.per_call) largest = std::max(largest, n);
  EXPECT_EQ(largest, ControlChannel::kMaxLinesPerRead);  // bounded, and the bound was reached
  EXPECT_LE(r.max_buffered, ControlChannel::kMaxLineIn + ControlChannel::kReadChunk);
  EXPECT_EQ(ch.oversized_lines_in(), 0u);
  EXPECT_FALSE(ch.connected());
}

// A peer that sends one line without a newline, megabytes long: the channel holds at most
// kMaxLineIn + one read's bytes, drops the line whole when its newline comes, counts it
// once, and the well-formed line after it is delivered.
TEST_F(ControlChannelTest, AnEndlessLineIsDroppedWholeAndCountedWithBoundedMemory) {
  ControlChannel ch;
  ASSERT_TRUE(ch.Connect(path_).ok());
  const int peer = accept(listen_fd_, nullptr, nullptr);
  ASSERT_GE(peer, 0);
  const std::string good = R"({"type":"end_window","window":7})";
  // The longest line kept is kMaxLineIn bytes; one byte more is dropped.
  const std::string longest(ControlChannel::kMaxLineIn, 'a');
  const std::string too_long(ControlChannel::kMaxLineIn + 1, 'b');
  std::thread writer([&] {
    WriteAll(peer, good + "\n" + longest + "\n" + too_long + "\n");
    const std::string chunk(64 * 1024, '{');
    for (int i = 0; i < 64; ++i) WriteAll(peer, chunk);  // 4 MiB, no newline
    WriteAll(peer, "tail of the endless line\n" + good + "\n");
    close(peer);
  });
  const ReadResult r = ReadUntilClosed(&ch);
  writer.join();

  ASSERT_EQ(r.lines.size(), 3u);
  EXPECT_EQ(r.lines[0], good);
  EXPECT_EQ(r.lines[1], longest);
  EXPECT_EQ(r.lines[2], good);             // after the endless line: nothing of it glued on
  EXPECT_EQ(ch.oversized_lines_in(), 2u);  // too_long and the endless one, each once
  EXPECT_LE(r.max_buffered, ControlChannel::kMaxLineIn + ControlChannel::kReadChunk);
}

TEST_F(ControlChannelTest, DeadPeerIsAnErrorNotASignal) {
  ControlChannel ch;
  ASSERT_TRUE(ch.Connect(path_).ok());
  const int peer = accept(listen_fd_, nullptr, nullptr);
  close(peer);
  // Without MSG_NOSIGNAL this would kill the process with SIGPIPE.
  bool broke = false;
  for (int i = 0; i < 100 && !broke; ++i) broke = !ch.SendLine(std::string(1000, 'x'));
  EXPECT_TRUE(broke);
  EXPECT_FALSE(ch.connected());
  EXPECT_FALSE(ch.SendLine("{}"));  // not connected: dropped and counted
  EXPECT_GE(ch.dropped_lines(), 1u);
}

TEST_F(ControlChannelTest, NoCollectorIsAClearError) {
  ControlChannel ch;
  const Status st = ch.Connect(path_ + ".missing");
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(ch.connected());
}

}  // namespace
}  // namespace perftracker
