#include "perftracker/server/sqlite/sqlite_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "perftracker/server/store/store_checks.h"
#include "perftracker/wire/summary_codec.h"

namespace perftracker {
namespace {

// Migrations[i] takes a store from schema version i to i + 1. Never edit a shipped entry:
// append a new one and raise kSchemaVersion.
constexpr const char* kMigrations[] = {
    // 0 -> 1: the first schema.
    R"sql(
CREATE TABLE jobs (
  job_id TEXT PRIMARY KEY NOT NULL,
  title TEXT NOT NULL,
  world_size INTEGER NOT NULL,
  created_ns INTEGER NOT NULL,
  last_seen_ns INTEGER NOT NULL,
  baseline_window INTEGER
);
CREATE INDEX jobs_by_created ON jobs (created_ns);
CREATE TABLE workers (
  job_id TEXT NOT NULL REFERENCES jobs (job_id),
  rank INTEGER NOT NULL,
  host TEXT NOT NULL,
  pid INTEGER NOT NULL,
  joined_ns INTEGER NOT NULL,
  PRIMARY KEY (job_id, rank)
) WITHOUT ROWID;
CREATE TABLE iterations (
  job_id TEXT NOT NULL REFERENCES jobs (job_id),
  rank INTEGER NOT NULL,
  end_ns INTEGER NOT NULL,
  duration_ns INTEGER NOT NULL
);
CREATE INDEX iterations_by_time ON iterations (job_id, end_ns);
CREATE TABLE windows (
  job_id TEXT NOT NULL REFERENCES jobs (job_id),
  window_id INTEGER NOT NULL,
  reason TEXT NOT NULL,
  start_ns INTEGER NOT NULL,
  duration_ns INTEGER NOT NULL,
  triggers TEXT NOT NULL,
  state INTEGER NOT NULL,
  PRIMARY KEY (job_id, window_id)
) WITHOUT ROWID;
CREATE TABLE summaries (
  job_id TEXT NOT NULL,
  window_id INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  summary BLOB NOT NULL,
  PRIMARY KEY (job_id, window_id, rank),
  FOREIGN KEY (job_id, window_id) REFERENCES windows (job_id, window_id)
);
CREATE TABLE diagnoses (
  job_id TEXT NOT NULL,
  window_id INTEGER NOT NULL,
  json TEXT NOT NULL,
  text TEXT NOT NULL,
  top_code TEXT NOT NULL,
  missing_ranks TEXT NOT NULL,
  created_ns INTEGER NOT NULL,
  PRIMARY KEY (job_id, window_id),
  FOREIGN KEY (job_id, window_id) REFERENCES windows (job_id, window_id)
);
)sql",
    // 1 -> 2: why a window is in its state (an abandoned window's reason).
    R"sql(
ALTER TABLE windows ADD COLUMN state_reason TEXT NOT NULL DEFAULT '';
)sql",
    // 2 -> 3: where the window's Perfetto export is (the web UI's download link).
    R"sql(
ALTER TABLE diagnoses ADD COLUMN perfetto_path TEXT NOT NULL DEFAULT '';
)sql",
};
static_assert(std::size(kMigrations) == SqliteStore::kSchemaVersion);

constexpr const char* kJobColumns = "job_id, title, world_size, created_ns, last_seen_ns";

JobRecord ReadJob(const Statement& st) {
  JobRecord job;
  job.job_id = st.ColumnText(0);
  job.title = st.ColumnText(1);
  job.world_size = static_cast<int32_t>(st.ColumnInt64(2));
  job.created_ns = st.ColumnInt64(3);
  job.last_seen_ns = st.ColumnInt64(4);
  return job;
}

constexpr const char* kWindowColumns =
    "job_id, window_id, reason, start_ns, duration_ns, triggers, state, state_reason";

WindowRecord ReadWindow(const Statement& st) {
  WindowRecord w;
  w.job_id = st.ColumnText(0);
  w.window_id = static_cast<uint64_t>(st.ColumnInt64(1));
  w.reason = st.ColumnText(2);
  w.start_ns = st.ColumnInt64(3);
  w.duration_ns = st.ColumnInt64(4);
  const nlohmann::json triggers = nlohmann::json::parse(st.ColumnText(5), nullptr, false);
  if (triggers.is_array()) {
    for (const auto& t : triggers) {
      if (t.is_string()) w.triggers.push_back(t.get<std::string>());
    }
  }
  w.state = WindowStateFromInt(st.ColumnInt64(6));
  w.state_reason = st.ColumnText(7);
  return w;
}

}  // namespace

class SqliteStore::ReadLease {
 public:
  ReadLease(SqliteStore* store, std::unique_ptr<SqliteConnection> conn)
      : store_(store), conn_(std::move(conn)) {}
  explicit ReadLease(SqliteStore* store) : store_(store), writer_lock_(store->write_mu_) {}
  ReadLease(ReadLease&&) = default;
  ~ReadLease() {
    if (conn_ == nullptr) return;
    std::lock_guard<std::mutex> lock(store_->pool_mu_);
    store_->idle_readers_.push_back(std::move(conn_));
    store_->pool_cv_.notify_one();
  }
  SqliteConnection* operator->() { return conn_ != nullptr ? conn_.get() : store_->writer_.get(); }

 private:
  SqliteStore* store_;
  std::unique_ptr<SqliteConnection> conn_;
  std::unique_lock<std::mutex> writer_lock_;
};

SqliteStore::SqliteStore(std::string path, const SqliteStoreOptions& options)
    : path_(std::move(path)), options_(options) {
  if (path_ == ":memory:") options_.read_connections = 0;
}

SqliteStore::~SqliteStore() = default;

StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path,
                                                         const SqliteStoreOptions& options) {
  if (path.empty()) return Status::InvalidArgument("store: empty path");
  std::unique_ptr<SqliteStore> store(new SqliteStore(path, options));
  PERFTRACKER_RETURN_IF_ERROR(store->Initialize());
  return store;
}

Status SqliteStore::Initialize() {
  StatusOr<std::unique_ptr<SqliteConnection>> writer =
      SqliteConnection::Open(path_, /*create=*/true, options_.busy_timeout_ms);
  if (!writer.ok()) return writer.status();
  writer_ = std::move(writer).value();

  // The first statement reads the header: a file that is not a database fails here.
  StatusOr<int64_t> app_id = writer_->QueryInt("PRAGMA application_id");
  if (!app_id.ok()) return app_id.status();
  StatusOr<int64_t> tables = writer_->QueryInt("SELECT count(*) FROM sqlite_schema");
  if (!tables.ok()) return tables.status();
  if (*app_id != kApplicationId && *tables > 0) {
    return Status::InvalidArgument(
        fmt::format("store {}: an SQLite database of another program (application_id {:#x}, "
                    "{} schema objects), not a perftracker store; pass another path",
                    path_, *app_id, *tables));
  }
  if (path_ != ":memory:") {
    StatusOr<Statement> mode = writer_->Prepare("PRAGMA journal_mode=WAL");
    if (!mode.ok()) return mode.status();
    StatusOr<bool> row = mode->Step();
    if (!row.ok()) return row.status();
    if (!*row || mode->ColumnText(0) != "wal") {
      return Status::Internal(
          fmt::format("store {}: cannot switch to WAL mode (the file system may not support "
                      "shared memory; use a local disk)",
                      path_));
    }
  }
  PERFTRACKER_RETURN_IF_ERROR(writer_->Exec(
      options_.synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL"));
  PERFTRACKER_RETURN_IF_ERROR(writer_->Exec("PRAGMA foreign_keys=ON"));
  PERFTRACKER_RETURN_IF_ERROR(Migrate());

  for (int i = 0; i < options_.read_connections; ++i) {
    StatusOr<std::unique_ptr<SqliteConnection>> reader =
        SqliteConnection::Open(path_, /*create=*/false, options_.busy_timeout_ms);
    if (!reader.ok()) return reader.status();
    PERFTRACKER_RETURN_IF_ERROR((*reader)->Exec("PRAGMA query_only=1"));
    idle_readers_.push_back(std::move(reader).value());
  }
  return Status::Ok();
}

Status SqliteStore::Migrate() {
  Transaction tx(writer_.get());
  PERFTRACKER_RETURN_IF_ERROR(tx.Begin());
  StatusOr<int64_t> version = writer_->QueryInt("PRAGMA user_version");
  if (!version.ok()) return version.status();
  if (*version > kSchemaVersion) {
    return Status::InvalidArgument(
        fmt::format("store {}: schema version {} is newer than this perftracker's ({}); "
                    "upgrade perftracker or pass another path",
                    path_, *version, kSchemaVersion));
  }
  if (*version == kSchemaVersion) return tx.Commit();
  for (int64_t v = *version; v < kSchemaVersion; ++v) {
    Status st = writer_->Exec(kMigrations[v]);
    if (!st.ok()) {
      return Status::Internal(fmt::format("store {}: migration to schema version {} failed: {}",
                                          path_, v + 1, st.message()));
    }
  }
  PERFTRACKER_RETURN_IF_ERROR(
      writer_->Exec(fmt::format("PRAGMA application_id={}", kApplicationId)));
  PERFTRACKER_RETURN_IF_ERROR(writer_->Exec(fmt::format("PRAGMA user_version={}", kSchemaVersion)));
  return tx.Commit();
}

SqliteStore::ReadLease SqliteStore::AcquireReader() {
  if (options_.read_connections == 0) return ReadLease(this);
  std::unique_lock<std::mutex> lock(pool_mu_);
  pool_cv_.wait(lock, [this] { return !idle_readers_.empty(); });
  std::unique_ptr<SqliteConnection> conn = std::move(idle_readers_.back());
  idle_readers_.pop_back();
  return ReadLease(this, std::move(conn));
}

Status SqliteStore::RequireJob(const std::string& job_id) {
  StatusOr<Statement> st = writer_->Prepare("SELECT 1 FROM jobs WHERE job_id = ?1");
  if (!st.ok()) return st.status();
  st->Bind(1, job_id);
  StatusOr<bool> row = st->Step();
  if (!row.ok()) return row.status();
  if (!*row) {
    return Status::NotFound(
        fmt::format("store: job {} is not registered (register the job first)", job_id));
  }
  return Status::Ok();
}

Status SqliteStore::RequireWindow(const std::string& job_id, uint64_t window_id) {
  StatusOr<Statement> st =
      writer_->Prepare("SELECT 1 FROM windows WHERE job_id = ?1 AND window_id = ?2");
  if (!st.ok()) return st.status();
  st->Bind(1, job_id);
  st->Bind(2, static_cast<int64_t>(window_id));
  StatusOr<bool> row = st->Step();
  if (!row.ok()) return row.status();
  if (!*row) {
    return Status::NotFound(fmt::format("store: job {} has no window {}", job_id, window_id));
  }
  return Status::Ok();
}

Status SqliteStore::UpsertJob(const JobRecord& job) {
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreJobId(job.job_id));
  std::lock_guard<std::mutex> lock(write_mu_);
  StatusOr<Statement> st = writer_->Prepare(
      "INSERT INTO jobs (job_id, title, world_size, created_ns, last_seen_ns) "
      "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (job_id) DO UPDATE SET title = excluded.title, "
      "world_size = excluded.world_size, created_ns = excluded.created_ns, "
      "last_seen_ns = excluded.last_seen_ns");
  if (!st.ok()) return st.status();
  st->Bind(1, job.job_id);
  st->Bind(2, job.title);
  st->Bind(3, int64_t{job.world_size});
  st->Bind(4, job.created_ns);
  st->Bind(5, job.last_seen_ns);
  return st->Run();
}

Status SqliteStore::UpsertWorkers(const std::vector<WorkerRecord>& workers) {
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreWorkers(workers));
  if (workers.empty()) return Status::Ok();
  std::lock_guard<std::mutex> lock(write_mu_);
  Transaction tx(writer_.get());
  PERFTRACKER_RETURN_IF_ERROR(tx.Begin());
  std::string checked_job;
  for (const WorkerRecord& worker : workers) {
    if (worker.job_id != checked_job) {
      PERFTRACKER_RETURN_IF_ERROR(RequireJob(worker.job_id));
      checked_job = worker.job_id;
    }
    StatusOr<Statement> st = writer_->Prepare(
        "INSERT OR REPLACE INTO workers (job_id, rank, host, pid, joined_ns) "
        "VALUES (?1, ?2, ?3, ?4, ?5)");
    if (!st.ok()) return st.status();
    st->Bind(1, worker.job_id);
    st->Bind(2, int64_t{worker.rank});
    st->Bind(3, worker.host);
    st->Bind(4, int64_t{worker.pid});
    st->Bind(5, worker.joined_ns);
    PERFTRACKER_RETURN_IF_ERROR(st->Run());
  }
  return tx.Commit();
}

StatusOr<JobRecord> SqliteStore::GetJob(const std::string& job_id) {
  ReadLease conn = AcquireReader();
  StatusOr<Statement> st =
      conn->Prepare(fmt::format("SELECT {} FROM jobs WHERE job_id = ?1", kJobColumns));
  if (!st.ok()) return st.status();
  st->Bind(1, job_id);
  StatusOr<bool> row = st->Step();
  if (!row.ok()) return row.status();
  if (!*row) return Status::NotFound(fmt::format("store: no job {}", job_id));
  return ReadJob(*st);
}

StatusOr<std::vector<JobRecord>> SqliteStore::ListJobs() {
  ReadLease conn = AcquireReader();
  StatusOr<Statement> st = conn->Prepare(
      fmt::format("SELECT {} FROM jobs ORDER BY created_ns DESC, job_id", kJobColumns));
  if (!st.ok()) return st.status();
  std::vector<JobRecord> jobs;
  for (;;) {
    StatusOr<bool> row = st->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    jobs.push_back(ReadJob(*st));
  }
  return jobs;
}

StatusOr<std::vector<WorkerRecord>> SqliteStore::ListWorkers(const std::string& job_id) {
  ReadLease conn = AcquireReader();
  StatusOr<Statement> st = conn->Prepare(
      "SELECT rank, host, pid, joined_ns FROM workers WHERE job_id = ?1 ORDER BY rank");
  if (!st.ok()) return st.status();
  st->Bind(1, job_id);
  std::vector<WorkerRecord> workers;
  for (;;) {
    StatusOr<bool> row = st->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    WorkerRecord w;
    w.job_id = job_id;
    w.rank = static_cast<int32_t>(st->ColumnInt64(0));
    w.host = st->ColumnText(1);
    w.pid = static_cast<int32_t>(st->ColumnInt64(2));
    w.joined_ns = st->ColumnInt64(3);
    workers.push_back(std::move(w));
  }
  return workers;
}

Status SqliteStore::AppendIterations(const std::string& job_id,
                                     const std::vector<IterationPoint>& points) {
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreJobId(job_id));
  PERFTRACKER_RETURN_IF_ERROR(CheckIterationPoints(job_id, points));
  std::lock_guard<std::mutex> lock(write_mu_);
  Transaction tx(writer_.get());
  PERFTRACKER_RETURN_IF_ERROR(tx.Begin());
  PERFTRACKER_RETURN_IF_ERROR(RequireJob(job_id));
  for (const IterationPoint& p : points) {
    StatusOr<Statement> st = writer_->Prepare(
        "INSERT INTO iterations (job_id, rank, end_ns, duration_ns) VALUES (?1, ?2, ?3, ?4)");
    if (!st.ok()) return st.status();
    st->Bind(1, job_id);
    st->Bind(2, int64_t{p.rank});
    st->Bind(3, p.end_ns);
    st->Bind(4, p.duration_ns);
    PERFTRACKER_RETURN_IF_ERROR(st->Run());
  }
  const size_t cap = options_.max_iterations_per_job;
  size_t& appended = appended_since_prune_[job_id];
  appended += points.size();
  if (cap > 0 && appended >= std::max<size_t>(cap / 8, 1)) {
    PERFTRACKER_RETURN_IF_ERROR(PruneIterations(job_id));
    appended = 0;
  }
  return tx.Commit();
}

Status SqliteStore::PruneIterations(const std::string& job_id) {
  // The end_ns of the cap-th newest point, then everything older (ties at that end_ns are
  // kept). Both use the (job_id, end_ns) index.
  StatusOr<Statement> st = writer_->Prepare(
      "DELETE FROM iterations WHERE job_id = ?1 AND end_ns < (SELECT end_ns FROM iterations "
      "WHERE job_id = ?1 ORDER BY end_ns DESC LIMIT 1 OFFSET ?2)");
  if (!st.ok()) return st.status();
  st->Bind(1, job_id);
  st->Bind(2, static_cast<int64_t>(options_.max_iterations_per_job - 1));
  return st->Run();
}

StatusOr<std::vector<IterationPoint>> SqliteStore::ListIterations(const std::string& job_id,
                                                                  int64_t since_ns, size_t limit) {
  ReadLease conn = AcquireReader();
  // The newest `limit` points after since_ns, returned oldest first.
  StatusOr<Statement> st = conn->Prepare(
      "SELECT rank, end_ns, duration_ns FROM (SELECT rank, end_ns, duration_ns, rowid AS r "
      "FROM iterations WHERE job_id = ?1 AND end_ns > ?2 ORDER BY end_ns DESC, rowid DESC "
      "LIMIT ?3) ORDER BY end_ns, r");
  if (!st.ok()) return st.status();
  st->Bind(1, job_id);
  st->Bind(2, since_ns);
  const bool unlimited = limit == 0 || limit > static_cast<size_t>(INT64_MAX);
  st->Bind(3, unlimited ? int64_t{-1} : static_cast<int64_t>(limit));
  std::vector<IterationPoint> points;
  for (;;) {
    StatusOr<bool> row = st->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    points.push_back(
        {static_cast<int32_t>(st->ColumnInt64(0)), st->ColumnInt64(1), st->ColumnInt64(2)});
  }
  return points;
}

Status SqliteStore::PutWindow(const WindowRecord& window) {
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreJobId(window.job_id));
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreWindowId(window.job_id, window.window_id));
  std::lock_guard<std::mutex> lock(write_mu_);
  Transaction tx(writer_.get());
  PERFTRACKER_RETURN_IF_ERROR(tx.Begin());
  PERFTRACKER_RETURN_IF_ERROR(RequireJob(window.job_id));
  {
    StatusOr<Statement> old = writer_->Prepare(
        fmt::format("SELECT {} FROM windows WHERE job_id = ?1 AND window_id = ?2", kWindowColumns));
    if (!old.ok()) return old.status();
    old->Bind(1, window.job_id);
    old->Bind(2, static_cast<int64_t>(window.window_id));
    StatusOr<bool> row = old->Step();
    if (!row.ok()) return row.status();
    if (*row) {
      PERFTRACKER_RETURN_IF_ERROR(CheckWindowUpdate(ReadWindow(*old), window));
    }
  }
  {
    StatusOr<Statement> st = writer_->Prepare(
        "INSERT OR REPLACE INTO windows (job_id, window_id, reason, start_ns, duration_ns, "
        "triggers, state, state_reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    if (!st.ok()) return st.status();
    st->Bind(1, window.job_id);
    st->Bind(2, static_cast<int64_t>(window.window_id));
    st->Bind(3, window.reason);
    st->Bind(4, window.start_ns);
    st->Bind(5, window.duration_ns);
    st->Bind(6, nlohmann::json(window.triggers)
                    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    st->Bind(7, static_cast<int64_t>(window.state));
    st->Bind(8, window.state_reason);
    PERFTRACKER_RETURN_IF_ERROR(st->Run());
  }
  return tx.Commit();
}

StatusOr<std::vector<WindowRecord>> SqliteStore::ListWindows(const std::string& job_id) {
  ReadLease conn = AcquireReader();
  StatusOr<Statement> st = conn->Prepare(
      fmt::format("SELECT {} FROM windows WHERE job_id = ?1 ORDER BY window_id", kWindowColumns));
  if (!st.ok()) return st.status();
  st->Bind(1, job_id);
  std::vector<WindowRecord> windows;
  for (;;) {
    StatusOr<bool> row = st->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    windows.push_back(ReadWindow(*st));
  }
  return windows;
}

StatusOr<WindowRecord> SqliteStore::GetWindow(const std::string& job_id, uint64_t window_id) {
  ReadLease conn = AcquireReader();
  StatusOr<Statement> st = conn->Prepare(
      fmt::format("SELECT {} FROM windows WHERE job_id = ?1 AND window_id = ?2", kWindowColumns));
  if (!st.ok()) return st.status();
  st->Bind(1, job_id);
  st->Bind(2, static_cast<int64_t>(window_id));
  StatusOr<bool> row = st->Step();
  if (!row.ok()) return row.status();
  if (!*row)
    return Status::NotFound(fmt::format("store: job {} has no window {}", job_id, window_id));
  return ReadWindow(*st);
}

Status SqliteStore::PutSummary(const std::string& job_id, uint64_t window_id,
                               const WorkerSummary& summary) {
  // Encoded outside the writer's lock.
  return PutSummaryBytes(job_id, window_id, summary.rank, EncodeWorkerSummary(summary));
}

Status SqliteStore::PutSummaryBytes(const std::string& job_id, uint64_t window_id, int32_t rank,
                                    std::string_view encoded) {
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreJobId(job_id));
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreWindowId(job_id, window_id));
  if (rank < 0) {
    return Status::InvalidArgument(fmt::format(
        "store: job {} window {}: summary with negative rank {}", job_id, window_id, rank));
  }
  std::lock_guard<std::mutex> lock(write_mu_);
  Transaction tx(writer_.get());
  PERFTRACKER_RETURN_IF_ERROR(tx.Begin());
  PERFTRACKER_RETURN_IF_ERROR(RequireWindow(job_id, window_id));
  {
    StatusOr<Statement> st = writer_->Prepare(
        "INSERT OR REPLACE INTO summaries (job_id, window_id, rank, summary) "
        "VALUES (?1, ?2, ?3, ?4)");
    if (!st.ok()) return st.status();
    st->Bind(1, job_id);
    st->Bind(2, static_cast<int64_t>(window_id));
    st->Bind(3, int64_t{rank});
    st->BindBlob(4, encoded);
    PERFTRACKER_RETURN_IF_ERROR(st->Run());
  }
  return tx.Commit();
}

StatusOr<std::vector<WorkerSummary>> SqliteStore::ListSummaries(const std::string& job_id,
                                                                uint64_t window_id) {
  std::vector<std::pair<int32_t, std::string>> blobs;
  {
    ReadLease conn = AcquireReader();
    StatusOr<Statement> st = conn->Prepare(
        "SELECT rank, summary FROM summaries WHERE job_id = ?1 AND window_id = ?2 ORDER BY rank");
    if (!st.ok()) return st.status();
    st->Bind(1, job_id);
    st->Bind(2, static_cast<int64_t>(window_id));
    for (;;) {
      StatusOr<bool> row = st->Step();
      if (!row.ok()) return row.status();
      if (!*row) break;
      blobs.emplace_back(static_cast<int32_t>(st->ColumnInt64(0)), st->ColumnBlob(1));
    }
  }
  // Decoded after the connection went back to the pool.
  std::vector<WorkerSummary> summaries;
  summaries.reserve(blobs.size());
  for (const auto& [rank, bytes] : blobs) {
    StatusOr<WorkerSummary> summary = DecodeWorkerSummary(bytes);
    if (!summary.ok()) {
      return Status::DataLoss(
          fmt::format("store {}: job {} window {} rank {}: stored summary "
                      "is unreadable: {}",
                      path_, job_id, window_id, rank, summary.status().message()));
    }
    summaries.push_back(std::move(summary).value());
  }
  return summaries;
}

Status SqliteStore::PutDiagnosis(const DiagnosisRecord& diagnosis) {
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreJobId(diagnosis.job_id));
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreWindowId(diagnosis.job_id, diagnosis.window_id));
  std::lock_guard<std::mutex> lock(write_mu_);
  Transaction tx(writer_.get());
  PERFTRACKER_RETURN_IF_ERROR(tx.Begin());
  PERFTRACKER_RETURN_IF_ERROR(RequireWindow(diagnosis.job_id, diagnosis.window_id));
  {
    StatusOr<Statement> st = writer_->Prepare(
        "INSERT OR REPLACE INTO diagnoses (job_id, window_id, json, text, top_code, "
        "missing_ranks, created_ns, perfetto_path) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    if (!st.ok()) return st.status();
    st->Bind(1, diagnosis.job_id);
    st->Bind(2, static_cast<int64_t>(diagnosis.window_id));
    st->Bind(3, diagnosis.json);
    st->Bind(4, diagnosis.text);
    st->Bind(5, diagnosis.top_code);
    st->Bind(6, nlohmann::json(diagnosis.missing_ranks).dump());
    st->Bind(7, diagnosis.created_ns);
    st->Bind(8, diagnosis.perfetto_path);
    PERFTRACKER_RETURN_IF_ERROR(st->Run());
  }
  return tx.Commit();
}

StatusOr<DiagnosisRecord> SqliteStore::GetDiagnosis(const std::string& job_id, uint64_t window_id) {
  ReadLease conn = AcquireReader();
  StatusOr<Statement> st = conn->Prepare(
      "SELECT json, text, top_code, missing_ranks, created_ns, perfetto_path FROM diagnoses "
      "WHERE job_id = ?1 AND window_id = ?2");
  if (!st.ok()) return st.status();
  st->Bind(1, job_id);
  st->Bind(2, static_cast<int64_t>(window_id));
  StatusOr<bool> row = st->Step();
  if (!row.ok()) return row.status();
  if (!*row) {
    return Status::NotFound(
        fmt::format("store: job {} window {} has no diagnosis", job_id, window_id));
  }
  DiagnosisRecord d;
  d.job_id = job_id;
  d.window_id = window_id;
  d.json = st->ColumnText(0);
  d.text = st->ColumnText(1);
  d.top_code = st->ColumnText(2);
  const nlohmann::json missing = nlohmann::json::parse(st->ColumnText(3), nullptr, false);
  if (missing.is_array()) {
    for (const auto& r : missing) {
      if (r.is_number_integer()) d.missing_ranks.push_back(r.get<int32_t>());
    }
  }
  d.created_ns = st->ColumnInt64(4);
  d.perfetto_path = st->ColumnText(5);
  return d;
}

Status SqliteStore::SetBaseline(const std::string& job_id, uint64_t window_id) {
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreJobId(job_id));
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreWindowId(job_id, window_id));
  std::lock_guard<std::mutex> lock(write_mu_);
  Transaction tx(writer_.get());
  PERFTRACKER_RETURN_IF_ERROR(tx.Begin());
  PERFTRACKER_RETURN_IF_ERROR(RequireWindow(job_id, window_id));
  {
    StatusOr<Statement> st =
        writer_->Prepare("UPDATE jobs SET baseline_window = ?2 WHERE job_id = ?1");
    if (!st.ok()) return st.status();
    st->Bind(1, job_id);
    st->Bind(2, static_cast<int64_t>(window_id));
    PERFTRACKER_RETURN_IF_ERROR(st->Run());
  }
  return tx.Commit();
}

StatusOr<std::optional<uint64_t>> SqliteStore::GetBaseline(const std::string& job_id) {
  ReadLease conn = AcquireReader();
  StatusOr<Statement> st = conn->Prepare("SELECT baseline_window FROM jobs WHERE job_id = ?1");
  if (!st.ok()) return st.status();
  st->Bind(1, job_id);
  StatusOr<bool> row = st->Step();
  if (!row.ok()) return row.status();
  if (!*row) return Status::NotFound(fmt::format("store: no job {}", job_id));
  if (st->ColumnIsNull(0)) return std::optional<uint64_t>();
  return std::optional<uint64_t>(static_cast<uint64_t>(st->ColumnInt64(0)));
}

Status SqliteStore::CheckIntegrity() {
  ReadLease conn = AcquireReader();
  StatusOr<Statement> st = conn->Prepare("PRAGMA integrity_check");
  if (!st.ok()) return st.status();
  StatusOr<bool> row = st->Step();
  if (!row.ok()) return row.status();
  if (!*row) return Status::Internal("store " + path_ + ": integrity_check returned nothing");
  const std::string first = st->ColumnText(0);
  if (first != "ok") {
    return Status::DataLoss("store " + path_ + ": integrity check failed: " + first);
  }
  return Status::Ok();
}

}  // namespace perftracker
