#include "ledger/any_db.h"

#include <charconv>

#include "ledger/pg_db.h"
#include "ledger/pg_store.h"
#include "ledger/row_log.h"
#include "ledger/store.h"

namespace ferry::ledger {

Result<Rows> query_rows(PgConn& conn, const std::string& sql, const std::vector<Value>& params) {
  std::vector<PgParam> pg;
  for (const Value& v : params) {
    if (const auto* text = std::get_if<std::string>(&v)) {
      pg.emplace_back(*text);
    } else if (const auto* i = std::get_if<int64_t>(&v)) {
      pg.push_back(pg_int(*i));
    } else {
      pg.emplace_back(std::nullopt);
    }
  }
  auto rows = conn.run(detail::numbered_placeholders(sql), pg);
  if (!rows) return rows.error();
  Rows out;
  for (int r = 0; r < rows->rows(); ++r) {
    auto& row = out.emplace_back();
    for (int c = 0; c < rows->columns(); ++c) row.push_back(rows->value(r, c));
  }
  return out;
}

namespace {

// Binds `params`, steps `stmt` to its end and resets it (on failure too: a statement left
// stepped would hold its read transaction open and keep checkpoints from finishing).
Result<Rows> rows_of(Stmt& stmt, const std::vector<Value>& params) {
  struct Reset {
    Stmt& stmt;
    ~Reset() { stmt.reset(); }
  } reset{stmt};
  for (size_t i = 0; i < params.size(); ++i) {
    stmt.bind_value(static_cast<int>(i + 1), params[i]);
  }
  Rows out;
  for (;;) {
    auto has = stmt.step();
    if (!has) return has.error();
    if (!*has) break;
    auto& row = out.emplace_back();
    for (int c = 0; c < stmt.column_count(); ++c) row.push_back(stmt.value_at(c));
  }
  return out;
}

}  // namespace

Result<Rows> query_rows(Db& db, const std::string& sql, const std::vector<Value>& params) {
  auto stmt = db.prepare(sql);
  if (!stmt) return stmt.error();
  return rows_of(*stmt, params);
}

Result<Rows> query_rows(const std::string& db, const std::string& sql,
                        const std::vector<Value>& params, bool write) {
  auto conn = AnyDb::open(db, write);
  if (!conn) return conn.error();
  return conn->query(sql, params);
}

Result<AnyDb> AnyDb::open(const std::string& db, bool write) {
  AnyDb out;
  if (is_pg_url(db)) {
    auto conn = PgConn::connect(db);
    if (!conn) return conn.error();
    out.pg_ = std::make_unique<PgConn>(std::move(*conn));
    return out;
  }
  auto sdb = ledger_db_open(db, !write);
  if (!sdb) return sdb.error();
  out.sqlite_ = std::make_unique<Db>(std::move(*sdb));
  return out;
}

AnyDb::AnyDb(AnyDb&&) noexcept = default;
AnyDb& AnyDb::operator=(AnyDb&& other) noexcept {
  if (this == &other) return *this;
  prepared_.clear();  // finalized while their connection is still open
  sqlite_ = std::move(other.sqlite_);
  pg_ = std::move(other.pg_);
  prepared_ = std::move(other.prepared_);
  return *this;
}
AnyDb::~AnyDb() = default;

Result<Rows> AnyDb::query(const std::string& sql, const std::vector<Value>& params) {
  if (pg_) return query_rows(*pg_, sql, params);
  auto kept = prepared_.find(sql);
  if (kept == prepared_.end()) {
    auto stmt = sqlite_->prepare(sql);
    if (!stmt) return stmt.error();
    kept = prepared_.emplace(sql, std::move(*stmt)).first;
  }
  return rows_of(kept->second, params);
}

int64_t value_int(const Value& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* t = std::get_if<std::string>(&v)) {
    int64_t out = 0;
    std::from_chars(t->data(), t->data() + t->size(), out);
    return out;
  }
  return 0;
}

std::string value_text(const Value& v) {
  if (const auto* t = std::get_if<std::string>(&v)) return *t;
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  return "";
}

}  // namespace ferry::ledger
