#include "perftracker/server/server_process.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "perftracker/server/http/api_token.h"
#include "perftracker/server/http/http_server.h"
#include "perftracker/server/metrics/server_metrics.h"
#include "perftracker/server/open_store.h"
#include "perftracker/server/report_writer.h"
#include "perftracker/wire/control_server.h"

namespace perftracker {
namespace {

StatusOr<std::string> ReadPem(const std::string& path, const char* option) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::InvalidArgument(std::string(option) + " " + path + ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().find("-----BEGIN") == std::string::npos) {
    return Status::InvalidArgument(std::string(option) + " " + path + ": not a PEM file");
  }
  return ss.str();
}

}  // namespace

bool SplitHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= address.size()) return false;
  std::string h = address.substr(0, colon);
  if (h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const std::string p = address.substr(colon + 1);
  char* end = nullptr;
  const long v = std::strtol(p.c_str(), &end, 10);
  if (end == p.c_str() || *end != '\0' || v < 0 || v > 65535 || h.empty()) return false;
  *host = h;
  *port = static_cast<int>(v);
  return true;
}

ServerProcess::ServerProcess(ServerProcessOptions options) : options_(std::move(options)) {}

ServerProcess::~ServerProcess() { Stop(); }

Status ServerProcess::Start() {
  if (options_.token.size() < kMinApiTokenLength) {
    return Status::InvalidArgument("--token-file: the token must have at least " +
                                   std::to_string(kMinApiTokenLength) + " characters");
  }
  if (options_.tls_cert_file.empty() != options_.tls_key_file.empty()) {
    return Status::InvalidArgument("--tls-cert and --tls-key go together (TLS needs both)");
  }
  if (options_.store_path.empty()) return Status::InvalidArgument("--store: no path given");
  {
    const Status st = EnsureReportDir(options_.service.coordinator.report_dir);
    if (!st.ok()) return Status::InvalidArgument("--report-dir: " + st.message());
  }
  StatusOr<std::unique_ptr<Store>> store = OpenStore(options_.store_path);
  if (!store.ok()) return Status::InvalidArgument("--store: " + store.status().message());
  store_ = std::move(store).value();
  metrics_ = std::make_unique<ServerMetrics>();

  ControlServiceOptions so = options_.service;
  so.store = store_.get();
  so.metrics = metrics_.get();
  so.store_shared = IsSharedStoreSpec(options_.store_path);
  service_ = std::make_unique<ControlService>(so);
  PERFTRACKER_RETURN_IF_ERROR(service_->Start());

  ControlServerOptions go;
  go.listen = options_.listen;
  go.token = options_.token;
  go.max_message_bytes = options_.max_message_bytes;
  go.log = options_.service.log;
  if (!options_.tls_cert_file.empty()) {
    StatusOr<std::string> cert = ReadPem(options_.tls_cert_file, "--tls-cert");
    if (!cert.ok()) return cert.status();
    StatusOr<std::string> key = ReadPem(options_.tls_key_file, "--tls-key");
    if (!key.ok()) return key.status();
    go.tls_cert_pem = *cert;
    go.tls_key_pem = *key;
  }
  StatusOr<std::unique_ptr<ControlServer>> grpc = ControlServer::Start(go, service_.get());
  if (!grpc.ok()) return Status::InvalidArgument("--listen: " + grpc.status().message());
  grpc_ = std::move(grpc).value();

  if (!options_.http_listen.empty()) {
    HttpServerOptions ho;
    if (!SplitHostPort(options_.http_listen, &ho.host, &ho.port)) {
      return Status::InvalidArgument("--http-listen " + options_.http_listen +
                                     ": expected host:port, e.g. 127.0.0.1:7071");
    }
    ho.token = options_.token;
    ho.tls_cert_file = options_.tls_cert_file;
    ho.tls_key_file = options_.tls_key_file;
    ho.max_connections_per_peer = options_.http_connections_per_peer;
    if (options_.service.log) {
      auto log = options_.service.log;
      ho.log = [log](const std::string& line) { log(line); };
    }
    http_ = std::make_unique<HttpServer>(store_.get(), metrics_.get(), service_.get(), ho);
    const Status st = http_->Start();
    if (!st.ok()) return Status::InvalidArgument("--http-listen: " + st.message());
  }
  return Status::Ok();
}

void ServerProcess::Stop() {
  if (http_) http_->Stop();
  if (grpc_) grpc_->Shutdown();
  if (service_) service_->Stop();
  http_.reset();
  grpc_.reset();
  service_.reset();
  metrics_.reset();
  store_.reset();
}

int ServerProcess::grpc_port() const { return grpc_ ? grpc_->port() : 0; }
int ServerProcess::http_port() const { return http_ ? http_->port() : 0; }
std::string ServerProcess::http_url() const { return http_ ? http_->base_url() : std::string(); }

}  // namespace perftracker
