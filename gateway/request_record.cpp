#include "gateway/request_record.h"

#include "common/clock.h"

namespace ferry::gateway {

JsonLine access_log_line(const RequestRecord& r, int64_t latency_us) {
  JsonLine j;
  j.utc_micros("ts", unix_micros_now())
      .str("request_id", r.request_id)
      .str("method", r.method)
      .str("path", r.path)
      .integer("status", r.status)
      .millis("latency_ms", latency_us);
  if (!r.key_id.empty()) j.str("key_id", r.key_id);
  if (!r.model.empty()) j.str("model", r.model);
  if (!r.backend.empty()) j.str("backend", r.backend);
  if (!r.target.empty()) j.str("target", r.target);
  if (!r.rule.empty()) j.str("rule", r.rule);
  if (r.attempts > 1) j.integer("attempts", r.attempts);
  if (!r.ledger_id.empty()) j.str("ledger_id", r.ledger_id);
  if (!r.path.starts_with("/v1/")) return j;
  j.boolean("stream", r.stream);
  if (r.usage.prompt_tokens >= 0) j.integer("prompt_tokens", r.usage.prompt_tokens);
  if (r.usage.completion_tokens >= 0) j.integer("completion_tokens", r.usage.completion_tokens);
  if (r.usage.cached_tokens > 0) j.integer("cached_tokens", r.usage.cached_tokens);
  if (r.prompt_tokens_counted >= 0) j.integer("prompt_tokens_counted", r.prompt_tokens_counted);
  if (r.ttft_us >= 0) j.millis("ttft_ms", r.ttft_us);
  if (r.backend_ttft_us >= 0) j.millis("backend_ttft_ms", r.backend_ttft_us);
  if (!r.finish_reason.empty()) j.str("finish_reason", r.finish_reason);
  if (!r.error.empty()) j.str("error", r.error);
  return j;
}

}  // namespace ferry::gateway
