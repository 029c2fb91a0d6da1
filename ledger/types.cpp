#include "ledger/types.h"

#include <algorithm>

namespace ferry::ledger {

std::string_view token_source_name(TokenSource source) {
  switch (source) {
    case TokenSource::kNone:
      return "none";
    case TokenSource::kBackend:
      return "backend";
    case TokenSource::kTokenizer:
      return "tokenizer";
    case TokenSource::kEstimate:
      return "estimate";
  }
  return "none";
}

std::optional<TokenSource> parse_token_source(std::string_view name) {
  for (auto s : {TokenSource::kNone, TokenSource::kBackend, TokenSource::kTokenizer,
                 TokenSource::kEstimate}) {
    if (token_source_name(s) == name) return s;
  }
  return std::nullopt;
}

Tokens split_openai_usage(int64_t prompt_tokens, int64_t cached_tokens, int64_t completion_tokens,
                          int64_t reasoning_tokens, TokenSource source) {
  prompt_tokens = std::max<int64_t>(0, prompt_tokens);
  completion_tokens = std::max<int64_t>(0, completion_tokens);
  cached_tokens = std::clamp<int64_t>(cached_tokens, 0, prompt_tokens);
  reasoning_tokens = std::clamp<int64_t>(reasoning_tokens, 0, completion_tokens);
  auto count = [&](int64_t n) { return TokenCount{n, n > 0 ? source : TokenSource::kNone}; };
  Tokens t;
  t.input = count(prompt_tokens - cached_tokens);
  t.cached_input = count(cached_tokens);
  t.output = count(completion_tokens - reasoning_tokens);
  t.reasoning = count(reasoning_tokens);
  return t;
}

std::string_view request_status_name(RequestStatus status) {
  switch (status) {
    case RequestStatus::kOk:
      return "ok";
    case RequestStatus::kError:
      return "error";
    case RequestStatus::kClientCancelled:
      return "client_cancelled";
    case RequestStatus::kUpstreamCut:
      return "upstream_cut";
    case RequestStatus::kRefused:
      return "refused";
  }
  return "error";
}

std::optional<RequestStatus> parse_request_status(std::string_view name) {
  for (auto s : {RequestStatus::kOk, RequestStatus::kError, RequestStatus::kClientCancelled,
                 RequestStatus::kUpstreamCut, RequestStatus::kRefused}) {
    if (request_status_name(s) == name) return s;
  }
  return std::nullopt;
}

std::string_view pricing_name(Pricing pricing) {
  switch (pricing) {
    case Pricing::kPriced:
      return "priced";
    case Pricing::kInternal:
      return "internal";
    case Pricing::kUnpriced:
      return "unpriced";
  }
  return "unpriced";
}

}  // namespace ferry::ledger
