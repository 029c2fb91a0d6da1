// Context trimming (the policy action `trim`): the oldest turns of a chat request dropped until
// its prompt, counted by the caller's counter (the target's tokenizer and template), fits a
// limit. A tool call is never split from its results, system messages and the last turns stay.
// Stateless functions over values; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "api/chat_request.h"
#include "common/error.h"
#include "gateway/prompt_count.h"

namespace ferry::gateway {

struct TrimOptions {
  int64_t limit = 0;            // the most prompt tokens allowed
  bool keep_system = true;      // system and developer messages are never dropped
  int64_t keep_last_turns = 1;  // the last K turns (a user message and all after it) stay
};

struct TrimResult {
  std::shared_ptr<const api::ChatRequest> request;  // null when nothing was dropped
  int64_t tokens_before = 0;
  int64_t tokens_after = 0;  // == tokens_before when nothing was dropped
  int64_t messages_dropped = 0;
};

// The prompt tokens of a request (the candidate with fewer messages).
using PromptTokenCounter = std::function<int64_t(const api::ChatRequest&)>;

// A request's exact count and its messages' shares (gateway/prompt_count.h).
using MessageShareCounter = std::function<std::optional<MessageShares>(const api::ChatRequest&)>;

// Drops the fewest oldest droppable units (a message with the tool results that follow it)
// for the prompt to fit. With shares: the least number of units whose shares make it fit, from
// their prefix sums, then one exact count of that candidate (none when the shares are exact:
// OpenAI's accounting, or a compositional template with the first message kept);
// when the count is not what the shares predicted, or without shares, a binary search over
// how many, each candidate counted once. A 400 (context_length_exceeded) when even the minimum
// kept does not fit.
Result<TrimResult> trim_to_fit(const api::ChatRequest& request, const TrimOptions& options,
                               const PromptTokenCounter& count,
                               const MessageShareCounter& shares = {});

}  // namespace ferry::gateway
