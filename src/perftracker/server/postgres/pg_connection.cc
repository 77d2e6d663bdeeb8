#include "perftracker/server/postgres/pg_connection.h"

#include <fmt/format.h>

#include <cstdlib>

namespace perftracker {
namespace {

// libpq's messages end with a newline and may span lines ("connection to server ... failed:
// Connection refused\n\tIs the server running ...?"): one line for ours.
std::string OneLine(std::string_view text) {
  std::string out;
  bool space = false;
  for (char c : text) {
    if (c == '\n' || c == '\r' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space && c != ' ') out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace

std::string RedactPostgresUrl(std::string_view url) {
  std::string out(url);
  const size_t scheme = out.find("://");
  if (scheme != std::string::npos) {
    // postgresql://user:password@host...: the password runs from the first ':' after the
    // scheme to the last '@' of the authority.
    const size_t auth_start = scheme + 3;
    size_t auth_end = out.find_first_of("/?", auth_start);
    if (auth_end == std::string::npos) auth_end = out.size();
    const size_t at = out.rfind('@', auth_end);
    if (at != std::string::npos && at > auth_start) {
      const size_t colon = out.find(':', auth_start);
      if (colon != std::string::npos && colon < at) out.replace(colon + 1, at - colon - 1, "***");
    }
    // ...?password=secret&...
    for (size_t p = out.find("password="); p != std::string::npos;
         p = out.find("password=", p + 1)) {
      const size_t start = p + 9;
      size_t end = out.find('&', start);
      if (end == std::string::npos) end = out.size();
      out.replace(start, end - start, "***");
    }
    return out;
  }
  // key=value string: password=secret or password='sec ret'.
  for (size_t p = out.find("password"); p != std::string::npos; p = out.find("password", p + 1)) {
    size_t eq = p + 8;
    while (eq < out.size() && out[eq] == ' ') ++eq;
    if (eq >= out.size() || out[eq] != '=') continue;
    size_t start = eq + 1;
    while (start < out.size() && out[start] == ' ') ++start;
    size_t end = start;
    if (start < out.size() && out[start] == '\'') {
      end = start + 1;
      while (end < out.size() && out[end] != '\'') end += out[end] == '\\' ? 2 : 1;
      end = std::min(end + 1, out.size());
    } else {
      while (end < out.size() && out[end] != ' ') ++end;
    }
    out.replace(start, end - start, "***");
  }
  return out;
}

std::string PgResult::Text(int row, int col) const {
  const char* v = PQgetvalue(result_.get(), row, col);
  return std::string(v, static_cast<size_t>(PQgetlength(result_.get(), row, col)));
}

int64_t PgResult::Int64(int row, int col) const {
  return std::strtoll(PQgetvalue(result_.get(), row, col), nullptr, 10);
}

std::string PgResult::Bytes(int row, int col) const {
  size_t length = 0;
  unsigned char* bytes = PQunescapeBytea(
      reinterpret_cast<const unsigned char*>(PQgetvalue(result_.get(), row, col)), &length);
  if (bytes == nullptr) return std::string();
  std::string out(reinterpret_cast<const char*>(bytes), length);
  PQfreemem(bytes);
  return out;
}

int64_t PgResult::AffectedRows() const {
  return std::strtoll(PQcmdTuples(result_.get()), nullptr, 10);
}

StatusOr<std::unique_ptr<PgConnection>> PgConnection::Open(const std::string& url,
                                                           const std::string& name,
                                                           int connect_timeout_s) {
  // Our defaults first: with expand_dbname the URL's own settings, processed later, win.
  const std::string timeout = std::to_string(connect_timeout_s);
  // synchronous_commit=off: see PostgresStore (Durability); an `options` in the URL wins.
  const char* keys[] = {"connect_timeout", "application_name", "client_encoding",
                        "options",         "dbname",           nullptr};
  const char* values[] = {timeout.c_str(), "perftracker", "UTF8", "-c synchronous_commit=off",
                          url.c_str(),     nullptr};
  PGconn* conn = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (conn == nullptr) {
    return Status::Internal(fmt::format("store {}: out of memory opening a connection", name));
  }
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string error = OneLine(PQerrorMessage(conn));
    PQfinish(conn);
    // libpq may quote the URL it could not parse, password and all.
    for (size_t p = error.find(url); !url.empty() && p != std::string::npos;
         p = error.find(url, p + name.size())) {
      error.replace(p, url.size(), name);
    }
    return Status::InvalidArgument(
        fmt::format("store {}: cannot connect to PostgreSQL: {}", name, error));
  }
  std::unique_ptr<PgConnection> c(new PgConnection(conn, name));
  // Messages of the server (NOTICE: relation exists, skipping...) are not ours to print.
  PQsetNoticeProcessor(
      conn, [](void*, const char*) {}, nullptr);
  return c;
}

PgConnection::~PgConnection() { PQfinish(conn_); }

std::string PgConnection::ErrorLine(std::string_view what) const {
  return fmt::format("store {}: {}: {}", name_, what, OneLine(PQerrorMessage(conn_)));
}

StatusOr<PgResult> PgConnection::Exec(std::string_view sql, const std::vector<PgParam>& params) {
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats;
  values.reserve(params.size());
  for (const PgParam& p : params) {
    values.push_back(p.null ? nullptr : p.value.c_str());
    lengths.push_back(static_cast<int>(p.value.size()));
    formats.push_back(p.binary ? 1 : 0);
  }
  const std::string text(sql);
  // Outside a transaction a statement may be retried on a fresh connection when the old one
  // turns out to be dead (PostgreSQL restarted, a proxy dropped it): nothing of it ran.
  // Inside one it may not: the transaction died with the connection.
  const bool may_retry = PQtransactionStatus(conn_) == PQTRANS_IDLE;
  auto exec = [&] {
    return PgResult(PQexecParams(conn_, text.c_str(), static_cast<int>(params.size()), nullptr,
                                 values.data(), lengths.data(), formats.data(),
                                 /*resultFormat=*/0));
  };
  PgResult result = exec();
  if (may_retry && PQstatus(conn_) == CONNECTION_BAD) {
    PQreset(conn_);
    if (PQstatus(conn_) == CONNECTION_OK) result = exec();
  }
  last_sqlstate_.clear();
  // PQexecParams returns nullptr only when out of memory or the connection is gone.
  const ExecStatusType status = PQresultStatus(result.raw());
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return result;
  if (result.raw() != nullptr) {
    const char* state = PQresultErrorField(result.raw(), PG_DIAG_SQLSTATE);
    if (state != nullptr) last_sqlstate_ = state;
  }
  std::string first_words = text.substr(0, text.find_first_of(" \n("));
  return Status::Internal(ErrorLine(first_words));
}

Status PgConnection::ExecScript(const std::string& sql) {
  PgResult result(PQexec(conn_, sql.c_str()));
  const ExecStatusType status = PQresultStatus(result.raw());
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return Status::Ok();
  return Status::Internal(ErrorLine("script"));
}

Status PgConnection::Run(std::string_view sql, const std::vector<PgParam>& params) {
  StatusOr<PgResult> r = Exec(sql, params);
  return r.ok() ? Status::Ok() : r.status();
}

StatusOr<int64_t> PgConnection::QueryInt(std::string_view sql, const std::vector<PgParam>& params) {
  StatusOr<PgResult> r = Exec(sql, params);
  if (!r.ok()) return r.status();
  if (r->rows() == 0 || r->IsNull(0, 0)) {
    return Status::NotFound(fmt::format("store {}: no row for {}", name_, sql));
  }
  return r->Int64(0, 0);
}

bool PgConnection::broken() const { return PQstatus(conn_) != CONNECTION_OK; }

Status PgConnection::Reset() {
  PQreset(conn_);
  if (PQstatus(conn_) != CONNECTION_OK) return Status::Internal(ErrorLine("cannot reconnect"));
  return Status::Ok();
}

PgTransaction::~PgTransaction() {
  if (open_) (void)conn_->Run("ROLLBACK");
}

Status PgTransaction::Begin() {
  PERFTRACKER_RETURN_IF_ERROR(conn_->Run("BEGIN"));
  open_ = true;
  return Status::Ok();
}

Status PgTransaction::Commit() {
  open_ = false;
  return conn_->Run("COMMIT");
}

}  // namespace perftracker
