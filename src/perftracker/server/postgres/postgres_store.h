// PostgresStore: the Store (store/store.h) in a PostgreSQL database, through libpq, so that
// several `perftracker server` processes share one store: each coordinates the jobs whose
// collectors connect to it, and every server's UI / API reads every job (docs/server.md,
// "A fleet of jobs").
//
// Concurrency. A pool of connections, each lent to one thread at a time. Most writes are
// one statement, one round trip: a child record's parent check is its foreign key (a
// violation becomes the contract's NotFound). PutWindow reads before it writes (a window's
// state only moves forward), so it is one transaction that first locks the job's row (FOR
// NO KEY UPDATE): two servers, or two threads, never interleave that check and its write.
// A connection the database dropped is reopened on its next use.
//
// Durability. A write returns Ok after PostgreSQL acknowledged its commit; the server process
// holds nothing, so a write that returned survives the perftracker server being killed. The
// sessions run with synchronous_commit=off, SqliteStore's default guarantee (its WAL
// without fsync per commit): PostgreSQL itself crashing may lose the last ~0.6 s of commits
// (3 x wal_writer_delay), and a commit costs no WAL flush (7.5 -> 2.9 ms per summary on the
// shared VM, docs/performance.md). `?options=-csynchronous_commit%3Don` in the URL restores
// the flush per commit.
//
// Schema. The same tables as SqliteStore (summaries as the wire bytes of
// wire/summary_codec.h, in bytea), and perftracker_schema, one row: the schema version.
// Opening migrates an older schema up to kSchemaVersion in one transaction under an advisory
// lock (two servers starting at once migrate once); a newer schema, or a database holding
// other tables and no perftracker_schema, is refused with one line naming the URL.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "perftracker/server/postgres/pg_connection.h"
#include "perftracker/server/store/store.h"

namespace perftracker {

struct PostgresStoreOptions {
  // Connections in the pool (each serves one call at a time).
  int connections = 4;
  int connect_timeout_s = 10;
  // Iteration points kept per job (0: all), as SqliteStoreOptions::max_iterations_per_job.
  size_t max_iterations_per_job = 1'000'000;
};

class PostgresStore final : public Store {
 public:
  static constexpr int64_t kSchemaVersion = 3;

  // True for "postgresql://..." and "postgres://..." (what --store takes for this store).
  static bool IsPostgresUrl(const std::string& spec);

  // Connects to `url` (postgresql://user@host:port/db, or a libpq key=value string) and
  // migrates its schema. Errors name the URL with its password masked.
  static StatusOr<std::unique_ptr<PostgresStore>> Open(const std::string& url,
                                                       const PostgresStoreOptions& options = {});
  // Tests: creates (migrates to) exactly `version` of the schema in an empty database, as
  // an older perftracker would have left it.
  static Status CreateSchemaVersionForTest(const std::string& url, int64_t version);
  ~PostgresStore() override;

  Status UpsertJob(const JobRecord& job) override;
  Status UpsertWorkers(const std::vector<WorkerRecord>& workers) override;
  StatusOr<JobRecord> GetJob(const std::string& job_id) override;
  StatusOr<std::vector<JobRecord>> ListJobs() override;
  StatusOr<std::vector<WorkerRecord>> ListWorkers(const std::string& job_id) override;

  Status AppendIterations(const std::string& job_id,
                          const std::vector<IterationPoint>& points) override;
  StatusOr<std::vector<IterationPoint>> ListIterations(const std::string& job_id, int64_t since_ns,
                                                       size_t limit) override;

  Status PutWindow(const WindowRecord& window) override;
  StatusOr<std::vector<WindowRecord>> ListWindows(const std::string& job_id) override;
  StatusOr<WindowRecord> GetWindow(const std::string& job_id, uint64_t window_id) override;
  Status PutSummary(const std::string& job_id, uint64_t window_id,
                    const WorkerSummary& summary) override;
  Status PutSummaryBytes(const std::string& job_id, uint64_t window_id, int32_t rank,
                         std::string_view encoded) override;
  StatusOr<std::vector<WorkerSummary>> ListSummaries(const std::string& job_id,
                                                     uint64_t window_id) override;
  Status PutDiagnosis(const DiagnosisRecord& diagnosis) override;
  StatusOr<DiagnosisRecord> GetDiagnosis(const std::string& job_id, uint64_t window_id) override;

  Status SetBaseline(const std::string& job_id, uint64_t window_id) override;
  StatusOr<std::optional<uint64_t>> GetBaseline(const std::string& job_id) override;

  // The schema version stored in the database.
  StatusOr<int64_t> SchemaVersion();
  const std::string& name() const { return name_; }

 private:
  // A connection borrowed from the pool, returned when the lease ends.
  class Lease;

  PostgresStore(std::string url, const PostgresStoreOptions& options);
  Status Initialize();
  StatusOr<Lease> Acquire();
  // Runs `migrations` [from, to) on `conn` under the advisory lock.
  static Status Migrate(PgConnection* conn, int64_t target);
  // Inside a transaction on `conn`: locks the job's row against other window writes,
  // NotFound when there is no such job.
  static Status LockJob(PgConnection* conn, const std::string& job_id);

  std::string url_;
  std::string name_;  // the URL, password masked
  PostgresStoreOptions options_;

  std::mutex pool_mu_;
  std::condition_variable pool_cv_;
  std::vector<std::unique_ptr<PgConnection>> idle_;
  std::map<std::string, size_t> appended_since_prune_;  // guarded by pool_mu_
};

}  // namespace perftracker
