// PgConnection: one libpq connection (PGconn) and PgResult, the checked result of one
// statement. Nothing here knows about perftracker's tables; PostgresStore builds on it.
//
// A connection is NOT thread-safe: its owner lends it to one thread at a time (PostgresStore
// keeps a pool). Statements are sent with PQexecParams: parameters travel separately from
// the SQL text (never spliced into it), as text, except those marked binary (bytea). Results
// come back as text. Every error is a Status whose message starts with "store <name>: ",
// where <name> is the connection URL with its password masked (RedactPostgresUrl).
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "perftracker/core/status.h"

namespace perftracker {

// The URL with the password (postgresql://user:secret@host/db, or password=... in a
// key=value string) replaced by "***", for messages and logs.
std::string RedactPostgresUrl(std::string_view url);

// One parameter of a statement: text (NUL-free) or binary bytes (a bytea column).
struct PgParam {
  std::string value;
  bool binary = false;
  bool null = false;

  PgParam(std::string v) : value(std::move(v)) {}   // NOLINT(google-explicit-constructor)
  PgParam(const char* v) : value(v) {}              // NOLINT(google-explicit-constructor)
  PgParam(int64_t v) : value(std::to_string(v)) {}  // NOLINT(google-explicit-constructor)
  PgParam(int32_t v) : value(std::to_string(v)) {}  // NOLINT(google-explicit-constructor)
  static PgParam Bytes(std::string bytes) {
    PgParam p(std::move(bytes));
    p.binary = true;
    return p;
  }
  static PgParam Null() {
    PgParam p("");
    p.null = true;
    return p;
  }
};

class PgResult {
 public:
  explicit PgResult(PGresult* result) : result_(result, &PQclear) {}

  int rows() const { return PQntuples(result_.get()); }
  bool IsNull(int row, int col) const { return PQgetisnull(result_.get(), row, col) != 0; }
  std::string Text(int row, int col) const;
  int64_t Int64(int row, int col) const;
  // A bytea column (text format "\x..." decoded).
  std::string Bytes(int row, int col) const;
  // The number of rows an INSERT / UPDATE / DELETE touched.
  int64_t AffectedRows() const;
  PGresult* raw() const { return result_.get(); }

 private:
  std::unique_ptr<PGresult, void (*)(PGresult*)> result_;
};

class PgConnection {
 public:
  // Connects to `url` (a postgresql:// URL or a libpq key=value string); `name` is what
  // error messages call the store (the redacted URL). Fails with one line naming it.
  static StatusOr<std::unique_ptr<PgConnection>> Open(const std::string& url,
                                                      const std::string& name,
                                                      int connect_timeout_s);
  ~PgConnection();
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;

  // Runs one statement (with $1, $2... parameters) and returns its result.
  StatusOr<PgResult> Exec(std::string_view sql, const std::vector<PgParam>& params = {});
  // Several statements without parameters (a migration), in one round trip.
  Status ExecScript(const std::string& sql);
  // A statement whose result is not needed.
  Status Run(std::string_view sql, const std::vector<PgParam>& params = {});
  // The first column of the first row as an integer; NotFound when there is no row.
  StatusOr<int64_t> QueryInt(std::string_view sql, const std::vector<PgParam>& params = {});

  // True when the connection was lost (the server restarted, the network broke).
  bool broken() const;
  // Reconnects a broken connection (same parameters).
  Status Reset();
  // The SQLSTATE of the last failed statement ("" when none): e.g. 23505 unique violation.
  const std::string& last_sqlstate() const { return last_sqlstate_; }
  const std::string& name() const { return name_; }

 private:
  PgConnection(PGconn* conn, std::string name) : conn_(conn), name_(std::move(name)) {}
  std::string ErrorLine(std::string_view what) const;

  PGconn* conn_;
  std::string name_;
  std::string last_sqlstate_;
};

// BEGIN on construction's Begin(), ROLLBACK at destruction unless Commit() ran.
class PgTransaction {
 public:
  explicit PgTransaction(PgConnection* conn) : conn_(conn) {}
  ~PgTransaction();
  PgTransaction(const PgTransaction&) = delete;
  PgTransaction& operator=(const PgTransaction&) = delete;
  Status Begin();
  Status Commit();

 private:
  PgConnection* conn_;
  bool open_ = false;
};

}  // namespace perftracker
