#include "gateway/router.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "api/openai_render.h"
#include "common/clock.h"
#include "common/saturating.h"
#include "common/yaml_util.h"
#include "gateway/errors.h"
#include "gateway/metrics.h"
#include "gateway/prompt_count.h"
#include "ledger/budgets.h"
#include "ledger/prices.h"
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

std::string error_code_text(const Error& e) {
  if (!e.type_code.empty()) return e.type_code;
  return std::string(error_code_name(e.code));
}

// The text of a chat or completion answer, from a non-streamed body or from SSE bytes.
void collect_text(const nlohmann::json& chunk, std::string& text, std::string& reasoning) {
  auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array()) return;
  for (const auto& c : *choices) {
    if (!c.is_object()) continue;
    if (auto t = c.find("text"); t != c.end() && t->is_string()) text += t->get<std::string>();
    for (const char* part : {"delta", "message"}) {
      auto d = c.find(part);
      if (d == c.end() || !d->is_object()) continue;
      if (auto t = d->find("content"); t != d->end() && t->is_string()) {
        text += t->get<std::string>();
      }
      for (const char* r : {"reasoning_content", "reasoning"}) {
        if (auto t = d->find(r); t != d->end() && t->is_string())
          reasoning += t->get<std::string>();
      }
    }
  }
}

// The fields every row of a request shares: who, what, which rule, which task.
ledger::RequestRecord base_record(const RequestContext& ctx, const Plan& plan, bool rule_tags) {
  ledger::RequestRecord r;
  r.request_id = ctx.request_id;
  r.started_us = ctx.started_us;
  r.ended_us = unix_micros_now();
  r.key_id = ctx.principal.key_id;
  r.team = ctx.principal.team;
  r.project = ctx.principal.project;
  r.task_id = plan.task_id;
  r.trusted_tags = ctx.principal.tags;
  if (rule_tags) {
    for (const auto& t : plan.tags) r.trusted_tags.push_back(t);
  }
  r.claimed_tags = plan.claimed_tags;
  r.requested_model = plan.requested_model;
  r.rule_id = plan.rule_id;
  r.policy_version = plan.policy_version;
  r.stream = plan.stream;
  r.facts_json = plan.facts_json;
  return r;
}

// Targets with the same key count a prompt alike: the same tokenizer and chat template, or
// the same in-process backend (which counts with what it will run).
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

}  // namespace

void extract_answer_text(std::string_view bytes, bool sse, std::string& text,
                         std::string& reasoning) {
  if (!sse) {
    auto j = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) collect_text(j, text, reasoning);
    return;
  }
  while (!bytes.empty()) {
    size_t nl = bytes.find('\n');
    std::string_view line = bytes.substr(0, nl);
    bytes.remove_prefix(nl == std::string_view::npos ? bytes.size() : nl + 1);
    if (!line.starts_with("data:")) continue;
    line.remove_prefix(5);
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (line.empty() || line.front() != '{') continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) collect_text(j, text, reasoning);
  }
}

std::string usage_problem(const Plan& plan, const AttemptOutcome& o) {
  const adapters::Usage& u = o.usage;
  if (u.malformed) return "a usage member is not an integer within int64";
  if (u.prompt_tokens == -1 && u.completion_tokens == -1) return "";  // absent: ferry counts
  auto n = [](int64_t v) { return std::to_string(v); };
  if (u.prompt_tokens < 0) return "prompt_tokens " + n(u.prompt_tokens) + " is negative or missing";
  if (u.completion_tokens < 0) {
    return "completion_tokens " + n(u.completion_tokens) + " is negative or missing";
  }
  if (u.cached_tokens < 0 || u.cached_tokens > u.prompt_tokens) {
    return "cached_tokens " + n(u.cached_tokens) + " is outside 0.." + n(u.prompt_tokens);
  }
  if (u.reasoning_tokens < 0 || u.reasoning_tokens > u.completion_tokens) {
    return "reasoning_tokens " + n(u.reasoning_tokens) + " is outside 0.." + n(u.completion_tokens);
  }
  const Target* t = o.hop != nullptr ? o.hop->target : nullptr;
  auto counted = t != nullptr ? plan.prompt_counts.find(t) : plan.prompt_counts.end();
  const bool exact = counted != plan.prompt_counts.end() &&
                     counted->second.source == ledger::TokenSource::kTokenizer;
  const int64_t ours = counted != plan.prompt_counts.end() ? counted->second.tokens : 0;
  const int64_t most_prompt =
      saturating_add(std::max(saturating_mul(ours, 2), plan.body_bytes), kPromptTokensSlack);
  // Backends count templates a little differently: only a figure far below is refused.
  const int64_t least_prompt = exact ? ours / 4 - kPromptTokensLowSlack : 0;
  if (u.prompt_tokens > most_prompt || u.prompt_tokens < least_prompt) {
    return "prompt_tokens " + n(u.prompt_tokens) + " is far from ferry's count of " + n(ours);
  }
  const int64_t ctx_len = t != nullptr ? t->context_length() : 0;
  const int64_t per_choice = plan.max_tokens > 0 ? plan.max_tokens
                             : ctx_len > 0       ? ctx_len
                                                 : kMaxTokensLimit;
  const int64_t choices = std::max<int64_t>(plan.n, 1);
  // One token of slack per choice: some servers count the end-of-generation token.
  const int64_t most_completion = saturating_add(saturating_mul(per_choice, choices), choices);
  if (u.completion_tokens > most_completion) {
    return "completion_tokens " + n(u.completion_tokens) + " exceeds " +
           (plan.max_tokens > 0 ? "max_tokens "
            : ctx_len > 0       ? "the context "
                                : "the limit ") +
           n(per_choice) + (choices > 1 ? " x n " + n(choices) : "");
  }
  return "";
}

namespace {

// Appends one attempt's usage discrepancy to `out`, a JSON array being built (the caller
// closes it): the figures the backend reported, what was billed instead, and why.
void note_usage_problem(std::string& out, size_t attempt, const AttemptOutcome& o,
                        const ledger::Tokens& billed, const std::string& problem) {
  const adapters::Usage& u = o.usage;
  nlohmann::json reported = {{"prompt_tokens", u.prompt_tokens},
                             {"completion_tokens", u.completion_tokens},
                             {"cached_tokens", u.cached_tokens},
                             {"reasoning_tokens", u.reasoning_tokens}};
  if (u.malformed) reported["malformed"] = true;
  auto source = [](const ledger::TokenCount& c) {
    return std::string(ledger::token_source_name(c.source));
  };
  nlohmann::json note = {{"attempt", attempt + 1},
                         {"problem", problem},
                         {"reported", std::move(reported)},
                         {"billed",
                          {{"input_tokens", billed.input.count},
                           {"input_source", source(billed.input)},
                           {"output_tokens", billed.output.count},
                           {"output_source", source(billed.output)},
                           {"reasoning_tokens", billed.reasoning.count},
                           {"reasoning_source", source(billed.reasoning)}}}};
  out += out.empty() ? '[' : ',';
  out += note.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

Plan Router::copy_for_shadow(const Plan& p) {
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

// ---- RecentStats ---------------------------------------------------------------------------

void RecentStats::add(bool ok, int64_t ttft_ms) {
  std::lock_guard lock(mu_);
  failed_[next_] = !ok;
  next_ = (next_ + 1) % kWindow;
  n_ = std::min(n_ + 1, kWindow);
  if (ok && ttft_ms >= 0) {
    ttft_ring_[next_ttft_] = ttft_ms;
    next_ttft_ = (next_ttft_ + 1) % kWindow;
    n_ttft_ = std::min(n_ttft_ + 1, kWindow);
  }
}

std::optional<int64_t> RecentStats::p90_ttft_ms() const {
  int64_t copy[kWindow];
  size_t n = 0;
  {
    std::lock_guard lock(mu_);
    n = n_ttft_;
    std::copy(ttft_ring_, ttft_ring_ + n, copy);
  }
  if (n == 0) return std::nullopt;
  size_t k = (n * 9 + 9) / 10 - 1;  // nearest-rank p90
  std::nth_element(copy, copy + k, copy + n);
  return copy[k];
}

std::optional<double> RecentStats::error_rate() const {
  std::lock_guard lock(mu_);
  if (n_ == 0) return std::nullopt;
  size_t failed = 0;
  for (size_t i = 0; i < n_; ++i) failed += failed_[i] ? 1 : 0;
  return static_cast<double>(failed) / static_cast<double>(n_);
}

int64_t Target::context_length() const {
  if (model->context_length > 0) return model->context_length;
  return backend->load_facts().context_length;
}

bool retryable(const Error& error) {
  switch (error.code) {
    case ErrorCode::kUnavailable:
    case ErrorCode::kTimeout:
    case ErrorCode::kBackendError:
    case ErrorCode::kContextOverflow:
    case ErrorCode::kInternal:
      return true;
    case ErrorCode::kRateLimited:
      return error.upstream_status == 429 || error.upstream_status >= 500;
    default:
      return error.upstream_status >= 500;
  }
}

// ---- Router ---------------------------------------------------------------------------------

struct Router::Counters {
  CounterFamily decisions{"ferry_route_decisions_total",
                          "Requests routed, by the rule that matched and the first target.",
                          {"rule", "target"}};
  CounterFamily fallbacks{"ferry_route_fallbacks_total",
                          "Hops that failed before anything was sent, so the next one was tried.",
                          {"from", "to"}};
  CounterFamily rejected{"ferry_route_rejected_total",
                         "Requests answered by routing without a backend, by reason.",
                         {"reason"}};
  CounterFamily prompt_mismatch{
      "ferry_prompt_tokens_mismatch_total",
      "Requests whose backend-reported prompt_tokens differ from ferry's own count.",
      {"model"}};
  CounterFamily prompt_checked{"ferry_prompt_tokens_checked_total",
                               "Requests whose prompt count could be compared with the backend's.",
                               {"model"}};
  CounterFamily usage_rejected{
      "ferry_usage_rejected_total",
      "Attempts whose backend usage was implausible or malformed, so ferry billed its own count.",
      {"model"}};
  CounterFamily soft_budget{
      "ferry_budget_soft_exceeded_total", "Requests admitted past a soft budget.", {"budget"}};
  CounterFamily shadows{"ferry_shadow_requests_total",
                        "Shadow copies sent, by target and outcome.",
                        {"target", "outcome"}};
};

Router::Router(const config::Config& config)
    : config_(config),
      counters_(std::make_unique<Counters>()),
      started_unix_us_(unix_micros_now()) {}

Router::~Router() {
  if (store_) store_->stop_watching();
}

Result<std::unique_ptr<Router>> Router::create(
    const config::Config& config, const std::map<std::string, adapters::Backend*>& backends) {
  std::unique_ptr<Router> r(new Router(config));
  auto counters = load_prompt_counters(config);
  if (!counters) return std::move(counters).error();
  for (const auto& m : config.models) {
    auto t = std::make_unique<Target>();
    t->model = &m;
    t->backend_config = config.find_backend(m.backend);
    auto it = backends.find(m.backend);
    if (it == backends.end() || it->second == nullptr) {
      return Error::make(ErrorCode::kInternal,
                         "model '" + m.name + "': backend '" + m.backend + "' was not started");
    }
    t->backend = it->second;
    if (!t->backend_config->local) t->breaker = std::make_unique<adapters::CircuitBreaker>();
    const PromptCounter& counter = counters->at(m.name);
    t->tokenizer = counter.tokenizer;
    t->chat = counter.chat;
    r->targets_.emplace(m.name, std::move(t));
  }

  if (config.policy) {
    policies::LoadOptions options;
    std::vector<std::string> names;
    for (const auto& m : config.models) names.push_back(m.name);
    options.known_targets = names;
    auto store = policies::PolicyStore::open(config.policy->file, options);
    if (!store) return store.error();
    r->store_ = std::move(*store);
    if (config.policy->watch) {
      auto st = r->store_->watch(std::chrono::milliseconds(config.policy->debounce_ms));
      if (!st) return st.error();
    }
  }

  if (config.ledger.present()) {
    try {
      auto lc = ledger::parse_ledger_config(config.ledger.node, config.source);
      lc.path = config.resolve_path(lc.path);
      ledger::PriceCatalog prices;
      if (config.prices.present())
        prices = ledger::PriceCatalog::from_yaml(config.prices.node, config.source);
      std::vector<ledger::BudgetDef> budgets;
      if (config.budgets.present())
        budgets = ledger::parse_budgets(config.budgets.node, config.source);
      auto opened = ledger::Ledger::open(std::move(lc), std::move(prices), std::move(budgets));
      if (!opened) return opened.error();
      r->ledger_ = std::move(*opened);
    } catch (const yaml::YamlError& e) {
      return Error::make(ErrorCode::kInvalidRequest, e.what());
    } catch (const std::exception& e) {
      return Error::make(ErrorCode::kInvalidRequest, config.source + ": " + e.what());
    }
  } else if (config.prices.present() || config.budgets.present()) {
    return Error::make(ErrorCode::kInvalidRequest,
                       config.source + ": 'prices' and 'budgets' need a 'ledger' section");
  }
  return r;
}

Target* Router::find_target(std::string_view model_name) {
  auto it = targets_.find(model_name);
  return it == targets_.end() ? nullptr : it->second.get();
}

void Router::count_prompts(const ParsedRequest& request, std::span<Target* const> targets,
                           std::map<const Target*, PromptCount>& counts) const {
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
    PromptCount c{estimate_prompt_tokens(request.raw.size()), ledger::TokenSource::kEstimate};
    bool chat = request.endpoint == adapters::Endpoint::kChatCompletions;
    if (!request.typed) {
      // Not parsed by parse_request: estimated.
    } else if (auto exact = t->backend->exact_prompt(*request.typed)) {
      // The in-process engine counts with exactly what it will run (template, BOS, ...); its
      // tokens go to its hops, so it does not tokenize again.
      c = {static_cast<int64_t>(exact->ids.size()), ledger::TokenSource::kTokenizer, exact};
    } else if (t->tokenizer && (!chat || t->chat)) {
      if (!input) input = api::template_input(*request.typed);
      if (auto n = PromptCounter{t->tokenizer, t->chat}.count(chat, *input)) {
        c = {*n, ledger::TokenSource::kTokenizer};
      }
    }
    counts.emplace(t, c);
  }
}

Result<policies::Facts> Router::build_facts(const RequestContext& ctx, const ParsedRequest& request,
                                            const policies::Policy* policy,
                                            std::map<const Target*, PromptCount>& counts,
                                            std::string& task_id,
                                            std::vector<std::string>& claimed_tags) {
  policies::Facts f;
  f.model = request.model;
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
      home = find_target(policy->targets()[static_cast<size_t>(hop.target)].ref);
      if (home) break;
    }
    for (const auto& pt : policy->targets()) {
      Target* t = find_target(pt.ref);
      if (t == nullptr) continue;
      policies::TargetFacts tf;
      tf.ref = pt.ref;
      tf.prompt_tokens = counts[t].tokens;
      tf.context_length = t->context_length();
      tf.healthy = t->breaker ? t->breaker->healthy() : true;
      adapters::BackendLoad load = t->backend->load_facts();
      if (load.queue_depth >= 0) tf.queue_depth = load.queue_depth;
      if (load.est_wait_ms >= 0) tf.est_wait_ms = load.est_wait_ms;
      tf.p90_ttft_ms = t->recent.p90_ttft_ms();
      tf.error_rate = t->recent.error_rate();
      f.targets.push_back(std::move(tf));
    }
  } else {
    home = find_target(request.model);
  }
  if (home == nullptr && !counts.empty()) home = counts.begin()->first;
  f.prompt_tokens = home ? counts[home].tokens : estimate_prompt_tokens(request.raw.size());
  return f;
}

Result<Plan> Router::plan(const RequestContext& ctx, const ParsedRequest& request) {
  auto t0 = Clock::now();
  Plan p;
  p.requested_model = request.model;
  p.stream = request.stream;
  p.policy = store_ ? store_->current() : nullptr;
  const policies::Policy* policy = p.policy.get();

  std::vector<Target*> candidates;  // the policy's targets
  Target* direct = nullptr;         // without a policy: the model's own target
  if (policy != nullptr) {
    if (!policy->has_alias(request.model)) {
      std::string names;
      for (const auto& a : policy->aliases()) names += (names.empty() ? "" : ", ") + a.name;
      return Error::make(
          ErrorCode::kNotFound,
          "The model '" + request.model + "' does not exist. Available models: " + names, "model",
          "model_not_found");
    }
    for (const auto& t : policy->targets()) candidates.push_back(find_target(t.ref));
  } else {
    direct = find_target(request.model);
    if (direct == nullptr) {
      std::string names;
      for (const auto& m : config_.models) names += (names.empty() ? "" : ", ") + m.name;
      return Error::make(
          ErrorCode::kNotFound,
          "The model '" + request.model + "' does not exist. Available models: " + names, "model",
          "model_not_found");
    }
  }
  count_prompts(request,
                policy != nullptr ? std::span<Target* const>(candidates)
                                  : std::span<Target* const>(&direct, 1),
                p.prompt_counts);

  BodyOverrides overrides;
  int64_t max_tokens = request.max_tokens;
  p.n = request.n;
  p.body_bytes = static_cast<int64_t>(request.raw.size());
  auto make_hop = [&](const std::string& name, Target* t) {
    PlannedHop hop;
    hop.name = name;
    hop.target = t;
    hop.request.endpoint = request.endpoint;
    hop.request.stream = request.stream;
    hop.request.client_wants_usage = request.include_usage;
    hop.request.request_id = ctx.request_id;
    hop.request.reply_model = request.model;
    hop.request.body = upstream_body(request, t->model->upstream_model, overrides);
    hop.request.typed = request.typed;
    hop.request.overrides = overrides;
    if (auto pc = p.prompt_counts.find(t); pc != p.prompt_counts.end()) {
      hop.request.prompt = pc->second.ids;
    }
    return hop;
  };

  if (policy != nullptr) {
    auto facts = build_facts(ctx, request, policy, p.prompt_counts, p.task_id, p.claimed_tags);
    if (!facts) return facts.error();
    policies::Decision d = policy->decide(*facts);
    p.rule_id = d.rule_id;
    p.policy_version = d.policy_version;
    p.headers.emplace_back("x-ferry-rule", d.rule_id);
    p.headers.emplace_back("x-ferry-policy", d.policy_version);
    p.tags = d.tags;
    for (const auto& s : d.skipped) p.skipped.push_back(s.hop.target + ": " + s.reason);
    p.facts_json = policies::facts_to_compact_json(*facts).dump();
    if (d.reject) {
      Error e = Error::make(code_for_status(d.reject->status), d.reject->message, "",
                            "rejected_by_policy");
      counters_->rejected.inc({"policy"});
      record_refusal(ctx, p, e);
      p.refusal = std::move(e);
      return p;
    }
    if (d.params.max_tokens_changed) overrides.max_tokens = d.params.max_tokens;
    if (d.params.temperature_changed) overrides.temperature = d.params.temperature;
    if (d.params.top_p_changed) overrides.top_p = d.params.top_p;
    if (d.params.max_tokens) max_tokens = *d.params.max_tokens;
    for (const auto& hop : d.route) {
      Target* t = find_target(hop.ref);
      if (t != nullptr) p.hops.push_back(make_hop(hop.target, t));
    }
    if (d.shadow) {
      if (Target* t = find_target(d.shadow->ref)) p.shadow = make_hop(d.shadow->target, t);
    }
    if (p.hops.empty()) {
      std::string why;
      for (const auto& s : p.skipped) why += (why.empty() ? "" : "; ") + s;
      Error e = Error::make(ErrorCode::kContextOverflow,
                            "no target of rule '" + d.rule_id + "' can take this request: " + why,
                            "messages", "context_length_exceeded");
      counters_->rejected.inc({"no_target"});
      record_refusal(ctx, p, e);
      p.refusal = std::move(e);
      return p;
    }
  } else {
    // No rule reads the routing facts: only the row's labels are needed.
    request_labels(ctx, request, p.task_id, p.claimed_tags);
    Target* t = direct;
    int64_t ctx_len = t->context_length();
    int64_t prompt = p.prompt_counts[t].tokens;
    // Saturating: a prompt plus a huge max_tokens must not wrap below the context length.
    int64_t completion = std::max<int64_t>(max_tokens, 0);
    int64_t requested = saturating_add(prompt, completion);
    if (ctx_len > 0 && p.prompt_counts[t].source == ledger::TokenSource::kTokenizer &&
        requested > ctx_len) {
      Error e = Error::make(
          ErrorCode::kContextOverflow,
          "This model's maximum context length is " + std::to_string(ctx_len) +
              " tokens. However, you requested " + std::to_string(requested) + " tokens (" +
              std::to_string(prompt) + " in the messages, " + std::to_string(completion) +
              " in the completion). Please reduce the length of the messages or completion.",
          "messages", "context_length_exceeded");
      counters_->rejected.inc({"context"});
      record_refusal(ctx, p, e);
      p.refusal = std::move(e);
      return p;
    }
    p.hops.push_back(make_hop(t->model->name, t));
  }

  p.max_tokens = max_tokens;
  if (ledger_) {
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
      int64_t most = max_tokens > 0 ? max_tokens
                     : ctx_len > 0  ? std::max<int64_t>(ctx_len - hop_prompt, 1)
                                    : kUnboundedOutputTokens;
      out = std::max(out, saturating_mul(most, std::max<int64_t>(request.n, 1)));
    }
    Money worst = ledger_->worst_case(refs, prompt, out);
    auto admission = ledger_->admit(
        ledger::Subject{ctx.principal.key_id, ctx.principal.team, ctx.principal.project}, worst);
    if (!admission) {
      Error e = admission.error();
      counters_->rejected.inc({e.code == ErrorCode::kRateLimited ? "budget" : "ledger"});
      if (e.code == ErrorCode::kRateLimited && e.retry_after_s == 0) {
        // A spent budget is not transient: the reply says when it resets, not to retry soon
        // (no Retry-After; errors.cpp adds x-should-retry: false).
        for (const auto& b : ledger_->budgets()) {
          if (b.def == nullptr || b.def->name != e.param) continue;
          p.headers.emplace_back("x-ferry-budget-reset", format_utc_micros(b.bounds.end_us));
        }
      } else if (e.code == ErrorCode::kUnavailable && e.retry_after_s == 0) {
        e.retry_after_s = 1;
      }
      if (e.code == ErrorCode::kRateLimited) record_refusal(ctx, p, e);
      p.refusal = std::move(e);
      return p;
    }
    p.admission = std::move(*admission);
    if (!p.admission.soft_exceeded().empty()) {
      std::string names;
      for (const auto& b : p.admission.soft_exceeded()) {
        names += (names.empty() ? "" : ", ") + b;
        counters_->soft_budget.inc({b});
      }
      p.headers.emplace_back("x-ferry-budget-warning", "soft budget exceeded: " + names);
    }
  }
  counters_->decisions.inc({p.rule_id, p.hops.front().name});
  p.routing_us = micros_between(t0, Clock::now());
  return p;
}

void Router::note_attempt(const AttemptOutcome& o) {
  if (o.hop == nullptr || o.hop->target == nullptr) return;
  Target* t = o.hop->target;
  if (o.client_gone) return;  // says nothing about the backend
  // A request the backend refused as invalid (4xx) is the client's fault, not the backend's.
  bool backend_failed = !o.ok && o.error && retryable(*o.error);
  if (t->breaker) {
    if (backend_failed) {
      t->breaker->record_failure();
    } else {
      t->breaker->record_success();
    }
  }
  t->recent.add(!backend_failed, o.ttft_us >= 0 ? o.ttft_us / 1000 : -1);
}

PromptCount Router::count_output(const Target* target, const AttemptOutcome& o) const {
  if (target && target->tokenizer) {
    return {static_cast<int64_t>(target->tokenizer->count(o.generated_text)),
            ledger::TokenSource::kTokenizer};
  }
  return {o.generated_text.empty() ? 0 : estimate_prompt_tokens(o.generated_text.size()),
          ledger::TokenSource::kEstimate};
}

std::string Router::finish(const RequestContext& ctx, Plan& plan,
                           const std::vector<AttemptOutcome>& attempts,
                           ledger::DurableCallback on_durable) {
  // The prompt-count check: ferry's exact count against what the backend says.
  for (const auto& a : attempts) {
    if (a.hop == nullptr || a.usage.prompt_tokens < 0) continue;
    auto it = plan.prompt_counts.find(a.hop->target);
    if (it == plan.prompt_counts.end() || it->second.source != ledger::TokenSource::kTokenizer) {
      continue;
    }
    const std::string& model = a.hop->target->model->name;
    counters_->prompt_checked.inc({model});
    if (it->second.tokens != a.usage.prompt_tokens) counters_->prompt_mismatch.inc({model});
  }
  for (size_t i = 0; i + 1 < attempts.size(); ++i) {
    if (attempts[i].hop && attempts[i + 1].hop) {
      counters_->fallbacks.inc({attempts[i].hop->name, attempts[i + 1].hop->name});
    }
  }
  if (!ledger_) {
    if (on_durable) on_durable(Status{});
    return "";
  }
  ledger::RequestRecord r = base_record(ctx, plan, /*rule_tags=*/true);
  r.timings.routing_us = plan.routing_us;
  r.timings.total_us = r.ended_us - r.started_us;
  for (const auto& a : attempts) {
    ledger::AttemptRecord ar;
    const Target* t = a.hop ? a.hop->target : nullptr;
    ar.target = t ? t->model->name : "";
    ar.upstream_model = t ? t->model->upstream_model : "";
    ar.http_status = a.http_status;
    ar.started_us = a.started_us;
    ar.ended_us = a.ended_us;
    if (a.ok) {
      ar.status = ledger::RequestStatus::kOk;
    } else if (a.client_gone) {
      ar.status = ledger::RequestStatus::kClientCancelled;
    } else if (a.sent_to_client) {
      ar.status = ledger::RequestStatus::kUpstreamCut;
    } else {
      ar.status = ledger::RequestStatus::kError;
    }
    if (a.error) ar.error_code = error_code_text(*a.error);
    const std::string problem = usage_problem(plan, a);
    if (a.usage.reported() && problem.empty()) {
      ar.tokens = ledger::split_openai_usage(a.usage.prompt_tokens, a.usage.cached_tokens,
                                             a.usage.completion_tokens, a.usage.reasoning_tokens,
                                             ledger::TokenSource::kBackend);
    } else if (a.ok || a.sent_to_client || !a.generated_text.empty()) {
      // No usage from the backend (it omits it, or the stream was cut short by either side):
      // ferry counts the prompt it sent and the text that was actually generated.
      auto pc = plan.prompt_counts.count(t) ? plan.prompt_counts[t] : PromptCount{};
      PromptCount out = count_output(t, a);
      ar.tokens.input = {pc.tokens, pc.source};
      ar.tokens.output = {out.tokens, out.tokens > 0 ? out.source : ledger::TokenSource::kNone};
      if (!a.reasoning_text.empty()) {
        AttemptOutcome reasoning = a;
        reasoning.generated_text = a.reasoning_text;
        PromptCount rc = count_output(t, reasoning);
        ar.tokens.reasoning = {rc.tokens, rc.source};
      }
    }
    if (!problem.empty()) {
      if (t != nullptr) counters_->usage_rejected.inc({t->model->name});
      note_usage_problem(r.usage_check, r.attempts.size(), a, ar.tokens, problem);
    }
    r.attempts.push_back(std::move(ar));
  }
  if (!attempts.empty()) {
    const AttemptOutcome& last = attempts.back();
    const ledger::AttemptRecord& lr = r.attempts.back();
    r.target = lr.target;
    r.upstream_model = lr.upstream_model;
    r.status = lr.status;
    r.http_status = last.http_status;
    r.error_code = lr.error_code;
    r.finish_reason = last.finish_reason;
    r.timings.ttft_us = last.ttft_us;
  }
  if (r.attempts.size() == 1) {
    r.tokens = r.attempts.front().tokens;
    r.attempts.clear();
  }
  if (!r.usage_check.empty()) r.usage_check += ']';
  return ledger_->record(std::move(r), std::move(plan.admission), std::move(on_durable));
}

void Router::record_refusal(const RequestContext& ctx, const Plan& plan, const Error& error) {
  if (!ledger_) return;
  ledger::RequestRecord r = base_record(ctx, plan, /*rule_tags=*/false);
  r.status = ledger::RequestStatus::kRefused;
  r.http_status = http_status_for(error);
  r.error_code = error_code_text(error);
  r.timings.total_us = r.ended_us - r.started_us;
  ledger_->record(std::move(r), nullptr);
}

void Router::finish_shadow(const RequestContext& ctx, const Plan& plan, const AttemptOutcome& o) {
  counters_->shadows.inc({o.hop ? o.hop->name : "", o.ok ? "ok" : "error"});
  if (!ledger_ || o.hop == nullptr) return;
  ledger::RequestRecord r = base_record(ctx, plan, /*rule_tags=*/true);
  r.started_us = o.started_us;
  r.ended_us = o.ended_us;
  r.trusted_tags.push_back("shadow");
  r.target = o.hop->target->model->name;
  r.upstream_model = o.hop->target->model->upstream_model;
  r.status = o.ok ? ledger::RequestStatus::kOk : ledger::RequestStatus::kError;
  r.http_status = o.http_status;
  if (o.error) r.error_code = error_code_text(*o.error);
  r.finish_reason = o.finish_reason;
  const std::string problem = usage_problem(plan, o);
  if (o.usage.reported() && problem.empty()) {
    r.tokens = ledger::split_openai_usage(o.usage.prompt_tokens, o.usage.cached_tokens,
                                          o.usage.completion_tokens, o.usage.reasoning_tokens,
                                          ledger::TokenSource::kBackend);
  } else if (o.ok) {
    auto it = plan.prompt_counts.find(o.hop->target);
    PromptCount pc = it != plan.prompt_counts.end() ? it->second : PromptCount{};
    PromptCount out = count_output(o.hop->target, o);
    r.tokens.input = {pc.tokens, pc.source};
    r.tokens.output = {out.tokens, out.tokens > 0 ? out.source : ledger::TokenSource::kNone};
  }
  if (!problem.empty()) {
    counters_->usage_rejected.inc({o.hop->target->model->name});
    note_usage_problem(r.usage_check, 0, o, r.tokens, problem);
    r.usage_check += ']';
  }
  r.timings.total_us = o.ended_us - o.started_us;
  r.timings.ttft_us = o.ttft_us;
  ledger_->record(std::move(r), nullptr);
}

namespace {

// One entry of /v1/models. `created`: when ferry began serving the name (the active policy's
// load time for an alias, the server's start for a configured model), in unix seconds.
nlohmann::json model_object(std::string_view id, int64_t created_s) {
  return {{"id", id}, {"object", "model"}, {"created", created_s}, {"owned_by", "ferry"}};
}

}  // namespace

int64_t Router::models_created_s() const {
  int64_t at_us = store_ ? store_->status().loaded_at_unix_micros : started_unix_us_;
  return std::max<int64_t>(at_us, started_unix_us_) / 1000000;
}

std::string Router::models_json() const {
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

Result<std::string> Router::model_json(std::string_view id) const {
  auto policy = store_ ? store_->current() : nullptr;
  bool known = policy ? policy->has_alias(id) : config_.find_model(id) != nullptr;
  if (!known) {
    return Error::make(ErrorCode::kNotFound, "The model '" + std::string(id) + "' does not exist",
                       "model", "model_not_found");
  }
  return model_object(id, models_created_s()).dump();
}

Result<std::string> Router::explain(const RequestContext& ctx, const ParsedRequest& request) {
  auto policy = store_ ? store_->current() : nullptr;
  if (!policy) {
    return Error::make(ErrorCode::kNotFound, "no routing policy is configured (config 'policy')");
  }
  std::vector<Target*> candidates;
  for (const auto& t : policy->targets()) candidates.push_back(find_target(t.ref));
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

void Router::render_metrics(std::string& out) const {
  counters_->decisions.render(out);
  counters_->fallbacks.render(out);
  counters_->rejected.render(out);
  counters_->prompt_checked.render(out);
  counters_->prompt_mismatch.render(out);
  counters_->usage_rejected.render(out);
  counters_->soft_budget.render(out);
  counters_->shadows.render(out);
  bool any_breaker = false;
  for (const auto& [name, t] : targets_) {
    if (!t->breaker) continue;
    if (!any_breaker) {
      out +=
          "# HELP ferry_backend_healthy 1 when the target's circuit breaker lets requests "
          "through.\n# TYPE ferry_backend_healthy gauge\n";
      any_breaker = true;
    }
    out += "ferry_backend_healthy{target=\"" + name + "\"} " + (t->breaker->healthy() ? "1" : "0") +
           "\n";
  }
  if (any_breaker) {
    out +=
        "# HELP ferry_breaker_opened_total Times a target's circuit breaker opened.\n"
        "# TYPE ferry_breaker_opened_total counter\n";
    for (const auto& [name, t] : targets_) {
      if (!t->breaker) continue;
      out += "ferry_breaker_opened_total{target=\"" + name + "\"} " +
             std::to_string(t->breaker->snapshot().opened_total) + "\n";
    }
  }
  if (store_) {
    auto st = store_->status();
    out +=
        "# HELP ferry_policy_reloads_total Policy reload attempts by outcome.\n"
        "# TYPE ferry_policy_reloads_total counter\n";
    out += "ferry_policy_reloads_total{outcome=\"applied\"} " + std::to_string(st.reloads_applied) +
           "\n";
    out += "ferry_policy_reloads_total{outcome=\"rejected\"} " +
           std::to_string(st.reloads_rejected) + "\n";
    if (st.policy) {
      out +=
          "# HELP ferry_policy_info The active policy version.\n# TYPE ferry_policy_info gauge\n"
          "ferry_policy_info{version=\"" +
          st.policy->short_version() + "\"} 1\n";
    }
  }
  if (ledger_) {
    auto s = ledger_->stats();
    out +=
        "# HELP ferry_ledger_rows_committed_total Ledger rows made durable.\n"
        "# TYPE ferry_ledger_rows_committed_total counter\n"
        "ferry_ledger_rows_committed_total " +
        std::to_string(s.rows_committed) +
        "\n"
        "# HELP ferry_ledger_pending Rows admitted or queued, not yet durable.\n"
        "# TYPE ferry_ledger_pending gauge\nferry_ledger_pending " +
        std::to_string(s.pending) +
        "\n"
        "# HELP ferry_ledger_write_failures_total Group commits that failed (then retried).\n"
        "# TYPE ferry_ledger_write_failures_total counter\n"
        "ferry_ledger_write_failures_total " +
        std::to_string(s.write_failures) +
        "\n"
        "# HELP ferry_ledger_healthy 1 when the ledger can write.\n# TYPE ferry_ledger_healthy "
        "gauge\n"
        "ferry_ledger_healthy " +
        (s.healthy ? "1" : "0") +
        "\n"
        "# HELP ferry_budget_hard_refusals_total Requests refused by a hard budget.\n"
        "# TYPE ferry_budget_hard_refusals_total counter\n"
        "ferry_budget_hard_refusals_total " +
        std::to_string(s.hard_refusals) + "\n";
    auto budgets = ledger_->budgets();
    if (!budgets.empty()) {
      out +=
          "# HELP ferry_budget_spent_micros Settled cost in the budget's current period, "
          "micro-units.\n# TYPE ferry_budget_spent_micros gauge\n";
      for (const auto& b : budgets) {
        out += "ferry_budget_spent_micros{budget=\"" + b.def->name + "\"} " +
               std::to_string(b.spent.micros()) + "\n";
      }
    }
  }
}

}  // namespace ferry::gateway
