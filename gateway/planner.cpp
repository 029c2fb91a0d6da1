#include "gateway/planner.h"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "api/embeddings_parse.h"
#include "api/openai_render.h"
#include "common/clock.h"
#include "common/saturating.h"
#include "gateway/frontend.h"
#include "gateway/prompt_count.h"
#include "gateway/response_cache.h"
#include "gateway/trim.h"
#include "ledger/budgets.h"
#include "policies/store.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferry::gateway {

namespace {

using ordered_json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// The output reserved for a request without max_tokens to a target of unknown context.
constexpr int64_t kUnboundedOutputTokens = 4096;

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  // Final avalanche so that close ids spread over the whole range.
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

ErrorCode code_for_status(int status) {
  switch (status) {
    case 401:
      return ErrorCode::kUnauthorized;
    case 403:
      return ErrorCode::kForbidden;
    case 404:
      return ErrorCode::kNotFound;
    case 413:
      return ErrorCode::kPayloadTooLarge;
    case 429:
      return ErrorCode::kRateLimited;
    case 500:
      return ErrorCode::kInternal;
    case 502:
      return ErrorCode::kBackendError;
    case 503:
      return ErrorCode::kUnavailable;
    case 504:
      return ErrorCode::kTimeout;
    default:
      return status >= 500 ? ErrorCode::kUnavailable : ErrorCode::kInvalidRequest;
  }
}

// Targets with the same key count a prompt alike: the same tokenizer and chat template, or
// the same in-process backend (which counts with what it will run).
// Whether any rule of the policy trims (the routing count then keeps the messages' shares).
bool trims(const policies::Policy& policy) {
  if (policy.default_action().trim) return true;
  return std::any_of(policy.rules().begin(), policy.rules().end(),
                     [](const policies::Rule& r) { return r.action.trim.has_value(); });
}

std::pair<const void*, const void*> count_key(const Target* t) {
  std::pair<const void*, const void*> key(t->tokenizer.get(), t->chat.get());
  if (t->backend_config->local) key.first = t->backend;
  return key;
}

// The labels a request's row carries: its task (the x-ferry-task header wins over
// metadata.task_id) and its claimed tags (the header's first, then metadata.tags).
void request_labels(const RequestContext& ctx, const ParsedRequest& request, std::string& task_id,
                    std::vector<std::string>& claimed_tags) {
  task_id = !ctx.task_header.empty() ? ctx.task_header : request.task_id;
  claimed_tags = split_tags(ctx.tags_header);
  for (const auto& t : request.claimed_tags) {
    if (std::find(claimed_tags.begin(), claimed_tags.end(), t) == claimed_tags.end()) {
      claimed_tags.push_back(t);
    }
  }
}

// An embeddings request's tokens for an HTTP target: each text input with the target's
// tokenizer (no template, no BOS: as OpenAI counts), token inputs as sent; nullopt without a
// tokenizer.
std::optional<int64_t> embeddings_count(const Target* t, const api::EmbeddingsRequest& r) {
  if (!t->tokenizer) return std::nullopt;
  int64_t n = 0;
  for (const api::EmbeddingInput& in : r.inputs) {
    const auto k = in.tokens ? in.ids.size() : t->tokenizer->count(in.text);
    n = saturating_add(n, static_cast<int64_t>(k));
  }
  return n;
}

// Whether the target's backend speaks the client's API natively (then the request passes
// through); otherwise it is translated to the typed request's own shape (chat).
bool speaks_natively(const ParsedRequest& request, const Target* t) {
  if (request.api == request.endpoint) return true;  // chat and completions: as today
  return t->backend_config->speaks(api::endpoint_name(request.api));
}

// Why the target cannot take the request: content only a native backend takes, translated.
std::optional<Error> cannot_take(const ParsedRequest& request, const Target* t) {
  if (request.native_only && !speaks_natively(request, t)) return request.native_only;
  return std::nullopt;
}

// One hop of the plan, made in place in `hop` (a fresh one: moving it in would move its six
// strings): the target and the upstream request for it. A backend that speaks the
// client's API gets its bytes spliced (the model renamed), any other the typed value as OpenAI
// chat (api::render_openai) with the usage chunk asked for, for the translated answer.
void make_hop(PlannedHop& hop, const RequestContext& ctx, const ParsedRequest& request,
              const std::string& name, Target* t, const BodyOverrides& overrides,
              const std::map<const Target*, PromptCount>& counts) {
  hop.name = name;
  hop.target = t;
  // A request without the client's bytes (trimmed) cannot pass through another API natively.
  const bool native =
      speaks_natively(request, t) && (request.api == request.endpoint || !request.raw.empty());
  hop.request.endpoint = native ? request.api : request.endpoint;
  hop.request.stream = request.stream;
  hop.request.client_wants_usage = native ? request.include_usage : true;
  hop.request.request_id = ctx.request_id;
  // A translated answer gets the client's model name from its renderer (RenderContext): the
  // backend leaves the upstream's name alone.
  if (native || !translates(request.api, hop.request.endpoint)) {
    hop.request.reply_model = request.model;
  }
  if (native) {
    hop.request.body = upstream_body(request, t->model->upstream_model, overrides);
    if (request.api != request.endpoint) hop.request.headers = request.native_headers;
  } else {
    hop.request.body = api::render_openai(*request.typed, t->model->upstream_model, overrides);
  }
  hop.request.typed = request.typed;
  hop.request.overrides = overrides;
  // The local engine's tokens, as routing counted them: its hops do not tokenize again.
  if (auto pc = counts.find(t); pc != counts.end()) hop.request.prompt = pc->second.ids;
}

}  // namespace

Planner::Planner(const config::Config& config, const TargetMap& targets,
                 policies::PolicyStore* store, ledger::Ledger* ledger, Recorder& recorder,
                 RouteCounters& counters, int64_t started_unix_us, ResponseCache* cache)
    : config_(config),
      targets_(targets),
      store_(store),
      ledger_(ledger),
      recorder_(recorder),
      counters_(counters),
      started_unix_us_(started_unix_us),
      cache_(cache) {}

Plan Planner::copy_for_shadow(const Plan& p) {
  Plan c;
  c.policy = p.policy;
  c.rule_id = p.rule_id;
  c.policy_version = p.policy_version;
  c.tags = p.tags;
  c.prompt_counts = p.prompt_counts;
  c.requested_model = p.requested_model;
  c.task_id = p.task_id;
  c.claimed_tags = p.claimed_tags;
  c.stream = p.stream;
  c.max_tokens = p.max_tokens;
  c.n = p.n;
  c.body_bytes = p.body_bytes;
  return c;
}

Result<Plan> Planner::plan(const RequestContext& ctx, const ParsedRequest& request) {
  Plan p;
  if (Status planned = plan_into(ctx, request, p); !planned) return planned.error();
  return p;
}

Status Planner::plan_into(const RequestContext& ctx, const ParsedRequest& request, Plan& p) {
  auto t0 = Clock::now();
  p.requested_model = request.model;
  p.api = request.api;
  p.stream = request.stream;
  p.policy = store_ ? store_->current() : nullptr;
  const policies::Policy* policy = p.policy.get();
  std::vector<Target*> targets;
  if (auto known = candidates(request, policy, targets); !known) return known.error();
  count_prompts(request, targets, p.prompt_counts, policy != nullptr && trims(*policy));
  int64_t max_tokens = request.max_tokens;
  p.n = request.n;
  p.body_bytes = static_cast<int64_t>(request.raw.size());
  if (policy != nullptr) {
    auto routed = decide(ctx, request, *policy, p, max_tokens);
    if (!routed) return routed.error();
    if (!*routed) return {};
  } else if (!route_direct(ctx, request, targets.front(), p, max_tokens)) {
    return {};
  }
  p.max_tokens = max_tokens;
  for (auto& hop : p.hops) hop.request.task_id = p.task_id;  // a replica pool's task affinity
  if (ledger_ && !admit(ctx, request, p, max_tokens)) return {};
  counters_.decisions.inc({p.rule_id, p.hops.front().name});
  p.routing_us = micros_between(t0, Clock::now());
  return {};
}

Status Planner::candidates(const ParsedRequest& request, const policies::Policy* policy,
                           std::vector<Target*>& out) const {
  std::string names;
  if (policy != nullptr) {
    if (policy->has_alias(request.model)) {
      for (const auto& t : policy->targets()) out.push_back(find(t.ref));
      return {};
    }
    for (const auto& a : policy->aliases()) names += (names.empty() ? "" : ", ") + a.name;
  } else {
    if (Target* direct = find(request.model)) {
      out.push_back(direct);
      return {};
    }
    for (const auto& m : config_.models) names += (names.empty() ? "" : ", ") + m.name;
  }
  return Error::make(ErrorCode::kNotFound,
                     "The model '" + request.model + "' does not exist. Available models: " + names,
                     "model", "model_not_found");
}

void Planner::refuse(const RequestContext& ctx, Plan& p, Error error, const char* reason,
                     bool record) {
  counters_.rejected.inc({reason});
  if (record) recorder_.record_refusal(ctx, p, error);
  p.refusal = std::move(error);
}

Result<bool> Planner::decide(const RequestContext& ctx, const ParsedRequest& request,
                             const policies::Policy& policy, Plan& p, int64_t& max_tokens) {
  auto facts = build_facts(ctx, request, &policy, p.prompt_counts, p.task_id, p.claimed_tags);
  if (!facts) return facts.error();
  policies::Decision d = policy.decide(*facts);
  p.rule_id = d.rule_id;
  p.policy_version = d.policy_version;
  p.headers.emplace_back("x-ferry-rule", d.rule_id);
  p.headers.emplace_back("x-ferry-policy", d.policy_version);
  p.tags = d.tags;
  for (const auto& s : d.skipped) p.skipped.push_back(s.hop.target + ": " + s.reason);
  p.facts_json = policies::facts_to_compact_text(*facts);
  if (d.reject) {
    refuse(
        ctx, p,
        Error::make(code_for_status(d.reject->status), d.reject->message, "", "rejected_by_policy"),
        "policy", true);
    return false;
  }
  BodyOverrides overrides;
  if (d.params.max_tokens_changed) overrides.max_tokens = d.params.max_tokens;
  if (d.params.temperature_changed) overrides.temperature = d.params.temperature;
  if (d.params.top_p_changed) overrides.top_p = d.params.top_p;
  if (d.params.max_tokens) max_tokens = *d.params.max_tokens;
  std::optional<ParsedRequest> trimmed;
  if (d.trim && !trim(ctx, request, d, p, max_tokens, trimmed)) return false;
  const ParsedRequest& sent = trimmed ? *trimmed : request;
  std::optional<Error> untranslatable;
  for (const auto& hop : d.route) {
    Target* t = find(hop.ref);
    if (t == nullptr) continue;
    if (auto why = cannot_take(sent, t)) {
      p.skipped.push_back(hop.target + ": does not speak " +
                          std::string(api::endpoint_name(request.api)) + " natively");
      untranslatable = std::move(why);
      continue;
    }
    make_hop(p.hops.emplace_back(), ctx, sent, hop.target, t, overrides, p.prompt_counts);
  }
  if (p.hops.empty() && untranslatable) {
    refuse(ctx, p, std::move(*untranslatable), "untranslatable", true);
    return false;
  }
  if (d.shadow) {
    if (Target* t = find(d.shadow->ref); t != nullptr && !cannot_take(sent, t)) {
      make_hop(p.shadow.emplace(), ctx, sent, d.shadow->target, t, overrides, p.prompt_counts);
    }
  }
  if (d.reasoning.set()) apply_reasoning(d.reasoning, p);
  if (d.cache && !p.hops.empty()) plan_cache(ctx, sent, *d.cache, overrides, p);
  if (p.hops.empty()) {
    std::string why;
    for (const auto& s : p.skipped) why += (why.empty() ? "" : "; ") + s;
    refuse(ctx, p,
           Error::make(ErrorCode::kContextOverflow,
                       "no target of rule '" + d.rule_id + "' can take this request: " + why,
                       "messages", "context_length_exceeded"),
           "no_target", true);
    return false;
  }
  return true;
}

bool Planner::trim(const RequestContext& ctx, const ParsedRequest& request,
                   const policies::Decision& d, Plan& p, int64_t max_tokens,
                   std::optional<ParsedRequest>& trimmed) {
  if (request.endpoint != adapters::Endpoint::kChatCompletions || !request.typed ||
      d.route.empty()) {
    return true;  // only chat-shaped conversations have turns to drop
  }
  Target* t = find(d.trim->to_fit ? d.trim->to_fit->ref : d.route.front().ref);
  if (t == nullptr) return true;
  TrimOptions options;
  options.keep_system = d.trim->keep_system;
  options.keep_last_turns = d.trim->keep_last_turns;
  if (d.trim->to_fit) {
    const int64_t ctx_len = t->context_length();
    if (ctx_len <= 0) return true;  // an unknown context: nothing to fit
    options.limit = ctx_len - std::max<int64_t>(max_tokens, 1);
  } else {
    options.limit = d.trim->max_prompt_tokens;
  }
  ParsedRequest probe;  // a candidate, counted as the target counts it
  probe.endpoint = request.endpoint;
  auto counter = [&](const api::ChatRequest& candidate) {
    probe.typed = std::shared_ptr<const api::ChatRequest>(std::shared_ptr<void>(), &candidate);
    std::optional<ordered_json> input;
    return count_for(probe, t, input).tokens;
  };
  // The shares come from the target's tokenizer and template; an in-process target's exact
  // count is its engine's, so there they only predict, and the full count is the engine's.
  MessageShareCounter shares;
  if (t->tokenizer && t->chat && !t->backend_config->local) {
    const auto counted = p.prompt_counts.find(t);
    std::shared_ptr<const MessageShares> kept =
        counted != p.prompt_counts.end() ? counted->second.shares : nullptr;
    shares = [&, kept](const api::ChatRequest& r) {
      // The routing count's render, when it kept the shares; else one render for them.
      if (kept && &r == request.typed.get()) return std::optional<MessageShares>(*kept);
      const PromptCounter counter{t->tokenizer, t->chat};
      if (auto typed = counter.typed_shares(r, /*per_message=*/true)) return typed;
      return counter.shares(api::template_input(r));
    };
  }
  auto result = trim_to_fit(*request.typed, options, counter, shares);
  if (!result) {
    refuse(ctx, p, std::move(result.error()), "trim", true);
    return false;
  }
  p.trimmed_tokens = result->tokens_before - result->tokens_after;
  p.headers.emplace_back("x-ferry-trimmed-tokens", std::to_string(p.trimmed_tokens));
  if (!result->request) return true;
  trimmed.emplace();
  ParsedRequest& out = *trimmed;
  out.endpoint = request.endpoint;
  out.api = request.api;
  out.native_only = request.native_only;
  out.native_headers = request.native_headers;
  out.typed = result->request;  // no raw bytes: every hop renders the trimmed value
  out.responses = request.responses;
  out.model = request.model;
  out.stream = request.stream;
  out.include_usage = request.include_usage;
  out.max_tokens = request.max_tokens;
  out.n = request.n;
  out.temperature = request.temperature;
  out.top_p = request.top_p;
  out.tools = request.tools;
  out.response_format = request.response_format;
  out.task_id = request.task_id;
  out.claimed_tags = request.claimed_tags;
  // The hops run and are billed on the trimmed prompt.
  std::vector<Target*> route;
  for (const auto& hop : d.route) route.push_back(find(hop.ref));
  if (d.shadow) route.push_back(find(d.shadow->ref));
  std::map<const Target*, PromptCount> counts;  // fresh: none shared with an untrimmed count
  // The trimmed prompt's exact count is known for every target that counts as `t` does (an
  // HTTP target's tokenizer and template): only the others count it again.
  if (t->tokenizer && t->chat && !t->backend_config->local) {
    for (Target* r : route) {
      if (r != nullptr && count_key(r) == count_key(t)) {
        counts[r] = {result->tokens_after, ledger::TokenSource::kTokenizer};
      }
    }
  }
  count_prompts(out, route, counts);
  for (auto& [target, count] : counts) p.prompt_counts[target] = std::move(count);
  return true;
}

namespace {

// A body as sent on (invalid UTF-8 replaced).
std::string body_text(const ordered_json& j) {
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

// A member set in an OpenAI JSON body (re-serialised: only when a reasoning budget applies).
std::string with_member(const std::string& body, const char* member, const char* inner,
                        const ordered_json& value) {
  auto j = ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return body;
  if (inner != nullptr) {
    if (!j[member].is_object()) j[member] = ordered_json::object();
    j[member][inner] = value;
  } else {
    j[member] = value;
  }
  return body_text(j);
}

// Anthropic Messages passed through natively: `thinking` is the switch and the budget. Thinking
// is the client's opt-in there, so a budget caps a requested one (never turns it on, which would
// cost more); Anthropic refuses budgets under 1024, so a smaller cap turns thinking off.
void apply_messages_reasoning(const policies::ReasoningRule& rule, const std::string& name,
                              PlannedHop& hop) {
  using policies::ReasoningMode;
  constexpr int64_t kAnthropicMinBudget = 1024;
  const ordered_json disabled = {{"type", "disabled"}};
  if (rule.mode == ReasoningMode::kOff) {
    hop.request.body = with_member(hop.request.body, "thinking", nullptr, disabled);
    hop.reasoning = "off";
    return;
  }
  if (rule.mode != ReasoningMode::kBudget) {
    hop.reasoning = "dropped: Anthropic Messages has no reasoning effort (" + name + ")";
    return;
  }
  auto j = ordered_json::parse(hop.request.body, nullptr, /*allow_exceptions=*/false);
  ordered_json thinking = j.is_object() ? j.value("thinking", ordered_json()) : ordered_json();
  const std::string type = thinking.is_object() ? thinking.value("type", std::string()) : "";
  if (type != "enabled" && type != "adaptive") {
    hop.reasoning = "max_tokens:" + std::to_string(rule.max_tokens) + " (no thinking requested)";
    return;
  }
  if (rule.max_tokens < kAnthropicMinBudget) {
    j["thinking"] = disabled;
    hop.request.body = body_text(j);  // the body parsed once, above
    hop.reasoning = "off: Anthropic's smallest thinking budget is 1024 (" + name + ")";
    return;
  }
  // Adaptive thinking is bounded by max_tokens only: a smaller cap makes it a fixed budget.
  const ordered_json asked = thinking.value("budget_tokens", ordered_json());
  const int64_t requested = asked.is_number_integer() ? asked.get<int64_t>() : INT64_MAX;
  const ordered_json limit = j.value("max_tokens", ordered_json());
  const int64_t max_tokens = limit.is_number_integer() ? limit.get<int64_t>() : INT64_MAX;
  const int64_t budget = std::min(requested, rule.max_tokens);
  if (budget >= max_tokens) {
    hop.reasoning = "max_tokens:" + std::to_string(rule.max_tokens) + " (max_tokens is lower)";
    return;
  }
  thinking["type"] = "enabled";
  thinking["budget_tokens"] = budget;
  j["thinking"] = std::move(thinking);
  hop.request.body = body_text(j);
  hop.reasoning = "max_tokens:" + std::to_string(budget);
}

// OpenAI Responses passed through natively: `reasoning.effort`. It has no token budget, and
// "off" has no portable spelling there (models differ on "minimal" and "none").
void apply_responses_reasoning(const policies::ReasoningRule& rule, const std::string& name,
                               PlannedHop& hop) {
  using policies::ReasoningMode;
  if (rule.mode == ReasoningMode::kLow || rule.mode == ReasoningMode::kMedium ||
      rule.mode == ReasoningMode::kHigh) {
    hop.request.body = with_member(hop.request.body, "reasoning", "effort", ordered_json(name));
    hop.reasoning = "effort:" + name;
    return;
  }
  hop.reasoning = "dropped: OpenAI Responses has no " +
                  std::string(rule.mode == ReasoningMode::kOff ? "portable off" : "token budget") +
                  " for reasoning (" + name + ")";
}

}  // namespace

void Planner::apply_reasoning(const policies::ReasoningRule& rule, Plan& p) const {
  using policies::ReasoningMode;
  const std::string name = policies::reasoning_name(rule);
  for (PlannedHop& hop : p.hops) {
    Target* t = hop.target;
    if (t->backend_config->local) {
      if (rule.mode == ReasoningMode::kBudget) {
        // The engine closes the think block itself when the budget is spent.
        if (!t->backend->closes_think_blocks()) {
          hop.reasoning = "dropped: the target's chat template has no think block (" + name + ")";
        } else if (hop.request.endpoint != adapters::Endpoint::kChatCompletions) {
          hop.reasoning = "dropped: only chat requests think on the local engine (" + name + ")";
        } else {
          hop.request.think_budget = rule.max_tokens;
          hop.reasoning = "max_tokens:" + std::to_string(rule.max_tokens);
        }
        continue;
      }
      if (rule.mode != ReasoningMode::kOff) {
        hop.reasoning = "dropped: the local engine has no reasoning effort (" + name + ")";
        continue;
      }
      // The template's thinking switch (Qwen3's enable_thinking) off: the prompt is recounted.
      auto typed = std::make_shared<api::ChatRequest>(*hop.request.typed);
      if (!typed->extra.is_object()) typed->extra = api::Json::object();
      typed->extra["chat_template_kwargs"]["enable_thinking"] = false;
      auto exact = t->backend->exact_prompt(*typed);
      if (!exact) {
        hop.reasoning = "dropped: the target cannot count the prompt without thinking";
        continue;
      }
      p.prompt_counts[t] = {static_cast<int64_t>(exact->ids.size()),
                            ledger::TokenSource::kTokenizer, exact};
      hop.request.prompt = std::move(exact);
      hop.request.typed = std::move(typed);
      hop.reasoning = "off";
      continue;
    }
    if (hop.request.endpoint == adapters::Endpoint::kMessages) {
      apply_messages_reasoning(rule, name, hop);
      continue;
    }
    if (hop.request.endpoint == adapters::Endpoint::kResponses) {
      apply_responses_reasoning(rule, name, hop);
      continue;
    }
    if (hop.request.endpoint != adapters::Endpoint::kChatCompletions) {
      hop.reasoning = "dropped: only OpenAI chat backends take a reasoning setting (" + name + ")";
      continue;
    }
    switch (rule.mode) {
      case ReasoningMode::kOff:
        hop.request.body = with_member(hop.request.body, "chat_template_kwargs", "enable_thinking",
                                       ordered_json(false));
        hop.reasoning = "off";
        break;
      case ReasoningMode::kLow:
      case ReasoningMode::kMedium:
      case ReasoningMode::kHigh:
        hop.request.body =
            with_member(hop.request.body, "reasoning_effort", nullptr, ordered_json(name));
        hop.reasoning = "effort:" + name;
        break;
      case ReasoningMode::kBudget:
      case ReasoningMode::kUnset:
        hop.reasoning = "dropped: an HTTP backend has no thinking token budget (" + name + ")";
        break;
    }
  }
}

void Planner::plan_cache(const RequestContext& ctx, const ParsedRequest& request,
                         const policies::CacheRule& rule, const BodyOverrides& overrides,
                         Plan& p) const {
  CachePlan c;
  c.ttl_ms = rule.ttl_ms;
  c.lookup = ctx.cache_header.find("no-cache") == std::string::npos;
  c.store = ctx.cache_header.find("no-store") == std::string::npos;
  const PlannedHop& hop = p.hops.front();
  const api::ChatRequest* typed = hop.request.typed.get();
  const std::optional<double> temperature =
      overrides.temperature ? overrides.temperature
                            : (typed ? typed->sampling.temperature : std::nullopt);
  const bool deterministic =
      (temperature && *temperature == 0) || (typed && typed->sampling.seed.has_value());
  if (request.endpoint != adapters::Endpoint::kChatCompletions || typed == nullptr) {
    c.bypass = "only chat requests are cached";
  } else if (request.n != 1) {
    c.bypass = "n > 1";
  } else if (typed->logprobs.logprobs.value_or(false)) {
    c.bypass = "logprobs are not kept";
  } else if (hop.request.endpoint != adapters::Endpoint::kChatCompletions) {
    c.bypass = "the target answers in its own API";
  } else if (!deterministic && !rule.nondeterministic) {
    c.bypass = "not deterministic (temperature 0 or a seed)";
  }
  if (!c.bypass.empty()) {
    p.headers.emplace_back("x-ferry-cache", "bypass");
    p.cache = std::move(c);
    return;
  }
  std::string scope;
  switch (rule.scope) {
    case policies::CacheScope::kGlobal:
      scope = "global";
      break;
    case policies::CacheScope::kTeam:
      if (!ctx.principal.team.empty()) {
        scope = "team:" + ctx.principal.team;
        break;
      }
      [[fallthrough]];  // no team: the key's own
    case policies::CacheScope::kKey:
      scope = "key:" + ctx.principal.key_id;
      break;
  }
  // Canonical: the typed request as sent to the target, without its stream members (a body
  // answers a stream and back), then how the hop applies a reasoning budget.
  std::string text = canonical_request(*typed, hop.target->model->upstream_model, overrides);
  text += "\nreasoning:" + hop.reasoning;
  // Configured: an answer is found again only under the policy version that made it, or the
  // target's price version in effect (a new price expires what the old one made).
  if (config_.cache.per_policy_version) text += "\npolicy:" + p.policy_version;
  if (config_.cache.per_price_version && ledger_ != nullptr) {
    const ledger::PriceEntry* price =
        ledger_->prices().find(hop.target->model->name, ctx.started_us);
    text += "\nprice:" + (price != nullptr ? price->version : std::string());
  }
  c.key = response_cache_key(scope, hop.target->model->name, text);
  c.hits_count_rate_limits = rule.hits_count_rate_limits;
  // Looked up here, before admission: a hit is admitted without its budgets.
  if (c.lookup && cache_ != nullptr) c.hit = cache_->get(c.key, response_cache_now_ms());
  p.cache = std::move(c);
}

bool Planner::route_direct(const RequestContext& ctx, const ParsedRequest& request, Target* t,
                           Plan& p, int64_t max_tokens) {
  // No rule reads the routing facts: only the row's labels are needed.
  request_labels(ctx, request, p.task_id, p.claimed_tags);
  if (auto why = cannot_take(request, t)) {
    refuse(ctx, p, std::move(*why), "untranslatable", true);
    return false;
  }
  int64_t ctx_len = t->context_length();
  int64_t prompt = p.prompt_counts[t].tokens;
  // Saturating: a prompt plus a huge max_tokens must not wrap below the context length.
  int64_t completion = std::max<int64_t>(max_tokens, 0);
  int64_t requested = saturating_add(prompt, completion);
  // Embeddings: the context bounds each input, not their sum; the backend checks each.
  const bool embeddings = request.endpoint == adapters::Endpoint::kEmbeddings;
  if (!embeddings && ctx_len > 0 && p.prompt_counts[t].source == ledger::TokenSource::kTokenizer &&
      requested > ctx_len) {
    refuse(ctx, p,
           Error::make(ErrorCode::kContextOverflow,
                       "This model's maximum context length is " + std::to_string(ctx_len) +
                           " tokens. However, you requested " + std::to_string(requested) +
                           " tokens (" + std::to_string(prompt) + " in the messages, " +
                           std::to_string(completion) +
                           " in the completion). Please reduce the length of the messages or "
                           "completion.",
                       "messages", "context_length_exceeded"),
           "context", true);
    return false;
  }
  make_hop(p.hops.emplace_back(), ctx, request, t->model->name, t, BodyOverrides{},
           p.prompt_counts);
  return true;
}

namespace {

// x-ratelimit-{limit,remaining,reset}-{requests,tokens}, as OpenAI sends them: the tightest
// applying rate limit of each kind after this request was counted.
void add_rate_headers(const ledger::RateHold& rate,
                      std::vector<std::pair<std::string, std::string>>& headers) {
  auto add = [&](const char* kind, const std::optional<ledger::RateView>& v) {
    if (!v) return;
    headers.emplace_back(std::string("x-ratelimit-limit-") + kind, std::to_string(v->limit));
    headers.emplace_back(std::string("x-ratelimit-remaining-") + kind,
                         std::to_string(v->remaining));
    headers.emplace_back(std::string("x-ratelimit-reset-") + kind,
                         ledger::format_reset(v->reset_ms));
  };
  add("requests", rate.requests);
  add("tokens", rate.tokens_view);
}

}  // namespace

bool Planner::admit(const RequestContext& ctx, const ParsedRequest& request, Plan& p,
                    int64_t max_tokens) {
  // The worst case over the route: the largest prompt count at the input price plus the
  // most output the request can produce (per choice, times `n`) at the output price of the
  // dearest target. Saturating: a worst case too large to hold refuses against any budget.
  std::vector<std::string> refs;
  int64_t prompt = 0;
  int64_t out = 0;
  for (const auto& hop : p.hops) {
    refs.push_back(hop.target->model->name);
    int64_t hop_prompt = p.prompt_counts[hop.target].tokens;
    prompt = std::max(prompt, hop_prompt);
    int64_t ctx_len = hop.target->context_length();
    int64_t most = request.endpoint == adapters::Endpoint::kEmbeddings ? 0  // no output
                   : max_tokens > 0                                    ? max_tokens
                   : ctx_len > 0 ? std::max<int64_t>(ctx_len - hop_prompt, 1)
                                 : kUnboundedOutputTokens;
    out = std::max(out, saturating_mul(most, std::max<int64_t>(request.n, 1)));
  }
  Money worst = ledger_->worst_case(refs, prompt, out);
  // A response-cache hit costs nothing: no budget is reserved or can refuse it; it takes from
  // the rate limits as its rule says.
  ledger::AdmitScope scope;
  if (p.cache && p.cache->hit) {
    scope.budgets = false;
    scope.rate_limits = p.cache->hits_count_rate_limits;
  }
  // Rate limits count the exact prompt plus the output reserved (corrected at settle).
  auto admission = ledger_->admit(
      ledger::Subject{ctx.principal.key_id, ctx.principal.team, ctx.principal.project}, worst,
      saturating_add(prompt, out), scope);
  if (!admission) {
    Error e = admission.error();
    if (e.type_code == "rate_limit_exceeded") {
      // As OpenAI does, the 429 says where the limits stand too.
      if (auto views = ledger_->rate_views(
              ledger::Subject{ctx.principal.key_id, ctx.principal.team, ctx.principal.project})) {
        add_rate_headers(*views, p.headers);
      }
    }
    if (e.code == ErrorCode::kRateLimited && e.retry_after_s == 0 &&
        e.type_code != "rate_limit_exceeded") {
      // A spent budget is not transient: the reply says when it resets, not to retry soon
      // (no Retry-After; errors.cpp adds x-should-retry: false).
      for (const auto& b : ledger_->budgets()) {
        if (b.def == nullptr || b.def->name != e.param) continue;
        p.headers.emplace_back("x-ferry-budget-reset", format_utc_micros(b.bounds.end_us));
      }
    } else if (e.code == ErrorCode::kUnavailable && e.retry_after_s == 0) {
      e.retry_after_s = 1;
    }
    bool limited = e.code == ErrorCode::kRateLimited;
    const char* reason = !limited                               ? "ledger"
                         : e.type_code == "rate_limit_exceeded" ? "rate_limit"
                                                                : "budget";
    refuse(ctx, p, std::move(e), reason, /*record=*/limited);
    return false;
  }
  p.admission = std::move(*admission);
  if (const ledger::RateHold* rate = p.admission.rate()) add_rate_headers(*rate, p.headers);
  if (!p.admission.soft_exceeded().empty()) {
    std::string names;
    for (const auto& b : p.admission.soft_exceeded()) {
      names += (names.empty() ? "" : ", ") + b;
      counters_.soft_budget.inc({b});
    }
    p.headers.emplace_back("x-ferry-budget-warning", "soft budget exceeded: " + names);
  }
  return true;
}

PromptCount Planner::count_for(const ParsedRequest& request, const Target* t,
                               std::optional<ordered_json>& input, bool shares) const {
  PromptCount c{estimate_prompt_tokens(request.raw.size()), ledger::TokenSource::kEstimate};
  bool chat = request.endpoint == adapters::Endpoint::kChatCompletions;
  if (!request.typed) {
    // Not parsed by parse_request: estimated.
  } else if (auto exact = t->backend->exact_prompt(*request.typed)) {
    // (Embeddings too: every input's tokens, one after the other.)
    // The in-process engine counts with exactly what it will run (template, BOS, ...); its
    // tokens go to its hops, so it does not tokenize again.
    c = {static_cast<int64_t>(exact->ids.size()), ledger::TokenSource::kTokenizer, exact};
  } else if (request.typed->embeddings) {
    if (auto n = embeddings_count(t, *request.typed->embeddings)) {
      c = {*n, ledger::TokenSource::kTokenizer};
    }
  } else if (t->tokenizer && (!chat || t->chat)) {
    const PromptCounter counter{t->tokenizer, t->chat};
    if (chat) {
      // OpenAI's accounting walks the typed request; no template input is built for it.
      if (auto s = counter.typed_shares(*request.typed, shares)) {
        c = {s->total, ledger::TokenSource::kTokenizer};
        if (shares) c.shares = std::make_shared<const MessageShares>(std::move(*s));
        return c;
      }
    }
    if (!input) input = api::template_input(*request.typed);
    if (!chat || !shares) {
      if (auto n = counter.count(chat, *input)) c = {*n, ledger::TokenSource::kTokenizer};
    } else if (auto s = counter.shares(*input)) {
      c = {s->total, ledger::TokenSource::kTokenizer};
      c.shares = std::make_shared<const MessageShares>(std::move(*s));
    }
  }
  return c;
}

void Planner::count_prompts(const ParsedRequest& request, std::span<Target* const> targets,
                            std::map<const Target*, PromptCount>& counts, bool shares) const {
  std::optional<ordered_json> input;  // the chat template's input, made once when needed
  for (const Target* t : targets) {
    if (t == nullptr || counts.count(t) != 0) continue;
    // Targets that count alike share one count (a handful of targets: a linear search).
    auto key = count_key(t);
    auto same = std::find_if(counts.begin(), counts.end(),
                             [&](const auto& counted) { return count_key(counted.first) == key; });
    if (same != counts.end()) {
      PromptCount shared = same->second;
      counts.emplace(t, shared);
      continue;
    }
    counts.emplace(t, count_for(request, t, input, shares));
  }
}

Result<policies::Facts> Planner::build_facts(const RequestContext& ctx,
                                             const ParsedRequest& request,
                                             const policies::Policy* policy,
                                             std::map<const Target*, PromptCount>& counts,
                                             std::string& task_id,
                                             std::vector<std::string>& claimed_tags) {
  policies::Facts f;
  f.model = request.model;
  f.api = std::string(api::endpoint_name(request.api));
  if (request.max_tokens > 0) f.max_tokens = request.max_tokens;
  f.temperature = request.temperature;
  f.top_p = request.top_p;
  f.stream = request.stream;
  f.tools = request.tools;
  f.response_format = request.response_format;
  request_labels(ctx, request, task_id, claimed_tags);
  f.task_id = !task_id.empty();
  f.key = ctx.principal.key_id;
  f.team = ctx.principal.team;
  f.project = ctx.principal.project;
  f.role = std::string(config::role_name(ctx.principal.role));
  f.tags = ctx.principal.tags;
  f.claimed_tags = claimed_tags;
  f.unix_seconds = ctx.started_us / 1000000;
  f.split = fnv1a(ctx.request_id);
  if (ledger_ && policy != nullptr) {  // a fact only rules read: no lock without a policy
    f.budget_left_pct = ledger_->budget_left_pct(
        ledger::Subject{ctx.principal.key_id, ctx.principal.team, ctx.principal.project});
  }
  // The request's own count: the home target's (first hop of the policy's default route, or
  // the model itself without a policy).
  const Target* home = nullptr;
  if (policy != nullptr) {
    for (const auto& hop : policy->default_action().route) {
      home = find(policy->targets()[static_cast<size_t>(hop.target)].ref);
      if (home) break;
    }
    for (const auto& pt : policy->targets()) {
      Target* t = find(pt.ref);
      if (t == nullptr) continue;
      policies::TargetFacts tf;
      tf.ref = pt.ref;
      tf.prompt_tokens = counts[t].tokens;
      // Embeddings: the context bounds each input, not the count of all (0: not a limit).
      tf.context_length =
          request.endpoint == adapters::Endpoint::kEmbeddings ? 0 : t->context_length();
      tf.healthy = t->breaker ? t->breaker->healthy() : true;
      adapters::BackendLoad load = t->backend->load_facts();
      if (load.queue_depth >= 0) tf.queue_depth = load.queue_depth;
      if (load.est_wait_ms >= 0) tf.est_wait_ms = load.est_wait_ms;
      tf.p90_ttft_ms = t->recent.p90_ttft_ms();
      tf.error_rate = t->recent.error_rate();
      f.targets.push_back(std::move(tf));
    }
  } else {
    home = find(request.model);
  }
  if (home == nullptr && !counts.empty()) home = counts.begin()->first;
  f.prompt_tokens = home ? counts[home].tokens : estimate_prompt_tokens(request.raw.size());
  return f;
}

namespace {

// One entry of /v1/models. `created`: when ferry began serving the name (the active policy's
// load time for an alias, the server's start for a configured model), in unix seconds.
nlohmann::json model_object(std::string_view id, int64_t created_s) {
  return {{"id", id}, {"object", "model"}, {"created", created_s}, {"owned_by", "ferry"}};
}

}  // namespace

int64_t Planner::models_created_s() const {
  int64_t at_us = store_ ? store_->status().loaded_at_unix_micros : started_unix_us_;
  return std::max<int64_t>(at_us, started_unix_us_) / 1000000;
}

std::string Planner::models_json() const {
  nlohmann::json data = nlohmann::json::array();
  auto policy = store_ ? store_->current() : nullptr;
  int64_t created_s = models_created_s();
  if (policy) {
    for (const auto& a : policy->aliases()) {
      nlohmann::json m = model_object(a.name, created_s);
      if (!a.description.empty()) m["description"] = a.description;
      data.push_back(std::move(m));
    }
  } else {
    for (const auto& m : config_.models) data.push_back(model_object(m.name, created_s));
  }
  return nlohmann::json{{"object", "list"}, {"data", data}}.dump();
}

Result<std::string> Planner::model_json(std::string_view id) const {
  auto policy = store_ ? store_->current() : nullptr;
  bool known = policy ? policy->has_alias(id) : config_.find_model(id) != nullptr;
  if (!known) {
    return Error::make(ErrorCode::kNotFound, "The model '" + std::string(id) + "' does not exist",
                       "model", "model_not_found");
  }
  return model_object(id, models_created_s()).dump();
}

Result<Planner::TokenCount> Planner::count_tokens(const RequestContext& ctx,
                                                  const ParsedRequest& request) {
  auto policy = store_ ? store_->current() : nullptr;
  std::vector<Target*> targets;
  if (auto known = candidates(request, policy.get(), targets); !known) return known.error();
  std::map<const Target*, PromptCount> counts;
  count_prompts(request, targets, counts);
  Target* answering = targets.empty() ? nullptr : targets.front();
  if (policy != nullptr) {
    std::string task_id;
    std::vector<std::string> claimed;
    auto facts = build_facts(ctx, request, policy.get(), counts, task_id, claimed);
    if (!facts) return facts.error();
    policies::Decision d = policy->decide(*facts);
    if (d.reject) {
      return Error::make(code_for_status(d.reject->status), d.reject->message, "",
                         "rejected_by_policy");
    }
    answering = nullptr;
    for (const auto& hop : d.route) {
      Target* t = find(hop.ref);
      if (t != nullptr && !cannot_take(request, t)) {
        answering = t;
        break;
      }
    }
  }
  if (answering == nullptr) {
    return Error::make(ErrorCode::kNotFound, "no target can count this request", "model");
  }
  if (auto why = cannot_take(request, answering)) return *why;
  const PromptCount& c = counts[answering];
  return TokenCount{c.tokens, c.source == ledger::TokenSource::kTokenizer, answering->model->name};
}

Result<std::string> Planner::explain(const RequestContext& ctx, const ParsedRequest& request) {
  auto policy = store_ ? store_->current() : nullptr;
  if (!policy) {
    return Error::make(ErrorCode::kNotFound, "no routing policy is configured (config 'policy')");
  }
  std::vector<Target*> candidates;
  for (const auto& t : policy->targets()) candidates.push_back(find(t.ref));
  std::map<const Target*, PromptCount> counts;
  count_prompts(request, candidates, counts);
  std::string task_id;
  std::vector<std::string> claimed;
  auto facts = build_facts(ctx, request, policy.get(), counts, task_id, claimed);
  if (!facts) return facts.error();
  policies::Explanation ex = policy->explain(*facts);
  nlohmann::json j = policies::explanation_to_json(ex);
  j["text"] = policies::explanation_to_text(ex);
  return j.dump(2);
}

}  // namespace ferry::gateway
