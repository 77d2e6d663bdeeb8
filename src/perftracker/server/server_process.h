// ServerProcess: everything `perftracker server` runs, composed (docs/server.md):
//
//   gRPC  --listen       ControlServer (wire/) ─► ControlService: jobs, coordinators
//   HTTP  --http-listen  HttpServer (server/http/): JSON API, web UI, /metrics
//   both read / write    Store (--store: an SQLite file, or a PostgreSQL URL shared by
//                        several servers; open_store.h), ServerMetrics
//
// One token guards both ports (gRPC metadata and HTTP bearer / cookie); one certificate and
// key, when given, make both speak TLS. Reports also go to files under
// <report_dir>/<job id>/ as with `perftracker run`.
//
// Start order: store, metrics, service, gRPC, HTTP; Stop in reverse (the gRPC streams end
// first, so no collector message reaches a stopped coordinator).
#pragma once

#include <memory>
#include <string>

#include "perftracker/core/status.h"
#include "perftracker/server/control_service.h"

namespace perftracker {

class ControlServer;
class HttpServer;
class ServerMetrics;
class Store;

struct ServerProcessOptions {
  std::string listen = "127.0.0.1:7070";       // gRPC, host:port (port 0: any free one)
  std::string http_listen = "127.0.0.1:7071";  // host:port; empty: no HTTP server
  size_t http_connections_per_peer = 32;       // HttpServerOptions::max_connections_per_peer
  std::string store_path;     // SQLite file (created if missing) or postgresql:// URL
  std::string token;          // required (at least 16 characters)
  std::string tls_cert_file;  // both or neither
  std::string tls_key_file;
  size_t max_message_bytes = 64u << 20;
  ControlServiceOptions service;  // coordinator template (report_dir...), log
};

class ServerProcess {
 public:
  explicit ServerProcess(ServerProcessOptions options);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Errors name the option and the problem ("--store x.db: ...", "--listen ...").
  Status Start();
  void Stop();

  int grpc_port() const;
  int http_port() const;
  std::string http_url() const;  // "" without HTTP
  ControlService* service() { return service_.get(); }

 private:
  ServerProcessOptions options_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<ControlServer> grpc_;
  std::unique_ptr<HttpServer> http_;
};

// Splits "host:port" ("[::1]:80" too); false when it is not of that form or the port is not
// in 0..65535.
bool SplitHostPort(const std::string& address, std::string* host, int* port);

}  // namespace perftracker
