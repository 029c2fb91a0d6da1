// A thin RAII layer over the sqlite3 C API: a connection and prepared statements with bound
// parameters (no SQL is ever built from data). A Db and its statements belong to one thread
// at a time.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/error.h"

namespace ferry::ledger {

// A column value: NULL, an integer or text.
using Value = std::variant<std::monostate, int64_t, std::string>;
// The same, referring to text owned elsewhere.
using ValueRef = std::variant<std::monostate, int64_t, std::string_view>;

class Stmt {
 public:
  Stmt() = default;
  Stmt(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Stmt(Stmt&& other) noexcept;
  Stmt& operator=(Stmt&& other) noexcept;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt();

  Stmt& bind(int index, int64_t value);  // 1-based
  Stmt& bind(int index, std::string_view value);
  Stmt& bind_null(int index);
  // Binds without copying: `value` must stay alive until the statement is reset.
  Stmt& bind_value(int index, const Value& value);
  Stmt& bind_ref(int index, const ValueRef& value);

  // Steps once: true when a row is available, false when done. Errors become Error values.
  Result<bool> step();
  Status run();  // steps to completion and resets
  void reset();

  int64_t int_at(int column) const;
  std::string text_at(int column) const;
  bool is_null(int column) const;
  Value value_at(int column) const;
  int column_count() const;
  std::string column_name(int column) const;
  int last_error_code() const { return last_rc_; }

 private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  int last_rc_ = SQLITE_OK;
};

class Db {
 public:
  // Opens (and creates, unless read_only) the file; sets WAL, synchronous=FULL and a busy
  // timeout on writable connections.
  static Result<Db> open(const std::string& path, bool read_only);
  Db() = default;
  Db(Db&& other) noexcept;
  Db& operator=(Db&& other) noexcept;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  ~Db();

  Status exec(const std::string& sql);
  Result<Stmt> prepare(std::string_view sql);
  std::string last_error() const;
  sqlite3* raw() const { return db_; }

 private:
  sqlite3* db_ = nullptr;
};

Error sqlite_error(sqlite3* db, int rc, std::string_view what);

}  // namespace ferry::ledger
