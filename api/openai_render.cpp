#include "api/openai_render.h"

namespace ferry::api {

namespace {

// Writes the kept members of `extra` (an object, or null) after the known ones.
void append_extra(Json& out, const Json& extra) {
  if (!extra.is_object()) return;
  for (auto it = extra.begin(); it != extra.end(); ++it) out[it.key()] = it.value();
}

Json content_json(const Content& content) {
  if (content.form == Content::Form::kText) return content.text;
  Json parts = Json::array();
  for (const ContentPart& p : content.parts) {
    Json part = Json::object();
    part["type"] = p.type;
    if (p.type == "text") part["text"] = p.text;
    append_extra(part, p.extra);
    parts.push_back(std::move(part));
  }
  return parts;
}

Json tool_call_json(const ToolCall& call) {
  Json out = Json::object();
  out["id"] = call.id;
  out["type"] = call.type;
  out["function"] = Json{{"name", call.name}, {"arguments", call.arguments}};
  append_extra(out, call.extra);
  return out;
}

Json message_json(const Message& m) {
  Json out = Json::object();
  out["role"] = std::string(role_name(m.role));
  if (m.content.form != Content::Form::kAbsent) out["content"] = content_json(m.content);
  if (m.name) out["name"] = *m.name;
  if (m.tool_calls) {
    Json calls = Json::array();
    for (const ToolCall& c : *m.tool_calls) calls.push_back(tool_call_json(c));
    out["tool_calls"] = std::move(calls);
  }
  if (m.tool_call_id) out["tool_call_id"] = *m.tool_call_id;
  append_extra(out, m.extra);
  return out;
}

Json tool_json(const Tool& t) {
  Json fn = Json::object();
  fn["name"] = t.name;
  if (t.description) fn["description"] = *t.description;
  if (!t.parameters.is_null()) fn["parameters"] = t.parameters;
  if (t.strict) fn["strict"] = *t.strict;
  append_extra(fn, t.function_extra);
  Json out = Json::object();
  out["type"] = "function";
  out["function"] = std::move(fn);
  append_extra(out, t.extra);
  return out;
}

Json tool_choice_json(const ToolChoice& c) {
  switch (c.mode) {
    case ToolChoice::Mode::kAuto:
      return "auto";
    case ToolChoice::Mode::kNone:
      return "none";
    case ToolChoice::Mode::kRequired:
      return "required";
    case ToolChoice::Mode::kFunction:
      break;
  }
  return Json{{"type", "function"}, {"function", Json{{"name", c.name}}}};
}

Json prompt_json(const Prompt& p) {
  auto item = [](const PromptItem& i) -> Json {
    switch (i.kind) {
      case PromptItem::Kind::kText:
        return i.text;
      case PromptItem::Kind::kTokenId:
        return static_cast<uint64_t>(i.tokens.at(0));
      case PromptItem::Kind::kTokenIds:
        break;
    }
    Json ids = Json::array();
    for (int32_t t : i.tokens) ids.push_back(static_cast<uint64_t>(t));
    return ids;
  };
  if (!p.array) return p.items.empty() ? Json("") : item(p.items[0]);
  Json out = Json::array();
  for (const PromptItem& i : p.items) out.push_back(item(i));
  return out;
}

Json messages_json(const std::vector<Message>& messages) {
  Json out = Json::array();
  for (const Message& m : messages) out.push_back(message_json(m));
  return out;
}

Json tools_json(const ChatRequest& r) {
  Json out = Json::array();
  for (const Tool& t : *r.tools) out.push_back(tool_json(t));
  return out;
}

template <typename T>
void put(Json& out, const char* key, const std::optional<T>& v) {
  if (v) out[key] = *v;
}

// Sampling, logprobs and limits in OpenAI's order.
void parameters_json(const ChatRequest& r, Json& out) {
  const Sampling& s = r.sampling;
  put(out, "max_tokens", r.limits.max_tokens);
  put(out, "max_completion_tokens", r.limits.max_completion_tokens);
  put(out, "n", r.limits.n);
  put(out, "temperature", s.temperature);
  put(out, "top_p", s.top_p);
  put(out, "presence_penalty", s.presence_penalty);
  put(out, "frequency_penalty", s.frequency_penalty);
  put(out, "seed", s.seed);
  if (s.logit_bias) {
    Json bias = Json::object();
    for (const auto& [id, v] : *s.logit_bias) bias[std::to_string(id)] = v;
    out["logit_bias"] = std::move(bias);
  }
  if (s.stop) out["stop"] = s.stop_is_array ? Json(*s.stop) : Json(s.stop->at(0));
  if (r.chat()) {
    put(out, "logprobs", r.logprobs.logprobs);
    put(out, "top_logprobs", r.logprobs.top_logprobs);
  } else {
    put(out, "logprobs", r.logprobs.top_logprobs);
  }
  put(out, "echo", r.limits.echo);
  put(out, "best_of", r.limits.best_of);
  put(out, "min_p", s.min_p);
  put(out, "top_k", s.top_k);
  put(out, "repetition_penalty", s.repetition_penalty);
  put(out, "ignore_eos", s.ignore_eos);
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
  Json out = Json::object();
  out["model"] = r.model;
  if (r.chat()) {
    out["messages"] = messages_json(r.messages);
  } else {
    out["prompt"] = prompt_json(r.prompt);
  }
  put(out, "stream", r.stream);
  if (r.stream_options) {
    Json so = Json::object();
    put(so, "include_usage", r.stream_options->include_usage);
    append_extra(so, r.stream_options->extra);
    out["stream_options"] = std::move(so);
  }
  parameters_json(r, out);
  if (r.tools) out["tools"] = tools_json(r);
  if (r.tool_choice) out["tool_choice"] = tool_choice_json(*r.tool_choice);
  put(out, "parallel_tool_calls", r.parallel_tool_calls);
  if (!r.functions.is_null()) out["functions"] = r.functions;
  if (r.response_format) {
    Json rf = Json::object();
    rf["type"] = r.response_format->type;
    if (!r.response_format->json_schema.is_null())
      rf["json_schema"] = r.response_format->json_schema;
    append_extra(rf, r.response_format->extra);
    out["response_format"] = std::move(rf);
  }
  put(out, "user", r.metadata.user);
  if (!r.metadata.metadata.is_null()) out["metadata"] = r.metadata.metadata;
  append_extra(out, r.extra);
  return out;
}

std::string render_openai(const ChatRequest& r, std::string_view upstream_model,
                          const Overrides& overrides) {
  Json body = to_openai_json(r);
  body["model"] = std::string(upstream_model);
  if (r.streams()) body["stream_options"]["include_usage"] = true;
  if (overrides.max_tokens) {
    if (r.limits.max_completion_tokens) body["max_completion_tokens"] = *overrides.max_tokens;
    if (r.limits.max_tokens || !r.limits.max_completion_tokens) {
      body["max_tokens"] = *overrides.max_tokens;
    }
  }
  if (overrides.temperature) body["temperature"] = *overrides.temperature;
  if (overrides.top_p) body["top_p"] = *overrides.top_p;
  return body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json template_input(const ChatRequest& r) {
  Json out = Json::object();
  if (!r.chat()) {
    out["prompt"] = prompt_json(r.prompt);
    return out;
  }
  out["messages"] = messages_json(r.messages);
  if (r.tools) {
    out["tools"] = tools_json(r);
  } else if (r.extra.is_object() && r.extra.contains("tools")) {
    out["tools"] = r.extra["tools"];
  }
  if (r.extra.is_object() && r.extra.contains("chat_template_kwargs")) {
    out["chat_template_kwargs"] = r.extra["chat_template_kwargs"];
  }
  return out;
}

}  // namespace ferry::api
