#include "ledger/response_store.h"

#include <utility>

#include "common/clock.h"
#include "common/saturating.h"
#include "ledger/pg_db.h"
#include "ledger/pg_store.h"
#include "ledger/sqlite_db.h"
#include "ledger/store.h"

namespace ferry::ledger {

namespace {

constexpr const char* kSqliteSchema = R"sql(
CREATE TABLE IF NOT EXISTS stored_responses (
  id TEXT PRIMARY KEY, key_id TEXT NOT NULL, model TEXT NOT NULL,
  created_us INTEGER NOT NULL, expires_us INTEGER NOT NULL,
  items TEXT NOT NULL, output TEXT NOT NULL, response TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS stored_responses_expires ON stored_responses(expires_us);
)sql";
// The same table on PostgreSQL; instances that start together create it once (the lock).
constexpr const char* kPgSchema = R"sql(
BEGIN;
SELECT pg_advisory_xact_lock(7303151);
CREATE TABLE IF NOT EXISTS stored_responses (
  id TEXT PRIMARY KEY, key_id TEXT NOT NULL, model TEXT NOT NULL,
  created_us BIGINT NOT NULL, expires_us BIGINT NOT NULL,
  items TEXT NOT NULL, output TEXT NOT NULL, response TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS stored_responses_expires ON stored_responses(expires_us);
COMMIT;
)sql";
constexpr const char* kColumns =
    "id, key_id, model, created_us, expires_us, items, output, response";
constexpr const char* kWhere =
    " FROM stored_responses WHERE id = ? AND key_id = ? AND expires_us > ?";
constexpr const char* kPurge = "DELETE FROM stored_responses WHERE expires_us <= ?";

constexpr int64_t kPurgeEveryUs = 60'000'000;

// A row's eight columns, read by `num(i)` / `text(i)` in kColumns order.
template <typename Num, typename Text>
StoredResponse read_response(const Num& num, const Text& text) {
  StoredResponse r;
  r.id = text(0);
  r.key_id = text(1);
  r.model = text(2);
  r.created_us = num(3);
  r.expires_us = num(4);
  r.items = text(5);
  r.output = text(6);
  r.response = text(7);
  return r;
}

class SqliteResponseTable final : public ResponseTable {
 public:
  static Result<std::unique_ptr<ResponseTable>> open(const std::string& path) {
    auto db = Db::open(path, /*read_only=*/false);
    if (!db) return db.error();
    std::unique_ptr<SqliteResponseTable> t(new SqliteResponseTable);
    t->db_ = std::move(*db);
    if (Status s = t->db_.exec(kSqliteSchema); !s) return s.error();
    auto insert = t->db_.prepare(std::string("INSERT OR REPLACE INTO stored_responses (") +
                                 kColumns + ") VALUES (?,?,?,?,?,?,?,?)");
    if (!insert) return insert.error();
    t->insert_ = std::move(*insert);
    auto select = t->db_.prepare(std::string("SELECT ") + kColumns + kWhere);
    if (!select) return select.error();
    t->select_ = std::move(*select);
    auto purge = t->db_.prepare(kPurge);
    if (!purge) return purge.error();
    t->purge_ = std::move(*purge);
    return std::unique_ptr<ResponseTable>(std::move(t));
  }

  Status insert(const std::vector<const StoredResponse*>& batch) override {
    if (Status s = db_.exec("BEGIN IMMEDIATE"); !s) return s;
    for (const StoredResponse* r : batch) {
      insert_.bind(1, r->id).bind(2, r->key_id).bind(3, r->model).bind(4, r->created_us);
      insert_.bind(5, r->expires_us).bind(6, r->items).bind(7, r->output).bind(8, r->response);
      Status s = insert_.run();
      insert_.reset();
      if (!s) {
        (void)db_.exec("ROLLBACK");
        return s;
      }
    }
    return db_.exec("COMMIT");
  }

  Result<std::optional<StoredResponse>> select(const std::string& id, const std::string& key_id,
                                               int64_t now_us) override {
    select_.bind(1, id).bind(2, key_id).bind(3, now_us);
    auto row = select_.step();
    std::optional<StoredResponse> out;
    if (row && *row) {
      out = read_response([&](int i) { return select_.int_at(i); },
                          [&](int i) { return select_.text_at(i); });
    }
    select_.reset();
    if (!row) return row.error();
    return out;
  }

  Result<int64_t> purge(int64_t now_us) override {
    purge_.bind(1, now_us);
    Status s = purge_.run();
    purge_.reset();
    if (!s) return s.error();
    return static_cast<int64_t>(sqlite3_changes(db_.raw()));
  }

 private:
  Db db_;
  Stmt insert_;
  Stmt select_;
  Stmt purge_;
};

// On PostgreSQL: a connection made again on the next call after it broke (the database
// restarted, or was unreachable for a while), so a store outage fails only the calls made
// during it.
class PgResponseTable final : public ResponseTable {
 public:
  static Result<std::unique_ptr<ResponseTable>> open(const std::string& url) {
    std::unique_ptr<PgResponseTable> t(new PgResponseTable(url));
    if (Status s = t->connected(); !s) return s.error();
    if (Status s = t->conn_.exec(kPgSchema); !s) return s.error();
    return std::unique_ptr<ResponseTable>(std::move(t));
  }

  Status insert(const std::vector<const StoredResponse*>& batch) override {
    if (Status s = connected(); !s) return s;
    static const std::string kInsert =
        detail::numbered_placeholders(std::string("INSERT INTO stored_responses (") + kColumns +
                                      ") VALUES (?,?,?,?,?,?,?,?) ON CONFLICT (id) DO UPDATE SET "
                                      "key_id = EXCLUDED.key_id, model = EXCLUDED.model, "
                                      "created_us = EXCLUDED.created_us, expires_us = "
                                      "EXCLUDED.expires_us, items = EXCLUDED.items, output = "
                                      "EXCLUDED.output, response = EXCLUDED.response");
    if (Status s = conn_.exec("BEGIN"); !s) return s;
    for (const StoredResponse* r : batch) {
      auto done = conn_.run(kInsert, {r->id, r->key_id, r->model, pg_int(r->created_us),
                                      pg_int(r->expires_us), r->items, r->output, r->response});
      if (!done) {
        (void)conn_.exec("ROLLBACK");
        return done.error();
      }
    }
    return conn_.exec("COMMIT");
  }

  Result<std::optional<StoredResponse>> select(const std::string& id, const std::string& key_id,
                                               int64_t now_us) override {
    if (Status s = connected(); !s) return s.error();
    static const std::string kSelect =
        detail::numbered_placeholders(std::string("SELECT ") + kColumns + kWhere);
    auto rows = conn_.run(kSelect, {id, key_id, pg_int(now_us)});
    if (!rows) return rows.error();
    std::optional<StoredResponse> out;
    if (rows->rows() > 0) {
      out = read_response([&](int i) { return rows->integer(0, i); },
                          [&](int i) { return rows->text(0, i); });
    }
    return out;
  }

  Result<int64_t> purge(int64_t now_us) override {
    if (Status s = connected(); !s) return s.error();
    auto rows = conn_.run(detail::numbered_placeholders(kPurge), {pg_int(now_us)});
    if (!rows) return rows.error();
    return rows->affected();
  }

 private:
  explicit PgResponseTable(std::string url) : url_(std::move(url)) {}

  Status connected() {
    if (conn_.ok()) return {};
    auto conn = PgConn::connect(url_);
    if (!conn) return conn.error();
    conn_ = std::move(*conn);
    return {};
  }

  std::string url_;
  PgConn conn_;
};

Result<std::unique_ptr<ResponseTable>> open_table(const std::string& path) {
  return is_pg_url(path) ? PgResponseTable::open(path) : SqliteResponseTable::open(path);
}

}  // namespace

Result<std::unique_ptr<ResponseStore>> ResponseStore::open(const std::string& path,
                                                           ResponseStoreConfig config) {
  if (config.keep_days < 1 || config.keep_days > 3650) {
    return Error::make(ErrorCode::kInvalidRequest, "ledger.responses.keep_days must be 1..3650");
  }
  std::unique_ptr<ResponseStore> store(new ResponseStore(config));
  auto writer = open_table(path);
  if (!writer) return writer.error();
  store->writer_table_ = std::move(*writer);
  auto reader = open_table(path);
  if (!reader) return reader.error();
  store->reader_table_ = std::move(*reader);
  store->writer_ = std::thread([s = store.get()] { s->writer_loop(); });
  return store;
}

ResponseStore::~ResponseStore() {
  stop_writing();
}

void ResponseStore::stop_writing() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void ResponseStore::put(StoredResponse response, std::function<void(const Status&)> on_durable) {
  if (response.created_us == 0) response.created_us = unix_micros_now();
  if (response.expires_us == 0) {
    response.expires_us =
        saturating_add(response.created_us, saturating_mul(config_.keep_days, kMicrosPerDay));
  }
  {
    std::lock_guard lock(mu_);
    queue_.push_back(Item{std::move(response), std::move(on_durable)});
  }
  wake_.notify_one();
}

Status ResponseStore::commit(std::vector<Item>& batch) {
  std::vector<const StoredResponse*> rows;
  rows.reserve(batch.size());
  for (const Item& item : batch) rows.push_back(&item.response);
  return writer_table_->insert(rows);
}

void ResponseStore::writer_loop() {
  for (;;) {
    std::vector<Item> batch;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, everything written
      batch.swap(queue_);
      writing_ = true;
    }
    Status status = commit(batch);
    for (Item& item : batch) {
      if (item.on_durable) item.on_durable(status);
    }
    const int64_t now = unix_micros_now();
    if (now - last_purge_us_ >= kPurgeEveryUs) {
      last_purge_us_ = now;
      (void)writer_table_->purge(now);  // a failed purge is retried after the next commit
    }
    {
      std::lock_guard lock(mu_);
      writing_ = false;
    }
    idle_.notify_all();
  }
}

Result<std::optional<StoredResponse>> ResponseStore::get(const std::string& id,
                                                         const std::string& key_id,
                                                         int64_t now_us) {
  std::lock_guard lock(read_mu_);
  return reader_table_->select(id, key_id, now_us);
}

Result<int64_t> ResponseStore::purge(int64_t now_us) {
  std::lock_guard lock(read_mu_);
  return reader_table_->purge(now_us);
}

void ResponseStore::flush() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [&] { return queue_.empty() && !writing_; });
}

}  // namespace ferry::ledger
