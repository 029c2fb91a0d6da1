// API keys kept in the ledger's database (`api_keys`, SQLite or PostgreSQL) beside those of the
// config: created with a random secret that is returned once and stored only as its SHA-256,
// listed, revoked by id (the row stays, with its revocation time). Every call opens its own
// connection; any worker or CLI thread, never an I/O thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace ferry::ledger {

class AnyDb;

struct StoredKey {
  std::string id;
  std::string sha256;  // lower-case hex of the secret
  std::string team;
  std::string project;
  std::string role;               // "app", "finance" or "admin"
  std::vector<std::string> tags;  // trusted tags
  int64_t created_us = 0;
  std::string created_by;  // the key id (or "cli") that created it
  std::optional<int64_t> revoked_us;
};

struct CreatedKey {
  StoredKey key;
  std::string secret;  // shown once; never stored
};

// A key id: 1-64 of [A-Za-z0-9_.-].
bool is_key_id(std::string_view id);

// Creates a key with a fresh secret ("fk-" and 48 hex digits). `spec.id` empty: one is made
// ("k-" and 12 hex digits). kInvalidRequest "key_exists": the id exists (revoked ones included) or
// is one of `reserved_ids` (the config's keys).
Result<CreatedKey> create_key(const std::string& db, StoredKey spec,
                              const std::vector<std::string>& reserved_ids);

// Every stored key, oldest first; revoked ones only when `include_revoked`.
Result<std::vector<StoredKey>> list_keys(const std::string& db, bool include_revoked);

// Revokes the key: kNotFound when no key has the id, the stored key (with its first revocation
// time) otherwise; revoking twice is not an error.
Result<StoredKey> revoke_key(const std::string& db, const std::string& id, int64_t now_us);

// The unrevoked keys and whether any key was ever stored, read again and again over one
// connection (the server's watcher looks every second: a connection a read would cost more
// than the read, and on PostgreSQL a connection a second for every instance). A failed read
// drops the connection; the next one connects again. One thread at a time.
class StoredKeyReader {
 public:
  explicit StoredKeyReader(std::string db);
  ~StoredKeyReader();
  StoredKeyReader(const StoredKeyReader&) = delete;
  StoredKeyReader& operator=(const StoredKeyReader&) = delete;

  struct Keys {
    std::vector<StoredKey> active;  // unrevoked, oldest first (list_keys)
    // A key was ever stored (revoked ones count): authentication then stays on even when every
    // key is revoked and the config has none.
    bool ever_stored = false;
  };
  // Every key, read now.
  Result<Keys> read();
  // The keys when they changed since the last read (or poll) that returned them, nullopt when
  // not. One aggregate query says whether they changed: keys are only inserted and revoked
  // (revoked_us set once), so the count of keys, of revoked keys and the latest of each time
  // change with every change ferry makes. After a failed read or poll the next one reads all.
  Result<std::optional<Keys>> poll();
  // Connections made so far (1 while every read succeeds).
  int connects() const { return connects_; }
  // Full reads of the keys so far (a poll that found no change reads none).
  int full_reads() const { return full_reads_; }

 private:
  Result<std::optional<Keys>> read_if(bool always);

  std::string db_;
  std::unique_ptr<AnyDb> conn_;
  int connects_ = 0;
  int full_reads_ = 0;
  std::optional<std::array<int64_t, 4>> seen_;  // the aggregate of the last keys returned
};

}  // namespace ferry::ledger
