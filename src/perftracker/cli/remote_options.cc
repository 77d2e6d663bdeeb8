#include "perftracker/cli/remote_options.h"

#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "perftracker/core/input_file.h"
#include "perftracker/server/http/api_token.h"

namespace perftracker {
namespace {

// A certificate chain is a few KiB; a file far larger than that is the wrong file.
constexpr size_t kMaxTlsCaBytes = 1 << 20;

}  // namespace

void AddRemoteOptions(CLI::App* cmd, RemoteOptions* o) {
  cmd->add_option("--token-file", o->token_file,
                  "File holding the server's token (the server's --token-file)");
  cmd->add_option("--tls-ca", o->tls_ca,
                  "Talk TLS to the server, trusting this PEM certificate (the server's "
                  "--tls-cert, or the CA that signed it)");
  cmd->add_option("--tls-server-name", o->tls_server_name,
                  "The server's name in its certificate, when it differs from the host in "
                  "--server");
  cmd->add_option("--job-id", o->job_id,
                  "The job's id on the server: the same on every host of one job (default: "
                  "$PERFTRACKER_JOB_ID, else a fresh id)");
  cmd->add_option("--host", o->host, "This host's name in the reports (default: its hostname)");
  cmd->add_option("--keep-summaries-mb", o->keep_summaries_mb,
                  "When the server asks for digests first (a large job): keep at most this "
                  "many MB of encoded full summaries for it to ask for (the oldest window's "
                  "go first)")
      ->check(CLI::Range(1, 1 << 20))
      ->default_val(512);
  cmd->add_option("--keep-summaries-seconds", o->keep_summaries_seconds,
                  "... and keep each window's for at most this long (or until the server "
                  "says the window is diagnosed)")
      ->check(CLI::Range(1, 7 * 24 * 3600))
      ->default_val(600);
}

StatusOr<GrpcLinkOptions> MakeLinkOptions(const RemoteOptions& o, const std::string& title) {
  GrpcLinkOptions l;
  l.client.address = o.server;
  l.job_id = o.job_id;
  l.host = o.host;
  l.title = title;
  l.max_kept_bytes = static_cast<size_t>(o.keep_summaries_mb) << 20;
  l.keep_summaries_ms = o.keep_summaries_seconds * 1000;
  if (!o.token_file.empty()) {
    StatusOr<std::string> token = ReadApiTokenFile(o.token_file);
    if (!token.ok()) return Status::InvalidArgument("--token-file: " + token.status().message());
    l.client.token = *token;
  }
  if (!o.tls_ca.empty()) {
    // Refuses a FIFO, device or socket instead of blocking on it.
    StatusOr<std::string> pem = ReadInputFile(o.tls_ca, kMaxTlsCaBytes);
    if (!pem.ok()) return Status::InvalidArgument("--tls-ca " + pem.status().message());
    if (pem->find("-----BEGIN CERTIFICATE") == std::string::npos) {
      return Status::InvalidArgument("--tls-ca " + o.tls_ca + ": not a readable PEM certificate");
    }
    l.client.tls_ca_pem = std::move(*pem);
    l.client.tls_server_name = o.tls_server_name;
  }
  return l;
}

}  // namespace perftracker
