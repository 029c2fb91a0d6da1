#include "api/anthropic_parse.h"

#include <simdjson.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "api/dom_value.h"
#include "api/openai_parse.h"
#include "common/json_text.h"

namespace ferry::api {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

// Anthropic names a field by its path, dots and indices: "messages.0.content.1.type".
std::string at(std::string_view path, size_t index) {
  return std::string(path) + "." + std::to_string(index);
}
std::string at(std::string_view path, std::string_view key) {
  return std::string(path) + "." + std::string(key);
}

Error invalid(const std::string& path, const std::string& message) {
  return Error::make(ErrorCode::kInvalidRequest, path.empty() ? message : path + ": " + message,
                     path, "invalid_request_error");
}

std::optional<Error> expect(const element& v, element_type type, const std::string& path,
                            const char* what) {
  if (v.type() == type) return std::nullopt;
  return invalid(path, std::string("Input should be ") + what + ", got " + kind_of(v));
}

Error extra_input(const std::string& path) {
  return invalid(path, "Extra inputs are not permitted");
}

// The members of one object by name, each at most once; a member not in `allowed` is an extra
// input (Anthropic refuses them).
class Fields {
 public:
  Fields(const element& obj, std::string path) : path_(std::move(path)) {
    for (auto [key, value] : object_of(obj)) members_.emplace_back(key, value);
  }
  std::optional<Error> check(std::initializer_list<std::string_view> allowed) const {
    for (size_t i = 0; i < members_.size(); ++i) {
      const auto& key = members_[i].first;
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        return extra_input(at(path_, key));
      }
      for (size_t j = 0; j < i; ++j) {
        if (members_[j].first == key) return invalid(at(path_, key), "appears more than once");
      }
    }
    return std::nullopt;
  }
  // The member's value; absent and null are both "not given".
  std::optional<element> get(std::string_view key) const {
    for (const auto& [k, v] : members_) {
      if (k == key && !v.is_null()) return v;
    }
    return std::nullopt;
  }
  std::string path(std::string_view key) const { return at(path_, key); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::pair<std::string_view, element>> members_;
};

// The type of a block (an object with a string `type`), or the error.
Result<std::string_view> block_type(const element& block, const std::string& path) {
  if (auto e = expect(block, element_type::OBJECT, path, "a valid dictionary")) return *e;
  element t;
  if (object_of(block).at_key("type").get(t) != simdjson::SUCCESS) {
    return invalid(at(path, std::string_view("type")), "Field required");
  }
  if (!t.is_string()) {
    return invalid(at(path, std::string_view("type")),
                   std::string("Input should be a valid string, got ") + kind_of(t));
  }
  return string_of(t);
}

Error unknown_tag(const std::string& path, std::string_view tag, std::string_view expected) {
  return invalid(path, "Input tag '" + std::string(tag) +
                           "' found using 'type' does not match any of the expected tags: " +
                           std::string(expected));
}

// Block types Anthropic's own tools produce and only its API (a native backend) takes back.
bool native_block(std::string_view type) {
  static constexpr std::string_view kNative[] = {
      "server_tool_use",       "web_search_tool_result",
      "web_fetch_tool_result", "mcp_tool_use",
      "mcp_tool_result",       "code_execution_tool_result",
      "container_upload",      "bash_code_execution_tool_result",
      "search_result",         "text_editor_code_execution_tool_result"};
  return std::find(std::begin(kNative), std::end(kNative), type) != std::end(kNative);
}

void note_native(AnthropicParseInfo& info, const std::string& path, const std::string& what) {
  if (info.native_only) return;
  info.native_only =
      invalid(path, what +
                        " cannot be translated for this model's backend (it does not speak "
                        "the Messages API natively); send it to a backend with `apis: "
                        "[messages]`");
}

// A text block's text (type "text": text, cache_control, citations).
Result<std::string_view> text_block(const element& block, const std::string& path) {
  Fields f(block, path);
  if (auto e = f.check({"type", "text", "cache_control", "citations"})) return *e;
  auto text = f.get("text");
  if (!text) return invalid(f.path("text"), "Field required");
  if (auto e = expect(*text, element_type::STRING, f.path("text"), "a valid string")) return *e;
  return string_of(*text);
}

void append_text(std::string& out, std::string_view text, bool& first) {
  if (!first) out.push_back('\n');
  out.append(text);
  first = false;
}

// A text block of a system prompt appended to `out` (newline-joined); other types refused.
std::optional<Error> append_system_block(const element& block, const std::string& path,
                                         std::string& out, bool& first) {
  auto type = block_type(block, path);
  if (!type) return type.error();
  if (*type != "text") return unknown_tag(path, *type, "'text'");
  auto text = text_block(block, path);
  if (!text) return text.error();
  append_text(out, *text, first);
  return std::nullopt;
}

// `system`: a string or text blocks, joined by newlines.
std::optional<Error> parse_system(const element& v, ChatRequest& out) {
  Message m;
  m.role = Role::kSystem;
  m.content.form = Content::Form::kText;
  if (v.is_string()) {
    m.content.text = std::string(string_of(v));
  } else if (v.is_array()) {
    bool first = true;
    size_t i = 0;
    for (element block : array_of(v)) {
      if (auto e = append_system_block(block, at("system", i++), m.content.text, first)) return e;
    }
  } else {
    return invalid("system", std::string("Input should be a valid string or a list of text "
                                         "blocks, got ") +
                                 kind_of(v));
  }
  out.messages.push_back(std::move(m));
  return std::nullopt;
}

// One turn after merging: its role and blocks (a string content is one text block).
struct Turn {
  Role role = Role::kUser;
  size_t index = 0;                                     // the first message of the turn (for paths)
  std::vector<std::pair<element, std::string>> blocks;  // block, path
  std::string text;                                     // a string content (when `string_content`)
  bool string_content = false;
};

// The content of a tool_result: a string or text blocks (images: native only).
std::optional<Error> tool_result_text(const element& v, const std::string& path, std::string& out,
                                      AnthropicParseInfo& info) {
  if (v.is_string()) {
    out = std::string(string_of(v));
    return std::nullopt;
  }
  if (!v.is_array()) {
    return invalid(path, std::string("Input should be a valid string or list, got ") + kind_of(v));
  }
  bool first = true;
  size_t i = 0;
  for (element block : array_of(v)) {
    std::string bpath = at(path, i++);
    auto type = block_type(block, bpath);
    if (!type) return type.error();
    if (*type == "image" || *type == "document" || *type == "search_result") {
      note_native(info, bpath, "a tool result's " + std::string(*type) + " block");
      continue;
    }
    if (*type != "text") return unknown_tag(bpath, *type, "'text', 'image', 'document'");
    auto text = text_block(block, bpath);
    if (!text) return text.error();
    append_text(out, *text, first);
  }
  return std::nullopt;
}

// A user turn: tool results (each a tool message, first), then the text as one user message.
std::optional<Error> user_turn(const Turn& turn, const std::set<std::string, std::less<>>& calls,
                               ChatRequest& out, AnthropicParseInfo& info) {
  Message user;
  user.role = Role::kUser;
  user.content.form = Content::Form::kText;
  bool first = true;
  if (turn.string_content) append_text(user.content.text, turn.text, first);
  bool has_text = turn.string_content;
  for (const auto& [block, path] : turn.blocks) {
    auto type = block_type(block, path);
    if (!type) return type.error();
    if (*type == "text") {
      auto text = text_block(block, path);
      if (!text) return text.error();
      append_text(user.content.text, *text, first);
      has_text = true;
    } else if (*type == "image" || *type == "document") {
      note_native(info, path, "an " + std::string(*type) + " block");
    } else if (*type == "tool_result") {
      Fields f(block, path);
      if (auto e = f.check({"type", "tool_use_id", "content", "is_error", "cache_control"})) {
        return *e;
      }
      auto id = f.get("tool_use_id");
      if (!id) return invalid(f.path("tool_use_id"), "Field required");
      if (auto e = expect(*id, element_type::STRING, f.path("tool_use_id"), "a valid string")) {
        return *e;
      }
      if (calls.find(string_of(*id)) == calls.end()) {
        return invalid(path, "unexpected `tool_use_id` found in `tool_result` blocks: " +
                                 std::string(string_of(*id)) +
                                 ". Each `tool_result` block must have a corresponding "
                                 "`tool_use` block in an earlier message.");
      }
      Message tool;
      tool.role = Role::kTool;
      tool.tool_call_id = std::string(string_of(*id));
      tool.content.form = Content::Form::kText;
      bool is_error = false;
      if (auto err = f.get("is_error")) {
        if (auto e = expect(*err, element_type::BOOL, f.path("is_error"), "a valid boolean")) {
          return *e;
        }
        is_error = err->get_bool().value_unsafe();
      }
      std::string text;
      if (auto content = f.get("content")) {
        if (auto e = tool_result_text(*content, f.path("content"), text, info)) return *e;
      }
      tool.content.text = is_error ? "Error: " + text : std::move(text);
      out.messages.push_back(std::move(tool));
    } else if (native_block(*type)) {
      note_native(info, path, "a " + std::string(*type) + " block");
    } else {
      return unknown_tag(path, *type, "'text', 'image', 'document', 'tool_result'");
    }
  }
  if (has_text) out.messages.push_back(std::move(user));
  return std::nullopt;
}

// A tool_use block as a call; its id noted for later tool results.
std::optional<Error> tool_use(const element& block, const std::string& path, Message& m,
                              std::set<std::string, std::less<>>& calls) {
  Fields f(block, path);
  if (auto e = f.check({"type", "id", "name", "input", "cache_control"})) return *e;
  ToolCall call;
  for (auto [key, dest] : {std::pair{"id", &call.id}, std::pair{"name", &call.name}}) {
    auto v = f.get(key);
    if (!v) return invalid(f.path(key), "Field required");
    if (auto e = expect(*v, element_type::STRING, f.path(key), "a valid string")) return *e;
    *dest = std::string(string_of(*v));
  }
  auto input = f.get("input");
  if (!input) return invalid(f.path("input"), "Field required");
  if (auto e = expect(*input, element_type::OBJECT, f.path("input"), "a valid dictionary")) {
    return *e;
  }
  call.arguments = simdjson::minify(*input);
  if (!calls.insert(call.id).second) {
    return invalid(f.path("id"), "`tool_use` ids must be unique; '" + call.id + "' is repeated");
  }
  if (!m.tool_calls) m.tool_calls.emplace();
  m.tool_calls->push_back(std::move(call));
  return std::nullopt;
}

// An assistant turn: text, tool calls, thinking as reasoning_content.
std::optional<Error> assistant_turn(const Turn& turn, std::set<std::string, std::less<>>& calls,
                                    ChatRequest& out, AnthropicParseInfo& info) {
  Message m;
  m.role = Role::kAssistant;
  std::string text = turn.string_content ? turn.text : std::string();
  bool first = !turn.string_content;
  bool has_text = turn.string_content;
  std::string thinking;
  bool has_thinking = false;
  for (const auto& [block, path] : turn.blocks) {
    auto type = block_type(block, path);
    if (!type) return type.error();
    if (*type == "text") {
      auto t = text_block(block, path);
      if (!t) return t.error();
      append_text(text, *t, first);
      has_text = true;
    } else if (*type == "tool_use") {
      if (auto e = tool_use(block, path, m, calls)) return e;
    } else if (*type == "thinking") {
      Fields f(block, path);
      if (auto e = f.check({"type", "thinking", "signature"})) return *e;
      auto t = f.get("thinking");
      if (!t) return invalid(f.path("thinking"), "Field required");
      if (auto e = expect(*t, element_type::STRING, f.path("thinking"), "a valid string")) {
        return *e;
      }
      if (auto s = f.get("signature")) {
        if (auto e = expect(*s, element_type::STRING, f.path("signature"), "a valid string")) {
          return *e;
        }
      }
      thinking.append(string_of(*t));
      has_thinking = true;
    } else if (*type == "redacted_thinking") {
      Fields f(block, path);
      if (auto e = f.check({"type", "data"})) return *e;
      auto d = f.get("data");
      if (!d) return invalid(f.path("data"), "Field required");
      if (auto e = expect(*d, element_type::STRING, f.path("data"), "a valid string")) return *e;
    } else if (native_block(*type)) {
      note_native(info, path, "a " + std::string(*type) + " block");
    } else {
      return unknown_tag(path, *type, "'text', 'tool_use', 'thinking', 'redacted_thinking'");
    }
  }
  if (has_text) {
    m.content.form = Content::Form::kText;
    m.content.text = std::move(text);
  }
  if (has_thinking) {
    m.extra = Json::object();
    m.extra["reasoning_content"] = std::move(thinking);
  }
  out.messages.push_back(std::move(m));
  return std::nullopt;
}

// Reads `messages` into turns, merging consecutive turns of one role (as Anthropic does).
std::optional<Error> read_turns(const element& v, std::vector<Turn>& turns) {
  if (auto e = expect(v, element_type::ARRAY, "messages", "a valid list")) return e;
  size_t i = 0;
  for (element msg : array_of(v)) {
    std::string path = at("messages", i);
    if (auto e = expect(msg, element_type::OBJECT, path, "a valid dictionary")) return e;
    Fields f(msg, path);
    if (auto e = f.check({"role", "content"})) return e;
    auto role = f.get("role");
    if (!role) return invalid(f.path("role"), "Field required");
    std::string_view role_name = role->is_string() ? string_of(*role) : std::string_view();
    if (role_name != "user" && role_name != "assistant" && role_name != "system") {
      return invalid(f.path("role"), "Input should be 'user', 'assistant' or 'system'");
    }
    Role r = role_name == "user"        ? Role::kUser
             : role_name == "assistant" ? Role::kAssistant
                                        : Role::kSystem;
    auto content = f.get("content");
    if (!content) return invalid(f.path("content"), "Field required");
    if (!content->is_string() && !content->is_array()) {
      return invalid(
          f.path("content"),
          std::string("Input should be a valid string or list, got ") + kind_of(*content));
    }
    bool empty =
        content->is_string() ? string_of(*content).empty() : array_of(*content).size() == 0;
    bool last = i + 1 == array_of(v).size();
    if (empty && !(last && r == Role::kAssistant)) {
      return invalid(f.path("content"),
                     "all messages must have non-empty content except for the optional final "
                     "assistant message");
    }
    if (turns.empty() || turns.back().role != r) {
      turns.push_back(Turn{r, i, {}, {}, false});
      if (content->is_string()) {
        turns.back().text = std::string(string_of(*content));
        turns.back().string_content = true;
        ++i;
        continue;
      }
    } else if (content->is_string()) {
      // Merged after blocks: a string is one more text block's worth of text.
      Turn& t = turns.back();
      if (t.string_content || !t.blocks.empty()) t.text.append(t.text.empty() ? "" : "\n");
      t.text.append(string_of(*content));
      t.string_content = true;
      ++i;
      continue;
    }
    size_t j = 0;
    for (element block : array_of(*content)) {
      turns.back().blocks.emplace_back(block, at(f.path("content"), j++));
    }
    ++i;
  }
  if (turns.empty()) return invalid("messages", "at least one message is required");
  return std::nullopt;
}

// A system turn inside `messages` (as Claude Code sends its context): text only, one system
// message at that place.
std::optional<Error> system_turn(const Turn& turn, ChatRequest& out) {
  Message m;
  m.role = Role::kSystem;
  m.content.form = Content::Form::kText;
  m.content.text = turn.text;
  bool first = !turn.string_content;
  for (const auto& [block, path] : turn.blocks) {
    if (auto e = append_system_block(block, path, m.content.text, first)) return e;
  }
  out.messages.push_back(std::move(m));
  return std::nullopt;
}

std::optional<Error> parse_messages(const element& v, ChatRequest& out, AnthropicParseInfo& info) {
  std::vector<Turn> turns;
  if (auto e = read_turns(v, turns)) return e;
  std::set<std::string, std::less<>> calls;
  for (const Turn& t : turns) {
    auto e = t.role == Role::kUser        ? user_turn(t, calls, out, info)
             : t.role == Role::kAssistant ? assistant_turn(t, calls, out, info)
                                          : system_turn(t, out);
    if (e) return e;
  }
  return std::nullopt;
}

// Anthropic's server tools (versioned type names), which only its API runs.
bool server_tool(std::string_view type) {
  static constexpr std::string_view kPrefixes[] = {
      "web_search_", "web_fetch_",      "bash_",   "text_editor_",
      "computer_",   "code_execution_", "memory_", "tool_search_tool_"};
  return std::any_of(std::begin(kPrefixes), std::end(kPrefixes),
                     [&](std::string_view p) { return type.starts_with(p); });
}

std::optional<Error> parse_tool(const element& tool, const std::string& path, ChatRequest& out,
                                AnthropicParseInfo& info) {
  if (auto e = expect(tool, element_type::OBJECT, path, "a valid dictionary")) return e;
  Fields f(tool, path);
  if (auto t = f.get("type")) {
    if (auto e = expect(*t, element_type::STRING, f.path("type"), "a valid string")) return e;
    std::string_view type = string_of(*t);
    if (server_tool(type)) {
      note_native(info, f.path("type"), "the server tool '" + std::string(type) + "'");
      return std::nullopt;
    }
    if (type != "custom") return unknown_tag(path, type, "'custom' or a server tool");
  }
  // defer_loading (Claude Code's tool search) is a hint to the server, not carried.
  if (auto e = f.check(
          {"type", "name", "description", "input_schema", "cache_control", "defer_loading"})) {
    return e;
  }
  Tool t;
  auto name = f.get("name");
  if (!name) return invalid(f.path("name"), "Field required");
  if (auto e = expect(*name, element_type::STRING, f.path("name"), "a valid string")) return e;
  t.name = std::string(string_of(*name));
  if (t.name.empty() || t.name.size() > 128) {
    return invalid(f.path("name"), "String should have between 1 and 128 characters");
  }
  if (auto d = f.get("description")) {
    if (auto e = expect(*d, element_type::STRING, f.path("description"), "a valid string")) {
      return e;
    }
    t.description = std::string(string_of(*d));
  }
  auto schema = f.get("input_schema");
  if (!schema) return invalid(f.path("input_schema"), "Field required");
  if (auto e =
          expect(*schema, element_type::OBJECT, f.path("input_schema"), "a valid dictionary")) {
    return e;
  }
  append_dom_json(t.parameters, *schema);
  for (const auto& other : *out.tools) {
    if (other.name == t.name) return invalid("tools", "Tool names must be unique.");
  }
  out.tools->push_back(std::move(t));
  return std::nullopt;
}

std::optional<Error> parse_tools(const element& v, ChatRequest& out, AnthropicParseInfo& info) {
  if (auto e = expect(v, element_type::ARRAY, "tools", "a valid list")) return e;
  out.tools.emplace();
  size_t i = 0;
  for (element tool : array_of(v)) {
    if (auto e = parse_tool(tool, at("tools", i++), out, info)) return e;
  }
  out.tools_given = i > 0;
  return std::nullopt;
}

std::optional<Error> parse_tool_choice(const element& v, ChatRequest& out) {
  if (auto e = expect(v, element_type::OBJECT, "tool_choice", "a valid dictionary")) return e;
  auto type = block_type(v, "tool_choice");
  if (!type) return type.error();
  Fields f(v, "tool_choice");
  ToolChoice choice;
  if (*type == "auto" || *type == "any") {
    if (auto e = f.check({"type", "disable_parallel_tool_use"})) return e;
    choice.mode = *type == "auto" ? ToolChoice::Mode::kAuto : ToolChoice::Mode::kRequired;
  } else if (*type == "tool") {
    if (auto e = f.check({"type", "name", "disable_parallel_tool_use"})) return e;
    auto name = f.get("name");
    if (!name) return invalid(f.path("name"), "Field required");
    if (auto e = expect(*name, element_type::STRING, f.path("name"), "a valid string")) return e;
    choice.mode = ToolChoice::Mode::kFunction;
    choice.name = std::string(string_of(*name));
  } else if (*type == "none") {
    if (auto e = f.check({"type"})) return e;
    choice.mode = ToolChoice::Mode::kNone;
  } else {
    return unknown_tag("tool_choice", *type, "'auto', 'any', 'tool', 'none'");
  }
  if (auto d = f.get("disable_parallel_tool_use")) {
    if (auto e = expect(*d, element_type::BOOL, f.path("disable_parallel_tool_use"),
                        "a valid boolean")) {
      return e;
    }
    if (d->get_bool().value_unsafe()) out.parallel_tool_calls = false;
  }
  if (choice.mode != ToolChoice::Mode::kAuto && choice.mode != ToolChoice::Mode::kNone &&
      !out.tools_given) {
    return invalid("tool_choice", "tool_choice may only be specified while providing tools");
  }
  if (choice.mode == ToolChoice::Mode::kFunction && out.tools) {
    bool found = std::any_of(out.tools->begin(), out.tools->end(),
                             [&](const Tool& t) { return t.name == choice.name; });
    if (!found) {
      return invalid("tool_choice.name",
                     "Tool '" + choice.name + "' not found in the provided tools");
    }
  }
  out.tool_choice = std::move(choice);
  return std::nullopt;
}

std::optional<Error> parse_number(const Fields& f, const char* key, double max,
                                  std::optional<double>& out) {
  auto v = f.get(key);
  if (!v) return std::nullopt;
  if (!is_number(*v)) {
    return invalid(key, std::string("Input should be a valid number, got ") + kind_of(*v));
  }
  double d = v->get_double().value_unsafe();
  if (d < 0 || d > max) {
    return invalid(key, "Input should be between 0 and " + Json(max).dump());
  }
  out = d;
  return std::nullopt;
}

std::optional<Error> parse_thinking(const element& v, int64_t max_tokens, ChatRequest& out) {
  auto type = block_type(v, "thinking");
  if (!type) return type.error();
  Fields f(v, "thinking");
  bool enabled = *type == "enabled";
  if (enabled) {
    if (auto e = f.check({"type", "budget_tokens", "display"})) return e;
    auto budget = f.get("budget_tokens");
    if (!budget) return invalid(f.path("budget_tokens"), "Field required");
    if (!is_integer(*budget)) {
      return invalid(f.path("budget_tokens"), "Input should be a valid integer");
    }
    int64_t b = 0;
    if (budget->get_int64().get(b) != simdjson::SUCCESS || b < 1024) {
      return invalid(f.path("budget_tokens"), "Input should be greater than or equal to 1024");
    }
    if (max_tokens > 0 && b >= max_tokens) {
      return invalid("max_tokens",
                     "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult "
                     "our documentation at https://docs.claude.com/en/docs/build-with-claude/"
                     "extended-thinking#max-tokens-and-context-window-size");
    }
  } else if (*type == "adaptive") {
    // The model decides how much to think: thinking on, bounded by max_tokens. `display`
    // (whether thinking is shown summarised) is the client's.
    if (auto e = f.check({"type", "display"})) return e;
    enabled = true;
  } else if (*type == "disabled") {
    if (auto e = f.check({"type"})) return e;
  } else {
    return unknown_tag("thinking", *type, "'enabled', 'adaptive', 'disabled'");
  }
  if (out.extra.is_null()) out.extra = Json::object();
  out.extra["chat_template_kwargs"] = Json{{"enable_thinking", enabled}};
  return std::nullopt;
}

std::optional<Error> parse_metadata(const element& v, ChatRequest& out) {
  if (auto e = expect(v, element_type::OBJECT, "metadata", "a valid dictionary")) return e;
  Fields f(v, "metadata");
  if (auto e = f.check({"user_id"})) return e;
  if (auto u = f.get("user_id")) {
    if (auto e = expect(*u, element_type::STRING, f.path("user_id"), "a valid string")) return e;
    if (string_of(*u).size() > 256) {
      return invalid(f.path("user_id"), "String should have at most 256 characters");
    }
    out.metadata.user = std::string(string_of(*u));
  }
  return std::nullopt;
}

std::optional<Error> parse_limits(const Fields& f, const AnthropicParseOptions& options,
                                  ChatRequest& out) {
  auto max_tokens = f.get("max_tokens");
  if (!max_tokens && !options.count_tokens) return invalid("max_tokens", "Field required");
  if (max_tokens) {
    int64_t n = 0;
    if (!is_integer(*max_tokens) || max_tokens->get_int64().get(n) != simdjson::SUCCESS) {
      return invalid("max_tokens",
                     std::string("Input should be a valid integer, got ") + kind_of(*max_tokens));
    }
    if (n < 1 || n > kMaxTokensLimit) {
      return invalid("max_tokens",
                     "Input should be between 1 and " + std::to_string(kMaxTokensLimit));
    }
    out.limits.max_tokens = n;
  }
  if (auto e = parse_number(f, "temperature", 1.0, out.sampling.temperature)) return e;
  if (auto e = parse_number(f, "top_p", 1.0, out.sampling.top_p)) return e;
  if (auto k = f.get("top_k")) {
    int64_t n = 0;
    if (!is_integer(*k) || k->get_int64().get(n) != simdjson::SUCCESS || n < 0) {
      return invalid("top_k", "Input should be a non-negative integer");
    }
    out.sampling.top_k = n;
  }
  if (auto s = f.get("stop_sequences")) {
    if (auto e = expect(*s, element_type::ARRAY, "stop_sequences", "a valid list")) return e;
    std::vector<std::string> stops;
    size_t i = 0;
    for (element x : array_of(*s)) {
      if (auto e = expect(x, element_type::STRING, at("stop_sequences", i++), "a valid string")) {
        return e;
      }
      stops.emplace_back(string_of(x));
    }
    if (!stops.empty()) {
      out.sampling.stop = std::move(stops);
      out.sampling.stop_is_array = true;
    }
  }
  if (auto s = f.get("stream")) {
    if (auto e = expect(*s, element_type::BOOL, "stream", "a valid boolean")) return e;
    out.stream = s->get_bool().value_unsafe();
  }
  return std::nullopt;
}

// Top-level members only Anthropic's API acts on: a native backend takes them, translation
// cannot honour them.
bool native_member(std::string_view key) {
  return key == "container" || key == "mcp_servers";
}

}  // namespace

Status parse_anthropic_into(std::string_view body, ChatRequest& out, AnthropicParseInfo& info,
                            const AnthropicParseOptions& options) {
  thread_local simdjson::dom::parser parser;
  element doc;
  const bool copy = options.readable_past_end < kJsonReadSlack;
  auto err = parser.parse(body.data(), body.size(), /*realloc_if_needed=*/copy).get(doc);
  if (err != simdjson::SUCCESS) {
    return invalid("", err == simdjson::UTF8_ERROR
                           ? std::string("the request body is not valid UTF-8")
                           : std::string("the request body is not valid JSON: ") +
                                 simdjson::error_message(err));
  }
  if (auto e = expect(doc, element_type::OBJECT, "", "a JSON object")) return *e;
  out.endpoint = Endpoint::kChatCompletions;
  Fields f(doc, "");
  for (auto [key, value] : object_of(doc)) {
    if (key == "model") ++info.model_keys;
    if (native_member(key)) note_native(info, std::string(key), "'" + std::string(key) + "'");
  }
  auto extra = options.count_tokens
                   ? f.check({"model", "messages", "system", "tools", "tool_choice", "thinking",
                              "mcp_servers", "context_management", "output_config"})
                   : f.check({"model", "messages", "system", "max_tokens", "stop_sequences",
                              "stream", "temperature", "top_p", "top_k", "tools", "tool_choice",
                              "metadata", "thinking", "service_tier", "container", "mcp_servers",
                              "context_management", "output_config"});
  if (auto e = extra) {
    Error error = *e;
    // Fields is rooted at "": its paths start with a dot.
    if (error.param.starts_with('.')) error.param.erase(0, 1);
    if (error.message.starts_with('.')) error.message.erase(0, 1);
    return error;
  }
  auto model = f.get("model");
  if (!model) return invalid("model", "Field required");
  if (auto e = expect(*model, element_type::STRING, "model", "a valid string")) return *e;
  out.model = std::string(string_of(*model));
  if (auto e = parse_limits(f, options, out)) return *e;
  if (auto s = f.get("system")) {
    if (auto e = parse_system(*s, out)) return *e;
  }
  auto messages = f.get("messages");
  if (!messages) return invalid("messages", "Field required");
  if (auto t = f.get("tools")) {
    if (auto e = parse_tools(*t, out, info)) return *e;
  }
  if (auto c = f.get("tool_choice")) {
    if (auto e = parse_tool_choice(*c, out)) return *e;
  }
  if (auto e = parse_messages(*messages, out, info)) return *e;
  if (auto m = f.get("metadata")) {
    if (auto e = parse_metadata(*m, out)) return *e;
  }
  if (auto t = f.get("thinking")) {
    if (auto e = parse_thinking(*t, out.limits.max_tokens.value_or(0), out)) return *e;
  }
  // Hints about the server's own work (clearing old tool results near the context's end, how
  // much effort to spend), not about the answer's form: a native backend gets them in the raw
  // body; translated, they have no counterpart and are not carried.
  for (const char* hint : {"context_management", "output_config"}) {
    if (auto h = f.get(hint)) {
      if (auto e = expect(*h, element_type::OBJECT, hint, "a valid dictionary")) return *e;
    }
  }
  if (auto s = f.get("service_tier")) {
    if (!s->is_string() || (string_of(*s) != "auto" && string_of(*s) != "standard_only")) {
      return invalid("service_tier", "Input should be 'auto' or 'standard_only'");
    }
  }
  return {};
}

}  // namespace ferry::api
