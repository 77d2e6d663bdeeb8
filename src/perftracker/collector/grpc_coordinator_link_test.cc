// GrpcCoordinatorLink against a real ControlServer on loopback: what the collector reports
// arrives (summaries decode to what was sent), the server's commands reach the collector,
// nothing blocks while the server is away, and a restarted server gets a re-registration.
#include "perftracker/collector/grpc_coordinator_link.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "perftracker/wire/control_server.h"
#include "perftracker/wire/summary_codec.h"

namespace perftracker {
namespace {

class Recorder : public ControlHandler {
 public:
  class Session : public ControlSession {
   public:
    explicit Session(Recorder* r) : r_(r) {}
    Status OnMessage(CollectorMessage m) override {
      std::lock_guard<std::mutex> lock(r_->mu_);
      r_->messages_.push_back(std::move(m));
      r_->cv_.notify_all();
      return Status::Ok();
    }
    void OnClosed() override {
      std::lock_guard<std::mutex> lock(r_->mu_);
      ++r_->closed_;
      r_->cv_.notify_all();
    }
    Recorder* r_;
  };
  StatusOr<std::shared_ptr<ControlSession>> OnRegister(const ControlRegistration& reg,
                                                       std::shared_ptr<CommandSink> sink) override {
    sink->Send(ControlRegistered{"c1", 0, send_digests_, takes_not_kept_});
    std::lock_guard<std::mutex> lock(mu_);
    registrations_.push_back(reg);
    sinks_.push_back(sink);
    cv_.notify_all();
    return std::shared_ptr<ControlSession>(std::make_shared<Session>(this));
  }
  template <typename P>
  bool WaitUntil(P p, int ms = 5000) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return p(); });
  }
  template <typename T>
  std::vector<T> All() {
    std::vector<T> out;
    for (const auto& m : messages_) {
      if (const T* t = std::get_if<T>(&m)) out.push_back(*t);
    }
    return out;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ControlRegistration> registrations_;
  std::vector<std::shared_ptr<CommandSink>> sinks_;
  std::vector<CollectorMessage> messages_;
  int closed_ = 0;
  bool send_digests_ = false;    // tell collectors to send digests first
  bool takes_not_kept_ = false;  // a server that takes ControlSummariesNotKept
};

class FakeControl : public CollectorControl {
 public:
  void StartWindow(const WindowSpec& w) override {
    std::lock_guard<std::mutex> lock(mu_);
    windows_.push_back(w);
  }
  void DumpStacks(uint64_t window) override {
    std::lock_guard<std::mutex> lock(mu_);
    stacks_.push_back(window);
  }
  void EndWindowNow(uint64_t window) override {
    std::lock_guard<std::mutex> lock(mu_);
    ended_.push_back(window);
  }
  std::mutex mu_;
  std::vector<WindowSpec> windows_;
  std::vector<uint64_t> stacks_, ended_;
};

GrpcLinkOptions LinkOptions(int port) {
  GrpcLinkOptions o;
  o.client.address = "127.0.0.1:" + std::to_string(port);
  o.job_id = "job-7";
  o.host = "node-a";
  o.iteration_flush_ms = 20;
  o.backoff_initial_ms = 50;
  o.backoff_max_ms = 200;
  o.connect_timeout_ms = 500;
  o.log = [](std::string_view) {};
  return o;
}

WorkerSummary Summary(int32_t rank) {
  WorkerSummary s;
  s.rank = rank;
  s.host = "node-a";
  s.source = "live";
  s.window_start_ns = 1000;
  s.window_end_ns = 2000;
  return s;
}

template <typename P>
bool Eventually(P p, int ms = 5000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (p()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TEST(GrpcCoordinatorLinkTest, ForwardsEverythingAndDeliversCommands) {
  Recorder recorder;
  ControlServerOptions so;
  so.token = "tok";
  so.log = [](std::string_view) {};
  auto server = ControlServer::Start(so, &recorder);
  ASSERT_TRUE(server.ok());
  GrpcLinkOptions o = LinkOptions((*server)->port());
  o.client.token = "tok";
  GrpcCoordinatorLink link(o);
  FakeControl control;
  link.SetControl(&control);
  link.OnWorkerJoined({0, 8, 0, 100, "node-a"});  // before connecting: in the registration
  ASSERT_TRUE(link.Start().ok());
  ASSERT_TRUE(link.WaitFirstAttempt(5000).ok());
  ASSERT_TRUE(recorder.WaitUntil([&] { return recorder.registrations_.size() == 1; }));
  EXPECT_EQ(recorder.registrations_[0].job_id, "job-7");
  ASSERT_EQ(recorder.registrations_[0].ranks.size(), 1u);
  EXPECT_EQ(recorder.registrations_[0].ranks[0].pid, 100);
  EXPECT_GT(recorder.registrations_[0].hardware.cpus, 0u);

  link.OnWorkerJoined({1, 8, 1, 101, "node-a"});
  for (int i = 0; i < 10; ++i) link.OnIteration(1, 1000 + i, 50 + i);
  link.OnTrigger(1, WindowReason::kSlowdown, "mean 1.2x");
  link.OnStacks(3, 1, true, "Thread main\n  File x.py, line 1");
  link.OnSummary(3, Summary(1));
  link.OnWorkerLeft(0, true);
  ASSERT_TRUE(recorder.WaitUntil([&] {
    return recorder.All<ControlWorkerLeft>().size() == 1 &&
           !recorder.All<ControlIterations>().empty();
  }));
  {
    std::lock_guard<std::mutex> lock(recorder.mu_);
    size_t points = 0;
    for (const auto& b : recorder.All<ControlIterations>()) points += b.points.size();
    EXPECT_EQ(points, 10u);
    ASSERT_EQ(recorder.All<ControlTrigger>().size(), 1u);
    EXPECT_EQ(recorder.All<ControlTrigger>()[0].reason, WindowReason::kSlowdown);
    const auto summaries = recorder.All<ControlSummary>();
    ASSERT_EQ(summaries.size(), 1u);
    EXPECT_EQ(summaries[0].window, 3u);
    auto decoded = DecodeWorkerSummary(summaries[0].worker_summary);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(decoded->rank, 1);
    EXPECT_EQ(decoded->window_end_ns, 2000);
    EXPECT_EQ(recorder.All<ControlStacks>()[0].text, "Thread main\n  File x.py, line 1");
  }

  recorder.sinks_[0]->Send(WindowSpec{4, 123, 456, WindowReason::kHang});
  recorder.sinks_[0]->Send(ControlDumpStacks{4});
  recorder.sinks_[0]->Send(ControlEndWindow{4});
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> lock(control.mu_);
    return control.ended_.size() == 1;
  }));
  ASSERT_EQ(control.windows_.size(), 1u);
  EXPECT_EQ(control.windows_[0].id, 4u);
  EXPECT_EQ(control.windows_[0].reason, WindowReason::kHang);
  EXPECT_EQ(control.windows_[0].end_ns(), 579);
  EXPECT_EQ(control.stacks_, std::vector<uint64_t>{4});

  link.Stop(2000);
  ASSERT_TRUE(recorder.WaitUntil([&] { return recorder.closed_ == 1; }));
  (*server)->Shutdown();
}

TEST(GrpcCoordinatorLinkTest, UnreachableServerNeverBlocksAndDropsAreCounted) {
  GrpcLinkOptions o = LinkOptions(1);  // nothing listens on port 1
  o.max_queued_messages = 5;
  GrpcCoordinatorLink link(o);
  ASSERT_TRUE(link.Start().ok());
  const Status first = link.WaitFirstAttempt(5000);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.message(), "cannot reach the server at 127.0.0.1:1 within 500 ms");
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) link.OnSummary(1, Summary(i));
  for (int i = 0; i < 100000; ++i) link.OnIteration(0, i, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(link.stats().dropped_messages, 95u + (100000u - kMaxIterationsPerBatch));
  EXPECT_FALSE(link.stats().connected);
  link.Stop(100);
}

TEST(GrpcCoordinatorLinkTest, ReconnectsToARestartedServerAndRegistersAgain) {
  Recorder first;
  ControlServerOptions so;
  so.log = [](std::string_view) {};
  auto server = ControlServer::Start(so, &first);
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  GrpcCoordinatorLink link(LinkOptions(port));
  FakeControl control;
  link.SetControl(&control);
  ASSERT_TRUE(link.Start().ok());
  ASSERT_TRUE(link.WaitFirstAttempt(5000).ok());
  link.OnWorkerJoined({0, 2, 0, 10, "node-a"});
  link.OnWorkerJoined({1, 2, 1, 11, "node-a"});
  ASSERT_TRUE(first.WaitUntil([&] { return first.All<WorkerInfo>().size() == 2; }));

  (*server)->Shutdown();  // the server goes away
  ASSERT_TRUE(Eventually([&] { return !link.stats().connected; }));
  link.OnTrigger(0, WindowReason::kSlowdown, "while the server was away");

  Recorder second;
  so.listen = "127.0.0.1:" + std::to_string(port);
  auto restarted = ControlServer::Start(so, &second);
  ASSERT_TRUE(restarted.ok()) << restarted.status().message();
  ASSERT_TRUE(second.WaitUntil([&] { return !second.All<ControlTrigger>().empty(); }));
  ASSERT_EQ(second.registrations_.size(), 1u);
  EXPECT_EQ(second.registrations_[0].ranks.size(), 2u) << "the ranks connected now";
  EXPECT_EQ(link.stats().connections, 2u);
  second.sinks_[0]->Send(WindowSpec{1, 5, 10, WindowReason::kSlowdown});
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> lock(control.mu_);
    return control.windows_.size() == 1;
  }));
  link.Stop(1000);
  (*restarted)->Shutdown();
}

}  // namespace
}  // namespace perftracker

namespace perftracker {
namespace {

TEST(GrpcCoordinatorLinkTest, RecordingsStayHereUntilTheServerAsksThenGoInChunksOnce) {
  Recorder recorder;
  ControlServerOptions so;
  so.log = [](std::string_view) {};
  auto server = ControlServer::Start(so, &recorder);
  ASSERT_TRUE(server.ok());
  GrpcCoordinatorLink link(LinkOptions((*server)->port()));
  link.OnWorkerJoined({0, 2, 0, 100, "node-a"});
  link.OnWorkerJoined({1, 2, 1, 101, "node-a"});
  ASSERT_TRUE(link.Start().ok());
  ASSERT_TRUE(link.WaitFirstAttempt(5000).ok());
  ASSERT_TRUE(recorder.WaitUntil([&] { return recorder.sinks_.size() == 1; }));

  // Rank 0's recording of window 4: two and a half chunks.
  const std::string path =
      ::testing::TempDir() + "grpc-link-recording-" + std::to_string(::getpid()) + ".ptrace";
  std::string bytes(kMaxRecordingChunkBytes * 5 / 2, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  link.OnWindowRecording(4, 0, path);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  {
    std::lock_guard<std::mutex> lock(recorder.mu_);
    EXPECT_TRUE(recorder.All<ControlWindowRecording>().empty()) << "sent only when asked";
  }
  ASSERT_TRUE(recorder.sinks_[0]->Send(ControlSendRecordings{4}));
  ASSERT_TRUE(recorder.WaitUntil([&] {
    const auto got = recorder.All<ControlWindowRecording>();
    return got.size() == 4;
  }));
  std::lock_guard<std::mutex> lock(recorder.mu_);
  const auto got = recorder.All<ControlWindowRecording>();
  std::string received;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].rank, 0);
    EXPECT_EQ(got[i].window, 4u);
    EXPECT_EQ(got[i].offset, received.size());
    EXPECT_EQ(got[i].last, i == 2);
    received += got[i].data;
  }
  EXPECT_TRUE(received == bytes) << "the file's bytes, in order";
  EXPECT_EQ(got[3].rank, 1);
  EXPECT_TRUE(got[3].last);
  EXPECT_EQ(got[3].missing,
            "its collector on node-a recorded none: --perfetto-events-per-rank 0, or no event "
            "of the window");
  EXPECT_FALSE(std::filesystem::exists(path)) << "sent once, then removed from this host";
}

}  // namespace
}  // namespace perftracker

namespace perftracker {
namespace {

// A link told to send digests, against a server that asks for full summaries later.
struct DigestLink {
  explicit DigestLink(GrpcLinkOptions o, bool takes_not_kept = false) {
    recorder.send_digests_ = true;
    recorder.takes_not_kept_ = takes_not_kept;
    ControlServerOptions so;
    so.log = [](std::string_view) {};
    server = std::move(ControlServer::Start(so, &recorder)).value();
    GrpcLinkOptions lo = LinkOptions(server->port());
    lo.max_kept_bytes = o.max_kept_bytes;
    lo.keep_summaries_ms = o.keep_summaries_ms;
    lo.log = [this](std::string_view line) {
      std::lock_guard<std::mutex> lock(log_mu);
      log.emplace_back(line);
    };
    link = std::make_unique<GrpcCoordinatorLink>(lo);
    link->SetControl(&control);
    link->OnWorkerJoined({0, 2, 0, 10, "node-a"});
    link->OnWorkerJoined({1, 2, 1, 11, "node-a"});
    EXPECT_TRUE(link->Start().ok());
    EXPECT_TRUE(link->WaitFirstAttempt(5000).ok());
  }
  ~DigestLink() {
    link->Stop(1000);
    server->Shutdown();
  }
  // Asks for `ranks` of `window`; waits until the link answered (sent or counted unkept).
  void Ask(uint64_t window, std::vector<int32_t> ranks) {
    const GrpcLinkStats before = link->stats();
    const uint64_t n = ranks.size();
    recorder.sinks_.back()->Send(ControlRequestSummaries{window, std::move(ranks)});
    EXPECT_TRUE(Eventually([&] {
      const GrpcLinkStats now = link->stats();
      return now.summaries_asked + now.summaries_unkept ==
             before.summaries_asked + before.summaries_unkept + n;
    }));
  }
  std::vector<ControlSummariesNotKept> NotKept() {
    std::lock_guard<std::mutex> lock(recorder.mu_);
    return recorder.All<ControlSummariesNotKept>();
  }
  std::vector<std::pair<uint64_t, int32_t>> FullSummaries() {
    std::lock_guard<std::mutex> lock(recorder.mu_);
    std::vector<std::pair<uint64_t, int32_t>> out;
    for (const auto& s : recorder.All<ControlSummary>()) out.emplace_back(s.window, s.rank);
    return out;
  }
  Recorder recorder;
  std::unique_ptr<ControlServer> server;
  FakeControl control;
  std::unique_ptr<GrpcCoordinatorLink> link;
  std::mutex log_mu;
  std::vector<std::string> log;
};

// max_kept_bytes (--keep-summaries-mb): the oldest window's summaries make room for a newer
// window's; one that does not fit beside its own window's is not kept, and counted; the
// server's request for what is gone is answered by nothing, counted and logged.
TEST(GrpcCoordinatorLinkTest, KeptSummariesMakeRoomOldestWindowFirst) {
  const size_t one = EncodeWorkerSummary(Summary(0)).size();
  GrpcLinkOptions o;
  o.max_kept_bytes = 2 * one + one / 2;  // room for two
  DigestLink d(o);
  d.link->OnSummary(1, Summary(0));
  d.link->OnSummary(1, Summary(1));
  d.link->OnSummary(2, Summary(0));  // window 1's two go
  d.link->OnSummary(2, Summary(1));
  EXPECT_EQ(d.link->stats().summaries_unkept, 0u);
  ASSERT_TRUE(d.recorder.WaitUntil([&] { return d.recorder.All<ControlDigest>().size() == 4; }));
  EXPECT_EQ(d.link->stats().digests_sent, 4u);

  d.Ask(1, {0, 1});
  EXPECT_EQ(d.link->stats().summaries_unkept, 2u);
  d.Ask(2, {1, 0});
  ASSERT_TRUE(Eventually([&] { return d.FullSummaries().size() == 2; }));
  EXPECT_EQ(d.FullSummaries(), (std::vector<std::pair<uint64_t, int32_t>>{{2, 1}, {2, 0}}));
  EXPECT_EQ(d.link->stats().summaries_asked, 2u);

  // A third summary of one window does not fit beside its own two (nothing older to drop).
  d.link->OnSummary(3, Summary(0));
  d.link->OnSummary(3, Summary(1));
  d.link->OnSummary(3, Summary(2));
  EXPECT_EQ(d.link->stats().summaries_unkept, 3u);
  EXPECT_EQ(d.link->stats().digests_sent, 7u) << "its digest still goes";
  std::lock_guard<std::mutex> lock(d.log_mu);
  bool said = false;
  for (const auto& line : d.log) {
    said = said || line.find(
                       "asked for 2 full summaries of window 1 that this collector does "
                       "not keep") != std::string::npos;
  }
  EXPECT_TRUE(said) << "the unkept request is logged";
  EXPECT_TRUE(d.NotKept().empty()) << "a server that does not take the answer gets none";
}

// A server that takes the answer is told at once which requested ranks are not kept, and
// why, so that it need not wait --wait-summaries-seconds for them; the kept ones come.
TEST(GrpcCoordinatorLinkTest, RequestedSummariesNoLongerKeptAreAnsweredNotKept) {
  const size_t one = EncodeWorkerSummary(Summary(0)).size();
  GrpcLinkOptions o;
  o.max_kept_bytes = 2 * one + one / 2;  // room for two
  DigestLink d(o, /*takes_not_kept=*/true);
  d.link->OnSummary(1, Summary(0));
  d.link->OnSummary(2, Summary(0));
  d.link->OnSummary(2, Summary(1));  // window 1's goes to make room
  d.link->OnSummary(2, Summary(2));  // does not fit beside its own window's two
  ASSERT_TRUE(d.recorder.WaitUntil([&] { return d.recorder.All<ControlDigest>().size() == 4; }));
  d.Ask(1, {0});
  d.Ask(2, {0, 1, 2});
  d.Ask(3, {4});  // a window this collector never had
  ASSERT_TRUE(Eventually([&] { return d.NotKept().size() == 3; }));
  const std::vector<ControlSummariesNotKept> n = d.NotKept();
  EXPECT_EQ(n[0].window, 1u);
  EXPECT_EQ(n[0].ranks, (std::vector<int32_t>{0}));
  EXPECT_NE(n[0].reason.find("--keep-summaries-mb"), std::string::npos) << n[0].reason;
  EXPECT_EQ(n[1].window, 2u);
  EXPECT_EQ(n[1].ranks, (std::vector<int32_t>{2}));
  EXPECT_NE(n[1].reason.find("--keep-summaries-mb"), std::string::npos) << n[1].reason;
  EXPECT_EQ(n[2].window, 3u);
  EXPECT_EQ(n[2].ranks, (std::vector<int32_t>{4}));
  ASSERT_TRUE(Eventually([&] { return d.FullSummaries().size() == 2; }));
  EXPECT_EQ(d.FullSummaries(), (std::vector<std::pair<uint64_t, int32_t>>{{2, 0}, {2, 1}}));
}

// keep_summaries_ms (--keep-summaries-seconds): a window's summaries are gone once it passed,
// whether or not a newer summary came.
TEST(GrpcCoordinatorLinkTest, KeptSummariesExpireAfterKeepSummariesMs) {
  GrpcLinkOptions o;
  o.keep_summaries_ms = 50;
  DigestLink d(o);
  d.link->OnSummary(1, Summary(0));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // > keep_summaries_ms
  d.Ask(1, {0});
  EXPECT_EQ(d.link->stats().summaries_unkept, 1u);
  EXPECT_EQ(d.link->stats().summaries_asked, 0u);
}

TEST(GrpcCoordinatorLinkTest, ExpiredSummariesAreAnsweredNotKeptWithTheLimit) {
  GrpcLinkOptions o;
  o.keep_summaries_ms = 50;
  DigestLink d(o, /*takes_not_kept=*/true);
  d.link->OnSummary(1, Summary(0));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // > keep_summaries_ms
  d.Ask(1, {0});
  ASSERT_TRUE(Eventually([&] { return d.NotKept().size() == 1; }));
  EXPECT_EQ(d.NotKept()[0].ranks, (std::vector<int32_t>{0}));
  EXPECT_NE(d.NotKept()[0].reason.find("--keep-summaries-seconds"), std::string::npos)
      << d.NotKept()[0].reason;
}

TEST(GrpcCoordinatorLinkTest, KeptSummariesGoWhenTheServerSaysTheWindowIsDiagnosed) {
  GrpcLinkOptions o;
  DigestLink d(o);
  d.link->OnSummary(4, Summary(0));
  d.link->OnSummary(5, Summary(1));
  ASSERT_TRUE(d.recorder.WaitUntil([&] { return d.recorder.All<ControlDigest>().size() == 2; }));
  d.recorder.sinks_.back()->Send(ControlWindowDiagnosed{4});
  d.Ask(5, {1});  // commands are handled in order: window 4's are gone by now
  d.Ask(4, {0});
  EXPECT_EQ(d.link->stats().summaries_asked, 1u);
  EXPECT_EQ(d.link->stats().summaries_unkept, 1u);
}

}  // namespace
}  // namespace perftracker
