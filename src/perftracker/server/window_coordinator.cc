#include "perftracker/server/window_coordinator.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <utility>

#include <fmt/core.h>
#include <fmt/format.h>

#include "perftracker/core/private_file_mode.h"
#include "perftracker/core/rank_list.h"
#include "perftracker/core/realtime_clock.h"
#include "perftracker/core/units.h"
#include "perftracker/localize/hang_analyzer.h"
#include "perftracker/report/perfetto_writer.h"
#include "perftracker/report/rank_trace_file.h"
#include "perftracker/report/report.h"
#include "perftracker/server/report_writer.h"
#include "perftracker/summary/worker_digest.h"

namespace perftracker {
namespace {

// How long the coordinator waits for a first answer (a recording, or why there is none) from
// the collectors it asked for recordings before it gives up on the window's timeline.
constexpr int64_t kFirstRecordingAnswerNs = 5'000'000'000;

namespace fs = std::filesystem;

constexpr auto kTick = std::chrono::milliseconds(50);
constexpr int64_t kTickNs = 50'000'000;
// A hang window ended once its stacks were in waits at most this long for the summaries:
// longer than a collector waits for an agent's window_done (a hung agent that holds the GIL
// never says it), plus a second for the summary to arrive.
constexpr int64_t kHangSummaryWaitNs = kWindowDoneGraceNs + 1'000'000'000;
constexpr size_t kIterationHistory = 10000;
// The report's notes show this many innermost frames of each rank's main thread (the
// stacks file has everything).
constexpr size_t kFramesInNote = 4;
constexpr size_t kMaxRanksInIterationNote = 16;
constexpr size_t kIterationsForNote = 50;
// Rounds of DigestScreen::Refine before a window falls back to every full summary.
constexpr int kMaxScreenRounds = 3;

// The note and log line of a window whose summaries or digests carried values this server
// does not know (UnknownValues, left out when decoded), for every such rank at once: "rank
// 3: 2 metric values this server does not know were left out (first: function 4 (aten::mm):
// metric 28): a newer collector? Upgrade the server to read them"; "" when none.
std::string UnknownValuesLine(const std::map<int32_t, UnknownValues>& unknown) {
  constexpr size_t kMaxRankListChars = 160;
  UnknownValues all;
  std::vector<int32_t> ranks;
  int32_t first_rank = -1;
  for (const auto& [rank, u] : unknown) {
    if (u.total() == 0) continue;
    ranks.push_back(rank);
    if (all.first.empty() && !u.first.empty()) first_rank = rank;
    all.Merge(u);
  }
  if (ranks.empty()) return "";
  return fmt::format(
      "{} {}: {} this server does not know {} left out (first: {}{}): a newer collector? "
      "Upgrade the server to read them",
      ranks.size() == 1 ? "rank" : "ranks", FormatRanks(ranks, kMaxRankListChars, ", "),
      all.Describe(), all.total() == 1 ? "was" : "were",
      ranks.size() == 1 ? std::string() : fmt::format("rank {}, ", first_rank), all.first);
}

std::string UtcTime(int64_t ns) {
  const time_t secs = static_cast<time_t>(ns / 1'000'000'000);
  tm t{};
  gmtime_r(&secs, &t);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &t);
  return fmt::format("{}.{:03d} UTC", buf, static_cast<int>((ns / 1'000'000) % 1000));
}

std::string StacksPath(const std::string& dir, uint64_t window) {
  return (std::filesystem::path(dir) / StacksFileName(window)).string();
}

// "train.py:61 main > model.py:27 forward" (innermost last): the main thread's innermost
// frames, for a one-line note.
std::string InnermostFrames(const std::string& text) {
  const std::vector<ThreadStack> threads = ParsePythonStacks(text);
  if (threads.empty()) return "(stacks could not be parsed)";
  const ThreadStack* main = &threads.front();
  for (const auto& t : threads) {
    if (t.name == "MainThread") main = &t;
  }
  std::string out;
  const size_t n = main->frames.size();
  for (size_t i = n > kFramesInNote ? n - kFramesInNote : 0; i < n; ++i) {
    const StackFrame& f = main->frames[i];
    const std::string file = std::filesystem::path(f.file).filename().string();
    out += fmt::format("{}{}:{} {}", out.empty() ? "" : " > ", file, f.line, f.function);
  }
  return out.empty() ? "(no frames)" : out;
}

// "train.py:main > model.py:forward": the main thread's frames without line numbers (a
// loop inside one function is not progress; a call into other code is).
std::string MainThreadCode(const std::string& text) {
  const std::vector<ThreadStack> threads = ParsePythonStacks(text);
  if (threads.empty()) return "";
  const ThreadStack* main = &threads.front();
  for (const auto& t : threads) {
    if (t.is_main || t.name == "MainThread") main = &t;
  }
  std::string out;
  for (const StackFrame& f : main->frames) {
    out += fmt::format("{}{}:{}", out.empty() ? "" : " > ", f.file, f.function);
  }
  return out;
}

}  // namespace

int MostImportantReport(const std::vector<WindowReport>& reports) {
  // Tier 2: a hang; 1: a material finding; 0: nothing material. Within tier 1 a window
  // scores the finding it leads with (its first material one: what the printed diagnosis
  // puts first), and a finding counts with its lost shares summed over every window where
  // it is material (the same code, culprit ranks and call path): a cause that persists
  // costs the run more than a one-off stall, whatever the stall's share in its own window.
  // Scoring any finding a window lists instead would tie every window that lists the
  // persistent cause, and the later one would win even when it leads with a one-off.
  // Ties go to the later window.
  auto counted = [&](const WindowReport& r, const Finding& f) {
    return f.material && (!r.no_iterations || f.code == "PT-HANG");
  };
  auto identity = [](const Finding& f) {
    std::string key = f.code + '\x1f' + f.function_key + '\x1f';
    for (int32_t w : f.workers) key += std::to_string(w) + ',';
    return key;
  };
  std::map<std::string, double> run_share;  // finding identity -> its shares, summed
  for (const WindowReport& r : reports) {
    for (const Finding& f : r.diagnosis.findings) {
      if (counted(r, f)) run_share[identity(f)] += f.lost_share;
    }
  }
  int best = -1;
  int best_tier = -1;
  double best_share = -1;
  bool best_saw = false;  // the best window saw iterations
  for (size_t i = 0; i < reports.size(); ++i) {
    int tier = 0;
    double share = -1;
    for (const Finding& f : reports[i].diagnosis.findings) {
      if (!counted(reports[i], f)) continue;
      tier = std::max(tier, f.code == "PT-HANG" ? 2 : 1);
      if (share < 0) share = run_share[identity(f)];  // the finding the window leads with
    }
    share = std::max(share, 0.0);
    // A retracted hang report (the job was not hung) loses ties, and so does a window in
    // which no rank completed an iteration (cut short by the job's end, or at its start)
    // against one that saw the job train.
    const bool saw = !reports[i].no_iterations;
    const bool later_wins =
        (!reports[i].retracted || best < 0 || reports[static_cast<size_t>(best)].retracted) &&
        (saw || !best_saw);
    if (tier > best_tier || (tier == best_tier && share > best_share) ||
        (tier == best_tier && share == best_share && later_wins)) {
      best = static_cast<int>(i);
      best_tier = tier;
      best_share = share;
      best_saw = saw;
    }
  }
  return best;
}

WindowCoordinator::WindowCoordinator(CoordinatorOptions options) : options_(std::move(options)) {
  if (options_.max_windows < 0) options_.max_windows = 0;
}

WindowCoordinator::~WindowCoordinator() { Stop(); }

void WindowCoordinator::AddCollector(CollectorControl* collector) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(collector);
}

Status WindowCoordinator::Start() {
  PERFTRACKER_RETURN_IF_ERROR(EnsureReportDir(options_.report_dir));
  std::lock_guard<std::mutex> lock(mu_);
  if (started_) return Status::Internal("coordinator already started");
  started_ = true;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void WindowCoordinator::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  started_ = false;
}

void WindowCoordinator::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "perftracker: %s\n", line.c_str());
  }
}

std::optional<WindowReport> WindowCoordinator::last_report() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (reports_.empty()) return std::nullopt;
  return reports_.back();
}

std::vector<WindowReport> WindowCoordinator::reports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reports_;
}

uint64_t WindowCoordinator::windows_opened() const {
  std::lock_guard<std::mutex> lock(mu_);
  return windows_opened_;
}

std::vector<std::string> WindowCoordinator::retracted_hangs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return retracted_;
}

std::vector<std::pair<int64_t, int64_t>> WindowCoordinator::IterationHistory(int32_t rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(rank);
  if (it == workers_.end()) return {};
  return {it->second.iterations.begin(), it->second.iterations.end()};
}

std::vector<int32_t> WindowCoordinator::Ranks() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int32_t> out;
  out.reserve(workers_.size());
  for (const auto& [rank, worker] : workers_) out.push_back(rank);
  return out;
}

// ---------------------------------------------------------------------------------------
// CoordinatorLink

void WindowCoordinator::OnWorkerJoined(const WorkerInfo& worker) {
  if (worker.rank < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  Worker& w = workers_[worker.rank];
  if (w.left && !w.left_clean) --gone_workers_;
  w.info = worker;
  w.left = false;
  w.left_clean = false;
  world_size_ = std::max(world_size_, worker.world_size);
  if (first_hello_ns_ == 0) first_hello_ns_ = RealtimeNs();
  if (window_) window_->expected.insert(worker.rank);
  if (pending_trigger_) cv_.notify_all();
}

bool WindowCoordinator::JoiningLocked(int64_t now_ns) const {
  return first_hello_ns_ > 0 && static_cast<int64_t>(workers_.size()) < world_size_ &&
         now_ns < first_hello_ns_ + options_.join_grace_ns;
}

void WindowCoordinator::OnWorkerLeft(int32_t rank, bool clean) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(rank);
  if (it == workers_.end()) return;
  const bool was_gone = it->second.left && !it->second.left_clean;
  if (was_gone && clean) --gone_workers_;
  if (!was_gone && !clean) ++gone_workers_;
  it->second.left = true;
  it->second.left_clean = clean;
  it->second.left_ns = RealtimeNs();
  cv_.notify_all();
}

void WindowCoordinator::OnTrainingEnded(int32_t rank, const std::string& detail) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(rank);
  if (it == workers_.end()) return;
  it->second.ended_ns = RealtimeNs();
  it->second.ended_detail = detail.empty() ? "its training ended" : detail;
  busy_recheck_.reset();  // a job that ends is silent, not hung
  cv_.notify_all();
}

void WindowCoordinator::OnIteration(int32_t rank, int64_t end_ns, int64_t duration_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (hang_report_window_ != 0 && end_ns > hang_report_ns_) {
    const std::string why = fmt::format(
        "rank {} made progress again {:.1f} s after the hang report of window {}: it was a "
        "long pause, not a hang (its stacks show what the job was doing)",
        rank, static_cast<double>(end_ns - hang_report_ns_) / 1e9, hang_report_window_);
    Log(why);
    pending_report_retraction_ = why;
    retract_report_window_ = hang_report_window_;
    hang_report_window_ = 0;
    cv_.notify_all();
  }
  if (busy_recheck_ && end_ns > busy_recheck_->trigger_ns) busy_recheck_.reset();  // progress
  Worker& worker = workers_[rank];
  if (worker.ended_ns != 0 && end_ns > worker.ended_ns) worker.ended_ns = 0;  // trains again
  auto& iterations = worker.iterations;
  iterations.emplace_back(end_ns, duration_ns);
  if (iterations.size() > kIterationHistory) iterations.pop_front();
}

void WindowCoordinator::OnTrigger(int32_t rank, WindowReason reason, const std::string& detail) {
  const std::string what = fmt::format("rank {}: {}{}{}", rank, WindowReasonName(reason),
                                       detail.empty() ? "" : " — ", detail);
  std::vector<CollectorControl*> start;
  std::vector<CollectorControl*> stacks;
  WindowSpec spec;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = RealtimeNs();
    if (reason == WindowReason::kHang) {
      auto it = workers_.find(rank);
      if (it != workers_.end() && it->second.ended_ns != 0) {
        Log(fmt::format("{}: ignored, its training ended ({}): a job that ends is silent", what,
                        it->second.ended_detail));
        return;
      }
    }
    if (window_) {
      if (window_->triggers.size() < 64) window_->triggers.push_back(what);
      if (reason == WindowReason::kHang && !window_->stacks_requested) {
        // The window becomes a hang window: stacks, PT-HANG, named window-<id>-hang (once
        // confirmed).
        window_->stacks_requested = true;
        window_->hang_phase = OpenWindow::HangPhase::kFirstSample;
        window_->hang_trigger_ns = now;
        window_->hang_trigger = what;
        window_->spec.reason = WindowReason::kHang;
        hang_window_taken_ = true;
        stacks = collectors_;
        spec = window_->spec;
      }
    } else if (JoiningLocked(now)) {
      if (!pending_trigger_) {
        Log(
            fmt::format("{}: waiting for the ranks that have not joined yet ({} of {}) before "
                        "opening a window",
                        what, workers_.size(), world_size_));
        pending_trigger_.emplace(reason, what);
      } else if (reason == WindowReason::kHang) {
        pending_trigger_->first = reason;
      }
    } else if (OpenLocked(reason, what, now)) {
      start = collectors_;
      spec = window_->spec;
      if (reason == WindowReason::kHang) stacks = collectors_;
    }
  }
  for (CollectorControl* c : start) c->StartWindow(spec);
  for (CollectorControl* c : stacks) c->DumpStacks(spec.id);
}

void WindowCoordinator::OnStacks(uint64_t window, int32_t rank, bool available,
                                 const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!window_ || window_->spec.id != window) return;
  (available ? window_->stacks : window_->no_stacks)[rank] = text;
  cv_.notify_all();
}

void WindowCoordinator::OnWindowRecording(uint64_t window, int32_t rank, const std::string& path) {
  std::error_code ec;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (options_.perfetto && window_ && window_->spec.id == window) {
      window_->recordings[rank] = path;
      return;
    }
    if (fetch_ && fetch_->window == window) {
      fetch_->paths[rank] = path;
      cv_.notify_all();
      return;
    }
  }
  // Not wanted, or a late recording of a finished window: nothing will merge it.
  if (options_.perfetto) std::filesystem::remove(path, ec);
}

void WindowCoordinator::OnRecordingMissing(uint64_t window, int32_t rank, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!fetch_ || fetch_->window != window) return;
  fetch_->missing[rank] = why;
  cv_.notify_all();
}

bool WindowCoordinator::FetchingRecordings(uint64_t window) const {
  std::lock_guard<std::mutex> lock(mu_);
  return fetch_ && fetch_->window == window;
}

void WindowCoordinator::FetchRecordings(OpenWindow* w) {
  const auto answered = [&](int32_t rank) {
    return w->recordings.count(rank) ||
           (fetch_ && (fetch_->paths.count(rank) || fetch_->missing.count(rank)));
  };
  std::vector<CollectorControl*> collectors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (std::all_of(w->expected.begin(), w->expected.end(), answered)) return;
    fetch_.emplace();
    fetch_->window = w->spec.id;
    collectors = collectors_;
  }
  bool asked = false;
  for (CollectorControl* c : collectors) asked = c->RequestRecordings(w->spec.id) || asked;
  std::unique_lock<std::mutex> lock(mu_);
  if (asked) {
    // A collector that keeps recordings answers at once, with a rank's file or why it has
    // none; one that never answers (older, or not keeping any) must not hold the window's
    // report for the whole fetch time: with no answer at all within the first seconds, the
    // report goes out without a timeline (its notes say why).
    const auto all_answered = [&] {
      return stop_ || std::all_of(w->expected.begin(), w->expected.end(), answered);
    };
    const auto any_answer = [&] {
      return all_answered() || !fetch_->paths.empty() || !fetch_->missing.empty();
    };
    const int64_t first_ns = std::min<int64_t>(kFirstRecordingAnswerNs, options_.perfetto_fetch_ns);
    if (cv_.wait_for(lock, std::chrono::nanoseconds(first_ns), any_answer)) {
      cv_.wait_for(lock, std::chrono::nanoseconds(options_.perfetto_fetch_ns - first_ns),
                   all_answered);
    }
  }
  for (auto& [rank, path] : fetch_->paths) w->recordings[rank] = std::move(path);
  for (auto& [rank, why] : fetch_->missing) {
    if (!w->recordings.count(rank)) w->recordings_missing[rank] = std::move(why);
  }
  fetch_.reset();
}

std::string WindowCoordinator::WritePerfetto(const OpenWindow& w, const Diagnosis& diagnosis,
                                             std::vector<std::string>* notes) const {
  std::error_code ec;
  // Why each rank without a recording has none, for the notes.
  std::vector<std::string> without;
  for (int32_t rank : w.expected) {
    if (w.recordings.count(rank)) continue;
    auto why = w.recordings_missing.find(rank);
    without.push_back(fmt::format("{} ({})", rank,
                                  why != w.recordings_missing.end()
                                      ? why->second
                                      : std::string("no recording came from its collector")));
  }
  if (w.recordings.empty()) {
    notes->push_back(
        fmt::format("no Perfetto timeline: no rank's window events were recorded{} "
                    "(docs/perfetto-export.md)",
                    without.empty() ? std::string()
                                    : ": rank(s) " + fmt::format("{}", fmt::join(without, ", "))));
    return "";
  }
  std::vector<std::unique_ptr<RankTrace>> traces;
  std::vector<std::string> unread;
  for (const auto& [rank, path] : w.recordings) {
    StatusOr<std::unique_ptr<RankTrace>> trace = ReadRankTraceFile(path);
    std::filesystem::remove(path, ec);
    if (!trace.ok()) {
      unread.push_back(fmt::format("rank {}: {}", rank, trace.status().message()));
      continue;
    }
    traces.push_back(std::move(*trace));
  }
  PerfettoOptions perfetto_options;
  perfetto_options.max_events = options_.perfetto_max_events;
  perfetto_options.generator = fmt::format("perftracker live window {}", w.spec.id);
  PerfettoWriter writer(perfetto_options);
  for (const auto& t : traces) writer.AddRank(t.get());
  const std::string path = (fs::path(options_.report_dir) / TimelineFileName(w.spec.id)).string();
  const std::string tmp = path + ".tmp";
  Status written = Status::Ok();
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      written = Status::Internal(fmt::format("{}: cannot write: {}", tmp, std::strerror(errno)));
    } else {
      ::chmod(tmp.c_str(), PrivateFileMode());
      written = writer.Write(diagnosis, &out);
      out.close();
      if (written.ok() && !out) written = Status::Internal(fmt::format("{}: cannot write", tmp));
    }
  }
  if (written.ok()) {
    std::filesystem::rename(tmp, path, ec);
    if (ec) written = Status::Internal(fmt::format("{}: cannot rename: {}", path, ec.message()));
  }
  if (!written.ok()) {
    std::filesystem::remove(tmp, ec);
    Log(fmt::format("window {}: no Perfetto timeline: {}", w.spec.id, written.message()));
    notes->push_back(fmt::format("no Perfetto timeline: {}", written.message()));
    return "";
  }
  const PerfettoStats& st = writer.stats();
  std::string note =
      fmt::format("Perfetto timeline: {} ({} ranks, {} events{})",
                  fs::path(path).filename().string(), traces.size(), st.events_total,
                  st.events_aggregated > 0
                      ? fmt::format(", {} not drawn but counted per track", st.events_aggregated)
                      : std::string());
  if (!without.empty()) {
    note += fmt::format("; without rank(s) {}", fmt::join(without, ", "));
  }
  if (!unread.empty()) note += "; unreadable: " + fmt::format("{}", fmt::join(unread, "; "));
  notes->push_back(note);
  return path;
}

void WindowCoordinator::OnSummary(uint64_t window, WorkerSummary summary) {
  std::lock_guard<std::mutex> lock(mu_);
  const int32_t rank = summary.rank;
  if (fetch_window_ != 0 && fetch_window_ == window) {
    // A full summary the screen asked for (the window is being finalized).
    if (fetch_waiting_.erase(rank) > 0) {
      fetched_.insert_or_assign(rank, std::move(summary));
      if (fetch_waiting_.empty()) cv_.notify_all();
    }
    return;
  }
  if (!window_ || window_->spec.id != window) return;  // a late summary of a finished window
  window_->summaries.insert_or_assign(rank, std::move(summary));
  // The loop checks readiness every tick; woken early only when every rank may be in (a
  // check per upload costs O(ranks) each at fleet size).
  if (window_->summaries.size() + window_->digested.size() >= window_->expected.size())
    cv_.notify_all();
}

void WindowCoordinator::OnUnknownValues(uint64_t window, int32_t rank,
                                        const UnknownValues& unknown) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fetch_window_ != 0 && fetch_window_ == window) {
    if (fetch_waiting_.count(rank)) fetched_unknown_.insert_or_assign(rank, unknown);
    return;
  }
  if (!window_ || window_->spec.id != window) return;
  window_->unknown.insert_or_assign(rank, unknown);
}

void WindowCoordinator::OnSummariesNotKept(uint64_t window, const std::vector<int32_t>& ranks,
                                           const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fetch_window_ == 0 || fetch_window_ != window) return;  // not (or no longer) asked for
  for (int32_t rank : ranks) {
    if (fetch_waiting_.erase(rank) > 0) fetch_not_kept_.insert_or_assign(rank, why);
  }
  if (fetch_waiting_.empty()) cv_.notify_all();
}

void WindowCoordinator::OnDigest(uint64_t window, const WorkerDigest& digest) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!window_ || window_->spec.id != window) return;  // a late digest of a finished window
  if (!window_->digested.insert(digest.rank).second) return;
  if (!window_->screen) window_->screen = std::make_unique<DigestScreen>(options_.screen);
  window_->screen->Add(digest);
  if (window_->summaries.size() + window_->digested.size() >= window_->expected.size())
    cv_.notify_all();
}

// ---------------------------------------------------------------------------------------
// Windows

bool WindowCoordinator::OpenLocked(WindowReason reason, std::string trigger, int64_t now_ns) {
  // A hang is never refused by the cooldown, and the first one not by --max-windows either:
  // the job makes no progress, and its stacks are the only way to say why.
  const bool first_hang = reason == WindowReason::kHang && !hang_window_taken_;
  if (!first_hang && (finalizing_ || now_ns < cooldown_until_ns_)) {
    if (!logged_cooldown_) {
      logged_cooldown_ = true;
      Log(fmt::format("trigger ignored ({}): {}; a slowdown that lasts fires again", trigger,
                      finalizing_ ? std::string("the last window's report is being written")
                                  : fmt::format("the last window closed less than {:.0f} s ago",
                                                static_cast<double>(options_.cooldown_ns) / 1e9)));
    }
    return false;
  }
  if (!first_hang &&
      windows_opened_ - windows_dropped_ >= static_cast<uint64_t>(options_.max_windows)) {
    if (!logged_max_) {
      logged_max_ = true;
      Log(fmt::format("trigger ignored ({}): {} windows taken already (--max-windows)", trigger,
                      options_.max_windows));
    }
    return false;
  }
  OpenWindow w;
  w.spec.id = options_.first_window_id + windows_opened_++;
  w.spec.reason = reason;
  // A hang window starts at once: the job runs nothing a delay would let every rank reach.
  const int64_t delay = reason == WindowReason::kHang ? 0 : options_.delay_ns;
  w.spec.start_ns = now_ns + delay;
  w.spec.duration_ns = reason == WindowReason::kHang
                           ? std::min(options_.window_ns, options_.hang_window_ns)
                           : options_.window_ns;
  w.min_end_ns = w.spec.end_ns();
  if (reason != WindowReason::kHang && options_.window_min_iterations > 0 &&
      options_.window_max_ns > options_.window_ns) {
    // The collectors are told the latest end; the coordinator ends it earlier (see Loop).
    w.stretchable = true;
    w.spec.duration_ns = options_.window_max_ns;
  }
  w.stacks_requested = reason == WindowReason::kHang;
  w.opened_for = reason;
  if (reason == WindowReason::kHang) {
    hang_window_taken_ = true;
    w.hang_phase = OpenWindow::HangPhase::kFirstSample;
    w.hang_trigger_ns = now_ns;
    w.hang_trigger = trigger;
  }
  w.deadline_ns = w.spec.end_ns() + options_.wait_summaries_ns;
  for (int32_t r = 0; r < world_size_; ++r) {
    auto it = workers_.find(r);
    if (it == workers_.end() || !it->second.left_clean) w.expected.insert(r);
  }
  for (const auto& [rank, worker] : workers_) {
    if (!worker.left_clean) w.expected.insert(rank);
  }
  w.triggers.push_back(std::move(trigger));
  logged_cooldown_ = false;
  Log(fmt::format("window {} ({}) opens in {:.1f} s for {:.1f} s{} on {} ranks: {}", w.spec.id,
                  WindowReasonName(reason), static_cast<double>(delay) / 1e9,
                  static_cast<double>(w.min_end_ns - w.spec.start_ns) / 1e9,
                  w.stretchable
                      ? fmt::format(" (longer until every rank completed {} iterations in it, at "
                                    "most {:.0f} s)",
                                    options_.window_min_iterations,
                                    static_cast<double>(options_.window_max_ns) / 1e9)
                      : std::string(),
                  w.expected.size(), w.triggers.front()));
  window_ = std::move(w);
  return true;
}

bool WindowCoordinator::ReadyLocked(int64_t now_ns) const {
  const OpenWindow& w = *window_;
  const int64_t end = w.spec.end_ns();
  if (!w.ending && now_ns < end) return false;
  if (now_ns >= w.deadline_ns) return true;
  // A hang not confirmed (or retracted) yet: its report waits.
  if (w.stacks_requested && w.hang_phase != OpenWindow::HangPhase::kConfirmed) return false;
  // Fewer ranks in than expected, even counting every gone worker as in: not ready (a check
  // per rank under the mutex costs ~50 ms a tick at 100,000 ranks, stalling the uploads).
  if (w.summaries.size() + w.digested.size() + gone_workers_ < w.expected.size()) return false;
  for (int32_t rank : w.expected) {
    auto it = workers_.find(rank);
    // An agent that left without bye sends nothing more: do not wait for it.
    const bool gone = it != workers_.end() && it->second.left && !it->second.left_clean;
    if (gone) continue;
    if (!w.summaries.count(rank) && !w.digested.count(rank)) return false;
    if (w.stacks_requested && !w.stacks.count(rank) && !w.no_stacks.count(rank) &&
        !(it != workers_.end() && it->second.left)) {
      return false;
    }
  }
  return true;
}

bool WindowCoordinator::IterationsInLocked() const {
  const OpenWindow& w = *window_;
  for (int32_t rank : w.expected) {
    auto it = workers_.find(rank);
    if (it == workers_.end()) continue;
    const Worker& worker = it->second;
    if (worker.left || worker.ended_ns != 0 || worker.iterations.empty()) continue;
    int in_window = 0;
    for (auto i = worker.iterations.rbegin();
         i != worker.iterations.rend() && in_window < options_.window_min_iterations; ++i) {
      if (i->first - i->second < w.spec.start_ns) break;  // began before the window
      ++in_window;
    }
    if (in_window < options_.window_min_iterations) return false;
  }
  return true;
}

bool WindowCoordinator::AnyIterationLocked() const {
  return std::any_of(workers_.begin(), workers_.end(),
                     [](const auto& w) { return !w.second.iterations.empty(); });
}

bool WindowCoordinator::StacksInLocked() const {
  const OpenWindow& w = *window_;
  if (!w.stacks_requested) return false;
  for (int32_t rank : w.expected) {
    if (w.stacks.count(rank) || w.no_stacks.count(rank)) continue;
    auto it = workers_.find(rank);
    if (it != workers_.end() && it->second.left) continue;
    return false;
  }
  return true;
}

int64_t WindowCoordinator::ConfirmDelayLocked() const {
  // The median over the window's ranks of their mean recent iteration.
  std::vector<double> means;
  for (int32_t rank : window_->expected) {
    auto it = workers_.find(rank);
    if (it == workers_.end() || it->second.iterations.empty()) continue;
    double sum = 0;
    size_t n = 0;
    for (auto i = it->second.iterations.rbegin();
         i != it->second.iterations.rend() && n < kIterationsForNote; ++i, ++n) {
      sum += static_cast<double>(i->second);
    }
    means.push_back(sum / static_cast<double>(n));
  }
  int64_t mean = 0;
  if (!means.empty()) {
    std::nth_element(means.begin(), means.begin() + static_cast<std::ptrdiff_t>(means.size() / 2),
                     means.end());
    mean = static_cast<int64_t>(means[means.size() / 2]);
  }
  return std::max(options_.hang_confirm_ns, mean);
}

std::string WindowCoordinator::ProgressSinceTriggerLocked() const {
  const OpenWindow& w = *window_;
  size_t gone = 0;
  for (int32_t rank : w.expected) {
    auto it = workers_.find(rank);
    if (it == workers_.end()) continue;
    const Worker& worker = it->second;
    const double after =
        static_cast<double>((worker.iterations.empty() ? 0 : worker.iterations.back().first) -
                            w.hang_trigger_ns) /
        1e9;
    if (!worker.iterations.empty() && worker.iterations.back().first > w.hang_trigger_ns) {
      return fmt::format("rank {} finished an iteration {:.1f} s after the trigger", rank, after);
    }
    if (worker.ended_ns > w.hang_trigger_ns) {
      return fmt::format("rank {}'s training ended ({})", rank, worker.ended_detail);
    }
    if (worker.left && worker.left_clean && worker.left_ns > w.hang_trigger_ns) {
      return fmt::format("rank {} exited normally", rank);
    }
    if (worker.ended_ns != 0 || (worker.left && worker.left_clean)) ++gone;
  }
  if (gone == w.expected.size()) return "every rank's training ended";
  return "";
}

std::string WindowCoordinator::StacksMovedLocked() const {
  const OpenWindow& w = *window_;
  for (const auto& [rank, first] : w.first_stacks) {
    auto second = w.stacks.find(rank);
    if (second == w.stacks.end()) continue;  // no second sample: no sign of progress
    if (MainThreadCode(first) != MainThreadCode(second->second)) {
      return fmt::format("rank {}'s main thread moved on between two stack samples ({} -> {})",
                         rank, InnermostFrames(first), InnermostFrames(second->second));
    }
  }
  return "";
}

int64_t WindowCoordinator::BusyLimitOf(const OpenWindow& w,
                                       const std::map<int32_t, Worker>& workers) {
  if (w.busy_limit_ns > 0) return w.busy_limit_ns;  // a recheck keeps its trigger's limit
  // The silence that made the trigger: since the earliest last progress (the rank that
  // stopped first is the one whose detector fired).
  int64_t earliest = 0;
  for (int32_t rank : w.expected) {
    auto it = workers.find(rank);
    if (it == workers.end() || it->second.iterations.empty()) continue;
    const int64_t last = it->second.iterations.back().first;
    earliest = earliest == 0 ? last : std::min(earliest, last);
  }
  if (earliest == 0 || w.hang_trigger_ns <= earliest) return 0;
  return HangAnalyzer::BusyLimitNs(w.hang_trigger_ns - earliest);
}

std::optional<WindowCoordinator::BusyRecheck> WindowCoordinator::BusyRecheckOf(
    const OpenWindow& w, const std::map<int32_t, Worker>& workers) {
  // A recheck schedules none (its verdict is final), and it is due when every rank's
  // silence has reached the limit: from the latest last progress.
  const int64_t limit = BusyLimitOf(w, workers);
  if (limit <= 0 || w.busy_recheck) return std::nullopt;
  int64_t latest = 0;
  for (int32_t rank : w.expected) {
    auto it = workers.find(rank);
    if (it == workers.end() || it->second.iterations.empty()) continue;
    latest = std::max(latest, it->second.iterations.back().first);
  }
  if (latest == 0) return std::nullopt;
  return BusyRecheck{w.spec.id, w.hang_trigger_ns, limit, latest + limit};
}

std::optional<WindowCoordinator::HangStep> WindowCoordinator::RetractHangLocked(
    const std::string& why, bool ran_without_progress) {
  OpenWindow& w = *window_;
  const std::string line =
      fmt::format("hang trigger of window {} retracted: {}: a pause, not a hang ({})", w.spec.id,
                  why, w.hang_trigger);
  Log(line);
  if (retracted_.size() < 64) retracted_.push_back(line);
  hang_window_taken_ = false;  // a later hang is still never refused
  if (ran_without_progress) busy_recheck_ = BusyRecheckOf(w, workers_);
  if (w.opened_for == WindowReason::kHang) {
    HangStep step{collectors_, w.spec.id, false};
    window_.reset();
    ++windows_dropped_;
    cv_.notify_all();
    return step;
  }
  // The hang joined a window opened for another reason: it goes on as that window.
  w.spec.reason = w.opened_for;
  w.stacks_requested = false;
  w.hang_phase = OpenWindow::HangPhase::kNone;
  w.stacks.clear();
  w.no_stacks.clear();
  w.first_stacks.clear();
  return std::nullopt;
}

std::optional<WindowCoordinator::HangStep> WindowCoordinator::ConfirmHangLocked(int64_t now_ns) {
  OpenWindow& w = *window_;
  using Phase = OpenWindow::HangPhase;
  if (const std::string why = ProgressSinceTriggerLocked(); !why.empty()) {
    return RetractHangLocked(why);
  }
  switch (w.hang_phase) {
    case Phase::kFirstSample:
      if (!StacksInLocked()) {
        // Ranks that never answer (native code holding the GIL) do not hold the report up.
        if (now_ns >= w.deadline_ns) w.hang_phase = Phase::kConfirmed;
        return std::nullopt;
      }
      w.first_stacks = w.stacks;
      w.stacks.clear();
      w.no_stacks.clear();
      w.hang_phase = Phase::kWaiting;
      w.second_sample_ns = now_ns + ConfirmDelayLocked();
      return std::nullopt;
    case Phase::kWaiting:
      if (now_ns < w.second_sample_ns) return std::nullopt;
      w.hang_phase = Phase::kSecondSample;
      return HangStep{collectors_, w.spec.id, true};
    case Phase::kSecondSample: {
      if (!StacksInLocked() && now_ns < w.deadline_ns) return std::nullopt;
      // A recheck's rank is known to run: its stacks moving is no progress.
      if (const std::string moved = w.busy_recheck ? "" : StacksMovedLocked(); !moved.empty()) {
        return RetractHangLocked(moved, /*ran_without_progress=*/true);
      }
      w.hang_phase = Phase::kConfirmed;
      Log(
          fmt::format("window {}: hang confirmed: no progress on any rank in the {:.1f} s since "
                      "the trigger, and the same code in two stack samples (the window's "
                      "summaries tell a stuck main thread from a busy one)",
                      w.spec.id, static_cast<double>(now_ns - w.hang_trigger_ns) / 1e9));
      return std::nullopt;
    }
    case Phase::kNone:
    case Phase::kConfirmed:
      return std::nullopt;
  }
  return std::nullopt;
}

void WindowCoordinator::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  // Opens a window (lock held) and tells every collector, and for a hang asks for stacks,
  // with the lock released; false when OpenLocked refuses.
  auto open_and_announce = [&](WindowReason reason, const std::string& what, int64_t now,
                               int64_t busy_limit_ns = 0) {
    if (!OpenLocked(reason, what, now)) return false;
    window_->busy_limit_ns = busy_limit_ns;
    window_->busy_recheck = busy_limit_ns > 0;
    const WindowSpec spec = window_->spec;
    const auto collectors = collectors_;
    lock.unlock();
    for (CollectorControl* c : collectors) c->StartWindow(spec);
    if (reason == WindowReason::kHang) {
      for (CollectorControl* c : collectors) c->DumpStacks(spec.id);
    }
    lock.lock();
    return true;
  };
  while (!stop_) {
    cv_.wait_for(lock, kTick);
    if (stop_) break;
    const int64_t now = RealtimeNs();
    // The requested window waits for the job's first iteration (a window of the start-up,
    // imports and the DataLoader workers starting, shows no training iteration), at most
    // window_max more.
    const int64_t manual_at = first_hello_ns_ + options_.trigger_at_ns.value_or(0);
    const bool manual_due =
        now >= manual_at && (options_.window_min_iterations == 0 || AnyIterationLocked() ||
                             now >= manual_at + options_.window_max_ns);
    if (options_.trigger_at_ns && !manual_done_ && first_hello_ns_ > 0 && manual_due) {
      manual_done_ = true;
      const std::string what = fmt::format(
          "requested {:.1f} s after the first rank started "
          "(--trigger-at-seconds)",
          static_cast<double>(*options_.trigger_at_ns) / 1e9);
      if (window_) {
        window_->triggers.push_back(what);
      } else if (open_and_announce(WindowReason::kManual, what, now)) {
        continue;
      }
    }
    if (pending_trigger_ && !window_ && !JoiningLocked(now)) {
      const auto [reason, what] = *pending_trigger_;
      pending_trigger_.reset();
      if (open_and_announce(reason, what, now)) continue;
    }
    if (busy_recheck_ && !window_ && !finalizing_ && now >= busy_recheck_->due_ns) {
      // Busy for as long as it may stand in for progress, and still no iteration: looked at
      // as a hang (the detector fires once per silence).
      const BusyRecheck r = *busy_recheck_;
      busy_recheck_.reset();
      const std::string what = fmt::format(
          "busy recheck: no iteration progress for {} (the hang trigger of window {} was "
          "retracted as busy), the most that busy work stands in for progress ({}x the silence "
          "that made that trigger)",
          FormatDuration(static_cast<double>(now - (r.due_ns - r.limit_ns))), r.window,
          HangAnalyzer::kBusyLimitFactor);
      if (open_and_announce(WindowReason::kHang, what, now, r.limit_ns)) continue;
    }
    if (window_ && window_->stacks_requested &&
        window_->hang_phase != OpenWindow::HangPhase::kConfirmed) {
      if (std::optional<HangStep> step = ConfirmHangLocked(now)) {
        lock.unlock();
        for (CollectorControl* c : step->collectors) {
          if (step->dump_stacks) {
            c->DumpStacks(step->window);
          } else {
            c->EndWindowNow(step->window);
          }
        }
        lock.lock();
        continue;
      }
    }
    if (pending_report_retraction_) {
      const std::string why = *pending_report_retraction_;
      pending_report_retraction_.reset();
      lock.unlock();
      RetractHangReport(why);
      lock.lock();
      continue;
    }
    if (window_ && !window_->ending && window_->stacks_requested &&
        window_->hang_phase == OpenWindow::HangPhase::kConfirmed) {
      // A confirmed hang: the stacks are the evidence. End the window now; the collectors
      // send the summaries of what it caught at their next drain round.
      OpenWindow& w = *window_;
      w.ending = true;
      w.ended_for_hang = true;
      w.spec.duration_ns = std::clamp<int64_t>(now - w.spec.start_ns, 0, w.spec.duration_ns);
      w.deadline_ns = std::min(w.deadline_ns, now + kHangSummaryWaitNs);
      const uint64_t id = w.spec.id;
      const auto collectors = collectors_;
      lock.unlock();
      for (CollectorControl* c : collectors) c->EndWindowNow(id);
      lock.lock();
      continue;
    }
    if (window_ && window_->stretchable && !window_->ending && !window_->stacks_requested &&
        now >= window_->min_end_ns && now < window_->spec.end_ns() && IterationsInLocked()) {
      // --window-seconds are over and every rank completed its iterations in the window.
      OpenWindow& w = *window_;
      w.ending = true;
      w.ended_at_iterations = true;
      w.spec.duration_ns = now - w.spec.start_ns;
      w.deadline_ns = std::min(w.deadline_ns, now + options_.wait_summaries_ns);
      const uint64_t id = w.spec.id;
      const auto collectors = collectors_;
      lock.unlock();
      for (CollectorControl* c : collectors) c->EndWindowNow(id);
      lock.lock();
      continue;
    }
    if (window_ && ReadyLocked(now)) {
      OpenWindow w = std::move(*window_);
      window_.reset();
      finalizing_ = true;
      lock.unlock();
      Finalize(std::move(w));
      lock.lock();
      finalizing_ = false;
      cooldown_until_ns_ = RealtimeNs() + options_.cooldown_ns;
      cv_.notify_all();
    }
  }
}

void WindowCoordinator::JobExited(int exit_code) {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (exit_code != 0 || hang_report_window_ == 0 || workers_.empty()) return;
    for (const auto& [rank, w] : workers_) {
      const bool finished = w.ended_ns > hang_report_trigger_ns_ ||
                            (w.left && w.left_clean && w.left_ns > hang_report_trigger_ns_);
      if (!finished) return;
    }
    why = fmt::format(
        "every rank finished its training after the hang trigger of window {} and the job "
        "exited 0: its end was slow, it did not hang",
        hang_report_window_);
    Log(why);
    retract_report_window_ = hang_report_window_;
    hang_report_window_ = 0;
  }
  RetractHangReport(why);
}

void WindowCoordinator::Flush(int64_t timeout_ns) {
  std::vector<CollectorControl*> collectors;
  uint64_t id = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    manual_done_ = true;    // no new manual window once the job is over
    busy_recheck_.reset();  // nor a busy recheck
    if (window_ && window_->stacks_requested &&
        window_->hang_phase != OpenWindow::HangPhase::kConfirmed) {
      // The job ended before its hang was confirmed: it was not hung.
      if (std::optional<HangStep> step = RetractHangLocked("the job ended")) {
        lock.unlock();
        for (CollectorControl* c : step->collectors) c->EndWindowNow(step->window);
        lock.lock();
      }
    }
    if (!window_) {
      // A report being written now is waited for.
      cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns), [&] { return !finalizing_; });
      return;
    }
    const int64_t now = RealtimeNs();
    if (now < window_->spec.start_ns) {
      Log(fmt::format("window {} was to start after the job ended: dropped", window_->spec.id));
      id = window_->spec.id;
      window_.reset();
      collectors = collectors_;
    } else {
      window_->ending = true;
      window_->spec.duration_ns = std::min(window_->spec.duration_ns, now - window_->spec.start_ns);
      window_->deadline_ns = std::min(window_->deadline_ns, now + timeout_ns);
      id = window_->spec.id;
      collectors = collectors_;
    }
  }
  for (CollectorControl* c : collectors) c->EndWindowNow(id);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns) + std::chrono::seconds(1),
               [&] { return !finalizing_ && !(window_ && window_->spec.id == id); });
}

std::map<int32_t, std::string> WindowCoordinator::StacksFile(const OpenWindow& w) {
  if (!w.stacks_requested) return {};
  std::map<int32_t, std::string> out = w.stacks;
  for (const auto& [rank, why] : w.no_stacks) out[rank] = "(no stacks: " + why + ")\n";
  return out;
}

ScreenResult WindowCoordinator::Screen(OpenWindow* w) {
  // Ranks whose collector sent the full summary at once (an older collector) are screened
  // on its digest.
  for (const auto& [rank, summary] : w->summaries) {
    if (!w->digested.count(rank)) w->screen->Add(MakeWorkerDigest(summary));
  }
  ScreenResult result = w->screen->Finish();
  if (w->stacks_requested && !result.full) {
    result.full = true;
    result.reason = "a hang window (its report needs every rank's summary)";
  }
  return result;
}

void WindowCoordinator::FetchSummaries(OpenWindow* w, const std::vector<int32_t>& ranks) {
  if (ranks.empty()) return;
  std::vector<CollectorControl*> collectors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fetch_window_ = w->spec.id;
    fetch_waiting_ = std::set<int32_t>(ranks.begin(), ranks.end());
    fetched_.clear();
    fetch_not_kept_.clear();
    fetched_unknown_.clear();
    collectors = collectors_;
  }
  for (CollectorControl* c : collectors) c->RequestSummaries(w->spec.id, ranks);
  const int64_t deadline = RealtimeNs() + options_.wait_summaries_ns;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_ && !fetch_waiting_.empty() && RealtimeNs() < deadline) {
    // An agent that left without bye sends nothing more: do not wait for it.
    const bool all_gone = std::all_of(fetch_waiting_.begin(), fetch_waiting_.end(), [&](int32_t r) {
      auto it = workers_.find(r);
      return it != workers_.end() && it->second.left && !it->second.left_clean;
    });
    if (all_gone) break;
    cv_.wait_for(lock, kTick);
  }
  for (auto& [rank, summary] : fetched_) w->summaries.insert_or_assign(rank, std::move(summary));
  for (auto& [rank, why] : fetch_not_kept_) w->not_kept.insert_or_assign(rank, std::move(why));
  for (auto& [rank, u] : fetched_unknown_) w->unknown.insert_or_assign(rank, std::move(u));
  fetched_.clear();
  fetch_not_kept_.clear();
  fetched_unknown_.clear();
  fetch_waiting_.clear();
  fetch_window_ = 0;
}

void WindowCoordinator::Finalize(OpenWindow w) {
  using SteadyClock = std::chrono::steady_clock;
  // Progressive disclosure: screen the digests, fetch the full summaries the screen needs.
  std::optional<ScreenResult> screen;
  std::set<int32_t> not_asked;  // digested ranks the digest path does not need in full
  if (w.screen) {
    const auto t_screen = SteadyClock::now();
    screen = Screen(&w);
    std::vector<int32_t> want;
    if (screen->full) {
      for (int32_t rank : w.digested) {
        if (!w.summaries.count(rank)) want.push_back(rank);
      }
    } else {
      const std::set<int32_t> asked(screen->ranks.begin(), screen->ranks.end());
      for (int32_t rank : w.digested) {
        if (w.summaries.count(rank)) continue;
        if (asked.count(rank)) {
          want.push_back(rank);
        } else {
          not_asked.insert(rank);
        }
      }
    }
    Log(
        fmt::format("window {}: {} digests screened in {:.2f} s ({}: {}); asking for {} full "
                    "summaries",
                    w.spec.id, w.digested.size(),
                    std::chrono::duration<double>(SteadyClock::now() - t_screen).count(),
                    screen->full ? "full path" : "digest path", screen->reason, want.size()));
    FetchSummaries(&w, want);
  }
  std::vector<int32_t> missing;
  std::map<int32_t, Worker> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers = workers_;
  }
  for (int32_t rank : w.expected) {
    if (!w.summaries.count(rank) && !not_asked.count(rank)) missing.push_back(rank);
  }
  std::vector<WorkerSummary> summaries;
  summaries.reserve(w.summaries.size());
  for (auto& [rank, s] : w.summaries) summaries.push_back(std::move(s));

  auto t_start = SteadyClock::now();
  auto t_added = t_start;
  bool no_iterations = false;
  // The localizer on `summaries`, with the window's notes.
  const auto localize = [&]() -> Diagnosis {
    t_start = SteadyClock::now();
    Localizer localizer(options_.localizer);
    if (w.stacks_requested) localizer.MarkHangWindow();
    for (const auto& s : summaries) localizer.Add(s);
    t_added = SteadyClock::now();
    no_iterations =
        !summaries.empty() && std::all_of(summaries.begin(), summaries.end(),
                                          [](const auto& s) { return s.iterations.empty(); });
    if (no_iterations) {
      localizer.AddNote(
          "no rank completed an iteration in this window (the job was starting, or between "
          "phases): its figures are for the window as a whole, not per training iteration");
    }
    // Why the window lasted as long as it did ("" when it lasted --window-seconds).
    std::string length_note;
    if (w.ended_for_hang) {
      length_note = " (ended once every rank's stacks were in)";
    } else if (w.ended_at_iterations) {
      if (w.spec.duration_ns > options_.window_ns + kTickNs) {
        length_note = fmt::format(
            " (longer than --window-seconds, until every rank completed {} iterations in it)",
            options_.window_min_iterations);
      }
    } else if (w.ending) {
      length_note = " (cut short: the job ended)";
    } else if (w.stretchable) {
      length_note =
          fmt::format(" (--window-max-seconds: some rank completed fewer than {} iterations in it)",
                      options_.window_min_iterations);
    }
    localizer.AddNote(fmt::format("live window {} ({}) from {} for {}{}; trigger: {}", w.spec.id,
                                  WindowReasonName(w.spec.reason), UtcTime(w.spec.start_ns),
                                  FormatDuration(static_cast<double>(w.spec.duration_ns)),
                                  length_note, w.triggers.empty() ? "none" : w.triggers.front()));
    if (w.triggers.size() > 1) {
      std::string more;
      for (size_t i = 1; i < w.triggers.size() && i < 8; ++i) {
        more += (i > 1 ? "; " : "") + w.triggers[i];
      }
      localizer.AddNote(
          fmt::format("{} more trigger(s) during the window: {}", w.triggers.size() - 1, more));
    }
    for (int32_t rank : missing) {
      auto it = workers.find(rank);
      std::string why = "agent gone?";
      auto gone = w.not_kept.find(rank);
      if (gone != w.not_kept.end()) {
        why = "its collector no longer keeps it: " + gone->second;
      } else if (it == workers.end()) {
        why = "its agent never connected: did the process start, and load perftracker?";
      } else if (it->second.left && !it->second.left_clean) {
        why = "agent gone? it disconnected without saying bye: killed or crashed";
      }
      localizer.AddNote(fmt::format("rank {} sent no summary ({})", rank, why));
    }
    if (const std::string unknown = UnknownValuesLine(w.unknown); !unknown.empty()) {
      localizer.AddNote(unknown);
    }
    // The always-on detector's view just before the window: often the clearest sign of who
    // slowed down (the window shows why).
    {
      std::string note;
      size_t shown = 0;
      for (const auto& [rank, worker] : workers) {
        double sum = 0;
        size_t n = 0;
        for (auto it = worker.iterations.rbegin();
             it != worker.iterations.rend() && n < kIterationsForNote; ++it) {
          if (it->first > w.spec.start_ns) continue;
          sum += static_cast<double>(it->second);
          ++n;
        }
        if (n == 0) continue;
        if (shown++ >= kMaxRanksInIterationNote) {
          note += ", …";
          break;
        }
        note += fmt::format("{}rank {} {}", note.empty() ? "" : ", ", rank,
                            FormatDuration(sum / static_cast<double>(n)));
      }
      if (!note.empty()) {
        localizer.AddNote(fmt::format(
            "mean iteration before the window (always-on detector, last {} iterations): {}",
            kIterationsForNote, note));
      }
    }
    if (w.stacks_requested) {
      for (const auto& [rank, text] : w.stacks) {
        localizer.AddNote(fmt::format("rank {} main thread: {}", rank, InnermostFrames(text)));
      }
      for (int32_t rank : w.expected) {
        if (w.stacks.count(rank)) continue;
        auto why = w.no_stacks.find(rank);
        if (why != w.no_stacks.end()) {
          std::string text = why->second.substr(0, 300);
          std::replace(text.begin(), text.end(), '\n', ' ');
          localizer.AddNote(
              fmt::format("rank {} could not take its Python stacks: {}", rank, text));
        } else {
          localizer.AddNote(
              fmt::format("rank {} sent no Python stacks (stuck in native code "
                          "holding the GIL, or gone?)",
                          rank));
        }
      }
      if (!w.stacks.empty()) {
        localizer.AddNote(fmt::format("every rank's Python stacks: {}",
                                      StacksPath(options_.report_dir, w.spec.id)));
      }
    }
    return localizer.Finish();
  };
  Diagnosis diagnosis = localize();
  // The localizer's findings name part of a group's sample: the digests cannot decide as
  // screened. Ask again in rounds (those peers suspects, the screen looser, the sample
  // larger), at most kMaxScreenRounds, before every full summary.
  std::vector<int32_t> named_in_sample;
  while (screen && !GeneralizeToGroups(*screen, &diagnosis, &named_in_sample)) {
    for (auto& summary : summaries) {
      const int32_t rank = summary.rank;
      w.summaries.insert_or_assign(rank, std::move(summary));
    }
    summaries.clear();
    std::optional<ScreenResult> next;
    if (screen->round < kMaxScreenRounds && w.screen) {
      next = w.screen->Refine(*screen, named_in_sample, screen->round + 1);
    }
    if (next && !next->full) {
      std::vector<int32_t> want;
      for (int32_t rank : next->ranks) {
        if (!w.summaries.count(rank)) want.push_back(rank);
      }
      Log(fmt::format(
          "window {}: a finding names {} of a group's sampled peers; round {}: asking for {} more "
          "full summaries ({} in all)",
          w.spec.id, named_in_sample.size(), next->round, want.size(), next->ranks.size()));
      FetchSummaries(&w, want);
      const std::set<int32_t> asked(next->ranks.begin(), next->ranks.end());
      not_asked.clear();
      for (int32_t rank : w.digested) {
        if (!w.summaries.count(rank) && !asked.count(rank)) not_asked.insert(rank);
      }
      missing.clear();
      for (int32_t rank : w.expected) {
        if (!w.summaries.count(rank) && !not_asked.count(rank)) missing.push_back(rank);
      }
      for (auto& [rank, sm] : w.summaries) summaries.push_back(std::move(sm));
      w.summaries.clear();
      screen = std::move(next);
      named_in_sample.clear();
      diagnosis = localize();
      continue;
    }
    // Rounds spent, or a round would ask for more than the screen's budgets: every summary.
    std::vector<int32_t> rest(not_asked.begin(), not_asked.end());
    Log(
        fmt::format("window {}: a finding names part of a group's sampled peers{}: asking for "
                    "every full summary ({} more)",
                    w.spec.id,
                    next ? " and another round would ask for too many"
                         : fmt::format(" after {} round(s)", screen->round),
                    rest.size()));
    not_asked.clear();
    FetchSummaries(&w, rest);
    missing.clear();
    for (int32_t rank : w.expected) {
      if (!w.summaries.count(rank)) missing.push_back(rank);
    }
    for (auto& [rank, sm] : w.summaries) summaries.push_back(std::move(sm));
    w.summaries.clear();
    diagnosis = localize();
    diagnosis.notes.push_back(fmt::format(
        "progressive disclosure: full path after the digest path and {} more round(s){}: a "
        "finding named part of a group's sampled peers ({})",
        screen->round, next ? " (the next would have asked for too many)" : "",
        next ? next->reason : screen->reason));
    break;
  }
  w.screen.reset();
  if (const std::string unknown = UnknownValuesLine(w.unknown); !unknown.empty()) {
    Log(fmt::format("window {}: {}", w.spec.id, unknown));
  }
  const auto t_localized = SteadyClock::now();
  std::string busy;  // the hang window found its job busy, not hung
  std::optional<BusyRecheck> recheck;
  if (w.stacks_requested) {
    HangAnalyzer hang;
    hang.set_busy_limit_ns(BusyLimitOf(w, workers));
    std::vector<double> means;
    for (int32_t rank : w.expected) {
      auto st = w.stacks.find(rank);
      auto wk = workers.find(rank);
      int64_t last_progress = 0;
      if (wk != workers.end() && !wk->second.iterations.empty()) {
        last_progress = wk->second.iterations.back().first;
        double sum = 0;
        size_t n = 0;
        for (auto it = wk->second.iterations.rbegin();
             it != wk->second.iterations.rend() && n < kIterationsForNote; ++it, ++n) {
          sum += static_cast<double>(it->second);
        }
        means.push_back(sum / static_cast<double>(n));
      }
      auto sm = std::find_if(summaries.begin(), summaries.end(),
                             [&](const WorkerSummary& s) { return s.rank == rank; });
      hang.AddRank(rank,
                   st == w.stacks.end() ? std::nullopt : std::optional<std::string>(st->second),
                   last_progress, sm == summaries.end() ? nullptr : &*sm);
    }
    int64_t mean_iteration = 0;
    if (!means.empty()) {
      std::nth_element(means.begin(), means.begin() + static_cast<std::ptrdiff_t>(means.size() / 2),
                       means.end());
      mean_iteration = static_cast<int64_t>(means[means.size() / 2]);
    }
    busy = hang.BusyVerdict(RealtimeNs());
    if (busy.empty()) {
      diagnosis.findings.insert(diagnosis.findings.begin(),
                                hang.Analyze(RealtimeNs(), mean_iteration));
    } else {
      // A main thread that runs Python all through the window is busy, not hung
      // (hang_analyzer.cc, "Busy, not hung"): a note, no PT-HANG, nothing to retract later.
      busy = fmt::format(
          "hang trigger of window {} retracted: {}: a pause for work outside "
          "the training loop, not a hang ({})",
          w.spec.id, busy, w.hang_trigger);
      diagnosis.notes.insert(diagnosis.notes.begin(), busy);
      Log(busy);
      recheck = BusyRecheckOf(w, workers);
      if (recheck) {
        Log(fmt::format(
            "window {}: looking again in {} unless an iteration completes: busy work stands in "
            "for progress for at most {} ({}x the silence that made the hang trigger)",
            w.spec.id,
            FormatDuration(
                static_cast<double>(std::max<int64_t>(recheck->due_ns - RealtimeNs(), 0))),
            FormatDuration(static_cast<double>(recheck->limit_ns)),
            HangAnalyzer::kBusyLimitFactor));
      }
    }
  }

  std::string perfetto_path;
  if (options_.perfetto) {
    FetchRecordings(&w);
    perfetto_path = WritePerfetto(w, diagnosis, &diagnosis.notes);
  }

  ReportInput input;
  input.diagnosis = &diagnosis;
  input.workers = &summaries;
  input.title =
      fmt::format("{}{}window {} ({})", options_.title, options_.title.empty() ? "" : " — ",
                  w.spec.id, WindowReasonName(w.spec.reason));
  if (!perfetto_path.empty()) input.perfetto_file = fs::path(perfetto_path).filename().string();

  WindowReport report;
  report.id = w.spec.id;
  report.reason = w.spec.reason;
  report.missing_ranks = missing;
  report.no_iterations = no_iterations;
  report.text = RenderText(input, options_.text);
  StatusOr<WrittenReport> written =
      WriteWindowReport(options_.report_dir, w.spec.id, w.spec.reason, input, StacksFile(w));
  const auto seconds_between = [](SteadyClock::time_point a, SteadyClock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  if (written.ok()) {
    report.json = std::move(written->json);
    report.json_path = written->json_path;
    report.html_path = written->html_path;
    report.stacks_path = written->stacks_path;
    report.perfetto_path = perfetto_path;
    Log(fmt::format(
        "window {} diagnosed ({} of {} ranks{}; localizer input {:.2f} s, localizing {:.2f} s, "
        "reports {:.2f} s): {}",
        w.spec.id, summaries.size(), w.expected.size(),
        not_asked.empty() ? "" : fmt::format(", {} more by their digests", not_asked.size()),
        seconds_between(t_start, t_added), seconds_between(t_added, t_localized),
        seconds_between(t_localized, SteadyClock::now()), report.json_path));
  } else {
    Log(fmt::format("window {}: the report could not be written: {}", w.spec.id,
                    written.status().message()));
  }
  report.diagnosis = std::move(diagnosis);
  std::lock_guard<std::mutex> lock(mu_);
  if (!busy.empty()) {
    if (retracted_.size() < 64) retracted_.push_back(busy);
    hang_window_taken_ = false;  // as RetractHangLocked: a later hang is still never refused
    // Unless an iteration came meanwhile (OnIteration cancels a recheck it finds).
    const bool progressed = std::any_of(workers_.begin(), workers_.end(), [&](const auto& wk) {
      return !wk.second.iterations.empty() && wk.second.iterations.back().first > w.hang_trigger_ns;
    });
    if (recheck && !progressed) busy_recheck_ = recheck;
  }
  if (w.stacks_requested && busy.empty()) {
    hang_report_window_ = w.spec.id;
    hang_report_ns_ = RealtimeNs();
    hang_report_trigger_ns_ = w.hang_trigger_ns;
    hang_report_title_ = input.title;
    hang_report_summaries_ = summaries;
    hang_report_stacks_ = StacksFile(w);
  }
  reports_.push_back(std::move(report));
}

void WindowCoordinator::RetractHangReport(const std::string& why) {
  uint64_t id = 0;
  Diagnosis diagnosis;
  std::vector<WorkerSummary> summaries;
  std::map<int32_t, std::string> stacks;
  std::string title;
  std::string perfetto_path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = retract_report_window_;
    auto it = std::find_if(reports_.begin(), reports_.end(),
                           [&](const WindowReport& r) { return r.id == id; });
    if (it == reports_.end()) return;
    diagnosis = it->diagnosis;
    perfetto_path = it->perfetto_path;
    summaries = hang_report_summaries_;
    stacks = hang_report_stacks_;
    title = hang_report_title_;
  }
  // The PT-HANG finding becomes a note: the job was not hung.
  std::vector<std::string> notes;
  std::vector<Finding> kept;
  for (Finding& f : diagnosis.findings) {
    if (f.code == "PT-HANG") {
      notes.push_back(fmt::format("retracted: \"{}\" — {}", f.title, why));
    } else {
      kept.push_back(std::move(f));
    }
  }
  diagnosis.findings = std::move(kept);
  diagnosis.notes.insert(diagnosis.notes.begin(), notes.begin(), notes.end());
  ReportInput input;
  input.diagnosis = &diagnosis;
  input.workers = &summaries;
  input.title = title + " — hang retracted: the job made progress again";
  if (!perfetto_path.empty()) input.perfetto_file = fs::path(perfetto_path).filename().string();
  const std::string text = RenderText(input, options_.text);
  StatusOr<WrittenReport> written =
      WriteWindowReport(options_.report_dir, id, WindowReason::kHang, input, stacks);
  Log(written.ok() ? fmt::format("window {}: hang report retracted and rewritten: {}", id,
                                 written->json_path)
                   : fmt::format("window {}: the retracted report could not be rewritten: {}", id,
                                 written.status().message()));
  std::lock_guard<std::mutex> lock(mu_);
  for (WindowReport& r : reports_) {
    if (r.id != id) continue;
    if (written.ok()) r.json = std::move(written->json);  // else the file keeps the first one
    r.diagnosis = std::move(diagnosis);
    r.text = text;
    r.retracted = true;
    break;
  }
  if (retracted_.size() < 64) retracted_.push_back(why);
}

}  // namespace perftracker
