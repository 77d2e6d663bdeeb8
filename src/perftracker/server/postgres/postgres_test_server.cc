#include "perftracker/server/postgres/postgres_test_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "perftracker/server/postgres/pg_connection.h"

namespace perftracker {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUser = "perftracker";  // the cluster's superuser (trust auth)
constexpr const char* kRunAsUser = "nobody";  // PostgreSQL will not run as root

// The watchdog: postgres in the background; when stdin (the pipe) reaches EOF, a fast
// shutdown and the directory removed. Should postgres exit by itself (it could not start),
// its status goes to postgres.exited for Launch() to see. $1 dir, $2 port, $3 bindir.
constexpr const char* kWatchdog = R"sh(
exec 3<&0
"$3/postgres" -D "$1/data" -p "$2" -k "$1" -c listen_addresses=127.0.0.1 -c fsync=off \
  -c full_page_writes=off -c max_connections=200 </dev/null 3<&- >>"$1/postgres.log" 2>&1 &
pid=$!
{ read -r _ <&3; kill -INT "$pid" 2>/dev/null; } &
wait "$pid"
echo "$?" >"$1/postgres.exited"
wait
rm -rf "$1"
)sh";

std::string Tail(const std::string& path, size_t bytes = 1500) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  return all.size() > bytes ? all.substr(all.size() - bytes) : all;
}

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// argv prefixed with `runuser -u nobody --` when running as root.
std::vector<std::string> AsPostgresUser(std::vector<std::string> argv) {
  if (geteuid() != 0) return argv;
  std::vector<std::string> out = {"runuser", "-u", kRunAsUser, "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

// Forks and execs argv in `cwd` (stdout / stderr to `log`, stdin from `stdin_fd` or
// /dev/null); returns the child's pid.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& cwd, const std::string& log,
            int stdin_fd) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid != 0) return pid;
  if (chdir(cwd.c_str()) != 0) _exit(126);
  const int in = stdin_fd >= 0 ? stdin_fd : open("/dev/null", O_RDONLY);
  const int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (in < 0 || out < 0) _exit(126);
  dup2(in, 0);
  dup2(out, 1);
  dup2(out, 2);
  // Only stdin / stdout / stderr go on: no other descriptor of the test (sockets, the
  // pipe's write end) may outlive it in the cluster's processes.
  for (int fd = 3; fd < 1024; ++fd) close(fd);
  execvp(args[0], args.data());
  _exit(127);
}

int Wait(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

std::string PostgresTestServer::FindBinDir() {
  if (const char* env = std::getenv("PERFTRACKER_PG_BINDIR"); env != nullptr && *env != '\0') {
    return env;
  }
  std::string best;
  int best_version = -1;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    const std::string name = entry.path().filename().string();
    const int version = std::atoi(name.c_str());
    if (version > best_version && fs::exists(entry.path() / "bin" / "initdb", ec)) {
      best_version = version;
      best = (entry.path() / "bin").string();
    }
  }
  return best;
}

StatusOr<std::unique_ptr<PostgresTestServer>> PostgresTestServer::Start() {
  const std::string bindir = FindBinDir();
  const std::string initdb = bindir.empty() ? "initdb" : bindir + "/initdb";
  if (!bindir.empty() && !fs::exists(initdb)) {
    return Status::NotFound(
        fmt::format("PostgreSQL test server: no {} (install Debian's postgresql, or set "
                    "PERFTRACKER_PG_BINDIR)",
                    initdb));
  }
  Status last = Status::Ok();
  for (int attempt = 0; attempt < 3; ++attempt) {  // another process may take the port
    std::unique_ptr<PostgresTestServer> server(new PostgresTestServer());
    last = server->Launch(bindir);
    if (last.ok()) return server;
  }
  return last;
}

Status PostgresTestServer::Launch(const std::string& bindir) {
  std::string tmpl = (fs::temp_directory_path() / "perftracker-pg.XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    return Status::Internal("PostgreSQL test server: cannot create a temporary directory");
  }
  dir_ = tmpl;
  if (geteuid() == 0) {
    const passwd* pw = getpwnam(kRunAsUser);
    if (pw == nullptr || chown(dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
      return Status::Internal(
          fmt::format("PostgreSQL test server: running as root and cannot hand {} to the user {}",
                      dir_, kRunAsUser));
    }
  }
  const std::string bin = bindir.empty() ? "" : bindir + "/";
  const std::string initdb_log = dir_ + "/initdb.log";
  const int initdb_rc =
      Wait(Spawn(AsPostgresUser({bin + "initdb", "-D", dir_ + "/data", "-U", kUser, "-A", "trust",
                                 "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"}),
                 dir_, initdb_log, -1));
  if (initdb_rc != 0) {
    const std::string tail = Tail(initdb_log);
    std::error_code ec;
    fs::remove_all(dir_, ec);
    return Status::Internal(fmt::format(
        "PostgreSQL test server: initdb exited with {}{}: {}", initdb_rc,
        geteuid() == 0 ? fmt::format(" (as root it runs as {}, which must be able to reach {}: "
                                     "set TMPDIR to a directory it can)",
                                     kRunAsUser, dir_)
                       : "",
        tail));
  }

  port_ = FreeLoopbackPort();
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::Internal("PostgreSQL test server: pipe failed");
  const std::string log = dir_ + "/watchdog.log";
  watchdog_ = Spawn(AsPostgresUser({"/bin/sh", "-c", kWatchdog, "sh", dir_, std::to_string(port_),
                                    bindir.empty() ? "." : bindir}),
                    dir_, log, fds[0]);
  close(fds[0]);
  keepalive_fd_ = fds[1];

  const std::string url = Url("postgres");
  const std::string pg_log = dir_ + "/postgres.log";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    if (PQping(url.c_str()) == PQPING_OK) return Status::Ok();
    if (fs::exists(dir_ + "/postgres.exited")) {
      const std::string tail = Tail(pg_log);
      Shutdown();
      return Status::Internal(
          fmt::format("PostgreSQL test server: postgres exited on port {}: {}", port_, tail));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string tail = Tail(pg_log);
  Shutdown();
  return Status::Internal(
      fmt::format("PostgreSQL test server: no answer on port {} within 120 s: {}", port_, tail));
}

PostgresTestServer::~PostgresTestServer() { Shutdown(); }

void PostgresTestServer::Shutdown() {
  if (keepalive_fd_ >= 0) close(keepalive_fd_);
  keepalive_fd_ = -1;
  if (watchdog_ > 0) (void)Wait(watchdog_);
  watchdog_ = -1;
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);  // the watchdog's rm already did, normally
  dir_.clear();
}

std::string PostgresTestServer::Url(const std::string& database) const {
  return fmt::format("postgresql://{}@127.0.0.1:{}/{}", kUser, port_, database);
}

StatusOr<std::string> PostgresTestServer::CreateDatabase() {
  const std::string name = fmt::format("test_{}", next_database_++);
  StatusOr<std::unique_ptr<PgConnection>> admin = PgConnection::Open(Url("postgres"), "admin", 10);
  if (!admin.ok()) return admin.status();
  PERFTRACKER_RETURN_IF_ERROR((*admin)->ExecScript("CREATE DATABASE " + name));
  return Url(name);
}

}  // namespace perftracker
