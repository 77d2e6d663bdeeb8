// PostgresTestServer (tests only): a private PostgreSQL cluster for one test binary.
//
// Start() runs `initdb` in a fresh temporary directory and starts `postgres` on a free
// loopback port (trust authentication for the user "perftracker", no TCP outside 127.0.0.1,
// fsync off: the tests kill perftracker processes, never PostgreSQL). PostgreSQL refuses to
// run as root, so as root both run as the user "nobody" (runuser), owning the directory.
//
// Cleanup does not depend on this process ending well: postgres runs under a small shell
// watchdog that holds the read end of a pipe whose only write end is in this process. When
// the write end closes (destructor, exit, crash, SIGKILL) the watchdog's `read` returns; it
// stops postgres (fast shutdown) and removes the directory. The destructor waits for that.
//
// One server per test binary (a global test environment); each test takes a fresh database
// from CreateDatabase().
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "perftracker/core/status.h"

namespace perftracker {

class PostgresTestServer {
 public:
  // The directory of initdb / postgres: $PERFTRACKER_PG_BINDIR, else the newest
  // /usr/lib/postgresql/<version>/bin, else "" (then PATH is searched).
  static std::string FindBinDir();
  // Fails with a line naming what is missing, or the tail of PostgreSQL's log.
  static StatusOr<std::unique_ptr<PostgresTestServer>> Start();
  ~PostgresTestServer();
  PostgresTestServer(const PostgresTestServer&) = delete;
  PostgresTestServer& operator=(const PostgresTestServer&) = delete;

  // A new, empty database; returns its URL (postgresql://perftracker@127.0.0.1:<port>/<db>).
  StatusOr<std::string> CreateDatabase();
  std::string Url(const std::string& database) const;
  int port() const { return port_; }
  const std::string& dir() const { return dir_; }

 private:
  PostgresTestServer() = default;
  Status Launch(const std::string& bindir);
  // Closes the pipe, waits for the watchdog (postgres stopped, directory removed).
  void Shutdown();

  std::string dir_;
  int port_ = 0;
  pid_t watchdog_ = -1;
  int keepalive_fd_ = -1;  // the pipe's write end: closing it stops the server
  int next_database_ = 0;
};

}  // namespace perftracker
