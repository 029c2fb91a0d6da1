#include "gateway/trim.h"

#include <optional>
#include <utility>
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

namespace {

// The least number of units whose shares bring the prompt to the limit, and the count the
// shares predict for it; nullopt when even dropping them all does not (by the shares).
std::optional<std::pair<size_t, int64_t>> least_by_shares(
    const MessageShares& shares, const std::vector<std::pair<size_t, size_t>>& units,
    int64_t limit) {
  int64_t predicted = shares.total;
  for (size_t d = 0; d < units.size(); ++d) {
    for (size_t i = units[d].first; i < units[d].second; ++i) predicted -= shares.per_message[i];
    if (predicted <= limit) return std::make_pair(d + 1, predicted);
  }
  return std::nullopt;
}

}  // namespace

Result<TrimResult> trim_to_fit(const api::ChatRequest& request, const TrimOptions& options,
                               const PromptTokenCounter& count,
                               const MessageShareCounter& share_counter) {
  TrimResult result;
  std::optional<MessageShares> shares;
  if (share_counter) shares = share_counter(request);
  if (shares && shares->per_message.size() != request.messages.size()) shares.reset();
  result.tokens_before = shares ? shares->total : count(request);
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
  auto done = [&](std::shared_ptr<api::ChatRequest> kept, int64_t tokens) {
    result.messages_dropped = static_cast<int64_t>(request.messages.size() - kept->messages.size());
    result.tokens_after = tokens;
    result.request = std::move(kept);
    return result;
  };
  if (shares) {
    // Exact for what is dropped (no check needed): OpenAI's accounting, or a compositional
    // template while the first message stays.
    const bool exact = shares->exact || (shares->compositional && units.front().first > 0);
    const auto least = least_by_shares(*shares, units, options.limit);
    if (!least && exact) {
      int64_t all = shares->total;
      for (const auto& [b, e] : units) {
        for (size_t i = b; i < e; ++i) all -= shares->per_message[i];
      }
      return refuse(all);
    }
    if (least) {
      auto candidate = without(request, units, least->first);
      // The one exact check where needed: a prediction that does not hold falls back to the
      // search.
      const int64_t tokens = exact ? least->second : count(*candidate);
      if (tokens == least->second) return done(std::move(candidate), tokens);
    }
  }
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
  return done(std::move(best), best_tokens);
}

}  // namespace ferry::gateway
