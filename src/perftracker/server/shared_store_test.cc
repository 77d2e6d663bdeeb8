// Two `perftracker server`s (ServerProcess: gRPC, HTTP, store) on one PostgreSQL database,
// as a fleet deployment runs them (docs/server.md): each coordinates the job whose collector
// connects to it, and each one's HTTP API serves the other's job, its windows and
// diagnosis. Then a server stops and a new one on the same database continues its job's
// window ids; and a real `perftracker server` process is SIGKILLed mid-job: what it stored
// is still served, and its job goes on with the next window id on another server. One
// PostgreSQL cluster for the binary (PostgresTestServer).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "perftracker/server/postgres/postgres_test_environment.h"
#include "perftracker/server/server_process.h"
#include "perftracker/wire/control_client.h"
#include "perftracker/wire/summary_codec.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;

// Runs argv[0] with `argv`, its stderr to the file `err`; its wait status and that stderr.
void RunWithStderrTo(const std::vector<std::string>& argv, const std::string& err, int* status,
                     std::string* text) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int out = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out, 2);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out);
  ASSERT_EQ(waitpid(pid, status, 0), pid);
  std::ifstream in(err);
  std::stringstream ss;
  ss << in.rdbuf();
  *text = ss.str();
}
constexpr int64_t kMs = 1'000'000;
constexpr const char* kToken = "fleet-test-token-0123456789";

PERFTRACKER_POSTGRES_TEST_ENVIRONMENT();

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
    stream->Write(ControlTrigger{1, WindowReason::kSlowdown, "mean 1.3x the shortest"});
    for (;;) {
      ServerMessage m;
      if (!stream->Read(&m)) {
        ADD_FAILURE() << "the stream ended before a window";
        return 0;
      }
      const auto* w = std::get_if<WindowSpec>(&m);
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
    ASSERT_NE(PostgresTestEnvironment::server(), nullptr)
        << "no PostgreSQL test server (see the environment's failure)";
    StatusOr<std::string> url = PostgresTestEnvironment::server()->CreateDatabase();
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

  // A window is opened by the job's own server only; the other one says it does not know it.
  {
    httplib::Client cli("127.0.0.1", two->http_port());
    cli.set_bearer_token_auth(kToken);
    auto r = cli.Post("/api/v1/jobs/job-a/trigger");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404);
    EXPECT_NE(r->body.find("job job-a is not known to this server"), std::string::npos) << r->body;
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

// A `perftracker server` process (the binary: $PERFTRACKER_BINARY) on the test's database.
class ServerChild {
 public:
  ServerChild(const std::string& url, const fs::path& dir) {
    const char* binary = std::getenv("PERFTRACKER_BINARY");
    if (binary == nullptr) {
      ADD_FAILURE() << "PERFTRACKER_BINARY is not set (CTest sets it to the perftracker binary)";
      return;
    }
    fs::create_directories(dir);
    const std::string token_file = (dir / "token").string();
    std::ofstream(token_file) << kToken << "\n";
    fs::permissions(token_file, fs::perms::owner_read | fs::perms::owner_write);
    log_ = (dir / "server.log").string();
    const std::vector<std::string> argv = {binary,
                                           "server",
                                           "--store",
                                           url,
                                           "--listen",
                                           "127.0.0.1:0",
                                           "--http-listen",
                                           "127.0.0.1:0",
                                           "--token-file",
                                           token_file,
                                           "--report-dir",
                                           (dir / "reports").string(),
                                           "--window-seconds",
                                           "0.3",
                                           "--window-delay-ms",
                                           "50",
                                           "--wait-summaries-seconds",
                                           "5",
                                           "--cooldown-seconds",
                                           "0"};
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int out = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out, 2);
      execv(args[0], args.data());
      _exit(127);
    }
    close(out);
    // "perftracker server: listening: grpc=127.0.0.1:N http=http://127.0.0.1:M ..."
    const std::regex listening(
        R"(listening: grpc=127\.0\.0\.1:(\d+) http=http://127\.0\.0\.1:(\d+))");
    const bool up = Eventually(
        [&] {
          std::smatch m;
          const std::string text = Log();
          if (!std::regex_search(text, m, listening)) return false;
          grpc_port_ = std::stoi(m[1]);
          return true;
        },
        120000);
    EXPECT_TRUE(up) << "the server did not start: " << Log();
  }
  ~ServerChild() { Kill(); }

  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  int grpc_port() const { return grpc_port_; }
  std::string Log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  pid_t pid_ = -1;
  int grpc_port_ = 0;
  std::string log_;
};

TEST_F(SharedStoreTest, ASigkilledServersJobIsStillServedAndGoesOnElsewhere) {
  ServerProcess* reader = StartServer("reader");
  auto child = std::make_unique<ServerChild>(url_, dir_ / "child");
  ASSERT_FALSE(HasFailure());
  Collector c = Collector::Connect(child->grpc_port(), "job-k");
  ASSERT_TRUE(c.stream);
  ASSERT_EQ(c.RunWindow(), 1u);
  ASSERT_TRUE(Eventually([&] {
    return !Get(reader, "/api/v1/jobs/job-k/windows/1/diagnosis").is_null();
  })) << child->Log();

  // Iteration batches stream in while the server is killed: whatever it had written stays
  // readable, and nothing it held (connections, row locks of open transactions) blocks the
  // next server.
  for (int i = 1; i <= 50; ++i) c.stream->Write(ControlIterations{{{0, i * kMs, kMs}}});
  child->Kill();
  c.stream.reset();
  c.client.reset();
  const nlohmann::json d = Get(reader, "/api/v1/jobs/job-k/windows/1/diagnosis");
  ASSERT_FALSE(d.is_null());
  EXPECT_EQ(d["diagnosis"]["num_workers"], 2);

  auto next = std::make_unique<ServerChild>(url_, dir_ / "next");
  ASSERT_FALSE(HasFailure());
  Collector again = Collector::Connect(next->grpc_port(), "job-k");
  ASSERT_TRUE(again.stream);
  EXPECT_EQ(again.RunWindow(), 2u) << "the job's window ids continue on the new server";
  EXPECT_TRUE(Eventually([&] {
    return !Get(reader, "/api/v1/jobs/job-k/windows/2/diagnosis").is_null();
  })) << next->Log();
}

// `perftracker server --store <url>` for a database that cannot be used: exit status 2 and
// one line on stderr that names the URL (password masked).
TEST_F(SharedStoreTest, TheServerCommandExitsWithOneLineForAStoreItCannotOpen) {
  const char* binary = std::getenv("PERFTRACKER_BINARY");
  ASSERT_NE(binary, nullptr) << "PERFTRACKER_BINARY is not set";
  const std::string no_db = PostgresTestEnvironment::server()->Url("no_such_db");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"postgresql://perftracker:hunter2@127.0.0.1:1/fleet",
       "store postgresql://perftracker:***@127.0.0.1:1/fleet: cannot connect"},
      {"postgresql://u:hunter2@[::1/db", "store postgresql://u:***@[::1/db: cannot connect"},
      {no_db, "store " + no_db + ": cannot connect"},
  };
  for (const auto& [url, expected] : cases) {
    const std::string err = (dir_ / "stderr").string();
    const std::string reports = (dir_ / "reports").string();
    const std::vector<std::string> argv = {binary,      "server",       "--store",
                                           url,         "--listen",     "127.0.0.1:0",
                                           "--no-http", "--report-dir", reports};
    int status = 0;
    std::string text;
    ASSERT_NO_FATAL_FAILURE(RunWithStderrTo(argv, err, &status, &text));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << url << ": " << text;
    EXPECT_EQ(text.rfind("perftracker server: --store: " + expected, 0), 0u) << text;
    EXPECT_EQ(text.find('\n'), text.size() - 1) << "one line: " << text;
    EXPECT_EQ(text.find("hunter2"), std::string::npos) << text;
  }
}

// `perftracker run --store <url>` records a single-host run into the fleet's database: a
// server on that database lists it.
TEST_F(SharedStoreTest, ARunsStoreMayBeTheFleetsDatabase) {
  const char* binary = std::getenv("PERFTRACKER_BINARY");
  ASSERT_NE(binary, nullptr) << "PERFTRACKER_BINARY is not set";
  const std::string err = (dir_ / "run.stderr").string();
  const std::vector<std::string> argv = {
      binary,         "run",
      "--store",      url_,
      "--report-dir", (dir_ / "run").string(),
      "--",           "sh",
      "-c",           "echo fleet-run-marker >/dev/null; exit 3"};
  int status = 0;
  std::string text;
  ASSERT_NO_FATAL_FAILURE(RunWithStderrTo(argv, err, &status, &text));
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << text;

  ServerProcess* server = StartServer("reader");
  const nlohmann::json jobs = Get(server, "/api/v1/jobs");
  ASSERT_FALSE(jobs.is_null());
  EXPECT_NE(jobs.dump().find("fleet-run-marker"), std::string::npos) << jobs.dump();
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
