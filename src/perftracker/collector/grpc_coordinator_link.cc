#include "perftracker/collector/grpc_coordinator_link.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>

#include <fmt/core.h>

#include "perftracker/core/realtime_clock.h"
#include "perftracker/summary/worker_digest.h"
#include "perftracker/wire/digest_codec.h"
#include "perftracker/wire/reconnect_backoff.h"
#include "perftracker/wire/summary_codec.h"

namespace perftracker {
namespace {

constexpr size_t kMaxRejectedLogged = 10;

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

}  // namespace

ControlHardware LocalHardware() {
  ControlHardware hw;
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  hw.cpus = cpus > 0 ? static_cast<uint32_t>(cpus) : 0;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0)
    hw.memory_bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) hw.description = line.substr(colon + 2);
      break;
    }
  }
  return hw;
}

GrpcCoordinatorLink::GrpcCoordinatorLink(GrpcLinkOptions options) : options_(std::move(options)) {
  if (options_.host.empty()) options_.host = HostName();
  if (options_.hardware.cpus == 0) options_.hardware = LocalHardware();
}

GrpcCoordinatorLink::~GrpcCoordinatorLink() { Stop(0); }

void GrpcCoordinatorLink::Log(const std::string& line) {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "perftracker: %s\n", line.c_str());
  }
}

Status GrpcCoordinatorLink::Start() {
  StatusOr<std::unique_ptr<ControlClient>> client = ControlClient::Create(options_.client);
  if (!client.ok()) return client.status();
  client_ = std::move(client).value();
  std::lock_guard<std::mutex> lock(mu_);
  if (started_) return Status::Internal("link already started");
  started_ = true;
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

Status GrpcCoordinatorLink::WaitFirstAttempt(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                    [&] { return first_attempt_done_; })) {
    return Status::InvalidArgument("no answer from the server at " + options_.client.address +
                                   " within " + std::to_string(timeout_ms) + " ms");
  }
  return first_attempt_;
}

void GrpcCoordinatorLink::Stop(int flush_timeout_ms) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_ || stop_) return;
    stop_ = true;
    flush_deadline_ns_ = SteadyNs() + int64_t{flush_timeout_ms} * 1'000'000;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

GrpcLinkStats GrpcCoordinatorLink::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

// ---------------------------------------------------------------------------------------
// CoordinatorLink: queue and return.

void GrpcCoordinatorLink::Push(CollectorMessage message, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= options_.max_queued_messages ||
        queued_bytes_ + bytes > options_.max_queued_bytes) {
      ++stats_.dropped_messages;
      return;
    }
    queue_.emplace_back(std::move(message), bytes);
    queued_bytes_ += bytes;
  }
  cv_.notify_all();
}

void GrpcCoordinatorLink::OnWorkerJoined(const WorkerInfo& worker) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ranks_[worker.rank] = worker;
  }
  Push(worker, sizeof(WorkerInfo));
}

void GrpcCoordinatorLink::OnWorkerLeft(int32_t rank, bool clean) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ranks_.erase(rank);
  }
  Push(ControlWorkerLeft{rank, clean}, sizeof(ControlWorkerLeft));
}

void GrpcCoordinatorLink::OnTrainingEnded(int32_t rank, const std::string& detail) {
  Push(ControlTrainingEnded{rank, detail}, detail.size() + 64);
}

void GrpcCoordinatorLink::JobExited(int exit_code) {
  Push(ControlJobExited{exit_code}, sizeof(ControlJobExited));
}

void GrpcCoordinatorLink::OnIteration(int32_t rank, int64_t end_ns, int64_t duration_ns) {
  bool full = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (iterations_.size() >= kMaxIterationsPerBatch) {
      ++stats_.dropped_messages;
      return;
    }
    iterations_.push_back({rank, end_ns, duration_ns});
    full = iterations_.size() >= options_.iteration_batch;
  }
  if (full) cv_.notify_all();
}

void GrpcCoordinatorLink::OnTrigger(int32_t rank, WindowReason reason, const std::string& detail) {
  Push(ControlTrigger{rank, reason, detail}, detail.size() + 64);
}

void GrpcCoordinatorLink::OnStacks(uint64_t window, int32_t rank, bool available,
                                   const std::string& text) {
  Push(ControlStacks{window, rank, available, text}, text.size() + 64);
}

void GrpcCoordinatorLink::OnSummary(uint64_t window, WorkerSummary summary) {
  // Encoding costs about as much as copying: done here, on the drain thread that
  // summarized, so the link thread only writes bytes.
  std::string bytes = EncodeWorkerSummary(summary);
  const size_t size = bytes.size();
  bool digests = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    digests = send_digests_;
  }
  std::string digest;
  if (digests) digest = EncodeWorkerDigest(MakeWorkerDigest(summary));
  if (!digests || digest.size() > kMaxControlDigestBytes) {
    Push(ControlSummary{window, summary.rank, std::move(bytes)}, size + 64);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = SteadyNs();
    ExpireKeptLocked(now);
    // Room for it: the oldest other windows go first.
    while (kept_bytes_ + size > options_.max_kept_bytes && !kept_.empty() &&
           kept_.begin()->first != window) {
      ForgetKeptLocked(kept_.begin()->first,
                       fmt::format("{} dropped it to make room for a newer window's "
                                   "(--keep-summaries-mb: at most {:g} MB)",
                                   options_.host, KeepLimitMb()));
    }
    if (kept_bytes_ + size > options_.max_kept_bytes) {
      ++stats_.summaries_unkept;
      NoteGoneLocked(window, fmt::format("it did not fit in {}'s --keep-summaries-mb (at most "
                                         "{:g} MB kept)",
                                         options_.host, KeepLimitMb()));
    } else {
      KeptWindow& k = kept_[window];
      if (k.since_ns == 0) k.since_ns = now;
      auto it = k.summaries.find(summary.rank);
      if (it != k.summaries.end()) kept_bytes_ -= it->second.size();
      k.summaries[summary.rank] = std::move(bytes);
      kept_bytes_ += size;
    }
    ++stats_.digests_sent;
  }
  const size_t digest_size = digest.size();
  Push(ControlDigest{window, summary.rank, std::move(digest)}, digest_size + 64);
}

void GrpcCoordinatorLink::ExpireKeptLocked(int64_t now_ns) {
  const int64_t keep_ns = int64_t{options_.keep_summaries_ms} * 1'000'000;
  for (auto it = kept_.begin(); it != kept_.end();) {
    if (now_ns - it->second.since_ns <= keep_ns) {
      ++it;
      continue;
    }
    const uint64_t window = it->first;
    ++it;
    ForgetKeptLocked(window, fmt::format("{} dropped it after --keep-summaries-seconds ({:g})",
                                         options_.host, options_.keep_summaries_ms / 1000.0));
  }
}

double GrpcCoordinatorLink::KeepLimitMb() const {
  return static_cast<double>(options_.max_kept_bytes) / static_cast<double>(1u << 20);
}

void GrpcCoordinatorLink::ForgetKeptLocked(uint64_t window, std::string why) {
  auto k = kept_.find(window);
  if (k != kept_.end()) {
    for (const auto& [rank, b] : k->second.summaries) kept_bytes_ -= b.size();
    kept_.erase(k);
  }
  NoteGoneLocked(window, std::move(why));
}

void GrpcCoordinatorLink::NoteGoneLocked(uint64_t window, std::string why) {
  gone_why_[window] = std::move(why);
  while (gone_why_.size() > kGoneWindowsRemembered) gone_why_.erase(gone_why_.begin());
}

void GrpcCoordinatorLink::SendKept(uint64_t window, const std::vector<int32_t>& ranks) {
  std::vector<std::pair<int32_t, std::string>> out;
  ControlSummariesNotKept not_kept{window, {}, ""};
  bool answer = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ExpireKeptLocked(SteadyNs());  // kept at most keep_summaries_ms, asked for or not
    auto k = kept_.find(window);
    for (int32_t rank : ranks) {
      if (k == kept_.end()) {
        not_kept.ranks.push_back(rank);
        continue;
      }
      auto it = k->second.summaries.find(rank);
      if (it == k->second.summaries.end()) {
        not_kept.ranks.push_back(rank);
        continue;
      }
      kept_bytes_ -= it->second.size();
      out.emplace_back(rank, std::move(it->second));
      k->second.summaries.erase(it);
    }
    stats_.summaries_asked += out.size();
    stats_.summaries_unkept += not_kept.ranks.size();
    answer = takes_not_kept_;
    auto why = gone_why_.find(window);
    not_kept.reason =
        why != gone_why_.end()
            ? why->second
            : fmt::format("{} does not have it (sent already, or never summarized)", options_.host);
  }
  if (!not_kept.ranks.empty()) {
    Log(
        fmt::format("the server asked for {} full summaries of window {} that this collector does "
                    "not keep (gone after max_kept_bytes or keep_summaries_ms): {}",
                    not_kept.ranks.size(), window, not_kept.reason));
  }
  for (auto& [rank, bytes] : out) {
    const size_t size = bytes.size();
    Push(ControlSummary{window, rank, std::move(bytes)}, size + 64);
  }
  // Said once its summaries are queued: the server stops waiting for these ranks at once.
  if (answer && !not_kept.ranks.empty()) {
    const size_t size = not_kept.ranks.size() * sizeof(int32_t) + not_kept.reason.size() + 64;
    Push(std::move(not_kept), size);
  }
}

void GrpcCoordinatorLink::OnWindowRecording(uint64_t window, int32_t rank,
                                            const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  recordings_[window][rank] = path;
  while (recordings_.size() > kKeptRecordingWindows) recordings_.erase(recordings_.begin());
}

void GrpcCoordinatorLink::SendRecordings(uint64_t window) {
  std::map<int32_t, std::string> files;
  std::set<int32_t> serving;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = recordings_.find(window);
    if (it != recordings_.end()) {
      files = std::move(it->second);
      recordings_.erase(it);
    }
    for (const auto& [rank, info] : ranks_) serving.insert(rank);
  }
  const auto missing = [&](int32_t rank, std::string why) {
    ControlWindowRecording m;
    m.window = window;
    m.rank = rank;
    m.last = true;
    m.missing = std::move(why);
    Push(std::move(m), 128);
  };
  for (const auto& [rank, path] : files) {
    serving.erase(rank);
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(path, ec);
    std::ifstream in(path, std::ios::binary);
    if (ec || !in) {
      missing(rank, fmt::format("{}: cannot read {}: {}", options_.host, path,
                                ec ? ec.message() : std::strerror(errno)));
      continue;
    }
    uint64_t offset = 0;
    do {
      ControlWindowRecording m;
      m.window = window;
      m.rank = rank;
      m.offset = offset;
      m.data.resize(
          static_cast<size_t>(std::min<uintmax_t>(size - offset, kMaxRecordingChunkBytes)));
      in.read(m.data.data(), static_cast<std::streamsize>(m.data.size()));
      if (!in) {
        missing(rank, fmt::format("{}: {} ended early", options_.host, path));
        break;
      }
      offset += m.data.size();
      m.last = offset >= size;
      const size_t bytes = m.data.size() + 64;
      Push(std::move(m), bytes);
    } while (offset < size);
    in.close();
    std::filesystem::remove(path, ec);
  }
  for (int32_t rank : serving) {
    missing(rank,
            fmt::format("its collector on {} recorded none: --perfetto-events-per-rank 0, or no "
                        "event of the window",
                        options_.host));
  }
}

// ---------------------------------------------------------------------------------------
// The link thread.

ControlRegistration GrpcCoordinatorLink::RegistrationNow() {
  ControlRegistration r;
  r.job_id = options_.job_id;
  r.host = options_.host;
  r.title = options_.title;
  r.hardware = options_.hardware;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [rank, info] : ranks_) r.ranks.push_back(info);
  return r;
}

void GrpcCoordinatorLink::Loop() {
  ReconnectBackoff backoff(options_.backoff_initial_ms, options_.backoff_max_ms,
                           options_.backoff_seed);
  bool failing = false;
  std::string last_error;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
    }
    StatusOr<std::unique_ptr<ControlStream>> stream =
        client_->Connect(RegistrationNow(), options_.connect_timeout_ms);
    if (!stream.ok()) {
      if (!failing || stream.status().message() != last_error) {
        // The first attempt's error is printed by the caller (WaitFirstAttempt).
        bool first = false;
        {
          std::lock_guard<std::mutex> lock(mu_);
          first = !first_attempt_done_;
        }
        if (!first) Log(stream.status().message() + "; retrying in the background");
        last_error = stream.status().message();
      }
      failing = true;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (!first_attempt_done_) {
          first_attempt_done_ = true;
          first_attempt_ = stream.status();
        }
        cv_.notify_all();
        cv_.wait_for(lock, std::chrono::milliseconds(backoff.NextDelayMs()), [&] { return stop_; });
        if (stop_) break;
      }
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.connections;
      stats_.connected = true;
      send_digests_ = (*stream)->registered().send_digests;
      takes_not_kept_ = (*stream)->registered().takes_summaries_not_kept;
      stream_broken_ = false;
      if (!first_attempt_done_) {
        first_attempt_done_ = true;
        first_attempt_ = Status::Ok();
      }
      if (failing || stats_.connections > 1) {
        Log("connected to the server at " + options_.client.address + " (registered again, " +
            std::to_string(ranks_.size()) + " ranks)");
      }
    }
    cv_.notify_all();
    failing = false;
    last_error.clear();
    backoff.Reset();

    ControlStream* s = stream->get();
    std::thread reader([this, s] { ReadLoop(s); });
    const bool stopping = Serve(s);
    if (stopping) {
      // Goodbye: the server ends the stream once it read everything we wrote.
      s->WritesDone();
      std::unique_lock<std::mutex> lock(mu_);
      const int64_t left_ns = std::max<int64_t>(flush_deadline_ns_ - SteadyNs(), 200'000'000);
      cv_.wait_for(lock, std::chrono::nanoseconds(left_ns), [&] { return stream_broken_; });
    }
    s->Cancel();
    reader.join();
    const Status end = s->Finish();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.connected = false;
    }
    if (stopping) break;
    Log("lost the server at " + options_.client.address + (end.ok() ? "" : ": " + end.message()) +
        "; reconnecting");
    failing = true;
    // Every collector of the server lost it at this moment: the first attempt is jittered
    // too, or they would all reach a restarted (or still running) server at once.
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(backoff.NextDelayMs()), [&] { return stop_; });
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!first_attempt_done_) {
    first_attempt_done_ = true;
    first_attempt_ = Status::InvalidArgument("stopped before the server at " +
                                             options_.client.address + " was reached");
  }
  cv_.notify_all();
}

bool GrpcCoordinatorLink::Serve(ControlStream* stream) {
  int64_t next_heartbeat = SteadyNs() + int64_t{options_.heartbeat_interval_ms} * 1'000'000;
  int64_t next_iterations = SteadyNs() + int64_t{options_.iteration_flush_ms} * 1'000'000;
  for (;;) {
    std::vector<CollectorMessage> batch;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const int64_t wake =
          std::min(next_heartbeat, iterations_.empty() ? next_heartbeat : next_iterations);
      cv_.wait_for(lock, std::chrono::nanoseconds(std::max<int64_t>(0, wake - SteadyNs())), [&] {
        return stop_ || stream_broken_ || !queue_.empty() ||
               iterations_.size() >= options_.iteration_batch;
      });
      if (stream_broken_) return false;
      stopping = stop_;
      const int64_t now = SteadyNs();
      if (!iterations_.empty() &&
          (stopping || now >= next_iterations || iterations_.size() >= options_.iteration_batch)) {
        batch.push_back(ControlIterations{std::move(iterations_)});
        iterations_.clear();
        next_iterations = now + int64_t{options_.iteration_flush_ms} * 1'000'000;
      }
      while (!queue_.empty()) {
        batch.push_back(std::move(queue_.front().first));
        queued_bytes_ -= queue_.front().second;
        queue_.pop_front();
      }
      if (now >= next_heartbeat) {
        batch.push_back(ControlHeartbeat{RealtimeNs(), stats_.dropped_messages});
        next_heartbeat = now + int64_t{options_.heartbeat_interval_ms} * 1'000'000;
      }
      if (stopping && batch.empty()) return true;
      if (stopping && SteadyNs() > flush_deadline_ns_) return true;
    }
    for (auto& m : batch) {
      if (!stream->Write(m)) {
        // Broken: what was not written is lost with the server that was to receive it.
        return false;
      }
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.messages_sent;
    }
  }
}

void GrpcCoordinatorLink::ReadLoop(ControlStream* stream) {
  ServerMessage m;
  while (stream->Read(&m)) Dispatch(m);
  std::lock_guard<std::mutex> lock(mu_);
  stream_broken_ = true;
  cv_.notify_all();
}

void GrpcCoordinatorLink::Dispatch(const ServerMessage& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.commands_received;
  }
  if (const auto* w = std::get_if<WindowSpec>(&message)) {
    if (control_ != nullptr) control_->StartWindow(*w);
  } else if (const auto* d = std::get_if<ControlDumpStacks>(&message)) {
    if (control_ != nullptr) control_->DumpStacks(d->window);
  } else if (const auto* e = std::get_if<ControlEndWindow>(&message)) {
    if (control_ != nullptr) control_->EndWindowNow(e->window);
  } else if (const auto* q = std::get_if<ControlRequestSummaries>(&message)) {
    SendKept(q->window, q->ranks);
  } else if (const auto* done = std::get_if<ControlWindowDiagnosed>(&message)) {
    std::lock_guard<std::mutex> lock(mu_);
    ForgetKeptLocked(done->window, "the server said the window was diagnosed");
  } else if (const auto* r = std::get_if<ControlSendRecordings>(&message)) {
    SendRecordings(r->window);
  } else if (const auto* r = std::get_if<ControlRejected>(&message)) {
    bool log = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.rejected_by_server;
      log = rejected_logged_++ < kMaxRejectedLogged;
    }
    if (log) Log("the server rejected a message: " + r->error);
  }
}

}  // namespace perftracker
