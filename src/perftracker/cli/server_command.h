// `perftracker server`: the multi-host server (server/ServerProcess): the control plane for
// collectors (gRPC), the HTTP API + web UI + /metrics, the SQLite store. Runs until SIGINT
// or SIGTERM. See docs/server.md.
#pragma once

#include <string>

#include "perftracker/cli/window_options.h"

namespace CLI {
class App;
}

namespace perftracker {

struct ServerCommandOptions {
  std::string listen = "127.0.0.1:7070";
  std::string http_listen = "127.0.0.1:7071";
  bool no_http = false;
  int http_connections_per_peer = 32;
  std::string store;       // default: <report_dir>/perftracker.db
  std::string token_file;  // default: <report_dir>/server.token (created when missing)
  std::string tls_cert;
  std::string tls_key;
  std::string report_dir = "perftracker-server";
  WindowOptions window{.max_windows = 5};
  double material_share = 0.05;
  int max_message_mb = 64;
  int digest_min_workers = 1024;
  double perfetto_wait_seconds = 30;
};

CLI::App* AddServerCommand(CLI::App& app, ServerCommandOptions* options);
// Returns 0 after a clean stop by signal, 2 when it cannot start (one line on stderr).
int RunServer(const ServerCommandOptions& options);

}  // namespace perftracker
