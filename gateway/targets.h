// The configured models as targets the gateway can send to: each one's backend, tokenizer and
// chat template (for exact counts), circuit breaker and recent outcomes. Built once by
// Gateway::create; the set never changes afterwards.
// Thread-safety: a Target's pointers are immutable after start-up; its breaker and RecentStats
// are thread-safe, so every I/O thread reads and feeds them at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "adapters/backend.h"
#include "adapters/health.h"
#include "config/config.h"

namespace ferry::tokenizer {
class Tokenizer;
class ChatFormatter;
}  // namespace ferry::tokenizer

namespace ferry::gateway {

// Recent outcomes of one target: p90 time to first token and error rate over the last
// outcomes (a fixed ring). Both are read for every request's facts, so add() keeps what they
// need (the ring's values sorted, the failures counted) and a read is a lookup. Thread-safe.
class RecentStats {
 public:
  void add(bool ok, int64_t ttft_ms);
  std::optional<int64_t> p90_ttft_ms() const;
  std::optional<double> error_rate() const;

 private:
  static constexpr size_t kWindow = 128;
  mutable std::mutex mu_;
  bool failed_[kWindow] = {};
  size_t n_ = 0;         // outcomes in the ring (at most kWindow)
  size_t next_ = 0;      // ring position
  size_t failures_ = 0;  // failed outcomes in the ring
  int64_t ttft_ring_[kWindow] = {};
  int64_t ttft_sorted_[kWindow] = {};  // the ring's n_ttft_ values, ascending
  size_t n_ttft_ = 0;
  size_t next_ttft_ = 0;
};

// One config model the gateway can send to.
struct Target {
  const config::ModelConfig* model = nullptr;
  const config::BackendConfig* backend_config = nullptr;
  adapters::Backend* backend = nullptr;                   // owned by the server
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;  // null: counts are estimates
  std::shared_ptr<const tokenizer::ChatFormatter> chat;   // null: chats are estimated
  std::unique_ptr<adapters::CircuitBreaker> breaker;      // HTTP backends only
  RecentStats recent;
  int64_t context_length() const;
};

// The targets by model name.
using TargetMap = std::map<std::string, std::unique_ptr<Target>, std::less<>>;

// The target of `model_name`, or nullptr.
Target* find_target(const TargetMap& targets, std::string_view model_name);

}  // namespace ferry::gateway
