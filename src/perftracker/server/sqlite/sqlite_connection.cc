#include "perftracker/server/sqlite/sqlite_connection.h"
#include "perftracker/core/private_file_mode.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <utility>

namespace perftracker {

Statement::~Statement() {
  if (stmt_ == nullptr) return;
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

void Statement::Bind(int index, int64_t value) { sqlite3_bind_int64(stmt_, index, value); }

void Statement::Bind(int index, std::string_view text) {
  sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
}

void Statement::BindBlob(int index, std::string_view bytes) {
  // A zero-length blob must still be a blob, not NULL: sqlite3_bind_blob64 with a null
  // pointer binds NULL.
  static const char kEmpty = 0;
  sqlite3_bind_blob64(stmt_, index, bytes.empty() ? &kEmpty : bytes.data(), bytes.size(),
                      SQLITE_TRANSIENT);
}

void Statement::BindNull(int index) { sqlite3_bind_null(stmt_, index); }

StatusOr<bool> Statement::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return conn_->Error("statement failed", rc);
}

Status Statement::Run() {
  for (;;) {
    StatusOr<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) return Status::Ok();
  }
}

int64_t Statement::ColumnInt64(int index) const { return sqlite3_column_int64(stmt_, index); }

bool Statement::ColumnIsNull(int index) const {
  return sqlite3_column_type(stmt_, index) == SQLITE_NULL;
}

std::string Statement::ColumnText(int index) const {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, index));
  const int size = sqlite3_column_bytes(stmt_, index);
  return text == nullptr ? std::string() : std::string(text, static_cast<size_t>(size));
}

std::string Statement::ColumnBlob(int index) const {
  const auto* data = static_cast<const char*>(sqlite3_column_blob(stmt_, index));
  const int size = sqlite3_column_bytes(stmt_, index);
  return data == nullptr ? std::string() : std::string(data, static_cast<size_t>(size));
}

StatusOr<std::unique_ptr<SqliteConnection>> SqliteConnection::Open(const std::string& path,
                                                                   bool create,
                                                                   int busy_timeout_ms) {
  sqlite3* db = nullptr;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
  if (create) flags |= SQLITE_OPEN_CREATE;
  if (create && !path.empty() && path != ":memory:" && path.rfind("file:", 0) != 0) {
    // The store names hosts, paths and code: a new one is its owner's only (0600, or
    // --report-mode's PrivateFileMode); SQLite gives its -wal and -shm files its mode.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, PrivateFileMode());
    if (fd >= 0) {
      (void)::fchmod(fd, PrivateFileMode());  // the umask may have taken bits
      ::close(fd);
    }
  }
  const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  std::unique_ptr<SqliteConnection> conn(new SqliteConnection(path, db));
  if (rc != SQLITE_OK) {
    if (db == nullptr) return Status::Internal("store " + path + ": out of memory opening it");
    return conn->Error("cannot open", rc);
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, busy_timeout_ms);
  return conn;
}

SqliteConnection::~SqliteConnection() {
  for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
  sqlite3_close_v2(db_);
}

Status SqliteConnection::Exec(const std::string& sql) {
  char* message = nullptr;
  const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message);
  sqlite3_free(message);
  if (rc != SQLITE_OK) return Error(sql.substr(0, sql.find_first_of(" ;")), rc);
  return Status::Ok();
}

StatusOr<Statement> SqliteConnection::Prepare(const std::string& sql) {
  auto it = statements_.find(sql);
  if (it == statements_.end()) {
    sqlite3_stmt* stmt = nullptr;
    const int rc = sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size()),
                                      SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) return Error("cannot prepare a statement", rc);
    it = statements_.emplace(sql, stmt).first;
  }
  return Statement(this, it->second);
}

StatusOr<int64_t> SqliteConnection::QueryInt(const std::string& sql) {
  StatusOr<Statement> st = Prepare(sql);
  if (!st.ok()) return st.status();
  StatusOr<bool> row = st->Step();
  if (!row.ok()) return row.status();
  if (!*row) return Status::Internal("store " + path_ + ": no row from: " + sql);
  return st->ColumnInt64(0);
}

Status SqliteConnection::Error(std::string_view what, int rc) const {
  std::string msg = "store " + path_ + ": " + std::string(what) + ": ";
  const std::string detail = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  msg += detail;
  if (detail != sqlite3_errstr(rc)) msg += std::string(" (") + sqlite3_errstr(rc) + ")";
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      msg += "; the file is not a readable perftracker store: move it away to start afresh";
      return Status::DataLoss(std::move(msg));
    case SQLITE_CANTOPEN:
      msg += "; check that the directory exists and is writable";
      return Status::InvalidArgument(std::move(msg));
    case SQLITE_READONLY:
    case SQLITE_PERM:
      msg += "; the store must be writable by the server";
      return Status::InvalidArgument(std::move(msg));
    case SQLITE_FULL:
      msg += "; the disk is full";
      return Status::Internal(std::move(msg));
    default:
      return Status::Internal(std::move(msg));
  }
}

Transaction::~Transaction() {
  if (open_) (void)conn_->Exec("ROLLBACK");
}

Status Transaction::Begin() {
  PERFTRACKER_RETURN_IF_ERROR(conn_->Exec("BEGIN IMMEDIATE"));
  open_ = true;
  return Status::Ok();
}

Status Transaction::Commit() {
  PERFTRACKER_RETURN_IF_ERROR(conn_->Exec("COMMIT"));
  open_ = false;
  return Status::Ok();
}

}  // namespace perftracker
