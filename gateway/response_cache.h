// The response cache (the policy action `cache`): answers kept as typed api::Answer values by
// the hash of the canonical request as sent to its target, so that a hit is rendered in
// whatever API the client speaks, as a body or a replayed stream. Bounded by bytes (least
// recently used first out), entries expire by their TTL; owned by the Gateway, so a policy
// reload keeps it. Thread-safety: every method may be called from any thread (one mutex,
// held for a map lookup or insert only; the answers are shared immutable values).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "api/chat_request.h"
#include "api/events.h"
#include "common/error.h"
#include "ledger/types.h"

namespace ferry::gateway {

// The default bound of the cache's memory (answers, keys and bookkeeping).
constexpr int64_t kDefaultResponseCacheBytes = 64LL << 20;

// One reusable answer and what it cost when it was made (for the hit's ledger row).
struct CachedAnswer {
  api::Answer answer;
  ledger::Tokens tokens;  // billed tokens of the answer that was kept
  std::string target;     // the config model that answered
  int64_t prompt_tokens = -1;
  int64_t bytes() const;  // what the entry holds in memory, about
};

class ResponseCache {
 public:
  explicit ResponseCache(int64_t max_bytes = kDefaultResponseCacheBytes) : max_bytes_(max_bytes) {}

  // The live entry for `key` (and marks it recently used), or null: absent or expired.
  std::shared_ptr<const CachedAnswer> get(const std::string& key, int64_t now_ms);
  // Keeps `value` until now + ttl; evicts the least recently used beyond the bound. An entry
  // larger than the whole bound is not kept.
  void put(const std::string& key, std::shared_ptr<const CachedAnswer> value, int64_t ttl_ms,
           int64_t now_ms);

  struct Stats {
    int64_t entries = 0;
    int64_t bytes = 0;
    int64_t evictions = 0;
    int64_t expired = 0;
  };
  Stats stats() const;
  int64_t max_bytes() const { return max_bytes_; }

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const CachedAnswer> value;
    int64_t expires_ms = 0;
    int64_t bytes = 0;
  };
  using List = std::list<Entry>;  // most recently used first
  void erase(List::iterator it);

  const int64_t max_bytes_;
  mutable std::mutex mutex_;
  List lru_;
  std::unordered_map<std::string_view, List::iterator> index_;  // views into Entry::key
  Stats stats_;
};

// The canonical chat request as sent to its target, as bytes to hash: every member of the typed
// request that shapes the answer (the upstream model, messages, tools and tool choice, every
// sampling, logprob, limit and output parameter, response format, metadata, members kept as
// sent), in a fixed order, each tagged and length-prefixed (no two requests write the same
// bytes), the rule's overrides applied, the stream members left out (a body answers a stream
// and back). No JSON is built.
std::string canonical_request(const api::ChatRequest& request, std::string_view upstream_model,
                              const api::Overrides& overrides = {});

// The cache's clock: wall-clock milliseconds since the Unix epoch (so the persistent tier's
// expiries mean the same after a restart).
int64_t response_cache_now_ms();

// The cache key: SHA-256 hex of the scope's namespace, the target and the canonical request.
std::string response_cache_key(std::string_view scope, std::string_view target,
                               std::string_view canonical_request);

// An OpenAI chat answer (a chat.completion body, or its chunk stream's SSE bytes) as a typed
// answer; an error when it is not one ferry can read whole (then it is not cached).
Result<api::Answer> answer_from_openai(std::string_view bytes, bool sse);

}  // namespace ferry::gateway
