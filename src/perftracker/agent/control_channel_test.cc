#include "perftracker/agent/control_channel.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
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
