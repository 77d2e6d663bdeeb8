#include "perftracker/server/sqlite/sqlite_store.h"

#include "perftracker/server/store/store_contract_test.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace perftracker {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "sqlite_store_test.XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  std::string path_;
};

std::unique_ptr<SqliteStore> OpenOrDie(const std::string& path,
                                       const SqliteStoreOptions& options = {}) {
  StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(path, options);
  EXPECT_TRUE(store.ok()) << store.status().message();
  return store.ok() ? std::move(store).value() : nullptr;
}

// The Store contract (store/store_contract_test.cc) on SQLite files.
StoreBackend SqliteBackend() {
  StoreBackend b;
  b.name = "sqlite";
  b.new_location = [](const std::string& dir) -> StatusOr<std::string> {
    return (fs::path(dir) / "store.db").string();
  };
  b.open = [](const std::string& path, size_t max_iterations) -> StatusOr<std::unique_ptr<Store>> {
    SqliteStoreOptions options;
    options.max_iterations_per_job = max_iterations;
    options.read_connections = 2;
    StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(path, options);
    if (!store.ok()) return store.status();
    return std::unique_ptr<Store>(std::move(store).value());
  };
  b.check_integrity = [](Store* store) {
    return static_cast<SqliteStore*>(store)->CheckIntegrity();
  };
  return b;
}

INSTANTIATE_TEST_SUITE_P(Sqlite, StoreContractTest, ::testing::Values(SqliteBackend()),
                         StoreBackendName());

TEST(SqliteStoreTest, InMemory) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->UpsertJob(Job("m")).ok());
  ASSERT_TRUE(store->PutWindow(Window("m", 1)).ok());
  ASSERT_TRUE(store->PutSummary("m", 1, Summary(0)).ok());
  EXPECT_EQ(store->ListSummaries("m", 1)->size(), 1u);
  EXPECT_EQ(store->GetJob("m")->world_size, 4);
}

TEST(SqliteStoreTest, ANewStoreIsReadableByItsOwnerOnly) {
  // The store names hosts, paths and code, like the reports.
  TempDir dir;
  const std::string path = dir.File("store.db");
  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->UpsertJob(Job("j")).ok());
  const fs::perms owner_rw = fs::perms::owner_read | fs::perms::owner_write;
  for (const std::string& f : {path, path + "-wal", path + "-shm"}) {
    if (!fs::exists(f)) continue;
    EXPECT_EQ(fs::status(f).permissions() & fs::perms::all, owner_rw) << f;
  }
}

TEST(SqliteStoreTest, CorruptFileIsRefusedWithItsName) {
  TempDir dir;
  const std::string path = dir.File("garbage.db");
  {
    std::ofstream out(path, std::ios::binary);
    std::mt19937 rng(7);
    for (int i = 0; i < 8192; ++i) out.put(static_cast<char>(rng()));
  }
  StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(store.status().message().find("store " + path + ": "), std::string::npos)
      << store.status().message();
  EXPECT_NE(store.status().message().find("not a database"), std::string::npos)
      << store.status().message();
}

TEST(SqliteStoreTest, TruncatedStoreIsRefusedOrChecked) {
  TempDir dir;
  const std::string path = dir.File("store.db");
  {
    SqliteStoreOptions options;
    auto store = OpenOrDie(path, options);
    ASSERT_TRUE(store->UpsertJob(Job("j")).ok());
    for (uint64_t id = 1; id <= 200; ++id) {
      ASSERT_TRUE(store->PutWindow(Window("j", id)).ok());
      ASSERT_TRUE(store->PutSummary("j", id, Summary(0)).ok());
    }
  }  // closing checkpoints the WAL into the main file
  // Overwrite pages in the middle of the file with garbage.
  const auto size = fs::file_size(path);
  ASSERT_GT(size, 16384u);
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(size / 2));
    for (int i = 0; i < 8192; ++i) f.put('\x5a');
  }
  StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(path);
  if (!store.ok()) {
    EXPECT_NE(store.status().message().find(path), std::string::npos);
    return;
  }
  Status integrity = (*store)->CheckIntegrity();
  Status read = (*store)->ListSummaries("j", 100).status();
  EXPECT_FALSE(integrity.ok() && read.ok());
  if (!integrity.ok()) {
    EXPECT_EQ(integrity.code(), StatusCode::kDataLoss);
    EXPECT_NE(integrity.message().find(path), std::string::npos) << integrity.message();
  }
}

TEST(SqliteStoreTest, ForeignAndNewerDatabasesAreRefused) {
  TempDir dir;
  const std::string foreign = dir.File("foreign.db");
  {
    StatusOr<std::unique_ptr<SqliteConnection>> conn = SqliteConnection::Open(foreign, true, 100);
    ASSERT_TRUE(conn.ok());
    ASSERT_TRUE((*conn)->Exec("CREATE TABLE photos (id INTEGER)").ok());
  }
  StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(foreign);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("not a perftracker store"), std::string::npos)
      << store.status().message();

  const std::string newer = dir.File("newer.db");
  { auto s = OpenOrDie(newer); }
  {
    StatusOr<std::unique_ptr<SqliteConnection>> conn = SqliteConnection::Open(newer, false, 100);
    ASSERT_TRUE((*conn)->Exec("PRAGMA user_version=99").ok());
  }
  store = SqliteStore::Open(newer);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("schema version 99 is newer"), std::string::npos)
      << store.status().message();

  store = SqliteStore::Open(dir.File("no/such/dir/store.db"));
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("no/such/dir/store.db"), std::string::npos);
}

// Job "j" and its window 1 (in `state`) in a new store at `path`; the store is closed again.
void PutWindowOne(const std::string& path, WindowState state) {
  auto s = OpenOrDie(path);
  ASSERT_TRUE(s->UpsertJob({"j", "t", 1, 1, 1}).ok());
  WindowRecord w;
  w.job_id = "j";
  w.window_id = 1;
  w.reason = "manual";
  w.start_ns = 10;
  w.duration_ns = 20;
  w.state = state;
  ASSERT_TRUE(s->PutWindow(w).ok());
}

// Makes the store at `path` look as schema `version` wrote it: runs `undo` (drops what the
// later versions added) and sets its user_version.
void Downgrade(const std::string& path, int version, const std::vector<std::string>& undo) {
  StatusOr<std::unique_ptr<SqliteConnection>> conn = SqliteConnection::Open(path, false, 100);
  ASSERT_TRUE(conn.ok());
  for (const std::string& sql : undo) ASSERT_TRUE((*conn)->Exec(sql).ok()) << sql;
  ASSERT_TRUE((*conn)->Exec("PRAGMA user_version=" + std::to_string(version)).ok());
}

TEST(SqliteStoreTest, AVersion1StoreIsMigratedAndKeepsItsWindows) {
  TempDir dir;
  const std::string path = dir.File("v1.db");
  ASSERT_NO_FATAL_FAILURE(PutWindowOne(path, WindowState::kOpen));
  // Version 1 had no windows.state_reason (nor version 2's diagnoses.perfetto_path).
  ASSERT_NO_FATAL_FAILURE(Downgrade(path, 1,
                                    {"ALTER TABLE windows DROP COLUMN state_reason",
                                     "ALTER TABLE diagnoses DROP COLUMN perfetto_path"}));
  auto store = OpenOrDie(path);
  StatusOr<WindowRecord> w = store->GetWindow("j", 1);
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w->state, WindowState::kOpen);
  EXPECT_EQ(w->state_reason, "");
  WindowRecord abandoned = *w;
  abandoned.state = WindowState::kAbandoned;
  abandoned.state_reason = "the server stopped";
  ASSERT_TRUE(store->PutWindow(abandoned).ok());
  EXPECT_EQ(store->GetWindow("j", 1)->state_reason, "the server stopped");
}

TEST(SqliteStoreTest, AVersion2StoreIsMigratedAndKeepsItsDiagnoses) {
  TempDir dir;
  const std::string path = dir.File("v2.db");
  ASSERT_NO_FATAL_FAILURE(PutWindowOne(path, WindowState::kDiagnosed));
  {
    auto s = OpenOrDie(path);
    DiagnosisRecord d;
    d.job_id = "j";
    d.window_id = 1;
    d.json = "{}";
    d.text = "no material finding";
    ASSERT_TRUE(s->PutDiagnosis(d).ok());
  }
  // Version 2 kept no Perfetto export's path.
  ASSERT_NO_FATAL_FAILURE(Downgrade(path, 2, {"ALTER TABLE diagnoses DROP COLUMN perfetto_path"}));
  auto store = OpenOrDie(path);
  StatusOr<DiagnosisRecord> d = store->GetDiagnosis("j", 1);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->text, "no material finding");
  EXPECT_EQ(d->perfetto_path, "");
  DiagnosisRecord with_timeline = *d;
  with_timeline.perfetto_path = "/reports/window-1.perfetto.json";
  ASSERT_TRUE(store->PutDiagnosis(with_timeline).ok());
  EXPECT_EQ(store->GetDiagnosis("j", 1)->perfetto_path, "/reports/window-1.perfetto.json");
}

}  // namespace
}  // namespace perftracker
