// NodeCollector: the per-host daemon between the training processes' agents and the server
// (DESIGN.md "Processes"). In `perftracker run` it lives inside the run process.
//
// Threads (1 + drain_threads, whatever the number of agents):
//  - the I/O thread owns the Unix socket: accept(), non-blocking reads framed by LineReader
//    (64 KiB lines), message parsing, writes to agents (a per-connection outbox flushed on
//    POLLOUT), and the commands the server queued (StartWindow, DumpStacks, EndWindowNow).
//    It wakes on socket activity or an eventfd.
//  - each drain thread wakes every drain_interval and serves the agents whose connection
//    number is its index modulo drain_threads: drains their rings (AgentRings, per-agent
//    mutex), finishes their windows and sends the summaries, and retires those that
//    disconnected. Drain thread 0 also samples host metrics every sample_interval while a
//    window is open (or about to open: rates need a previous sample). One drain thread
//    summarizes about 4 M events per CPU-second (agent_rings_benchmark, docs/live-mode.md).
//
// Never blocking on an agent: sockets are non-blocking, writes go to a bounded outbox, the
// rings are read without any handshake, an agent that stops answering only loses its own
// summary (the window is finished without it after finish_grace; the server names the
// missing rank). A malformed line, an oversized line, an unknown type or a bad hello is
// counted and logged once per connection, and the connection lives on (except a rejected
// hello: that agent is ignored until it says a valid hello).
//
// A window ends for an agent when the agent said window_done for it (its hooks are off and
// its events, CUPTI's flushed records included, are in the rings), or finish_grace after the
// window's end. EndWindowNow moves the end to now and changes nothing else: the agent's
// window_done still ends it (a collector that summarized at once lost, on a loaded machine,
// the GPU records the agent's CUPTI flush was still writing).
// An agent that disconnects during a window without `bye` sends no summary; with `bye` (the
// process exited cleanly) its summary holds what it recorded until then.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "perftracker/collector/node_sampler.h"
#include "perftracker/core/metric_sample.h"
#include "perftracker/core/metric_sampler.h"
#include "perftracker/core/status.h"
#include "perftracker/report/rank_trace.h"
#include "perftracker/sources/host/host_sampler.h"
#include "perftracker/wire/coordinator_link.h"

namespace perftracker {

using LogFn = std::function<void(std::string_view line)>;

// Window recordings (CollectorOptions::record_dir) of at most this many of the latest windows
// are kept on disk; older ones nobody merged are deleted.
inline constexpr uint64_t kKeptRecordingWindows = 3;

struct CollectorOptions {
  std::string socket_path;
  int drain_interval_ms = 20;
  // Threads that drain and summarize rings (0: min(4, max(1, cores / 2))).
  int drain_threads = 0;
  int sample_interval_ms = 100;
  // After a window's end, wait at most this long for an agent's window_done.
  int finish_grace_ms = static_cast<int>(kWindowDoneGraceNs / 1'000'000);
  size_t max_agents = 4096;
  // Optional: host metrics during windows (MakeHostSampler(); tests pass fakes). Drain thread
  // 0 calls it; what it could not read is counted into the summaries of the workers it
  // concerns (SummaryStats' metric counters).
  std::shared_ptr<MetricSampler> sampler;
  // Where log lines go (default: stderr, prefixed "perftracker: ").
  LogFn log;
  // Live Perfetto export (docs/perfetto-export.md): each rank's window events, at most
  // record_events per rank and window (40 B each in memory and on disk), are written to
  // <record_dir>/window-<id>-rank-<r>.ptrace on this host and announced with
  // CoordinatorLink::OnWindowRecording. Off when record_dir is empty or record_events is 0.
  std::string record_dir;
  size_t record_events = 0;
};

struct CollectorStats {
  uint64_t connections = 0;
  uint64_t agents = 0;  // valid hellos
  uint64_t rejected_hellos = 0;
  uint64_t malformed_lines = 0;
  uint64_t oversized_lines = 0;
  uint64_t unknown_messages = 0;
  uint64_t messages = 0;
  uint64_t events_drained = 0;
  uint64_t summaries_sent = 0;
  uint64_t summaries_lost = 0;  // agents gone mid-window
  uint64_t recordings_written = 0;
  uint64_t recordings_failed = 0;
};

class NodeCollector : public CollectorControl {
 public:
  // `coordinator` is not owned and must outlive Stop().
  NodeCollector(CollectorOptions options, CoordinatorLink* coordinator);
  ~NodeCollector() override;
  NodeCollector(const NodeCollector&) = delete;
  NodeCollector& operator=(const NodeCollector&) = delete;

  // Binds the socket (mode 0600) and starts the threads.
  Status Start();
  // Stops the threads, closes every connection, removes the socket. Idempotent.
  void Stop();

  // CollectorControl (thread-safe, never blocks).
  void StartWindow(const WindowSpec& window) override;
  void DumpStacks(uint64_t window) override;
  void EndWindowNow(uint64_t window) override;

  CollectorStats stats() const;
  const std::string& socket_path() const { return options_.socket_path; }
  // Pids of the agents connected now (rank >= 0 or not).
  std::vector<int32_t> AgentPids() const;

 private:
  struct Session;
  struct Command;

  void IoLoop();
  void DrainLoop(int index);
  void Accept();
  void ReadFrom(const std::shared_ptr<Session>& s);
  void HandleLine(const std::shared_ptr<Session>& s, const std::string& line);
  void HandleHello(const std::shared_ptr<Session>& s, const struct AgentMessage& m);
  void Send(Session& s, const std::string& message);
  void FlushOutbox(Session& s);
  void Close(const std::shared_ptr<Session>& s);
  void RunCommands();
  // Queues a command for the I/O thread and wakes it (any thread).
  void Enqueue(Command command);
  void Wake();
  void Log(const std::string& line);
  void LogOnce(Session& s, int kind, const std::string& line);
  void SampleHost(int64_t now_ns, const std::vector<std::shared_ptr<Session>>& sessions);
  // Writes a rank's window recording into options_.record_dir and announces it (drain
  // thread, no lock held).
  void WriteRecording(uint64_t window, const RankTrace& trace);
  // Attaches the files of the session's in-process sources (NCCL plugin, CUPTI) that appeared.
  // Called with the session's mutex held.
  void AttachSources(Session& s);

  CollectorOptions options_;
  CoordinatorLink* coordinator_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  bool started_ = false;
  std::atomic<bool> stop_{false};
  std::thread io_thread_;
  std::vector<std::thread> drain_threads_;

  mutable std::mutex sessions_mu_;  // guards sessions_ (the list; each Session has its own mutex)
  std::vector<std::shared_ptr<Session>> sessions_;

  std::mutex commands_mu_;
  std::vector<Command> commands_;

  std::atomic<bool> sampling_wanted_{false};

  // The window the server opened last (I/O thread only).
  std::optional<WindowSpec> current_window_;

  std::mutex log_mu_;
  std::atomic<uint64_t> next_session_id_{1};

  mutable std::mutex stats_mu_;
  CollectorStats stats_;
};

}  // namespace perftracker
