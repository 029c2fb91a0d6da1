#include "gateway/trim.h"

#include <vector>

namespace ferry::gateway {

namespace {

bool is_result(api::Role role) {
  return role == api::Role::kTool || role == api::Role::kFunction;
}
bool is_system(api::Role role) {
  return role == api::Role::kSystem || role == api::Role::kDeveloper;
}

// The droppable units, oldest first: [begin, end) message ranges. A unit is one message and the
// tool results after it; the protected tail starts at the keep_last_turns-th last user message.
std::vector<std::pair<size_t, size_t>> droppable_units(const std::vector<api::Message>& messages,
                                                       const TrimOptions& options) {
  size_t tail = messages.size();
  int64_t users = 0;
  for (size_t i = messages.size(); i-- > 0;) {
    if (messages[i].role != api::Role::kUser) continue;
    tail = i;
    if (++users == options.keep_last_turns) break;
  }
  std::vector<std::pair<size_t, size_t>> units;
  for (size_t i = 0; i < tail;) {
    size_t end = i + 1;
    while (end < messages.size() && is_result(messages[end].role)) ++end;
    // A unit whose results run into the protected tail is kept whole with it.
    if (end > tail) break;
    if (!(options.keep_system && is_system(messages[i].role))) units.emplace_back(i, end);
    i = end;
  }
  return units;
}

// The request without the first `drop` units.
std::shared_ptr<api::ChatRequest> without(const api::ChatRequest& request,
                                          const std::vector<std::pair<size_t, size_t>>& units,
                                          size_t drop) {
  auto out = std::make_shared<api::ChatRequest>();
  // Everything but the messages is copied as is.
  out->endpoint = request.endpoint;
  out->model = request.model;
  out->prompt = request.prompt;
  out->tools = request.tools;
  out->tool_choice = request.tool_choice;
  out->parallel_tool_calls = request.parallel_tool_calls;
  out->functions = request.functions;
  out->response_format = request.response_format;
  out->sampling = request.sampling;
  out->logprobs = request.logprobs;
  out->limits = request.limits;
  out->stream = request.stream;
  out->stream_options = request.stream_options;
  out->metadata = request.metadata;
  out->extra = request.extra;
  out->extension_error = request.extension_error;
  out->embeddings = request.embeddings;
  out->tools_given = request.tools_given;
  out->response_format_given = request.response_format_given;
  size_t unit = 0;
  out->messages.reserve(request.messages.size());
  for (size_t i = 0; i < request.messages.size(); ++i) {
    while (unit < drop && units[unit].second <= i) ++unit;
    if (unit < drop && i >= units[unit].first) continue;
    out->messages.push_back(request.messages[i]);
  }
  return out;
}

}  // namespace

Result<TrimResult> trim_to_fit(const api::ChatRequest& request, const TrimOptions& options,
                               const PromptTokenCounter& count) {
  TrimResult result;
  result.tokens_before = count(request);
  result.tokens_after = result.tokens_before;
  if (result.tokens_before <= options.limit) return result;
  const auto units = droppable_units(request.messages, options);
  auto refuse = [&](int64_t least) {
    return Error::make(ErrorCode::kContextOverflow,
                       "the prompt is " + std::to_string(result.tokens_before) +
                           " tokens and the limit " + std::to_string(options.limit) +
                           "; trimming every turn it may drop (" + std::to_string(units.size()) +
                           ", keeping the system prompt and the last " +
                           std::to_string(options.keep_last_turns) + " turn(s)) leaves " +
                           std::to_string(least) + " tokens",
                       "messages", "context_length_exceeded");
  };
  if (units.empty()) return refuse(result.tokens_before);
  // Fewer messages never count more tokens: the least `drop` that fits, by bisection.
  auto all = without(request, units, units.size());
  const int64_t least = count(*all);
  if (least > options.limit) return refuse(least);
  size_t lo = 1;
  size_t hi = units.size();  // fits
  std::shared_ptr<api::ChatRequest> best = std::move(all);
  int64_t best_tokens = least;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    auto candidate = without(request, units, mid);
    int64_t tokens = count(*candidate);
    if (tokens <= options.limit) {
      hi = mid;
      best = std::move(candidate);
      best_tokens = tokens;
    } else {
      lo = mid + 1;
    }
  }
  result.messages_dropped = static_cast<int64_t>(request.messages.size() - best->messages.size());
  result.tokens_after = best_tokens;
  result.request = std::move(best);
  return result;
}

}  // namespace ferry::gateway
