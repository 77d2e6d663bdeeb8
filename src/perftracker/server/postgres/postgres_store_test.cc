// PostgresStore on a real PostgreSQL (PostgresTestServer: one cluster for this binary, a
// fresh database per test): the Store contract (store/store_contract_test.cc), then what
// only this backend has: schema migration and refusal, bad and unreachable URLs (one line,
// password masked), servers starting at once, and a dropped connection.
#include "perftracker/server/postgres/postgres_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "perftracker/server/postgres/postgres_test_environment.h"
#include "perftracker/server/store/store_contract_test.h"

namespace perftracker {
namespace {

PERFTRACKER_POSTGRES_TEST_ENVIRONMENT();

StatusOr<std::string> NewDatabase() {
  if (PostgresTestEnvironment::server() == nullptr)
    return Status::Internal("no PostgreSQL test server (see above)");
  return PostgresTestEnvironment::server()->CreateDatabase();
}

StoreBackend PostgresBackend() {
  StoreBackend b;
  b.name = "postgresql";
  b.new_location = [](const std::string&) { return NewDatabase(); };
  b.open = [](const std::string& url, size_t max_iterations) -> StatusOr<std::unique_ptr<Store>> {
    PostgresStoreOptions options;
    options.max_iterations_per_job = max_iterations;
    StatusOr<std::unique_ptr<PostgresStore>> store = PostgresStore::Open(url, options);
    if (!store.ok()) return store.status();
    return std::unique_ptr<Store>(std::move(store).value());
  };
  return b;
}

INSTANTIATE_TEST_SUITE_P(Postgres, StoreContractTest, ::testing::Values(PostgresBackend()),
                         StoreBackendName());

std::unique_ptr<PgConnection> Admin(const std::string& url) {
  StatusOr<std::unique_ptr<PgConnection>> conn = PgConnection::Open(url, "admin", 10);
  EXPECT_TRUE(conn.ok()) << conn.status().message();
  return conn.ok() ? std::move(conn).value() : nullptr;
}

JobRecord Job(const std::string& id) {
  JobRecord job;
  job.job_id = id;
  job.title = "torchrun train.py";
  job.world_size = 2;
  job.created_ns = 100;
  job.last_seen_ns = 100;
  return job;
}

TEST(PostgresStoreTest, EveryOlderSchemaVersionIsMigrated) {
  for (int64_t v = 0; v < PostgresStore::kSchemaVersion; ++v) {
    StatusOr<std::string> url = NewDatabase();
    ASSERT_TRUE(url.ok()) << url.status().message();
    ASSERT_TRUE(PostgresStore::CreateSchemaVersionForTest(*url, v).ok());
    StatusOr<std::unique_ptr<PostgresStore>> store = PostgresStore::Open(*url);
    ASSERT_TRUE(store.ok()) << "from version " << v << ": " << store.status().message();
    EXPECT_EQ((*store)->SchemaVersion().value(), PostgresStore::kSchemaVersion);
    EXPECT_TRUE((*store)->UpsertJob(Job("j")).ok());
    EXPECT_EQ((*store)->GetJob("j")->world_size, 2);
  }
  // Reopening a current store changes nothing.
  StatusOr<std::string> url = NewDatabase();
  ASSERT_TRUE(url.ok());
  { ASSERT_TRUE(PostgresStore::Open(*url).ok()); }
  StatusOr<std::unique_ptr<PostgresStore>> again = PostgresStore::Open(*url);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ((*again)->SchemaVersion().value(), PostgresStore::kSchemaVersion);
}

TEST(PostgresStoreTest, ANewerSchemaIsRefusedWithOneLine) {
  StatusOr<std::string> url = NewDatabase();
  ASSERT_TRUE(url.ok());
  { ASSERT_TRUE(PostgresStore::Open(*url).ok()); }
  ASSERT_TRUE(Admin(*url)->Run("UPDATE perftracker_schema SET version = 99").ok());
  StatusOr<std::unique_ptr<PostgresStore>> store = PostgresStore::Open(*url);
  ASSERT_FALSE(store.ok());
  const std::string& m = store.status().message();
  EXPECT_EQ(m, "store " + *url + ": schema version 99 is newer than this perftracker's (" +
                   std::to_string(PostgresStore::kSchemaVersion) +
                   "); upgrade perftracker or pass another database");
}

TEST(PostgresStoreTest, ADatabaseOfAnotherProgramIsRefused) {
  StatusOr<std::string> url = NewDatabase();
  ASSERT_TRUE(url.ok());
  ASSERT_TRUE(Admin(*url)->Run("CREATE TABLE photos (id INTEGER)").ok());
  StatusOr<std::unique_ptr<PostgresStore>> store = PostgresStore::Open(*url);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("not a perftracker store"), std::string::npos)
      << store.status().message();
  EXPECT_EQ(Admin(*url)->QueryInt("SELECT count(*) FROM photos").value(), 0);  // untouched
}

TEST(PostgresStoreTest, UnreachableAndBadUrlsFailWithOneLineNamingThem) {
  // Nothing listens on port 1; the password never appears in a message.
  const std::string unreachable = "postgresql://perftracker:s3cret@127.0.0.1:1/db";
  StatusOr<std::unique_ptr<PostgresStore>> store = PostgresStore::Open(unreachable);
  ASSERT_FALSE(store.ok());
  std::string m = store.status().message();
  EXPECT_EQ(m.rfind("store postgresql://perftracker:***@127.0.0.1:1/db: cannot connect", 0), 0u)
      << m;
  EXPECT_EQ(m.find("s3cret"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;

  // libpq quotes a URL it cannot parse: the password stays masked there too.
  store = PostgresStore::Open("postgresql://u:s3cret@[::1/db");
  ASSERT_FALSE(store.ok());
  m = store.status().message();
  EXPECT_EQ(m.rfind("store postgresql://u:***@[::1/db: ", 0), 0u) << m;
  EXPECT_EQ(m.find("s3cret"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;

  // A database that does not exist on a running server.
  store = PostgresStore::Open(PostgresTestEnvironment::server()->Url("no_such_db"));
  ASSERT_FALSE(store.ok());
  m = store.status().message();
  EXPECT_NE(m.find("no_such_db"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST(PostgresStoreTest, PasswordsAreMaskedInEveryUrlForm) {
  EXPECT_EQ(RedactPostgresUrl("postgresql://u:pw@h:5432/db"), "postgresql://u:***@h:5432/db");
  EXPECT_EQ(RedactPostgresUrl("postgresql://u@h/db?password=pw&sslmode=require"),
            "postgresql://u@h/db?password=***&sslmode=require");
  EXPECT_EQ(RedactPostgresUrl("postgres://h/db"), "postgres://h/db");
  EXPECT_EQ(RedactPostgresUrl("host=h password=pw dbname=db"), "host=h password=*** dbname=db");
  EXPECT_EQ(RedactPostgresUrl("host=h password = 'p w' dbname=db"),
            "host=h password = *** dbname=db");
}

TEST(PostgresStoreTest, ServersStartingAtOnceMigrateOnce) {
  StatusOr<std::string> url = NewDatabase();
  ASSERT_TRUE(url.ok());
  std::vector<std::thread> threads;
  std::vector<Status> results(4);
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] {
      StatusOr<std::unique_ptr<PostgresStore>> store = PostgresStore::Open(*url);
      results[i] = store.ok() ? (*store)->UpsertJob(Job("j" + std::to_string(i))) : store.status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const Status& st : results) EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(Admin(*url)->QueryInt("SELECT count(*) FROM perftracker_schema").value(), 1);
  EXPECT_EQ(Admin(*url)->QueryInt("SELECT count(*) FROM jobs").value(), 4);
}

// Commits are not flushed one by one (SqliteStore's guarantee: a process crash loses
// nothing acknowledged), unless the URL asks for it.
TEST(PostgresStoreTest, CommitsAreNotFlushedOneByOneUnlessTheUrlSaysSo) {
  StatusOr<std::string> url = NewDatabase();
  ASSERT_TRUE(url.ok());
  auto setting = [](const std::string& u) {
    StatusOr<std::unique_ptr<PgConnection>> conn = PgConnection::Open(u, u, 10);
    if (!conn.ok()) return conn.status().message();
    StatusOr<PgResult> r = (*conn)->Exec("SHOW synchronous_commit");
    return r.ok() ? r->Text(0, 0) : r.status().message();
  };
  EXPECT_EQ(setting(*url), "off");
  EXPECT_EQ(setting(*url + "?options=-csynchronous_commit%3Don"), "on");
}

// PostgreSQL restarted, or a proxy dropped idle connections: the store reconnects and no
// call fails for it (each statement outside a transaction is retried once on a new
// connection).
TEST(PostgresStoreTest, DroppedConnectionsAreReopened) {
  StatusOr<std::string> url = NewDatabase();
  ASSERT_TRUE(url.ok());
  StatusOr<std::unique_ptr<PostgresStore>> store = PostgresStore::Open(*url);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->UpsertJob(Job("j")).ok());
  const std::string db = url->substr(url->rfind('/') + 1);
  auto admin = Admin(PostgresTestEnvironment::server()->Url("postgres"));
  StatusOr<int64_t> killed = admin->QueryInt(
      "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1", {db});
  ASSERT_TRUE(killed.ok()) << killed.status().message();
  EXPECT_GE(*killed, 1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (admin->QueryInt("SELECT count(*) FROM pg_stat_activity WHERE datname = $1", {db}).value() >
         0) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the backends did not end";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int i = 0; i < 8; ++i) {
    StatusOr<JobRecord> job = (*store)->GetJob("j");
    ASSERT_TRUE(job.ok()) << "call " << i << ": " << job.status().message();
    Status st = (*store)->UpsertWorker({"j", i, "h", 1, 1});
    ASSERT_TRUE(st.ok()) << "call " << i << ": " << st.message();
  }
  EXPECT_EQ((*store)->ListWorkers("j")->size(), 8u);
}

}  // namespace
}  // namespace perftracker
