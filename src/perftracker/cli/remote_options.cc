#include "perftracker/cli/remote_options.h"

#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "perftracker/server/http/api_token.h"

namespace perftracker {

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
}

StatusOr<GrpcLinkOptions> MakeLinkOptions(const RemoteOptions& o, const std::string& title) {
  GrpcLinkOptions l;
  l.client.address = o.server;
  l.job_id = o.job_id;
  l.host = o.host;
  l.title = title;
  if (!o.token_file.empty()) {
    StatusOr<std::string> token = ReadApiTokenFile(o.token_file);
    if (!token.ok()) return Status::InvalidArgument("--token-file: " + token.status().message());
    l.client.token = *token;
  }
  if (!o.tls_ca.empty()) {
    std::ifstream in(o.tls_ca, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in || ss.str().find("-----BEGIN CERTIFICATE") == std::string::npos) {
      return Status::InvalidArgument("--tls-ca " + o.tls_ca + ": not a readable PEM certificate");
    }
    l.client.tls_ca_pem = ss.str();
    l.client.tls_server_name = o.tls_server_name;
  }
  return l;
}

}  // namespace perftracker
