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
};

CLI::App* AddCollectorCommand(CLI::App& app, CollectorCommandOptions* options);
int RunCollector(const CollectorCommandOptions& options);

}  // namespace perftracker
