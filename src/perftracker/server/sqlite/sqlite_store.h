// SqliteStore: the embedded Store (store/store.h) in one SQLite file.
//
// Layout and concurrency. The database runs in WAL mode: one writer connection, guarded by
// a mutex, performs every write in its own IMMEDIATE transaction; a small pool of reader
// connections serves reads concurrently with the writer (WAL readers see the last commit
// and never block it). Each connection is used by one thread at a time. Other processes
// opening the same file wait up to the busy timeout instead of failing.
//
// Durability. A write that returned Ok is committed to the WAL file with write(2) before
// the call returns, so it survives the server process being killed (SIGKILL): the OS keeps
// the file's pages. With `synchronous_full` the WAL is also fsync'ed on every commit, which
// additionally survives power loss / kernel crashes at the cost of one fsync per write.
//
// Schema. Tables jobs, workers, iterations, windows, summaries (WorkerSummary as the wire
// bytes of wire/summary_codec.h), diagnoses; PRAGMA application_id marks the file as a
// perftracker store and PRAGMA user_version is its schema version. Opening an older store
// runs the migrations up to kSchemaVersion in one transaction; a newer one, a foreign
// SQLite file or a file that is not a database is refused with a one-line error naming it.
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

#include "perftracker/server/sqlite/sqlite_connection.h"
#include "perftracker/server/store/store.h"

namespace perftracker {

struct SqliteStoreOptions {
  // Reader connections; 0 makes reads share the writer connection (required for
  // ":memory:", whose contents each connection would otherwise see separately).
  int read_connections = 4;
  // How long a statement waits for another process's lock before failing.
  int busy_timeout_ms = 5000;
  // fsync the WAL on every commit (survives power loss, not only a process crash).
  bool synchronous_full = false;
  // Iteration points kept per job (0: all). The oldest beyond the cap are deleted as new ones
  // arrive (checked every cap/8 appended points), so a long job on many ranks keeps a
  // bounded history: 1 M points is ~60 MB and, at 2,000 ranks, 500 iterations per rank.
  size_t max_iterations_per_job = 1'000'000;
};

class SqliteStore final : public Store {
 public:
  static constexpr int64_t kSchemaVersion = 3;
  // "PTRK": PRAGMA application_id of a perftracker store.
  static constexpr int64_t kApplicationId = 0x5054524b;

  // Opens or creates the store at `path` (":memory:" for a private in-memory store).
  static StatusOr<std::unique_ptr<SqliteStore>> Open(const std::string& path,
                                                     const SqliteStoreOptions& options = {});
  ~SqliteStore() override;

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

  // PRAGMA integrity_check: Ok, or DataLoss with SQLite's first complaint.
  Status CheckIntegrity();
  const std::string& path() const { return path_; }

 private:
  // A reader connection borrowed from the pool (or the writer, when there is no pool),
  // returned when the lease ends.
  class ReadLease;

  SqliteStore(std::string path, const SqliteStoreOptions& options);
  Status Initialize();
  Status Migrate();
  ReadLease AcquireReader();
  // Checks, on the writer (its mutex held), that the job / window exists.
  Status RequireJob(const std::string& job_id);
  Status RequireWindow(const std::string& job_id, uint64_t window_id);
  // Deletes the job's oldest iteration points beyond the cap (writer's mutex held).
  Status PruneIterations(const std::string& job_id);

  std::string path_;
  SqliteStoreOptions options_;

  std::mutex write_mu_;
  std::unique_ptr<SqliteConnection> writer_;
  std::map<std::string, size_t> appended_since_prune_;  // guarded by write_mu_

  std::mutex pool_mu_;
  std::condition_variable pool_cv_;
  std::vector<std::unique_ptr<SqliteConnection>> idle_readers_;
};

}  // namespace perftracker
