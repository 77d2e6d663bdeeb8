#include "perftracker/sources/host/tcp_sampler.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

namespace perftracker {
namespace {

constexpr int64_t kSec = 1'000'000'000;
constexpr size_t kBytes = 1 << 20;

std::vector<double> Values(const std::vector<PidSample>& out, int32_t pid, Metric m) {
  std::vector<double> v;
  for (const PidSample& s : out) {
    if (s.pid == pid && s.sample.metric == m) v.push_back(s.sample.value);
  }
  return v;
}

// A child process with one TCP connection to this process: it sends kBytes when told to.
class SendingChild {
 public:
  SendingChild() {
    listen_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(bind(listen_, reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(listen(listen_, 1), 0);
    EXPECT_EQ(getsockname(listen_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    EXPECT_EQ(pipe(go_), 0);
    EXPECT_EQ(pipe(done_), 0);
    pid_ = fork();
    if (pid_ == 0) {
      const int s = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) _exit(1);
      char c;
      if (read(go_[0], &c, 1) != 1) _exit(2);
      std::vector<char> data(kBytes, 'x');
      size_t sent = 0;
      while (sent < data.size()) {
        const ssize_t n = send(s, data.data() + sent, data.size() - sent, 0);
        if (n <= 0) _exit(3);
        sent += static_cast<size_t>(n);
      }
      if (write(done_[1], "d", 1) != 1) _exit(4);
      pause();
      _exit(0);
    }
    conn_ = accept(listen_, nullptr, nullptr);
  }
  ~SendingChild() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    for (int fd : {listen_, conn_, go_[0], go_[1], done_[0], done_[1]}) close(fd);
  }
  // Lets the child send and reads everything it sent.
  void Send() {
    ASSERT_EQ(write(go_[1], "g", 1), 1);
    std::vector<char> buf(65536);
    size_t got = 0;
    while (got < kBytes) {
      const ssize_t n = read(conn_, buf.data(), buf.size());
      ASSERT_GT(n, 0);
      got += static_cast<size_t>(n);
    }
    char c;
    ASSERT_EQ(read(done_[0], &c, 1), 1);
    // The child's kernel has processed the last ACK once its socket shows it all acked.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  pid_t pid() const { return pid_; }

 private:
  int listen_ = -1, conn_ = -1;
  int go_[2] = {-1, -1}, done_[2] = {-1, -1};
  pid_t pid_ = -1;
};

TEST(TcpSamplerTest, DeliveredBytesAndRateOfTheBusiestConnection) {
  SendingChild child;
  TcpSampler sampler("/proc", /*host_local=*/true);  // the test's connection is loopback
  std::vector<PidSample> out;
  sampler.Sample(kSec, {child.pid()}, &out);
  EXPECT_TRUE(out.empty()) << "the first sample has nothing to compare with";
  ASSERT_NO_FATAL_FAILURE(child.Send());
  sampler.Sample(3 * kSec, {child.pid()}, &out);
  const auto sent = Values(out, child.pid(), Metric::kTcpSendBytesPerSec);
  ASSERT_EQ(sent.size(), 1u) << sampler.stats().first_problem;
  EXPECT_DOUBLE_EQ(sent[0], static_cast<double>(kBytes) / 2);  // 1 MiB in 2 s
  const auto rate = Values(out, child.pid(), Metric::kTcpDeliveryRateBytesPerSec);
  ASSERT_EQ(rate.size(), 1u);
  EXPECT_GT(rate[0], 1e6) << "loopback delivers far faster than 1 MB/s";
  // One busy connection: its 1 MiB at its rate, per second of the 2 s interval.
  const auto wire = Values(out, child.pid(), Metric::kTcpWireSecondsPerSec);
  ASSERT_EQ(wire.size(), 1u);
  EXPECT_DOUBLE_EQ(wire[0], static_cast<double>(kBytes) / rate[0] / 2);

  // Idle since: nothing delivered, so no rate (a stale estimate is not a measurement).
  out.clear();
  sampler.Sample(4 * kSec, {child.pid()}, &out);
  EXPECT_EQ(Values(out, child.pid(), Metric::kTcpSendBytesPerSec), std::vector<double>{0.0});
  EXPECT_TRUE(Values(out, child.pid(), Metric::kTcpDeliveryRateBytesPerSec).empty());
  EXPECT_EQ(Values(out, child.pid(), Metric::kTcpWireSecondsPerSec), std::vector<double>{0.0});
  EXPECT_EQ(sampler.stats().unreadable_pids, 0u);
}

// An app-limited rate sample is a lower bound of the path's rate: it counts at the
// connection's best sample so far when that is higher; a sample that is not app-limited (a
// sender with a queue, as behind a token bucket) keeps its own rate, however low.
TEST(TcpSamplerTest, AnAppLimitedRateSampleIsALowerBound) {
  constexpr uint64_t kGbit = 1'000'000'000 / 8;
  // The loopback case: a healthy rank's occasional low sample, app-limited.
  EXPECT_EQ(TcpSampler::TcpRateForWireTime(1 * kGbit, true, 130 * kGbit), 130 * kGbit);
  // Higher than the best so far: itself.
  EXPECT_EQ(TcpSampler::TcpRateForWireTime(140 * kGbit, true, 130 * kGbit), 140 * kGbit);
  // The first sample of a connection: itself.
  EXPECT_EQ(TcpSampler::TcpRateForWireTime(3 * kGbit, true, 0), 3 * kGbit);
  // Behind a 25 Mbit/s bucket: not app-limited, kept although a burst once reached 1.24 Gbit/s.
  EXPECT_EQ(TcpSampler::TcpRateForWireTime(25'000'000 / 8, false, 1'240'000'000 / 8),
            25'000'000u / 8);
}

// Two processes of one host cross no network link: their connection is left out, so a
// one-host job never has a link rate (an H200 machine's healthy 4-rank gloo job showed
// rank 0's loopback at 1.82 Gbit/s against its peers' 105: a false PT-NET-SLOW-LINK).
TEST(TcpSamplerTest, ConnectionsWithinTheHostAreNoNetworkLink) {
  SendingChild child;
  TcpSampler sampler;
  std::vector<PidSample> out;
  sampler.Sample(kSec, {child.pid()}, &out);
  ASSERT_NO_FATAL_FAILURE(child.Send());
  sampler.Sample(3 * kSec, {child.pid()}, &out);
  EXPECT_TRUE(Values(out, child.pid(), Metric::kTcpDeliveryRateBytesPerSec).empty());
  EXPECT_TRUE(Values(out, child.pid(), Metric::kTcpSendBytesPerSec).empty());
  EXPECT_TRUE(Values(out, child.pid(), Metric::kTcpWireSecondsPerSec).empty());
  EXPECT_GE(sampler.stats().host_local_skipped, 2u);
}

TEST(TcpSamplerTest, ReceiverOnlyAndProcessesWithoutTcpGiveNoRate) {
  SendingChild child;
  TcpSampler sampler("/proc", /*host_local=*/true);
  std::vector<PidSample> out;
  const int32_t self = getpid();  // the receiving end: it acknowledges, it delivers nothing
  sampler.Sample(kSec, {self}, &out);
  ASSERT_NO_FATAL_FAILURE(child.Send());
  sampler.Sample(2 * kSec, {self}, &out);
  EXPECT_TRUE(Values(out, self, Metric::kTcpDeliveryRateBytesPerSec).empty());
  for (double v : Values(out, self, Metric::kTcpSendBytesPerSec)) EXPECT_LT(v, 4096);
}

TEST(TcpSamplerTest, VanishedPidIsCountedNotFatal) {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  TcpSampler sampler;
  std::vector<PidSample> out;
  sampler.Sample(kSec, {pid}, &out);
  sampler.Sample(2 * kSec, {pid}, &out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(sampler.stats().vanished_pids, 2u);
  EXPECT_EQ(sampler.stats().samples, 2u);
}

}  // namespace
}  // namespace perftracker
