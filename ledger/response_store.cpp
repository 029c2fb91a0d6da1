#include "ledger/response_store.h"

#include <utility>

#include "common/clock.h"
#include "common/saturating.h"

namespace ferry::ledger {

namespace {

// The whole SQL of stored responses (the PostgreSQL store needs the same five statements).
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS stored_responses (
  id TEXT PRIMARY KEY, key_id TEXT NOT NULL, model TEXT NOT NULL,
  created_us INTEGER NOT NULL, expires_us INTEGER NOT NULL,
  items TEXT NOT NULL, output TEXT NOT NULL, response TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS stored_responses_expires ON stored_responses(expires_us);
)sql";
constexpr const char* kInsert =
    "INSERT OR REPLACE INTO stored_responses "
    "(id, key_id, model, created_us, expires_us, items, output, response) "
    "VALUES (?,?,?,?,?,?,?,?)";
constexpr const char* kSelect =
    "SELECT id, key_id, model, created_us, expires_us, items, output, response "
    "FROM stored_responses WHERE id = ? AND key_id = ? AND expires_us > ?";
constexpr const char* kPurge = "DELETE FROM stored_responses WHERE expires_us <= ?";

constexpr int64_t kMicrosPerDay = 86'400'000'000;
constexpr int64_t kPurgeEveryUs = 60'000'000;

}  // namespace

Result<std::unique_ptr<ResponseStore>> ResponseStore::open(const std::string& path,
                                                           ResponseStoreConfig config) {
  if (config.keep_days < 1 || config.keep_days > 3650) {
    return Error::make(ErrorCode::kInvalidRequest, "ledger.responses.keep_days must be 1..3650");
  }
  std::unique_ptr<ResponseStore> store(new ResponseStore(config));
  auto write_db = Db::open(path, /*read_only=*/false);
  if (!write_db) return write_db.error();
  store->write_db_ = std::move(*write_db);
  if (Status s = store->write_db_.exec(kSchema); !s) return s.error();
  auto insert = store->write_db_.prepare(kInsert);
  if (!insert) return insert.error();
  store->insert_ = std::move(*insert);
  auto purge = store->write_db_.prepare(kPurge);
  if (!purge) return purge.error();
  store->purge_ = std::move(*purge);
  auto read_db = Db::open(path, /*read_only=*/false);
  if (!read_db) return read_db.error();
  store->read_db_ = std::move(*read_db);
  auto select = store->read_db_.prepare(kSelect);
  if (!select) return select.error();
  store->select_ = std::move(*select);
  store->writer_ = std::thread([s = store.get()] { s->writer_loop(); });
  return store;
}

ResponseStore::~ResponseStore() {
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
  if (Status s = write_db_.exec("BEGIN IMMEDIATE"); !s) return s;
  for (const Item& item : batch) {
    const StoredResponse& r = item.response;
    insert_.bind(1, r.id).bind(2, r.key_id).bind(3, r.model).bind(4, r.created_us);
    insert_.bind(5, r.expires_us).bind(6, r.items).bind(7, r.output).bind(8, r.response);
    Status s = insert_.run();
    insert_.reset();
    if (!s) {
      (void)write_db_.exec("ROLLBACK");
      return s;
    }
  }
  return write_db_.exec("COMMIT");
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
      purge_.bind(1, now);
      (void)purge_.run();  // a failed purge is retried after the next commit
      purge_.reset();
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
  select_.bind(1, id).bind(2, key_id).bind(3, now_us);
  auto row = select_.step();
  std::optional<StoredResponse> out;
  if (row && *row) {
    StoredResponse r;
    r.id = select_.text_at(0);
    r.key_id = select_.text_at(1);
    r.model = select_.text_at(2);
    r.created_us = select_.int_at(3);
    r.expires_us = select_.int_at(4);
    r.items = select_.text_at(5);
    r.output = select_.text_at(6);
    r.response = select_.text_at(7);
    out = std::move(r);
  }
  select_.reset();
  if (!row) return row.error();
  return out;
}

Result<int64_t> ResponseStore::purge(int64_t now_us) {
  std::lock_guard lock(read_mu_);
  auto stmt = read_db_.prepare(kPurge);
  if (!stmt) return stmt.error();
  stmt->bind(1, now_us);
  if (Status s = stmt->run(); !s) return s.error();
  return static_cast<int64_t>(sqlite3_changes(read_db_.raw()));
}

void ResponseStore::flush() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [&] { return queue_.empty() && !writing_; });
}

}  // namespace ferry::ledger
