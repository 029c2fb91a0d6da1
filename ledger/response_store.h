// Stored OpenAI Responses (`store: true`, `previous_response_id`): each response with the input
// items that led to it, in the ledger's database (its own table, created on open: a SQLite file
// or a PostgreSQL database), kept for a configured time, so a conversation continues on any
// instance that shares the database. Writes are queued and committed in groups by one writer
// thread (as ledger rows are); reads run on the caller's thread on their own connection.
// Thread-safe: every method may be called from any thread; put() never blocks on SQLite, get() and
// flush() do (worker pool).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"

namespace ferry::ledger {

// YAML: `ledger: { responses: { keep_days: 30 } }` (1..3650, default 30).
struct ResponseStoreConfig {
  int64_t keep_days = 30;
};

struct StoredResponse {
  std::string id;      // "resp_…"
  std::string key_id;  // the API key that made it: only that key may continue or read it
  std::string model;   // the model the client asked for
  int64_t created_us = 0;
  int64_t expires_us = 0;  // 0: created_us + the configured keep
  std::string items;       // JSON array: the input items that led to it (its history first)
  std::string output;      // JSON array: its output items
  std::string response;    // the whole response object, as it was sent
};

// One connection's statements on the stored_responses table (SQLite or PostgreSQL). Owned by
// one thread at a time.
class ResponseTable {
 public:
  virtual ~ResponseTable() = default;
  // Inserts (or replaces) the batch in one transaction.
  virtual Status insert(const std::vector<const StoredResponse*>& batch) = 0;
  virtual Result<std::optional<StoredResponse>> select(const std::string& id,
                                                       const std::string& key_id,
                                                       int64_t now_us) = 0;
  virtual Result<int64_t> purge(int64_t now_us) = 0;  // deletes the expired, returns how many
};

class ResponseStore {
 public:
  // Opens the database (`path` a SQLite file or a postgresql:// URL; creating the table and its
  // index when missing) and starts the writer.
  static Result<std::unique_ptr<ResponseStore>> open(const std::string& path,
                                                     ResponseStoreConfig config = {});
  ~ResponseStore();  // writes everything queued, then stops the writer
  // The same, before the destructor: every callback has run when it returns (as
  // Ledger::stop_writing). Nothing may be put after it. Idempotent.
  void stop_writing();
  ResponseStore(const ResponseStore&) = delete;
  ResponseStore& operator=(const ResponseStore&) = delete;

  // Queues the response; `on_durable` runs on the writer thread once it is committed (ok) or
  // cannot be (error). Never blocks.
  void put(StoredResponse response, std::function<void(const Status&)> on_durable);

  // The response `id` of `key_id` still kept at `now_us`; nullopt when there is none (missing,
  // expired, or another key's). Blocks on SQLite: not for I/O threads.
  Result<std::optional<StoredResponse>> get(const std::string& id, const std::string& key_id,
                                            int64_t now_us);

  // Deletes the responses expired at `now_us`; returns how many. (The writer also purges
  // after commits, at most once a minute.)
  Result<int64_t> purge(int64_t now_us);

  // Blocks until everything queued is committed.
  void flush();

  const ResponseStoreConfig& config() const { return config_; }

 private:
  struct Item {
    StoredResponse response;
    std::function<void(const Status&)> on_durable;
  };
  explicit ResponseStore(ResponseStoreConfig config) : config_(config) {}
  Status commit(std::vector<Item>& batch);
  void writer_loop();

  ResponseStoreConfig config_;
  std::unique_ptr<ResponseTable> writer_table_;  // the writer thread's
  int64_t last_purge_us_ = 0;                    // writer thread

  std::mutex read_mu_;
  std::unique_ptr<ResponseTable> reader_table_;  // guarded by read_mu_

  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::vector<Item> queue_;  // guarded by mu_
  bool writing_ = false;     // guarded by mu_
  bool stopping_ = false;    // guarded by mu_
  std::thread writer_;
};

}  // namespace ferry::ledger
