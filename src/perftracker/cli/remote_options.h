// The options that point a local collector at a remote `perftracker server` (shared by
// `perftracker run --server` and `perftracker collector`), and what they become: the
// GrpcCoordinatorLink's options. See docs/server.md.
#pragma once

#include <string>

#include "perftracker/collector/grpc_coordinator_link.h"
#include "perftracker/core/status.h"

namespace CLI {
class App;
}

namespace perftracker {

struct RemoteOptions {
  std::string server;           // host:port of the server's gRPC port
  std::string token_file;       // the server's token
  std::string tls_ca;           // PEM: the server's certificate (or its CA); set: TLS
  std::string tls_server_name;  // the name in that certificate, if not the address' host
  std::string job_id;           // shared by every host of a job
  std::string host;             // this host's name in reports (default: hostname)
  // Progressive disclosure: the encoded full summaries kept for the server to ask for.
  int keep_summaries_mb = 512;
  int keep_summaries_seconds = 600;
};

// Adds --token-file, --tls-ca, --tls-server-name, --job-id, --host, --keep-summaries-mb,
// --keep-summaries-seconds (not --server: each command words it its own way).
void AddRemoteOptions(CLI::App* cmd, RemoteOptions* options);

// Reads the token and CA files; errors name the option and the file.
StatusOr<GrpcLinkOptions> MakeLinkOptions(const RemoteOptions& options, const std::string& title);

}  // namespace perftracker
