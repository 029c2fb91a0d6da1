#include "gateway/openai_request.h"

#include <nlohmann/json.hpp>

#include <array>
#include <utility>
#include <vector>

#include "adapters/openai_wire.h"
#include "api/embeddings_parse.h"
#include "api/openai_render.h"
#include "common/json_text.h"

namespace ferry::gateway {

using nlohmann::json;

Result<ParsedRequest> parse_request(adapters::Endpoint endpoint, std::string body) {
  ParsedRequest out;
  out.endpoint = endpoint;
  out.api = endpoint;  // the OpenAI APIs are their own front-ends
  out.raw = std::move(body);
  auto request = std::make_shared<api::ChatRequest>();
  if (endpoint == adapters::Endpoint::kEmbeddings) {
    if (Status s = api::parse_embeddings_into(out.raw, *request, &out.model_keys); !s) {
      return s.error();
    }
    out.model = request->model;
    out.max_tokens = 0;  // an embedding has no output tokens
    out.typed = std::move(request);
    return out;
  }
  api::ParseOptions options;
  options.readable_past_end = out.raw.capacity() - out.raw.size();  // the reader's slack: no copy
  if (Status s = api::parse_openai_into(endpoint, out.raw, *request, options, &out.model_keys);
      !s) {
    return s.error();
  }
  out.model = request->model;
  out.stream = request->streams();
  out.include_usage =
      request->stream_options && request->stream_options->include_usage.value_or(false);
  out.max_tokens = request->limits.effective_max_tokens();
  out.n = request->limits.choices();
  out.temperature = request->sampling.temperature;
  out.top_p = request->sampling.top_p;
  out.tools = request->has_tools();
  out.response_format = request->has_response_format();
  out.task_id = request->metadata.task_id;
  out.claimed_tags = request->metadata.tags;
  out.typed = std::move(request);
  return out;
}

namespace {

// OpenAI's stream_options (include_usage) belong to chat and completions bodies only.
bool openai_api(const ParsedRequest& request) {
  return request.api == api::Endpoint::kChatCompletions ||
         request.api == api::Endpoint::kCompletions;
}

struct Span {
  size_t begin = std::string_view::npos;
  size_t end = 0;
  bool found() const { return begin != std::string_view::npos; }
};

// The value spans of the top-level keys upstream_body rewrites.
struct Spans {
  Span model, stream_options, max_tokens, max_completion_tokens, temperature, top_p;
};

// Finds the spans and the index of the object's closing brace, in one pass that jumps over
// string contents. Returns false on anything unexpected (then the caller falls back to
// re-serialising). Keys are compared as written; the last occurrence of a duplicated key wins.
// (Not for_each_json_member: it gives up on any key holding an escape, which would re-serialise
// bodies that are spliced today; only an escaped `model` key has to fall back.)
// With `model_only`, stops at the body's `model_keys`-th `model` key, leaving the other spans
// and `close` unset: parse_request counted every key that decodes to "model", so no later key
// is written "model".
bool top_level_spans(std::string_view s, int model_keys, bool model_only, Spans& spans,
                     size_t& close) {
  int models_seen = 0;
  size_t i = skip_json_ws(s, 0);
  if (i >= s.size() || s[i] != '{') return false;
  i = skip_json_ws(s, i + 1);
  while (i < s.size() && s[i] != '}') {
    if (s[i] != '"') return false;
    size_t key_end = json_string_end(s, i);
    if (key_end == std::string_view::npos) return false;
    std::string_view key = s.substr(i + 1, key_end - i - 2);
    i = skip_json_ws(s, key_end);
    if (i >= s.size() || s[i] != ':') return false;
    i = skip_json_ws(s, i + 1);
    if (i >= s.size()) return false;
    size_t end = json_element_end(s, i);
    if (end == std::string_view::npos || end > s.size()) return false;
    using adapters::key_is;
    Span* span = key_is(key, "model")                   ? &spans.model
                 : key_is(key, "stream_options")        ? &spans.stream_options
                 : key_is(key, "max_tokens")            ? &spans.max_tokens
                 : key_is(key, "max_completion_tokens") ? &spans.max_completion_tokens
                 : key_is(key, "temperature")           ? &spans.temperature
                 : key_is(key, "top_p")                 ? &spans.top_p
                                                        : nullptr;
    if (span != nullptr) *span = {i, end};
    if (span == &spans.model && model_only && ++models_seen == model_keys) return true;
    i = skip_json_ws(s, end);
    if (i < s.size() && s[i] == ',') i = skip_json_ws(s, i + 1);
  }
  if (i >= s.size()) return false;
  close = i;
  return spans.model.found();
}

// One change to the client's text: [begin, end) replaced by prefix + text.
struct Edit {
  size_t begin = 0;
  size_t end = 0;
  std::string_view prefix;  // `,"key":` when the member is added before the closing brace
  std::string_view text;
  bool as_string = false;  // text is written as a JSON string
};

// At most one edit per rewritten key, plus max_tokens written under both of its names.
struct Edits {
  std::array<Edit, 6> list;
  size_t n = 0;
  // Replaces the value of `span`, or adds `prefix` + `text` before the closing brace at `close`
  // when the key is absent.
  void set(const Span& span, size_t close, std::string_view prefix, std::string_view text) {
    if (span.found()) {
      list[n++] = {span.begin, span.end, {}, text};
    } else {
      list[n++] = {close, close, prefix, text};
    }
  }
};

// The texts the edits point to (they outlive the edits).
struct EditTexts {
  std::string stream_options, max_tokens, temperature, top_p;
};

// True when the object `text` (a stream_options value) has one include_usage member, and it is
// `true`: what clients usually send, which then needs no rewrite.
bool asks_for_usage(std::string_view text) {
  if (text.empty() || text.front() != '{') return false;
  int seen = 0;
  bool yes = false;
  const size_t end = for_each_json_member(text, 0, [&](std::string_view key, size_t value) {
    const size_t value_end = json_element_end(text, value);
    if (key == "include_usage" && value_end != std::string_view::npos) {
      ++seen;
      yes = text.substr(value, value_end - value) == "true";
    }
    return value_end;
  });
  return end == text.size() && seen == 1 && yes;
}

// The edits of one rewrite: the model, include_usage when streaming, then the overrides.
void plan_edits(const ParsedRequest& request, std::string_view upstream_model,
                const BodyOverrides& overrides, const Spans& spans, size_t close, EditTexts& texts,
                Edits& edits) {
  std::string_view raw = request.raw;
  edits.list[edits.n++] = {spans.model.begin, spans.model.end, {}, upstream_model, true};
  if (request.stream && openai_api(request)) {
    const Span& options = spans.stream_options;
    if (!options.found()) {
      edits.list[edits.n++] = {close, close, {}, ",\"stream_options\":{\"include_usage\":true}"};
    } else if (const std::string_view given =
                   raw.substr(options.begin, options.end - options.begin);
               !asks_for_usage(given)) {  // (one that already asks is left as written)
      json opts = json::parse(given, nullptr, /*allow_exceptions=*/false);
      if (!opts.is_object()) opts = json::object();
      opts["include_usage"] = true;
      texts.stream_options = opts.dump();
      edits.list[edits.n++] = {options.begin, options.end, {}, texts.stream_options};
    }
  }
  if (overrides.max_tokens) {
    texts.max_tokens = std::to_string(*overrides.max_tokens);
    if (spans.max_completion_tokens.found()) {
      edits.set(spans.max_completion_tokens, close,
                ",\"max_completion_tokens\":", texts.max_tokens);
    }
    if (spans.max_tokens.found() || !spans.max_completion_tokens.found()) {
      edits.set(spans.max_tokens, close, ",\"max_tokens\":", texts.max_tokens);
    }
  }
  if (overrides.temperature) {
    texts.temperature = json(*overrides.temperature).dump();
    edits.set(spans.temperature, close, ",\"temperature\":", texts.temperature);
  }
  if (overrides.top_p) {
    texts.top_p = json(*overrides.top_p).dump();
    edits.set(spans.top_p, close, ",\"top_p\":", texts.top_p);
  }
}

// `raw` with the edits applied, in text order; edits at the same place (additions before the
// brace) keep their order.
std::string apply_edits(std::string_view raw, Edits& edits) {
  for (size_t k = 1; k < edits.n; ++k) {
    for (size_t j = k; j > 0 && edits.list[j - 1].begin > edits.list[j].begin; --j) {
      std::swap(edits.list[j - 1], edits.list[j]);
    }
  }
  size_t out_size = raw.size();
  for (size_t k = 0; k < edits.n; ++k) {
    const Edit& e = edits.list[k];
    out_size += e.prefix.size() + e.text.size() + (e.as_string ? 2 : 0) - (e.end - e.begin);
  }
  std::string out;
  out.reserve(out_size);
  size_t at = 0;
  for (size_t k = 0; k < edits.n; ++k) {
    const Edit& e = edits.list[k];
    out.append(raw.substr(at, e.begin - at));
    out.append(e.prefix);
    if (e.as_string) {
      append_json_string(out, e.text);
    } else {
      out.append(e.text);
    }
    at = e.end;
  }
  out.append(raw.substr(at));
  return out;
}

// The client's body re-serialised with the rewrites (keys the scan does not follow).
std::string reserialised_body(const ParsedRequest& request, const std::string& upstream_model,
                              const BodyOverrides& overrides) {
  json body = json::parse(request.raw, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return request.raw;
  body["model"] = upstream_model;
  if (request.stream && openai_api(request)) body["stream_options"]["include_usage"] = true;
  if (overrides.max_tokens) body["max_tokens"] = *overrides.max_tokens;
  if (overrides.temperature) body["temperature"] = *overrides.temperature;
  if (overrides.top_p) body["top_p"] = *overrides.top_p;
  return body.dump(-1, ' ', false, json::error_handler_t::strict);
}

}  // namespace

std::string upstream_body(const ParsedRequest& request, const std::string& upstream_model,
                          const BodyOverrides& overrides) {
  Spans spans;
  size_t close = 0;
  // Without a stream or overrides, only the model is rewritten: the scan may stop early.
  bool model_only = !request.stream && !overrides.any();
  if (top_level_spans(request.raw, request.model_keys, model_only, spans, close)) {
    EditTexts texts;
    Edits edits;
    plan_edits(request, upstream_model, overrides, spans, close, texts, edits);
    return apply_edits(request.raw, edits);
  }
  // No raw bytes to splice (a request another front-end parsed): written from the typed value.
  if (request.raw.empty() && request.typed) {
    return api::render_openai(*request.typed, upstream_model, overrides);
  }
  // Keys the scan does not follow (an escaped "model"): the client's body re-serialised.
  return reserialised_body(request, upstream_model, overrides);
}

}  // namespace ferry::gateway
