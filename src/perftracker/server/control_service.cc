#include "perftracker/server/control_service.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>
#include <utility>

#include <fmt/chrono.h>
#include <fmt/core.h>

#include "perftracker/core/realtime_clock.h"
#include "perftracker/report/compare_report.h"
#include "perftracker/server/http/rate_limited_log.h"
#include "perftracker/server/http/window_comparison.h"
#include "perftracker/server/metrics/server_metrics.h"
#include "perftracker/server/recording_receiver.h"
#include "perftracker/server/report_writer.h"
#include "perftracker/server/store/store.h"
#include "perftracker/server/store_recorder.h"
#include "perftracker/wire/digest_codec.h"
#include "perftracker/wire/summary_codec.h"

namespace perftracker {
namespace {

constexpr size_t kMaxTriggersKept = 64;
// A job row's last_seen_ns is rewritten at most this often by registrations.
constexpr int64_t kJobSeenWriteNs = 1'000'000'000;

// "2026-11-26 00:41:02 UTC"
std::string UtcNow() {
  return fmt::format("{:%Y-%m-%d %H:%M:%S} UTC", fmt::gmtime(std::time(nullptr)));
}

}  // namespace

std::string JobDirName(std::string_view job_id) {
  std::string out;
  for (char c : job_id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    out += ok ? c : '_';
  }
  if (out.empty() || out == "." || out == "..")
    out = std::string(std::max<size_t>(1, out.size()), '_');
  return out;
}

// A job: its coordinator, and the fan-out that is the coordinator's one CollectorControl.
class ControlService::Job : public CollectorControl {
 public:
  Job(ControlService* service, std::string id) : service_(service), id_(std::move(id)) {}
  // The coordinator's thread calls into this object: stop it before anything else goes.
  ~Job() override {
    if (coordinator_) coordinator_->Stop();
  }

  // CollectorControl: to every connected collector of the job.
  void StartWindow(const WindowSpec& window) override {
    WindowRecord record;
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_windows_[window.id] = window;
      record = Record(window, WindowState::kOpen);
    }
    if (Store* store = service_->options_.store) {
      const Status st = store->PutWindow(record);
      if (!st.ok()) service_->LogStoreError(id_, st);
    }
    if (ServerMetrics* m = service_->options_.metrics)
      m->RecordWindow(id_, WindowMetricState::kOpened);
    Broadcast(window);
  }
  void DumpStacks(uint64_t window) override { Broadcast(ControlDumpStacks{window}); }
  void EndWindowNow(uint64_t window) override { Broadcast(ControlEndWindow{window}); }
  // To each collector, the ranks it serves.
  void RequestSummaries(uint64_t window, const std::vector<int32_t>& ranks) override {
    std::map<uint64_t, ControlRequestSummaries> requests;
    std::map<uint64_t, std::shared_ptr<CommandSink>> sinks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int32_t rank : ranks) {
        auto owner = rank_owner_.find(rank);
        if (owner == rank_owner_.end()) continue;  // its collector is gone: named missing
        ControlRequestSummaries& r = requests[owner->second];
        r.window = window;
        r.ranks.push_back(rank);
      }
      for (const auto& [session, request] : requests) {
        auto it = sinks_.find(session);
        if (it != sinks_.end()) sinks[session] = it->second;
      }
    }
    for (auto& [session, sink] : sinks) {
      if (!sink->Send(std::move(requests[session]))) {
        service_->Log("job " + id_ + ": a request for summaries to the collector at " +
                      sink->peer() + " was dropped (its stream is gone or its queue is full)");
      }
    }
  }
  bool RequestRecordings(uint64_t window) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (sinks_.empty()) return false;
    }
    Broadcast(ControlSendRecordings{window});
    return true;
  }

  void Broadcast(const ServerMessage& message) {
    std::vector<std::shared_ptr<CommandSink>> sinks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, sink] : sinks_) sinks.push_back(sink);
    }
    for (const auto& sink : sinks) {
      if (!sink->Send(message)) {
        service_->Log("job " + id_ + ": a command to the collector at " + sink->peer() +
                      " was dropped (its stream is gone or its queue is full)");
      }
    }
  }

  // The job's row in the store, at each registration: read once per server process (then
  // kept here) and written only when it changes (a new job, a title, a larger world size) or
  // its last_seen_ns is kJobSeenWriteNs old. A fleet re-registering after a restart was one
  // read and one write of this same row per collector: ~14 % of the server's CPU per
  // registration (perf, docs/performance.md).
  void RecordRegistration(const ControlRegistration& registration) {
    Store* store = service_->options_.store;
    if (store == nullptr) return;
    std::lock_guard<std::mutex> lock(record_mu_);
    if (!record_) {
      StatusOr<JobRecord> existing = store->GetJob(id_);
      record_ = existing.ok() ? *existing : JobRecord{};
      record_->job_id = id_;
    }
    JobRecord next = *record_;
    if (!registration.title.empty()) next.title = registration.title;
    for (const WorkerInfo& r : registration.ranks)
      next.world_size = std::max(next.world_size, r.world_size);
    const int64_t now = RealtimeNs();
    if (next.created_ns == 0) next.created_ns = now;
    const bool changed = !record_stored_ || next.title != record_->title ||
                         next.world_size != record_->world_size ||
                         next.created_ns != record_->created_ns;
    if (!changed && now - record_->last_seen_ns < kJobSeenWriteNs) return;
    next.last_seen_ns = now;
    const Status st = store->UpsertJob(next);
    if (!st.ok()) {
      service_->LogStoreError(id_, st);  // written again at the next registration
      return;
    }
    record_ = std::move(next);
    record_stored_ = true;
  }

  WindowRecord Record(const WindowSpec& spec, WindowState state) const {
    return WindowRecordOf(id_, spec, triggers_, state);
  }

  ControlService* service_;
  const std::string id_;
  std::unique_ptr<WindowCoordinator> coordinator_;
  std::string recordings_dir_;  // where the collectors' recordings are received

  std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<CommandSink>> sinks_;  // session id -> its stream
  std::map<int32_t, uint64_t> rank_owner_;                  // rank -> session id
  std::map<uint64_t, WindowSpec> open_windows_;             // coordinator id -> spec
  std::set<uint64_t> diagnosed_;
  std::vector<std::string> triggers_;  // since the last report
  int exit_code_ = 0;                  // the first non-zero exit code a collector reported, else 0
  size_t reports_stored_ = 0;
  std::set<uint64_t> retracted_stored_;  // retracted reports whose rewrite is stored
  bool baseline_known_ = false;
  std::atomic<bool> digests_{false};  // its collectors were told to send digests

  std::mutex record_mu_;             // the job row's read-modify-write (store I/O inside)
  std::optional<JobRecord> record_;  // as last read or written
  bool record_stored_ = false;       // record_ is what this server wrote
};

// One collector's stream.
class ControlService::Session : public ControlSession {
 public:
  Session(ControlService* service, std::shared_ptr<Job> job, uint64_t id, std::string host,
          std::string peer)
      : service_(service),
        job_(std::move(job)),
        id_(id),
        host_(std::move(host)),
        peer_(std::move(peer)),
        recordings_(job_->recordings_dir_) {}

  void AddRank(const WorkerInfo& r) {
    ranks_.insert(r.rank);
    served_.insert(r.rank);
    {
      std::lock_guard<std::mutex> lock(job_->mu_);
      job_->rank_owner_[r.rank] = id_;
    }
    job_->coordinator_->OnWorkerJoined(r);
  }

  // The ranks' worker rows, in one store transaction (a registration brings all of a
  // collector's ranks: 50 rows were 50 transactions on SQLite's one writer).
  void StoreWorkers(const std::vector<WorkerInfo>& ranks) {
    Store* store = service_->options_.store;
    if (store == nullptr || ranks.empty()) return;
    const int64_t now = RealtimeNs();
    std::vector<WorkerRecord> workers;
    workers.reserve(ranks.size());
    for (const WorkerInfo& r : ranks) workers.push_back({job_->id_, r.rank, r.host, r.pid, now});
    const Status st = store->UpsertWorkers(workers);
    if (!st.ok()) service_->LogStoreError(job_->id_, st);
  }

  Status OnMessage(CollectorMessage message) override {
    if (auto* r = std::get_if<WorkerInfo>(&message)) {
      AddRank(*r);
      StoreWorkers({*r});
      return Status::Ok();
    }
    if (auto* l = std::get_if<ControlWorkerLeft>(&message)) {
      PERFTRACKER_RETURN_IF_ERROR(Known(l->rank, "worker_left"));
      ranks_.erase(l->rank);
      {
        std::lock_guard<std::mutex> lock(job_->mu_);
        auto it = job_->rank_owner_.find(l->rank);
        if (it != job_->rank_owner_.end() && it->second == id_) job_->rank_owner_.erase(it);
      }
      job_->coordinator_->OnWorkerLeft(l->rank, l->clean);
      return Status::Ok();
    }
    if (auto* e = std::get_if<ControlTrainingEnded>(&message)) {
      PERFTRACKER_RETURN_IF_ERROR(Known(e->rank, "training_ended"));
      job_->coordinator_->OnTrainingEnded(e->rank, e->detail);
      return Status::Ok();
    }
    if (auto* e = std::get_if<ControlJobExited>(&message)) {
      // One host's command ended. The job exited 0 only when every host that said so did:
      // a non-zero exit anywhere (a user's Ctrl-C of a hung job) keeps its hang report.
      int code = e->exit_code;
      {
        std::lock_guard<std::mutex> lock(job_->mu_);
        if (job_->exit_code_ != 0) code = job_->exit_code_;
        job_->exit_code_ = code;
      }
      job_->coordinator_->JobExited(code);
      service_->Log(fmt::format("job {}: the command on {} ({}) exited with code {}", job_->id_,
                                host_, peer_, e->exit_code));
      return Status::Ok();
    }
    if (auto* its = std::get_if<ControlIterations>(&message)) {
      std::vector<IterationPoint> points;
      points.reserve(its->points.size());
      for (const ControlIteration& p : its->points) {
        PERFTRACKER_RETURN_IF_ERROR(Known(p.rank, "iteration"));
      }
      for (const ControlIteration& p : its->points) {
        job_->coordinator_->OnIteration(p.rank, p.end_ns, p.duration_ns);
        if (ServerMetrics* m = service_->options_.metrics)
          m->RecordIteration(job_->id_, p.rank, p.duration_ns);
        points.push_back({p.rank, p.end_ns, p.duration_ns});
      }
      if (Store* store = service_->options_.store; store != nullptr && !points.empty()) {
        const Status st = store->AppendIterations(job_->id_, points);
        if (!st.ok()) service_->LogStoreError(job_->id_, st);
      }
      return Status::Ok();
    }
    if (auto* t = std::get_if<ControlTrigger>(&message)) {
      PERFTRACKER_RETURN_IF_ERROR(Known(t->rank, "trigger"));
      const std::string_view reason = WindowReasonName(t->reason);
      {
        std::lock_guard<std::mutex> lock(job_->mu_);
        if (job_->triggers_.size() < kMaxTriggersKept) {
          job_->triggers_.push_back(fmt::format("rank {}: {}{}{}", t->rank, reason,
                                                t->detail.empty() ? "" : " — ", t->detail));
        }
      }
      if (ServerMetrics* m = service_->options_.metrics)
        m->RecordTrigger(job_->id_, std::string(reason));
      job_->coordinator_->OnTrigger(t->rank, t->reason, t->detail);
      return Status::Ok();
    }
    if (auto* s = std::get_if<ControlStacks>(&message)) {
      PERFTRACKER_RETURN_IF_ERROR(Known(s->rank, "stacks"));
      PERFTRACKER_RETURN_IF_ERROR(OpenWindow(s->window, s->rank, "stacks"));
      job_->coordinator_->OnStacks(s->window, s->rank, s->available, s->text);
      return Status::Ok();
    }
    if (auto* d = std::get_if<ControlDigest>(&message)) {
      PERFTRACKER_RETURN_IF_ERROR(Known(d->rank, "digest"));
      PERFTRACKER_RETURN_IF_ERROR(OpenWindow(d->window, d->rank, "digest"));
      UnknownValues unknown;
      StatusOr<WorkerDigest> decoded = DecodeWorkerDigest(d->worker_digest, &unknown);
      if (!decoded.ok()) {
        return Status::InvalidArgument(fmt::format("digest of rank {} for window {}: {}", d->rank,
                                                   d->window, decoded.status().message()));
      }
      if (decoded->rank != d->rank) {
        return Status::InvalidArgument(
            fmt::format("digest of rank {} for window {}: the digest inside is rank {}'s", d->rank,
                        d->window, decoded->rank));
      }
      if (unknown.total() > 0) job_->coordinator_->OnUnknownValues(d->window, d->rank, unknown);
      job_->coordinator_->OnDigest(d->window, *decoded);
      return Status::Ok();
    }
    if (auto* s = std::get_if<ControlSummary>(&message)) {
      PERFTRACKER_RETURN_IF_ERROR(Known(s->rank, "summary"));
      PERFTRACKER_RETURN_IF_ERROR(OpenWindow(s->window, s->rank, "summary"));
      UnknownValues unknown;
      StatusOr<WorkerSummary> decoded = DecodeWorkerSummary(s->worker_summary, &unknown);
      if (!decoded.ok()) {
        return Status::InvalidArgument(fmt::format("summary of rank {} for window {}: {}", s->rank,
                                                   s->window, decoded.status().message()));
      }
      if (decoded->rank != s->rank) {
        return Status::InvalidArgument(
            fmt::format("summary of rank {} for window {}: the summary inside is rank {}'s",
                        s->rank, s->window, decoded->rank));
      }
      if (Store* store = service_->options_.store) {
        const Status st = store->PutSummaryBytes(job_->id_, s->window, s->rank, s->worker_summary);
        if (!st.ok()) service_->LogStoreError(job_->id_, st);
      }
      if (ServerMetrics* m = service_->options_.metrics) {
        if (decoded->stats.dropped_events > 0) {
          m->AddDroppedEvents(job_->id_, s->rank, decoded->stats.dropped_events);
        }
      }
      // Before the summary: the window may be finalized as soon as the last one is in.
      if (unknown.total() > 0) job_->coordinator_->OnUnknownValues(s->window, s->rank, unknown);
      job_->coordinator_->OnSummary(s->window, std::move(decoded).value());
      return Status::Ok();
    }
    if (auto* n = std::get_if<ControlSummariesNotKept>(&message)) {
      for (int32_t rank : n->ranks) {
        PERFTRACKER_RETURN_IF_ERROR(Known(rank, "summaries_not_kept"));
      }
      job_->coordinator_->OnSummariesNotKept(n->window, n->ranks, n->reason);
      return Status::Ok();
    }
    if (auto* r = std::get_if<ControlWindowRecording>(&message)) return OnRecording(*r);
    // Heartbeats only prove the stream is alive.
    return Status::Ok();
  }

  void OnClosed() override {
    std::vector<int32_t> gone;
    {
      std::lock_guard<std::mutex> lock(job_->mu_);
      job_->sinks_.erase(id_);
      for (auto it = job_->rank_owner_.begin(); it != job_->rank_owner_.end();) {
        if (it->second == id_) {
          gone.push_back(it->first);
          it = job_->rank_owner_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (int32_t rank : gone) job_->coordinator_->OnWorkerLeft(rank, false);
    if (ServerMetrics* m = service_->options_.metrics) m->CollectorDisconnected();
    service_->Log(
        fmt::format("job {}: collector {} ({}) disconnected{}", job_->id_, host_, peer_,
                    gone.empty() ? "" : fmt::format(", {} ranks gone with it", gone.size())));
  }

 private:
  Status Known(int32_t rank, const char* what) const {
    if (ranks_.count(rank)) return Status::Ok();
    return Status::InvalidArgument(fmt::format(
        "{} of rank {}, which this collector did not register (send worker_joined first)", what,
        rank));
  }

  // A chunk of a rank's window recording, asked for after the window's diagnosis. The rank
  // may have left since (its job ended): one this collector ever served is accepted.
  Status OnRecording(const ControlWindowRecording& r) {
    if (!served_.count(r.rank)) return Known(r.rank, "window_recording");
    if (!job_->coordinator_->FetchingRecordings(r.window)) {
      return Status::InvalidArgument(fmt::format(
          "recording of rank {} for window {}: not asked for (or asked for too long ago)", r.rank,
          r.window));
    }
    if (!r.missing.empty()) {
      job_->coordinator_->OnRecordingMissing(r.window, r.rank, r.missing);
      return Status::Ok();
    }
    std::string path;
    PERFTRACKER_RETURN_IF_ERROR(recordings_.Add(r, &path));
    if (!path.empty()) job_->coordinator_->OnWindowRecording(r.window, r.rank, path);
    return Status::Ok();
  }

  Status OpenWindow(uint64_t window, int32_t rank, const char* what) const {
    std::lock_guard<std::mutex> lock(job_->mu_);
    if (job_->open_windows_.count(window)) return Status::Ok();
    if (job_->diagnosed_.count(window)) {
      return Status::InvalidArgument(
          fmt::format("{} of rank {} for window {}: that window is diagnosed already (too late)",
                      what, rank, window));
    }
    return Status::InvalidArgument(
        fmt::format("{} of rank {} for window {}: this server opened no such window for job {}",
                    what, rank, window, job_->id_));
  }

  ControlService* service_;
  std::shared_ptr<Job> job_;
  const uint64_t id_;
  const std::string host_;
  const std::string peer_;
  std::set<int32_t> ranks_;   // touched by this stream's reads only (one at a time)
  std::set<int32_t> served_;  // every rank this stream registered, left or not
  RecordingReceiver recordings_;
};

ControlService::ControlService(ControlServiceOptions options)
    : options_(std::move(options)),
      store_log_(std::make_unique<RateLimitedLog>([this](const std::string& line) { Log(line); },
                                                  kStoreLogBurst, kStoreLogPeriod)) {}

ControlService::~ControlService() { Stop(); }

void ControlService::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "perftracker: %s\n", line.c_str());
  }
}

void ControlService::Abandon(const WindowRecord& open, const std::string& why) {
  WindowRecord window = open;
  window.state = WindowState::kAbandoned;
  window.state_reason = why;
  if (Store* store = options_.store) {
    const Status st = store->PutWindow(window);
    if (!st.ok()) {
      LogStoreError(window.job_id, st);
      return;
    }
  }
  if (options_.metrics)
    options_.metrics->RecordWindow(window.job_id, WindowMetricState::kAbandoned);
  Log(fmt::format("job {}: window {} abandoned: {}", window.job_id, window.window_id, why));
}

void ControlService::AbandonLeftOpen(const std::string& job_id, const std::string& why,
                                     bool only_stale) {
  Store* store = options_.store;
  if (store == nullptr) return;
  std::vector<std::string> jobs;
  if (!job_id.empty()) {
    jobs.push_back(job_id);
  } else {
    StatusOr<std::vector<JobRecord>> all = store->ListJobs();
    if (!all.ok()) {
      Log("store: " + all.status().message());
      return;
    }
    for (const JobRecord& j : *all) jobs.push_back(j.job_id);
  }
  const int64_t now = RealtimeNs();
  const int64_t wait = options_.coordinator.wait_summaries_ns;
  for (const std::string& job : jobs) {
    StatusOr<std::vector<WindowRecord>> windows = store->ListWindows(job);
    if (!windows.ok()) {
      LogStoreError(job, windows.status());
      continue;
    }
    for (const WindowRecord& w : *windows) {
      if (w.state != WindowState::kOpen) continue;
      if (only_stale && w.start_ns + w.duration_ns + wait + kOrphanSlackNs > now) continue;
      Abandon(w, why);
    }
  }
}

void ControlService::LogStoreError(const std::string& job_id, const Status& status) const {
  store_log_->Log("job " + job_id + ": store: " + status.message());
}

Status ControlService::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (started_) return Status::Internal("control service already started");
  }
  AbandonLeftOpen("",
                  "the server stopped before the window completed (killed or crashed: its "
                  "summaries were lost); found open when a server started at " +
                      UtcNow(),
                  options_.store_shared);
  std::lock_guard<std::mutex> lock(mu_);
  if (started_) return Status::Internal("control service already started");
  started_ = true;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void ControlService::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::map<std::string, std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs = jobs_;
  }
  for (auto& [id, job] : jobs) job->coordinator_->Stop();
  StoreReports();
  for (auto& [id, job] : jobs) {
    std::vector<WindowRecord> left;
    {
      std::lock_guard<std::mutex> lock(job->mu_);
      for (const auto& [window_id, spec] : job->open_windows_) {
        if (!job->diagnosed_.count(window_id))
          left.push_back(job->Record(spec, WindowState::kOpen));
      }
      job->open_windows_.clear();
    }
    for (const WindowRecord& w : left) {
      Abandon(w, "the server was shut down before the window completed");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  started_ = false;
}

void ControlService::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(options_.report_poll_ms));
    if (stop_) break;
    lock.unlock();
    StoreReports();
    lock.lock();
  }
}

void ControlService::StoreReports() {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, job] : jobs_) jobs.push_back(job);
  }
  for (const auto& job : jobs) {
    if (job->coordinator_->windows_opened() == 0) continue;
    const std::vector<WindowReport> reports = job->coordinator_->reports();
    for (size_t i = job->reports_stored_; i < reports.size(); ++i) {
      const WindowReport& r = reports[i];
      WindowRecord record;
      {
        std::lock_guard<std::mutex> lock(job->mu_);
        auto it = job->open_windows_.find(r.id);
        WindowSpec spec;
        if (it != job->open_windows_.end()) {
          spec = it->second;
          job->open_windows_.erase(it);
        } else {
          spec.id = r.id;
          spec.reason = r.reason;
        }
        spec.reason = r.reason;
        job->diagnosed_.insert(r.id);
        record = job->Record(spec, WindowState::kDiagnosed);
        job->triggers_.clear();
      }
      if (options_.metrics) {
        for (const Finding& f : r.diagnosis.findings) {
          if (f.material) options_.metrics->RecordFinding(job->id_, f.code);
        }
        options_.metrics->RecordWindow(job->id_, WindowMetricState::kDiagnosed);
      }
      if (Store* store = options_.store) {
        const DiagnosisRecord d = DiagnosisRecordOf(job->id_, record.window_id, r);
        Status st = store->PutWindow(record);
        if (st.ok() && !d.json.empty()) st = store->PutDiagnosis(d);
        if (st.ok() && d.top_code.empty() && !job->baseline_known_) {
          StatusOr<std::optional<uint64_t>> baseline = store->GetBaseline(job->id_);
          if (baseline.ok() && !baseline->has_value())
            st = store->SetBaseline(job->id_, record.window_id);
          job->baseline_known_ = true;
        }
        if (!st.ok()) LogStoreError(job->id_, st);
        if (st.ok()) CompareWithBaseline(*store, job->id_, record.window_id);
      }
      job->reports_stored_ = i + 1;
      if (r.retracted) job->retracted_stored_.insert(r.id);
      if (job->digests_) job->Broadcast(ControlWindowDiagnosed{r.id});
    }
    // A hang report retracted after it was stored (the job resumed, or ended and exited 0):
    // the store gets the rewritten diagnosis, the hang a note in it.
    for (size_t i = 0; i < job->reports_stored_ && i < reports.size(); ++i) {
      const WindowReport& r = reports[i];
      if (!r.retracted || job->retracted_stored_.count(r.id)) continue;
      job->retracted_stored_.insert(r.id);
      if (Store* store = options_.store) {
        const Status st = store->PutDiagnosis(DiagnosisRecordOf(job->id_, r.id, r));
        if (!st.ok()) LogStoreError(job->id_, st);
      }
    }
  }
}

void ControlService::CompareWithBaseline(Store& store, const std::string& job_id, uint64_t window) {
  StatusOr<std::optional<uint64_t>> baseline = store.GetBaseline(job_id);
  if (!baseline.ok() || !baseline->has_value() || **baseline == window) return;
  StatusOr<compare::Comparison> c = CompareStoredWindows(&store, job_id, **baseline, window);
  if (!c.ok()) {
    Log(fmt::format("job {}: window {} not compared with baseline window {}: {}", job_id, window,
                    **baseline, c.status().message()));
    return;
  }
  std::string where;
  if (!options_.coordinator.report_dir.empty()) {
    StatusOr<std::string> path = WriteComparisonReport(
        (std::filesystem::path(options_.coordinator.report_dir) / JobDirName(job_id)).string(),
        window, **baseline, *c);
    where = path.ok() ? " (" + *path + ")" : " (not written: " + path.status().message() + ")";
  }
  Log(fmt::format("job {}: window {} vs baseline window {}: {}{}", job_id, window, **baseline,
                  ComparisonVerdict(*c), where));
}

StatusOr<std::shared_ptr<ControlSession>> ControlService::OnRegister(
    const ControlRegistration& registration, std::shared_ptr<CommandSink> sink) {
  std::shared_ptr<Job> job;
  uint64_t session_id = 0;
  bool created = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_ || stop_) return Status::Internal("the server is shutting down");
    session_id = next_session_++;
    auto it = jobs_.find(registration.job_id);
    if (it != jobs_.end()) {
      job = it->second;
    } else {
      uint64_t base = 0;
      // A window of this job still open in the store was opened by a server that is gone
      // (this one has no coordinator for the job yet): nothing will complete it.
      if (options_.store != nullptr) {
        AbandonLeftOpen(registration.job_id,
                        "the server that opened it stopped before the window completed; found "
                        "open when the job's collectors registered again at " +
                            UtcNow(),
                        /*only_stale=*/false);
      }
      if (Store* store = options_.store) {
        StatusOr<std::vector<WindowRecord>> windows = store->ListWindows(registration.job_id);
        if (windows.ok()) {
          for (const auto& w : *windows) base = std::max(base, w.window_id);
        }
      }
      job = std::make_shared<Job>(this, registration.job_id);
      CoordinatorOptions co = options_.coordinator;
      co.report_dir =
          (std::filesystem::path(options_.coordinator.report_dir) / JobDirName(registration.job_id))
              .string();
      job->recordings_dir_ = (std::filesystem::path(co.report_dir) / "recordings").string();
      if (co.title.empty()) co.title = registration.title;
      co.first_window_id = base + 1;
      const std::string prefix = "job " + registration.job_id + ": ";
      co.log = [this, prefix](std::string_view line) { Log(prefix + std::string(line)); };
      job->coordinator_ = std::make_unique<WindowCoordinator>(co);
      job->coordinator_->AddCollector(job.get());
      const Status st = job->coordinator_->Start();
      if (!st.ok()) return Status::Internal("job " + registration.job_id + ": " + st.message());
      jobs_[registration.job_id] = job;
      created = true;
    }
  }
  job->RecordRegistration(registration);
  const std::string peer = sink->peer();
  auto session = std::make_shared<Session>(this, job, session_id, registration.host, peer);
  // A collector that (re)connects while a window is open joins it for the rest of its span:
  // after a server restart the collectors come back one by one. The windows open when its
  // sink is added were broadcast without it; later ones reach it through Broadcast.
  std::vector<WindowSpec> joining;
  {
    std::lock_guard<std::mutex> lock(job->mu_);
    job->sinks_[session_id] = sink;
    const int64_t now = RealtimeNs();
    for (const auto& [id, spec] : job->open_windows_) {
      if (spec.end_ns() > now) joining.push_back(spec);
    }
  }
  for (const WorkerInfo& r : registration.ranks) session->AddRank(r);
  session->StoreWorkers(registration.ranks);
  // Last: once the collector reads this answer, the job counts it and its ranks in.
  int32_t world_size = 0;
  for (const WorkerInfo& r : registration.ranks) world_size = std::max(world_size, r.world_size);
  const bool digests = options_.digest_min_workers > 0 &&
                       static_cast<size_t>(world_size) >= options_.digest_min_workers;
  if (digests) {
    std::lock_guard<std::mutex> lock(job->mu_);
    job->digests_ = true;
  }
  sink->Send(ControlRegistered{fmt::format("{}#{}", registration.host, session_id), RealtimeNs(),
                               digests, /*takes_summaries_not_kept=*/true});
  for (const WindowSpec& w : joining) sink->Send(w);
  if (options_.metrics) options_.metrics->CollectorConnected();
  Log(fmt::format("job {}: collector {} ({}) registered with {} rank{}{}", registration.job_id,
                  registration.host, peer, registration.ranks.size(),
                  registration.ranks.size() == 1 ? "" : "s", created ? " (new job)" : ""));
  return std::shared_ptr<ControlSession>(std::move(session));
}

Status ControlService::TriggerWindow(const std::string& job_id) {
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) job = it->second;
  }
  if (job == nullptr) return Status::NotFound("job " + job_id + " is not known to this server");
  {
    std::lock_guard<std::mutex> lock(job->mu_);
    if (job->sinks_.empty()) {
      return Status::NotFound("job " + job_id + " has no connected collector");
    }
  }
  const uint64_t before = job->coordinator_->windows_opened();
  job->coordinator_->OnTrigger(-1, WindowReason::kManual, "requested through the server's API");
  if (job->coordinator_->windows_opened() == before) {
    return Status::InvalidArgument("job " + job_id +
                                   ": no window opened (one is open already, or the cooldown or "
                                   "the window limit refused it; see the server's log)");
  }
  return Status::Ok();
}

std::vector<JobStatus> ControlService::Jobs() const {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, job] : jobs_) jobs.push_back(job);
  }
  std::vector<JobStatus> out;
  for (const auto& job : jobs) {
    JobStatus s;
    s.job_id = job->id_;
    {
      std::lock_guard<std::mutex> lock(job->mu_);
      s.collectors = job->sinks_.size();
      s.ranks = job->rank_owner_.size();
    }
    s.windows_opened = job->coordinator_->windows_opened();
    s.reports = job->coordinator_->reports().size();
    out.push_back(s);
  }
  return out;
}

std::vector<WindowReport> ControlService::Reports(const std::string& job_id) const {
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return {};
    job = it->second;
  }
  return job->coordinator_->reports();
}

}  // namespace perftracker
