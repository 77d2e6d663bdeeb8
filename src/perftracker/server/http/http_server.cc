#include "perftracker/server/http/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>

#include "perftracker/server/http/api_token.h"
#include "perftracker/server/http/connection_gate.h"
#include "perftracker/server/http/request_processor.h"
#include "perftracker/server/http/tls_context.h"
#include "perftracker/server/http/ui_assets.h"

namespace perftracker {
namespace {

constexpr auto kRefusedLogPeriod = std::chrono::seconds(10);
// The largest Perfetto export sent (its default cap of 2 M events makes a few hundred MB).
constexpr uint64_t kMaxTimelineDownloadBytes = uint64_t{1} << 30;

constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The value of cookie `name` in a Cookie header ("a=1; perftracker_token=x"), or "".
std::string_view CookieValue(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    const size_t semi = header.find(';');
    std::string_view pair = Trim(header.substr(0, semi));
    header = semi == std::string_view::npos ? std::string_view() : header.substr(semi + 1);
    const size_t eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == name) return pair.substr(eq + 1);
  }
  return {};
}

// The token of "Authorization: Bearer <token>" (scheme case-insensitive), or "".
std::string_view BearerToken(std::string_view header) {
  header = Trim(header);
  if (header.size() < 7) return {};
  std::string scheme(header.substr(0, 7));
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme != "bearer ") return {};
  return Trim(header.substr(7));
}

bool IsPageRequest(const httplib::Request& req) {
  return req.method == "GET" && (req.path == "/" || req.path.rfind("/ui/", 0) == 0);
}

const char* StatusReason(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Payload Too Large";
    case 414:
      return "URI Too Long";
    case 416:
      return "Range Not Satisfiable";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    default:
      return "Error";
  }
}

Status CheckReadable(const std::string& what, const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return Status::InvalidArgument(
        fmt::format("http: {} {}: cannot read it: {}", what, path, std::strerror(errno)));
  }
  return Status::Ok();
}

}  // namespace

HttpServer::HttpServer(Store* store, ServerMetrics* metrics, JobActions* actions,
                       HttpServerOptions options)
    : store_(store),
      metrics_(metrics),
      options_(std::move(options)),
      api_(store, actions),
      refused_log_([this](const std::string& line) { Log(line); }, kRefusedLogBurst,
                   kRefusedLogPeriod),
      gate_log_([this](const std::string& line) { Log(line); }, kRefusedLogBurst,
                kRefusedLogPeriod) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Log(const std::string& line) {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "perftracker: %s\n", line.c_str());
  }
}

std::string HttpServer::base_url() const {
  return fmt::format("{}://{}:{}", tls() ? "https" : "http", options_.host, port_);
}

std::string HttpServer::login_url() const {
  // '+' would read as a space in a query string; '/' and '=' are encoded for good measure.
  std::string encoded;
  for (char c : options_.token) {
    if (c == '+') {
      encoded += "%2B";
    } else if (c == '/') {
      encoded += "%2F";
    } else if (c == '=') {
      encoded += "%3D";
    } else {
      encoded += c;
    }
  }
  return base_url() + "/?token=" + encoded;
}

Status HttpServer::Start() {
  if (gate_ != nullptr) return Status::InvalidArgument("http: already started");
  if (store_ == nullptr) return Status::InvalidArgument("http: no store");
  if (options_.token.size() < kMinApiTokenLength) {
    return Status::InvalidArgument(fmt::format(
        "http: an API token of at least {} characters is required (e.g. openssl rand -hex 32)",
        kMinApiTokenLength));
  }
  for (char c : options_.token) {
    if (!std::isalnum(static_cast<unsigned char>(c)) &&
        std::string_view("-._~+/=").find(c) == std::string_view::npos) {
      return Status::InvalidArgument(
          "http: the API token may only hold letters, digits and - . _ ~ + / = (it travels in a "
          "cookie and in the login URL)");
    }
  }
  if (options_.tls_cert_file.empty() != options_.tls_key_file.empty()) {
    return Status::InvalidArgument(
        "http: TLS needs both a certificate and a key file (got only one)");
  }
  if (options_.threads < 1) return Status::InvalidArgument("http: threads must be at least 1");
  if (options_.max_connections < 1 || options_.max_connections_per_peer < 1) {
    return Status::InvalidArgument("http: connection limits must be at least 1");
  }
  if (tls()) {
    PERFTRACKER_RETURN_IF_ERROR(CheckReadable("TLS certificate", options_.tls_cert_file));
    PERFTRACKER_RETURN_IF_ERROR(CheckReadable("TLS key", options_.tls_key_file));
    StatusOr<std::unique_ptr<TlsContext>> tls =
        TlsContext::Load(options_.tls_cert_file, options_.tls_key_file);
    if (!tls.ok()) return tls.status();
    tls_ = std::move(tls).value();
  }
  processor_ = std::make_unique<RequestProcessor>();
  processor_->set_payload_max_length(options_.max_body_bytes);
  httplib::Headers headers = {{"X-Content-Type-Options", "nosniff"},
                              {"X-Frame-Options", "DENY"},
                              {"Referrer-Policy", "no-referrer"},
                              {"Content-Security-Policy", kContentSecurityPolicy}};
  // HSTS: a browser that reached this server over HTTPS never sends it the token in clear.
  if (tls()) headers.emplace("Strict-Transport-Security", "max-age=31536000");
  processor_->set_default_headers(std::move(headers));
  Routes();

  ConnectionGateOptions gate;
  gate.host = options_.host;
  gate.port = options_.port;
  gate.threads = options_.threads;
  gate.max_connections = options_.max_connections;
  gate.max_connections_per_peer = options_.max_connections_per_peer;
  gate.request_timeout = options_.request_timeout;
  gate.handshake_timeout = options_.handshake_timeout;
  gate.max_body_bytes = options_.max_body_bytes;
  gate_ = std::make_unique<ConnectionGate>(
      gate, tls_.get(), [this](httplib::Stream& stream, bool last) { return Serve(stream, last); },
      [this](GateClose why, const std::string& peer, int status) {
        OnGateClose(why, peer, status);
      });
  if (Status st = gate_->Start(); !st.ok()) {
    gate_.reset();
    processor_.reset();
    tls_.reset();
    return st;
  }
  port_ = gate_->port();
  return Status::Ok();
}

void HttpServer::Stop() {
  if (gate_ == nullptr) return;
  gate_->Stop();
  gate_.reset();
  processor_.reset();
  tls_.reset();
}

bool HttpServer::Serve(httplib::Stream& stream, bool last) {
  return processor_->Process(stream, last);
}

void HttpServer::OnGateClose(GateClose why, const std::string& peer, int status) {
  if (why == GateClose::kRefusedRequest || why == GateClose::kPeerLimit) {
    if (metrics_ != nullptr) metrics_->RecordHttpResponse(status);
  }
  std::string what;
  switch (why) {
    case GateClose::kPeerLimit:
      what = fmt::format("refused a connection: {} connections from this address already",
                         options_.max_connections_per_peer);
      break;
    case GateClose::kEvicted:
      what = fmt::format(
          "closed a connection that sent no complete request: {} connections open in all",
          options_.max_connections);
      break;
    case GateClose::kRequestTimeout:
      what = fmt::format("closed a connection: no complete request within {} ms",
                         options_.request_timeout.count());
      break;
    case GateClose::kHandshakeTimeout:
      what = fmt::format("closed a connection: TLS handshake not done within {} ms",
                         options_.handshake_timeout.count());
      break;
    case GateClose::kRefusedRequest:
      what = fmt::format("refused a request: {}", status);
      break;
  }
  gate_log_.Log(fmt::format("http: {} ({})", what, peer));
}

void HttpServer::Respond(httplib::Response& res, const ApiResponse& api) {
  res.status = api.status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(api.body, "application/json");
}

void HttpServer::ServeTimeline(const std::string& job_id, const std::string& window_id,
                               httplib::Response& res) {
  std::unique_ptr<TimelineFile> file;
  const ApiResponse opened = api_.OpenTimeline(job_id, window_id, &file);
  if (file == nullptr) {
    Respond(res, opened);
    return;
  }
  res.status = 200;
  res.set_header("Cache-Control", "no-store");
  // The name is the server's own (*.perfetto.json, checked by TimelineFile): no quoting needed
  // beyond refusing what a header cannot carry.
  std::string name = file->file_name();
  for (char& c : name) {
    if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) c = '_';
  }
  res.set_header("Content-Disposition", "attachment; filename=\"" + name + "\"");
  // Read whole, then sent: cpp-httplib's streamed answers (content providers) stop at once
  // on a server that does not listen itself, as RequestProcessor does not. Memory: the
  // file's size per download in flight, bounded by kMaxTimelineDownloadBytes.
  if (file->size() > kMaxTimelineDownloadBytes) {
    Respond(res,
            JsonApi::Error(
                413, fmt::format("job {} window {}: its Perfetto export ({} MB) is larger than "
                                 "the server sends ({} MB): copy {} from the server's report "
                                 "directory instead",
                                 job_id, window_id, file->size() >> 20,
                                 kMaxTimelineDownloadBytes >> 20, file->file_name())));
    return;
  }
  std::string body(file->size(), '\0');
  for (uint64_t done = 0; done < body.size();) {
    const int64_t n = file->Read(done, body.data() + done, body.size() - done);
    if (n <= 0) {
      Respond(res, JsonApi::Error(500, fmt::format("job {} window {}: reading its Perfetto export "
                                                   "failed (it shrank, or a read error)",
                                                   job_id, window_id)));
      return;
    }
    done += static_cast<uint64_t>(n);
  }
  res.body = std::move(body);  // set_content would copy it
  res.set_header("Content-Type", "application/json");
}

void HttpServer::ServeAsset(const std::string& path, httplib::Response& res) {
  const UiAsset* asset = FindUiAsset(path);
  if (asset == nullptr) {
    Respond(res, JsonApi::Error(404, "no such page: " + path.substr(0, 100)));
    return;
  }
  res.status = 200;
  res.set_content(std::string(asset->bytes()), std::string(asset->content_type).c_str());
}

bool HttpServer::Authorize(const httplib::Request& req, httplib::Response& res) {
  if (req.path == "/healthz") return true;
  const std::string authorization = req.get_header_value("Authorization");
  const std::string_view bearer = BearerToken(authorization);
  const std::string cookie_header = req.get_header_value("Cookie");
  const std::string_view cookie = CookieValue(cookie_header, kTokenCookie);
  if (req.method == "GET" && req.has_param("token")) {
    // The login URL: set the cookie and send the browser to the page without the token.
    if (ConstantTimeEquals(req.get_param_value("token"), options_.token)) {
      std::string cookie_line =
          fmt::format("{}={}; Path=/; HttpOnly; SameSite=Strict", kTokenCookie, options_.token);
      if (tls()) cookie_line += "; Secure";
      res.set_header("Set-Cookie", cookie_line);
      res.set_redirect(req.path, 303);
      return false;
    }
  } else if ((!bearer.empty() && ConstantTimeEquals(bearer, options_.token)) ||
             (!cookie.empty() && ConstantTimeEquals(cookie, options_.token))) {
    return true;
  }
  const bool presented = !bearer.empty() || !cookie.empty() || req.has_param("token");
  refused_log_.Log(fmt::format("http: refused {} {} from {}: {}", req.method,
                               req.path.substr(0, 200), req.remote_addr,
                               presented ? "wrong token" : "no token"));
  if (metrics_ != nullptr) metrics_->RecordUnauthorized();
  res.status = 401;
  res.set_header("WWW-Authenticate", "Bearer realm=\"perftracker\"");
  if (IsPageRequest(req)) {
    res.set_content(
        "<!doctype html><meta charset=\"utf-8\"><title>perftracker: log in</title>"
        "<p>This perftracker server needs its token. Open this page once with "
        "<code>?token=&lt;token&gt;</code> added to its address, the token being the first "
        "line of the server's token file (<code>perftracker server --token-file</code>, by "
        "default <code>&lt;report-dir&gt;/server.token</code>; the server prints this login "
        "address, with the file's path, when it starts). The server then keeps you logged in "
        "with a cookie.</p>",
        "text/html; charset=utf-8");
  } else {
    res.set_content(nlohmann::json{{"error", presented ? "wrong token"
                                                       : "missing token: send "
                                                         "'Authorization: Bearer "
                                                         "<token>'"}}
                        .dump(),
                    "application/json");
  }
  return false;
}

void HttpServer::Routes() {
  httplib::Server& s = *processor_;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return Authorize(req, res) ? httplib::Server::HandlerResponse::Unhandled
                               : httplib::Server::HandlerResponse::Handled;
  });
  s.set_logger([this](const httplib::Request&, const httplib::Response& res) {
    if (metrics_ != nullptr) metrics_->RecordHttpResponse(res.status);
  });
  s.set_exception_handler(
      [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        Log(fmt::format("http: {} {} failed: {}", req.method, req.path.substr(0, 200), what));
        Respond(res, JsonApi::Error(500, "internal error (logged by the server)"));
      });
  s.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        const char* reason = StatusReason(res.status);
        res.set_content(nlohmann::json{{"error", fmt::format("{} {}", res.status, reason)}}.dump(),
                        "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));

  s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    if (metrics_ == nullptr) {
      Respond(res, JsonApi::Error(404, "this server keeps no metrics"));
      return;
    }
    res.set_content(metrics_->Serialize(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/api/v1/jobs",
        [this](const httplib::Request&, httplib::Response& res) { Respond(res, api_.ListJobs()); });
  s.Get(R"(/api/v1/jobs/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    Respond(res, api_.GetJob(req.matches[1]));
  });
  s.Get(R"(/api/v1/jobs/([^/]+)/iterations)",
        [this](const httplib::Request& req, httplib::Response& res) {
          Respond(res, api_.ListIterations(req.matches[1], req.get_param_value("since"),
                                           req.get_param_value("limit")));
        });
  s.Get(R"(/api/v1/jobs/([^/]+)/windows)",
        [this](const httplib::Request& req, httplib::Response& res) {
          Respond(res, api_.ListWindows(req.matches[1]));
        });
  s.Get(R"(/api/v1/jobs/([^/]+)/windows/([^/]+)/diagnosis)",
        [this](const httplib::Request& req, httplib::Response& res) {
          Respond(res, api_.GetDiagnosis(req.matches[1], std::string(req.matches[2])));
        });
  s.Get(R"(/api/v1/jobs/([^/]+)/windows/([^/]+)/summaries)", [this](const httplib::Request& req,
                                                                    httplib::Response& res) {
    Respond(res, api_.GetSummaries(req.matches[1], std::string(req.matches[2]),
                                   req.get_param_value("top"), req.get_param_value("function")));
  });
  s.Get(R"(/api/v1/jobs/([^/]+)/windows/([^/]+)/perfetto)",
        [this](const httplib::Request& req, httplib::Response& res) {
          ServeTimeline(req.matches[1], std::string(req.matches[2]), res);
        });
  s.Get(R"(/api/v1/jobs/([^/]+)/compare)",
        [this](const httplib::Request& req, httplib::Response& res) {
          Respond(res, api_.CompareWindows(req.matches[1], req.get_param_value("baseline"),
                                           req.get_param_value("current")));
        });
  s.Post(R"(/api/v1/jobs/([^/]+)/baseline)",
         [this](const httplib::Request& req, httplib::Response& res) {
           Respond(res, api_.SetBaseline(req.matches[1], req.get_param_value("window")));
         });
  s.Post(R"(/api/v1/jobs/([^/]+)/trigger)",
         [this](const httplib::Request& req, httplib::Response& res) {
           Respond(res, api_.Trigger(req.matches[1]));
         });
  s.Get("/", [this](const httplib::Request&, httplib::Response& res) { ServeAsset("/", res); });
  s.Get(R"(/ui/[A-Za-z0-9._-]+)",
        [this](const httplib::Request& req, httplib::Response& res) { ServeAsset(req.path, res); });
}

}  // namespace perftracker
