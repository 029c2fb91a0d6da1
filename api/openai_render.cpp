#include "api/openai_render.h"

#include <cmath>
#include <string>
#include <type_traits>

#include "api/json_writer.h"

namespace ferry::api {

namespace {

// ---- JSON values kept as sent (extra members, schemas, metadata) -----------------------------

// Appends `v` as nlohmann::json::dump() writes it (compact; strings through json_text's escaper,
// which escapes as dump() does and writes bad UTF-8 as U+FFFD).
void append_json(std::string& out, const Json& v) {
  switch (v.type()) {
    case Json::value_t::object: {
      out.push_back('{');
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out.push_back(',');
        first = false;
        append_json_string(out, it.key());
        out.push_back(':');
        append_json(out, it.value());
      }
      out.push_back('}');
      return;
    }
    case Json::value_t::array: {
      out.push_back('[');
      bool first = true;
      for (const Json& e : v) {
        if (!first) out.push_back(',');
        first = false;
        append_json(out, e);
      }
      out.push_back(']');
      return;
    }
    case Json::value_t::string:
      append_json_string(out, v.get_ref<const std::string&>());
      return;
    case Json::value_t::number_integer:
      append_json_int(out, v.get<int64_t>());
      return;
    case Json::value_t::boolean:
      out.append(v.get<bool>() ? "true" : "false");
      return;
    case Json::value_t::null:
    case Json::value_t::discarded:
      out.append("null");
      return;
    default:  // unsigned and floating point numbers, binary: nlohmann's own formatting
      out.append(v.dump(-1, ' ', false, Json::error_handler_t::replace));
      return;
  }
}

// An object being written: members after the first get their comma.
class Object {
 public:
  explicit Object(std::string& out) : out_(out) { out_.push_back('{'); }
  ~Object() { out_.push_back('}'); }
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;
  // Writes `"key":` for a name of ferry's own (OpenAI's member names, a token id: nothing in it
  // to escape, so it is copied) and returns the output for the value.
  std::string& key(std::string_view k) {
    if (!first_) out_.push_back(',');
    first_ = false;
    out_.push_back('"');
    out_.append(k);
    out_.append("\":", 2);
    return out_;
  }
  // The same for a name the client sent (a kept member's): escaped.
  std::string& client_key(std::string_view k) {
    if (!first_) out_.push_back(',');
    first_ = false;
    append_json_string(out_, k);
    out_.push_back(':');
    return out_;
  }
  void str(std::string_view k, std::string_view v) { append_json_string(key(k), v); }
  void json(std::string_view k, const Json& v) { append_json(key(k), v); }
  void boolean(std::string_view k, bool v) { key(k).append(v ? "true" : "false"); }
  void num(std::string_view k, int64_t v) { append_json_int(key(k), v); }
  void num(std::string_view k, double v) { append_json(key(k), Json(v)); }
  template <typename T>
  void opt(std::string_view k, const std::optional<T>& v) {
    if (!v) return;
    if constexpr (std::is_same_v<T, bool>) {
      boolean(k, *v);
    } else if constexpr (std::is_same_v<T, std::string>) {
      str(k, *v);
    } else {
      num(k, *v);
    }
  }
  // The kept members of `extra` (an object, or null) after the known ones, but those `skip`
  // names (written above from a value that replaces them).
  template <typename Skip>
  void extra(const Json& extra, Skip&& skip) {
    if (!extra.is_object()) return;
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      if (!skip(it.key())) append_json(client_key(it.key()), it.value());
    }
  }
  void extra(const Json& extra) {
    this->extra(extra, [](const std::string&) { return false; });
  }

 private:
  std::string& out_;
  bool first_ = true;
};

// A JSON array of `items`, each written by write_one(out, item).
template <typename T, typename WriteOne>
void write_array(std::string& out, const std::vector<T>& items, WriteOne&& write_one) {
  out.push_back('[');
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out.push_back(',');
    write_one(out, items[i]);
  }
  out.push_back(']');
}

// ---- the request's parts --------------------------------------------------------------------

void write_content(std::string& out, const Content& content) {
  if (content.form == Content::Form::kText) {
    append_json_string(out, content.text);
    return;
  }
  write_array(out, content.parts, [](std::string& o, const ContentPart& p) {
    Object part(o);
    part.str("type", p.type);
    if (p.type == "text") part.str("text", p.text);
    part.extra(p.extra);
  });
}

void write_tool_call(std::string& out, const ToolCall& call) {
  Object o(out);
  o.str("id", call.id);
  o.str("type", call.type);
  {
    Object fn(o.key("function"));
    fn.str("name", call.name);
    fn.str("arguments", call.arguments);
  }
  o.extra(call.extra);
}

void write_message(std::string& out, const Message& m) {
  Object o(out);
  o.str("role", role_name(m.role));
  if (m.content.form != Content::Form::kAbsent) write_content(o.key("content"), m.content);
  o.opt("name", m.name);
  if (m.tool_calls) write_array(o.key("tool_calls"), *m.tool_calls, write_tool_call);
  o.opt("tool_call_id", m.tool_call_id);
  o.extra(m.extra);
}

void write_messages(std::string& out, const std::vector<Message>& messages) {
  write_array(out, messages, write_message);
}

void write_tool(std::string& out, const Tool& t) {
  Object o(out);
  o.str("type", "function");
  {
    Object fn(o.key("function"));
    fn.str("name", t.name);
    fn.opt("description", t.description);
    if (!t.parameters.empty()) fn.key("parameters").append(t.parameters);  // JSON text
    fn.opt("strict", t.strict);
    fn.extra(t.function_extra);
  }
  o.extra(t.extra);
}

void write_tools(std::string& out, const std::vector<Tool>& tools) {
  write_array(out, tools, write_tool);
}

void write_tool_choice(std::string& out, const ToolChoice& c) {
  switch (c.mode) {
    case ToolChoice::Mode::kAuto:
      out.append("\"auto\"");
      return;
    case ToolChoice::Mode::kNone:
      out.append("\"none\"");
      return;
    case ToolChoice::Mode::kRequired:
      out.append("\"required\"");
      return;
    case ToolChoice::Mode::kFunction:
      break;
  }
  Object o(out);
  o.str("type", "function");
  Object fn(o.key("function"));
  fn.str("name", c.name);
}

void write_prompt(std::string& out, const Prompt& p) {
  auto item = [&](const PromptItem& i) {
    switch (i.kind) {
      case PromptItem::Kind::kText:
        append_json_string(out, i.text);
        return;
      case PromptItem::Kind::kTokenId:
        append_json_int(out, i.tokens.at(0));
        return;
      case PromptItem::Kind::kTokenIds:
        break;
    }
    write_array(out, i.tokens, [](std::string& o, int32_t t) { append_json_int(o, t); });
  };
  if (!p.array) {
    if (p.items.empty()) {
      out.append("\"\"");
    } else {
      item(p.items[0]);
    }
    return;
  }
  write_array(out, p.items, [&](std::string&, const PromptItem& i) { item(i); });
}

// What render_openai changes of the typed value for a backend.
struct Tweaks {
  std::string_view model;  // empty: the request's
  bool force_usage = false;
  Overrides overrides;
};

// Which names a rule's max_tokens is written under: the one the client used, max_tokens when
// it used neither.
bool caps_max_completion_tokens(const ChatRequest& r, const Overrides& ov) {
  return ov.max_tokens && r.limits.max_completion_tokens;
}
bool caps_max_tokens(const ChatRequest& r, const Overrides& ov) {
  return ov.max_tokens && (r.limits.max_tokens || !r.limits.max_completion_tokens);
}

// Sampling, logprobs and limits in OpenAI's order, a rule's overrides in place of the
// client's values (max_tokens under the name the client used, max_tokens when none).
void write_parameters(Object& o, const ChatRequest& r, const Overrides& ov) {
  const Sampling& s = r.sampling;
  o.opt("max_tokens", caps_max_tokens(r, ov) ? ov.max_tokens : r.limits.max_tokens);
  o.opt("max_completion_tokens",
        caps_max_completion_tokens(r, ov) ? ov.max_tokens : r.limits.max_completion_tokens);
  o.opt("n", r.limits.n);
  o.opt("temperature", ov.temperature ? ov.temperature : s.temperature);
  o.opt("top_p", ov.top_p ? ov.top_p : s.top_p);
  o.opt("presence_penalty", s.presence_penalty);
  o.opt("frequency_penalty", s.frequency_penalty);
  o.opt("seed", s.seed);
  if (s.logit_bias) {
    Object bias(o.key("logit_bias"));
    for (const auto& [id, v] : *s.logit_bias) bias.num(std::to_string(id), v);
  }
  if (s.stop) {
    if (s.stop_is_array) {
      write_array(o.key("stop"), *s.stop,
                  [](std::string& out, const std::string& v) { append_json_string(out, v); });
    } else {
      o.str("stop", s.stop->at(0));
    }
  }
  if (r.chat()) {
    o.opt("logprobs", r.logprobs.logprobs);
    o.opt("top_logprobs", r.logprobs.top_logprobs);
  } else {
    o.opt("logprobs", r.logprobs.top_logprobs);
  }
  o.opt("echo", r.limits.echo);
  o.opt("best_of", r.limits.best_of);
  o.opt("min_p", s.min_p);
  o.opt("top_k", s.top_k);
  o.opt("repetition_penalty", s.repetition_penalty);
  o.opt("ignore_eos", s.ignore_eos);
}

void write_stream_options(Object& o, const ChatRequest& r, bool force_usage) {
  if (!r.stream_options && !force_usage) return;
  Object so(o.key("stream_options"));
  if (force_usage) {
    so.boolean("include_usage", true);
  } else {
    so.opt("include_usage", r.stream_options->include_usage);
  }
  if (r.stream_options) {
    so.extra(r.stream_options->extra,
             [&](const std::string& k) { return force_usage && k == "include_usage"; });
  }
}

void write_request(std::string& out, const ChatRequest& r, const Tweaks& t) {
  Object o(out);
  o.str("model", t.model.empty() ? std::string_view(r.model) : t.model);
  if (r.chat()) {
    write_messages(o.key("messages"), r.messages);
  } else {
    write_prompt(o.key("prompt"), r.prompt);
  }
  o.opt("stream", r.stream);
  write_stream_options(o, r, t.force_usage);
  write_parameters(o, r, t.overrides);
  if (r.tools) write_tools(o.key("tools"), *r.tools);
  if (r.tool_choice) write_tool_choice(o.key("tool_choice"), *r.tool_choice);
  o.opt("parallel_tool_calls", r.parallel_tool_calls);
  if (!r.functions.is_null()) o.json("functions", r.functions);
  if (r.response_format) {
    Object rf(o.key("response_format"));
    rf.str("type", r.response_format->type);
    if (!r.response_format->json_schema.is_null()) {
      rf.json("json_schema", r.response_format->json_schema);
    }
    rf.extra(r.response_format->extra);
  }
  o.opt("user", r.metadata.user);
  if (!r.metadata.metadata.is_null()) o.json("metadata", r.metadata.metadata);
  // A member kept in extra (sent as null, or not in OpenAI's shape) that a tweak wrote above.
  const Overrides& ov = t.overrides;
  o.extra(r.extra, [&](const std::string& k) {
    return (t.force_usage && k == "stream_options") ||
           (caps_max_tokens(r, ov) && k == "max_tokens") ||
           (caps_max_completion_tokens(r, ov) && k == "max_completion_tokens") ||
           (ov.temperature && k == "temperature") || (ov.top_p && k == "top_p");
  });
}

}  // namespace

std::string_view role_name(Role role) {
  switch (role) {
    case Role::kSystem:
      return "system";
    case Role::kDeveloper:
      return "developer";
    case Role::kUser:
      return "user";
    case Role::kAssistant:
      return "assistant";
    case Role::kTool:
      return "tool";
    case Role::kFunction:
      return "function";
  }
  return "user";
}

std::optional<Role> role_from_name(std::string_view name) {
  for (Role r : {Role::kSystem, Role::kDeveloper, Role::kUser, Role::kAssistant, Role::kTool,
                 Role::kFunction}) {
    if (role_name(r) == name) return r;
  }
  return std::nullopt;
}

Json to_openai_json(const ChatRequest& r) {
  std::string text;
  write_request(text, r, {});
  return Json::parse(text);
}

std::string render_openai(const ChatRequest& r, std::string_view upstream_model,
                          const Overrides& overrides) {
  std::string out;
  // Room for the texts as they are (escaping rarely adds much) and the JSON around them, so that
  // a long conversation is not copied over as the body grows.
  size_t texts = 0;
  for (const Message& m : r.messages) {
    texts += m.content.text.size();
    for (const ContentPart& p : m.content.parts) texts += p.text.size();
  }
  out.reserve(texts + r.messages.size() * 64 + 256);
  write_request(out, r, {upstream_model, r.streams(), overrides});
  return out;
}

namespace {

// ---- the chat template's input as a tree --------------------------------------------------
// template_input builds the tree the text writer's output would parse into (write_messages,
// write_tools, write_prompt above), without the text: the same members in the same order, and
// the two things a round trip through text changes done here too, so that a template sees the
// same value either way (tests/api: TemplateInput.*): a string that is not well-formed UTF-8 has
// each bad byte as U+FFFD (the escaper's rule), and a non-negative integer is unsigned (how
// nlohmann reads a number without a sign).

std::string text_string(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  std::string quoted;
  append_json_string(quoted, s);
  return Json::parse(quoted).get<std::string>();  // the escaper's U+FFFD, as a parse reads it
}

Json text_tree(const Json& v) {
  switch (v.type()) {
    case Json::value_t::object: {
      Json out = Json::object();
      for (auto it = v.begin(); it != v.end(); ++it) out[text_string(it.key())] = text_tree(*it);
      return out;
    }
    case Json::value_t::array: {
      Json out = Json::array();
      out.get_ref<Json::array_t&>().reserve(v.size());
      for (const Json& e : v) out.push_back(text_tree(e));
      return out;
    }
    case Json::value_t::string:
      return text_string(v.get_ref<const std::string&>());
    case Json::value_t::number_integer: {
      const int64_t n = v.get<int64_t>();
      if (n >= 0) return Json(static_cast<uint64_t>(n));
      return v;
    }
    case Json::value_t::number_float:  // dump() writes a NaN or an infinity as null
      return std::isfinite(v.get<double>()) ? v : Json(nullptr);
    case Json::value_t::discarded:
      return nullptr;
    default:
      return v;
  }
}

// The members of `extra` (an object, or null) after the known ones, as Object::extra writes them.
void add_extra(Json& o, const Json& extra) {
  if (!extra.is_object()) return;
  for (auto it = extra.begin(); it != extra.end(); ++it) o[text_string(it.key())] = text_tree(*it);
}

Json content_tree(const Content& content) {
  if (content.form == Content::Form::kText) return text_string(content.text);
  Json parts = Json::array();
  for (const ContentPart& p : content.parts) {
    Json part = Json::object();
    part["type"] = text_string(p.type);
    if (p.type == "text") part["text"] = text_string(p.text);
    add_extra(part, p.extra);
    parts.push_back(std::move(part));
  }
  return parts;
}

Json message_tree(const Message& m) {
  Json o = Json::object();
  o["role"] = std::string(role_name(m.role));
  if (m.content.form != Content::Form::kAbsent) o["content"] = content_tree(m.content);
  if (m.name) o["name"] = text_string(*m.name);
  if (m.tool_calls) {
    Json calls = Json::array();
    for (const ToolCall& call : *m.tool_calls) {
      Json c = Json::object();
      c["id"] = text_string(call.id);
      c["type"] = text_string(call.type);
      Json fn = Json::object();
      fn["name"] = text_string(call.name);
      fn["arguments"] = text_string(call.arguments);
      c["function"] = std::move(fn);
      add_extra(c, call.extra);
      calls.push_back(std::move(c));
    }
    o["tool_calls"] = std::move(calls);
  }
  if (m.tool_call_id) o["tool_call_id"] = text_string(*m.tool_call_id);
  add_extra(o, m.extra);
  return o;
}

Json tool_tree(const Tool& t) {
  Json o = Json::object();
  o["type"] = "function";
  Json fn = Json::object();
  fn["name"] = text_string(t.name);
  if (t.description) fn["description"] = text_string(*t.description);
  if (!t.parameters.empty()) fn["parameters"] = Json::parse(t.parameters);  // what its text reads
  if (t.strict) fn["strict"] = *t.strict;
  add_extra(fn, t.function_extra);
  o["function"] = std::move(fn);
  add_extra(o, t.extra);
  return o;
}

Json prompt_tree(const Prompt& p) {
  auto item = [](const PromptItem& i) -> Json {
    switch (i.kind) {
      case PromptItem::Kind::kText:
        return text_string(i.text);
      case PromptItem::Kind::kTokenId:
        return text_tree(Json(static_cast<int64_t>(i.tokens.at(0))));
      case PromptItem::Kind::kTokenIds:
        break;
    }
    Json ids = Json::array();
    for (int32_t t : i.tokens) ids.push_back(text_tree(Json(static_cast<int64_t>(t))));
    return ids;
  };
  if (!p.array) return p.items.empty() ? Json("") : item(p.items[0]);
  Json items = Json::array();
  for (const PromptItem& i : p.items) items.push_back(item(i));
  return items;
}

}  // namespace

Json template_input(const ChatRequest& r) {
  Json o = Json::object();
  if (!r.chat()) {
    o["prompt"] = prompt_tree(r.prompt);
    return o;
  }
  Json messages = Json::array();
  messages.get_ref<Json::array_t&>().reserve(r.messages.size());
  for (const Message& m : r.messages) messages.push_back(message_tree(m));
  o["messages"] = std::move(messages);
  if (r.tools) {
    Json tools = Json::array();
    for (const Tool& t : *r.tools) tools.push_back(tool_tree(t));
    o["tools"] = std::move(tools);
  } else if (r.extra.is_object() && r.extra.contains("tools")) {
    o["tools"] = text_tree(r.extra["tools"]);
  }
  if (r.extra.is_object() && r.extra.contains("chat_template_kwargs")) {
    o["chat_template_kwargs"] = text_tree(r.extra["chat_template_kwargs"]);
  }
  return o;
}

Json template_input_by_text(const ChatRequest& r) {
  // Written as text, then read into a tree: the definition template_input keeps to.
  std::string text;
  {
    Object o(text);
    if (!r.chat()) {
      write_prompt(o.key("prompt"), r.prompt);
    } else {
      write_messages(o.key("messages"), r.messages);
      if (r.tools) {
        write_tools(o.key("tools"), *r.tools);
      } else if (r.extra.is_object() && r.extra.contains("tools")) {
        o.json("tools", r.extra["tools"]);
      }
      if (r.extra.is_object() && r.extra.contains("chat_template_kwargs")) {
        o.json("chat_template_kwargs", r.extra["chat_template_kwargs"]);
      }
    }
  }
  return Json::parse(text);
}

}  // namespace ferry::api
