#include "perftracker/collector/node_collector.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iterator>
#include <unordered_map>
#include <utility>

#include <fmt/core.h>

#include "perftracker/collector/agent_message.h"
#include "perftracker/collector/agent_rings.h"
#include "perftracker/collector/line_reader.h"
#include "perftracker/core/private_file_mode.h"
#include "perftracker/core/realtime_clock.h"
#include "perftracker/report/rank_trace_file.h"

namespace perftracker {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kMaxReadPerWake = 1 << 20;  // per connection per poll round: fairness
constexpr size_t kMaxOutbox = 1 << 20;
constexpr size_t kDrainPerRound = 1 << 18;  // events per agent per drain round
constexpr int kIoPollMs = 200;
// Sampling starts this long before a window so that the first in-window sample has a rate.
constexpr int64_t kSampleLeadNs = 250'000'000;

// Communication threads kept per worker (the agent names at most 16: gloo's workers are 2 by
// default); more are ignored.
constexpr size_t kMaxCommThreads = 16;

enum LogKind : int {
  kLogMalformed = 0,
  kLogOversized,
  kLogUnknown,
  kLogBeforeHello,
  kLogHello,
  kLogWrite,
  kNumLogKinds,
};

std::string Describe(int32_t rank, int32_t pid, uint64_t connection) {
  if (rank >= 0) return fmt::format("rank {} (pid {})", rank, pid);
  if (pid > 0) return fmt::format("pid {}", pid);
  return fmt::format("agent connection {}", connection);
}

}  // namespace

struct NodeCollector::Session {
  explicit Session(int fd_in, uint64_t id_in) : fd(fd_in), id(id_in) {}
  std::string Name() const { return Describe(worker.rank, worker.pid, id); }

  // I/O thread only.
  int fd;
  uint64_t id;
  LineReader reader;
  std::string outbox;
  bool logged[kNumLogKinds] = {};

  // Guarded by mu (shared with the drain thread).
  std::mutex mu;
  bool hello = false;
  bool duplicate = false;  // another live agent already has this rank: no windows
  bool bye = false;
  bool gone = false;  // the socket is closed; the drain thread retires the session
  WorkerInfo worker;
  std::unique_ptr<AgentRings> rings;
  uint64_t done_window = 0;  // last window the agent said window_done for
  // EndWindowNow cut the window: the agent's window_done ends it even before its start.
  bool ended_early = false;
  // In-process sources that write files of their own next to the agent's (bit i: kSourceSuffixes[i]
  // attached or given up), and when to look for them again.
  uint32_t sources_done = 0;
  int64_t next_source_check_ns = 0;
  // The agent's communication threads (`comm_thread`), at most kMaxCommThreads, for the host
  // sampler; forgotten with a new shared-memory file (another process).
  std::vector<int32_t> comm_tids;
};

// Files that in-process sources other than the agent write next to the agent's file
// (docs/gpu-sources.md): the NCCL profiler plugin and the CUPTI tracer.
constexpr const char* kSourceSuffixes[] = {"-nccl", "-cupti"};
constexpr int64_t kSourceCheckNs = 1'000'000'000;

struct NodeCollector::Command {
  enum class Kind : uint8_t { kStartWindow, kDumpStacks, kEndWindowNow };
  Kind kind;
  WindowSpec window;
};

NodeCollector::NodeCollector(CollectorOptions options, CoordinatorLink* coordinator)
    : options_(std::move(options)), coordinator_(coordinator) {
  if (options_.drain_interval_ms <= 0) options_.drain_interval_ms = 20;
  if (options_.sample_interval_ms <= 0) options_.sample_interval_ms = 100;
  if (options_.finish_grace_ms < 0) options_.finish_grace_ms = 0;
  if (options_.drain_threads <= 0) {
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    options_.drain_threads = std::min(4, std::max(1, cores / 2));
  }
  options_.drain_threads = std::min(options_.drain_threads, 64);
}

NodeCollector::~NodeCollector() { Stop(); }

Status NodeCollector::Start() {
  if (started_) return Status::Internal("collector already started");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (options_.socket_path.empty() || options_.socket_path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument(fmt::format(
        "{}: a Unix socket path must be 1..{} bytes long; set XDG_RUNTIME_DIR or TMPDIR to a "
        "shorter directory",
        options_.socket_path, sizeof(addr.sun_path) - 1));
  }
  std::memcpy(addr.sun_path, options_.socket_path.data(), options_.socket_path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Internal(fmt::format("socket(): {}", std::strerror(errno)));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const std::string err = std::strerror(errno);
    close(fd);
    return Status::InvalidArgument(
        fmt::format("{}: cannot create the collector socket: {}", options_.socket_path, err));
  }
  chmod(options_.socket_path.c_str(), 0600);
  if (listen(fd, 256) != 0) {
    const std::string err = std::strerror(errno);
    close(fd);
    unlink(options_.socket_path.c_str());
    return Status::Internal(fmt::format("{}: listen(): {}", options_.socket_path, err));
  }
  const int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    const std::string err = std::strerror(errno);
    close(fd);
    unlink(options_.socket_path.c_str());
    return Status::Internal(fmt::format("eventfd(): {}", err));
  }
  listen_fd_ = fd;
  wake_fd_ = wake;
  started_ = true;
  stop_ = false;
  io_thread_ = std::thread([this] { IoLoop(); });
  for (int i = 0; i < options_.drain_threads; ++i) {
    drain_threads_.emplace_back([this, i] { DrainLoop(i); });
  }
  return Status::Ok();
}

void NodeCollector::Stop() {
  if (!started_) return;
  stop_ = true;
  Wake();
  if (io_thread_.joinable()) io_thread_.join();
  for (auto& t : drain_threads_) t.join();
  drain_threads_.clear();
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    for (auto& s : sessions_) {
      if (s->fd >= 0) close(s->fd);
      s->fd = -1;
    }
    sessions_.clear();
  }
  close(listen_fd_);
  close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
  unlink(options_.socket_path.c_str());
  started_ = false;
}

void NodeCollector::WriteRecording(uint64_t window, const RankTrace& trace) {
  namespace fs = std::filesystem;
  const fs::path dir(options_.record_dir);
  std::error_code ec;
  if (::mkdir(dir.c_str(), PrivateDirMode()) == 0) ::chmod(dir.c_str(), PrivateDirMode());
  const std::string path =
      (dir / fmt::format("window-{}-rank-{}.ptrace", window, trace.rank)).string();
  Status written = WriteRankTraceFile(path, trace, nullptr, PrivateFileMode());
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++(written.ok() ? stats_.recordings_written : stats_.recordings_failed);
  }
  if (!written.ok()) {
    Log(fmt::format("rank {}: window {}'s events not kept for the Perfetto export: {}", trace.rank,
                    window, written.message()));
    return;
  }
  // Disk stays bounded when nobody merges the files: only the last kKeptRecordingWindows
  // windows' recordings are kept.
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    unsigned long long id = 0;
    const std::string name = e.path().filename().string();
    if (std::sscanf(name.c_str(), "window-%llu-rank-", &id) == 1 &&
        id + kKeptRecordingWindows <= window && name.ends_with(".ptrace")) {
      fs::remove(e.path(), ec);
    }
  }
  coordinator_->OnWindowRecording(window, trace.rank, path);
}

void NodeCollector::Log(const std::string& line) {
  std::lock_guard<std::mutex> lock(log_mu_);
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "perftracker: %s\n", line.c_str());
  }
}

void NodeCollector::LogOnce(Session& s, int kind, const std::string& line) {
  if (s.logged[kind]) return;
  s.logged[kind] = true;
  Log(line + " (logged once per agent)");
}

void NodeCollector::Wake() {
  if (wake_fd_ < 0) return;
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void NodeCollector::Enqueue(Command command) {
  {
    std::lock_guard<std::mutex> lock(commands_mu_);
    commands_.push_back(std::move(command));
  }
  Wake();
}

void NodeCollector::StartWindow(const WindowSpec& window) {
  Enqueue(Command{Command::Kind::kStartWindow, window});
}

void NodeCollector::DumpStacks(uint64_t window) {
  WindowSpec w;
  w.id = window;
  Enqueue(Command{Command::Kind::kDumpStacks, w});
}

void NodeCollector::EndWindowNow(uint64_t window) {
  WindowSpec w;
  w.id = window;
  Enqueue(Command{Command::Kind::kEndWindowNow, w});
}

CollectorStats NodeCollector::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

std::vector<int32_t> NodeCollector::AgentPids() const {
  std::vector<int32_t> pids;
  std::lock_guard<std::mutex> lock(sessions_mu_);
  for (const auto& s : sessions_) {
    std::lock_guard<std::mutex> session_lock(s->mu);
    if (s->hello && !s->gone) pids.push_back(s->worker.pid);
  }
  return pids;
}

// ---------------------------------------------------------------------------------------
// I/O thread

void NodeCollector::IoLoop() {
  std::unordered_map<int, std::shared_ptr<Session>> by_fd;
  std::vector<pollfd> fds;
  std::vector<std::shared_ptr<Session>> polled;
  while (!stop_) {
    fds.clear();
    polled.clear();
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({wake_fd_, POLLIN, 0});
    {
      std::lock_guard<std::mutex> lock(sessions_mu_);
      for (const auto& s : sessions_) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, static_cast<short>(POLLIN | (s->outbox.empty() ? 0 : POLLOUT)), 0});
        polled.push_back(s);
      }
    }
    const int n = poll(fds.data(), fds.size(), kIoPollMs);
    if (stop_) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      Log(fmt::format("collector poll() failed: {}; stopping the collector", std::strerror(errno)));
      break;
    }
    if (fds[1].revents & POLLIN) {
      uint64_t v = 0;
      [[maybe_unused]] const ssize_t r = read(wake_fd_, &v, sizeof(v));
    }
    RunCommands();
    if (fds[0].revents & POLLIN) Accept();
    for (size_t i = 0; i < polled.size(); ++i) {
      const short re = fds[i + 2].revents;
      const auto& s = polled[i];
      if (s->fd < 0) continue;
      if (re & POLLOUT) FlushOutbox(*s);
      if (re & (POLLIN | POLLHUP | POLLERR)) ReadFrom(s);
    }
  }
}

void NodeCollector::Accept() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
        Log(fmt::format("accept() on {} failed: {}", options_.socket_path, std::strerror(errno)));
      }
      return;
    }
    std::lock_guard<std::mutex> lock(sessions_mu_);
    if (sessions_.size() >= options_.max_agents) {
      close(fd);
      Log(fmt::format("refused an agent connection: already {} agents (the limit)",
                      options_.max_agents));
      continue;
    }
    sessions_.push_back(std::make_shared<Session>(fd, next_session_id_++));
    std::lock_guard<std::mutex> stats_lock(stats_mu_);
    ++stats_.connections;
  }
}

void NodeCollector::ReadFrom(const std::shared_ptr<Session>& s) {
  char buf[kReadChunk];
  std::vector<std::string> lines;
  size_t total = 0;
  bool closed = false;
  while (total < kMaxReadPerWake) {
    const ssize_t n = recv(s->fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      total += static_cast<size_t>(n);
      const uint64_t oversized_before = s->reader.oversized_lines();
      s->reader.Feed(std::string_view(buf, static_cast<size_t>(n)), &lines);
      if (s->reader.oversized_lines() != oversized_before) {
        {
          std::lock_guard<std::mutex> lock(stats_mu_);
          stats_.oversized_lines += s->reader.oversized_lines() - oversized_before;
        }
        LogOnce(*s, kLogOversized,
                fmt::format("{} sent a message line longer than {} bytes; ignored", s->Name(),
                            LineReader::kDefaultMaxLine));
      }
      continue;
    }
    if (n == 0) {
      closed = true;
    } else if (errno == EINTR) {
      continue;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
      closed = true;
    }
    break;
  }
  for (const auto& line : lines) HandleLine(s, line);
  if (closed) Close(s);
}

void NodeCollector::Close(const std::shared_ptr<Session>& s) {
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
  s->outbox.clear();
  std::lock_guard<std::mutex> lock(s->mu);
  s->gone = true;
}

void NodeCollector::Send(Session& s, const std::string& message) {
  if (s.fd < 0) return;
  if (!s.outbox.empty()) {
    if (s.outbox.size() + message.size() > kMaxOutbox) {
      LogOnce(s, kLogWrite,
              fmt::format("{} does not read its control socket; messages to it are "
                          "dropped",
                          s.Name()));
      return;
    }
    s.outbox += message;
    return;
  }
  const ssize_t n = send(s.fd, message.data(), message.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n == static_cast<ssize_t>(message.size())) return;
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return;  // read sees EOF
  s.outbox.assign(message, n > 0 ? static_cast<size_t>(n) : 0, std::string::npos);
}

void NodeCollector::FlushOutbox(Session& s) {
  while (!s.outbox.empty() && s.fd >= 0) {
    const ssize_t n = send(s.fd, s.outbox.data(), s.outbox.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      s.outbox.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) s.outbox.clear();
    return;
  }
}

void NodeCollector::HandleLine(const std::shared_ptr<Session>& s, const std::string& line) {
  AgentMessage m;
  std::string error;
  const ParseOutcome outcome = ParseAgentMessage(line, &m, &error);
  if (outcome != ParseOutcome::kOk) {
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++(outcome == ParseOutcome::kMalformed ? stats_.malformed_lines : stats_.unknown_messages);
    }
    if (outcome == ParseOutcome::kMalformed) {
      LogOnce(*s, kLogMalformed,
              fmt::format("malformed message from {}: {}; ignored", s->Name(), error));
    } else {
      LogOnce(*s, kLogUnknown, fmt::format("{}: {} (a newer agent?); ignored", s->Name(), error));
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.messages;
  }
  if (m.type == AgentMessageType::kHello) {
    HandleHello(s, m);
    return;
  }
  int32_t rank = -1;
  bool active = false;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    active = s->hello && !s->duplicate;
    rank = s->worker.rank;
    if (active && s->rings) {
      if (m.type == AgentMessageType::kIteration) s->rings->AddIteration(m.end_ns, m.duration_ns);
      if (m.type == AgentMessageType::kProcessGroup) {
        s->rings->DeclareProcessGroup(m.group);
      }
      if (m.type == AgentMessageType::kCommThread && s->comm_tids.size() < kMaxCommThreads &&
          std::find(s->comm_tids.begin(), s->comm_tids.end(), m.tid) == s->comm_tids.end()) {
        s->comm_tids.push_back(m.tid);
      }
      if (m.type == AgentMessageType::kWindowDone && s->rings->window() &&
          s->rings->window()->id == m.window) {
        s->rings->SetAgentCounts(m.events, m.dropped, m.gpu_stopped_ns);
        s->done_window = m.window;
      }
    }
    if (s->hello && m.type == AgentMessageType::kBye) s->bye = true;
  }
  if (!active) {
    LogOnce(
        *s, kLogBeforeHello,
        fmt::format("{} sent '{}' before a valid hello; ignored", s->Name(), line.substr(0, 80)));
    return;
  }
  // The rank is the one the agent said hello with: messages cannot speak for other ranks.
  if (rank < 0) return;
  switch (m.type) {
    case AgentMessageType::kIteration:
      coordinator_->OnIteration(rank, m.end_ns, m.duration_ns);
      break;
    case AgentMessageType::kTrigger:
      coordinator_->OnTrigger(rank, m.reason, m.detail);
      break;
    case AgentMessageType::kStacks:
      coordinator_->OnStacks(m.window, rank, m.available, m.text);
      break;
    case AgentMessageType::kEnded:
      coordinator_->OnTrainingEnded(rank, m.detail);
      break;
    default:
      break;
  }
}

void NodeCollector::HandleHello(const std::shared_ptr<Session>& s, const AgentMessage& m) {
  auto reject = [&](const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.rejected_hellos;
    }
    LogOnce(*s, kLogHello,
            fmt::format("hello from {} rejected: {}; that process runs without perftracker",
                        Describe(m.rank, m.worker.pid, s->id), why));
  };
  // Reuse the mapping when the agent only updates its rank (it learns it late, e.g. at
  // init_process_group) and points at the same file.
  std::unique_ptr<AgentShm> shm;
  bool same_file = false;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    same_file = s->rings && s->rings->shm()->path() == m.shm_path && s->worker.pid == m.worker.pid;
  }
  if (!same_file) {
    struct stat st {};
    if (stat(m.shm_path.c_str(), &st) != 0) {
      reject(fmt::format("{}: {}", m.shm_path, std::strerror(errno)));
      return;
    }
    if (!S_ISREG(st.st_mode)) {
      reject(fmt::format("{}: not a regular file", m.shm_path));
      return;
    }
    if (st.st_uid != geteuid()) {
      reject(fmt::format("{}: owned by uid {}, not by this user (uid {})", m.shm_path, st.st_uid,
                         geteuid()));
      return;
    }
    StatusOr<std::unique_ptr<AgentShm>> opened = AgentShm::Open(m.shm_path);
    if (!opened.ok()) {
      reject(opened.status().message());
      return;
    }
    if ((*opened)->header()->pid != m.worker.pid) {
      reject(fmt::format("{} belongs to pid {}, but the hello says pid {}", m.shm_path,
                         (*opened)->header()->pid, m.worker.pid));
      return;
    }
    shm = std::move(opened.value());
  }

  WorkerInfo worker = m.worker;
  // A duplicate rank: another live agent already has it (two jobs on one socket, a forked
  // process that kept RANK): the newcomer takes part in no window.
  bool duplicate = false;
  if (worker.rank >= 0) {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    for (const auto& other : sessions_) {
      if (other == s) continue;
      std::lock_guard<std::mutex> other_lock(other->mu);
      if (other->hello && !other->gone && !other->duplicate && other->worker.rank == worker.rank) {
        duplicate = true;
        break;
      }
    }
  }
  bool join_window = false;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    if (shm) {
      s->comm_tids.clear();
      s->rings = std::make_unique<AgentRings>(std::move(shm), worker);
      if (!options_.record_dir.empty()) s->rings->set_record_cap(options_.record_events);
    } else {
      s->rings->set_worker(worker);
    }
    s->hello = true;
    s->duplicate = duplicate;
    s->worker = worker;
    // A worker that joins while a window is open takes part in it (if it is not over).
    if (!duplicate && worker.rank >= 0 && current_window_ &&
        RealtimeNs() < current_window_->end_ns() && !s->rings->in_window()) {
      s->rings->BeginWindow(*current_window_);
      s->done_window = 0;
      join_window = true;
    }
  }
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.agents;
  }
  if (duplicate) {
    LogOnce(*s, kLogHello,
            fmt::format("pid {} says it is rank {}, which another live agent already is; it "
                        "takes part in no window",
                        worker.pid, worker.rank));
    return;
  }
  if (join_window) Send(*s, WindowMessage(*current_window_));
  if (worker.rank >= 0) coordinator_->OnWorkerJoined(worker);
}

void NodeCollector::RunCommands() {
  std::vector<Command> commands;
  {
    std::lock_guard<std::mutex> lock(commands_mu_);
    commands.swap(commands_);
  }
  if (commands.empty()) return;
  std::vector<std::shared_ptr<Session>> sessions;
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    sessions = sessions_;
  }
  for (const Command& c : commands) {
    switch (c.kind) {
      case Command::Kind::kStartWindow:
        // The same window twice (a reconnect racing the broadcast) must not restart it.
        if (current_window_ && current_window_->id == c.window.id) break;
        current_window_ = c.window;
        for (const auto& s : sessions) {
          bool send = false;
          {
            std::lock_guard<std::mutex> lock(s->mu);
            if (s->hello && !s->gone && !s->duplicate && s->worker.rank >= 0 && s->rings) {
              s->rings->BeginWindow(c.window);
              s->done_window = 0;
              s->ended_early = false;
              send = true;
            }
          }
          if (send) Send(*s, WindowMessage(c.window));
        }
        break;
      case Command::Kind::kDumpStacks:
        for (const auto& s : sessions) {
          bool send = false;
          {
            std::lock_guard<std::mutex> lock(s->mu);
            send = s->hello && !s->gone && !s->duplicate && s->worker.rank >= 0;
          }
          if (send) Send(*s, DumpStacksMessage(c.window.id));
        }
        break;
      case Command::Kind::kEndWindowNow: {
        const int64_t now = RealtimeNs();
        if (current_window_ && current_window_->id == c.window.id) {
          current_window_->duration_ns = std::max<int64_t>(
              0, std::min(current_window_->duration_ns, now - current_window_->start_ns));
        }
        for (const auto& s : sessions) {
          bool send = false;
          {
            std::lock_guard<std::mutex> lock(s->mu);
            if (s->rings && s->rings->window() && s->rings->window()->id == c.window.id) {
              s->rings->TruncateWindow(now);
              s->ended_early = true;
              send = !s->gone;
            }
          }
          // The agent turns its hooks off now instead of at the window's planned end.
          if (send) Send(*s, EndWindowMessage(c.window.id));
        }
        break;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Drain thread

void NodeCollector::DrainLoop(int index) {
  const auto threads = static_cast<uint64_t>(options_.drain_threads);
  using Clock = std::chrono::steady_clock;
  const auto interval = std::chrono::milliseconds(options_.drain_interval_ms);
  const int64_t sample_interval_ns = int64_t{options_.sample_interval_ms} * 1'000'000;
  const int64_t grace_ns = int64_t{options_.finish_grace_ms} * 1'000'000;
  int64_t next_sample_ns = 0;
  auto next = Clock::now();
  // One more round after stop_: summaries of windows EndWindowNow closed still go out.
  bool last_round = false;
  while (!last_round) {
    last_round = stop_;
    next += interval;
    const auto now_tp = Clock::now();
    if (next < now_tp) next = now_tp;  // fell behind: do not try to catch up in a burst
    if (!last_round) std::this_thread::sleep_until(next);

    std::vector<std::shared_ptr<Session>> sessions;
    {
      std::lock_guard<std::mutex> lock(sessions_mu_);
      sessions = sessions_;
    }
    const int64_t now = RealtimeNs();
    bool sampling = false;
    std::vector<std::pair<uint64_t, WorkerSummary>> summaries;
    std::vector<std::pair<uint64_t, std::unique_ptr<RankTrace>>> recordings;
    std::vector<std::pair<int32_t, bool>> left;  // (rank, clean)
    std::vector<std::shared_ptr<Session>> retired;
    uint64_t drained = 0;
    uint64_t lost = 0;
    for (const auto& s : sessions) {
      if (s->id % threads != static_cast<uint64_t>(index)) continue;  // another drain thread's
      std::lock_guard<std::mutex> lock(s->mu);
      if (!s->rings) {
        if (s->gone) retired.push_back(s);
        continue;
      }
      if (now >= s->next_source_check_ns) {
        s->next_source_check_ns = now + kSourceCheckNs;
        AttachSources(*s);
      }
      drained += s->rings->Drain(kDrainPerRound);
      if (s->rings->in_window()) {
        const WindowSpec& w = *s->rings->window();
        const bool done = s->done_window == w.id;
        // The planned end, or where EndWindowNow cut the window. Either way the agent's
        // window_done ends it: what the agent writes at its window's end (CUPTI's records at
        // its flush) comes before window_done, and may come long after the cut on a loaded
        // machine. An agent that does not answer is summarized finish_grace after the end.
        const int64_t end = s->rings->window_end_ns();
        if (s->gone && !s->bye) {
          Log(
              fmt::format("{} disconnected during window {} without saying bye (killed or "
                          "crashed?): it sends no summary",
                          s->Name(), w.id));
          s->rings->AbandonWindow();
          ++lost;
        } else if (s->gone || (done && (now >= end || s->ended_early)) || now >= end + grace_ns ||
                   last_round) {
          const uint64_t id = w.id;
          // A source's file can appear after the last periodic look: CUPTI's is created when
          // the agent begins GPU tracing and filled when it flushes, just before window_done,
          // which a loaded machine can put within the window's last moments. One more look
          // before the summary, so that no source that wrote for this window is left out.
          AttachSources(*s);
          summaries.emplace_back(id, s->rings->FinishWindow());
          if (std::unique_ptr<RankTrace> r = s->rings->TakeRecording()) {
            recordings.emplace_back(id, std::move(r));
          }
          s->ended_early = false;
        } else if (now + kSampleLeadNs >= w.start_ns && now <= end) {
          sampling = true;
        }
      }
      if (s->gone) {
        if (s->hello && !s->duplicate && s->worker.rank >= 0) {
          left.emplace_back(s->worker.rank, s->bye);
        }
        retired.push_back(s);
      }
    }
    if (!retired.empty()) {
      std::lock_guard<std::mutex> lock(sessions_mu_);
      for (const auto& r : retired) {
        for (size_t i = 0; i < sessions_.size(); ++i) {
          if (sessions_[i] == r) {
            sessions_.erase(sessions_.begin() + static_cast<std::ptrdiff_t>(i));
            break;
          }
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      stats_.events_drained += drained;
      stats_.summaries_sent += summaries.size();
      stats_.summaries_lost += lost;
    }
    // Outside every lock: the coordinator may call back into StartWindow etc. A rank's
    // recording is announced before its summary (the summary may complete the window).
    for (auto& [id, trace] : recordings) WriteRecording(id, *trace);
    for (auto& [id, summary] : summaries) coordinator_->OnSummary(id, std::move(summary));
    for (const auto& [rank, clean] : left) coordinator_->OnWorkerLeft(rank, clean);

    // Drain thread 0 samples for every agent in a window; the others only tell it that
    // theirs are.
    if (sampling) sampling_wanted_ = true;
    if (index == 0 && now >= next_sample_ns && sampling_wanted_.exchange(false) &&
        options_.sampler) {
      next_sample_ns = now + sample_interval_ns;
      SampleHost(now, sessions);
    }
  }
}

void NodeCollector::AttachSources(Session& s) {
  for (size_t i = 0; i < std::size(kSourceSuffixes); ++i) {
    const uint32_t bit = 1u << i;
    if ((s.sources_done & bit) != 0) continue;
    const std::string path = s.rings->shm()->path() + kSourceSuffixes[i];
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) continue;  // not (yet) there: the source may start later
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
      s.sources_done |= bit;
      Log(fmt::format("{}: {} is not a regular file of this user: ignored", s.Name(), path));
      continue;
    }
    StatusOr<std::unique_ptr<AgentShm>> opened = AgentShm::Open(path);
    if (!opened.ok()) continue;  // being created: the next check sees it whole
    if ((*opened)->header()->pid != s.worker.pid) {
      s.sources_done |= bit;
      Log(fmt::format("{}: {} belongs to pid {}: ignored", s.Name(), path,
                      (*opened)->header()->pid));
      continue;
    }
    s.rings->AttachSource(std::move(opened.value()));
    s.sources_done |= bit;
  }
}

void NodeCollector::SampleHost(int64_t now_ns,
                               const std::vector<std::shared_ptr<Session>>& sessions) {
  std::vector<int32_t> pids;
  for (const auto& s : sessions) {
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->rings && s->rings->in_window() && !s->gone) {
      pids.push_back(s->worker.pid);
      options_.sampler->SetCommThreads(s->worker.pid, s->comm_tids);
    }
  }
  if (pids.empty()) return;
  std::vector<PidSample> samples;
  options_.sampler->Sample(now_ns, pids, &samples);
  std::vector<SampleProblemCount> problems;
  options_.sampler->TakeProblems(&problems);
  if (samples.empty() && problems.empty()) return;
  for (const auto& s : sessions) {
    std::lock_guard<std::mutex> lock(s->mu);
    if (!s->rings || !s->rings->in_window()) continue;
    const int32_t pid = s->worker.pid;
    for (const PidSample& m : samples) {
      if (m.pid == pid || m.pid < 0) s->rings->AddMetric(m.sample);
    }
    // A host-wide problem (pid -1) is every worker's: their host metrics are short.
    for (const SampleProblemCount& p : problems) {
      if (p.pid == pid || p.pid < 0) s->rings->CountSampleProblem(p.problem, p.count, now_ns);
    }
  }
}

}  // namespace perftracker
