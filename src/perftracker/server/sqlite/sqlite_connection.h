// SqliteConnection: one sqlite3 handle with a cache of prepared statements, and Statement, a
// thin checked wrapper over sqlite3_stmt. Nothing here knows about perftracker's tables;
// SqliteStore builds on it.
//
// A connection is NOT thread-safe (it is opened with SQLITE_OPEN_NOMUTEX): the owner guards
// it (SqliteStore keeps one writer behind a mutex and a pool of readers, each used by one
// thread at a time). Every error is a Status whose message starts with the database path.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "perftracker/core/status.h"

namespace perftracker {

class SqliteConnection;

// A use of a prepared statement from a connection's cache (the cache owns the sqlite3_stmt).
// When the use ends the statement is reset and its bindings cleared, so a reader does not
// keep a read transaction open and the next user starts clean. Movable, not copyable.
class Statement {
 public:
  Statement(SqliteConnection* conn, sqlite3_stmt* stmt) : conn_(conn), stmt_(stmt) {}
  ~Statement();
  Statement(Statement&& other) noexcept : conn_(other.conn_), stmt_(other.stmt_) {
    other.stmt_ = nullptr;
  }
  Statement& operator=(Statement&&) = delete;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Bindings are 1-based, as in SQLite.
  void Bind(int index, int64_t value);
  void Bind(int index, std::string_view text);
  void BindBlob(int index, std::string_view bytes);
  void BindNull(int index);

  // Steps once: true when a row is ready, false when done, an error Status otherwise.
  StatusOr<bool> Step();
  // Steps to completion, expecting no rows (INSERT / UPDATE / DELETE).
  Status Run();

  int64_t ColumnInt64(int index) const;
  bool ColumnIsNull(int index) const;
  std::string ColumnText(int index) const;
  std::string ColumnBlob(int index) const;

 private:
  SqliteConnection* conn_;
  sqlite3_stmt* stmt_;
};

class SqliteConnection {
 public:
  // Opens (creating it when `create`) the database at `path` in multi-thread mode with the
  // given busy timeout. The file is not read yet: SQLite reads it on the first statement.
  static StatusOr<std::unique_ptr<SqliteConnection>> Open(const std::string& path, bool create,
                                                          int busy_timeout_ms);
  ~SqliteConnection();
  SqliteConnection(const SqliteConnection&) = delete;
  SqliteConnection& operator=(const SqliteConnection&) = delete;

  // Runs one or more statements that return nothing of interest (pragmas, DDL, BEGIN).
  Status Exec(const std::string& sql);
  // A use of the cached prepared statement for `sql` (prepared on first use). It must end
  // before the connection is destroyed.
  StatusOr<Statement> Prepare(const std::string& sql);
  // A single-integer query (PRAGMA user_version, SELECT count(*) ...).
  StatusOr<int64_t> QueryInt(const std::string& sql);

  // "store <path>: <what>: <sqlite message> (<code name>)": the one-line error of a failed
  // call, with advice for the codes a user can act on (not a database, read-only, full).
  Status Error(std::string_view what, int rc) const;
  const std::string& path() const { return path_; }
  sqlite3* handle() { return db_; }

 private:
  SqliteConnection(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}

  std::string path_;
  sqlite3* db_;
  std::unordered_map<std::string, sqlite3_stmt*> statements_;
};

// A transaction on a connection: BEGIN IMMEDIATE on Begin(), COMMIT on Commit(), ROLLBACK
// when it goes out of scope uncommitted (an error path), so a failed write changes nothing.
class Transaction {
 public:
  explicit Transaction(SqliteConnection* conn) : conn_(conn) {}
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  Status Begin();
  Status Commit();

 private:
  SqliteConnection* conn_;
  bool open_ = false;
};

}  // namespace perftracker
