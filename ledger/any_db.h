// One statement over either store's database (a SQLite path or a postgresql:// URL), for the
// small readers and writers beside the stores (task reports, stored keys): the SQL is written
// with ? placeholders (numbered for PostgreSQL), values bound apart, each row as values.
// Every call opens its own connection; any worker or CLI thread, never an I/O thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "ledger/sqlite_db.h"  // Value

namespace ferry::ledger {

class PgConn;
using Rows = std::vector<std::vector<Value>>;

// Runs `sql` (read-only unless `write`) and returns its rows.
Result<Rows> query_rows(const std::string& db, const std::string& sql,
                        const std::vector<Value>& params, bool write = false);
// The same on a connection already open (inside its transaction).
Result<Rows> query_rows(Db& db, const std::string& sql, const std::vector<Value>& params);
Result<Rows> query_rows(PgConn& conn, const std::string& sql, const std::vector<Value>& params);

// One connection to either store for several statements (a connection costs more than a small
// query, most of all a PostgreSQL one on a loaded server). On SQLite each statement is prepared
// once a connection and kept (the stored-keys watcher runs the same query every second; the
// prepares were about a third of its CPU); it is reset before query returns, so that no read
// transaction stays open between calls. One thread at a time.
class AnyDb {
 public:
  static Result<AnyDb> open(const std::string& db, bool write = false);
  AnyDb(AnyDb&&) noexcept;
  AnyDb& operator=(AnyDb&&) noexcept;
  ~AnyDb();
  Result<Rows> query(const std::string& sql, const std::vector<Value>& params);
  bool pg() const { return pg_ != nullptr; }

 private:
  AnyDb() = default;
  std::unique_ptr<Db> sqlite_;
  std::unique_ptr<PgConn> pg_;
  std::map<std::string, Stmt, std::less<>> prepared_;  // SQLite only; finalized before sqlite_
};

// A value as an integer (PostgreSQL's sums arrive as decimal text) or as text; NULL: 0 / "".
int64_t value_int(const Value& v);
std::string value_text(const Value& v);

}  // namespace ferry::ledger
