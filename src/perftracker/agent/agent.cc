#include "perftracker/agent/agent.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "perftracker/agent/fork_gate.h"
#include "perftracker/core/realtime_clock.h"
#include "perftracker/sources/python/tsc_clock.h"

namespace perftracker {
namespace {

using nlohmann::json;

constexpr int64_t kTickNs = 50'000'000;           // control loop wake-up when idle
constexpr int64_t kFirstBackoffNs = 100'000'000;  // first reconnect delay
constexpr int64_t kByeFlushNs = 300'000'000;      // how long Stop() waits to flush bye
constexpr const char* kIterationName = "iteration";
constexpr int64_t kClockCalibrationNs = 50'000'000;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::optional<int64_t> Int(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  if (it->is_number_float()) return static_cast<int64_t>(it->get<double>());
  return it->get<int64_t>();
}

}  // namespace

Agent::Agent(AgentConfig config)
    : config_(std::move(config)),
      detector_(config_.options.detector),
      outbox_(config_.options.outbox_capacity),
      groups_(std::make_unique<ProcessGroupSlot[]>(kMaxProcessGroups)) {}

StatusOr<std::unique_ptr<Agent>> Agent::Create(AgentConfig config) {
  std::unique_ptr<Agent> agent(new Agent(std::move(config)));
  Agent& a = *agent;
  a.creator_pid_ = getpid();
  a.rank_ = a.config_.rank;
  a.local_rank_ = a.config_.local_rank;
  a.world_size_ = a.config_.world_size;
  auto shm = AgentShm::Create(a.config_.shm_path, a.config_.rank, a.config_.options.shm);
  if (!shm.ok()) return shm.status();
  a.shm_ = std::move(shm.value());
  auto profiler = PythonProfiler::Create(a.shm_.get());
  if (!profiler.ok()) {
    unlink(a.config_.shm_path.c_str());
    return profiler.status();
  }
  a.profiler_ = std::move(profiler.value());
  a.profiler_->set_prefer_eval_hook(a.config_.options.eval_hook);
  a.gpu_ = std::make_unique<GpuTracing>(a.config_.shm_path, a.config_.rank);
  a.wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ForkGate::Install();  // before the threads that use it start
  a.gil_.Start();
  // The worker runs Python for the agent (stack dumps): never recorded as the job's work.
  a.gil_.Submit([] { PythonProfiler::IgnoreCurrentThread(); });
  a.control_thread_ = std::thread([&a] {
    try {
      a.ControlLoop();
    } catch (...) {  // no exception crosses the thread; the job runs on without the agent
      std::fprintf(stderr, "perftracker agent: control thread stopped on an internal error\n");
    }
  });
  return agent;
}

Agent::~Agent() {
  if (!abandoned_) Stop();
  Py_XDECREF(stack_dumper_);
  Py_XDECREF(gpu_probe_);
}

void Agent::Wake() {
  if (wake_fd_ < 0) return;
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void Agent::Stop() {
  if (stopped_ || abandoned_) return;
  stopped_ = true;
  stopping_ = true;
  // GPU tracing off first: its records reach the -cupti file before the last window_done.
  Py_BEGIN_ALLOW_THREADS
  gpu_->End();
  Py_END_ALLOW_THREADS
  // Hooks off first (we hold the GIL, so no GIL task is running); the final window_done goes
  // out before bye.
  {
    std::lock_guard<std::mutex> lock(window_mu_);
    if (profiler_->recording()) {
      const ProfilerCounts counts = profiler_->Stop();
      recording_ = false;
      if (window_) {
        FinishWindowLocked(window_->id, counts);  // the collector's window, cut short by exit
      } else {
        window_events_ += counts.events;  // a local ProfileNow() window
        window_dropped_ += counts.dropped;
      }
    }
    window_.reset();
    requested_.reset();
  }
  stop_requested_ = true;
  Wake();
  Py_BEGIN_ALLOW_THREADS
  if (control_thread_.joinable()) control_thread_.join();
  gil_.Stop();
  gpu_->End();  // a window that began while this was stopping
  Py_END_ALLOW_THREADS
  if (profiler_->recording()) profiler_->Stop();
  recording_ = false;
  if (wake_fd_ >= 0) close(wake_fd_);
  wake_fd_ = -1;
  if (getpid() == creator_pid_) {
    unlink(config_.shm_path.c_str());
    gpu_->RemoveFile();
  }
}

void Agent::AbandonAfterFork() {
  abandoned_ = true;
  stopping_ = true;
  recording_ = false;
  profiler_->AbandonAfterFork();
  // CUPTI's state (and the parent's -cupti file) belong to the parent: never disabled here.
  [[maybe_unused]] GpuTracing* parents = gpu_.release();
  // The threads and the parent's file belong to the parent: never joined, never unlinked.
  // The caller leaks this object (its std::thread members name threads of the parent).
}

void Agent::Push(const OutMessage& m) {
  if (!outbox_.TryPush(m)) messages_dropped_.fetch_add(1, std::memory_order_relaxed);
}

void Agent::PushTrigger(const Trigger& trigger) {
  OutMessage m;
  m.type = OutMessage::Type::kTrigger;
  m.reason = trigger.reason;
  const size_t n = std::min(trigger.detail.size(), sizeof(m.detail) - 1);
  std::memcpy(m.detail, trigger.detail.data(), n);
  m.detail[n] = '\0';
  triggers_.fetch_add(1, std::memory_order_relaxed);
  Push(m);
}

void Agent::TrainingEnded(std::string_view detail) {
  if (stopping_.load(std::memory_order_relaxed) ||
      training_ended_.exchange(true, std::memory_order_relaxed)) {
    return;
  }
  OutMessage m;
  m.type = OutMessage::Type::kEnded;
  const size_t n = std::min(detail.size(), sizeof(m.detail) - 1);
  std::memcpy(m.detail, detail.data(), n);
  m.detail[n] = '\0';
  Push(m);
  Wake();
}

void Agent::OnMarker(Marker marker, std::string_view name, int64_t start_ns, int64_t end_ns) {
  if (stopping_.load(std::memory_order_relaxed)) return;
  markers_.fetch_add(1, std::memory_order_relaxed);
  const bool rec = recording_.load(std::memory_order_relaxed);
  if (rec) {
    profiler_->Record(
        marker == Marker::kDataLoaderNext ? EventKind::kDataLoad : EventKind::kOptimizerStep, name,
        true, start_ns, end_ns, 0);
  }
  // A marker after the training ended: it trains again (a second process group, a new loop).
  if (training_ended_.load(std::memory_order_relaxed)) {
    training_ended_.store(false, std::memory_order_relaxed);
  }
  if (marker_busy_.test_and_set(std::memory_order_acquire)) {
    markers_skipped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (rearm_pending_.load(std::memory_order_relaxed) && rearm_pending_.exchange(false)) {
    detector_.Rearm();
  }
  int64_t it_start = 0;
  int64_t it_end = 0;
  const int64_t t = marker == Marker::kDataLoaderNext ? start_ns : end_ns;
  if (detector_.OnMarker(marker, t, &it_start, &it_end)) {
    iterations_.fetch_add(1, std::memory_order_relaxed);
    OutMessage m;
    m.type = OutMessage::Type::kIteration;
    m.iteration_end_ns = it_end;
    m.iteration_ns = it_end - it_start;
    Push(m);
    if (rec) profiler_->Record(EventKind::kIteration, kIterationName, false, it_start, it_end, 0);
    if (!rec && !window_open_.load(std::memory_order_relaxed)) {
      if (std::optional<Trigger> trigger = detector_.CheckSlowdown()) PushTrigger(*trigger);
    }
  }
  marker_busy_.clear(std::memory_order_release);
}

void Agent::RecordCollective(std::string_view name, int64_t start_ns, int64_t end_ns,
                             uint64_t bytes, bool nest, uint16_t group) {
  if (recording_.load(std::memory_order_relaxed)) {
    profiler_->Record(EventKind::kCollective, name, nest, start_ns, end_ns, bytes, group);
  }
}

uint16_t Agent::DeclareProcessGroup(std::string_view name, std::string_view backend,
                                    const std::vector<int32_t>& ranks, uint32_t size) {
  const uint32_t n = groups_published_.load(std::memory_order_relaxed);
  if (n >= kMaxProcessGroups) {
    process_groups_dropped_.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  ProcessGroupSlot& slot = groups_[n];
  slot.name.assign(name.substr(0, 256));
  slot.backend.assign(backend.substr(0, 64));
  slot.ranks.assign(ranks.begin(), ranks.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                       ranks.size(), kMaxProcessGroupRanks)));
  slot.size = std::max<uint32_t>(size, static_cast<uint32_t>(slot.ranks.size()));
  groups_published_.store(n + 1, std::memory_order_release);
  Wake();
  return static_cast<uint16_t>(n + 1);
}

void Agent::NoteCommThread(int64_t issuer_tid) {
  const auto tid = static_cast<int32_t>(::syscall(SYS_gettid));
  if (tid != issuer_tid) NameCommThread(tid);
}

void Agent::NameCommThread(int32_t tid) {
  if (tid <= 0 || tid == static_cast<int32_t>(::getpid())) return;
  const uint32_t n = comm_tids_published_.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i) {
    if (comm_tids_[i].load(std::memory_order_relaxed) == tid) return;
  }
  if (n >= kMaxCommThreads) {
    comm_threads_dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  comm_tids_[n].store(tid, std::memory_order_relaxed);
  comm_tids_published_.store(n + 1, std::memory_order_release);
  Wake();
}

void Agent::SetRank(int rank, int local_rank, int world_size) {
  rank_ = rank;
  if (local_rank >= 0) local_rank_ = local_rank;
  if (world_size >= 0) world_size_ = world_size;
  shm_->header()->rank = rank;
  hello_dirty_ = true;
  Wake();
}

void Agent::RequestWindow(int64_t window, int64_t start_ns, int64_t duration_ns) {
  {
    std::lock_guard<std::mutex> lock(window_mu_);
    requested_ = Window{window, start_ns, start_ns + std::max<int64_t>(duration_ns, 0),
                        Window::State::kScheduled};
  }
  Wake();
}

void Agent::ProfileNow(int64_t duration_ns) {
  std::lock_guard<std::mutex> lock(window_mu_);
  if (window_ || profiler_->recording()) return;
  profiler_->Start(RealtimeNs() + duration_ns);
  recording_ = true;
}

ProfilerCounts Agent::ProfileStop() {
  std::lock_guard<std::mutex> lock(window_mu_);
  if (window_) return {};  // a collector window owns the profiler
  recording_ = false;
  ProfilerCounts counts = profiler_->Stop();
  window_events_ += counts.events;
  window_dropped_ += counts.dropped;
  return counts;
}

void Agent::SetStackDumper(PyObject* fn) {
  Py_XINCREF(fn);
  Py_XDECREF(stack_dumper_);
  stack_dumper_ = fn;
}

void Agent::SetGpuProbe(PyObject* fn) {
  Py_XINCREF(fn);
  Py_XDECREF(gpu_probe_);
  gpu_probe_ = fn;
}

void Agent::BeginGpuTracing() {
  if (!config_.options.gpu_tracing || gpu_probe_ == nullptr || !gpu_->stats().available) return;
  PyObject* verdict = PyObject_CallNoArgs(gpu_probe_);
  long code = 0;
  std::string text;
  if (verdict != nullptr && PyTuple_Check(verdict) && PyTuple_Size(verdict) == 2) {
    code = PyLong_AsLong(PyTuple_GetItem(verdict, 0));
    const char* t = PyUnicode_AsUTF8(PyTuple_GetItem(verdict, 1));
    if (t != nullptr) text = t;
  }
  Py_XDECREF(verdict);
  PyErr_Clear();  // a failing probe means no GPU tracing, never an exception in the job
  if (code == 2) {
    gpu_->SkipBecause(text);
    return;
  }
  // gpu_tracing=2: trace even when torch has not initialized CUDA here (CUDA through another
  // library: CuPy, JAX, a C++ extension of the job's own).
  if (code != 1 && config_.options.gpu_tracing != 2) return;
  // An explicit library wins over the probe's guess (torch's wheel's copy).
  const char* library = std::getenv("PERFTRACKER_CUPTI_LIBRARY");
  const std::string explicit_library = library != nullptr ? library : "";
  Py_BEGIN_ALLOW_THREADS
  gpu_->Begin(explicit_library, text);
  Py_END_ALLOW_THREADS
}

void Agent::EndGpuTracing() {
  Py_BEGIN_ALLOW_THREADS
  gpu_->End();
  Py_END_ALLOW_THREADS
}

bool Agent::YieldGpuTracing(const std::string& who) {
  if (gpu_ == nullptr) return false;
  bool yielded = false;
  Py_BEGIN_ALLOW_THREADS
  yielded = gpu_->YieldTo(who);
  Py_END_ALLOW_THREADS
  // Only a window traces, and its window_done comes after this (EndGpuTracing then waited for
  // the yield): that window_done says where its GPU data stops.
  if (yielded) gpu_yielded_ns_.store(RealtimeNs(), std::memory_order_relaxed);
  return yielded;
}

AgentStats Agent::stats() const {
  AgentStats s;
  s.markers = markers_;
  s.markers_skipped = markers_skipped_;
  s.iterations = iterations_;
  s.triggers = triggers_;
  s.messages_sent = messages_sent_;
  s.messages_dropped = messages_dropped_;
  s.connects = connects_;
  s.connect_failures = connect_failures_;
  s.messages_received = messages_received_;
  s.unknown_messages = unknown_messages_;
  s.malformed_messages = malformed_messages_;
  s.oversized_messages = oversized_messages_;
  s.windows = windows_;
  s.windows_ignored = windows_ignored_;
  s.stack_dumps = stack_dumps_;
  s.window_events = window_events_;
  s.window_dropped = window_dropped_;
  s.configs_applied = configs_applied_;
  s.process_groups = groups_published_.load();
  s.process_groups_dropped = process_groups_dropped_;
  s.comm_threads = comm_tids_published_.load();
  s.comm_threads_dropped = comm_threads_dropped_;
  return s;
}

// ---------------------------------------------------------------- control thread

void Agent::SendJson(const std::string& line) {
  if (channel_.connected() && channel_.SendLine(line)) {
    messages_sent_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  messages_dropped_.fetch_add(1, std::memory_order_relaxed);
  if (!channel_.connected() && !config_.socket_path.empty() && !reported_lost_ &&
      connects_.load() > 0) {
    reported_lost_ = true;
    std::fprintf(stderr,
                 "perftracker agent: lost the collector (%s); training continues, reconnecting "
                 "in the background\n",
                 channel_.last_error().c_str());
  }
}

void Agent::SendHello() {
  json j = {{"type", "hello"},
            {"pid", static_cast<int64_t>(getpid())},
            {"rank", rank_.load()},
            {"world_size", world_size_.load()},
            {"local_rank", local_rank_.load()},
            {"host", config_.host},
            {"shm", config_.shm_path},
            {"version", kAgentProtocolVersion}};
  SendJson(Dump(j));
  groups_sent_ = 0;  // a collector that hears a hello hears every group after it
  SendProcessGroups();
  comm_tids_sent_ = 0;
  SendCommThreads();
}

void Agent::SendCommThreads() {
  if (!channel_.connected()) return;
  const uint32_t n = comm_tids_published_.load(std::memory_order_acquire);
  for (; comm_tids_sent_ < n; ++comm_tids_sent_) {
    SendJson(Dump(json{{"type", "comm_thread"},
                       {"rank", rank_.load()},
                       {"tid", comm_tids_[comm_tids_sent_].load(std::memory_order_relaxed)}}));
  }
}

void Agent::SendProcessGroups() {
  if (!channel_.connected()) return;
  const uint32_t n = groups_published_.load(std::memory_order_acquire);
  for (; groups_sent_ < n; ++groups_sent_) {
    const ProcessGroupSlot& g = groups_[groups_sent_];
    SendJson(Dump(json{{"type", "process_group"},
                       {"rank", rank_.load()},
                       {"group", groups_sent_ + 1},
                       {"name", g.name},
                       {"backend", g.backend},
                       {"ranks", g.ranks},
                       {"size", g.size}}));
  }
}

void Agent::TryConnect(int64_t now) {
  if (config_.socket_path.empty() || channel_.connected() || now < next_connect_ns_) return;
  const Status st = channel_.Connect(config_.socket_path);
  if (st.ok()) {
    connects_.fetch_add(1, std::memory_order_relaxed);
    backoff_ns_ = 0;
    hello_dirty_ = false;
    SendHello();
    return;
  }
  connect_failures_.fetch_add(1, std::memory_order_relaxed);
  if (!reported_unreachable_ && connects_.load() == 0) {
    reported_unreachable_ = true;
    std::fprintf(stderr,
                 "perftracker agent: collector at %s unreachable (%s); training continues "
                 "without it (retrying in the background)\n",
                 config_.socket_path.c_str(), st.message().c_str());
  }
  backoff_ns_ = backoff_ns_ == 0 ? kFirstBackoffNs
                                 : std::min(backoff_ns_ * 2, config_.options.reconnect_max_ns);
  next_connect_ns_ = now + backoff_ns_;
}

void Agent::DrainOutbox() {
  OutMessage m;
  const int rank = rank_.load();
  while (outbox_.TryPop(&m)) {
    ForkGate::Yield();
    json j;
    switch (m.type) {
      case OutMessage::Type::kIteration:
        j = {{"type", "iteration"},
             {"rank", rank},
             {"end_ns", m.iteration_end_ns},
             {"duration_ns", m.iteration_ns}};
        break;
      case OutMessage::Type::kTrigger:
        j = {{"type", "trigger"},
             {"rank", rank},
             {"reason", std::string(WindowReasonName(m.reason))},
             {"detail", std::string(m.detail)}};
        break;
      case OutMessage::Type::kEnded:
        j = {{"type", "ended"}, {"rank", rank}, {"detail", std::string(m.detail)}};
        break;
      case OutMessage::Type::kWindowDone:
        // The groups of the window's collectives were declared before they ran: the
        // collector hears them before it summarizes the window.
        SendProcessGroups();
        j = {{"type", "window_done"},
             {"rank", rank},
             {"window", m.window_id},
             {"events", m.window_events},
             {"dropped", m.window_dropped}};
        if (m.gpu_stopped_ns > 0) j["gpu_stopped_ns"] = m.gpu_stopped_ns;
        break;
    }
    SendJson(Dump(j));
  }
}

void Agent::FinishWindowLocked(int64_t window, const ProfilerCounts& counts) {
  window_events_ += counts.events;
  window_dropped_ += counts.dropped;
  OutMessage m;
  m.type = OutMessage::Type::kWindowDone;
  m.window_id = window;
  m.window_events = counts.events;
  m.window_dropped = counts.dropped;
  m.gpu_stopped_ns = gpu_yielded_ns_.exchange(0, std::memory_order_relaxed);
  Push(m);
  rearm_pending_ = true;
  window_open_ = false;
}

void Agent::StartWindow(const Window& w) {
  // window_mu_ held.
  if (window_ || profiler_->recording()) {
    windows_ignored_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  windows_.fetch_add(1, std::memory_order_relaxed);
  window_ = w;
  window_open_ = true;
}

void Agent::HandleWindowTimers(int64_t now) {
  std::lock_guard<std::mutex> lock(window_mu_);
  if (requested_) {
    StartWindow(*requested_);
    requested_.reset();
  }
  if (!window_) return;
  Window& w = *window_;
  if (w.state == Window::State::kScheduled && now >= w.start_ns) {
    w.state = Window::State::kActive;
    const int64_t end = w.end_ns;
    gil_.Submit([this, end] {
      {
        std::lock_guard<std::mutex> l(window_mu_);
        if (stopping_ || !window_ || profiler_->recording()) return;
        profiler_->Start(end);
        recording_ = true;
      }
      detector_.WindowBegan();  // the rearm after it starts from what the window saw
      BeginGpuTracing();
    });
  }
  if (w.state == Window::State::kActive && now >= w.end_ns) {
    w.state = Window::State::kStopping;
    const int64_t id = w.id;
    gil_.Submit([this, id] {
      EndGpuTracing();  // before window_done: the GPU records are in the -cupti file
      std::lock_guard<std::mutex> l(window_mu_);
      if (stopping_ || !window_) return;
      recording_ = false;
      const ProfilerCounts counts = profiler_->Stop();
      FinishWindowLocked(id, counts);
      window_.reset();
      Wake();
    });
  }
}

void Agent::EndWindowNow(int64_t window, int64_t now_ns) {
  std::lock_guard<std::mutex> lock(window_mu_);
  if (!window_ || window_->id != window) return;
  Window& w = *window_;
  if (w.state == Window::State::kScheduled) {
    // Ended before it began: nothing was recorded.
    FinishWindowLocked(w.id, ProfilerCounts{});
    window_.reset();
    Wake();
    return;
  }
  // Active: the next HandleWindowTimers() stops the hooks; stopping: already on its way.
  if (w.state == Window::State::kActive) w.end_ns = std::min(w.end_ns, now_ns);
  Wake();
}

void Agent::ApplyConfig(const nlohmann::json& j) {
  // The detector's thresholds as agent option keys ({"type": "config", "hang_factor": 3});
  // anything else in the message, or a bad value, makes it malformed and changes nothing.
  std::string text = "{";
  for (const auto& [key, value] : j.items()) {
    if (key == "type") continue;
    if (!value.is_number()) {
      text.clear();
      break;
    }
    text += (text.size() > 1 ? "," : "") + json(key).dump() + ":" + value.dump();
  }
  StatusOr<AgentOptions> parsed =
      text.empty() ? StatusOr<AgentOptions>(Status::InvalidArgument("a value is not a number"))
                   : ParseAgentOptions(text + "}");
  DetectorOptions merged = config_.options.detector;
  bool ok = parsed.ok();
  if (ok) {
    const DetectorOptions& p = parsed->detector;
    for (const auto& [key, value] : j.items()) {
      if (key == "type") continue;
      if (key == "slowdown_ratio") {
        merged.slowdown_ratio = p.slowdown_ratio;
      } else if (key == "hang_factor") {
        merged.hang_factor = p.hang_factor;
      } else if (key == "hang_longest_factor") {
        merged.hang_longest_factor = p.hang_longest_factor;
      } else if (key == "min_hang_ms") {
        merged.min_hang_ns = p.min_hang_ns;
      } else {
        ok = false;  // a threshold that cannot change while the detector runs
      }
    }
  }
  if (!ok) {
    if (malformed_messages_.fetch_add(1) == 0) {
      std::fprintf(
          stderr,
          "perftracker agent: ignoring a config message (%s); it may set "
          "slowdown_ratio, hang_factor, hang_longest_factor, min_hang_ms\n",
          parsed.ok() ? "a key that cannot change at run time" : parsed.status().message().c_str());
    }
    return;
  }
  config_.options.detector = merged;
  detector_.SetThresholds(merged);
  configs_applied_.fetch_add(1, std::memory_order_relaxed);
}

void Agent::DumpStacks(int64_t window) {
  stack_dumps_.fetch_add(1, std::memory_order_relaxed);
  auto text = std::make_shared<std::string>();
  auto task = gil_.Submit([this, text] {
    if (stack_dumper_ == nullptr) {
      *text = "(no stack dumper registered)";
      return;
    }
    PyObject* r = PyObject_CallNoArgs(stack_dumper_);
    const char* s = r != nullptr && PyUnicode_Check(r) ? PyUnicode_AsUTF8(r) : nullptr;
    *text = s != nullptr ? s : "(the stack dumper failed)";
    if (PyErr_Occurred()) PyErr_Clear();
    Py_XDECREF(r);
  });
  json j = {{"type", "stacks"}, {"rank", rank_.load()}, {"window", window}};
  bool ran = false;
  {
    ForkGate::Pause wait;  // the task needs the GIL, which a forking thread holds
    ran = gil_.Wait(task, config_.options.stack_timeout_ns);
  }
  if (ran) {
    std::string t = *text;
    if (t.size() > ControlChannel::kMaxLine - 1024) {
      t.resize(ControlChannel::kMaxLine - 1024);
      t += "\n... (truncated)";
    }
    j["available"] = true;
    j["text"] = t;
  } else {
    j["available"] = false;
    j["text"] = "Python stacks unavailable: no thread released the GIL within " +
                std::to_string(config_.options.stack_timeout_ns / 1'000'000) +
                " ms (a thread holds the GIL, e.g. stuck inside a C extension)";
  }
  SendJson(Dump(j));
}

void Agent::HandleLine(const std::string& line) {
  messages_received_.fetch_add(1, std::memory_order_relaxed);
  const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    if (malformed_messages_.fetch_add(1) == 0) {
      std::fprintf(stderr, "perftracker agent: ignoring a malformed collector message\n");
    }
    return;
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "window") {
    const auto id = Int(j, "window");
    const auto start = Int(j, "start_ns");
    const auto duration = Int(j, "duration_ns");
    if (!id || !start || !duration) {
      malformed_messages_.fetch_add(1);
      return;
    }
    std::lock_guard<std::mutex> lock(window_mu_);
    StartWindow(
        Window{*id, *start, *start + std::max<int64_t>(*duration, 0), Window::State::kScheduled});
  } else if (type == "dump_stacks") {
    DumpStacks(Int(j, "window").value_or(-1));
  } else if (type == "end_window") {
    const auto id = Int(j, "window");
    if (!id) {
      malformed_messages_.fetch_add(1);
      return;
    }
    EndWindowNow(*id, RealtimeNs());
  } else if (type == "config") {
    ApplyConfig(j);
  } else {
    unknown_messages_.fetch_add(1, std::memory_order_relaxed);
  }
}

void Agent::NoteOversizedMessages() {
  const uint64_t dropped = channel_.oversized_lines_in();
  if (dropped == oversized_messages_.load(std::memory_order_relaxed)) return;
  if (oversized_messages_.exchange(dropped) == 0) {
    std::fprintf(stderr,
                 "perftracker agent: dropped a collector message longer than %zu bytes (a "
                 "collector bug, or a program other than perftracker's collector on %s); "
                 "training continues; more are only counted in "
                 "_agent.stats()[\"oversized_messages\"]\n",
                 ControlChannel::kMaxLineIn, config_.socket_path.c_str());
  }
}

void Agent::ControlLoop() {
  TscClock::Calibrate(kClockCalibrationNs);  // off the training thread, once
  // Busy (allocating, taking locks) except while it waits: a fork waits for that (ForkGate).
  ForkGate::Section busy;
  std::vector<std::string> lines;  // after `busy`: freed inside the busy stretch
  next_hang_check_ns_ = RealtimeNs();
  while (!stop_requested_.load()) {
    const int64_t now = RealtimeNs();
    TryConnect(now);
    if (channel_.connected() && hello_dirty_.exchange(false)) SendHello();
    SendProcessGroups();
    SendCommThreads();
    DrainOutbox();
    HandleWindowTimers(now);
    // The detector says when the current silence becomes a hang: checked then, not up to
    // a check interval later (the interval is the fallback, e.g. after a clock step).
    if (now >= next_hang_check_ns_ ||
        (!training_ended_.load(std::memory_order_relaxed) && now >= detector_.HangDueNs())) {
      next_hang_check_ns_ = now + config_.options.hang_check_interval_ns;
      // A job whose training ended is silent, not hung.
      if (!training_ended_.load(std::memory_order_relaxed)) {
        if (std::optional<Trigger> trigger = detector_.CheckHang(now)) PushTrigger(*trigger);
      }
      DrainOutbox();
    }
    if (channel_.has_pending_output()) channel_.Flush();

    const int64_t hang_due =
        training_ended_.load(std::memory_order_relaxed) ? INT64_MAX : detector_.HangDueNs();
    int64_t deadline = std::min({now + kTickNs, next_hang_check_ns_, hang_due});
    {
      std::lock_guard<std::mutex> lock(window_mu_);
      if (window_ && window_->state == Window::State::kScheduled) {
        deadline = std::min(deadline, window_->start_ns);
      } else if (window_ && window_->state == Window::State::kActive) {
        deadline = std::min(deadline, window_->end_ns);
      }
    }
    if (!channel_.connected() && !config_.socket_path.empty()) {
      deadline = std::min(deadline, std::max(next_connect_ns_, now));
    }
    pollfd fds[2];
    nfds_t nfds = 0;
    fds[nfds++] = {wake_fd_, POLLIN, 0};
    if (channel_.connected()) {
      fds[nfds++] = {channel_.fd(),
                     static_cast<short>(POLLIN | (channel_.has_pending_output() ? POLLOUT : 0)), 0};
    }
    // Lines the last read left in the channel (a flood, handed out kMaxLinesPerRead at a
    // time) are read now, after this turn's other work: the socket may not signal them.
    const bool buffered = channel_.connected() && channel_.has_buffered_lines();
    const int64_t wait_ns = buffered ? 0 : std::max<int64_t>(deadline - RealtimeNs(), 0);
    const timespec ts{static_cast<time_t>(wait_ns / 1'000'000'000),
                      static_cast<long>(wait_ns % 1'000'000'000)};
    int ready = 0;
    {
      ForkGate::Pause wait;
      ready = ppoll(fds, nfds, &ts, nullptr);
    }
    if (ready < 0 || (ready == 0 && !buffered)) continue;
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      [[maybe_unused]] const ssize_t n = read(wake_fd_, &v, sizeof(v));
    }
    if (nfds > 1 && (fds[1].revents != 0 || buffered)) {
      lines.clear();
      const bool ok = channel_.ReadLines(&lines);
      NoteOversizedMessages();
      for (const std::string& l : lines) {
        ForkGate::Yield();
        HandleLine(l);
      }
      if (!ok && !reported_lost_) {
        reported_lost_ = true;
        std::fprintf(stderr,
                     "perftracker agent: lost the collector (%s); training continues, "
                     "reconnecting in the background\n",
                     channel_.last_error().c_str());
      }
      if (!ok) {
        next_connect_ns_ = RealtimeNs() + kFirstBackoffNs;
        // The collector that asked for the window is gone and nobody drains the rings: the
        // hooks go off now, not at the window's planned end (which a coordinator that ends
        // windows by iterations sets to --window-max-seconds).
        int64_t open = 0;
        {
          std::lock_guard<std::mutex> lock(window_mu_);
          if (window_) open = window_->id;
        }
        if (open != 0) EndWindowNow(open, RealtimeNs());
      }
    }
  }
  // Stop: the final window_done and bye, flushed for a short while at most.
  DrainOutbox();
  if (channel_.connected()) {
    SendJson(Dump(json{{"type", "bye"}, {"rank", rank_.load()}}));
    const int64_t until = RealtimeNs() + kByeFlushNs;
    while (channel_.connected() && channel_.has_pending_output() && RealtimeNs() < until) {
      pollfd pfd{channel_.fd(), POLLOUT, 0};
      {
        ForkGate::Pause wait;
        poll(&pfd, 1, 10);
      }
      channel_.Flush();
    }
  }
  channel_.Close();
}

}  // namespace perftracker
