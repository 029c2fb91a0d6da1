#include "gateway/response_cache_store.h"

#include <utility>
#include <vector>

#include "ledger/byte_codec.h"
#include "ledger/sqlite_db.h"

namespace ferry::gateway {

// ---- the value codec ------------------------------------------------------------------------

namespace {

constexpr uint8_t kFormat = 1;  // the first byte of every value

}  // namespace

std::string encode_cached_answer(const CachedAnswer& value) {
  const api::Answer& a = value.answer;
  ledger::ByteWriter w;
  w.u8(kFormat);
  w.str(a.id);
  w.str(a.model);
  w.i64(a.created);
  w.i64(static_cast<int64_t>(a.blocks.size()));
  for (const api::Block& b : a.blocks) {
    w.u8(static_cast<uint8_t>(b.kind));
    w.str(b.text);
    w.str(b.signature);
    w.str(b.call_id);
    w.str(b.name);
    w.str(b.arguments);
  }
  w.u8(static_cast<uint8_t>(a.finish));
  w.str(a.stop_sequence);
  w.i64(a.usage.prompt_tokens);
  w.i64(a.usage.completion_tokens);
  w.i64(a.usage.cached_tokens);
  w.i64(a.usage.reasoning_tokens);
  w.u8(a.usage.reported ? 1 : 0);
  w.tokens(value.tokens);
  w.str(value.target);
  w.i64(value.prompt_tokens);
  return w.take();
}

Result<CachedAnswer> decode_cached_answer(std::string_view bytes) {
  ledger::ByteReader r(bytes);
  CachedAnswer v;
  api::Answer& a = v.answer;
  if (r.u8() != kFormat) return Error::make(ErrorCode::kInvalidRequest, "not a cached answer");
  a.id = r.str();
  a.model = r.str();
  a.created = r.i64();
  a.blocks.resize(r.count(41));  // a block is at least 41 bytes
  for (api::Block& b : a.blocks) {
    b.kind = r.small_enum<api::BlockKind>(static_cast<uint8_t>(api::BlockKind::kThinking));
    b.text = r.str();
    b.signature = r.str();
    b.call_id = r.str();
    b.name = r.str();
    b.arguments = r.str();
  }
  a.finish = r.small_enum<api::FinishReason>(static_cast<uint8_t>(api::FinishReason::kError));
  a.stop_sequence = r.str();
  a.usage.prompt_tokens = r.i64();
  a.usage.completion_tokens = r.i64();
  a.usage.cached_tokens = r.i64();
  a.usage.reasoning_tokens = r.i64();
  a.usage.reported = r.small_enum<uint8_t>(1) == 1;
  v.tokens = r.tokens();
  v.target = r.str();
  v.prompt_tokens = r.i64();
  if (!r.ok() || !r.at_end()) {
    return Error::make(ErrorCode::kInvalidRequest, "cached answer: truncated or bad");
  }
  return v;
}

// ---- the file -------------------------------------------------------------------------------

struct PersistentCache::Impl {
  struct Pending {
    std::string key;
    std::shared_ptr<const CachedAnswer> value;
    int64_t expires_ms = 0;
  };

  ledger::Db db;
  int64_t max_bytes = 0;
  mutable std::mutex mu;
  std::condition_variable wake;     // the writer: work, or stop
  std::condition_variable drained;  // flush(): the queue written
  std::deque<Pending> queue;
  bool writing = false;
  bool stop = false;
  Stats stats;
  std::thread writer;

  void run() {
    std::unique_lock lock(mu);
    for (;;) {
      wake.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;  // stopping, everything written
      std::deque<Pending> batch;
      batch.swap(queue);
      writing = true;
      lock.unlock();
      const int64_t failed = write(batch);
      lock.lock();
      writing = false;
      stats.evicted = stats_evicted;
      stats.written += static_cast<int64_t>(batch.size()) - failed;
      stats.dropped += failed;
      drained.notify_all();
    }
  }

  // One transaction: the batch in, the expired out, then the oldest stored beyond the bound.
  // Returns how many entries were not written.
  int64_t write(const std::deque<Pending>& batch) {
    const int64_t now = response_cache_now_ms();
    if (!db.exec("BEGIN IMMEDIATE")) return static_cast<int64_t>(batch.size());
    int64_t failed = 0;
    auto insert = db.prepare(
        "INSERT OR REPLACE INTO entries(key, expires_ms, stored_ms, bytes, value) "
        "VALUES (?, ?, ?, ?, ?)");
    for (const Pending& p : batch) {
      const std::string value = encode_cached_answer(*p.value);
      if (!insert || !insert->bind(1, p.key)
                          .bind(2, p.expires_ms)
                          .bind(3, now)
                          .bind(4, static_cast<int64_t>(value.size() + p.key.size()))
                          .bind(5, value)
                          .run()) {
        ++failed;
      }
    }
    if (auto expired = db.prepare("DELETE FROM entries WHERE expires_ms <= ?")) {
      (void)expired->bind(1, now).run();
    }
    evict_beyond_bound();
    if (!db.exec("COMMIT")) {
      (void)db.exec("ROLLBACK");
      return static_cast<int64_t>(batch.size());
    }
    return failed;
  }

  void evict_beyond_bound() {
    auto total = db.prepare("SELECT COALESCE(SUM(bytes), 0) FROM entries");
    if (!total) return;
    auto has = total->step();
    if (!has || !*has) return;
    int64_t excess = total->int_at(0) - max_bytes;
    if (excess <= 0) return;
    auto oldest = db.prepare("SELECT key, bytes FROM entries ORDER BY stored_ms, key");
    auto drop = db.prepare("DELETE FROM entries WHERE key = ?");
    if (!oldest || !drop) return;
    std::vector<std::string> keys;
    while (excess > 0) {
      auto row = oldest->step();
      if (!row || !*row) break;
      keys.push_back(oldest->text_at(0));
      excess -= oldest->int_at(1);
    }
    oldest->reset();
    for (const std::string& k : keys) {
      if (drop->bind(1, k).run()) ++stats_evicted;
    }
  }
  int64_t stats_evicted = 0;  // writer thread only; copied into stats under the mutex
};

PersistentCache::PersistentCache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<PersistentCache>> PersistentCache::open(const std::string& path,
                                                               int64_t max_bytes) {
  auto impl = std::make_unique<Impl>();
  auto db = ledger::Db::open(path, /*read_only=*/false);
  if (!db) return Error::make(ErrorCode::kUnavailable, "cache.persist: " + db.error().message);
  impl->db = std::move(db).value();
  impl->max_bytes = max_bytes;
  if (auto st = impl->db.exec(
          "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
          "CREATE TABLE IF NOT EXISTS entries(key TEXT PRIMARY KEY, expires_ms INTEGER NOT NULL, "
          "stored_ms INTEGER NOT NULL, bytes INTEGER NOT NULL, value BLOB NOT NULL);"
          "CREATE INDEX IF NOT EXISTS entries_stored ON entries(stored_ms);");
      !st) {
    return Error::make(ErrorCode::kUnavailable,
                       "cache.persist: " + path + ": " + st.error().message);
  }
  std::unique_ptr<PersistentCache> out(new PersistentCache(std::move(impl)));
  Impl* raw = out->impl_.get();
  raw->writer = std::thread([raw] { raw->run(); });
  return out;
}

PersistentCache::~PersistentCache() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->wake.notify_all();
  if (impl_->writer.joinable()) impl_->writer.join();
}

Result<int64_t> PersistentCache::load_into(ResponseCache& cache, int64_t now_ms) {
  std::lock_guard lock(impl_->mu);  // before the writer has anything to do: no contention
  ledger::Db& db = impl_->db;
  auto expired = db.prepare("DELETE FROM entries WHERE expires_ms <= ?");
  if (!expired) return expired.error();
  if (auto st = expired->bind(1, now_ms).run(); !st) return st.error();
  auto rows = db.prepare("SELECT key, expires_ms, value FROM entries ORDER BY stored_ms DESC, key");
  if (!rows) return rows.error();
  struct Loaded {
    std::string key;
    int64_t expires_ms;
    std::shared_ptr<const CachedAnswer> value;
  };
  std::vector<Loaded> live;  // most recently stored first, within the memory bound
  int64_t bytes = 0;
  for (;;) {
    auto row = rows->step();
    if (!row) return row.error();
    if (!*row) break;
    auto value = decode_cached_answer(rows->text_at(2));
    if (!value) continue;  // not ours whole: skipped (the writer's bound removes it in time)
    auto kept = std::make_shared<const CachedAnswer>(std::move(value).value());
    std::string key = rows->text_at(0);
    bytes += kept->bytes() + static_cast<int64_t>(key.size());
    if (bytes > cache.max_bytes()) break;
    live.push_back({std::move(key), rows->int_at(1), std::move(kept)});
  }
  // The oldest first, so the most recent end up the most recently used.
  for (auto it = live.rbegin(); it != live.rend(); ++it) {
    cache.put(it->key, it->value, it->expires_ms - now_ms, now_ms);
  }
  return static_cast<int64_t>(live.size());
}

void PersistentCache::save(std::string key, std::shared_ptr<const CachedAnswer> value,
                           int64_t expires_ms) {
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->queue.size() >= kMaxQueued) {
      ++impl_->stats.dropped;
      return;
    }
    impl_->queue.push_back({std::move(key), std::move(value), expires_ms});
  }
  impl_->wake.notify_one();
}

void PersistentCache::flush() {
  std::unique_lock lock(impl_->mu);
  impl_->drained.wait(lock, [&] { return impl_->queue.empty() && !impl_->writing; });
}

PersistentCache::Stats PersistentCache::stats() const {
  std::lock_guard lock(impl_->mu);
  Stats s = impl_->stats;
  return s;
}

}  // namespace ferry::gateway
