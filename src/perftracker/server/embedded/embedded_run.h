// EmbeddedRun: the perftracker side of `perftracker run` in one process, wired once.
//
// Without a remote server: the node collector (Unix socket, ring draining, host sampling),
// the window coordinator (the embedded server: windows, localization, reports) and, unless
// turned off, the store that keeps what a server would (for `perftracker server --store` to
// serve afterwards): collector → StoreRecorder → WindowCoordinator. With a remote server
// (EmbeddedRunOptions::remote) only the collector runs here, linked to that server over gRPC;
// the server coordinates every host's windows and keeps the reports.
//
// Lifetime: Start() (before the job), the job runs with JobEnvironment() set, Finish() with
// its exit code (the last summaries, everything stopped, reports stored, the agents' stale
// shared memory removed), FinalSummary() for the user. Problems that only leave the job
// without perftracker (no socket directory, a collector that cannot listen, a server not yet
// reachable) do not stop the run: they are warnings() and the job runs all the same.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "perftracker/collector/grpc_coordinator_link.h"
#include "perftracker/collector/node_collector.h"
#include "perftracker/core/status.h"
#include "perftracker/server/store/store.h"
#include "perftracker/server/store_recorder.h"
#include "perftracker/server/window_coordinator.h"

namespace perftracker {

struct EmbeddedRunOptions {
  std::string run_id;  // NewRunId(); the store's job id and the agents' shared-memory names
  std::string title;   // the job's command line
  // The embedded server's options (report_dir, windows, localizer, text); unused with remote.
  CoordinatorOptions coordinator;
  std::string store;  // "" = <report_dir>/perftracker.db, "off" = none; unused with remote
  // With coordinator.perfetto, or remote: each rank's window events the collector keeps (at
  // most this many per rank and window, in recordings_dir) for the window's timeline; a
  // remote server asks for them after the window's diagnosis (docs/perfetto-export.md).
  size_t perfetto_events_per_rank = 0;
  std::string recordings_dir;
  // Set: no server here; the collector reports to this one.
  std::optional<GrpcLinkOptions> remote;
  std::string remote_server;  // its address, for the final summary
  std::string remote_job;     // the job's id there, for the final summary
  // The detector settings the agents run with: a run without a window says how far the
  // iteration time rose against this bar (no_window_explanation.h).
  int window_iterations = 50;
  double slowdown_ratio = 0.05;
};

// A run id unique on this host: the wall-clock second and this process' pid.
std::string NewRunId();

class EmbeddedRun {
 public:
  // Starts the server (or the link to the remote one) and the collector. An error is the one
  // line to show (it names the option at fault); nothing is left running then.
  static StatusOr<std::unique_ptr<EmbeddedRun>> Start(EmbeddedRunOptions options);
  ~EmbeddedRun();

  EmbeddedRun(const EmbeddedRun&) = delete;
  EmbeddedRun& operator=(const EmbeddedRun&) = delete;

  // False: the job runs without perftracker (warnings() says why).
  bool live() const { return live_; }
  // What the job needs to find the collector: PERFTRACKER_SOCKET and PERFTRACKER_RUN_ID
  // (empty when not live).
  std::vector<std::pair<std::string, std::string>> JobEnvironment() const;
  // Lines for stderr, each to be prefixed "perftracker: ".
  const std::vector<std::string>& warnings() const { return warnings_; }

  // The job has exited with `exit_code`; call once.
  void Finish(int exit_code);
  // What the run prints on stdout at its end: the most important window's diagnosis and
  // where every report is (or where the remote server keeps them); "" when not live.
  std::string FinalSummary() const;

 private:
  explicit EmbeddedRun(EmbeddedRunOptions options);

  EmbeddedRunOptions options_;
  std::unique_ptr<GrpcCoordinatorLink> remote_link_;
  std::unique_ptr<WindowCoordinator> coordinator_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<StoreRecorder> recorder_;
  std::string store_path_;
  std::string socket_dir_;
  std::unique_ptr<NodeCollector> collector_;
  bool live_ = false;
  std::vector<std::string> warnings_;
};

}  // namespace perftracker
