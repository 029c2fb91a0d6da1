#include "gateway/auth.h"

#include <chrono>
#include <cstdio>

#include "common/sha256.h"

namespace ferry::gateway {

Authenticator::Authenticator(const config::AuthConfig& auth) {
  for (const auto& key : auth.keys) {
    by_hash_.emplace(key.sha256, Principal{key.id, key.team, key.project, key.role, key.tags});
  }
}

Authenticator::~Authenticator() {
  {
    std::lock_guard lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

namespace {

// One read of the stored keys on its own connection (after this instance changed them).
Result<ledger::StoredKeyReader::Keys> read_stored(const std::string& db) {
  return ledger::StoredKeyReader(db).read();
}

}  // namespace

Status Authenticator::watch_store(const std::string& db) {
  // The watcher keeps one connection for its reads (ledger::StoredKeyReader).
  auto reader = std::make_shared<ledger::StoredKeyReader>(db);
  auto first = reader->read();
  if (!first) return first.error();
  set_stored(first->active, first->ever_stored);
  db_ = db;
  watcher_ = std::thread([this, reader] {
    bool failing = false;
    std::unique_lock lock(stop_mu_);
    while (
        !stop_cv_.wait_for(lock, std::chrono::milliseconds(kKeyPollMs), [this] { return stop_; })) {
      lock.unlock();
      auto got = reader->poll();  // nothing to do when the keys did not change
      if (got && *got) {
        set_stored((*got)->active, (*got)->ever_stored);
      } else if (!got && !failing) {  // once per outage, on stderr (the server log)
        std::fprintf(stderr,
                     "ferry: reading the stored API keys failed (%s); keeping the last ones\n",
                     got.error().message.c_str());
      }
      failing = !got;
      lock.lock();
    }
  });
  return {};
}

void Authenticator::refresh_stored() {
  if (db_.empty()) return;
  if (auto got = read_stored(db_)) set_stored(got->active, got->ever_stored);
}

void Authenticator::set_stored(const std::vector<ledger::StoredKey>& keys, bool ever_stored) {
  auto map = std::make_shared<std::unordered_map<std::string, Principal>>();
  for (const auto& k : keys) {
    if (k.revoked_us) continue;
    config::Role role = k.role == "admin"     ? config::Role::kAdmin
                        : k.role == "finance" ? config::Role::kFinance
                                              : config::Role::kApp;
    map->emplace(k.sha256, Principal{k.id, k.team, k.project, role, k.tags});
  }
  std::lock_guard lock(stored_mu_);
  stored_ = std::move(map);
  stored_on_.store(ever_stored || !keys.empty());
}

bool Authenticator::key_active(const std::string& key_id) const {
  for (const auto& [hash, p] : by_hash_) {
    if (p.key_id == key_id) return true;
  }
  std::shared_ptr<const std::unordered_map<std::string, Principal>> stored;
  {
    std::lock_guard lock(stored_mu_);
    stored = stored_;
  }
  if (!stored) return false;
  for (const auto& [hash, p] : *stored) {
    if (p.key_id == key_id) return true;
  }
  return false;
}

Result<Principal> Authenticator::authenticate(std::string_view authorization) const {
  if (!enabled()) return Principal{"anonymous", "", "", config::Role::kApp, {}};
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.empty()) {
    return Error::make(ErrorCode::kUnauthorized,
                       "You didn't provide an API key. Send it as 'Authorization: Bearer KEY' "
                       "(or 'x-api-key: KEY').");
  }
  // The scheme is case-insensitive (RFC 9110 section 11.1): "bearer KEY" is accepted too.
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
  bool bearer = authorization.size() > kBearer.size();
  for (size_t i = 0; bearer && i < kBearer.size(); ++i) {
    bearer = lower(authorization[i]) == lower(kBearer[i]);
  }
  if (!bearer) {
    return Error::make(ErrorCode::kUnauthorized, "The Authorization header must be 'Bearer KEY'.");
  }
  return authenticate_key(authorization.substr(kBearer.size()));
}

Result<Principal> Authenticator::authenticate_key(std::string_view key) const {
  if (!enabled()) return Principal{"anonymous", "", "", config::Role::kApp, {}};
  while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
  while (!key.empty() && key.back() == ' ') key.remove_suffix(1);
  // The map lookup compares digests, not keys: equal-length hashes of secret input, so the
  // comparison reveals nothing useful about the key.
  {
    std::lock_guard lock(cache_mu_);
    if (auto hit = cache_.find(std::string(key)); hit != cache_.end()) return *hit->second;
  }
  std::string hash = sha256_hex(key);
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) {
    // A stored key: never cached, so that a revocation takes effect at the next read.
    std::shared_ptr<const std::unordered_map<std::string, Principal>> stored;
    {
      std::lock_guard lock(stored_mu_);
      stored = stored_;
    }
    if (stored) {
      if (auto s = stored->find(hash); s != stored->end()) return s->second;
    }
    return Error::make(ErrorCode::kUnauthorized, "Incorrect API key provided.");
  }
  std::lock_guard lock(cache_mu_);
  if (cache_.size() >= kCacheMax) cache_.clear();
  cache_.emplace(std::string(key), &it->second);
  return it->second;
}

}  // namespace ferry::gateway
