#include "perftracker/cli/collector_command.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include "perftracker/collector/grpc_coordinator_link.h"
#include "perftracker/collector/node_collector.h"

namespace perftracker {
namespace {

constexpr int kFlushMs = 3000;

}  // namespace

CLI::App* AddCollectorCommand(CLI::App& app, CollectorCommandOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "collector",
      "Run a node collector for ranks started separately, reporting to a perftracker server: "
      "start the ranks with PERFTRACKER_SOCKET=<--socket> and the agent on PYTHONPATH (the "
      "command prints both). Runs until interrupted. See docs/server.md");
  cmd->add_option("--server", o->remote.server, "host:port of the server's --listen")->required();
  AddRemoteOptions(cmd, &o->remote);
  cmd->add_option("--socket", o->socket,
                  "Unix socket the ranks' agents connect to (default: "
                  "/tmp/perftracker-<job id>.sock)");
  cmd->add_option("--perfetto-events-per-rank", o->perfetto_events_per_rank,
                  "Each window's timeline: keep at most this many events per rank (40 bytes "
                  "each) on this host until the server asks for them after the diagnosis; 0: "
                  "none (docs/perfetto-export.md)")
      ->check(CLI::Range(size_t{0}, size_t{100'000'000}))
      ->default_val(o->perfetto_events_per_rank);
  cmd->add_option("--recordings-dir", o->recordings_dir,
                  "Where the window recordings wait for the server (mode 0700; the latest 3 "
                  "windows' at most)")
      ->default_str("<socket>.recordings");
  return cmd;
}

int RunCollector(const CollectorCommandOptions& options) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  RemoteOptions remote = options.remote;
  if (remote.job_id.empty()) {
    const char* env = std::getenv("PERFTRACKER_JOB_ID");
    if (env != nullptr && *env != '\0') {
      remote.job_id = env;
    } else {
      fmt::print(stderr,
                 "perftracker collector: --job-id is needed (or $PERFTRACKER_JOB_ID): every host "
                 "of one job must give the same id\n");
      return 2;
    }
  }
  StatusOr<GrpcLinkOptions> link_options = MakeLinkOptions(remote, "job " + remote.job_id);
  if (!link_options.ok()) {
    fmt::print(stderr, "perftracker collector: {}\n", link_options.status().message());
    return 2;
  }
  GrpcCoordinatorLink link(*link_options);
  CollectorOptions co;
  co.socket_path =
      options.socket.empty() ? "/tmp/perftracker-" + remote.job_id + ".sock" : options.socket;
  co.sampler = MakeHostSampler();
  if (options.perfetto_events_per_rank > 0) {
    co.record_dir =
        options.recordings_dir.empty() ? co.socket_path + ".recordings" : options.recordings_dir;
    co.record_events = options.perfetto_events_per_rank;
  }
  NodeCollector collector(co, &link);
  link.SetControl(&collector);
  {
    const Status st = link.Start();
    if (!st.ok()) {
      fmt::print(stderr, "perftracker collector: --server: {}\n", st.message());
      return 2;
    }
  }
  const Status first = link.WaitFirstAttempt(link_options->connect_timeout_ms + 2000);
  if (!first.ok()) {
    fmt::print(stderr,
               "perftracker collector: {}; the collector serves the ranks anyway and "
               "keeps trying to reach the server\n",
               first.message());
  }
  unlink(co.socket_path.c_str());
  const Status st = collector.Start();
  if (!st.ok()) {
    fmt::print(stderr, "perftracker collector: --socket: {}\n", st.message());
    link.Stop(0);
    return 2;
  }
  fmt::print(stderr,
             "perftracker collector: job {} on {}: start the ranks with PERFTRACKER_SOCKET={} "
             "PERFTRACKER_RUN_ID={}\n",
             remote.job_id, link_options->host.empty() ? "this host" : link_options->host,
             co.socket_path, remote.job_id);
  std::fflush(stderr);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  collector.Stop();
  link.Stop(kFlushMs);
  return 0;
}

}  // namespace perftracker
