#include "adapters/local_constraint.h"

#include <nlohmann/json.hpp>

#include "common/sha256.h"

namespace ferry::adapters {
namespace {

using Json = nlohmann::ordered_json;

Error invalid(std::string message, std::string param) {
  return Error::make(ErrorCode::kInvalidRequest, std::move(message), std::move(param));
}

Error unsupported(std::string message, std::string param) {
  return unsupported_by_target(std::move(message), std::move(param));
}

bool is_ws(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

bool all_ws(std::string_view s) {
  for (char c : s) {
    if (!is_ws(c)) return false;
  }
  return true;
}

Result<ConstraintRequest> response_format_request(const api::ResponseFormat& f) {
  ConstraintRequest c;
  if (f.type == "json_object") {
    c.mode = ConstraintMode::kJsonObject;
    return c;
  }
  if (f.type != "json_schema") {
    return invalid("'response_format.type' must be 'text', 'json_object' or 'json_schema'",
                   "response_format");
  }
  if (!f.json_schema.is_object() || !f.json_schema.contains("schema") ||
      !f.json_schema["schema"].is_object()) {
    return invalid("'response_format.json_schema.schema' must be a JSON Schema object",
                   "response_format");
  }
  c.mode = ConstraintMode::kJsonSchema;
  c.schema_json = f.json_schema["schema"].dump();
  return c;
}

constrain::ToolChoice tool_choice_of(const api::ToolChoice& c) {
  switch (c.mode) {
    case api::ToolChoice::Mode::kNone:
      return constrain::ToolChoice::kNone;
    case api::ToolChoice::Mode::kRequired:
      return constrain::ToolChoice::kRequired;
    case api::ToolChoice::Mode::kFunction:
      return constrain::ToolChoice::kNamed;
    case api::ToolChoice::Mode::kAuto:
      break;
  }
  return constrain::ToolChoice::kAuto;
}

// Why this engine cannot write tool calls for template `t`, or "" when it can.
std::string tools_refusal(const TemplateTools& t) {
  if (!t.renders_tools) {
    return "this local model's chat template ignores 'tools' (the model would never see them)";
  }
  if (t.format == ToolFormat::kLlama3Json || t.format == ToolFormat::kMistral) {
    return "tool calls in the " + std::string(tool_format_name(t.format)) +
           " format of this model's chat template are not supported by the local engine yet";
  }
  return {};
}

Result<ConstraintRequest> tools_request(const api::ChatRequest& r, const TemplateTools& t) {
  ConstraintRequest c;
  const api::ToolChoice choice = r.tool_choice.value_or(api::ToolChoice{});
  c.tools.choice = tool_choice_of(choice);
  c.tools.named = choice.name;
  c.tools.parallel_tool_calls = r.parallel_tool_calls.value_or(true);
  const std::string refusal = tools_refusal(t);
  if (c.tools.choice == constrain::ToolChoice::kNone && !refusal.empty()) {
    return ConstraintRequest{};  // plain text: the model is not shown the tools either way
  }
  if (!refusal.empty()) return unsupported(refusal, "tools");
  for (const api::Tool& tool : *r.tools) {
    c.tools.functions.push_back(
        {tool.name, tool.parameters.is_null() ? std::string() : tool.parameters.dump()});
  }
  c.mode = ConstraintMode::kTools;
  return c;
}

}  // namespace

Error unsupported_by_target(std::string message, std::string param) {
  return Error::make(ErrorCode::kInvalidRequest, std::move(message), std::move(param),
                     std::string(kUnsupportedByTarget));
}

std::string_view constraint_mode_name(ConstraintMode mode) {
  switch (mode) {
    case ConstraintMode::kJsonObject:
      return "json_object";
    case ConstraintMode::kJsonSchema:
      return "json_schema";
    case ConstraintMode::kTools:
      return "tools";
    case ConstraintMode::kNone:
      break;
  }
  return "none";
}

std::string_view tool_format_name(ToolFormat format) {
  switch (format) {
    case ToolFormat::kHermes:
      return "Hermes <tool_call>";
    case ToolFormat::kLlama3Json:
      return "Llama 3 JSON";
    case ToolFormat::kMistral:
      return "Mistral [TOOL_CALLS]";
    case ToolFormat::kGeneric:
      break;
  }
  return "generic";
}

TemplateTools detect_template_tools(const tokenizer::ChatFormatter& chat) {
  if (chat.uses_openai_accounting()) return {};
  const Json base = {{"messages", Json::array({{{"role", "user"}, {"content", "ping"}}})}};
  Json with = base;
  with["tools"] =
      Json::array({{{"type", "function"},
                    {"function",
                     {{"name", "ferry_probe_tool"},
                      {"description", "probe"},
                      {"parameters", {{"type", "object"}, {"properties", Json::object()}}}}}}});
  auto plain = chat.render(base);
  auto tooled = chat.render(with);
  if (!plain || !tooled || *plain == *tooled) return {};
  TemplateTools t;
  t.renders_tools = tooled->find("ferry_probe_tool") != std::string::npos;
  const std::string& s = *tooled;
  if (s.find("<tool_call>") != std::string::npos) {
    t.format = ToolFormat::kHermes;
  } else if (s.find("[AVAILABLE_TOOLS]") != std::string::npos ||
             s.find("[TOOL_CALLS]") != std::string::npos) {
    t.format = ToolFormat::kMistral;
  } else if (s.find("<|python_tag|>") != std::string::npos ||
             s.find("Environment: ipython") != std::string::npos) {
    t.format = ToolFormat::kLlama3Json;
  }
  return t;
}

Result<ConstraintRequest> constraint_request(const api::ChatRequest& r, const TemplateTools& t) {
  if (!r.functions.is_null()) {
    return unsupported("the legacy 'functions' are not supported by the local engine; use 'tools'",
                       "functions");
  }
  if (r.has_tools() && !r.tools) return invalid("'tools' must be an array of tools", "tools");
  if (r.has_response_format() && !r.response_format) {
    return invalid("'response_format' must be an object with a 'type'", "response_format");
  }
  if (r.extra.is_object() && r.extra.contains("tool_choice")) {
    return invalid("'tool_choice' must be 'auto', 'none', 'required' or a named function",
                   "tool_choice");
  }
  const bool tools = r.tools && !r.tools->empty();
  const bool format = r.response_format && r.response_format->type != "text";
  if (!tools && r.tool_choice && r.tool_choice->mode != api::ToolChoice::Mode::kNone &&
      r.tool_choice->mode != api::ToolChoice::Mode::kAuto) {
    return invalid("'tool_choice' needs 'tools'", "tool_choice");
  }
  if (tools && format) {
    return unsupported(
        "'response_format' together with 'tools' is not supported by the local engine",
        "response_format");
  }
  if (format) return response_format_request(*r.response_format);
  if (tools) return tools_request(r, t);
  return ConstraintRequest{};
}

Result<constrain::CompiledGrammar> compile_constraint(const ConstraintRequest& c,
                                                      constrain::GrammarCache& cache) {
  Result<constrain::CompiledGrammar> out = Error::make(ErrorCode::kInternal, "no constraint");
  std::string param = "response_format";
  switch (c.mode) {
    case ConstraintMode::kJsonObject:
      out = cache.json_object();
      break;
    case ConstraintMode::kJsonSchema:
      out = cache.json_schema(c.schema_json);
      break;
    case ConstraintMode::kTools:
      out = cache.tools(c.tools);
      param = "tools";
      break;
    case ConstraintMode::kNone:
      break;
  }
  if (out) return out;
  Error e = std::move(out).error();
  if (e.code == ErrorCode::kInvalidRequest) {
    if (e.param.empty() || c.mode != ConstraintMode::kTools) e.param = param;
    e.type_code = std::string(kUnsupportedByTarget);
  }
  return e;
}

// ---- ToolCallParser ---------------------------------------------------------------------------

ToolCallParser::ToolCallParser(constrain::ToolCallSyntax syntax, std::string id_seed)
    : syntax_(std::move(syntax)), id_seed_(std::move(id_seed)) {}

void ToolCallParser::feed(std::string_view bytes, std::vector<ToolPiece>& out) {
  for (char c : bytes) {
    switch (state_) {
      case State::kText:
        text_byte(c, out);
        break;
      case State::kHead:
        head_byte(c, out);
        break;
      case State::kArguments:
        arguments_byte(c, out);
        break;
      case State::kTail:
        tail_byte(c);
        break;
    }
  }
  flush(out);
}

void ToolCallParser::finish(std::vector<ToolPiece>& out) {
  if (state_ == State::kText) {
    text_ += held_;
    held_.clear();
    if (calls_ == 0) text_.insert(0, std::exchange(leading_ws_, {}));
  }
  flush(out);
}

// Text and argument bytes gathered in this feed go out as one piece each.
void ToolCallParser::flush(std::vector<ToolPiece>& out) {
  if (!text_.empty() && calls_ == 0) {
    if (!text_shown_ && all_ws(text_)) {
      leading_ws_ += std::exchange(text_, {});  // shown only if text follows, never before a call
      return;
    }
    ToolPiece p;
    p.text = std::exchange(leading_ws_, {}) + std::exchange(text_, {});
    text_shown_ = true;
    out.push_back(std::move(p));
  }
  text_.clear();
  if (!args_.empty()) {
    ToolPiece p;
    p.kind = ToolPiece::Kind::kArguments;
    p.text = std::exchange(args_, {});
    p.index = calls_ - 1;
    out.push_back(std::move(p));
  }
}

// Free text, watching for the opening marker: a suffix that is a prefix of it is held back.
void ToolCallParser::text_byte(char c, std::vector<ToolPiece>& out) {
  held_ += c;
  const std::string& begin = syntax_.begin;
  if (held_ == begin) {
    held_.clear();
    flush(out);
    leading_ws_.clear();
    state_ = State::kHead;
    name_.reset();
    colon_seen_ = false;
    return;
  }
  while (!held_.empty() && begin.compare(0, held_.size(), held_) != 0) {
    text_ += held_[0];
    held_.erase(0, 1);
  }
}

// The head of a call: {"name": "<name>", "arguments": — the call starts at its value.
void ToolCallParser::head_byte(char c, std::vector<ToolPiece>& out) {
  if (!name_) {
    held_ += c;
    const std::string key = Json(syntax_.name_key).dump();
    const size_t k = held_.find(key);
    if (k == std::string::npos) return;
    const size_t open = held_.find('"', k + key.size());
    if (open == std::string::npos) return;
    bool escape = false;
    for (size_t i = open + 1; i < held_.size(); ++i) {
      if (escape) {
        escape = false;
      } else if (held_[i] == '\\') {
        escape = true;
      } else if (held_[i] == '"') {
        try {
          name_ = Json::parse(held_.substr(open, i + 1 - open)).get<std::string>();
        } catch (const std::exception&) {
          name_ = held_.substr(open + 1, i - open - 1);
        }
        held_.clear();
        return;
      }
    }
    return;
  }
  if (!colon_seen_) {
    held_ += c;
    const std::string key = Json(syntax_.arguments_key).dump();
    const size_t k = held_.find(key);
    colon_seen_ = k != std::string::npos && c == ':' && held_.size() > k + key.size();
    return;
  }
  if (is_ws(c)) return;
  ToolPiece start;
  start.kind = ToolPiece::Kind::kCallStart;
  start.index = calls_;
  start.id = "call_" + sha256_hex(id_seed_ + ":" + std::to_string(calls_)).substr(0, 24);
  start.name = *name_;
  out.push_back(std::move(start));
  ++calls_;
  held_.clear();
  state_ = State::kArguments;
  depth_ = 0;
  in_string_ = escape_ = started_ = scalar_ = false;
  arguments_byte(c, out);
}

// The arguments' JSON value, scanned for its end (strings, escapes, nesting).
void ToolCallParser::arguments_byte(char c, std::vector<ToolPiece>& out) {
  if (!started_) {
    started_ = true;
    args_ += c;
    if (c == '{' || c == '[') {
      depth_ = 1;
    } else if (c == '"') {
      in_string_ = true;
    } else {
      scalar_ = true;
    }
    return;
  }
  if (in_string_) {
    args_ += c;
    if (escape_) {
      escape_ = false;
    } else if (c == '\\') {
      escape_ = true;
    } else if (c == '"') {
      in_string_ = false;
      if (depth_ == 0) end_arguments(out);
    }
    return;
  }
  if (scalar_ && depth_ == 0 && (is_ws(c) || c == '}' || c == ',')) {
    end_arguments(out);
    tail_byte(c);
    return;
  }
  args_ += c;
  if (c == '"') {
    in_string_ = true;
  } else if (c == '{' || c == '[') {
    ++depth_;
  } else if ((c == '}' || c == ']') && --depth_ == 0) {
    end_arguments(out);
  }
}

void ToolCallParser::end_arguments(std::vector<ToolPiece>& out) {
  flush(out);
  state_ = State::kTail;
  held_.clear();
}

// What closes the call: } and the end marker; then white space or the next call's marker.
void ToolCallParser::tail_byte(char c) {
  held_ += c;
  const std::string& end = syntax_.end;
  if (held_.size() >= end.size() &&
      held_.compare(held_.size() - end.size(), end.size(), end) == 0) {
    held_.clear();
    state_ = State::kText;
  }
}

}  // namespace ferry::adapters
