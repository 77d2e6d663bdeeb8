// Two `perftracker server`s (ServerProcess: gRPC, HTTP, store) on one PostgreSQL database,
// as a fleet deployment runs them (docs/server.md): each coordinates the job whose collector
// connects to it, and each one's HTTP API serves the other's job, its windows and
// diagnosis. Then a server stops and a new one on the same database continues its job's
// window ids. One PostgreSQL cluster for the binary (PostgresTestServer).
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "perftracker/server/postgres/postgres_test_server.h"
#include "perftracker/server/server_process.h"
#include "perftracker/wire/control_client.h"
#include "perftracker/wire/summary_codec.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kMs = 1'000'000;
constexpr const char* kToken = "fleet-test-token-0123456789";

PostgresTestServer* g_server = nullptr;

class PostgresEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    StatusOr<std::unique_ptr<PostgresTestServer>> server = PostgresTestServer::Start();
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(server).value();
    g_server = server_.get();
  }
  void TearDown() override {
    g_server = nullptr;
    server_.reset();
  }

 private:
  std::unique_ptr<PostgresTestServer> server_;
};

[[maybe_unused]] ::testing::Environment* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new PostgresEnvironment);

template <typename P>
bool Eventually(P p, int ms = 30000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (p()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// A collector of one host serving two ranks of `job`, driven by hand.
struct Collector {
  std::unique_ptr<ControlClient> client;
  std::unique_ptr<ControlStream> stream;

  static Collector Connect(int grpc_port, const std::string& job) {
    ControlClientOptions o;
    o.address = "127.0.0.1:" + std::to_string(grpc_port);
    o.token = kToken;
    o.private_connection = true;
    Collector c;
    c.client = std::move(ControlClient::Create(o)).value();
    ControlRegistration r;
    r.job_id = job;
    r.host = "node-" + job;
    r.title = "train.py " + job;
    for (int rank = 0; rank < 2; ++rank) r.ranks.push_back({rank, 2, rank, 1000 + rank, r.host});
    auto stream = c.client->Connect(r, 10000);
    EXPECT_TRUE(stream.ok()) << stream.status().message();
    if (stream.ok()) c.stream = std::move(stream).value();
    return c;
  }

  // Asks for a window, answers it with both ranks' summaries; returns its id.
  uint64_t RunWindow() {
    stream->Write(ControlTrigger{1, "slowdown", "mean 1.3x the shortest"});
    for (;;) {
      ServerMessage m;
      if (!stream->Read(&m)) {
        ADD_FAILURE() << "the stream ended before a window";
        return 0;
      }
      const auto* w = std::get_if<ControlWindow>(&m);
      if (w == nullptr) continue;
      for (int rank = 0; rank < 2; ++rank) {
        WorkerSummary s;
        s.rank = rank;
        s.host = "node";
        s.source = "live";
        s.window_start_ns = w->start_ns;
        s.window_end_ns = w->start_ns + w->duration_ns;
        stream->Write(ControlSummary{w->id, rank, EncodeWorkerSummary(s)});
      }
      return w->id;
    }
  }
};

class SharedStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(g_server, nullptr) << "no PostgreSQL test server (see the environment's failure)";
    StatusOr<std::string> url = g_server->CreateDatabase();
    ASSERT_TRUE(url.ok()) << url.status().message();
    url_ = *url;
    dir_ = fs::temp_directory_path() / ("perftracker-shared-store-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    servers_.clear();
    fs::remove_all(dir_);
  }

  ServerProcess* StartServer(const std::string& name) {
    ServerProcessOptions o;
    o.listen = "127.0.0.1:0";
    o.http_listen = "127.0.0.1:0";
    o.store_path = url_;
    o.token = kToken;
    CoordinatorOptions& co = o.service.coordinator;
    co.report_dir = (dir_ / name).string();
    co.window_ns = 300 * kMs;
    co.delay_ns = 50 * kMs;
    co.wait_summaries_ns = 5000 * kMs;
    co.cooldown_ns = 0;
    co.log = [](std::string_view) {};
    o.service.report_poll_ms = 20;
    o.service.log = [](std::string_view) {};
    auto server = std::make_unique<ServerProcess>(o);
    const Status st = server->Start();
    EXPECT_TRUE(st.ok()) << st.message();
    servers_.push_back(std::move(server));
    return servers_.back().get();
  }

  // GET `path` from a server's HTTP API: the JSON body, or null when not 200.
  static nlohmann::json Get(ServerProcess* server, const std::string& path) {
    httplib::Client cli("127.0.0.1", server->http_port());
    cli.set_connection_timeout(5);
    cli.set_read_timeout(10);
    cli.set_bearer_token_auth(kToken);
    auto r = cli.Get(path);
    if (!r || r->status != 200) return nullptr;
    return nlohmann::json::parse(r->body, nullptr, false);
  }

  std::string url_;
  fs::path dir_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
};

TEST_F(SharedStoreTest, TwoServersOnOneDatabaseServeEachOthersJobs) {
  ServerProcess* one = StartServer("one");
  ServerProcess* two = StartServer("two");
  ASSERT_FALSE(HasFailure());
  Collector a = Collector::Connect(one->grpc_port(), "job-a");
  Collector b = Collector::Connect(two->grpc_port(), "job-b");
  ASSERT_TRUE(a.stream && b.stream);
  EXPECT_EQ(a.RunWindow(), 1u);
  EXPECT_EQ(b.RunWindow(), 1u);

  // Each job's diagnosis, written by the server that coordinated it, is served by both.
  for (ServerProcess* server : {one, two}) {
    for (const char* job : {"job-a", "job-b"}) {
      const std::string path = std::string("/api/v1/jobs/") + job + "/windows/1/diagnosis";
      nlohmann::json d;
      EXPECT_TRUE(Eventually([&] {
        d = Get(server, path);
        return !d.is_null();
      })) << path
          << " on server " << (server == one ? "one" : "two");
      if (d.is_null()) continue;
      EXPECT_EQ(d["job_id"], job);
      EXPECT_EQ(d["diagnosis"]["num_workers"], 2) << d.dump().substr(0, 400);
    }
    const nlohmann::json jobs = Get(server, "/api/v1/jobs");
    ASSERT_FALSE(jobs.is_null());
    const std::string listed = jobs.dump();
    EXPECT_NE(listed.find("job-a"), std::string::npos) << listed.substr(0, 400);
    EXPECT_NE(listed.find("job-b"), std::string::npos) << listed.substr(0, 400);
    const nlohmann::json job_b = Get(server, "/api/v1/jobs/job-b");
    ASSERT_FALSE(job_b.is_null());
    EXPECT_NE(job_b.dump().find("train.py job-b"), std::string::npos) << job_b.dump();
  }

  // Server one goes away; its job's collector moves to a new server on the same database,
  // which continues the job's window ids (window 1 stays the first server's report).
  a.stream.reset();
  a.client.reset();
  servers_.erase(servers_.begin());
  ServerProcess* three = StartServer("three");
  Collector a2 = Collector::Connect(three->grpc_port(), "job-a");
  ASSERT_TRUE(a2.stream);
  EXPECT_EQ(a2.RunWindow(), 2u);
  EXPECT_TRUE(
      Eventually([&] { return !Get(two, "/api/v1/jobs/job-a/windows/2/diagnosis").is_null(); }));
  EXPECT_FALSE(Get(three, "/api/v1/jobs/job-a/windows/1/diagnosis").is_null());
}

TEST_F(SharedStoreTest, AnUnreachableDatabaseIsOneLineNamingIt) {
  ServerProcessOptions o;
  o.listen = "127.0.0.1:0";
  o.http_listen = "";
  o.store_path = "postgresql://perftracker:hunter2@127.0.0.1:1/fleet";
  o.token = kToken;
  o.service.coordinator.report_dir = (dir_ / "bad").string();
  ServerProcess server(o);
  const Status st = server.Start();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind(
                "--store: store postgresql://perftracker:***@127.0.0.1:1/fleet: cannot connect", 0),
            0u)
      << st.message();
  EXPECT_EQ(st.message().find("hunter2"), std::string::npos);
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
}

}  // namespace
}  // namespace perftracker
