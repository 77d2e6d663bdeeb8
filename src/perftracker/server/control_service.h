// ControlService: the server's side of the control plane (wire/control_server.h): a registry
// of jobs and of the collectors serving them, one WindowCoordinator per job, and the record
// of everything in the Store.
//
//   collector ──registration──► job (created on first sight: WindowCoordinator + store rows)
//   collector ──messages──────► session: checked, stored, handed to the job's coordinator
//   coordinator ──commands────► the job's fan-out ──► every connected collector's stream
//
// Jobs. A job is created by the first registration naming it; later collectors (other
// hosts, or the same one reconnecting) join it. Its coordinator sees the fan-out as its one
// CollectorControl, so collectors come and go without the coordinator knowing: a window
// opened while a collector is away simply misses its ranks (the report names them). A rank
// belongs to the session that registered it last; when that stream ends its ranks are
// reported as left (not cleanly), so a window does not wait for a host that is gone.
//
// Digests. A job of at least digest_min_workers workers is told at registration to send
// digests (ControlRegistered::send_digests); its coordinator asks for full summaries through
// the job's fan-out, which sends each collector the request for its own ranks, and every
// collector is told when a window is diagnosed (its kept summaries can go). Digests are not
// stored; the full summaries that come are, as before.
//
// Checks (each refusal is one line back to the collector; nothing is stored): a trigger,
// iteration, stacks or summary of a rank this collector did not register; a reason that is
// not slowdown / hang / manual; a summary for a window this server did not open or already
// diagnosed; summary bytes the codec rejects (summary_codec validates everything), or whose
// rank differs from the message's.
//
// Store. Jobs, workers, iteration batches and summaries are written as they arrive (on the
// gRPC thread that received them); windows when they open and when their report is in;
// diagnoses (the report's JSON and text) and the healthy baseline (the first window whose
// diagnosis has no material finding) by the service's own thread, which watches the
// coordinators' reports. Window ids continue the job's stored ids after a server restart,
// so a restarted server never overwrites an earlier window's report. A failed write is
// logged, at most kStoreLogBurst lines per kStoreLogPeriod (the rest counted in the next
// line), and the job goes on: its coordinator does not depend on the store.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "perftracker/core/status.h"
#include "perftracker/server/http/job_actions.h"
#include "perftracker/server/window_coordinator.h"
#include "perftracker/wire/control_server.h"

namespace perftracker {

class RateLimitedLog;
class Store;
struct WindowRecord;
class ServerMetrics;

struct ControlServiceOptions {
  // Template for every job's coordinator; its report_dir is the root: a job's reports go to
  // <report_dir>/<job id> (characters other than [A-Za-z0-9._-] become '_').
  CoordinatorOptions coordinator;
  Store* store = nullptr;            // optional, not owned
  ServerMetrics* metrics = nullptr;  // optional, not owned
  int report_poll_ms = 100;
  // Several servers share the store (PostgreSQL): a window found open at start may be
  // another live server's, so only one whose span and summary wait ended long ago
  // (kOrphanSlack) is closed then; a job's open windows are closed when its collectors
  // register here. Otherwise (SQLite: one server) every window found open at start is.
  bool store_shared = false;
  // Progressive disclosure (docs/server.md, "Fleet scale"): the collectors of a job of at
  // least this many workers (the world size they register) send a digest per worker and the
  // full summaries the screen asks for; 0: every job sends full summaries. Smaller jobs gain
  // nothing: the screen asks for most of their workers anyway.
  size_t digest_min_workers = 1024;
  std::function<void(std::string_view)> log;  // default: stderr, "perftracker: " prefix
};

struct JobStatus {
  std::string job_id;
  size_t collectors = 0;  // connected now
  size_t ranks = 0;       // registered and connected now
  uint64_t windows_opened = 0;
  size_t reports = 0;
};

class ControlService : public ControlHandler, public JobActions {
 public:
  explicit ControlService(ControlServiceOptions options);
  ~ControlService() override;
  ControlService(const ControlService&) = delete;
  ControlService& operator=(const ControlService&) = delete;

  // A window left open by a server that stopped can never complete (its coordinator, the
  // only one waiting for its summaries, is gone): it is closed as abandoned, with the reason,
  // when this much time has passed since its span and summary wait ended (shared stores).
  static constexpr int64_t kOrphanSlackNs = 60'000'000'000;

  // Closes the windows a stopped server left open (see store_shared), then starts the
  // thread that stores the coordinators' reports.
  Status Start();
  // Stores the reports written so far, stops every job's coordinator and the thread; a
  // window still open is stored as abandoned ("the server was shut down before ...").
  void Stop();

  // ControlHandler (gRPC threads).
  StatusOr<std::shared_ptr<ControlSession>> OnRegister(const ControlRegistration& registration,
                                                       std::shared_ptr<CommandSink> sink) override;

  // JobActions (HTTP threads): opens a window on every worker of `job_id` now (reason
  // manual), as a trigger would. NotFound when the job is unknown or has no connected
  // collector; InvalidArgument when the coordinator refuses (a window open, cooldown,
  // --max-windows).
  Status TriggerWindow(const std::string& job_id) override;

  std::vector<JobStatus> Jobs() const;
  // A job's reports so far (tests, `perftracker server` at exit).
  std::vector<WindowReport> Reports(const std::string& job_id) const;

 private:
  class Job;
  class Session;

  void Loop();
  void StoreReports();
  // Stores `window` as abandoned with `why` (and counts it); logs a store failure.
  void Abandon(const WindowRecord& window, const std::string& why);
  // The windows of `job_id` (every job when empty) the store holds open from an earlier
  // server, abandoned with `why`; `only_stale`: only those whose wait ended kOrphanSlackNs ago.
  void AbandonLeftOpen(const std::string& job_id, const std::string& why, bool only_stale);
  void Log(const std::string& line) const;
  // After window `window` of the job is stored: what changed since the job's baseline window
  // (none yet, or this one: nothing), written next to the window's report
  // (window-<id>-vs-<base>.json/.html) and logged in one line.
  void CompareWithBaseline(Store& store, const std::string& job_id, uint64_t window);
  // A failed store write: logged through store_log_, so a store that is down (PostgreSQL
  // restarting) costs a few lines per period, not one per collector message.
  void LogStoreError(const std::string& job_id, const Status& status) const;

  static constexpr int kStoreLogBurst = 5;
  static constexpr std::chrono::seconds kStoreLogPeriod{10};

  ControlServiceOptions options_;
  std::unique_ptr<RateLimitedLog> store_log_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<Job>> jobs_;
  uint64_t next_session_ = 1;
  bool started_ = false;
  bool stop_ = false;
  std::thread thread_;
};

// The directory name for a job id: [A-Za-z0-9._-] kept, anything else '_' ("." and ".."
// become "_" and "__").
std::string JobDirName(std::string_view job_id);

}  // namespace perftracker
