#include "perftracker/server/postgres/postgres_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "perftracker/server/store/store_checks.h"
#include "perftracker/wire/summary_codec.h"

namespace perftracker {
namespace {

// Migrations[i] takes a store from schema version i to i + 1. Never edit a shipped entry:
// append a new one and raise kSchemaVersion.
constexpr const char* kMigrations[] = {
    // 0 -> 1: the first schema (SqliteStore's version 1).
    R"sql(
CREATE TABLE jobs (
  job_id TEXT PRIMARY KEY,
  title TEXT NOT NULL,
  world_size INTEGER NOT NULL,
  created_ns BIGINT NOT NULL,
  last_seen_ns BIGINT NOT NULL,
  baseline_window BIGINT
);
CREATE INDEX jobs_by_created ON jobs (created_ns);
CREATE TABLE workers (
  job_id TEXT NOT NULL REFERENCES jobs (job_id),
  rank INTEGER NOT NULL,
  host TEXT NOT NULL,
  pid INTEGER NOT NULL,
  joined_ns BIGINT NOT NULL,
  PRIMARY KEY (job_id, rank)
);
CREATE TABLE iterations (
  id BIGSERIAL PRIMARY KEY,
  job_id TEXT NOT NULL REFERENCES jobs (job_id),
  rank INTEGER NOT NULL,
  end_ns BIGINT NOT NULL,
  duration_ns BIGINT NOT NULL
);
CREATE INDEX iterations_by_time ON iterations (job_id, end_ns);
CREATE TABLE windows (
  job_id TEXT NOT NULL REFERENCES jobs (job_id),
  window_id BIGINT NOT NULL,
  reason TEXT NOT NULL,
  start_ns BIGINT NOT NULL,
  duration_ns BIGINT NOT NULL,
  triggers TEXT NOT NULL,
  state SMALLINT NOT NULL,
  PRIMARY KEY (job_id, window_id)
);
CREATE TABLE summaries (
  job_id TEXT NOT NULL,
  window_id BIGINT NOT NULL,
  rank INTEGER NOT NULL,
  summary BYTEA NOT NULL,
  PRIMARY KEY (job_id, window_id, rank),
  FOREIGN KEY (job_id, window_id) REFERENCES windows (job_id, window_id)
);
CREATE TABLE diagnoses (
  job_id TEXT NOT NULL,
  window_id BIGINT NOT NULL,
  json TEXT NOT NULL,
  text TEXT NOT NULL,
  top_code TEXT NOT NULL,
  missing_ranks TEXT NOT NULL,
  created_ns BIGINT NOT NULL,
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
static_assert(std::size(kMigrations) == PostgresStore::kSchemaVersion);

// pg_advisory_xact_lock key of schema migrations ("PTRK").
constexpr int64_t kMigrationLock = 0x5054524b;

constexpr const char* kJobColumns = "job_id, title, world_size, created_ns, last_seen_ns";

JobRecord ReadJob(const PgResult& r, int row) {
  JobRecord job;
  job.job_id = r.Text(row, 0);
  job.title = r.Text(row, 1);
  job.world_size = static_cast<int32_t>(r.Int64(row, 2));
  job.created_ns = r.Int64(row, 3);
  job.last_seen_ns = r.Int64(row, 4);
  return job;
}

constexpr const char* kWindowColumns =
    "job_id, window_id, reason, start_ns, duration_ns, triggers, state, state_reason";

WindowRecord ReadWindow(const PgResult& r, int row) {
  WindowRecord w;
  w.job_id = r.Text(row, 0);
  w.window_id = static_cast<uint64_t>(r.Int64(row, 1));
  w.reason = r.Text(row, 2);
  w.start_ns = r.Int64(row, 3);
  w.duration_ns = r.Int64(row, 4);
  const nlohmann::json triggers = nlohmann::json::parse(r.Text(row, 5), nullptr, false);
  if (triggers.is_array()) {
    for (const auto& t : triggers) {
      if (t.is_string()) w.triggers.push_back(t.get<std::string>());
    }
  }
  w.state = WindowStateFromInt(r.Int64(row, 6));
  w.state_reason = r.Text(row, 7);
  return w;
}

PgParam Id(uint64_t window_id) { return PgParam(static_cast<int64_t>(window_id)); }

// A PostgreSQL array literal of integers: {1,2,3}.
template <typename F>
std::string IntArray(const std::vector<IterationPoint>& points, F field) {
  std::string out = "{";
  for (size_t i = 0; i < points.size(); ++i) {
    if (i > 0) out.push_back(',');
    out += std::to_string(field(points[i]));
  }
  out.push_back('}');
  return out;
}

}  // namespace

class PostgresStore::Lease {
 public:
  Lease(PostgresStore* store, std::unique_ptr<PgConnection> conn)
      : store_(store), conn_(std::move(conn)) {}
  Lease(Lease&&) = default;
  ~Lease() {
    if (conn_ == nullptr) return;
    std::lock_guard<std::mutex> lock(store_->pool_mu_);
    store_->idle_.push_back(std::move(conn_));
    store_->pool_cv_.notify_one();
  }
  PgConnection* get() { return conn_.get(); }
  PgConnection* operator->() { return conn_.get(); }

 private:
  PostgresStore* store_;
  std::unique_ptr<PgConnection> conn_;
};

bool PostgresStore::IsPostgresUrl(const std::string& spec) {
  return spec.rfind("postgresql://", 0) == 0 || spec.rfind("postgres://", 0) == 0;
}

PostgresStore::PostgresStore(std::string url, const PostgresStoreOptions& options)
    : url_(std::move(url)), name_(RedactPostgresUrl(url_)), options_(options) {
  options_.connections = std::max(options_.connections, 1);
}

PostgresStore::~PostgresStore() = default;

StatusOr<std::unique_ptr<PostgresStore>> PostgresStore::Open(const std::string& url,
                                                             const PostgresStoreOptions& options) {
  if (url.empty()) return Status::InvalidArgument("store: empty PostgreSQL URL");
  std::unique_ptr<PostgresStore> store(new PostgresStore(url, options));
  PERFTRACKER_RETURN_IF_ERROR(store->Initialize());
  return store;
}

Status PostgresStore::Initialize() {
  for (int i = 0; i < options_.connections; ++i) {
    StatusOr<std::unique_ptr<PgConnection>> conn =
        PgConnection::Open(url_, name_, options_.connect_timeout_s);
    if (!conn.ok()) return conn.status();
    if (i == 0) PERFTRACKER_RETURN_IF_ERROR(Migrate(conn->get(), kSchemaVersion));
    idle_.push_back(std::move(conn).value());
  }
  return Status::Ok();
}

Status PostgresStore::CreateSchemaVersionForTest(const std::string& url, int64_t version) {
  StatusOr<std::unique_ptr<PgConnection>> conn =
      PgConnection::Open(url, RedactPostgresUrl(url), 10);
  if (!conn.ok()) return conn.status();
  return Migrate(conn->get(), version);
}

Status PostgresStore::Migrate(PgConnection* conn, int64_t target) {
  PgTransaction tx(conn);
  PERFTRACKER_RETURN_IF_ERROR(tx.Begin());
  PERFTRACKER_RETURN_IF_ERROR(
      conn->Run("SELECT pg_advisory_xact_lock($1)", {PgParam(kMigrationLock)}));
  StatusOr<int64_t> exists =
      conn->QueryInt("SELECT (to_regclass('perftracker_schema') IS NOT NULL)::int");
  if (!exists.ok()) return exists.status();
  if (*exists == 0) {
    StatusOr<int64_t> tables = conn->QueryInt(
        "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = current_schema()");
    if (!tables.ok()) return tables.status();
    if (*tables > 0) {
      return Status::InvalidArgument(
          fmt::format("store {}: a database of another program ({} tables and no "
                      "perftracker_schema), not a perftracker store; pass another database",
                      conn->name(), *tables));
    }
    PERFTRACKER_RETURN_IF_ERROR(
        conn->ExecScript("CREATE TABLE perftracker_schema (version BIGINT NOT NULL);"
                         "INSERT INTO perftracker_schema (version) VALUES (0);"));
  }
  StatusOr<int64_t> version = conn->QueryInt("SELECT max(version) FROM perftracker_schema");
  if (!version.ok()) {
    return Status::DataLoss(fmt::format(
        "store {}: perftracker_schema holds no version; the database is damaged", conn->name()));
  }
  if (*version > kSchemaVersion) {
    return Status::InvalidArgument(
        fmt::format("store {}: schema version {} is newer than this perftracker's ({}); "
                    "upgrade perftracker or pass another database",
                    conn->name(), *version, kSchemaVersion));
  }
  for (int64_t v = *version; v < target; ++v) {
    const Status st = conn->ExecScript(kMigrations[v]);
    if (!st.ok()) {
      return Status::Internal(fmt::format("store {}: migration to schema version {} failed: {}",
                                          conn->name(), v + 1, st.message()));
    }
  }
  if (target > *version) {
    PERFTRACKER_RETURN_IF_ERROR(
        conn->Run("UPDATE perftracker_schema SET version = $1", {PgParam(target)}));
  }
  return tx.Commit();
}

StatusOr<int64_t> PostgresStore::SchemaVersion() {
  StatusOr<Lease> conn = Acquire();
  if (!conn.ok()) return conn.status();
  return (*conn)->QueryInt("SELECT max(version) FROM perftracker_schema");
}

StatusOr<PostgresStore::Lease> PostgresStore::Acquire() {
  std::unique_ptr<PgConnection> conn;
  {
    std::unique_lock<std::mutex> lock(pool_mu_);
    pool_cv_.wait(lock, [this] { return !idle_.empty(); });
    conn = std::move(idle_.back());
    idle_.pop_back();
  }
  Lease lease(this, std::move(conn));
  // The database restarted or the network dropped the connection: reconnect once here; the
  // call that saw it break already failed with its own message.
  if (lease->broken()) PERFTRACKER_RETURN_IF_ERROR(lease->Reset());
  return lease;
}

namespace {

// SQLSTATE foreign_key_violation: the parent row (job, window) is not there.
constexpr const char* kForeignKeyViolation = "23503";

Status NoJob(const std::string& job_id) {
  return Status::NotFound(
      fmt::format("store: job {} is not registered (register the job first)", job_id));
}

Status NoWindow(const std::string& job_id, uint64_t window_id) {
  return Status::NotFound(fmt::format("store: job {} has no window {}", job_id, window_id));
}

// One statement whose foreign key stands for the parent check: its violation is `absent`.
Status RunChildWrite(PgConnection* conn, std::string_view sql, const std::vector<PgParam>& params,
                     const Status& absent) {
  const Status st = conn->Run(sql, params);
  if (!st.ok() && conn->last_sqlstate() == kForeignKeyViolation) return absent;
  return st;
}

}  // namespace

Status PostgresStore::LockJob(PgConnection* conn, const std::string& job_id) {
  StatusOr<PgResult> r =
      conn->Exec("SELECT 1 FROM jobs WHERE job_id = $1 FOR NO KEY UPDATE", {job_id});
  if (!r.ok()) return r.status();
  return r->rows() > 0 ? Status::Ok() : NoJob(job_id);
}

Status PostgresStore::UpsertJob(const JobRecord& job) {
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreJobId(job.job_id));
  StatusOr<Lease> conn = Acquire();
  if (!conn.ok()) return conn.status();
  return (*conn)->Run(
      "INSERT INTO jobs (job_id, title, world_size, created_ns, last_seen_ns) "
      "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (job_id) DO UPDATE SET title = excluded.title, "
      "world_size = excluded.world_size, created_ns = excluded.created_ns, "
      "last_seen_ns = excluded.last_seen_ns",
      {job.job_id, job.title, job.world_size, job.created_ns, job.last_seen_ns});
}

Status PostgresStore::UpsertWorkers(const std::vector<WorkerRecord>& workers) {
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreWorkers(workers));
  if (workers.empty()) return Status::Ok();
  StatusOr<Lease> conn = Acquire();
  if (!conn.ok()) return conn.status();
  PgTransaction tx(conn->get());
  PERFTRACKER_RETURN_IF_ERROR(tx.Begin());
  for (const WorkerRecord& worker : workers) {
    PERFTRACKER_RETURN_IF_ERROR(RunChildWrite(
        conn->get(),
        "INSERT INTO workers (job_id, rank, host, pid, joined_ns) VALUES ($1, $2, $3, $4, $5) "
        "ON CONFLICT (job_id, rank) DO UPDATE SET host = excluded.host, pid = excluded.pid, "
        "joined_ns = excluded.joined_ns",
        {worker.job_id, worker.rank, worker.host, worker.pid, worker.joined_ns},
        NoJob(worker.job_id)));
  }
  return tx.Commit();
}

StatusOr<JobRecord> PostgresStore::GetJob(const std::string& job_id) {
  StatusOr<Lease> conn = Acquire();
  if (!conn.ok()) return conn.status();
  StatusOr<PgResult> r =
      (*conn)->Exec(fmt::format("SELECT {} FROM jobs WHERE job_id = $1", kJobColumns), {job_id});
  if (!r.ok()) return r.status();
  if (r->rows() == 0) return Status::NotFound(fmt::format("store: no job {}", job_id));
  return ReadJob(*r, 0);
}

StatusOr<std::vector<JobRecord>> PostgresStore::ListJobs() {
  StatusOr<Lease> conn = Acquire();
  if (!conn.ok()) return conn.status();
  StatusOr<PgResult> r = (*conn)->Exec(
      fmt::format("SELECT {} FROM jobs ORDER BY created_ns DESC, job_id", kJobColumns));
  if (!r.ok()) return r.status();
  std::vector<JobRecord> jobs;
  for (int i = 0; i < r->rows(); ++i) jobs.push_back(ReadJob(*r, i));
  return jobs;
}

StatusOr<std::vector<WorkerRecord>> PostgresStore::ListWorkers(const std::string& job_id) {
  StatusOr<Lease> conn = Acquire();
  if (!conn.ok()) return conn.status();
  StatusOr<PgResult> r = (*conn)->Exec(
      "SELECT rank, host, pid, joined_ns FROM workers WHERE job_id = $1 ORDER BY rank", {job_id});
  if (!r.ok()) return r.status();
  std::vector<WorkerRecord> workers;
  for (int i = 0; i < r->rows(); ++i) {
    WorkerRecord w;
    w.job_id = job_id;
    w.rank = static_cast<int32_t>(r->Int64(i, 0));
    w.host = r->Text(i, 1);
    w.pid = static_cast<int32_t>(r->Int64(i, 2));
    w.joined_ns = r->Int64(i, 3);
    workers.push_back(std::move(w));
  }
  return workers;
}

Status PostgresStore::AppendIterations(const std::string& job_id,
                                       const std::vector<IterationPoint>& points) {
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreJobId(job_id));
  PERFTRACKER_RETURN_IF_ERROR(CheckIterationPoints(job_id, points));
  StatusOr<Lease> conn = Acquire();
  if (!conn.ok()) return conn.status();
  if (points.empty()) {
    StatusOr<PgResult> job = (*conn)->Exec("SELECT 1 FROM jobs WHERE job_id = $1", {job_id});
    if (!job.ok()) return job.status();
    return job->rows() > 0 ? Status::Ok() : NoJob(job_id);
  }
  // One statement for the batch: the points travel as three arrays, in order (the serial
  // id keeps their order for points with the same end_ns).
  PERFTRACKER_RETURN_IF_ERROR(RunChildWrite(
      conn->get(),
      "INSERT INTO iterations (job_id, rank, end_ns, duration_ns) SELECT $1, r, e, d FROM "
      "unnest($2::integer[], $3::bigint[], $4::bigint[]) WITH ORDINALITY AS t(r, e, d, n) "
      "ORDER BY n",
      {job_id, IntArray(points, [](const IterationPoint& p) { return int64_t{p.rank}; }),
       IntArray(points, [](const IterationPoint& p) { return p.end_ns; }),
       IntArray(points, [](const IterationPoint& p) { return p.duration_ns; })},
      NoJob(job_id)));
  const size_t cap = options_.max_iterations_per_job;
  bool prune = false;
  if (cap > 0) {
    std::lock_guard<std::mutex> lock(pool_mu_);
    size_t& appended = appended_since_prune_[job_id];
    appended += points.size();
    if (appended >= std::max<size_t>(cap / 8, 1)) {
      prune = true;
      appended = 0;
    }
  }
  if (!prune) return Status::Ok();
  // The end_ns of the cap-th newest point, then everything older (ties are kept).
  return (*conn)->Run(
      "DELETE FROM iterations WHERE job_id = $1 AND end_ns < (SELECT end_ns FROM iterations "
      "WHERE job_id = $1 ORDER BY end_ns DESC LIMIT 1 OFFSET $2)",
      {job_id, static_cast<int64_t>(cap - 1)});
}

StatusOr<std::vector<IterationPoint>> PostgresStore::ListIterations(const std::string& job_id,
                                                                    int64_t since_ns,
                                                                    size_t limit) {
  StatusOr<Lease> conn = Acquire();
  if (!conn.ok()) return conn.status();
  const bool unlimited = limit == 0 || limit > static_cast<size_t>(INT64_MAX);
  // The newest `limit` points after since_ns, returned oldest first (LIMIT NULL: all).
  StatusOr<PgResult> r = (*conn)->Exec(
      "SELECT rank, end_ns, duration_ns FROM (SELECT rank, end_ns, duration_ns, id FROM "
      "iterations WHERE job_id = $1 AND end_ns > $2 ORDER BY end_ns DESC, id DESC "
      "LIMIT $3::bigint) AS newest ORDER BY end_ns, id",
      {job_id, since_ns, unlimited ? PgParam::Null() : PgParam(static_cast<int64_t>(limit))});
  if (!r.ok()) return r.status();
  std::vector<IterationPoint> points;
  points.reserve(static_cast<size_t>(r->rows()));
  for (int i = 0; i < r->rows(); ++i) {
    points.push_back({static_cast<int32_t>(r->Int64(i, 0)), r->Int64(i, 1), r->Int64(i, 2)});
  }
  return points;
}

Status PostgresStore::PutWindow(const WindowRecord& window) {
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreJobId(window.job_id));
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreWindowId(window.job_id, window.window_id));
  StatusOr<Lease> conn = Acquire();
  if (!conn.ok()) return conn.status();
  PgTransaction tx(conn->get());
  PERFTRACKER_RETURN_IF_ERROR(tx.Begin());
  // The job's row lock orders every PutWindow of the job: the check below and the write
  // after it see no other writer's window in between (another server's included).
  PERFTRACKER_RETURN_IF_ERROR(LockJob(conn->get(), window.job_id));
  {
    StatusOr<PgResult> old = (*conn)->Exec(
        fmt::format("SELECT {} FROM windows WHERE job_id = $1 AND window_id = $2", kWindowColumns),
        {window.job_id, Id(window.window_id)});
    if (!old.ok()) return old.status();
    if (old->rows() > 0) {
      PERFTRACKER_RETURN_IF_ERROR(CheckWindowUpdate(ReadWindow(*old, 0), window));
    }
  }
  PERFTRACKER_RETURN_IF_ERROR((*conn)->Run(
      "INSERT INTO windows (job_id, window_id, reason, start_ns, duration_ns, triggers, state, "
      "state_reason) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (job_id, window_id) DO "
      "UPDATE SET reason = excluded.reason, triggers = excluded.triggers, state = excluded.state, "
      "state_reason = excluded.state_reason",
      {window.job_id, Id(window.window_id), window.reason, window.start_ns, window.duration_ns,
       nlohmann::json(window.triggers)
           .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
       static_cast<int64_t>(window.state), window.state_reason}));
  return tx.Commit();
}

StatusOr<std::vector<WindowRecord>> PostgresStore::ListWindows(const std::string& job_id) {
  StatusOr<Lease> conn = Acquire();
  if (!conn.ok()) return conn.status();
  StatusOr<PgResult> r = (*conn)->Exec(
      fmt::format("SELECT {} FROM windows WHERE job_id = $1 ORDER BY window_id", kWindowColumns),
      {job_id});
  if (!r.ok()) return r.status();
  std::vector<WindowRecord> windows;
  for (int i = 0; i < r->rows(); ++i) windows.push_back(ReadWindow(*r, i));
  return windows;
}

StatusOr<WindowRecord> PostgresStore::GetWindow(const std::string& job_id, uint64_t window_id) {
  if (!CheckStoreWindowId(job_id, window_id).ok()) {
    return Status::NotFound(fmt::format("store: job {} has no window {}", job_id, window_id));
  }
  StatusOr<Lease> conn = Acquire();
  if (!conn.ok()) return conn.status();
  StatusOr<PgResult> r = (*conn)->Exec(
      fmt::format("SELECT {} FROM windows WHERE job_id = $1 AND window_id = $2", kWindowColumns),
      {job_id, Id(window_id)});
  if (!r.ok()) return r.status();
  if (r->rows() == 0) {
    return Status::NotFound(fmt::format("store: job {} has no window {}", job_id, window_id));
  }
  return ReadWindow(*r, 0);
}

Status PostgresStore::PutSummary(const std::string& job_id, uint64_t window_id,
                                 const WorkerSummary& summary) {
  return PutSummaryBytes(job_id, window_id, summary.rank, EncodeWorkerSummary(summary));
}

Status PostgresStore::PutSummaryBytes(const std::string& job_id, uint64_t window_id, int32_t rank,
                                      std::string_view encoded) {
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreJobId(job_id));
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreWindowId(job_id, window_id));
  if (rank < 0) {
    return Status::InvalidArgument(fmt::format(
        "store: job {} window {}: summary with negative rank {}", job_id, window_id, rank));
  }
  StatusOr<Lease> conn = Acquire();
  if (!conn.ok()) return conn.status();
  return RunChildWrite(
      conn->get(),
      "INSERT INTO summaries (job_id, window_id, rank, summary) VALUES ($1, $2, $3, $4) "
      "ON CONFLICT (job_id, window_id, rank) DO UPDATE SET summary = excluded.summary",
      {job_id, Id(window_id), rank, PgParam::Bytes(std::string(encoded))},
      NoWindow(job_id, window_id));
}

StatusOr<std::vector<WorkerSummary>> PostgresStore::ListSummaries(const std::string& job_id,
                                                                  uint64_t window_id) {
  if (!CheckStoreWindowId(job_id, window_id).ok()) return std::vector<WorkerSummary>();
  std::vector<std::pair<int32_t, std::string>> blobs;
  {
    StatusOr<Lease> conn = Acquire();
    if (!conn.ok()) return conn.status();
    StatusOr<PgResult> r = (*conn)->Exec(
        "SELECT rank, summary FROM summaries WHERE job_id = $1 AND window_id = $2 ORDER BY rank",
        {job_id, Id(window_id)});
    if (!r.ok()) return r.status();
    for (int i = 0; i < r->rows(); ++i) {
      blobs.emplace_back(static_cast<int32_t>(r->Int64(i, 0)), r->Bytes(i, 1));
    }
  }
  // Decoded after the connection went back to the pool.
  std::vector<WorkerSummary> summaries;
  summaries.reserve(blobs.size());
  for (const auto& [rank, bytes] : blobs) {
    StatusOr<WorkerSummary> summary = DecodeWorkerSummary(bytes);
    if (!summary.ok()) {
      return Status::DataLoss(
          fmt::format("store {}: job {} window {} rank {}: stored summary is unreadable: {}", name_,
                      job_id, window_id, rank, summary.status().message()));
    }
    summaries.push_back(std::move(summary).value());
  }
  return summaries;
}

Status PostgresStore::PutDiagnosis(const DiagnosisRecord& diagnosis) {
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreJobId(diagnosis.job_id));
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreWindowId(diagnosis.job_id, diagnosis.window_id));
  StatusOr<Lease> conn = Acquire();
  if (!conn.ok()) return conn.status();
  return RunChildWrite(
      conn->get(),
      "INSERT INTO diagnoses (job_id, window_id, json, text, top_code, missing_ranks, "
      "created_ns, perfetto_path) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (job_id, "
      "window_id) DO UPDATE SET json = excluded.json, text = excluded.text, top_code = "
      "excluded.top_code, missing_ranks = excluded.missing_ranks, created_ns = "
      "excluded.created_ns, perfetto_path = excluded.perfetto_path",
      {diagnosis.job_id, Id(diagnosis.window_id), diagnosis.json, diagnosis.text,
       diagnosis.top_code, nlohmann::json(diagnosis.missing_ranks).dump(), diagnosis.created_ns,
       diagnosis.perfetto_path},
      NoWindow(diagnosis.job_id, diagnosis.window_id));
}

StatusOr<DiagnosisRecord> PostgresStore::GetDiagnosis(const std::string& job_id,
                                                      uint64_t window_id) {
  const Status missing =
      Status::NotFound(fmt::format("store: job {} window {} has no diagnosis", job_id, window_id));
  if (!CheckStoreWindowId(job_id, window_id).ok()) return missing;
  StatusOr<Lease> conn = Acquire();
  if (!conn.ok()) return conn.status();
  StatusOr<PgResult> r = (*conn)->Exec(
      "SELECT json, text, top_code, missing_ranks, created_ns, perfetto_path FROM diagnoses "
      "WHERE job_id = $1 AND window_id = $2",
      {job_id, Id(window_id)});
  if (!r.ok()) return r.status();
  if (r->rows() == 0) return missing;
  DiagnosisRecord d;
  d.job_id = job_id;
  d.window_id = window_id;
  d.json = r->Text(0, 0);
  d.text = r->Text(0, 1);
  d.top_code = r->Text(0, 2);
  const nlohmann::json ranks = nlohmann::json::parse(r->Text(0, 3), nullptr, false);
  if (ranks.is_array()) {
    for (const auto& rank : ranks) {
      if (rank.is_number_integer()) d.missing_ranks.push_back(rank.get<int32_t>());
    }
  }
  d.created_ns = r->Int64(0, 4);
  d.perfetto_path = r->Text(0, 5);
  return d;
}

Status PostgresStore::SetBaseline(const std::string& job_id, uint64_t window_id) {
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreJobId(job_id));
  PERFTRACKER_RETURN_IF_ERROR(CheckStoreWindowId(job_id, window_id));
  StatusOr<Lease> conn = Acquire();
  if (!conn.ok()) return conn.status();
  StatusOr<PgResult> r = (*conn)->Exec(
      "UPDATE jobs SET baseline_window = $2 WHERE job_id = $1 AND EXISTS (SELECT 1 FROM "
      "windows WHERE job_id = $1 AND window_id = $2)",
      {job_id, Id(window_id)});
  if (!r.ok()) return r.status();
  return r->AffectedRows() > 0 ? Status::Ok() : NoWindow(job_id, window_id);
}

StatusOr<std::optional<uint64_t>> PostgresStore::GetBaseline(const std::string& job_id) {
  StatusOr<Lease> conn = Acquire();
  if (!conn.ok()) return conn.status();
  StatusOr<PgResult> r =
      (*conn)->Exec("SELECT baseline_window FROM jobs WHERE job_id = $1", {job_id});
  if (!r.ok()) return r.status();
  if (r->rows() == 0) return Status::NotFound(fmt::format("store: no job {}", job_id));
  if (r->IsNull(0, 0)) return std::optional<uint64_t>();
  return std::optional<uint64_t>(static_cast<uint64_t>(r->Int64(0, 0)));
}

}  // namespace perftracker
