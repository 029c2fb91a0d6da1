#include "gateway/recorder.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "adapters/local_constraint.h"
#include "common/clock.h"
#include "common/saturating.h"
#include "common/tags.h"
#include "gateway/errors.h"
#include "gateway/openai_request.h"
#include "gateway/prompt_count.h"
#include "tokenizer/tokenizer.h"

namespace ferry::gateway {

namespace {

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
  r.trimmed_tokens = plan.trimmed_tokens;
  // A rule with `cache`: "miss" (looked up, or not with no-cache, and answered by a backend) or
  // "bypass" (not cacheable); settle_cache_hit writes "hit".
  if (plan.cache) r.cache = plan.cache->bypass.empty() ? "miss" : "bypass";
  return r;
}

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

// ferry's own count of an answer's text: the target's tokenizer, else an estimate.
PromptCount count_output(const Target* target, const AttemptOutcome& o) {
  if (target && target->tokenizer) {
    return {static_cast<int64_t>(target->tokenizer->count(o.generated_text)),
            ledger::TokenSource::kTokenizer};
  }
  return {o.generated_text.empty() ? 0 : estimate_prompt_tokens(o.generated_text.size()),
          ledger::TokenSource::kEstimate};
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

bool falls_through(const Error& error) {
  return retryable(error) || error.type_code == adapters::kUnsupportedByTarget;
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

// ---- Recorder -------------------------------------------------------------------------------

void Recorder::note_attempt(const AttemptOutcome& o) {
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

std::optional<ledger::RequestRecord> Recorder::served_record(
    const RequestContext& ctx, const Plan& plan, ledger::DurableCallback& on_durable) const {
  if (!ledger_) {
    if (on_durable) on_durable(Status{});
    return std::nullopt;
  }
  ledger::RequestRecord r = base_record(ctx, plan, /*rule_tags=*/true);
  r.timings.routing_us = plan.routing_us;
  r.timings.total_us = r.ended_us - r.started_us;
  return r;
}

std::string Recorder::settle(const RequestContext& ctx, Plan& plan,
                             const std::vector<AttemptOutcome>& attempts,
                             ledger::DurableCallback on_durable) {
  count_checks(plan, attempts);
  auto row = served_record(ctx, plan, on_durable);
  if (!row) return "";
  ledger::RequestRecord& r = *row;
  for (const auto& a : attempts) {
    r.attempts.push_back(attempt_record(plan, a, r.attempts.size(), r.usage_check));
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
    r.constraint_mode = last.constraint;
    r.schema_hash = last.constraint_hash;
    r.timings.ttft_us = last.ttft_us;
    if (last.hop != nullptr) r.reasoning_budget = last.hop->reasoning;
  }
  if (r.attempts.size() == 1) {
    r.tokens = r.attempts.front().tokens;
    r.attempts.clear();
  }
  if (!r.usage_check.empty()) r.usage_check += ']';
  return ledger_->record(std::move(r), std::move(plan.admission), std::move(on_durable));
}

void Recorder::count_checks(const Plan& plan, const std::vector<AttemptOutcome>& attempts) {
  // The prompt-count check: ferry's exact count against what the backend says.
  for (const auto& a : attempts) {
    if (a.hop == nullptr || a.usage.prompt_tokens < 0) continue;
    auto it = plan.prompt_counts.find(a.hop->target);
    if (it == plan.prompt_counts.end() || it->second.source != ledger::TokenSource::kTokenizer) {
      continue;
    }
    const std::string& model = a.hop->target->model->name;
    counters_.prompt_checked.inc({model});
    if (it->second.tokens != a.usage.prompt_tokens) counters_.prompt_mismatch.inc({model});
  }
  for (size_t i = 0; i + 1 < attempts.size(); ++i) {
    if (attempts[i].hop && attempts[i + 1].hop) {
      counters_.fallbacks.inc({attempts[i].hop->name, attempts[i + 1].hop->name});
    }
  }
}

ledger::AttemptRecord Recorder::attempt_record(Plan& plan, const AttemptOutcome& a, size_t index,
                                               std::string& usage_check) {
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
    if (t != nullptr) counters_.usage_rejected.inc({t->model->name});
    note_usage_problem(usage_check, index, a, ar.tokens, problem);
  }
  return ar;
}

std::string Recorder::settle_cache_hit(const RequestContext& ctx, Plan& plan,
                                       const CachedAnswer& hit,
                                       ledger::DurableCallback on_durable) {
  auto row = served_record(ctx, plan, on_durable);
  if (!row) return "";
  ledger::RequestRecord& r = *row;
  r.target = hit.target;
  r.upstream_model = hit.answer.model;
  r.status = ledger::RequestStatus::kOk;
  r.http_status = 200;
  r.finish_reason = std::string(api::finish_reason_name(hit.answer.finish));
  r.cache = "hit";
  r.cache_tokens = hit.tokens;
  if (!plan.hops.empty()) r.reasoning_budget = plan.hops.front().reasoning;
  return ledger_->record(std::move(r), std::move(plan.admission), std::move(on_durable));
}

void Recorder::record_refusal(const RequestContext& ctx, const Plan& plan, const Error& error) {
  if (!ledger_) return;
  ledger::RequestRecord r = base_record(ctx, plan, /*rule_tags=*/false);
  r.status = ledger::RequestStatus::kRefused;
  r.http_status = http_status_for(error);
  r.error_code = error_code_text(error);
  r.timings.total_us = r.ended_us - r.started_us;
  ledger_->record(std::move(r), nullptr);
}

void Recorder::settle_shadow(const RequestContext& ctx, const Plan& plan, const AttemptOutcome& o) {
  counters_.shadows.inc({o.hop ? o.hop->name : "", o.ok ? "ok" : "error"});
  if (!ledger_ || o.hop == nullptr) return;
  ledger::RequestRecord r = base_record(ctx, plan, /*rule_tags=*/true);
  r.started_us = o.started_us;
  r.ended_us = o.ended_us;
  r.trusted_tags.emplace_back(kShadowTag);
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
    counters_.usage_rejected.inc({o.hop->target->model->name});
    note_usage_problem(r.usage_check, 0, o, r.tokens, problem);
    r.usage_check += ']';
  }
  r.timings.total_us = o.ended_us - o.started_us;
  r.timings.ttft_us = o.ttft_us;
  ledger_->record(std::move(r), nullptr);
}

void Recorder::skip_shadow(const PlannedHop& shadow) {
  counters_.shadows.inc({shadow.name, "skipped"});
}

}  // namespace ferry::gateway
