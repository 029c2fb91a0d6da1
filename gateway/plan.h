// The values a request carries between the planner, the proxy and the recorder: who asks
// (RequestContext), what was decided (Plan, its PlannedHops), and what each try came to
// (AttemptOutcome). Plain values: no behaviour, no locks; each belongs to one request.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "adapters/backend.h"
#include "api/responses_parse.h"
#include "common/error.h"
#include "gateway/auth.h"
#include "gateway/frontend.h"
#include "gateway/prompt_count.h"
#include "gateway/targets.h"
#include "ledger/ledger.h"
#include "policies/policy.h"

namespace ferry::gateway {

struct CachedAnswer;  // gateway/response_cache.h

// Who asks and the headers routing reads.
struct RequestContext {
  std::string request_id;
  Principal principal;
  std::string task_header;   // x-ferry-task
  std::string tags_header;   // x-ferry-tags (claimed, untrusted)
  std::string cache_header;  // x-ferry-cache: no-store, no-cache (both: "no-store, no-cache")
  int64_t started_us = 0;    // unix micros
};

struct PlannedHop {
  std::string name;  // the policy's name for the target, or the model name without a policy
  Target* target = nullptr;
  adapters::BackendRequest request;
  // The rule's reasoning budget as this hop applies it ("off", "effort:high", ...), or why it
  // could not ("dropped: ..."); "" without one. The x-ferry-reasoning header, the ledger row.
  std::string reasoning;
};

// The response cache's part of a request (gateway/response_cache.h), when its rule has `cache`.
struct CachePlan {
  std::string key;     // SHA-256 hex of the scope and the canonical request; "" = bypass
  std::string bypass;  // why the request is not cacheable ("" when it is)
  int64_t ttl_ms = 0;
  bool lookup = true;                  // false with x-ferry-cache: no-cache
  bool store = true;                   // false with x-ferry-cache: no-store
  bool hits_count_rate_limits = true;  // the rule's `rate_limits: count | exempt`
  // The live entry the planner found (before admission: a hit reserves no budget); the proxy
  // serves it. Null: a miss (or not looked up).
  std::shared_ptr<const CachedAnswer> hit;
};

// The token counts for one target, as routing computed them.
struct PromptCount {
  int64_t tokens = 0;
  ledger::TokenSource source = ledger::TokenSource::kEstimate;
  std::shared_ptr<const adapters::PromptTokens> ids;  // the local engine's, for its hops
  // The messages' shares of `tokens`, made by the same render when the policy trims (an HTTP
  // target's chat count): trimming reads them instead of rendering the conversation again.
  std::shared_ptr<const MessageShares> shares;
};

struct Plan {
  std::shared_ptr<const policies::Policy> policy;  // the version the request keeps
  std::string rule_id;
  std::string policy_version;
  std::vector<PlannedHop> hops;      // fallback order
  std::vector<std::string> skipped;  // hops routing dropped, with the reason
  std::optional<PlannedHop> shadow;
  std::vector<std::string> tags;  // added by the rule
  ledger::Admission admission;
  std::map<const Target*, PromptCount> prompt_counts;
  std::string requested_model;
  // The front-end the client spoke (gateway/frontend.h): its answers and errors are shaped so;
  // a hop whose request.endpoint differs is translated.
  api::Endpoint api = api::Endpoint::kChatCompletions;
  // Responses: the request's own side, and the final `response` object as the client got it
  // (the renderer fills it; the response store keeps it).
  std::shared_ptr<const api::ResponsesRequest> responses;
  FinalResponse response_json;
  std::string task_id;
  std::vector<std::string> claimed_tags;
  bool stream = false;
  // What the answer can be at most, for checking a backend's usage: the max_tokens sent
  // (after a rule's `set`; -1 when none), the choices asked for and the body's size.
  int64_t max_tokens = -1;
  int64_t n = 1;
  int64_t body_bytes = 0;
  std::string facts_json;  // the routing facts, for replay
  // Cost levers: the tokens `trim` removed (-1: no trim), the cache's part.
  int64_t trimmed_tokens = -1;
  std::optional<CachePlan> cache;
  int64_t routing_us = 0;
  // Headers every response to this request carries (x-ferry-rule, x-ferry-policy, budget).
  std::vector<std::pair<std::string, std::string>> headers;
  // Set when routing itself answers: a policy `reject`, no target fits, a budget or the
  // ledger refuses. The row is already recorded; answer with this error and the headers.
  std::optional<Error> refusal;
};

// What one try on one hop came to.
struct AttemptOutcome {
  const PlannedHop* hop = nullptr;
  bool ok = false;
  std::optional<Error> error;   // set when !ok
  bool client_gone = false;     // the client hung up during it
  bool sent_to_client = false;  // bytes of this attempt reached the client
  adapters::Usage usage;        // as the backend reported it
  std::string finish_reason;
  std::string constraint;  // the local engine's output constraint (BackendReply)
  std::string constraint_hash;
  std::string generated_text;  // the answer's text (for counting when usage is missing)
  std::string reasoning_text;
  std::string cache_bytes;  // the answer as the backend wrote it, when it may be cached
  int http_status = 0;      // the status the client got (or would have)
  int64_t started_us = 0;
  int64_t ended_us = 0;
  int64_t ttft_us = -1;
};

}  // namespace ferry::gateway
