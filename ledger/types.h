// The values the ledger records: token counts by kind with their source, one request's row,
// its attempts, and the cost breakdown. Plain value types; safe to copy between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/money.h"

namespace ferry::ledger {

// Where a token count came from.
enum class TokenSource : uint8_t {
  kNone,       // no tokens of this kind
  kBackend,    // the backend's `usage` object
  kTokenizer,  // ferry counted with its own tokenizer (e.g. a stream cut short)
  kEstimate,   // an estimate (no tokenizer for the model)
};
std::string_view token_source_name(TokenSource source);
std::optional<TokenSource> parse_token_source(std::string_view name);

struct TokenCount {
  int64_t count = 0;
  TokenSource source = TokenSource::kNone;
};

// Token counts by kind. The kinds are disjoint: `input` is uncached prompt tokens only,
// `output` excludes reasoning tokens. Use split_openai_usage() to derive them from an
// OpenAI usage object, where cached tokens are part of prompt_tokens and reasoning tokens
// part of completion_tokens.
struct Tokens {
  TokenCount input;         // uncached input
  TokenCount cached_input;  // prompt_tokens_details.cached_tokens
  TokenCount output;        // completion tokens that are not reasoning
  TokenCount reasoning;     // completion_tokens_details.reasoning_tokens / reasoning deltas
};

// From OpenAI's usage numbers (cached <= prompt and reasoning <= completion are clamped).
Tokens split_openai_usage(int64_t prompt_tokens, int64_t cached_tokens, int64_t completion_tokens,
                          int64_t reasoning_tokens, TokenSource source);

// How a request ended.
enum class RequestStatus : uint8_t {
  kOk,               // completed normally
  kError,            // failed (see http_status / error_code)
  kClientCancelled,  // the client went away before the end
  kUpstreamCut,      // the backend's stream ended early
  kRefused,          // refused before running (e.g. budget); no tokens
};
std::string_view request_status_name(RequestStatus status);
std::optional<RequestStatus> parse_request_status(std::string_view name);

// One try on one target. When a request has attempts, its tokens are the sum of theirs.
struct AttemptRecord {
  std::string target;          // the target name; prices are looked up by it
  std::string upstream_model;  // the model name the backend reported
  RequestStatus status = RequestStatus::kOk;
  int http_status = 0;
  std::string error_code;
  Tokens tokens;
  int64_t started_us = 0;  // unix microseconds, UTC
  int64_t ended_us = 0;
};

struct Timings {
  int64_t queue_us = 0;
  int64_t routing_us = 0;
  int64_t ttft_us = -1;  // -1 when no token was produced
  int64_t total_us = 0;
};

// What the gateway hands the ledger when a request ends.
struct RequestRecord {
  std::string id;  // empty: the ledger makes a UUIDv7
  // The gateway's request id (the client's x-request-id, or the one ferry made), as in the
  // access log and the response's x-request-id; "" when none (stored as NULL).
  std::string request_id;
  int64_t started_us = 0;
  int64_t ended_us = 0;
  std::string key_id;
  std::string team;
  std::string project;
  std::string task_id;                    // x-ferry-task header or metadata; "" when none
  std::vector<std::string> trusted_tags;  // from the key's config
  std::vector<std::string> claimed_tags;  // from the client; never used for trust
  std::string requested_model;
  std::string target;          // the target that answered (or the last one tried)
  std::string upstream_model;  // the model the backend reported
  std::string rule_id;
  std::string policy_version;
  RequestStatus status = RequestStatus::kOk;
  int http_status = 200;
  std::string error_code;
  bool stream = false;
  std::string finish_reason;
  Tokens tokens;                        // used when `attempts` is empty
  std::vector<AttemptRecord> attempts;  // one per try when fallbacks or retries happened
  Timings timings;
  // The routing facts the policy decided on (policies::facts_to_json, as JSON text), so that
  // `ferry policy replay` can re-decide the request; "" when none were recorded.
  std::string facts_json;
  // Set when a backend's usage could not be billed as reported (negative, not an integer, or
  // beyond what the request could produce): JSON text naming each such attempt, the figures
  // it reported, ferry's own counts that were billed instead, and why. "" when usage was
  // trusted or absent.
  std::string usage_check;
  // The local engine's output constraint ("none", "json_object", "json_schema", "tools") and
  // its compiled grammar's hash; "" for other backends.
  std::string constraint_mode;
  std::string schema_hash;
  // Cost levers: prompt tokens `trim` removed (-1: none); `cache` "hit" (own tokens and cost 0,
  // `cache_tokens` what the answer cost when made), "miss" or "bypass" (rules with `cache`),
  // "" (none); the reasoning budget as applied ("off", "effort:high", "dropped: ..."; "" when
  // none).
  int64_t trimmed_tokens = -1;
  std::string cache;
  Tokens cache_tokens;
  std::string reasoning_budget;
  bool has_levers() const {
    return trimmed_tokens >= 0 || !cache.empty() || !reasoning_budget.empty();
  }
};

// How a row was priced.
enum class Pricing : uint8_t {
  kPriced,    // an external price from the catalog
  kInternal,  // a configured internal rate (local models)
  kUnpriced,  // no price for the target at that time: cost is unknown, never zero
};
std::string_view pricing_name(Pricing pricing);

// Cost by kind; all parts are set or none (unpriced).
struct Cost {
  Pricing pricing = Pricing::kUnpriced;
  std::string price_version;  // "" when unpriced
  Money input;
  Money cached_input;
  Money output;
  Money reasoning;
  Money total() const { return input + cached_input + output + reasoning; }
};

}  // namespace ferry::ledger
