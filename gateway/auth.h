// API-key authentication: a bearer token is hashed (SHA-256) and looked up among the
// configured keys and the keys kept in the ledger's database (ledger/keys.h), which a thread of
// its own checks every kKeyPollMs and re-reads when they changed (a key revoked on any instance
// stops working here within that). The config's key table is immutable after construction; the
// stored keys and a small cache of recently seen valid config keys sit beside it under their own
// mutexes. Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "config/config.h"
#include "ledger/keys.h"

namespace ferry::gateway {

// Who is asking: trusted facts that come from the API key, never from the request.
struct Principal {
  std::string key_id;
  std::string team;
  std::string project;
  config::Role role = config::Role::kApp;
  std::vector<std::string> tags;
};

// How often the stored keys are re-read: a revocation reaches every instance within this and
// one read (documented as 5 s at most).
inline constexpr int64_t kKeyPollMs = 1000;

class Authenticator {
 public:
  explicit Authenticator(const config::AuthConfig& auth);
  ~Authenticator();
  Authenticator(const Authenticator&) = delete;
  Authenticator& operator=(const Authenticator&) = delete;

  // With no keys configured or ever stored, auth is off and everyone is the anonymous app
  // principal.
  bool enabled() const { return !by_hash_.empty() || stored_on_.load(); }
  // Reads the keys kept in the ledger's database `db` now (an error stops the start), then
  // looks every kKeyPollMs on a thread of its own and reads them again when they changed
  // (ledger::StoredKeyReader::poll; a failed read keeps the keys of the last one).
  Status watch_store(const std::string& db);
  // Reads the stored keys now (after this instance created or revoked one, so that the change
  // holds here at once rather than after the next poll); a failed read keeps the last ones.
  // Blocking (a database read): not on an I/O thread. No-op without watch_store().
  void refresh_stored();
  // Replaces the stored keys (the watcher; tests). `ever_stored`: auth stays on.
  void set_stored(const std::vector<ledger::StoredKey>& keys, bool ever_stored);
  // Whether `key_id` is a key of the config or a stored key not revoked (a console session of
  // a revoked key ends with it).
  bool key_active(const std::string& key_id) const;
  // `authorization` is the Authorization header value ("Bearer KEY"), possibly empty.
  Result<Principal> authenticate(std::string_view authorization) const;
  // The key itself (Anthropic's `x-api-key` header); authenticate() ends here too.
  Result<Principal> authenticate_key(std::string_view key) const;

 private:
  std::unordered_map<std::string, Principal> by_hash_;
  // Keys seen recently and found valid -> their principal, so that a key is hashed once
  // rather than on every request (SHA-256 was ~7% of a pass-through request's instructions).
  // Only valid keys enter it, so unknown keys cannot grow it; bounded, cleared when full.
  static constexpr size_t kCacheMax = 4096;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, const Principal*> cache_;
  // The stored keys by hash, replaced whole by each read.
  mutable std::mutex stored_mu_;
  std::shared_ptr<const std::unordered_map<std::string, Principal>> stored_;
  std::atomic<bool> stored_on_{false};
  std::string db_;  // set once by watch_store, before the watcher starts
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread watcher_;
};

}  // namespace ferry::gateway
