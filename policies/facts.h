// Facts: everything a routing rule may test about one request, filled by the gateway (or
// rebuilt from a ledger row for replay) before policy evaluation; the vocabulary and the
// recorded members are declared in policies/fact_table.h. Plain value; no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"
#include "policies/fact_table.h"

namespace ferry::policies {

// What the gateway knows about one target (a model name from the server config) right now.
// Every field the gateway cannot fill stays at its "unknown" value.
struct TargetFacts {
  std::string ref;                       // the config model name, as in the policy's `targets`
  std::optional<int64_t> prompt_tokens;  // counted with this target's tokenizer and template
  int64_t context_length = 0;            // 0 = unknown (then `fits` is true)
  bool healthy = true;                   // circuit breaker closed / active check passing
  std::optional<int64_t> queue_depth;    // requests waiting
  std::optional<int64_t> est_wait_ms;    // estimated queueing delay
  std::optional<int64_t> p90_ttft_ms;    // recent p90 time to first token
  std::optional<double> error_rate;      // recent fraction of failed requests, 0..1
};

struct Facts {
  // Request.
  std::string model;                  // the alias the client sent
  std::string api = "chat";           // the front-end: chat, completions, messages, responses
  int64_t prompt_tokens = 0;          // exact, with the requested model's tokenizer
  std::optional<int64_t> max_tokens;  // as requested (max_tokens / max_completion_tokens)
  std::optional<double> temperature;  // as requested
  std::optional<double> top_p;        // as requested
  bool stream = false;
  bool tools = false;            // tools / functions present
  bool response_format = false;  // response_format present
  bool task_id = false;          // a task id was sent

  // Caller, trusted: from the API key.
  std::string key;  // key id
  std::string team;
  std::string project;
  std::string role;               // app, finance, admin
  std::vector<std::string> tags;  // trusted tags from the key's config
  // Caller, untrusted: claimed in a header or the request's `metadata`.
  std::vector<std::string> claimed_tags;

  // Time: seconds since the epoch; the policy's `timezone` turns it into hour/weekday.
  int64_t unix_seconds = 0;

  // Budget left of the caller's tightest budget, in percent; absent until the ledger fills it.
  std::optional<double> budget_left_pct;

  // Live state of the targets; a target not listed here is healthy with nothing else known.
  std::vector<TargetFacts> targets;

  // A uniformly distributed number chosen per request (e.g. a hash of the request id), used
  // only to split traffic between weighted hops. Recorded so replays are deterministic.
  uint64_t split = 0;

  const TargetFacts* find_target(std::string_view ref) const;
  // prompt_tokens + max_tokens (max_tokens counts as 0 when absent).
  int64_t total_tokens() const { return prompt_tokens + max_tokens.value_or(0); }
};

// JSON round trip, for explain output, the ledger's recorded facts and replay, over the recorded
// members that fact_table.h lists (each member's name is its key). Reading refuses unknown
// keys and wrong types (kInvalidRequest naming the field).
nlohmann::json facts_to_json(const Facts& facts);
// The same without the fields at their defaults (absent, false, 0, "", [], healthy): about a
// third smaller, for the ledger, which keeps the facts of every request for replay.
// facts_from_json reads it back to equal facts.
nlohmann::json facts_to_compact_json(const Facts& facts);
// facts_to_compact_json(facts).dump(), byte for byte, written without the tree (the ledger's
// facts column on every request); a string that is not UTF-8 has U+FFFD for each bad byte
// (where dump() would throw).
std::string facts_to_compact_text(const Facts& facts);
Result<Facts> facts_from_json(const nlohmann::json& json);

}  // namespace ferry::policies
