#include "gateway/openai_request.h"

#include <simdjson.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <vector>

#include "adapters/openai_wire.h"

namespace ferry::gateway {

namespace {

using nlohmann::json;
using simdjson::dom::element;
using simdjson::dom::element_type;

Error invalid(std::string message, std::string param) {
  return Error::make(ErrorCode::kInvalidRequest, std::move(message), std::move(param),
                     "invalid_value");
}

const char* kind_of(const element& v) {
  switch (v.type()) {
    case element_type::NULL_VALUE:
      return "null";
    case element_type::OBJECT:
      return "an object";
    case element_type::ARRAY:
      return "an array";
    case element_type::STRING:
      return "a string";
    case element_type::BOOL:
      return "a boolean";
    case element_type::INT64:
    case element_type::UINT64:
      return "an integer";
    case element_type::DOUBLE:
      return "a number";
  }
  return "an unsupported value";
}

bool is_integer(const element& v) {
  return v.type() == element_type::INT64 || v.type() == element_type::UINT64;
}

bool is_number(const element& v) {
  return is_integer(v) || v.type() == element_type::DOUBLE;
}

// The field's value, or nullopt when it is absent or null (both mean "not given").
std::optional<element> field(const simdjson::dom::object& obj, std::string_view key) {
  element v;
  if (obj.at_key(key).get(v) != simdjson::SUCCESS || v.is_null()) return std::nullopt;
  return v;
}

// The top-level members parse_request reads.
enum Member : uint8_t {
  kModel,
  kMessages,
  kPrompt,
  kStream,
  kStreamOptions,
  kMaxTokens,
  kMaxCompletionTokens,
  kN,
  kSeed,
  kTemperature,
  kTopP,
  kPresencePenalty,
  kFrequencyPenalty,
  kTools,
  kResponseFormat,
  kLogitBias,
  kMetadata,
  kFunctions,
  kStop,
  kLogprobs,
  kTopLogprobs,
  kMemberCount,
  kOther = kMemberCount
};

Member member_of(std::string_view key) {
  using adapters::key_is;
  switch (key.size()) {
    case 1:
      return key_is(key, "n") ? kN : kOther;
    case 4:
      return key_is(key, "seed") ? kSeed : key_is(key, "stop") ? kStop : kOther;
    case 5:
      return key_is(key, "model")   ? kModel
             : key_is(key, "top_p") ? kTopP
             : key_is(key, "tools") ? kTools
                                    : kOther;
    case 6:
      return key_is(key, "prompt") ? kPrompt : key_is(key, "stream") ? kStream : kOther;
    case 8:
      return key_is(key, "messages")   ? kMessages
             : key_is(key, "metadata") ? kMetadata
             : key_is(key, "logprobs") ? kLogprobs
                                       : kOther;
    case 9:
      return key_is(key, "functions") ? kFunctions : kOther;
    case 10:
      return key_is(key, "max_tokens")   ? kMaxTokens
             : key_is(key, "logit_bias") ? kLogitBias
                                         : kOther;
    case 11:
      return key_is(key, "temperature") ? kTemperature : kOther;
    case 12:
      return key_is(key, "top_logprobs") ? kTopLogprobs : kOther;
    case 14:
      return key_is(key, "stream_options") ? kStreamOptions : kOther;
    case 15:
      return key_is(key, "response_format") ? kResponseFormat : kOther;
    case 16:
      return key_is(key, "presence_penalty") ? kPresencePenalty : kOther;
    case 17:
      return key_is(key, "frequency_penalty") ? kFrequencyPenalty : kOther;
    case 21:
      return key_is(key, "max_completion_tokens") ? kMaxCompletionTokens : kOther;
    default:
      return kOther;
  }
}

// The body's members, read in one walk over the object instead of one linear at_key() per
// field. A member that ferry reads may appear once: JSON parsers disagree on which of two
// occurrences wins (simdjson's at_key() the first, Python's json and most backends the last),
// so a duplicate would let ferry validate, price and route one value while the backend runs
// the other ("max_tokens":5,"max_tokens":100000). Other keys pass through untouched.
class Members {
 public:
  explicit Members(const simdjson::dom::object& body) {
    for (auto [key, value] : body) {
      Member m = member_of(key);
      if (m == kModel) ++model_keys_;
      if (m == kOther) continue;
      if (seen_[m]) {
        if (duplicate_.empty()) duplicate_ = key;
        continue;
      }
      seen_[m] = true;
      values_[m] = value;
    }
  }
  int model_keys() const { return model_keys_; }
  // The first member ferry reads that occurs twice (as decoded); empty when none.
  std::string_view duplicate() const { return duplicate_; }
  // The member's value, or nullopt when it is absent or null (both mean "not given").
  std::optional<element> operator[](Member m) const {
    if (!seen_[m] || values_[m].is_null()) return std::nullopt;
    return values_[m];
  }

 private:
  bool seen_[kMemberCount] = {};
  element values_[kMemberCount];
  int model_keys_ = 0;
  std::string_view duplicate_;
};

std::string number_text(double v) {
  return json(v).dump();
}

std::optional<Error> check_number(const std::optional<element>& v, const char* key, double min,
                                  double max) {
  if (!v) return std::nullopt;
  if (!is_number(*v)) {
    return invalid(std::string("'") + key + "' must be a number, got " + kind_of(*v), key);
  }
  double d = v->get_double().value_unsafe();
  if (d < min || d > max) {
    return invalid(std::string("'") + key + "' must be between " + number_text(min) + " and " +
                       number_text(max) + ", got " + number_text(d),
                   key);
  }
  return std::nullopt;
}

// An integer in [min, max]: never a float (1e300, 2.0), a string ("1") or a value beyond int64.
std::optional<Error> check_integer(const std::optional<element>& v, const char* key, int64_t min,
                                   int64_t max, int64_t* out) {
  if (!v) return std::nullopt;
  auto range = [&] {
    return std::string("'") + key + "' must be an integer between " + std::to_string(min) +
           " and " + std::to_string(max);
  };
  if (!is_integer(*v)) return invalid(range() + ", got " + kind_of(*v), key);
  int64_t n = 0;
  if (v->get_int64().get(n) != simdjson::SUCCESS) {  // a uint64 above INT64_MAX
    return invalid(range() + ", got " + std::to_string(v->get_uint64().value_unsafe()), key);
  }
  if (n < min || n > max) return invalid(range() + ", got " + std::to_string(n), key);
  if (out != nullptr) *out = n;
  return std::nullopt;
}

// A token id as a JSON integer: 0..kMaxTokenId.
bool is_token_id(const element& v) {
  int64_t id = 0;
  return v.type() != element_type::DOUBLE && v.get_int64().get(id) == simdjson::SUCCESS &&
         id >= 0 && id <= kMaxTokenId;
}

// logit_bias: {"<token id>": bias in [-100, 100]}, keys decimal token ids (OpenAI's rules).
std::optional<Error> check_logit_bias(const std::optional<element>& v) {
  if (!v) return std::nullopt;
  simdjson::dom::object bias;
  if (v->get_object().get(bias) != simdjson::SUCCESS) {
    return invalid(std::string("'logit_bias' must be an object, got ") + kind_of(*v), "logit_bias");
  }
  for (auto [key, value] : bias) {
    if (!adapters::parse_token_id_key(key)) {
      return invalid("'logit_bias' keys must be token ids (integers 0.." +
                         std::to_string(kMaxTokenId) + "), got '" + std::string(key) + "'",
                     "logit_bias");
    }
    double d = 0;
    if (!is_number(value) || (d = value.get_double().value_unsafe(), !(d >= -100 && d <= 100))) {
      return invalid("'logit_bias' values must be numbers between -100 and 100 (token " +
                         std::string(key) + ")",
                     "logit_bias");
    }
  }
  return std::nullopt;
}

std::optional<Error> check_type(const std::optional<element>& v, const char* key, element_type type,
                                const char* expected) {
  if (v && v->type() != type) {
    return invalid(std::string("'") + key + "' must be " + expected + ", got " + kind_of(*v), key);
  }
  return std::nullopt;
}

std::optional<Error> check_messages(const std::optional<element>& v) {
  if (!v) return invalid("'messages' is required", "messages");
  simdjson::dom::array messages;
  if (v->get_array().get(messages) != simdjson::SUCCESS) {
    return invalid(std::string("'messages' must be an array, got ") + kind_of(*v), "messages");
  }
  if (messages.size() == 0)
    return invalid("'messages' must contain at least one message", "messages");
  size_t i = 0;
  for (element m : messages) {
    auto where = [i] { return "messages[" + std::to_string(i) + "]"; };  // built on errors only
    ++i;
    simdjson::dom::object msg;
    if (m.get_object().get(msg) != simdjson::SUCCESS) {
      return invalid("'" + where() + "' must be an object, got " + kind_of(m), where());
    }
    // One walk over the message; the first occurrence of a key counts, as with at_key().
    std::optional<element> r, content;
    bool seen_role = false, seen_content = false;
    for (auto [key, value] : msg) {
      if (!seen_role && adapters::key_is(key, "role")) {
        seen_role = true;
        if (!value.is_null()) r = value;
      } else if (!seen_content && adapters::key_is(key, "content")) {
        seen_content = true;
        if (!value.is_null()) content = value;
      }
    }
    std::string_view role;
    if (!r || r->get_string().get(role) != simdjson::SUCCESS) {
      return invalid("'" + where() + ".role' is required and must be a string", where() + ".role");
    }
    using adapters::key_is;
    if (!key_is(role, "system") && !key_is(role, "user") && !key_is(role, "assistant") &&
        !key_is(role, "tool") && !key_is(role, "developer") && !key_is(role, "function")) {
      return invalid("'" + where() +
                         ".role' must be one of system, developer, user, assistant, "
                         "tool, function; got '" +
                         std::string(role) + "'",
                     where() + ".role");
    }
    if (content && !content->is_string() && !content->is_array()) {
      return invalid("'" + where() + ".content' must be a string or an array of parts, got " +
                         kind_of(*content),
                     where() + ".content");
    }
  }
  return std::nullopt;
}

Error bad_token_id(const element& t) {
  return invalid("'prompt' token ids must be integers between 0 and " +
                     std::to_string(kMaxTokenId) + ", got " + simdjson::to_string(t),
                 "prompt");
}

std::optional<Error> check_prompt(const std::optional<element>& v) {
  if (!v) return invalid("'prompt' is required", "prompt");
  if (v->is_string()) return std::nullopt;
  bool ok = v->is_array();
  if (ok) {
    simdjson::dom::array prompts = v->get_array().value_unsafe();
    for (element p : prompts) {
      if (p.is_string() || is_integer(p)) continue;
      if (!p.is_array()) {
        ok = false;
        break;
      }
      simdjson::dom::array tokens = p.get_array().value_unsafe();
      for (element t : tokens) ok = ok && is_integer(t);
    }
  }
  if (!ok) {
    return invalid("'prompt' must be a string, an array of strings, or token arrays", "prompt");
  }
  // Token ids must be ids: 4294967301 is not token 5.
  simdjson::dom::array prompts = v->get_array().value_unsafe();
  for (element p : prompts) {
    if (p.is_string()) continue;
    if (p.is_array()) {
      simdjson::dom::array tokens = p.get_array().value_unsafe();
      for (element t : tokens) {
        if (!is_token_id(t)) return bad_token_id(t);
      }
    } else if (!is_token_id(p)) {
      return bad_token_id(p);
    }
  }
  return std::nullopt;
}

}  // namespace

Result<ParsedRequest> parse_request(adapters::Endpoint endpoint, std::string body) {
  // One parser per thread: its buffers are reused across requests, so parsing allocates
  // nothing in the steady state. Elements point into it and never outlive this call.
  thread_local simdjson::dom::parser parser;
  ParsedRequest out;
  out.endpoint = endpoint;
  out.raw = std::move(body);
  element doc;
  auto err = parser.parse(out.raw.data(), out.raw.size(), /*realloc_if_needed=*/true).get(doc);
  if (err != simdjson::SUCCESS) {
    if (err == simdjson::UTF8_ERROR) {
      return Error::make(ErrorCode::kInvalidRequest, "the request body is not valid UTF-8", "",
                         "invalid_json");
    }
    return Error::make(
        ErrorCode::kInvalidRequest,
        std::string("the request body is not valid JSON: ") + simdjson::error_message(err), "",
        "invalid_json");
  }
  simdjson::dom::object b;
  if (doc.get_object().get(b) != simdjson::SUCCESS) {
    return invalid(std::string("the request body must be a JSON object, got ") + kind_of(doc), "");
  }
  const Members f(b);
  if (!f.duplicate().empty()) {
    std::string key(f.duplicate());
    return invalid("'" + key + "' appears more than once in the request body", key);
  }
  auto model = f[kModel];
  if (!model) return invalid("'model' is required", "model");
  std::string_view model_name;
  if (model->get_string().get(model_name) != simdjson::SUCCESS) {
    return invalid(std::string("'model' must be a string, got ") + kind_of(*model), "model");
  }
  out.model = std::string(model_name);
  out.model_keys = f.model_keys();

  if (auto e = endpoint == adapters::Endpoint::kChatCompletions ? check_messages(f[kMessages])
                                                                : check_prompt(f[kPrompt])) {
    return *e;
  }
  if (auto e = check_type(f[kStream], "stream", element_type::BOOL, "a boolean")) return *e;
  if (auto st = f[kStream]) out.stream = st->get_bool().value_unsafe();
  if (auto so = f[kStreamOptions]) {
    simdjson::dom::object options;
    if (so->get_object().get(options) != simdjson::SUCCESS) {
      return invalid(std::string("'stream_options' must be an object, got ") + kind_of(*so),
                     "stream_options");
    }
    if (auto iu = field(options, "include_usage")) {
      if (!iu->is_bool()) {
        return invalid("'stream_options.include_usage' must be a boolean",
                       "stream_options.include_usage");
      }
      out.include_usage = iu->get_bool().value_unsafe();
    }
  }
  int64_t max_tokens = -1;
  if (auto e = check_integer(f[kMaxTokens], "max_tokens", 1, kMaxTokensLimit, &max_tokens)) {
    return *e;
  }
  if (auto e = check_integer(f[kMaxCompletionTokens], "max_completion_tokens", 1, kMaxTokensLimit,
                             &max_tokens)) {
    return *e;
  }
  out.max_tokens = max_tokens;
  if (auto e = check_integer(f[kN], "n", 1, kMaxChoices, &out.n)) return *e;
  if (auto e = check_integer(f[kSeed], "seed", INT64_MIN, INT64_MAX, nullptr)) return *e;
  if (endpoint == adapters::Endpoint::kChatCompletions) {
    if (auto e = check_type(f[kLogprobs], "logprobs", element_type::BOOL, "a boolean")) return *e;
    if (auto e = check_integer(f[kTopLogprobs], "top_logprobs", 0, 20, nullptr)) return *e;
  } else {
    if (auto e = check_integer(f[kLogprobs], "logprobs", 0, 5, nullptr)) return *e;
  }
  if (auto e = check_logit_bias(f[kLogitBias])) return *e;
  if (auto e = check_number(f[kTemperature], "temperature", 0, 2)) return *e;
  if (auto e = check_number(f[kTopP], "top_p", 0, 1)) return *e;
  if (auto t = f[kTemperature]) out.temperature = t->get_double().value_unsafe();
  if (auto t = f[kTopP]) out.top_p = t->get_double().value_unsafe();
  if (auto e = check_number(f[kPresencePenalty], "presence_penalty", -2, 2)) return *e;
  if (auto e = check_number(f[kFrequencyPenalty], "frequency_penalty", -2, 2)) return *e;
  if (auto e = check_type(f[kTools], "tools", element_type::ARRAY, "an array")) return *e;
  if (auto e =
          check_type(f[kResponseFormat], "response_format", element_type::OBJECT, "an object")) {
    return *e;
  }
  if (auto e = check_type(f[kMetadata], "metadata", element_type::OBJECT, "an object")) return *e;
  if (auto e = check_type(f[kFunctions], "functions", element_type::ARRAY, "an array")) return *e;
  out.tools = f[kTools].has_value() || f[kFunctions].has_value();
  out.response_format = f[kResponseFormat].has_value();
  if (auto md = f[kMetadata]) {
    simdjson::dom::object meta = md->get_object().value_unsafe();
    std::string_view text;
    if (auto task = field(meta, "task_id")) {
      if (task->get_string().get(text) != simdjson::SUCCESS || text.size() > 256) {
        return invalid("'metadata.task_id' must be a string of at most 256 bytes",
                       "metadata.task_id");
      }
      out.task_id = std::string(text);
    }
    if (auto tags = field(meta, "tags")) {
      if (tags->get_string().get(text) != simdjson::SUCCESS) {
        return invalid("'metadata.tags' must be a string of comma-separated tags", "metadata.tags");
      }
      out.claimed_tags = split_tags(text);
    }
  }
  if (auto stop = f[kStop]) {
    bool ok = stop->is_string();
    if (!ok && stop->is_array()) {
      ok = true;
      simdjson::dom::array stops = stop->get_array().value_unsafe();
      for (element s : stops) ok = ok && s.is_string();
    }
    if (!ok) return invalid("'stop' must be a string or an array of strings", "stop");
  }
  return out;
}

namespace {

size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return i;
}

// One past the end of the JSON value starting at `i` (the text is known to be valid JSON);
// npos when it is cut short.
size_t value_end(std::string_view s, size_t i) {
  if (s[i] == '{' || s[i] == '[') return adapters::json_value_end(s, i);
  if (s[i] == '"') return adapters::json_string_end(s, i);
  size_t j = i;
  while (j < s.size() && s[j] != ',' && s[j] != '}' && s[j] != ']' && s[j] != ' ' && s[j] != '\n' &&
         s[j] != '\r' && s[j] != '\t') {
    ++j;
  }
  return j;
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
// With `model_only`, stops at the body's `model_keys`-th `model` key, leaving the other spans
// and `close` unset: parse_request counted every key that decodes to "model", so no later key
// is written "model".
bool top_level_spans(std::string_view s, int model_keys, bool model_only, Spans& spans,
                     size_t& close) {
  int models_seen = 0;
  size_t i = skip_ws(s, 0);
  if (i >= s.size() || s[i] != '{') return false;
  i = skip_ws(s, i + 1);
  while (i < s.size() && s[i] != '}') {
    if (s[i] != '"') return false;
    size_t key_end = adapters::json_string_end(s, i);
    if (key_end == std::string_view::npos) return false;
    std::string_view key = s.substr(i + 1, key_end - i - 2);
    i = skip_ws(s, key_end);
    if (i >= s.size() || s[i] != ':') return false;
    i = skip_ws(s, i + 1);
    if (i >= s.size()) return false;
    size_t end = value_end(s, i);
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
    i = skip_ws(s, end);
    if (i < s.size() && s[i] == ',') i = skip_ws(s, i + 1);
  }
  if (i >= s.size()) return false;
  close = i;
  return spans.model.found();
}

// Appends `text` as a JSON string. Printable ASCII without quotes or backslashes (every model
// name in practice) is copied between quotes; anything else is escaped by nlohmann's dump.
void append_json_string(std::string& out, std::string_view text) {
  bool plain = std::all_of(text.begin(), text.end(),
                           [](char c) { return c >= 0x20 && c <= 0x7e && c != '"' && c != '\\'; });
  if (!plain) {
    out += json(std::string(text)).dump();
    return;
  }
  out += '"';
  out.append(text);
  out += '"';
}

// One change to the client's text: [begin, end) replaced by prefix + text.
struct Edit {
  size_t begin = 0;
  size_t end = 0;
  std::string_view prefix;  // `,"key":` when the member is added before the closing brace
  std::string_view text;
  bool as_string = false;  // text is written as a JSON string
};

}  // namespace

std::vector<std::string> split_tags(std::string_view text) {
  std::vector<std::string> tags;
  while (!text.empty() && tags.size() < 32) {
    size_t comma = text.find(',');
    std::string_view tag = text.substr(0, comma);
    while (!tag.empty() && (tag.front() == ' ' || tag.front() == '\t')) tag.remove_prefix(1);
    while (!tag.empty() && (tag.back() == ' ' || tag.back() == '\t')) tag.remove_suffix(1);
    if (!tag.empty() && tag.size() <= 64 &&
        std::find(tags.begin(), tags.end(), tag) == tags.end()) {
      tags.emplace_back(tag);
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return tags;
}

std::string upstream_body(const ParsedRequest& request, const std::string& upstream_model,
                          const BodyOverrides& overrides) {
  std::string_view raw = request.raw;
  Spans spans;
  size_t close = 0;
  // Without a stream or overrides, only the model is rewritten: the scan may stop early.
  bool model_only = !request.stream && !overrides.any();
  if (top_level_spans(raw, request.model_keys, model_only, spans, close)) {
    // At most one edit per rewritten key, plus max_tokens written under both of its names.
    std::array<Edit, 6> edits;
    size_t n_edits = 0;
    edits[n_edits++] = {spans.model.begin, spans.model.end, {}, upstream_model, true};
    std::string options_text;  // the texts the edits point to
    if (request.stream) {
      const Span& options = spans.stream_options;
      if (options.found()) {
        json opts = json::parse(raw.substr(options.begin, options.end - options.begin), nullptr,
                                /*allow_exceptions=*/false);
        if (!opts.is_object()) opts = json::object();
        opts["include_usage"] = true;
        options_text = opts.dump();
        edits[n_edits++] = {options.begin, options.end, {}, options_text};
      } else {
        edits[n_edits++] = {close, close, {}, ",\"stream_options\":{\"include_usage\":true}"};
      }
    }
    auto set_value = [&](const Span& span, std::string_view prefix, std::string_view text) {
      if (span.found()) {
        edits[n_edits++] = {span.begin, span.end, {}, text};
      } else {
        edits[n_edits++] = {close, close, prefix, text};
      }
    };
    std::string max_tokens_text, temperature_text, top_p_text;
    if (overrides.max_tokens) {
      max_tokens_text = std::to_string(*overrides.max_tokens);
      if (spans.max_completion_tokens.found()) {
        set_value(spans.max_completion_tokens, ",\"max_completion_tokens\":", max_tokens_text);
      }
      if (spans.max_tokens.found() || !spans.max_completion_tokens.found()) {
        set_value(spans.max_tokens, ",\"max_tokens\":", max_tokens_text);
      }
    }
    if (overrides.temperature) {
      temperature_text = json(*overrides.temperature).dump();
      set_value(spans.temperature, ",\"temperature\":", temperature_text);
    }
    if (overrides.top_p) {
      top_p_text = json(*overrides.top_p).dump();
      set_value(spans.top_p, ",\"top_p\":", top_p_text);
    }
    // Text order; edits at the same place (additions before the brace) keep their order.
    for (size_t k = 1; k < n_edits; ++k) {
      for (size_t j = k; j > 0 && edits[j - 1].begin > edits[j].begin; --j) {
        std::swap(edits[j - 1], edits[j]);
      }
    }
    size_t out_size = raw.size();
    for (size_t k = 0; k < n_edits; ++k) {
      const Edit& e = edits[k];
      out_size += e.prefix.size() + e.text.size() + (e.as_string ? 2 : 0) - (e.end - e.begin);
    }
    std::string out;
    out.reserve(out_size);
    size_t at = 0;
    for (size_t k = 0; k < n_edits; ++k) {
      const Edit& e = edits[k];
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
  // Unreachable for a body that parse_request accepted; kept as a safe fallback.
  json body = json::parse(raw, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return request.raw;
  body["model"] = upstream_model;
  if (request.stream) body["stream_options"]["include_usage"] = true;
  if (overrides.max_tokens) body["max_tokens"] = *overrides.max_tokens;
  if (overrides.temperature) body["temperature"] = *overrides.temperature;
  if (overrides.top_p) body["top_p"] = *overrides.top_p;
  return body.dump(-1, ' ', false, json::error_handler_t::strict);
}

}  // namespace ferry::gateway
