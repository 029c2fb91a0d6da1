#include "api/openai_parse.h"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <utility>

#include "api/dom_value.h"
#include "common/json_text.h"

namespace ferry::api {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

thread_local uint64_t g_parses = 0;

Error invalid(std::string message, std::string param) {
  return Error::make(ErrorCode::kInvalidRequest, std::move(message), std::move(param),
                     "invalid_value");
}

// ============================================================================================
// Values
// ============================================================================================

// Adds key: value to `extra` (an object, made on first use).
void keep(Json& extra, std::string_view key, const element& value) {
  if (extra.is_null()) extra = Json::object();
  extra[std::string(key)] = to_json(value);
}

// The field's value, or nullopt when it is absent or null (both mean "not given").
std::optional<element> field(const simdjson::dom::object& obj, std::string_view key) {
  element v;
  if (obj.at_key(key).get(v) != simdjson::SUCCESS || v.is_null()) return std::nullopt;
  return v;
}

std::string number_text(double v) {
  return Json(v).dump();
}

// A number in [min, max] into `out`.
std::optional<Error> check_number(const std::optional<element>& v, const char* key, double min,
                                  double max, std::optional<double>* out) {
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
  if (out != nullptr) *out = d;
  return std::nullopt;
}

// An integer in [min, max]: never a float (1e300, 2.0), a string ("1") or a value beyond int64.
std::optional<Error> check_integer(const std::optional<element>& v, const char* key, int64_t min,
                                   int64_t max, std::optional<int64_t>* out) {
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

std::optional<Error> check_type(const std::optional<element>& v, const char* key, element_type type,
                                const char* expected) {
  if (v && v->type() != type) {
    return invalid(std::string("'") + key + "' must be " + expected + ", got " + kind_of(*v), key);
  }
  return std::nullopt;
}

// A token id as a JSON integer: 0..kMaxTokenId.
bool is_token_id(const element& v) {
  int64_t id = 0;
  return v.type() != element_type::DOUBLE && v.get_int64().get(id) == simdjson::SUCCESS &&
         id >= 0 && id <= kMaxTokenId;
}

int32_t token_of(const element& v) {
  return static_cast<int32_t>(v.get_int64().value_unsafe());
}

// ============================================================================================
// The top-level members
// ============================================================================================

// The top-level members parse_openai reads.
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
  kToolChoice,
  kParallelToolCalls,
  kResponseFormat,
  kLogitBias,
  kMetadata,
  kUser,
  kFunctions,
  kStop,
  kLogprobs,
  kTopLogprobs,
  kEcho,
  kBestOf,
  kMinP,
  kTopK,
  kRepetitionPenalty,
  kIgnoreEos,
  kMemberCount,
  kOther = kMemberCount
};

Member member_of(std::string_view key) {
  switch (key.size()) {
    case 1:
      return key_is(key, "n") ? kN : kOther;
    case 4:
      return key_is(key, "seed")   ? kSeed
             : key_is(key, "stop") ? kStop
             : key_is(key, "user") ? kUser
             : key_is(key, "echo") ? kEcho
                                   : kOther;
    case 5:
      return key_is(key, "model")   ? kModel
             : key_is(key, "top_p") ? kTopP
             : key_is(key, "tools") ? kTools
             : key_is(key, "min_p") ? kMinP
             : key_is(key, "top_k") ? kTopK
                                    : kOther;
    case 6:
      return key_is(key, "prompt") ? kPrompt : key_is(key, "stream") ? kStream : kOther;
    case 7:
      return key_is(key, "best_of") ? kBestOf : kOther;
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
             : key_is(key, "ignore_eos") ? kIgnoreEos
                                         : kOther;
    case 11:
      return key_is(key, "temperature")   ? kTemperature
             : key_is(key, "tool_choice") ? kToolChoice
                                          : kOther;
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
    case 18:
      return key_is(key, "repetition_penalty") ? kRepetitionPenalty : kOther;
    case 19:
      return key_is(key, "parallel_tool_calls") ? kParallelToolCalls : kOther;
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
// the other ("max_tokens":5,"max_tokens":100000). Other keys are kept in `extra`.
class Members {
 public:
  Members(const simdjson::dom::object& body, Json& extra) {
    for (auto [key, value] : body) {
      Member m = member_of(key);
      if (m == kModel) ++model_keys_;
      if (m == kOther) {
        keep(extra, key, value);
        continue;
      }
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

// ============================================================================================
// Messages
// ============================================================================================

// Content parts typed when each is an object with a string `type` (and text parts a string
// `text`); false when some part is not (the caller keeps the content as sent).
bool typed_parts(const simdjson::dom::array& parts, std::vector<ContentPart>& out) {
  for (element p : parts) {
    simdjson::dom::object part;
    if (p.get_object().get(part) != simdjson::SUCCESS) return false;
    ContentPart typed;
    bool has_type = false, has_text = false;
    for (auto [key, value] : part) {
      if (key_is(key, "type")) {
        if (has_type || !value.is_string()) return false;
        typed.type = std::string(string_of(value));
        has_type = true;
      } else if (key_is(key, "text")) {
        if (has_text || !value.is_string()) return false;
        typed.text = std::string(string_of(value));
        has_text = true;
      } else {
        keep(typed.extra, key, value);
      }
    }
    if (!has_type) return false;
    if (has_text && typed.type != "text") return false;  // text on another kind: keep as sent
    if (typed.type == "text" && !has_text) return false;
    out.push_back(std::move(typed));
  }
  return true;
}

// tool_calls typed when each is {"id": s, "type": s, "function": {"name": s, "arguments": s}}
// (other members of the call kept); false otherwise.
bool typed_tool_calls(const simdjson::dom::array& calls, std::vector<ToolCall>& out) {
  for (element c : calls) {
    simdjson::dom::object call;
    if (c.get_object().get(call) != simdjson::SUCCESS) return false;
    ToolCall typed;
    int known = 0;
    for (auto [key, value] : call) {
      if (key_is(key, "id") && value.is_string()) {
        typed.id = std::string(string_of(value));
        ++known;
      } else if (key_is(key, "type") && value.is_string()) {
        typed.type = std::string(string_of(value));
        ++known;
      } else if (key_is(key, "function") && value.is_object()) {
        simdjson::dom::object fn = value.get_object().value_unsafe();
        if (fn.size() != 2) return false;
        auto name = field(fn, "name"), arguments = field(fn, "arguments");
        if (!name || !name->is_string() || !arguments || !arguments->is_string()) return false;
        typed.name = std::string(string_of(*name));
        typed.arguments = std::string(string_of(*arguments));
        ++known;
      } else {
        keep(typed.extra, key, value);
      }
    }
    if (known != 3) return false;
    out.push_back(std::move(typed));
  }
  return true;
}

// A message's content: text, or parts (kept as sent when some part is not typed); false when
// it is neither a string nor an array.
bool typed_content(const element& content, Message& out) {
  if (content.is_string()) {
    out.content.form = Content::Form::kText;
    out.content.text = std::string(string_of(content));
  } else if (!content.is_array()) {
    return false;
  } else if (typed_parts(array_of(content), out.content.parts)) {
    out.content.form = Content::Form::kParts;
  } else {
    out.content.parts.clear();
    keep(out.extra, "content", content);
  }
  return true;
}

// One message: role and content checked (errors name the index), the rest typed where it has
// its documented shape and kept as sent where not. The first occurrence of a key counts.
std::optional<Error> parse_message(const element& m, size_t index, Message& out) {
  auto where = [index] { return "messages[" + std::to_string(index) + "]"; };  // on errors only
  simdjson::dom::object msg;
  if (m.get_object().get(msg) != simdjson::SUCCESS) {
    return invalid("'" + where() + "' must be an object, got " + kind_of(m), where());
  }
  std::optional<element> r, content, name, calls, call_id;
  bool seen_role = false, seen_content = false, seen_name = false, seen_calls = false,
       seen_call_id = false;
  // The first occurrence of a key counts: typed when it has the shape, else kept as sent.
  auto typed_or_kept = [&](std::string_view key, const element& value, bool fits,
                           std::optional<element>& slot) {
    if (fits) {
      slot = value;
    } else {
      keep(out.extra, key, value);
    }
  };
  for (auto [key, value] : msg) {
    if (!seen_role && key_is(key, "role")) {
      seen_role = true;
      if (!value.is_null()) r = value;
    } else if (!seen_content && key_is(key, "content")) {
      seen_content = true;
      if (value.is_null()) keep(out.extra, key, value);
      content = value;
    } else if (key_is(key, "name")) {
      if (!std::exchange(seen_name, true)) typed_or_kept(key, value, value.is_string(), name);
    } else if (key_is(key, "tool_calls")) {
      if (!std::exchange(seen_calls, true)) typed_or_kept(key, value, value.is_array(), calls);
    } else if (key_is(key, "tool_call_id")) {
      if (!std::exchange(seen_call_id, true)) {
        typed_or_kept(key, value, value.is_string(), call_id);
      }
    } else if (!key_is(key, "role") && !key_is(key, "content")) {
      keep(out.extra, key, value);
    }
  }
  std::string_view role;
  if (!r || r->get_string().get(role) != simdjson::SUCCESS) {
    return invalid("'" + where() + ".role' is required and must be a string", where() + ".role");
  }
  std::optional<Role> typed_role = role_from_name(role);
  if (!typed_role) {
    return invalid("'" + where() +
                       ".role' must be one of system, developer, user, assistant, "
                       "tool, function; got '" +
                       std::string(role) + "'",
                   where() + ".role");
  }
  out.role = *typed_role;
  if (content && !content->is_null() && !typed_content(*content, out)) {
    return invalid(
        "'" + where() + ".content' must be a string or an array of parts, got " + kind_of(*content),
        where() + ".content");
  }
  if (name) out.name = std::string(string_of(*name));
  if (call_id) out.tool_call_id = std::string(string_of(*call_id));
  if (calls) {
    std::vector<ToolCall> typed;
    if (typed_tool_calls(array_of(*calls), typed)) {
      out.tool_calls = std::move(typed);
    } else {
      keep(out.extra, "tool_calls", *calls);
    }
  }
  return std::nullopt;
}

std::optional<Error> parse_messages(const std::optional<element>& v, std::vector<Message>& out) {
  if (!v) return invalid("'messages' is required", "messages");
  simdjson::dom::array messages;
  if (v->get_array().get(messages) != simdjson::SUCCESS) {
    return invalid(std::string("'messages' must be an array, got ") + kind_of(*v), "messages");
  }
  if (messages.size() == 0)
    return invalid("'messages' must contain at least one message", "messages");
  out.reserve(messages.size());
  size_t i = 0;
  for (element m : messages) {
    out.emplace_back();
    if (auto e = parse_message(m, i++, out.back())) return e;
  }
  return std::nullopt;
}

// ============================================================================================
// The completions prompt
// ============================================================================================

Error bad_token_id(const element& t) {
  return invalid("'prompt' token ids must be integers between 0 and " +
                     std::to_string(kMaxTokenId) + ", got " + simdjson::to_string(t),
                 "prompt");
}

std::optional<Error> parse_prompt(const std::optional<element>& v, Prompt& out) {
  if (!v) return invalid("'prompt' is required", "prompt");
  if (v->is_string()) {
    out.items.push_back({PromptItem::Kind::kText, std::string(string_of(*v)), {}});
    return std::nullopt;
  }
  bool ok = v->is_array();
  if (ok) {
    for (element p : array_of(*v)) {
      if (p.is_string() || is_integer(p)) continue;
      if (!p.is_array()) {
        ok = false;
        break;
      }
      for (element t : array_of(p)) ok = ok && is_integer(t);
    }
  }
  if (!ok) {
    return invalid("'prompt' must be a string, an array of strings, or token arrays", "prompt");
  }
  // Token ids must be ids: 4294967301 is not token 5.
  out.array = true;
  for (element p : array_of(*v)) {
    PromptItem item;
    if (p.is_string()) {
      item.text = std::string(string_of(p));
    } else if (p.is_array()) {
      item.kind = PromptItem::Kind::kTokenIds;
      for (element t : array_of(p)) {
        if (!is_token_id(t)) return bad_token_id(t);
        item.tokens.push_back(token_of(t));
      }
    } else {
      if (!is_token_id(p)) return bad_token_id(p);
      item.kind = PromptItem::Kind::kTokenId;
      item.tokens.push_back(token_of(p));
    }
    out.items.push_back(std::move(item));
  }
  return std::nullopt;
}

// ============================================================================================
// Tools and constraints (typed where they have OpenAI's shape, kept as sent where not)
// ============================================================================================

// A tool's `function`: a string name, and description, parameters and strict when they have
// their types (each once).
bool typed_function(const element& v, Tool& out) {
  bool has_name = false, has_description = false, has_parameters = false, has_strict = false;
  for (auto [key, value] : object_of(v)) {
    if (key_is(key, "name")) {
      if (has_name || !value.is_string()) return false;
      out.name = std::string(string_of(value));
      has_name = true;
    } else if (key_is(key, "description")) {
      if (has_description || !value.is_string()) return false;
      out.description = std::string(string_of(value));
      has_description = true;
    } else if (key_is(key, "parameters")) {
      if (has_parameters || !value.is_object()) return false;
      append_dom_json(out.parameters, value);
      has_parameters = true;
    } else if (key_is(key, "strict")) {
      if (has_strict || !value.is_bool()) return false;
      out.strict = value.get_bool().value_unsafe();
      has_strict = true;
    } else {
      keep(out.function_extra, key, value);
    }
  }
  return has_name;
}

bool typed_tool(const element& t, Tool& out) {
  simdjson::dom::object tool;
  if (t.get_object().get(tool) != simdjson::SUCCESS) return false;
  bool function_seen = false, type_seen = false;
  for (auto [key, value] : tool) {
    if (key_is(key, "type")) {
      if (type_seen || !value.is_string() || !key_is(string_of(value), "function")) return false;
      type_seen = true;
    } else if (key_is(key, "function")) {
      if (function_seen || !value.is_object() || !typed_function(value, out)) return false;
      function_seen = true;
    } else {
      keep(out.extra, key, value);
    }
  }
  return type_seen && function_seen;
}

void parse_tools(const element& v, ChatRequest& out) {
  std::vector<Tool> tools;
  for (element t : array_of(v)) {
    tools.emplace_back();
    if (!typed_tool(t, tools.back())) {
      keep(out.extra, "tools", v);
      return;
    }
  }
  out.tools = std::move(tools);
}

void parse_tool_choice(const element& v, ChatRequest& out) {
  if (v.is_string()) {
    std::string_view s = string_of(v);
    using Mode = ToolChoice::Mode;
    if (key_is(s, "auto")) return void(out.tool_choice = ToolChoice{Mode::kAuto, {}});
    if (key_is(s, "none")) return void(out.tool_choice = ToolChoice{Mode::kNone, {}});
    if (key_is(s, "required")) return void(out.tool_choice = ToolChoice{Mode::kRequired, {}});
  } else if (v.is_object()) {
    simdjson::dom::object choice = v.get_object().value_unsafe();
    auto type = field(choice, "type"), fn = field(choice, "function");
    if (choice.size() == 2 && type && type->is_string() && key_is(string_of(*type), "function") &&
        fn && fn->is_object() && object_of(*fn).size() == 1) {
      auto name = field(object_of(*fn), "name");
      if (name && name->is_string()) {
        out.tool_choice = ToolChoice{ToolChoice::Mode::kFunction, std::string(string_of(*name))};
        return;
      }
    }
  }
  keep(out.extra, "tool_choice", v);
}

void parse_response_format(const element& v, ChatRequest& out) {
  ResponseFormat format;
  bool has_type = false, has_schema = false, fits = true;
  for (auto [key, value] : object_of(v)) {
    if (key_is(key, "type")) {
      fits = fits && !has_type && value.is_string();
      if (fits) format.type = std::string(string_of(value));
      has_type = true;
    } else if (key_is(key, "json_schema")) {
      fits = fits && !has_schema && !value.is_null();
      if (fits) format.json_schema = to_json(value);
      has_schema = true;
    } else {
      keep(format.extra, key, value);
    }
  }
  if (!has_type || !fits) return keep(out.extra, "response_format", v);
  out.response_format = std::move(format);
}

// ============================================================================================
// Parameters
// ============================================================================================

// logit_bias: {"<token id>": bias in [-100, 100]}, keys decimal token ids (OpenAI's rules).
std::optional<Error> parse_logit_bias(const std::optional<element>& v, Sampling& out) {
  if (!v) return std::nullopt;
  simdjson::dom::object bias;
  if (v->get_object().get(bias) != simdjson::SUCCESS) {
    return invalid(std::string("'logit_bias' must be an object, got ") + kind_of(*v), "logit_bias");
  }
  out.logit_bias.emplace();
  for (auto [key, value] : bias) {
    std::optional<int64_t> id = parse_token_id_key(key);
    if (!id) {
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
    out.logit_bias->emplace_back(static_cast<int32_t>(*id), d);
  }
  return std::nullopt;
}

std::optional<Error> parse_stop(const std::optional<element>& v, Sampling& out) {
  if (!v) return std::nullopt;
  auto bad = [] { return invalid("'stop' must be a string or an array of strings", "stop"); };
  std::vector<std::string> stops;
  if (v->is_string()) {
    stops.emplace_back(string_of(*v));
  } else if (v->is_array()) {
    out.stop_is_array = true;
    for (element s : array_of(*v)) {
      if (!s.is_string()) return bad();
      stops.emplace_back(string_of(s));
    }
  } else {
    return bad();
  }
  out.stop = std::move(stops);
  return std::nullopt;
}

std::optional<Error> parse_stream(const Members& f, ChatRequest& out) {
  if (auto e = check_type(f[kStream], "stream", element_type::BOOL, "a boolean")) return e;
  if (auto st = f[kStream]) out.stream = st->get_bool().value_unsafe();
  auto so = f[kStreamOptions];
  if (!so) return std::nullopt;
  simdjson::dom::object options;
  if (so->get_object().get(options) != simdjson::SUCCESS) {
    return invalid(std::string("'stream_options' must be an object, got ") + kind_of(*so),
                   "stream_options");
  }
  StreamOptions typed;
  bool seen_usage = false;
  for (auto [key, value] : options) {
    if (key_is(key, "include_usage")) {
      if (std::exchange(seen_usage, true) || value.is_null()) continue;  // the first counts
      if (!value.is_bool()) {
        return invalid("'stream_options.include_usage' must be a boolean",
                       "stream_options.include_usage");
      }
      typed.include_usage = value.get_bool().value_unsafe();
    } else {
      keep(typed.extra, key, value);
    }
  }
  out.stream_options = std::move(typed);
  return std::nullopt;
}

std::optional<Error> parse_logprobs(const Members& f, Endpoint endpoint, Logprobs& out) {
  if (endpoint == Endpoint::kChatCompletions) {
    if (auto e = check_type(f[kLogprobs], "logprobs", element_type::BOOL, "a boolean")) return e;
    if (auto lp = f[kLogprobs]) out.logprobs = lp->get_bool().value_unsafe();
    return check_integer(f[kTopLogprobs], "top_logprobs", 0, 20, &out.top_logprobs);
  }
  if (auto e = check_integer(f[kLogprobs], "logprobs", 0, 5, &out.top_logprobs)) return e;
  if (out.top_logprobs) out.logprobs = true;
  return std::nullopt;
}

std::optional<Error> parse_metadata(const Members& f, Metadata& out) {
  auto md = f[kMetadata];
  if (!md) return std::nullopt;
  simdjson::dom::object meta = md->get_object().value_unsafe();
  out.metadata = to_json(*md);
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
    out.tags = split_tags(text);
  }
  return std::nullopt;
}

// Members HTTP backends receive unchecked (extensions, OpenAI's completions-only options): typed
// for the local engine; a problem becomes ChatRequest::extension_error (the first one found)
// and the value is kept as sent.
void parse_extensions(const Members& f, ChatRequest& out) {
  Sampling& s = out.sampling;
  std::optional<Error>& first = out.extension_error;
  auto note = [&](std::optional<Error> e, Member m, const char* key) {
    if (!e) return;
    keep(out.extra, key, *f[m]);
    if (!first) first = std::move(e);
  };
  note(check_number(f[kMinP], "min_p", 0, 1, &s.min_p), kMinP, "min_p");
  note(check_integer(f[kTopK], "top_k", INT64_MIN, INT64_MAX, &s.top_k), kTopK, "top_k");
  note(check_number(f[kRepetitionPenalty], "repetition_penalty", 0.01, 10, &s.repetition_penalty),
       kRepetitionPenalty, "repetition_penalty");
  note(check_type(f[kIgnoreEos], "ignore_eos", element_type::BOOL, "a boolean"), kIgnoreEos,
       "ignore_eos");
  if (auto v = f[kIgnoreEos]; v && v->is_bool()) s.ignore_eos = v->get_bool().value_unsafe();
  if (!first && out.logprobs.top_logprobs && out.chat() && !out.logprobs.logprobs.value_or(false)) {
    first = invalid("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  }
  if (auto echo = f[kEcho]; echo && echo->is_bool()) {
    out.limits.echo = echo->get_bool().value_unsafe();
  } else if (echo) {
    keep(out.extra, "echo", *echo);
  }
  if (auto best_of = f[kBestOf]; best_of && is_number(*best_of)) {
    out.limits.best_of = best_of->get_double().value_unsafe();
  } else if (best_of) {
    keep(out.extra, "best_of", *best_of);
  }
  // Members of the other endpoint: not read here, kept as sent.
  const bool chat = out.chat();
  if (auto v = f[chat ? kPrompt : kMessages]) keep(out.extra, chat ? "prompt" : "messages", *v);
  if (auto v = f[kTopLogprobs]; v && !chat) keep(out.extra, "top_logprobs", *v);
}

// Sampling and limits, in the order their errors are reported.
std::optional<Error> parse_parameters(const Members& f, const ParseOptions& options,
                                      ChatRequest& out) {
  Limits& l = out.limits;
  Sampling& s = out.sampling;
  if (auto e =
          check_integer(f[kMaxTokens], "max_tokens", 1, options.max_tokens_limit, &l.max_tokens)) {
    return e;
  }
  if (auto e = check_integer(f[kMaxCompletionTokens], "max_completion_tokens", 1,
                             options.max_tokens_limit, &l.max_completion_tokens)) {
    return e;
  }
  if (auto e = check_integer(f[kN], "n", 1, kMaxChoices, &l.n)) return e;
  if (auto e = check_integer(f[kSeed], "seed", INT64_MIN, INT64_MAX, &s.seed)) return e;
  if (auto e = parse_logprobs(f, out.endpoint, out.logprobs)) return e;
  if (auto e = parse_logit_bias(f[kLogitBias], s)) return e;
  if (auto e = check_number(f[kTemperature], "temperature", 0, 2, &s.temperature)) return e;
  if (auto e = check_number(f[kTopP], "top_p", 0, 1, &s.top_p)) return e;
  if (auto e = check_number(f[kPresencePenalty], "presence_penalty", -2, 2, &s.presence_penalty)) {
    return e;
  }
  if (auto e =
          check_number(f[kFrequencyPenalty], "frequency_penalty", -2, 2, &s.frequency_penalty)) {
    return e;
  }
  return std::nullopt;
}

// tools, tool_choice, response_format, metadata, functions, user, parallel_tool_calls.
std::optional<Error> parse_tools_and_metadata(const Members& f, ChatRequest& out) {
  if (auto e = check_type(f[kTools], "tools", element_type::ARRAY, "an array")) return e;
  if (auto e =
          check_type(f[kResponseFormat], "response_format", element_type::OBJECT, "an object")) {
    return e;
  }
  if (auto e = check_type(f[kMetadata], "metadata", element_type::OBJECT, "an object")) return e;
  if (auto e = check_type(f[kFunctions], "functions", element_type::ARRAY, "an array")) return e;
  out.tools_given = f[kTools].has_value();
  out.response_format_given = f[kResponseFormat].has_value();
  if (auto v = f[kTools]) parse_tools(*v, out);
  if (auto v = f[kFunctions]) out.functions = to_json(*v);
  if (auto v = f[kToolChoice]) parse_tool_choice(*v, out);
  if (auto v = f[kResponseFormat]) parse_response_format(*v, out);
  if (auto v = f[kUser]) {
    if (v->is_string()) {
      out.metadata.user = std::string(string_of(*v));
    } else {
      keep(out.extra, "user", *v);
    }
  }
  if (auto v = f[kParallelToolCalls]) {
    if (v->is_bool()) {
      out.parallel_tool_calls = v->get_bool().value_unsafe();
    } else {
      keep(out.extra, "parallel_tool_calls", *v);
    }
  }
  return parse_metadata(f, out.metadata);
}

}  // namespace

Status parse_openai_into(Endpoint endpoint, std::string_view body, ChatRequest& out,
                         const ParseOptions& options, int* model_keys) {
  ++g_parses;
  // One parser per thread: its buffers are reused across requests, so parsing allocates
  // nothing in the steady state. Elements point into it and never outlive this call.
  thread_local simdjson::dom::parser parser;
  element doc;
  static_assert(kJsonReadSlack >= simdjson::SIMDJSON_PADDING);
  const bool copy = options.readable_past_end < kJsonReadSlack;
  auto err = parser.parse(body.data(), body.size(), /*realloc_if_needed=*/copy).get(doc);
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
  out.endpoint = endpoint;
  const Members f(b, out.extra);
  if (!f.duplicate().empty()) {
    std::string key(f.duplicate());
    return invalid("'" + key + "' appears more than once in the request body", key);
  }
  auto model = f[kModel];
  if (!model) return invalid("'model' is required", "model");
  if (!model->is_string()) {
    return invalid(std::string("'model' must be a string, got ") + kind_of(*model), "model");
  }
  out.model = std::string(string_of(*model));
  if (model_keys != nullptr) *model_keys = f.model_keys();

  if (auto e = endpoint == Endpoint::kChatCompletions ? parse_messages(f[kMessages], out.messages)
                                                      : parse_prompt(f[kPrompt], out.prompt)) {
    return *e;
  }
  if (auto e = parse_stream(f, out)) return *e;
  if (auto e = parse_parameters(f, options, out)) return *e;
  if (auto e = parse_tools_and_metadata(f, out)) return *e;
  if (auto e = parse_stop(f[kStop], out.sampling)) return *e;
  parse_extensions(f, out);
  return {};
}

Result<ChatRequest> parse_openai(Endpoint endpoint, std::string_view body,
                                 const ParseOptions& options, int* model_keys) {
  ChatRequest out;
  if (Status s = parse_openai_into(endpoint, body, out, options, model_keys); !s) {
    return s.error();
  }
  return out;
}

uint64_t parses_on_this_thread() {
  return g_parses;
}

std::optional<int64_t> parse_token_id_key(std::string_view key) {
  if (key.empty() || key.size() > 10) return std::nullopt;
  int64_t id = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return std::nullopt;
    id = id * 10 + (c - '0');
  }
  if (id > INT32_MAX) return std::nullopt;
  return id;
}

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

}  // namespace ferry::api
