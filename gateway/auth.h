// API-key authentication: a bearer token is hashed (SHA-256) and looked up among the
// configured keys. The key table is immutable after construction; a small cache of recently
// seen valid keys sits beside it under its own mutex. Thread-safe.
#pragma once

#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "config/config.h"

namespace ferry::gateway {

// Who is asking: trusted facts that come from the API key, never from the request.
struct Principal {
  std::string key_id;
  std::string team;
  std::string project;
  config::Role role = config::Role::kApp;
  std::vector<std::string> tags;
};

class Authenticator {
 public:
  explicit Authenticator(const config::AuthConfig& auth);

  // With no keys configured, auth is off and everyone is the anonymous app principal.
  bool enabled() const { return !by_hash_.empty(); }
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
};

}  // namespace ferry::gateway
