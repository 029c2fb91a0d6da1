#include "gateway/auth.h"

#include "common/sha256.h"

namespace ferry::gateway {

Authenticator::Authenticator(const config::AuthConfig& auth) {
  for (const auto& key : auth.keys) {
    by_hash_.emplace(key.sha256, Principal{key.id, key.team, key.project, key.role, key.tags});
  }
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
  auto it = by_hash_.find(sha256_hex(key));
  if (it == by_hash_.end()) {
    return Error::make(ErrorCode::kUnauthorized, "Incorrect API key provided.");
  }
  std::lock_guard lock(cache_mu_);
  if (cache_.size() >= kCacheMax) cache_.clear();
  cache_.emplace(std::string(key), &it->second);
  return it->second;
}

}  // namespace ferry::gateway
