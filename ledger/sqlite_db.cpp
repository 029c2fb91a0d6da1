#include "ledger/sqlite_db.h"

#include <utility>

#include "ledger/wal_vfs.h"

namespace ferry::ledger {

Error sqlite_error(sqlite3* db, int rc, std::string_view what) {
  std::string message = "ledger database: " + std::string(what) + ": " +
                        (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  return Error::make(ErrorCode::kUnavailable, std::move(message));
}

Stmt::Stmt(Stmt&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), stmt_(std::exchange(other.stmt_, nullptr)) {}

Stmt& Stmt::operator=(Stmt&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    db_ = std::exchange(other.db_, nullptr);
    stmt_ = std::exchange(other.stmt_, nullptr);
  }
  return *this;
}

Stmt::~Stmt() {
  sqlite3_finalize(stmt_);
}

Stmt& Stmt::bind(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
  return *this;
}

Stmt& Stmt::bind(int index, std::string_view value) {
  sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT);
  return *this;
}

Stmt& Stmt::bind_null(int index) {
  sqlite3_bind_null(stmt_, index);
  return *this;
}

Stmt& Stmt::bind_value(int index, const Value& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) return bind(index, *i);
  if (const auto* s = std::get_if<std::string>(&value)) {
    sqlite3_bind_text(stmt_, index, s->data(), static_cast<int>(s->size()), SQLITE_STATIC);
    return *this;
  }
  return bind_null(index);
}

Stmt& Stmt::bind_ref(int index, const ValueRef& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) return bind(index, *i);
  if (const auto* s = std::get_if<std::string_view>(&value)) {
    // A non-null pointer even for "": a null pointer would bind NULL.
    sqlite3_bind_text(stmt_, index, s->empty() ? "" : s->data(), static_cast<int>(s->size()),
                      SQLITE_STATIC);
    return *this;
  }
  return bind_null(index);
}

Result<bool> Stmt::step() {
  last_rc_ = sqlite3_step(stmt_);
  if (last_rc_ == SQLITE_ROW) return true;
  if (last_rc_ == SQLITE_DONE) return false;
  Error error = sqlite_error(db_, last_rc_, "step");
  sqlite3_reset(stmt_);
  return error;
}

Status Stmt::run() {
  auto stepped = step();
  while (stepped && *stepped) stepped = step();
  if (!stepped) return stepped.error();
  sqlite3_reset(stmt_);
  return {};
}

void Stmt::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int64_t Stmt::int_at(int column) const {
  return sqlite3_column_int64(stmt_, column);
}

std::string Stmt::text_at(int column) const {
  const auto* text = sqlite3_column_text(stmt_, column);
  int size = sqlite3_column_bytes(stmt_, column);
  return text == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(text), size);
}

bool Stmt::is_null(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

Value Stmt::value_at(int column) const {
  switch (sqlite3_column_type(stmt_, column)) {
    case SQLITE_NULL:
      return std::monostate{};
    case SQLITE_INTEGER:
      return int_at(column);
    default:
      return text_at(column);
  }
}

int Stmt::column_count() const {
  return sqlite3_column_count(stmt_);
}

std::string Stmt::column_name(int column) const {
  const char* name = sqlite3_column_name(stmt_, column);
  return name != nullptr ? name : "";
}

Result<Db> Db::open(const std::string& path, bool read_only) {
  // SQLite's memory statistics off (sqlite3_memory_used and the soft heap limit, which ferry
  // does not use): with them every allocation and free of the library takes a global mutex.
  // Settable only before the library starts; a process where it started already keeps them.
  static const bool no_memory_statistics = [] {
    (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    return true;
  }();
  (void)no_memory_statistics;
  Db db;
  int flags = read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  flags |= SQLITE_OPEN_NOMUTEX;
  // Writable connections gather each commit's WAL writes into one (ledger/wal_vfs.h), which
  // relies on synchronous=FULL below.
  int rc = sqlite3_open_v2(path.c_str(), &db.db_, flags, read_only ? nullptr : wal_gathering_vfs());
  if (rc != SQLITE_OK) {
    Error error = sqlite_error(db.db_, rc, "open " + path);
    return error;
  }
  sqlite3_busy_timeout(db.db_, 10000);
  sqlite3_extended_result_codes(db.db_, 1);
  if (!read_only) {
    auto st = db.exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;");
    if (!st) return st.error();
  }
  return db;
}

Db::Db(Db&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}

Db& Db::operator=(Db&& other) noexcept {
  if (this != &other) {
    sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
  }
  return *this;
}

Db::~Db() {
  sqlite3_close_v2(db_);
}

Status Db::exec(const std::string& sql) {
  char* message = nullptr;
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message);
  if (rc != SQLITE_OK) {
    std::string text = message != nullptr ? message : sqlite3_errstr(rc);
    sqlite3_free(message);
    return Error::make(ErrorCode::kUnavailable, "ledger database: " + text);
  }
  return {};
}

Result<Stmt> Db::prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return sqlite_error(db_, rc, "prepare");
  return Stmt(db_, stmt);
}

std::string Db::last_error() const {
  return db_ != nullptr ? sqlite3_errmsg(db_) : "";
}

}  // namespace ferry::ledger
