#include "gateway/response_cache.h"

#include <utility>

#include "adapters/sse_parser.h"
#include "api/openai_chat_parse.h"
#include "common/sha256.h"

namespace ferry::gateway {

namespace {
constexpr int64_t kEntryOverheadBytes = 256;  // the list node, the map slot, the answer's fields
}  // namespace

int64_t CachedAnswer::bytes() const {
  int64_t n =
      kEntryOverheadBytes + static_cast<int64_t>(answer.id.size() + answer.model.size() +
                                                 answer.stop_sequence.size() + target.size());
  for (const api::Block& b : answer.blocks) {
    n += static_cast<int64_t>(sizeof(api::Block) + b.text.size() + b.signature.size() +
                              b.call_id.size() + b.name.size() + b.arguments.size());
  }
  return n;
}

std::shared_ptr<const CachedAnswer> ResponseCache::get(const std::string& key, int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  if (it->second->expires_ms <= now_ms) {
    ++stats_.expired;
    erase(it->second);
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->value;
}

void ResponseCache::put(const std::string& key, std::shared_ptr<const CachedAnswer> value,
                        int64_t ttl_ms, int64_t now_ms) {
  const int64_t bytes = value->bytes() + static_cast<int64_t>(key.size());
  if (bytes > max_bytes_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = index_.find(key); it != index_.end()) erase(it->second);
  lru_.push_front(Entry{key, std::move(value), now_ms + ttl_ms, bytes});
  index_.emplace(std::string_view(lru_.front().key), lru_.begin());
  stats_.bytes += bytes;
  ++stats_.entries;
  while (stats_.bytes > max_bytes_ && !lru_.empty()) {
    ++stats_.evictions;
    erase(std::prev(lru_.end()));
  }
}

void ResponseCache::erase(List::iterator it) {
  stats_.bytes -= it->bytes;
  --stats_.entries;
  index_.erase(std::string_view(it->key));
  lru_.erase(it);
}

ResponseCache::Stats ResponseCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

std::string response_cache_key(std::string_view scope, std::string_view target,
                               std::string_view canonical_request) {
  std::string text;
  text.reserve(scope.size() + target.size() + canonical_request.size() + 2);
  text.append(scope).append(1, '\n').append(target).append(1, '\n').append(canonical_request);
  return sha256_hex(text);
}

Result<api::Answer> answer_from_openai(std::string_view bytes, bool sse) {
  if (!sse) return api::parse_chat_completion(bytes);
  adapters::SseParser framing;
  api::ChatStreamParser parser;
  api::AnswerBuilder builder;
  Status status;
  const bool framed = framing.feed(bytes, [&](std::string_view, std::string_view data) {
    if (status) status = parser.feed(data, builder);
  });
  if (!framed) return Error::make(ErrorCode::kBackendError, framing.error());
  if (!status) return status.error();
  if (!parser.finished()) {
    if (Status end = parser.end(builder); !end) return end.error();
  }
  if (builder.violation()) return *builder.violation();
  if (!builder.done()) return Error::make(ErrorCode::kBackendError, "the stream did not finish");
  return builder.take();
}

}  // namespace ferry::gateway
