// The response cache's optional persistent tier (config `cache.persist`): a SQLite file the
// kept answers are written behind to, by a thread of its own (never an I/O loop), and read back
// into the memory cache at start-up, so a restart keeps them. Expired entries are dropped at
// load and by the writer; the file is bounded by bytes (the entries stored longest ago go
// first). Thread-safety: save() from any thread (a bounded queue); load_into() before serving.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "common/error.h"
#include "gateway/response_cache.h"

namespace ferry::gateway {

// A kept answer as bytes (versioned, length-prefixed), and back; decoding refuses anything
// it did not write whole (a truncated or foreign value).
std::string encode_cached_answer(const CachedAnswer& value);
Result<CachedAnswer> decode_cached_answer(std::string_view bytes);

class PersistentCache {
 public:
  // Opens (creating) the file. Errors: it cannot be opened or is not a cache file.
  static Result<std::unique_ptr<PersistentCache>> open(const std::string& path, int64_t max_bytes);
  ~PersistentCache();  // writes what is queued, then stops the writer
  PersistentCache(const PersistentCache&) = delete;
  PersistentCache& operator=(const PersistentCache&) = delete;

  // Drops the expired entries and puts the live ones in `cache`, the most recently stored up to
  // the cache's bound, each with what is left of its TTL. Returns how many were put.
  Result<int64_t> load_into(ResponseCache& cache, int64_t now_ms);
  // Queues an entry for the file (not kept when kMaxQueued are waiting: the file is a cache).
  void save(std::string key, std::shared_ptr<const CachedAnswer> value, int64_t expires_ms);
  // Waits until every queued entry is in the file (tests).
  void flush();

  struct Stats {
    int64_t written = 0;
    int64_t dropped = 0;  // queue full, or a write that failed
    int64_t evicted = 0;  // removed to keep the file within its bound
  };
  Stats stats() const;

  static constexpr size_t kMaxQueued = 1024;

 private:
  struct Impl;
  explicit PersistentCache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::gateway
