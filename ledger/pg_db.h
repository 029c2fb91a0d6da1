// A thin RAII layer over libpq: a connection, and statements run with text parameters bound
// separately from the SQL (no SQL is ever built from data). A PgConn belongs to one thread at
// a time. The only files that include libpq are this one's .cpp and pg_store.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "ledger/sqlite_db.h"  // Value

struct pg_conn;
struct pg_result;

namespace ferry::ledger {

// One query's rows (text format).
class PgRows {
 public:
  PgRows() = default;
  explicit PgRows(pg_result* result);
  int rows() const;
  int columns() const;
  bool is_null(int row, int column) const;
  std::string text(int row, int column) const;
  int64_t integer(int row, int column) const;  // 0 for NULL
  int64_t affected() const;                    // rows an INSERT/UPDATE/DELETE touched
  // NULL, an integer (integer columns) or text: as SQLite hands values to the chain.
  Value value(int row, int column) const;

 private:
  std::shared_ptr<pg_result> result_;
};

// A parameter: NULL or text (integers as decimal text).
using PgParam = std::optional<std::string>;
PgParam pg_int(int64_t value);

class PgConn {
 public:
  // `url` is a libpq connection string or URI (postgresql://user@host:port/db?...).
  static Result<PgConn> connect(const std::string& url);
  PgConn() = default;
  PgConn(PgConn&&) noexcept = default;
  PgConn& operator=(PgConn&&) noexcept = default;

  // Runs one statement with $1.. parameters. kInvalidRequest for a unique violation (SQLSTATE
  // 23505), kUnavailable for anything else (connection lost, server down, ...).
  Result<PgRows> run(const std::string& sql, const std::vector<PgParam>& params = {});
  // Runs statements without parameters (may hold several, separated by ';').
  Status exec(const std::string& sql);
  // `COPY table(columns) FROM STDIN` with `rows` in COPY's text format (pg_copy_* below): one
  // round trip of data, no statement with a parameter per value to parse and plan.
  Status copy_in(const std::string& copy_sql, std::string_view rows);
  // The same COPY sent as its rows are made: copy_begin, copy_put each piece (the server
  // parses and inserts a piece while the caller makes the next: the writer's row building and
  // the server's inserts overlap), copy_end for its result. After a failed copy_put, copy_end
  // ends the COPY and returns that failure; nothing else may run on the connection between
  // copy_begin and copy_end.
  Status copy_begin(const std::string& copy_sql);
  Status copy_put(std::string_view rows);
  Status copy_end();
  bool ok() const;  // the connection is up

 private:
  struct Close {
    void operator()(pg_conn* conn) const;
  };
  Status copy_failure(pg_result* raw);
  std::unique_ptr<pg_conn, Close> conn_;
  bool copy_sent_ = true;  // every copy_put since copy_begin went out
};

// COPY text format: one field appended to a row (a tab before every field but the first,
// backslash escapes for \\, tab, newline and carriage return; NULL as \N), and the row's end.
void pg_copy_text(std::string& row, std::string_view text, bool first = false);
void pg_copy_int(std::string& row, int64_t value, bool first = false);
void pg_copy_null(std::string& row, bool first = false);
inline void pg_copy_end(std::string& row) {
  row += '\n';
}

// `{"a","b"}`: a text[] literal for ANY($n) (each element quoted and escaped).
std::string pg_text_array(const std::vector<std::string_view>& items);

}  // namespace ferry::ledger
