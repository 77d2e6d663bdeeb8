// `perftracker collector`: a node collector for ranks started separately (multi-host jobs
// launched by a scheduler): it serves the agents on a Unix socket and talks to a remote
// `perftracker server`. Runs until SIGINT or SIGTERM. See docs/server.md.
#pragma once

#include <string>

#include "perftracker/cli/remote_options.h"

namespace CLI {
class App;
}

namespace perftracker {

struct CollectorCommandOptions {
  RemoteOptions remote;
  std::string socket;  // default: /tmp/perftracker-<job id>.sock
  // Window recordings for the server's Perfetto timelines (docs/perfetto-export.md).
  std::string recordings_dir;  // default: <socket>.recordings
  size_t perfetto_events_per_rank = 250'000;
};

CLI::App* AddCollectorCommand(CLI::App& app, CollectorCommandOptions* options);
int RunCollector(const CollectorCommandOptions& options);

}  // namespace perftracker
