// The control plane's transport over real gRPC on loopback: registration, commands both
// ways, token auth, TLS with a self-signed certificate made by openssl, and the messages a
// server must refuse without falling over.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "perftracker/wire/control_client.h"
#include "perftracker/wire/control_server.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;

// Records what collectors send; rejects summaries of window 99 and keeps every sink.
class RecordingHandler : public ControlHandler {
 public:
  class Session : public ControlSession {
   public:
    explicit Session(RecordingHandler* h) : h_(h) {}
    Status OnMessage(CollectorMessage message) override {
      if (const auto* s = std::get_if<ControlSummary>(&message); s && s->window == 99) {
        return Status::InvalidArgument("summary of rank " + std::to_string(s->rank) +
                                       " for window 99: no such window");
      }
      std::lock_guard<std::mutex> lock(h_->mu_);
      h_->messages_.push_back(std::move(message));
      h_->cv_.notify_all();
      return Status::Ok();
    }
    void OnClosed() override {
      std::lock_guard<std::mutex> lock(h_->mu_);
      ++h_->closed_;
      h_->cv_.notify_all();
    }

   private:
    RecordingHandler* h_;
  };

  StatusOr<std::shared_ptr<ControlSession>> OnRegister(const ControlRegistration& r,
                                                       std::shared_ptr<CommandSink> sink) override {
    if (r.job_id == "refused") return Status::InvalidArgument("job 'refused' is not welcome");
    sink->Send(ControlRegistered{"c-" + r.host, 42});
    std::lock_guard<std::mutex> lock(mu_);
    registrations_.push_back(r);
    sinks_.push_back(sink);
    cv_.notify_all();
    return std::shared_ptr<ControlSession>(std::make_shared<Session>(this));
  }

  template <typename Pred>
  bool WaitUntil(Pred pred, int timeout_ms = 20000) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return pred(); });
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ControlRegistration> registrations_;
  std::vector<std::shared_ptr<CommandSink>> sinks_;
  std::vector<CollectorMessage> messages_;
  int closed_ = 0;
};

ControlRegistration Registration(const std::string& host) {
  ControlRegistration r;
  r.job_id = "job-1";
  r.host = host;
  r.title = "train.py";
  r.ranks = {{0, 8, 0, 100, host}, {1, 8, 1, 101, host}};
  r.hardware.cpus = 2;
  return r;
}

class ControlServerTest : public ::testing::Test {
 protected:
  void StartServer(ControlServerOptions o = {}) {
    o.log = [this](std::string_view line) {
      std::lock_guard<std::mutex> lock(log_mu_);
      log_.emplace_back(line);
    };
    auto server = ControlServer::Start(o, &handler_);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(server).value();
    address_ = "127.0.0.1:" + std::to_string(server_->port());
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  std::unique_ptr<ControlClient> Client(ControlClientOptions o = {}) {
    if (o.address.empty()) o.address = address_;
    auto client = ControlClient::Create(o);
    EXPECT_TRUE(client.ok());
    return std::move(client).value();
  }

  std::vector<std::string> Log() {
    std::lock_guard<std::mutex> lock(log_mu_);
    return log_;
  }

  RecordingHandler handler_;
  std::unique_ptr<ControlServer> server_;
  std::string address_;
  std::mutex log_mu_;
  std::vector<std::string> log_;
};

TEST_F(ControlServerTest, RegistersStreamsMessagesBothWaysAndClosesTheSession) {
  StartServer();
  auto client = Client();
  auto stream = client->Connect(Registration("node-a"), 5000);
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  EXPECT_EQ((*stream)->registered().collector_id, "c-node-a");
  EXPECT_EQ((*stream)->registered().server_time_ns, 42);
  ASSERT_TRUE(handler_.WaitUntil([&] { return handler_.registrations_.size() == 1; }));
  EXPECT_EQ(handler_.registrations_[0].ranks.size(), 2u);
  EXPECT_EQ(handler_.registrations_[0].ranks[1].pid, 101);

  ASSERT_TRUE((*stream)->Write(ControlIterations{{{0, 1000, 10}, {1, 1001, 11}}}));
  ASSERT_TRUE((*stream)->Write(ControlTrigger{1, WindowReason::kSlowdown, "mean 1.3x"}));
  ASSERT_TRUE((*stream)->Write(ControlSummary{7, 1, std::string(100000, 'x')}));
  ASSERT_TRUE((*stream)->Write(ControlJobExited{143}));
  ASSERT_TRUE(handler_.WaitUntil([&] { return handler_.messages_.size() == 4; }));
  const auto& its = std::get<ControlIterations>(handler_.messages_[0]);
  ASSERT_EQ(its.points.size(), 2u);
  EXPECT_EQ(its.points[1].duration_ns, 11);
  EXPECT_EQ(std::get<ControlTrigger>(handler_.messages_[1]).detail, "mean 1.3x");
  EXPECT_EQ(std::get<ControlSummary>(handler_.messages_[2]).worker_summary.size(), 100000u);
  EXPECT_EQ(std::get<ControlJobExited>(handler_.messages_[3]).exit_code, 143);

  ASSERT_TRUE(handler_.sinks_[0]->Send(WindowSpec{3, 5000, 2000, WindowReason::kHang}));
  ASSERT_TRUE(handler_.sinks_[0]->Send(ControlDumpStacks{3}));
  ServerMessage m;
  ASSERT_TRUE((*stream)->Read(&m));
  ASSERT_TRUE(std::holds_alternative<WindowSpec>(m));
  EXPECT_EQ(std::get<WindowSpec>(m).reason, WindowReason::kHang);
  EXPECT_EQ(std::get<WindowSpec>(m).duration_ns, 2000);
  ASSERT_TRUE((*stream)->Read(&m));
  EXPECT_EQ(std::get<ControlDumpStacks>(m).window, 3u);

  (*stream)->Cancel();
  while ((*stream)->Read(&m)) {
  }
  ASSERT_TRUE(handler_.WaitUntil([&] { return handler_.closed_ == 1; }));
  EXPECT_FALSE(handler_.sinks_[0]->Send(ControlDumpStacks{4})) << "a closed stream's sink refuses";
}

TEST_F(ControlServerTest, ARejectedMessageIsAnsweredWithItsReasonAndTheStreamGoesOn) {
  StartServer();
  auto client = Client();
  auto stream = client->Connect(Registration("node-a"), 5000);
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE((*stream)->Write(ControlSummary{99, 3, "bytes"}));
  ServerMessage m;
  ASSERT_TRUE((*stream)->Read(&m));
  ASSERT_TRUE(std::holds_alternative<ControlRejected>(m));
  EXPECT_EQ(std::get<ControlRejected>(m).error, "summary of rank 3 for window 99: no such window");
  // Invalid fields are refused by the wire layer before the session sees them.
  ASSERT_TRUE((*stream)->Write(ControlWorkerLeft{-4, true}));
  ASSERT_TRUE((*stream)->Read(&m));
  EXPECT_EQ(std::get<ControlRejected>(m).error, "worker_left: rank is negative");
  ASSERT_TRUE((*stream)->Write(ControlJobExited{256}));
  ASSERT_TRUE((*stream)->Read(&m));
  EXPECT_EQ(std::get<ControlRejected>(m).error, "job_exited: exit code 256 is not in [0, 255]");
  ASSERT_TRUE((*stream)->Write(ControlHeartbeat{1, 0}));
  ASSERT_TRUE(handler_.WaitUntil([&] { return handler_.messages_.size() == 1; }));
  EXPECT_TRUE(std::holds_alternative<ControlHeartbeat>(handler_.messages_[0]));
  EXPECT_EQ(server_->stats().messages_rejected, 3u);
}

TEST_F(ControlServerTest, WindowRecordingsGoBothWaysAndBadChunksAreRefused) {
  StartServer();
  auto client = Client();
  auto stream = client->Connect(Registration("node-a"), 5000);
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  ASSERT_TRUE(handler_.WaitUntil([&] { return handler_.sinks_.size() == 1; }));
  ASSERT_TRUE(handler_.sinks_[0]->Send(ControlSendRecordings{5}));
  ServerMessage m;
  ASSERT_TRUE((*stream)->Read(&m));
  EXPECT_EQ(std::get<ControlSendRecordings>(m).window, 5u);

  const std::string chunk(kMaxRecordingChunkBytes, 'e');
  ASSERT_TRUE((*stream)->Write(ControlWindowRecording{5, 1, 0, chunk, false, ""}));
  ASSERT_TRUE((*stream)->Write(ControlWindowRecording{5, 1, chunk.size(), "end", true, ""}));
  ASSERT_TRUE((*stream)->Write(ControlWindowRecording{5, 0, 0, "", true, "recorded none"}));
  ASSERT_TRUE(handler_.WaitUntil([&] { return handler_.messages_.size() == 3; }));
  const auto& first = std::get<ControlWindowRecording>(handler_.messages_[0]);
  EXPECT_EQ(first.data.size(), kMaxRecordingChunkBytes);
  EXPECT_FALSE(first.last);
  const auto& second = std::get<ControlWindowRecording>(handler_.messages_[1]);
  EXPECT_EQ(second.offset, kMaxRecordingChunkBytes);
  EXPECT_EQ(second.data, "end");
  EXPECT_TRUE(second.last);
  EXPECT_EQ(std::get<ControlWindowRecording>(handler_.messages_[2]).missing, "recorded none");

  ASSERT_TRUE((*stream)->Write(ControlWindowRecording{5, 1, 0, chunk + "x", true, ""}));
  ASSERT_TRUE((*stream)->Read(&m));
  EXPECT_EQ(std::get<ControlRejected>(m).error,
            "window_recording: data is 1048577 bytes, over the limit of 1048576");
  ASSERT_TRUE((*stream)->Write(ControlWindowRecording{5, 1, 0, "x", true, "none"}));
  ASSERT_TRUE((*stream)->Read(&m));
  EXPECT_EQ(std::get<ControlRejected>(m).error,
            "window_recording: a missing recording carries data or is not the last chunk");
}

TEST_F(ControlServerTest, RefusedRegistrationsEndTheStreamWithTheReason) {
  StartServer();
  auto client = Client();
  ControlRegistration r = Registration("node-a");
  r.job_id = "refused";
  auto stream = client->Connect(r, 5000);
  ASSERT_FALSE(stream.ok());
  EXPECT_NE(stream.status().message().find("job 'refused' is not welcome"), std::string::npos)
      << stream.status().message();
  r.job_id = "";
  stream = client->Connect(r, 5000);
  ASSERT_FALSE(stream.ok());
  EXPECT_NE(stream.status().message().find("registration: the job id is empty"), std::string::npos)
      << stream.status().message();
  r.job_id = "ok";
  r.protocol_version = 9;
  stream = client->Connect(r, 5000);
  ASSERT_FALSE(stream.ok());
  EXPECT_NE(stream.status().message().find("protocol version 9 is not supported"),
            std::string::npos)
      << stream.status().message();
}

TEST_F(ControlServerTest, TokenIsRequiredAndRefusalsAreLoggedOncePerPeer) {
  ControlServerOptions o;
  o.token = "s3cret-token";
  StartServer(o);
  for (const std::string token : {"", "wrong", "s3cret-tokeN", "s3cret-token-and-more"}) {
    ControlClientOptions co;
    co.token = token;
    auto stream = Client(co)->Connect(Registration("node-a"), 5000);
    ASSERT_FALSE(stream.ok()) << "token '" << token << "'";
    EXPECT_NE(stream.status().message().find("refused the token"), std::string::npos)
        << stream.status().message();
  }
  EXPECT_EQ(server_->stats().unauthenticated, 4u);
  EXPECT_TRUE(handler_.registrations_.empty());
  std::vector<std::string> refusals;
  for (const auto& line : Log()) {
    if (line.find("refused a collector from ipv4:127.0.0.1") != std::string::npos)
      refusals.push_back(line);
  }
  ASSERT_EQ(refusals.size(), 1u) << "logged once per peer address";
  EXPECT_NE(refusals[0].find("no token"), std::string::npos) << refusals[0];

  ControlClientOptions good;
  good.token = "s3cret-token";
  auto stream = Client(good)->Connect(Registration("node-a"), 5000);
  ASSERT_TRUE(stream.ok()) << stream.status().message();
}

// Every collector's connection is an open file of the server: near the process's limit the
// log says, once, how many are open, what the limit is and how to raise it.
TEST_F(ControlServerTest, StreamsNearTheOpenFilesLimitAreLoggedOnceWithWhatToDo) {
  ControlServerOptions o;
  o.open_files_limit = 6;  // said from the 3rd stream (half of a limit this small)
  StartServer(o);
  const auto warnings = [&] {
    std::vector<std::string> out;
    for (const auto& line : Log()) {
      if (line.find("RLIMIT_NOFILE") != std::string::npos) out.push_back(line);
    }
    return out;
  };
  std::vector<std::unique_ptr<ControlClient>> clients;
  std::vector<std::unique_ptr<ControlStream>> streams;
  for (int i = 0; i < 4; ++i) {
    ControlClientOptions co;
    co.private_connection = true;
    clients.push_back(Client(co));
    auto stream = clients.back()->Connect(Registration("node-" + std::to_string(i)), 20000);
    ASSERT_TRUE(stream.ok()) << stream.status().message();
    streams.push_back(std::move(stream).value());
    if (i < 2) {
      EXPECT_TRUE(warnings().empty()) << "said at stream " << i + 1;
    }
  }
  const std::vector<std::string> said = warnings();
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find("3 collector streams are open"), std::string::npos) << said[0];
  EXPECT_NE(said[0].find("may open 6 files"), std::string::npos) << said[0];
  EXPECT_NE(said[0].find("ulimit -n"), std::string::npos) << said[0];
  for (auto& s : streams) s->Cancel();
}

TEST(TokenMatchesTest, ComparesWholeTokens) {
  EXPECT_TRUE(TokenMatches("abc", "abc"));
  EXPECT_FALSE(TokenMatches("abd", "abc"));
  EXPECT_FALSE(TokenMatches("ab", "abc"));
  EXPECT_FALSE(TokenMatches("abcd", "abc"));
  EXPECT_FALSE(TokenMatches("", "abc"));
  EXPECT_FALSE(TokenMatches("", "")) << "an empty expected token never matches";
}

TEST_F(ControlServerTest, OversizedMessagesEndOnlyTheirStream) {
  ControlServerOptions o;
  o.max_message_bytes = 64 * 1024;
  StartServer(o);
  auto client = Client();
  auto stream = client->Connect(Registration("node-a"), 5000);
  ASSERT_TRUE(stream.ok());
  (*stream)->Write(ControlSummary{1, 0, std::string(200 * 1024, 'x')});
  ServerMessage m;
  while ((*stream)->Read(&m)) {
  }
  const Status st = (*stream)->Finish();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("(8)"), std::string::npos) << "RESOURCE_EXHAUSTED: " << st.message();
  EXPECT_TRUE(handler_.messages_.empty());
  ASSERT_TRUE(handler_.WaitUntil([&] { return handler_.closed_ == 1; }));
  // The server lives on.
  auto again = client->Connect(Registration("node-b"), 5000);
  ASSERT_TRUE(again.ok()) << again.status().message();
}

TEST_F(ControlServerTest, UnreachableServerIsOneClearError) {
  StartServer();
  const int port = server_->port();
  server_->Shutdown();
  ControlClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(port);
  auto client = ControlClient::Create(o);
  ASSERT_TRUE(client.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto stream = (*client)->Connect(Registration("node-a"), 300);
  ASSERT_FALSE(stream.ok());
  EXPECT_EQ(stream.status().message(),
            "cannot reach the server at " + o.address + " within 300 ms");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
}

TEST_F(ControlServerTest, ShutdownEndsOpenStreams) {
  StartServer();
  auto client = Client();
  auto stream = client->Connect(Registration("node-a"), 5000);
  ASSERT_TRUE(stream.ok());
  std::thread reader([&] {
    ServerMessage m;
    while ((*stream)->Read(&m)) {
    }
  });
  server_->Shutdown();
  reader.join();
  EXPECT_FALSE((*stream)->Finish().ok());
  EXPECT_EQ(handler_.closed_, 1);
}

// TLS with a self-signed certificate for 127.0.0.1 / localhost, made by openssl.
class ControlTlsTest : public ControlServerTest {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("perftracker-tls-test-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    const std::string cmd =
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost "
        "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " +
        (dir_ / "key.pem").string() + " -out " + (dir_ / "cert.pem").string() + " 2>/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "openssl is needed: " << cmd;
    cert_ = Read(dir_ / "cert.pem");
    key_ = Read(dir_ / "key.pem");
  }
  void TearDown() override {
    ControlServerTest::TearDown();
    fs::remove_all(dir_);
  }
  static std::string Read(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  fs::path dir_;
  std::string cert_, key_;
};

TEST_F(ControlTlsTest, CollectorsConnectOverTlsAndPlaintextIsRefused) {
  ControlServerOptions o;
  o.tls_cert_pem = cert_;
  o.tls_key_pem = key_;
  o.token = "t";
  StartServer(o);
  ControlClientOptions tls;
  tls.tls_ca_pem = cert_;
  tls.token = "t";
  auto stream = Client(tls)->Connect(Registration("node-a"), 5000);
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  ASSERT_TRUE((*stream)->Write(ControlHeartbeat{5, 0}));
  ASSERT_TRUE(handler_.WaitUntil([&] { return handler_.messages_.size() == 1; }));

  ControlClientOptions plain;
  plain.token = "t";
  auto refused = Client(plain)->Connect(Registration("node-b"), 1000);
  EXPECT_FALSE(refused.ok()) << "a plaintext client cannot talk to a TLS port";

  // A client that trusts another certificate fails the handshake.
  ControlClientOptions other = tls;
  other.tls_ca_pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  auto untrusted = Client(other)->Connect(Registration("node-c"), 1000);
  EXPECT_FALSE(untrusted.ok());
  EXPECT_EQ(handler_.registrations_.size(), 1u);
}

}  // namespace
}  // namespace perftracker
