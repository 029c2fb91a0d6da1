#include "ledger/pg_db.h"

#include <libpq-fe.h>

#include <algorithm>
#include <charconv>
#include <cstring>

namespace ferry::ledger {

namespace {

Error pg_error(std::string_view what, const char* message, const char* sqlstate) {
  std::string text(message != nullptr ? message : "unknown error");
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  bool unique = sqlstate != nullptr && std::strcmp(sqlstate, "23505") == 0;
  return Error::make(unique ? ErrorCode::kInvalidRequest : ErrorCode::kUnavailable,
                     "ledger database (PostgreSQL): " + std::string(what) + ": " + text);
}

}  // namespace

PgRows::PgRows(pg_result* result) : result_(result, PQclear) {}

int PgRows::rows() const {
  return result_ ? PQntuples(result_.get()) : 0;
}

int PgRows::columns() const {
  return result_ ? PQnfields(result_.get()) : 0;
}

bool PgRows::is_null(int row, int column) const {
  return PQgetisnull(result_.get(), row, column) != 0;
}

std::string PgRows::text(int row, int column) const {
  const char* value = PQgetvalue(result_.get(), row, column);
  return std::string(value, static_cast<size_t>(PQgetlength(result_.get(), row, column)));
}

int64_t PgRows::integer(int row, int column) const {
  if (is_null(row, column)) return 0;
  const char* value = PQgetvalue(result_.get(), row, column);
  int64_t out = 0;
  std::from_chars(value, value + PQgetlength(result_.get(), row, column), out);
  return out;
}

Value PgRows::value(int row, int column) const {
  if (is_null(row, column)) return std::monostate{};
  constexpr Oid kInt8 = 20, kInt2 = 21, kInt4 = 23;
  Oid type = PQftype(result_.get(), column);
  if (type == kInt8 || type == kInt2 || type == kInt4) return integer(row, column);
  return text(row, column);
}

int64_t PgRows::affected() const {
  const char* n = result_ ? PQcmdTuples(result_.get()) : "";
  int64_t out = 0;
  std::from_chars(n, n + std::strlen(n), out);
  return out;
}

PgParam pg_int(int64_t value) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  (void)ec;  // 24 bytes always hold an int64
  return std::string(buf, end);
}

void PgConn::Close::operator()(pg_conn* conn) const {
  PQfinish(conn);
}

Result<PgConn> PgConn::connect(const std::string& url) {
  PgConn out;
  out.conn_.reset(PQconnectdb(url.c_str()));
  if (!out.conn_ || PQstatus(out.conn_.get()) != CONNECTION_OK) {
    return pg_error("connect", out.conn_ ? PQerrorMessage(out.conn_.get()) : "out of memory",
                    nullptr);
  }
  // Durability: a COMMIT returns once its WAL is flushed (the server's default, made sure).
  if (auto st = out.exec("SET synchronous_commit = on; SET client_min_messages = warning"); !st) {
    return st.error();
  }
  return out;
}

Result<PgRows> PgConn::run(const std::string& sql, const std::vector<PgParam>& params) {
  if (!conn_) return pg_error("run", "not connected", nullptr);
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
  PGresult* raw = PQexecParams(conn_.get(), sql.c_str(), static_cast<int>(values.size()), nullptr,
                               values.data(), nullptr, nullptr, 0);
  PgRows rows(raw);
  ExecStatusType status = raw != nullptr ? PQresultStatus(raw) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    if (PQstatus(conn_.get()) == CONNECTION_BAD) PQreset(conn_.get());  // next call retries
    return pg_error("query",
                    raw != nullptr ? PQresultErrorMessage(raw) : PQerrorMessage(conn_.get()),
                    raw != nullptr ? PQresultErrorField(raw, PG_DIAG_SQLSTATE) : nullptr);
  }
  return rows;
}

Status PgConn::exec(const std::string& sql) {
  if (!conn_) return pg_error("exec", "not connected", nullptr);
  PGresult* raw = PQexec(conn_.get(), sql.c_str());
  PgRows rows(raw);
  ExecStatusType status = raw != nullptr ? PQresultStatus(raw) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    if (PQstatus(conn_.get()) == CONNECTION_BAD) PQreset(conn_.get());
    return pg_error("exec",
                    raw != nullptr ? PQresultErrorMessage(raw) : PQerrorMessage(conn_.get()),
                    raw != nullptr ? PQresultErrorField(raw, PG_DIAG_SQLSTATE) : nullptr);
  }
  return {};
}

Status PgConn::copy_failure(pg_result* raw) {
  PgRows keep(raw);
  Error e =
      pg_error("copy", raw != nullptr ? PQresultErrorMessage(raw) : PQerrorMessage(conn_.get()),
               raw != nullptr ? PQresultErrorField(raw, PG_DIAG_SQLSTATE) : nullptr);
  if (PQstatus(conn_.get()) == CONNECTION_BAD) PQreset(conn_.get());
  return e;
}

Status PgConn::copy_in(const std::string& copy_sql, std::string_view rows) {
  if (Status st = copy_begin(copy_sql); !st) return st;
  (void)copy_put(rows);  // a failure is copy_end's
  return copy_end();
}

Status PgConn::copy_begin(const std::string& copy_sql) {
  if (!conn_) return pg_error("copy", "not connected", nullptr);
  copy_sent_ = true;
  PGresult* start = PQexec(conn_.get(), copy_sql.c_str());
  if (start == nullptr || PQresultStatus(start) != PGRES_COPY_IN) return copy_failure(start);
  PQclear(start);
  return {};
}

Status PgConn::copy_put(std::string_view rows) {
  // Sent in pieces of at most 1 MiB (libpq buffers each; a blocking connection flushes).
  constexpr size_t kPiece = 1 << 20;
  for (size_t at = 0; at < rows.size() && copy_sent_; at += kPiece) {
    size_t n = std::min(kPiece, rows.size() - at);
    copy_sent_ = PQputCopyData(conn_.get(), rows.data() + at, static_cast<int>(n)) == 1;
  }
  if (copy_sent_) return {};
  return pg_error("copy", PQerrorMessage(conn_.get()), nullptr);
}

Status PgConn::copy_end() {
  if (PQputCopyEnd(conn_.get(), copy_sent_ ? nullptr : "ferry: sending the rows failed") != 1) {
    return copy_failure(nullptr);
  }
  Status status;
  // The COPY's own result, then nothing: read until libpq says the command is over.
  while (PGresult* raw = PQgetResult(conn_.get())) {
    if (PQresultStatus(raw) != PGRES_COMMAND_OK && status) {
      status = copy_failure(raw);
      continue;
    }
    PQclear(raw);
  }
  return status;
}

namespace {

void copy_separator(std::string& row, bool first) {
  if (!first) row += '\t';
}

}  // namespace

void pg_copy_text(std::string& row, std::string_view text, bool first) {
  copy_separator(row, first);
  for (char c : text) {
    switch (c) {
      case '\\':
        row += "\\\\";
        break;
      case '\t':
        row += "\\t";
        break;
      case '\n':
        row += "\\n";
        break;
      case '\r':
        row += "\\r";
        break;
      default:
        row += c;
    }
  }
}

void pg_copy_int(std::string& row, int64_t value, bool first) {
  copy_separator(row, first);
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  (void)ec;  // 24 bytes always hold an int64
  row.append(buf, end);
}

void pg_copy_null(std::string& row, bool first) {
  copy_separator(row, first);
  row += "\\N";
}

bool PgConn::ok() const {
  return conn_ && PQstatus(conn_.get()) == CONNECTION_OK;
}

std::string pg_text_array(const std::vector<std::string_view>& items) {
  std::string out = "{";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i != 0) out += ',';
    out += '"';
    for (char c : items[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

}  // namespace ferry::ledger
