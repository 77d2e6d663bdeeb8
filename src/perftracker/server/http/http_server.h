// HttpServer: the server's one HTTP(S) port: the JSON API (json_api.h), the web UI (the
// embedded files of ui_assets.h) and Prometheus' /metrics, on cpp-httplib.
//
// Security model:
// - Binds 127.0.0.1 unless told otherwise.
// - Every request but GET /healthz needs the API token: "Authorization: Bearer <token>", or
//   the cookie a browser gets by opening any page with ?token=<token> once (the login URL;
//   the server answers with the cookie, HttpOnly and SameSite=Strict, and a redirect to the
//   same page without the token, so it does not stay in the address bar). Tokens are
//   compared in constant time. Refused requests get 401 and one log line each (at most
//   kRefusedLogBurst lines per 10 s; the rest are counted and summarized).
// - HTTPS when given a certificate and key (PEM files).
// - Request bodies above max_body_bytes get 413, URIs above 8 KiB 414 (cpp-httplib), bad
//   parameters 400 with a JSON error; nothing a client sends can crash the server: handler
//   exceptions are caught and answered 500.
// - Pages carry a strict Content-Security-Policy (scripts and styles only from this
//   server), nosniff and no framing; the UI escapes everything it shows.
//
// - Slow and idle clients cost no handler thread (ConnectionGate): a whole request must
//   arrive within request_timeout of the connection being ready for it (the deadline does
//   not restart with each byte), TLS handshakes run on the gate's event loop under their own
//   deadline, each client address may hold at most max_connections_per_peer connections,
//   and handler threads only ever answer complete requests.
//
// Threads: Start() binds and serves until Stop(): one event-loop thread (the gate) and
// `threads` handler threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "perftracker/core/status.h"
#include "perftracker/server/http/connection_gate.h"
#include "perftracker/server/http/job_actions.h"
#include "perftracker/server/http/json_api.h"
#include "perftracker/server/http/rate_limited_log.h"
#include "perftracker/server/metrics/server_metrics.h"
#include "perftracker/server/store/store.h"

namespace httplib {
class Stream;
struct Request;
struct Response;
}  // namespace httplib

namespace perftracker {

class RequestProcessor;
class TlsContext;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port (see HttpServer::port())
  // Required: at least kMinApiTokenLength characters from [A-Za-z0-9-._~+/=] (it travels in
  // a cookie and in the login URL).
  std::string token;
  std::string tls_cert_file;  // both or neither: HTTPS when given
  std::string tls_key_file;
  size_t max_body_bytes = 64 * 1024;
  int threads = 8;
  // Connection limits (ConnectionGate). Behind a reverse proxy every connection comes from
  // the proxy's address: raise max_connections_per_peer there.
  size_t max_connections = 512;
  size_t max_connections_per_peer = 32;
  std::chrono::milliseconds request_timeout{10'000};
  std::chrono::milliseconds handshake_timeout{10'000};
  // Where log lines go (refused requests, handler failures); default: stderr.
  std::function<void(const std::string&)> log;
};

class HttpServer {
 public:
  static constexpr int kRefusedLogBurst = 5;
  static constexpr const char* kTokenCookie = "perftracker_token";

  // `store` is required; `metrics` and `actions` may be null (then /metrics answers 404 and
  // the trigger endpoint 501). All must outlive the server.
  HttpServer(Store* store, ServerMetrics* metrics, JobActions* actions, HttpServerOptions options);
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Validates the options, loads the TLS files, binds and starts serving. Errors name the
  // option or file and the problem (e.g. "http: cannot listen on 127.0.0.1:80: ...").
  Status Start();
  void Stop();

  int port() const { return port_; }
  bool tls() const { return !options_.tls_cert_file.empty(); }
  // "http://127.0.0.1:8080" (https when TLS).
  std::string base_url() const;
  // The URL that logs a browser in: base_url() + "/?token=<token>".
  std::string login_url() const;

 private:
  void Routes();
  // Answers one complete request (the gate's handler); whether the connection stays open.
  bool Serve(httplib::Stream& stream, bool last);
  // Logs (rate-limited) and counts a connection the gate closed on its own.
  void OnGateClose(GateClose why, const std::string& peer, int status);
  // The pre-routing check: true when the request may proceed; otherwise `res` is the answer
  // (401, or the login redirect).
  bool Authorize(const httplib::Request& req, httplib::Response& res);
  void Respond(httplib::Response& res, const ApiResponse& api);
  void ServeAsset(const std::string& path, httplib::Response& res);
  // GET /api/v1/jobs/{job}/windows/{id}/perfetto: the window's export (at most 1 GiB).
  void ServeTimeline(const std::string& job_id, const std::string& window_id,
                     httplib::Response& res);
  void Log(const std::string& line);

  Store* store_;
  ServerMetrics* metrics_;
  HttpServerOptions options_;
  JsonApi api_;
  RateLimitedLog refused_log_;
  RateLimitedLog gate_log_;
  std::unique_ptr<TlsContext> tls_;
  std::unique_ptr<RequestProcessor> processor_;
  std::unique_ptr<ConnectionGate> gate_;
  int port_ = 0;
};

}  // namespace perftracker
