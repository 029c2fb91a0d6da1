#include "api/responses_parse.h"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <set>
#include <utility>

#include "api/dom_value.h"
#include "common/json_text.h"

namespace ferry::api {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

// ============================================================================================
// Values and OpenAI's errors (its words and codes, so clients that match on them keep working)
// ============================================================================================

Error fail(std::string message, std::string param, std::string code) {
  return Error::make(ErrorCode::kInvalidRequest, std::move(message), std::move(param),
                     std::move(code));
}

Error invalid_type(const std::string& param, const char* expected, const element& got) {
  return fail("Invalid type for '" + param + "': expected " + expected + ", but got " +
                  kind_of(got, "a decimal") + " instead.",
              param, "invalid_type");
}

Error unknown_parameter(const std::string& param) {
  return fail("Unknown parameter: '" + param + "'.", param, "unknown_parameter");
}

Error missing_parameter(const std::string& param) {
  return fail("Missing required parameter: '" + param + "'.", param, "missing_required_parameter");
}

Error invalid_value(const std::string& param, std::string_view got,
                    std::initializer_list<std::string_view> supported) {
  std::string list;
  for (std::string_view s : supported) list += (list.empty() ? "'" : ", '") + std::string(s) + "'";
  return fail("Invalid value: '" + std::string(got) + "'. Supported values are: " + list + ".",
              param, "invalid_value");
}

Error unsupported(const std::string& param, const std::string& why) {
  return fail("ferry does not support '" + param + "': " + why, param, "unsupported_parameter");
}

// What a backend that speaks Responses natively could take, but translation cannot.
Error native_only(const std::string& param, const std::string& what) {
  return fail(what + " ('" + param +
                  "') cannot be translated for a chat backend; only a backend that speaks the "
                  "Responses API natively takes it",
              param, "unsupported_value");
}

// Where a value lies in the body ("input[2].content[0]"): a chain of views on the callers'
// stacks, made into text only for an error (a request that parses makes none).
class Path {
 public:
  Path(const char* top) : key_(top) {}  // NOLINT: a top-level name reads as a path
  Path(const Path& parent, size_t index) : parent_(&parent), index_(index) {}
  Path(const Path& parent, std::string_view key) : parent_(&parent), key_(key), member_(true) {}
  bool empty() const { return parent_ == nullptr && key_.empty(); }
  std::string str() const {
    if (parent_ == nullptr) return std::string(key_);
    std::string s = parent_->str();
    if (member_) return s + "." + std::string(key_);
    return s + "[" + std::to_string(index_) + "]";
  }
  operator std::string() const { return str(); }  // NOLINT: errors take the text

 private:
  const Path* parent_ = nullptr;
  std::string_view key_;
  size_t index_ = 0;
  bool member_ = false;
};

std::string at(const Path& path, size_t index) {
  return Path(path, index).str();
}
std::string dot(const Path& path, std::string_view key) {
  return Path(path, key).str();
}

// The members of one object, each at most once, every one named in `known` (else
// unknown_parameter naming its path); null members count as absent.
template <size_t N>
class Fields {
 public:
  Fields(const simdjson::dom::object& obj, const std::array<std::string_view, N>& known,
         const Path& path)
      : known_(known), path_(path) {
    for (auto [key, value] : obj) {
      auto it = std::find(known_.begin(), known_.end(), key);
      if (it == known_.end()) {
        if (!error_) error_ = unknown_parameter(path_.empty() ? std::string(key) : dot(path_, key));
        continue;
      }
      size_t i = static_cast<size_t>(it - known_.begin());
      if (seen_[i]) {
        if (!error_) {
          error_ = fail("'" + name(key) + "' appears more than once", name(key), "invalid_value");
        }
        continue;
      }
      seen_[i] = true;
      present_keys_[present_] = *it;
      present_values_[present_++] = value;
    }
  }
  const std::optional<Error>& error() const { return error_; }
  std::string name(std::string_view key) const {
    return path_.empty() ? std::string(key) : dot(path_, key);
  }
  // The member's value, or nullopt when absent or null.
  // (Looked up among the members present, fewer than those known.)
  std::optional<element> operator[](std::string_view key) const {
    for (size_t i = 0; i < present_; ++i) {
      if (present_keys_[i] != key) continue;
      if (present_values_[i].is_null()) return std::nullopt;
      return present_values_[i];
    }
    return std::nullopt;
  }
  // A string member (nullopt when absent), or an error naming it.
  Result<std::optional<std::string_view>> string(std::string_view key) const {
    auto v = (*this)[key];
    if (!v) return std::optional<std::string_view>();
    if (!v->is_string()) return invalid_type(name(key), "a string", *v);
    return std::optional<std::string_view>(string_of(*v));
  }
  Result<std::string_view> required_string(std::string_view key) const {
    auto s = string(key);
    if (!s) return s.error();
    if (!*s) return missing_parameter(name(key));
    return **s;
  }
  Result<std::optional<bool>> boolean(std::string_view key) const {
    auto v = (*this)[key];
    if (!v) return std::optional<bool>();
    if (!v->is_bool()) return invalid_type(name(key), "a boolean", *v);
    return std::optional<bool>(v->get_bool().value_unsafe());
  }

 private:
  const std::array<std::string_view, N>& known_;
  Path path_;
  std::array<bool, N> seen_ = {};  // by index in known_
  // The members present (each known, once), in their order.
  std::array<std::string_view, N> present_keys_;
  std::array<element, N> present_values_;
  size_t present_ = 0;
  std::optional<Error> error_;
};

// The object at `path`, or an invalid_type error.
Result<simdjson::dom::object> object_at(const element& v, const Path& path) {
  if (!v.is_object()) return invalid_type(path, "an object", v);
  return object_of(v);
}

// A number in [min, max] (OpenAI's decimal_above_max_value / below_min).
std::optional<Error> check_decimal(const std::optional<element>& v, const std::string& key,
                                   double min, double max, std::optional<double>& out) {
  if (!v) return std::nullopt;
  if (v->type() != element_type::DOUBLE && v->type() != element_type::INT64 &&
      v->type() != element_type::UINT64) {
    return invalid_type(key, "a decimal", *v);
  }
  double d = v->get_double().value_unsafe();
  auto text = [](double x) { return Json(x).dump(); };
  if (d > max) {
    return fail("Invalid '" + key + "': decimal above maximum value. Expected a value <= " +
                    text(max) + ", but got " + text(d) + " instead.",
                key, "decimal_above_max_value");
  }
  if (d < min) {
    return fail("Invalid '" + key + "': decimal below minimum value. Expected a value >= " +
                    text(min) + ", but got " + text(d) + " instead.",
                key, "decimal_below_min_value");
  }
  out = d;
  return std::nullopt;
}

std::optional<Error> check_integer(const std::optional<element>& v, const std::string& key,
                                   int64_t min, int64_t max, std::optional<int64_t>& out) {
  if (!v) return std::nullopt;
  int64_t n = 0;
  if (v->type() == element_type::UINT64) {
    n = INT64_MAX;  // beyond int64: above any maximum here
  } else if (v->type() != element_type::INT64) {
    return invalid_type(key, "an integer", *v);
  } else {
    n = v->get_int64().value_unsafe();
  }
  if (n > max) {
    return fail("Invalid '" + key + "': integer above maximum value. Expected a value <= " +
                    std::to_string(max) + ", but got " + simdjson::to_string(*v) + " instead.",
                key, "integer_above_max_value");
  }
  if (n < min) {
    return fail("Invalid '" + key + "': integer below minimum value. Expected a value >= " +
                    std::to_string(min) + ", but got " + std::to_string(n) + " instead.",
                key, "integer_below_min_value");
  }
  out = n;
  return std::nullopt;
}

// The value's JSON text exactly as simdjson re-writes it (minified; numbers keep their
// digits for integers, and doubles print their shortest form).
std::string text_of(const element& v) {
  return simdjson::minify(v);
}

// ============================================================================================
// Input items
// ============================================================================================

// Item types that belong to OpenAI's built-in tools: only a native backend takes them.
constexpr std::array<std::string_view, 20> kBuiltinItemTypes = {"file_search_call",
                                                                "computer_call",
                                                                "computer_call_output",
                                                                "web_search_call",
                                                                "image_generation_call",
                                                                "code_interpreter_call",
                                                                "local_shell_call",
                                                                "local_shell_call_output",
                                                                "shell_call",
                                                                "shell_call_output",
                                                                "apply_patch_call",
                                                                "apply_patch_call_output",
                                                                "mcp_list_tools",
                                                                "mcp_approval_request",
                                                                "mcp_approval_response",
                                                                "mcp_call",
                                                                "custom_tool_call",
                                                                "custom_tool_call_output",
                                                                "tool_search_call",
                                                                "compaction"};

struct ItemContext {
  ResponsesRequest& out;
  std::vector<Message>& messages;
};

void note_native(ResponsesRequest& out, Error e) {
  if (!out.needs_native) out.needs_native = std::move(e);
}

// A message's content parts: input_text / output_text / refusal as text; images, files and
// audio only natively.
std::optional<Error> parse_parts(const element& content, const Path& path, Role role,
                                 ItemContext& ctx, Message& msg) {
  static constexpr std::array<std::string_view, 7> kKnown = {
      "type", "text", "annotations", "logprobs", "refusal", "id", "status"};
  msg.content.form = Content::Form::kParts;
  size_t i = 0;
  for (element p : array_of(content)) {
    const Path where(path, i++);
    auto part = object_at(p, where);
    if (!part) return part.error();
    auto type_v = part->at_key("type");
    std::string_view type;
    if (type_v.error() != simdjson::SUCCESS || !type_v.value_unsafe().is_string()) {
      return missing_parameter(dot(where, "type"));
    }
    type = string_of(type_v.value_unsafe());
    if (type == "input_image" || type == "input_file" || type == "input_audio") {
      note_native(ctx.out,
                  native_only(where, "a content part of type '" + std::string(type) + "'"));
      continue;
    }
    const bool output = type == "output_text" || type == "refusal";
    if (type != "input_text" && !output) {
      return invalid_value(dot(where, "type"), type,
                           {"input_text", "output_text", "refusal", "input_image", "input_file"});
    }
    if (output && role != Role::kAssistant) {
      return fail("Invalid value: '" + std::string(type) +
                      "'. Supported values are: 'input_text'," +
                      " 'input_image', and 'input_file' (a " + std::string(role_name(role)) +
                      " message's content).",
                  dot(where, "type"), "invalid_value");
    }
    Fields f(*part, kKnown, where);
    if (f.error()) return f.error();
    auto text = f.required_string(type == "refusal" ? "refusal" : "text");
    if (!text) return text.error();
    msg.content.parts.push_back(ContentPart{"text", std::string(*text), {}});
  }
  return std::nullopt;
}

// A `message` item (type "message", or an easy input message with only role and content).
std::optional<Error> parse_message_item(const simdjson::dom::object& item, const Path& path,
                                        ItemContext& ctx) {
  static constexpr std::array<std::string_view, 6> kKnown = {"type", "role",   "content",
                                                             "id",   "status", "phase"};
  Fields f(item, kKnown, path);
  if (f.error()) return f.error();
  auto role_text = f.required_string("role");
  if (!role_text) return role_text.error();
  Message msg;
  if (*role_text == "user") {
    msg.role = Role::kUser;
  } else if (*role_text == "assistant") {
    msg.role = Role::kAssistant;
  } else if (*role_text == "system") {
    msg.role = Role::kSystem;
  } else if (*role_text == "developer") {
    msg.role = Role::kDeveloper;
  } else {
    return invalid_value(dot(path, "role"), *role_text,
                         {"user", "assistant", "system", "developer"});
  }
  auto content = f["content"];
  if (!content) return missing_parameter(dot(path, "content"));
  if (content->is_string()) {
    msg.content.form = Content::Form::kText;
    msg.content.text = std::string(string_of(*content));
  } else if (content->is_array()) {
    if (auto e = parse_parts(*content, Path(path, "content"), msg.role, ctx, msg)) return e;
  } else {
    return invalid_type(dot(path, "content"), "a string or an array", *content);
  }
  ctx.messages.push_back(std::move(msg));
  return std::nullopt;
}

// Calls made in one turn (and the text before them) are one assistant message in chat.
void add_tool_call(ItemContext& ctx, ToolCall call) {
  if (ctx.messages.empty() || ctx.messages.back().role != Role::kAssistant) {
    ctx.messages.emplace_back();
    ctx.messages.back().role = Role::kAssistant;
  }
  Message& assistant = ctx.messages.back();
  if (!assistant.tool_calls) assistant.tool_calls.emplace();
  assistant.tool_calls->push_back(std::move(call));
}

std::optional<Error> parse_function_call(const simdjson::dom::object& item, const Path& path,
                                         ItemContext& ctx) {
  static constexpr std::array<std::string_view, 6> kKnown = {"type",      "call_id", "name",
                                                             "arguments", "id",      "status"};
  Fields f(item, kKnown, path);
  if (f.error()) return f.error();
  auto call_id = f.required_string("call_id");
  if (!call_id) return call_id.error();
  auto name = f.required_string("name");
  if (!name) return name.error();
  auto arguments = f.required_string("arguments");
  if (!arguments) return arguments.error();
  ToolCall call;
  call.id = std::string(*call_id);
  call.name = std::string(*name);
  call.arguments = std::string(*arguments);
  add_tool_call(ctx, std::move(call));
  return std::nullopt;
}

// A function call's output, matched to its call by call_id. Codex also sends outputs of its own
// tools with no call (a `name`, optionally a `namespace`, and no call_id: its goal's objective,
// for one): chat has no tool result without a call, so such an output becomes the call and its
// result, named namespace__name as agents name namespaced tools, with no arguments and the
// item's id (or one made from its place in the messages) as the call's id.
std::optional<Error> parse_function_call_output(const simdjson::dom::object& item, const Path& path,
                                                ItemContext& ctx) {
  static constexpr std::array<std::string_view, 7> kKnown = {"type",   "call_id", "output",   "id",
                                                             "status", "name",    "namespace"};
  Fields f(item, kKnown, path);
  if (f.error()) return f.error();
  auto call_id = f.string("call_id");
  if (!call_id) return call_id.error();
  auto name = f.string("name");
  if (!name) return name.error();
  auto space = f.string("namespace");
  if (!space) return space.error();
  auto id = f.string("id");
  if (!id) return id.error();
  auto output = f["output"];
  if (!output) return missing_parameter(dot(path, "output"));
  std::string tool_call_id;
  if (*call_id) {
    tool_call_id = std::string(**call_id);
  } else if (*name && !(*name)->empty()) {
    ToolCall call;
    call.id = *id ? std::string(**id) : "call_" + std::to_string(ctx.messages.size());
    call.name = *space && !(*space)->empty() ? std::string(**space) + "__" + std::string(**name)
                                             : std::string(**name);
    call.arguments = "{}";
    tool_call_id = call.id;
    add_tool_call(ctx, std::move(call));
  } else {
    return missing_parameter(dot(path, "call_id"));
  }
  Message msg;
  msg.role = Role::kTool;
  msg.tool_call_id = std::move(tool_call_id);
  if (output->is_string()) {
    msg.content.form = Content::Form::kText;
    msg.content.text = std::string(string_of(*output));
  } else if (output->is_array()) {
    if (auto e = parse_parts(*output, Path(path, "output"), Role::kUser, ctx, msg)) return e;
  } else {
    return invalid_type(dot(path, "output"), "a string or an array", *output);
  }
  ctx.messages.push_back(std::move(msg));
  return std::nullopt;
}

// A reasoning item is checked and dropped: a chat backend has no standard field for earlier
// turns' reasoning (DeepSeek refuses `reasoning_content` in input, and chat templates drop it
// from earlier turns), so it is left out as OpenAI leaves it out for non-reasoning models.
std::optional<Error> check_reasoning(const simdjson::dom::object& item, const Path& path) {
  static constexpr std::array<std::string_view, 6> kKnown = {
      "type", "id", "summary", "content", "status", "encrypted_content"};
  Fields f(item, kKnown, path);
  if (f.error()) return f.error();
  for (std::string_view key : {"summary", "content"}) {
    auto v = f[key];
    if (v && !v->is_array()) return invalid_type(dot(path, key), "an array", *v);
  }
  auto summary = f["summary"];
  if (!summary && item.at_key("summary").error() != simdjson::SUCCESS) {
    return missing_parameter(dot(path, "summary"));
  }
  if (auto enc = f.string("encrypted_content"); !enc) return enc.error();
  return std::nullopt;
}

std::optional<Error> parse_item(const element& v, const Path& path, ItemContext& ctx) {
  auto item = object_at(v, path);
  if (!item) return item.error();
  std::string_view type = "message";
  if (auto t = item->at_key("type");
      t.error() == simdjson::SUCCESS && !t.value_unsafe().is_null()) {
    if (!t.value_unsafe().is_string())
      return invalid_type(dot(path, "type"), "a string", t.value_unsafe());
    type = string_of(t.value_unsafe());
  } else if (item->at_key("role").error() != simdjson::SUCCESS) {
    return missing_parameter(dot(path, "type"));
  }
  if (type == "message") return parse_message_item(*item, path, ctx);
  if (type == "function_call") return parse_function_call(*item, path, ctx);
  if (type == "function_call_output") return parse_function_call_output(*item, path, ctx);
  if (type == "reasoning") return check_reasoning(*item, path);
  if (type == "item_reference") {
    return unsupported(path,
                       "item references; continue a stored response with "
                       "previous_response_id, or send the items themselves");
  }
  if (std::find(kBuiltinItemTypes.begin(), kBuiltinItemTypes.end(), type) !=
      kBuiltinItemTypes.end()) {
    note_native(ctx.out, native_only(path, "an item of type '" + std::string(type) + "'"));
    return std::nullopt;
  }
  return invalid_value(dot(path, "type"), type,
                       {"message", "function_call", "function_call_output", "reasoning"});
}

// Items into messages; `path` names the array in errors ("input", or "previous_response_id"
// for a stored history).
std::optional<Error> parse_items(const element& items, const Path& path, ItemContext& ctx) {
  size_t i = 0;
  for (element item : array_of(items)) {
    if (auto e = parse_item(item, Path(path, i++), ctx)) return e;
  }
  return std::nullopt;
}

std::optional<Error> parse_input(const std::optional<element>& input, ResponsesRequest& out) {
  if (!input) return missing_parameter("input");
  ItemContext ctx{out, out.chat.messages};
  if (input->is_string()) {
    if (string_of(*input).empty()) {
      return fail(
          "Invalid 'input': empty string. Expected a string with minimum length 1, but "
          "got an empty string instead.",
          "input", "empty_string");
    }
    Message msg;
    msg.role = Role::kUser;
    msg.content.form = Content::Form::kText;
    msg.content.text = std::string(string_of(*input));
    out.chat.messages.push_back(std::move(msg));
    return std::nullopt;
  }
  if (!input->is_array()) return invalid_type("input", "a string or an array", *input);
  if (array_of(*input).size() == 0) {
    return fail(
        "Invalid 'input': empty array. Expected an array with minimum length 1, but got "
        "an empty array instead.",
        "input", "empty_array");
  }
  out.chat.messages.reserve(out.chat.messages.size() + array_of(*input).size());
  if (auto e = parse_items(*input, "input", ctx)) return e;
  return std::nullopt;
}

bool json_ws(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

// Appends the array or object at text[i] (JSON that simdjson read) without the white space
// between its tokens, strings and numbers as written (each escape as the client wrote it), in
// one pass that jumps over string contents; returns one past its end, npos when cut short.
size_t append_compact(std::string& out, std::string_view text, size_t i) {
  constexpr size_t npos = std::string_view::npos;
  size_t run = i;  // the start of the bytes not yet appended
  int depth = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '"') {
      i = json_string_end(text, i);
      if (i == npos) return npos;
      continue;
    }
    if (json_ws(c)) {
      out.append(text.substr(run, i - run));
      i = skip_json_ws(text, i);
      run = i;
      continue;
    }
    ++i;
    if (c == '[' || c == '{') {
      ++depth;
    } else if ((c == ']' || c == '}') && --depth == 0) {
      out.append(text.substr(run, i - run));
      return i;
    }
  }
  return npos;
}

// Appends the top-level `input` member of `body` (a JSON object simdjson read) as
// append_compact writes it, by one scan of the body's members; false (nothing appended) when the
// scan cannot tell: a key written with an escape could be another spelling of "input".
bool append_input_as_sent(std::string& out, std::string_view body) {
  constexpr size_t npos = std::string_view::npos;
  const size_t open = skip_json_ws(body, 0);
  if (open >= body.size() || body[open] != '{') return false;
  const size_t mark = out.size();
  int seen = 0;
  const size_t close = for_each_json_member(body, open, [&](std::string_view key, size_t at) {
    if (key != "input" || at >= body.size() || body[at] != '[') return json_element_end(body, at);
    ++seen;
    return append_compact(out, body, at);
  });
  if (close != npos && seen == 1) return true;
  out.resize(mark);
  return false;
}

// The input items a stored response keeps (ResponsesRequest::input_items), of a checked input
// in `body`: an array as the client wrote it, compact; a string as one user message item.
std::string input_items_text(const element& input, std::string_view body) {
  std::string out;
  if (input.is_string()) {
    out.append(R"([{"type":"message","role":"user","content":)");
    append_json_string(out, string_of(input));
    out.append("}]");
  } else if (!append_input_as_sent(out, body)) {
    append_dom_json(out, input);
  }
  return out;
}

// ============================================================================================
// Tools and tool_choice
// ============================================================================================

// The tool types of OpenAI's built-in tools (and the versions of them): only natively.
bool builtin_tool_type(std::string_view type) {
  for (std::string_view prefix : {"web_search", "computer_use", "file_search", "code_interpreter",
                                  "image_generation", "mcp", "local_shell", "shell", "custom",
                                  "apply_patch", "tool_search", "namespace", "programmatic"}) {
    if (type.starts_with(prefix)) return true;
  }
  return false;
}

bool valid_function_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

// {type: "function", name, description, parameters, strict}: flat, unlike chat's.
std::optional<Error> parse_function_tool(const simdjson::dom::object& obj, const Path& path,
                                         Tool& out) {
  static constexpr std::array<std::string_view, 6> kKnown = {
      "type", "name", "description", "parameters", "strict", "defer_loading"};
  Fields f(obj, kKnown, path);
  if (f.error()) return f.error();
  auto name = f.required_string("name");
  if (!name) return name.error();
  if (!valid_function_name(*name)) {
    return fail("Invalid '" + dot(path, "name") +
                    "': string does not match pattern. Expected a "
                    "string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.",
                dot(path, "name"), "invalid_value");
  }
  out.name = std::string(*name);
  auto description = f.string("description");
  if (!description) return description.error();
  if (*description) out.description = std::string(**description);
  if (auto p = f["parameters"]) {
    if (!p->is_object()) return invalid_type(dot(path, "parameters"), "an object", *p);
    append_dom_json(out.parameters, *p);
  }
  auto strict = f.boolean("strict");
  if (!strict) return strict.error();
  out.strict = *strict;
  if (auto d = f["defer_loading"]; d && (!d->is_bool() || d->get_bool().value_unsafe())) {
    return unsupported(dot(path, "defer_loading"), "every tool is loaded with the request");
  }
  return std::nullopt;
}

// The echo of a checked tools array of function tools only (`tools`, parsed from it in order):
// each tool's members in the client's order, its schema as the text parse_function_tool kept
// (written once, not serialised again), the other values as their JSON. (Fields refused any
// other member and a member named twice.)
std::string function_tools_echo(const element& v, const std::vector<Tool>& tools) {
  std::string out = "[";
  size_t i = 0;
  for (element t : array_of(v)) {
    if (i > 0) out.push_back(',');
    out.push_back('{');
    bool first = true;
    for (auto [key, value] : object_of(t)) {
      if (!first) out.push_back(',');
      first = false;
      append_json_string(out, key);
      out.push_back(':');
      if (key == "parameters" && value.is_object()) {
        out.append(tools[i].parameters);
      } else if (value.is_string()) {
        append_json_string(out, string_of(value));
      } else {
        out.append(text_of(value));
      }
    }
    out.push_back('}');
    ++i;
  }
  out.push_back(']');
  return out;
}

std::optional<Error> parse_tools(const std::optional<element>& v, ResponsesRequest& out) {
  if (!v) return std::nullopt;
  if (!v->is_array()) return invalid_type("tools", "an array", *v);
  std::vector<Tool> tools;
  const Path tools_path("tools");
  size_t i = 0;
  for (element t : array_of(*v)) {
    const Path path(tools_path, i++);
    auto obj = object_at(t, path);
    if (!obj) return obj.error();
    auto type_v = obj->at_key("type");
    if (type_v.error() != simdjson::SUCCESS || !type_v.value_unsafe().is_string()) {
      return missing_parameter(dot(path, "type"));
    }
    std::string_view type = string_of(type_v.value_unsafe());
    if (type == "function") {
      tools.emplace_back();
      if (auto e = parse_function_tool(*obj, path, tools.back())) return e;
    } else if (builtin_tool_type(type)) {
      note_native(out, native_only(path, "the built-in tool type '" + std::string(type) + "'"));
    } else {
      return invalid_value(dot(path, "type"), type,
                           {"function", "file_search", "computer_use_preview", "web_search", "mcp",
                            "code_interpreter", "image_generation", "local_shell"});
    }
  }
  const bool functions_only = tools.size() == array_of(*v).size();
  out.echo.tools = functions_only ? function_tools_echo(*v, tools) : text_of(*v);
  if (!tools.empty()) {
    out.chat.tools = std::move(tools);
    out.chat.tools_given = true;
  }
  return std::nullopt;
}

std::optional<Error> parse_tool_choice(const std::optional<element>& v, ResponsesRequest& out) {
  if (!v) return std::nullopt;
  using Mode = ToolChoice::Mode;
  ToolChoice choice;
  if (v->is_string()) {
    std::string_view s = string_of(*v);
    if (s == "auto") {
      choice.mode = Mode::kAuto;
    } else if (s == "none") {
      choice.mode = Mode::kNone;
    } else if (s == "required") {
      choice.mode = Mode::kRequired;
    } else {
      return invalid_value("tool_choice", s, {"none", "auto", "required"});
    }
  } else if (v->is_object()) {
    static constexpr std::array<std::string_view, 2> kKnown = {"type", "name"};
    simdjson::dom::object obj = object_of(*v);
    auto type_v = obj.at_key("type");
    if (type_v.error() != simdjson::SUCCESS || !type_v.value_unsafe().is_string()) {
      return missing_parameter("tool_choice.type");
    }
    std::string_view type = string_of(type_v.value_unsafe());
    if (type != "function") {
      if (type == "allowed_tools" || builtin_tool_type(type)) {
        note_native(
            out, native_only("tool_choice", "a tool_choice of type '" + std::string(type) + "'"));
        out.echo.tool_choice = text_of(*v);
        return std::nullopt;
      }
      return invalid_value("tool_choice.type", type, {"function", "allowed_tools"});
    }
    Fields f(obj, kKnown, "tool_choice");
    if (f.error()) return f.error();
    auto name = f.required_string("name");
    if (!name) return name.error();
    choice.mode = Mode::kFunction;
    choice.name = std::string(*name);
  } else {
    return invalid_type("tool_choice", "a string or an object", *v);
  }
  out.echo.tool_choice = text_of(*v);
  const bool has_tools = out.chat.tools.has_value();
  if (choice.mode == Mode::kFunction &&
      (!has_tools || std::none_of(out.chat.tools->begin(), out.chat.tools->end(),
                                  [&](const Tool& t) { return t.name == choice.name; }))) {
    return fail("Tool choice 'function' not found in 'tools' parameter.", "tool_choice",
                "invalid_value");
  }
  if (choice.mode == Mode::kRequired && !has_tools && !out.needs_native) {
    return fail("Tool choice 'required' must be specified with 'tools' parameter.", "tool_choice",
                "invalid_value");
  }
  // Chat refuses tool_choice without tools; with none, "auto" and "none" mean the same.
  if (has_tools) out.chat.tool_choice = std::move(choice);
  return std::nullopt;
}

// ============================================================================================
// text, reasoning, include, metadata and the plain parameters
// ============================================================================================

// text: {format: {type: text | json_object | json_schema (name, schema, strict,
// description)}, verbosity}.
std::optional<Error> parse_text(const std::optional<element>& v, ResponsesRequest& out) {
  if (!v) return std::nullopt;
  auto obj = object_at(*v, "text");
  if (!obj) return obj.error();
  static constexpr std::array<std::string_view, 2> kKnown = {"format", "verbosity"};
  Fields f(*obj, kKnown, "text");
  if (f.error()) return f.error();
  out.echo.text = text_of(*v);
  if (auto verbosity = f["verbosity"]) {
    if (!verbosity->is_string()) return invalid_type("text.verbosity", "a string", *verbosity);
    std::string_view s = string_of(*verbosity);
    if (s != "low" && s != "medium" && s != "high") {
      return invalid_value("text.verbosity", s, {"low", "medium", "high"});
    }
    if (out.chat.extra.is_null()) out.chat.extra = Json::object();
    out.chat.extra["verbosity"] = std::string(s);  // chat's name for it (passed through)
  }
  auto format_v = f["format"];
  if (!format_v) return std::nullopt;
  auto format = object_at(*format_v, "text.format");
  if (!format) return format.error();
  static constexpr std::array<std::string_view, 5> kFormat = {"type", "name", "schema", "strict",
                                                              "description"};
  Fields g(*format, kFormat, "text.format");
  if (g.error()) return g.error();
  auto type = g.required_string("type");
  if (!type) return type.error();
  ResponseFormat rf;
  rf.type = std::string(*type);
  if (*type == "json_schema") {
    auto name = g.required_string("name");
    if (!name) return name.error();
    auto schema = g["schema"];
    if (!schema) return missing_parameter("text.format.schema");
    if (!schema->is_object()) return invalid_type("text.format.schema", "an object", *schema);
    auto strict = g.boolean("strict");
    if (!strict) return strict.error();
    auto description = g.string("description");
    if (!description) return description.error();
    rf.json_schema = Json::object();
    rf.json_schema["name"] = std::string(*name);
    if (*description) rf.json_schema["description"] = std::string(**description);
    rf.json_schema["schema"] = to_json(*schema);
    if (*strict) rf.json_schema["strict"] = **strict;
  } else if (*type != "text" && *type != "json_object") {
    return invalid_value("text.format.type", *type, {"text", "json_object", "json_schema"});
  } else {
    for (std::string_view key : {"name", "schema", "strict", "description"}) {
      if (g[key]) return unknown_parameter(dot("text.format", key));
    }
  }
  if (*type != "text") {
    out.chat.response_format = std::move(rf);
    out.chat.response_format_given = true;
  }
  return std::nullopt;
}

std::optional<Error> parse_reasoning(const std::optional<element>& v, ResponsesRequest& out) {
  if (!v) return std::nullopt;
  auto obj = object_at(*v, "reasoning");
  if (!obj) return obj.error();
  static constexpr std::array<std::string_view, 3> kKnown = {"effort", "summary",
                                                             "generate_summary"};
  Fields f(*obj, kKnown, "reasoning");
  if (f.error()) return f.error();
  auto effort = f.string("effort");
  if (!effort) return effort.error();
  if (*effort) {
    std::string_view e = **effort;
    if (e != "none" && e != "minimal" && e != "low" && e != "medium" && e != "high" &&
        e != "xhigh") {
      return invalid_value("reasoning.effort", e,
                           {"none", "minimal", "low", "medium", "high", "xhigh"});
    }
    if (out.chat.extra.is_null()) out.chat.extra = Json::object();
    out.chat.extra["reasoning_effort"] = std::string(e);  // chat's name for it
  }
  // A summary is not made: the reasoning comes back whole, as reasoning_text (documented).
  for (std::string_view key : {"summary", "generate_summary"}) {
    auto s = f.string(key);
    if (!s) return s.error();
    if (*s && **s != "auto" && **s != "concise" && **s != "detailed") {
      return invalid_value(dot("reasoning", key), **s, {"auto", "concise", "detailed"});
    }
  }
  return std::nullopt;
}

// include: what the answer should carry beyond the default. ferry has no encrypted reasoning
// (a reasoning item comes back with its text) and runs no built-in tool, so the values about
// them change nothing; logprobs are not rendered and are refused.
std::optional<Error> parse_include(const std::optional<element>& v) {
  if (!v) return std::nullopt;
  if (!v->is_array()) return invalid_type("include", "an array", *v);
  static constexpr std::array<std::string_view, 8> kNoEffect = {
      "reasoning.encrypted_content",   "file_search_call.results",
      "web_search_call.results",       "web_search_call.action.sources",
      "code_interpreter_call.outputs", "computer_call_output.output.image_url",
      "message.input_image.image_url", "message.output_text.logprobs"};
  size_t i = 0;
  for (element x : array_of(*v)) {
    const std::string path = at("include", i++);
    if (!x.is_string()) return invalid_type(path, "a string", x);
    std::string_view s = string_of(x);
    if (s == "message.output_text.logprobs") {
      return unsupported(path, "logprobs are not rendered in Responses answers");
    }
    if (std::find(kNoEffect.begin(), kNoEffect.end(), s) == kNoEffect.end()) {
      return invalid_value(
          path, s,
          {"reasoning.encrypted_content", "file_search_call.results",
           "web_search_call.action.sources", "code_interpreter_call.outputs",
           "computer_call_output.output.image_url", "message.input_image.image_url"});
    }
  }
  return std::nullopt;
}

// metadata: at most 16 string values, keys of at most 64 and values of at most 512 characters
// (OpenAI's limits). task_id and tags as on chat: the ledger's task and claimed tags.
std::optional<Error> parse_metadata(const std::optional<element>& v, ResponsesRequest& out) {
  if (!v) return std::nullopt;
  auto obj = object_at(*v, "metadata");
  if (!obj) return obj.error();
  if (obj->size() > 16) {
    return fail(
        "Invalid 'metadata': too many properties. Expected an object with at most 16 "
        "properties, but got an object with " +
            std::to_string(obj->size()) + " properties instead.",
        "metadata", "object_above_max_properties");
  }
  for (auto [key, value] : *obj) {
    const std::string path = dot("metadata", key);
    if (key.size() > 64) {
      return fail(
          "Invalid 'metadata': key '" + std::string(key) + "' is longer than 64 characters.",
          "metadata", "invalid_value");
    }
    if (!value.is_string()) return invalid_type(path, "a string", value);
    std::string_view s = string_of(value);
    if (s.size() > 512) {
      return fail("Invalid '" + path +
                      "': string too long. Expected a string with maximum length "
                      "512.",
                  path, "string_above_max_length");
    }
    if (key == "task_id") {
      if (s.size() > 256) {
        return fail("'metadata.task_id' must be at most 256 bytes", path, "invalid_value");
      }
      out.chat.metadata.task_id = std::string(s);
    } else if (key == "tags") {
      out.chat.metadata.tags = split_tags(s);
    }
  }
  out.echo.metadata = text_of(*v);
  return std::nullopt;
}

// The top-level members of a Responses request (the openai package's ResponseCreateParams).
constexpr std::array<std::string_view, 32> kTopLevel = {"model",
                                                        "input",
                                                        "instructions",
                                                        "tools",
                                                        "tool_choice",
                                                        "parallel_tool_calls",
                                                        "max_output_tokens",
                                                        "temperature",
                                                        "top_p",
                                                        "text",
                                                        "reasoning",
                                                        "store",
                                                        "stream",
                                                        "stream_options",
                                                        "metadata",
                                                        "prompt_cache_key",
                                                        "user",
                                                        "truncation",
                                                        "include",
                                                        "previous_response_id",
                                                        "background",
                                                        "conversation",
                                                        "prompt",
                                                        "context_management",
                                                        "moderation",
                                                        "max_tool_calls",
                                                        "prompt_cache_options",
                                                        "prompt_cache_retention",
                                                        "safety_identifier",
                                                        "service_tier",
                                                        "top_logprobs",
                                                        "client_metadata"};
using TopFields = Fields<kTopLevel.size()>;

// Members ferry cannot honour: a clear 400 when they are set to anything but their default.
std::optional<Error> refuse_unsupported(const TopFields& f) {
  if (auto b = f.boolean("background"); !b) {
    return b.error();
  } else if (b->value_or(false)) {
    return unsupported("background", "answers are produced while the request waits");
  }
  for (std::string_view key : {"conversation", "prompt", "context_management", "moderation",
                               "max_tool_calls", "prompt_cache_options"}) {
    if (f[key]) return unsupported(std::string(key), "it has no equivalent in ferry");
  }
  if (auto t = f["top_logprobs"];
      t && !(t->type() == element_type::INT64 && t->get_int64().value_unsafe() == 0)) {
    return unsupported("top_logprobs", "logprobs are not rendered in Responses answers");
  }
  return std::nullopt;
}

// Hints a chat backend takes under the same names (documented pass-through), and `user`.
std::optional<Error> parse_pass_through(const TopFields& f, ResponsesRequest& out) {
  for (std::string_view key : {"safety_identifier", "service_tier", "prompt_cache_retention"}) {
    auto s = f.string(key);
    if (!s) return s.error();
    if (!*s) continue;
    if (out.chat.extra.is_null()) out.chat.extra = Json::object();
    out.chat.extra[std::string(key)] = std::string(**s);
  }
  auto user = f.string("user");
  if (!user) return user.error();
  if (*user) out.chat.metadata.user = std::string(**user);
  auto key = f.string("prompt_cache_key");
  if (!key) return key.error();
  if (*key) {
    if ((*key)->size() > 256) {
      return fail("'prompt_cache_key' must be at most 256 bytes", "prompt_cache_key",
                  "string_above_max_length");
    }
    out.prompt_cache_key = std::string(**key);
  }
  // Codex CLI's own turn metadata (not OpenAI's): checked, not sent to a chat backend.
  if (auto c = f["client_metadata"]; c && !c->is_object()) {
    return invalid_type("client_metadata", "an object", *c);
  }
  return std::nullopt;
}

std::optional<Error> parse_flags(const TopFields& f, ResponsesRequest& out) {
  auto store = f.boolean("store");
  if (!store) return store.error();
  out.store = store->value_or(true);
  out.echo.store = out.store;
  auto stream = f.boolean("stream");
  if (!stream) return stream.error();
  out.chat.stream = *stream;
  if (auto so = f["stream_options"]) {
    auto obj = object_at(*so, "stream_options");
    if (!obj) return obj.error();
    static constexpr std::array<std::string_view, 1> kKnown = {"include_obfuscation"};
    Fields g(*obj, kKnown, "stream_options");
    if (g.error()) return g.error();
    if (auto b = g.boolean("include_obfuscation"); !b) return b.error();  // ferry never pads
  }
  auto parallel = f.boolean("parallel_tool_calls");
  if (!parallel) return parallel.error();
  out.echo.parallel_tool_calls = parallel->value_or(true);
  if (*parallel && out.chat.tools) out.chat.parallel_tool_calls = *parallel;
  auto truncation = f.string("truncation");
  if (!truncation) return truncation.error();
  // "auto" would drop items that do not fit; ferry never drops: an input that does not fit is
  // a 400 either way (documented), and one that fits is answered the same.
  if (*truncation && **truncation != "auto" && **truncation != "disabled") {
    return invalid_value("truncation", **truncation, {"auto", "disabled"});
  }
  auto previous = f.string("previous_response_id");
  if (!previous) return previous.error();
  if (*previous) {
    std::string_view id = **previous;
    bool ok = !id.empty() && id.size() <= 256 && std::all_of(id.begin(), id.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-';
    });
    if (!ok) {
      return fail("Invalid 'previous_response_id': '" + std::string(id.substr(0, 64)) +
                      "'. Expected an ID that contains letters, numbers, underscores, or dashes.",
                  "previous_response_id", "invalid_value");
    }
    out.previous_response_id = std::string(id);
    out.echo.previous_response_id = out.previous_response_id;
  }
  return std::nullopt;
}

std::optional<Error> parse_sampling(const TopFields& f, const ParseOptions& options,
                                    ResponsesRequest& out) {
  if (auto e = check_integer(f["max_output_tokens"], "max_output_tokens", 1,
                             options.max_tokens_limit, out.chat.limits.max_tokens)) {
    return e;
  }
  out.echo.max_output_tokens = out.chat.limits.max_tokens.value_or(-1);
  if (auto e =
          check_decimal(f["temperature"], "temperature", 0, 2, out.chat.sampling.temperature)) {
    return e;
  }
  if (auto e = check_decimal(f["top_p"], "top_p", 0, 1, out.chat.sampling.top_p)) return e;
  if (auto t = f["temperature"]) out.echo.temperature = text_of(*t);
  if (auto t = f["top_p"]) out.echo.top_p = text_of(*t);
  return std::nullopt;
}

std::optional<Error> parse_instructions(const TopFields& f, ResponsesRequest& out) {
  auto instructions = f.string("instructions");
  if (!instructions) return instructions.error();
  if (!*instructions) return std::nullopt;
  Message system;
  system.role = Role::kSystem;
  system.content.form = Content::Form::kText;
  system.content.text = std::string(**instructions);
  out.echo.instructions = json_string(system.content.text);
  out.chat.messages.push_back(std::move(system));
  return std::nullopt;
}

// The body's members in the order their errors are reported.
std::optional<Error> parse_body(std::string_view body, const TopFields& f,
                                const ParseOptions& options, ResponsesRequest& out) {
  if (auto e = refuse_unsupported(f)) return e;
  auto model = f.required_string("model");
  if (!model) return model.error();
  out.chat.model = std::string(*model);
  if (auto e = parse_instructions(f, out)) return e;
  if (auto e = parse_input(f["input"], out)) return e;
  if (auto e = parse_tools(f["tools"], out)) return e;
  if (auto e = parse_tool_choice(f["tool_choice"], out)) return e;
  if (auto e = parse_flags(f, out)) return e;
  if (auto e = parse_sampling(f, options, out)) return e;
  if (auto e = parse_text(f["text"], out)) return e;
  if (auto e = parse_reasoning(f["reasoning"], out)) return e;
  if (auto e = parse_include(f["include"])) return e;
  if (auto e = parse_metadata(f["metadata"], out)) return e;
  if (auto e = parse_pass_through(f, out)) return e;
  if (out.chat.metadata.task_id.empty() && out.prompt_cache_key.size() <= 256) {
    out.chat.metadata.task_id = out.prompt_cache_key;
  }
  if (out.store) out.input_items = input_items_text(*f["input"], body);
  return std::nullopt;
}

// One validating parse of `text` on this thread's parser (its elements live until the next).
// `readable_past_end`: bytes past the end of `text` that may be read (ParseOptions): with
// kJsonReadSlack the text is parsed where it is, otherwise copied first.
Result<element> parse_json(std::string_view text, simdjson::dom::parser& parser,
                           size_t readable_past_end = 0) {
  element doc;
  const bool copy = readable_past_end < kJsonReadSlack;
  auto err = parser.parse(text.data(), text.size(), /*realloc_if_needed=*/copy).get(doc);
  if (err == simdjson::UTF8_ERROR) {
    return Error::make(ErrorCode::kInvalidRequest, "the request body is not valid UTF-8", "",
                       "invalid_json");
  }
  if (err != simdjson::SUCCESS) {
    return Error::make(ErrorCode::kInvalidRequest,
                       std::string("We could not parse the JSON body of your request. (") +
                           simdjson::error_message(err) + ")",
                       "", "invalid_json");
  }
  return doc;
}

}  // namespace

Result<ResponsesRequest> parse_responses(std::string_view body, const ParseOptions& options) {
  thread_local simdjson::dom::parser parser;
  auto doc = parse_json(body, parser, options.readable_past_end);
  if (!doc) return doc.error();
  if (!doc->is_object()) return invalid_type("body", "an object", *doc);
  ResponsesRequest out;
  out.chat.endpoint = Endpoint::kChatCompletions;  // what a chat backend is sent
  const TopFields f(object_of(*doc), kTopLevel, "");
  if (f.error()) return *f.error();
  if (auto e = parse_body(body, f, options, out)) return *e;
  if (out.previous_response_id.empty()) {
    if (Status s = check_tool_outputs(out.chat.messages); !s) return s.error();
  }
  return out;
}

Status continue_from(ResponsesRequest& request, std::string_view history) {
  thread_local simdjson::dom::parser parser;
  auto doc = parse_json(history, parser);
  if (!doc || !doc->is_array()) {
    return Error::make(ErrorCode::kInternal, "a stored response's items are not a JSON array");
  }
  std::vector<Message> before;
  ItemContext ctx{request, before};
  if (auto e = parse_items(*doc, "previous_response_id", ctx)) return *e;
  auto& messages = request.chat.messages;
  // The instructions stay first (a stored response's own are not carried over, as OpenAI does).
  auto pos = messages.begin();
  if (!request.echo.instructions.empty() && request.echo.instructions != "null") ++pos;
  request.history_messages = before.size();
  request.history = std::string(history);
  messages.insert(pos, std::make_move_iterator(before.begin()),
                  std::make_move_iterator(before.end()));
  return check_tool_outputs(messages);
}

Status check_tool_outputs(const std::vector<Message>& messages) {
  std::set<std::string_view> calls;
  for (const Message& m : messages) {
    if (m.tool_calls) {
      for (const ToolCall& c : *m.tool_calls) calls.insert(c.id);
    }
    if (m.role == Role::kTool && m.tool_call_id && !calls.contains(*m.tool_call_id)) {
      return fail(
          "No tool call found for function call output with call_id " + *m.tool_call_id + ".",
          "input", "invalid_value");
    }
  }
  return {};
}

}  // namespace ferry::api
