// GrpcCoordinatorLink: the CoordinatorLink of a collector whose server is another process
// (`perftracker run --server`, `perftracker collector`): it forwards what the NodeCollector
// reports over the control plane (wire/control_client.h) and hands the server's commands to
// the NodeCollector (CollectorControl).
//
// Never blocking the collector. The CoordinatorLink calls only append to a bounded queue
// (messages and bytes) under a short mutex and return; iterations are batched (one message
// per iteration_flush_ms or iteration_batch points). A full queue drops the message and
// counts it (stats().dropped_messages, also reported in heartbeats). One link thread
// connects, registers and writes the queue; a reader thread (one per stream) receives the
// server's commands and calls the NodeCollector, whose CollectorControl methods only queue.
//
// Reconnecting. When the stream breaks (server killed, restarted, network gone) the link
// thread reconnects with exponential backoff and full jitter (wire/reconnect_backoff.h: each
// wait drawn from [0, cap], the cap backoff_initial_ms doubling to backoff_max_ms; the first
// attempt after a break waits too) and registers again with the ranks that are connected at
// that moment, so a restarted server knows the job's workers without waiting for new hellos.
// What was queued while disconnected is sent after the registration (a summary of a window
// the new server does not know is rejected by it: logged, not retried). The first failure and the
// first success after failures are logged; the retries in between are silent.
//
// Progressive disclosure. When the server's answer to the registration says send_digests,
// OnSummary sends the worker's digest (summary/worker_digest.h) and keeps the encoded full
// summary until the server asks for it (RequestSummaries: sent, then forgotten), says the
// window is diagnosed, or keep_summaries_ms pass; at most max_kept_bytes are kept (the
// oldest window's go first; a summary beyond that is not kept and counted). A request for
// summaries no longer kept is answered ControlSummariesNotKept with why (which limit dropped
// them; remembered for the last kGoneWindowsRemembered windows) when the server takes that
// answer, so that it stops waiting for them; it is logged either way.
//
// Perfetto recordings. The NodeCollector's window recordings (files on this host, at most
// --perfetto-events-per-rank events of 40 B per rank) are remembered here, not sent: the
// server asks for a window's once it is diagnosed (send_recordings), and they are sent then
// in chunks of at most kMaxRecordingChunkBytes through the same queue, and removed from the
// disk; a rank this collector serves without a recording is answered with why. Only the
// last kKeptRecordingWindows windows' are remembered (the NodeCollector deletes older files).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "perftracker/collector/node_collector.h"
#include "perftracker/core/status.h"
#include "perftracker/wire/control_client.h"
#include "perftracker/wire/control_messages.h"
#include "perftracker/wire/coordinator_link.h"

namespace perftracker {

struct GrpcLinkOptions {
  ControlClientOptions client;
  std::string job_id;
  std::string host;  // default: gethostname()
  std::string title;
  ControlHardware hardware;  // default: this host's CPUs and memory
  size_t max_queued_messages = 8192;
  size_t max_queued_bytes = 256u << 20;
  int heartbeat_interval_ms = 5000;
  int iteration_flush_ms = 200;
  size_t iteration_batch = 4096;
  int connect_timeout_ms = 3000;
  int backoff_initial_ms = 200;
  int backoff_max_ms = 5000;
  uint64_t backoff_seed = 0;  // the backoff's jitter; 0: random (a test's fixed waits: not 0)
  size_t max_kept_bytes = 512u << 20;
  int keep_summaries_ms = 600'000;
  LogFn log;  // default: stderr, "perftracker: " prefix
};

struct GrpcLinkStats {
  uint64_t connections = 0;  // successful registrations (1 + reconnections)
  uint64_t messages_sent = 0;
  uint64_t dropped_messages = 0;  // full queue
  uint64_t rejected_by_server = 0;
  uint64_t commands_received = 0;
  uint64_t digests_sent = 0;      // digests queued in place of full summaries
  uint64_t summaries_asked = 0;   // full summaries the server asked for and got
  uint64_t summaries_unkept = 0;  // not kept (max_kept_bytes) or asked for and not there
  bool connected = false;
};

class GrpcCoordinatorLink : public CoordinatorLink {
 public:
  explicit GrpcCoordinatorLink(GrpcLinkOptions options);
  ~GrpcCoordinatorLink() override;
  GrpcCoordinatorLink(const GrpcCoordinatorLink&) = delete;
  GrpcCoordinatorLink& operator=(const GrpcCoordinatorLink&) = delete;

  // Where the server's commands go (not owned; call before Start, outlive Stop).
  void SetControl(CollectorControl* control) { control_ = control; }
  // Starts the link thread; connecting happens there.
  Status Start();
  // Waits until the first connection attempt ended; its outcome (Ok when registered).
  Status WaitFirstAttempt(int timeout_ms);
  // Sends what is queued (at most flush_timeout_ms), says goodbye, joins the threads.
  void Stop(int flush_timeout_ms);
  GrpcLinkStats stats() const;
  // The command this collector's host ran exited with `exit_code` (128 + N for signal N):
  // queued like every message, after what the agents sent before (perftracker run --server,
  // before Stop).
  void JobExited(int exit_code);

  // CoordinatorLink (collector threads; never block).
  void OnWorkerJoined(const WorkerInfo& worker) override;
  void OnWorkerLeft(int32_t rank, bool clean) override;
  void OnTrainingEnded(int32_t rank, const std::string& detail) override;
  void OnIteration(int32_t rank, int64_t end_ns, int64_t duration_ns) override;
  void OnTrigger(int32_t rank, WindowReason reason, const std::string& detail) override;
  void OnStacks(uint64_t window, int32_t rank, bool available, const std::string& text) override;
  void OnSummary(uint64_t window, WorkerSummary summary) override;
  void OnWindowRecording(uint64_t window, int32_t rank, const std::string& path) override;

 private:
  // The server asked for `window`'s recordings (reader thread): queued in chunks.
  void SendRecordings(uint64_t window);
  void Push(CollectorMessage message, size_t bytes);
  void Loop();
  // Writes until the stream breaks or Stop; returns true when stopping.
  bool Serve(ControlStream* stream);
  void ReadLoop(ControlStream* stream);
  void Dispatch(const ServerMessage& message);
  ControlRegistration RegistrationNow();
  // The server asked for the full summaries of `ranks` (reader thread).
  void SendKept(uint64_t window, const std::vector<int32_t>& ranks);
  // Drops kept windows older than keep_summaries_ms (mu_ held).
  void ExpireKeptLocked(int64_t now_ns);
  // Drops `window`'s kept summaries, remembering why for a later request (mu_ held).
  void ForgetKeptLocked(uint64_t window, std::string why);
  void NoteGoneLocked(uint64_t window, std::string why);
  double KeepLimitMb() const;
  void Log(const std::string& line);

  GrpcLinkOptions options_;
  CollectorControl* control_ = nullptr;
  std::unique_ptr<ControlClient> client_;
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  bool stop_ = false;
  int64_t flush_deadline_ns_ = 0;  // steady clock; set by Stop
  bool stream_broken_ = false;
  bool first_attempt_done_ = false;
  Status first_attempt_;
  std::deque<std::pair<CollectorMessage, size_t>> queue_;
  size_t queued_bytes_ = 0;
  std::vector<ControlIteration> iterations_;
  std::map<int32_t, WorkerInfo> ranks_;  // connected now, for re-registration
  bool send_digests_ = false;            // what the server said at the last registration
  bool takes_not_kept_ = false;          // likewise: answer ControlSummariesNotKept
  struct KeptWindow {
    int64_t since_ns = 0;                      // steady clock
    std::map<int32_t, std::string> summaries;  // rank -> EncodeWorkerSummary bytes
  };
  std::map<uint64_t, KeptWindow> kept_;  // window id -> its full summaries
  size_t kept_bytes_ = 0;
  static constexpr size_t kGoneWindowsRemembered = 64;
  std::map<uint64_t, std::string> gone_why_;  // window -> why (some of) its summaries went
  std::map<uint64_t, std::map<int32_t, std::string>> recordings_;  // window -> rank -> file
  GrpcLinkStats stats_;
  uint64_t rejected_logged_ = 0;
};

// This host's CPU count, memory and CPU model, for the registration.
ControlHardware LocalHardware();

}  // namespace perftracker
