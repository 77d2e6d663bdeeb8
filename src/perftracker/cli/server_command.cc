#include "perftracker/cli/server_command.h"
#include "perftracker/cli/window_options.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include "perftracker/server/http/api_token.h"
#include "perftracker/server/open_store.h"
#include "perftracker/server/report_writer.h"
#include "perftracker/server/server_process.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;

// The token in `path`; a missing file is created (0600) with a fresh random token.
StatusOr<std::string> LoadOrCreateToken(const std::string& path, bool* created) {
  *created = false;
  std::error_code ec;
  if (fs::exists(path, ec)) return ReadApiTokenFile(path);
  StatusOr<std::string> token = GenerateApiToken();
  if (!token.ok()) return token.status();
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::InvalidArgument(path + ": cannot be created");
  const std::string line = *token + "\n";
  const bool ok = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  close(fd);
  if (!ok) return Status::InvalidArgument(path + ": cannot be written");
  *created = true;
  return token;
}

}  // namespace

CLI::App* AddServerCommand(CLI::App& app, ServerCommandOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "server",
      "Run the perftracker server for collectors on many hosts (perftracker run --server, "
      "perftracker collector): window coordination, diagnosis, the store, the web UI and "
      "API, /metrics. Runs until interrupted. See docs/server.md");
  cmd->add_option("--listen", o->listen,
                  "host:port for collectors (gRPC); loopback by default: give this host's "
                  "address (or 0.0.0.0) for collectors on other hosts")
      ->default_val("127.0.0.1:7070");
  cmd->add_option("--http-listen", o->http_listen, "host:port of the web UI, JSON API and /metrics")
      ->default_val("127.0.0.1:7071");
  cmd->add_flag("--no-http", o->no_http, "No HTTP server");
  cmd->add_option("--http-connections-per-peer", o->http_connections_per_peer,
                  "Most HTTP connections one client address may hold open (slow or idle "
                  "clients beyond it are refused); raise it behind a reverse proxy")
      ->check(CLI::Range(1, 4096))
      ->default_val(32);
  cmd->add_option("--store", o->store,
                  "Where jobs, windows and reports are kept: the path of an SQLite file "
                  "(default: <report-dir>/perftracker.db), or a PostgreSQL URL "
                  "(postgresql://user@host:5432/db) that several servers share: each "
                  "coordinates the jobs whose collectors connect to it, and every server's "
                  "UI / API shows every job (docs/server.md)");
  cmd->add_option("--token-file", o->token_file,
                  "The token collectors and API clients must present (one line, >= 16 "
                  "characters); created with a random token when missing (default: "
                  "<report-dir>/server.token)");
  cmd->add_option("--tls-cert", o->tls_cert,
                  "PEM certificate: both ports speak TLS (with --tls-key)");
  cmd->add_option("--tls-key", o->tls_key, "PEM private key of --tls-cert");
  cmd->add_option("--report-dir", o->report_dir,
                  "Reports go to <report-dir>/<job id>/window-<id>-<reason>.json / .html")
      ->default_val("perftracker-server");
  AddReportModeOption(cmd);
  AddWindowOptions(cmd, &o->window, /*max_windows_limit=*/100000);
  cmd->add_option("--material-share", o->material_share,
                  "A finding is material when it costs at least this share of the iteration")
      ->check(CLI::Range(0.0001, 1.0))
      ->default_val(0.05);
  cmd->add_option("--digest-min-workers", o->digest_min_workers,
                  "Progressive disclosure: the collectors of a job of at least this many workers "
                  "send a digest per worker, and the full summaries of the suspects and a "
                  "sample of their peers when asked (docs/server.md); 0: always full summaries")
      ->check(CLI::Range(0, 100'000'000))
      ->default_val(1024);
  cmd->add_option("--max-message-mb", o->max_message_mb,
                  "Largest message a collector may send (a window summary is tens of KB)")
      ->check(CLI::Range(1, 1024))
      ->default_val(64);
  cmd->add_option("--perfetto-wait-seconds", o->perfetto_wait_seconds,
                  "After a window's diagnosis, wait at most this long for the collectors' "
                  "recordings of its events, merged into window-<id>.perfetto.json (raw events "
                  "stay on their host until then; docs/perfetto-export.md); 0: no timeline")
      ->check(CLI::Range(0.0, 3600.0))
      ->default_val(30.0);
  return cmd;
}

int RunServer(const ServerCommandOptions& o) {
  // SIGINT / SIGTERM are waited for by this thread: block them before any thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Each collector's connection is an open file: take the hard limit, not the soft one
  // (often 1,024); the control server says when the streams come near it.
  {
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
      lim.rlim_cur = lim.rlim_max;
      setrlimit(RLIMIT_NOFILE, &lim);
    }
  }

  {
    const Status st = EnsureReportDir(o.report_dir);
    if (!st.ok()) {
      fmt::print(stderr, "perftracker server: --report-dir: {}\n", st.message());
      return 2;
    }
  }
  const std::string token_file =
      o.token_file.empty() ? (fs::path(o.report_dir) / "server.token").string() : o.token_file;
  bool created = false;
  StatusOr<std::string> token = LoadOrCreateToken(token_file, &created);
  if (!token.ok()) {
    fmt::print(stderr, "perftracker server: --token-file: {}\n", token.status().message());
    return 2;
  }

  ServerProcessOptions so;
  so.listen = o.listen;
  so.http_listen = o.no_http ? "" : o.http_listen;
  so.http_connections_per_peer = static_cast<size_t>(o.http_connections_per_peer);
  so.store_path = o.store.empty() ? (fs::path(o.report_dir) / "perftracker.db").string() : o.store;
  so.token = *token;
  so.tls_cert_file = o.tls_cert;
  so.tls_key_file = o.tls_key;
  so.max_message_bytes = static_cast<size_t>(o.max_message_mb) << 20;
  CoordinatorOptions& co = so.service.coordinator;
  co.report_dir = o.report_dir;
  ApplyWindowOptions(o.window, &co);
  co.localizer.material_share = o.material_share;
  so.service.digest_min_workers = static_cast<size_t>(o.digest_min_workers);
  co.perfetto = o.perfetto_wait_seconds > 0;
  co.perfetto_fetch_ns = SecondsToNs(o.perfetto_wait_seconds);

  ServerProcess server(so);
  const Status st = server.Start();
  if (!st.ok()) {
    fmt::print(stderr, "perftracker server: {}\n", st.message());
    return 2;
  }
  if (created) {
    fmt::print(stderr,
               "perftracker server: wrote a new token to {}: give collectors and API clients "
               "this file (--token-file)\n",
               token_file);
  }
  std::string host;
  int port = 0;
  SplitHostPort(o.listen, &host, &port);
  fmt::print(stderr, "perftracker server: listening: grpc={}:{}{} http={} store={} reports={}\n",
             host, server.grpc_port(), o.tls_cert.empty() ? "" : " (TLS)",
             server.http_url().empty() ? "off" : server.http_url(), StoreDisplayName(so.store_path),
             o.report_dir);
  if (!server.http_url().empty()) {
    // The address a browser logs in with, without the token itself (logs are read by more
    // people than the token file).
    fmt::print(stderr,
               "perftracker server: web UI: open {}/?token=<token> once, the token being the "
               "first line of {}\n",
               server.http_url(), token_file);
  }
  std::fflush(stderr);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  fmt::print(stderr, "perftracker server: stopping ({})\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  server.Stop();
  return 0;
}

}  // namespace perftracker
