#include "perftracker/collector/agent_rings.h"

#include <algorithm>

#include <fmt/core.h>

namespace perftracker {
namespace {

constexpr size_t kBatch = 4096;
// Events may start this much before the window's start and still count: the agent turns
// its hooks on when it sees the start on its own clock reading, a few µs either way.
constexpr int64_t kStartSlackNs = 100'000'000;
// The agent writes a call when it returns, so an enclosing call arrives after everything it
// contains; the summarizer nests it correctly while it is within this many events of its
// start (an iteration's worth of calls of a call-heavy model). 48 bytes per buffered event.
constexpr size_t kReorderWindow = 1u << 16;

// The kind the summarizer sees for an agent's function. A Python call of a DataLoader
// iterator's __next__ (torch's _BaseDataLoaderIter.__next__, "_BaseDataLoaderIter.__next__
// (dataloader.py:628)") is data loading, with everything it calls: the Dataset's
// __getitem__, the sampler, collate. This is the rule the trace importer applies to
// torch.profiler's "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" range.
EventKind SummaryKind(EventKind kind, std::string_view name) {
  if (kind != EventKind::kPythonCall) return kind;
  const std::string_view qualname = name.substr(0, name.find(' '));
  constexpr std::string_view kIterNext = "DataLoaderIter.__next__";
  if (qualname.size() >= kIterNext.size() &&
      qualname.substr(qualname.size() - kIterNext.size()) == kIterNext) {
    return EventKind::kDataLoad;
  }
  return kind;
}

}  // namespace

AgentRings::AgentRings(std::unique_ptr<AgentShm> shm, WorkerInfo worker)
    : worker_(std::move(worker)) {
  sources_.emplace_back();
  sources_[0].shm = std::move(shm);
  batch_.resize(kBatch);
}

void AgentRings::AttachSource(std::unique_ptr<AgentShm> shm) {
  Source source;
  source.shm = std::move(shm);
  source.dropped_at_start = source.shm->TotalDropped();
  sources_.push_back(std::move(source));
}

uint64_t AgentRings::TotalDroppedSince() {
  uint64_t dropped = 0;
  for (Source& source : sources_) dropped += source.shm->TotalDropped() - source.dropped_at_start;
  return dropped;
}

AgentRings::~AgentRings() = default;

void AgentRings::SyncFunctions(Source& source) {
  const uint32_t published = source.shm->functions_published();
  for (uint32_t id = static_cast<uint32_t>(source.local_ids.size()); id < published; ++id) {
    // Copy the slot first: the agent does not rewrite published slots, but a broken or
    // hostile agent might, and every check must see the same values.
    const FunctionSlot slot = source.shm->function(id);
    const bool parent_ok = slot.parent == FunctionTable::kNoParent || slot.parent < id;
    const bool valid = slot.id == id && parent_ok && slot.kind < kNumEventKinds &&
                       slot.name_len <= FunctionSlot::kMaxName;
    uint32_t local = 0;
    if (valid) {
      const uint32_t parent = slot.parent == FunctionTable::kNoParent
                                  ? FunctionTable::kNoParent
                                  : source.local_ids[slot.parent];
      const std::string_view name(slot.name, slot.name_len);
      const EventKind kind = SummaryKind(static_cast<EventKind>(slot.kind), name);
      local = functions_.Intern(kind, name, parent);
      if (kind != static_cast<EventKind>(slot.kind) && kind == EventKind::kDataLoad) {
        iterator_next_callers_.insert(parent);
      }
    } else {
      ++stats_.invalid_functions;
      local = functions_.Intern(EventKind::kPythonCall, fmt::format("<invalid function {}>", id));
      invalid_functions_.insert(local);
    }
    source.local_ids.push_back(local);
  }
}

size_t AgentRings::Drain(size_t max_events) {
  size_t total = 0;
  for (Source& source : sources_) {
    ShmHeader* h = source.shm->header();
    const int rings =
        static_cast<int>(std::min(h->rings_claimed.load(std::memory_order_acquire), h->num_rings));
    for (int r = 0; r < rings && total < max_events; ++r) {
      for (;;) {
        const size_t want = std::min(kBatch, max_events - total);
        if (want == 0) break;
        const size_t n = source.shm->Pop(r, batch_.data(), want);
        if (n == 0) break;
        total += n;
        stats_.events_drained += n;
        // Every function an event in this batch uses was published before the event was
        // pushed: syncing after the pop makes them all known.
        SyncFunctions(source);
        for (size_t i = 0; i < n; ++i) Route(source, r, batch_[i]);
        if (n < want) break;
      }
    }
  }
  return total;
}

void AgentRings::Route(Source& source, int ring, const Event& event) {
  if (!window_ || event.start_ns < window_->start_ns - kStartSlackNs ||
      event.start_ns >= window_end_ns_) {
    ++stats_.events_outside;
    return;
  }
  if (event.function_id >= source.local_ids.size() ||
      static_cast<uint8_t>(event.kind) >= kNumEventKinds) {
    ++stats_.malformed_events;
    ++window_malformed_;
    return;
  }
  Event ev = event;
  ev.function_id = source.local_ids[event.function_id];
  if (ev.group != 0) {
    // Only the agent declares groups (ids of its own), and only collectives carry one.
    const bool known = &source == &sources_[0] && ev.kind == EventKind::kCollective &&
                       groups_.count(ev.group) != 0;
    if (!known && ev.kind == EventKind::kCollective && &source == &sources_[0]) {
      ++stats_.collectives_of_unknown_groups;
    }
    if (!known) ev.group = 0;
  }
  // The agent's DataLoader wrapper marks each next() with a kDataLoad event around the call
  // of the iterator's own __next__, which its Python profile records too, under the same
  // caller: one call. Summarized once, as that Python call (with what it calls under it);
  // the marker alone only where the profile has no such call under its caller.
  if (ev.kind == EventKind::kDataLoad && !iterator_next_callers_.empty() &&
      iterator_next_callers_.count(functions_.Get(ev.function_id).parent) != 0) {
    ++stats_.duplicate_data_load_markers;
    return;
  }
  if (ev.kind == EventKind::kPythonCall) ev.kind = functions_.Get(ev.function_id).kind;
  if (tracks_announced_.insert(ev.track_id).second) {
    TrackInfo track;
    track.track_id = ev.track_id;
    track.kind =
        (ev.flags & kEventFlagOnDevice) ? TrackKind::kDeviceStream : TrackKind::kHostThread;
    const uint64_t tid = source.shm->ring_header(ring)->thread_id;
    track.name = fmt::format("thread {}", tid != 0 ? tid : ev.track_id);
    summarizer_->OnTrack(track);
    if (recording_) recording_->OnTrack(track);
  }
  if (ev.kind == EventKind::kIteration) saw_iteration_event_ = true;
  if (!invalid_functions_.empty() && invalid_functions_.count(ev.function_id) != 0) {
    ++window_invalid_function_events_;
  }
  ++stats_.events_in_window;
  summarizer_->OnEvent(ev);
  if (recording_) recording_->OnEvent(ev);
}

void AgentRings::BeginWindow(const WindowSpec& window) {
  window_ = window;
  window_end_ns_ = window.end_ns();
  SummarizerOptions options;
  options.reorder_window = kReorderWindow;
  summarizer_ = std::make_unique<WindowSummarizer>(&functions_, options);
  for (const auto& [id, group] : groups_) summarizer_->OnProcessGroup(group);
  tracks_announced_.clear();
  for (Source& source : sources_) source.dropped_at_start = source.shm->TotalDropped();
  window_malformed_ = 0;
  window_invalid_function_events_ = 0;
  window_sample_problems_ = SummaryStats();
  agent_dropped_ = 0;
  agent_events_ = 0;
  agent_gpu_stopped_ns_ = 0;
  saw_iteration_event_ = false;
  iterations_.clear();
  recording_.reset();
  finished_recording_.reset();
  if (record_cap_ > 0) {
    recording_ = std::make_unique<RankTrace>();
    recording_->set_max_events(record_cap_);
  }
}

void AgentRings::TruncateWindow(int64_t end_ns) {
  if (window_) window_end_ns_ = std::max(window_->start_ns, std::min(window_end_ns_, end_ns));
}

void AgentRings::AddMetric(const MetricSample& sample) {
  if (!window_ || sample.time_ns < window_->start_ns || sample.time_ns > window_end_ns_) return;
  summarizer_->OnMetric(sample);
}

void AgentRings::CountSampleProblem(SampleProblem problem, uint64_t count, int64_t time_ns) {
  if (!window_ || time_ns < window_->start_ns || time_ns > window_end_ns_) return;
  SummaryStats& p = window_sample_problems_;
  switch (problem) {
    case SampleProblem::kProcessGone:
      p.metric_samples_process_gone += count;
      break;
    case SampleProblem::kUnreadable:
      p.metric_reads_failed += count;
      break;
    case SampleProblem::kTruncated:
      p.metric_readings_truncated += count;
      break;
  }
}

void AgentRings::AddIteration(int64_t end_ns, int64_t duration_ns) {
  if (!window_) return;
  const int64_t start_ns = end_ns - duration_ns;
  if (start_ns < window_->start_ns || end_ns > window_end_ns_) return;
  if (iterations_.size() < 100000) iterations_.emplace_back(start_ns, end_ns);
}

void AgentRings::DeclareProcessGroup(const ProcessGroupInfo& group) {
  if (group.id == 0) return;
  if (groups_.size() >= kMaxAgentProcessGroups && groups_.count(group.id) == 0) {
    ++stats_.process_groups_dropped;
    return;
  }
  ProcessGroupInfo& g = groups_[group.id];
  g = group;
  if (!group.backend.empty()) g.name = fmt::format("{} ({})", group.name, group.backend);
  ++stats_.process_groups;
  if (summarizer_) summarizer_->OnProcessGroup(g);
}

void AgentRings::SetAgentCounts(uint64_t events, uint64_t dropped, int64_t gpu_stopped_ns) {
  agent_events_ = events;
  agent_dropped_ = dropped;
  agent_gpu_stopped_ns_ = gpu_stopped_ns;
}

WorkerSummary AgentRings::FinishWindow() {
  // What the agent pushed before it turned its hooks off is in the rings now.
  // (Bounded: an agent that keeps pushing cannot keep the collector here.)
  constexpr size_t kFinalDrain = 1u << 20;
  for (int i = 0; i < 4 && Drain(kFinalDrain) == kFinalDrain; ++i) {
  }
  WorkerSummary summary = summarizer_->Finish();
  summary.rank = worker_.rank;
  summary.host = worker_.host;
  summary.source = fmt::format("pid {}", worker_.pid);
  if (summary.stats.events == 0) {
    summary.window_start_ns = window_->start_ns;
    summary.window_end_ns = window_end_ns_;
  }
  // The always-on detector's iterations, when the rings carried none: durations only (the
  // breakdown needs the events' nesting, which these do not carry).
  if (summary.iterations.empty() && !saw_iteration_event_) {
    std::sort(iterations_.begin(), iterations_.end());
    for (const auto& [start, end] : iterations_) {
      IterationSummary it;
      it.start_ns = start;
      it.duration_ns = end - start;
      summary.iterations.push_back(it);
    }
  }
  const uint64_t shm_dropped = TotalDroppedSince();
  summary.stats.dropped_events += std::max(shm_dropped, agent_dropped_);
  summary.stats.malformed_events += window_malformed_;
  summary.stats.invalid_function_events += window_invalid_function_events_;
  summary.stats.metric_samples_process_gone += window_sample_problems_.metric_samples_process_gone;
  summary.stats.metric_reads_failed += window_sample_problems_.metric_reads_failed;
  summary.stats.metric_readings_truncated += window_sample_problems_.metric_readings_truncated;
  if (agent_gpu_stopped_ns_ > 0) {
    // The agent gave CUPTI up to a torch.profiler: the window's GPU data stops there. At
    // least 1 ms, so that a yield at the window's very end is still noted.
    const int64_t stopped = std::clamp(agent_gpu_stopped_ns_, window_->start_ns, window_end_ns_);
    summary.stats.gpu_untraced_ms +=
        std::max<uint64_t>(1, static_cast<uint64_t>(window_end_ns_ - stopped) / 1'000'000);
  }
  if (summary.stats.dropped_events > 0 && summary.stats.first_problem.empty()) {
    summary.stats.first_problem = fmt::format(
        "{} events were dropped by the agent (full rings): raise --ring-events or --rings",
        summary.stats.dropped_events);
  }
  if (recording_) {
    // Self-contained: a copy of the function table (same ids: interned in id order).
    auto trace = std::make_unique<RankTrace>();
    for (uint32_t id = 0; id < functions_.size(); ++id) {
      const FunctionTable::Entry& f = functions_.Get(id);
      trace->functions()->Intern(f.kind, f.name, f.parent);
    }
    trace->rank = worker_.rank;
    trace->host = worker_.host;
    trace->source = summary.source;
    for (const TrackInfo& t : recording_->tracks()) trace->OnTrack(t);
    *trace->mutable_not_recorded() = recording_->not_recorded();
    trace->AdoptEvents(recording_->TakeEvents());
    finished_recording_ = std::move(trace);
  }
  AbandonWindow();
  return summary;
}

void AgentRings::AbandonWindow() {
  window_.reset();
  summarizer_.reset();
  tracks_announced_.clear();
  iterations_.clear();
  recording_.reset();
}

}  // namespace perftracker
