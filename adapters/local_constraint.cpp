#include "adapters/local_constraint.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/sha256.h"

namespace ferry::adapters {

constrain::ThinkBlock think_block(const TemplateTools& t) {
  if (t.think_begin.empty()) return {};
  return constrain::ThinkBlock{t.think_begin, t.think_end, t.token_markers};
}

namespace {

constexpr const char* kPythonTag = "<|python_tag|>";  // Llama 3.1+: may open a call

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

// Whether the request turned thinking off (`chat_template_kwargs.enable_thinking: false`).
bool thinking_off(const api::ChatRequest& r) {
  if (!r.extra.is_object() || !r.extra.contains("chat_template_kwargs")) return false;
  const Json& k = r.extra["chat_template_kwargs"];
  return k.is_object() && k.contains("enable_thinking") && k["enable_thinking"] == false;
}

Result<ConstraintRequest> response_format_request(const api::ChatRequest& r,
                                                  const TemplateTools& t) {
  const api::ResponseFormat& f = *r.response_format;
  ConstraintRequest c;
  if (!thinking_off(r)) c.think = think_block(t);
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
  return t.unsupported;
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
  c.tools.syntax = tool_call_syntax(t, !thinking_off(r));
  for (const api::Tool& tool : *r.tools) {
    c.tools.functions.push_back({tool.name, tool.parameters});
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

namespace {

// How the template writes a call of ferry_probe_tool back in the history ("" when it fails).
std::string render_probe_call(const tokenizer::ChatFormatter& chat, const Json& tools) {
  const Json call = {{"id", "call_ferryprobe1"},
                     {"type", "function"},
                     {"function", {{"name", "ferry_probe_tool"}, {"arguments", "{\"q\": 1}"}}}};
  Json req = {
      {"messages",
       Json::array(
           {{{"role", "user"}, {"content", "ping"}},
            {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", Json::array({call})}},
            {{"role", "tool"}, {"tool_call_id", "call_ferryprobe1"}, {"content", "pong"}}})}};
  req["tools"] = tools;
  auto r = chat.render(req, false);
  return r ? *r : std::string();
}

// A thinking template: `enable_thinking: false` renders an empty think block the default lacks.
void detect_thinking(const tokenizer::ChatFormatter& chat, const Json& base, TemplateTools& t) {
  Json off = base;
  off["chat_template_kwargs"] = {{"enable_thinking", false}};
  auto with = chat.render(base);
  auto without = chat.render(off);
  if (!with || !without || *with == *without) return;
  if (without->find("</think>") != std::string::npos &&
      with->find("</think>") == std::string::npos) {
    t.think_begin = "<think>";
    t.think_end = "</think>";
  }
}

}  // namespace

TemplateTools detect_template_tools(const tokenizer::ChatFormatter& chat) {
  if (chat.uses_openai_accounting()) return {};
  const Json base = {{"messages", Json::array({{{"role", "user"}, {"content", "ping"}}})}};
  TemplateTools t;
  detect_thinking(chat, base, t);  // also in a template that ignores tools
  Json with = base;
  with["tools"] =
      Json::array({{{"type", "function"},
                    {"function",
                     {{"name", "ferry_probe_tool"},
                      {"description", "probe"},
                      {"parameters", {{"type", "object"}, {"properties", Json::object()}}}}}}});
  auto plain = chat.render(base);
  auto tooled = chat.render(with);
  if (!plain || !tooled || *plain == *tooled) return t;
  t.renders_tools = tooled->find("ferry_probe_tool") != std::string::npos;
  const std::string& s = *tooled;
  const std::string history = render_probe_call(chat, with["tools"]);
  if (s.find("<tool_call>") != std::string::npos) {
    t.format = ToolFormat::kHermes;
  } else if (s.find("[AVAILABLE_TOOLS]") != std::string::npos ||
             s.find("[TOOL_CALLS]") != std::string::npos ||
             history.find("[TOOL_CALLS]") != std::string::npos) {
    t.format = ToolFormat::kMistral;
    if (history.find("[ARGS]") != std::string::npos) {
      t.unsupported =
          "tool calls in the Mistral [TOOL_CALLS]name[ARGS] format of this model's chat "
          "template are not supported by the local engine";
    }
  } else if (s.find("<|python_tag|>") != std::string::npos ||
             s.find("Environment: ipython") != std::string::npos) {
    t.format = ToolFormat::kLlama3Json;
    // Llama 3.1+ templates write a call back as {"name": ..., "parameters": ...}.
    t.arguments_key =
        history.find("\"arguments\"") != std::string::npos ? "arguments" : "parameters";
  }
  return t;
}

void find_token_markers(TemplateTools& t, const constrain::Vocabulary& vocab) {
  const constrain::ToolCallSyntax syn = tool_call_syntax(t, true);
  t.token_markers.clear();
  for (const std::string* m : {&syn.begin, &syn.end, &syn.think_begin, &syn.think_end}) {
    if (!m->empty() && vocab.special_token(*m)) t.token_markers.push_back(*m);
  }
  // Llama 3.1+: the call may open with <|python_tag|> where the vocabulary has it as a token.
  if (t.format == ToolFormat::kLlama3Json && vocab.special_token(kPythonTag))
    t.token_markers.push_back(kPythonTag);
}

constrain::ToolCallSyntax tool_call_syntax(const TemplateTools& t, bool thinking) {
  constrain::ToolCallSyntax syn;
  if (t.format == ToolFormat::kMistral) {
    syn.layout = constrain::ToolLayout::kList;
    syn.begin = "[TOOL_CALLS]";
    syn.end.clear();
  } else if (t.format == ToolFormat::kLlama3Json) {
    syn.layout = constrain::ToolLayout::kBare;
    const bool tag = std::find(t.token_markers.begin(), t.token_markers.end(), kPythonTag) !=
                     t.token_markers.end();
    syn.begin = tag ? kPythonTag : "";
    syn.end.clear();
    syn.arguments_key = t.arguments_key;
  }
  if (thinking) {
    syn.think_begin = t.think_begin;
    syn.think_end = t.think_end;
  }
  syn.token_markers = t.token_markers;
  return syn;
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
  if (format) return response_format_request(r, t);
  if (tools) return tools_request(r, t);
  return ConstraintRequest{};
}

Result<constrain::CompiledGrammar> compile_constraint(const ConstraintRequest& c,
                                                      constrain::GrammarCache& cache) {
  Result<constrain::CompiledGrammar> out = Error::make(ErrorCode::kInternal, "no constraint");
  std::string param = "response_format";
  switch (c.mode) {
    case ConstraintMode::kJsonObject:
      out = cache.json_object({}, c.think);
      break;
    case ConstraintMode::kJsonSchema:
      out = cache.json_schema(c.schema_json, {}, c.think);
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

constrain::ToolCallSyntax think_syntax(const constrain::ThinkBlock& think) {
  constrain::ToolCallSyntax syn;
  syn.begin.clear();  // no calls: after the think block, everything is text
  syn.end.clear();
  syn.think_begin = think.begin;
  syn.think_end = think.end;
  return syn;
}

// ---- ToolCallParser ---------------------------------------------------------------------------

ToolCallParser::ToolCallParser(constrain::ToolCallSyntax syntax, std::string id_seed)
    : syntax_(std::move(syntax)), id_seed_(std::move(id_seed)) {
  think_pending_ = !syntax_.think_begin.empty();
  bare_start_ = syntax_.layout == constrain::ToolLayout::kBare;
}

void ToolCallParser::open_think() {
  think_pending_ = false;
  state_ = State::kThink;
}

void ToolCallParser::feed(std::string_view bytes, std::vector<ToolPiece>& out) {
  for (char c : bytes) {
    switch (state_) {
      case State::kText:
        if (think_pending_) {
          start_byte(c, out);
        } else if (bare_start_) {
          body_start_byte(c, out);
        } else if (!closed_) {
          text_byte(c, out);
        }
        break;
      case State::kThink:
        think_byte(c);
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
  if (state_ == State::kThink) reasoning_ += std::exchange(held_, {});  // cut inside it
  if (state_ == State::kText && think_pending_) {
    think_pending_ = false;  // a prefix of the think marker was all: text
    text_ += std::exchange(held_, {});
  }
  if (state_ == State::kText) {
    text_ += held_;
    held_.clear();
    if (calls_ == 0) text_.insert(0, std::exchange(leading_ws_, {}));
  }
  flush(out);
}

// Reasoning, text and argument bytes gathered in this feed go out as one piece each.
void ToolCallParser::flush(std::vector<ToolPiece>& out) {
  if (!reasoning_.empty()) {
    ToolPiece p;
    p.kind = ToolPiece::Kind::kReasoning;
    p.text = std::exchange(reasoning_, {});
    out.push_back(std::move(p));
  }
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

// The first bytes, while they may still be the think block's opening marker.
void ToolCallParser::start_byte(char c, std::vector<ToolPiece>& out) {
  held_ += c;
  const std::string& begin = syntax_.think_begin;
  if (held_ == begin) {
    held_.clear();
    think_pending_ = false;
    state_ = State::kThink;
    return;
  }
  if (begin.compare(0, held_.size(), held_) == 0) return;
  think_pending_ = false;  // no think block: what was held is the body's first bytes
  feed(std::exchange(held_, {}), out);
}

// The think block's text, watching for its end marker; then the body starts afresh.
void ToolCallParser::think_byte(char c) {
  held_ += c;
  const std::string& end = syntax_.think_end;
  if (held_ == end) {
    held_.clear();
    state_ = State::kText;
    bare_start_ = syntax_.layout == constrain::ToolLayout::kBare;
    return;
  }
  while (!held_.empty() && end.compare(0, held_.size(), held_) != 0) {
    reasoning_ += held_[0];
    held_.erase(0, 1);
  }
}

// kBare: white space is held like leading text; `{` opens the one call (after the opening
// marker, when the syntax has one), anything else is text.
void ToolCallParser::body_start_byte(char c, std::vector<ToolPiece>& out) {
  const std::string& tag = syntax_.begin;
  if (!tag.empty() && !tag_seen_ && (!held_.empty() || c == tag[0])) {
    held_ += c;
    if (held_ == tag) {
      held_.clear();
      tag_seen_ = true;
      return;
    }
    if (tag.compare(0, held_.size(), held_) == 0) return;
    bare_start_ = false;  // not the marker after all: text
    for (const char h : std::exchange(held_, {})) text_byte(h, out);
    return;
  }
  if (is_ws(c)) {
    text_ += c;
    return;
  }
  bare_start_ = false;
  if (c != '{') {
    text_byte(c, out);
    return;
  }
  flush(out);
  open_call();
  head_byte(c, out);
}

void ToolCallParser::open_call() {
  text_.clear();
  leading_ws_.clear();
  held_.clear();
  state_ = State::kHead;
  name_.reset();
  colon_seen_ = false;
}

// Free text, watching for the opening marker: a suffix that is a prefix of it is held back.
void ToolCallParser::text_byte(char c, std::vector<ToolPiece>& out) {
  held_ += c;
  const std::string& begin = syntax_.begin;
  if (held_ == begin) {
    held_.clear();
    flush(out);
    open_call();
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
// kList: `,` opens the next call, `]` ends them; kBare: the call's `}` ends the output.
void ToolCallParser::tail_byte(char c) {
  if (syntax_.layout == constrain::ToolLayout::kList) {
    if (c == ',') {
      open_call();
    } else if (c == ']') {
      state_ = State::kText;
      closed_ = true;
    }
    return;
  }
  if (syntax_.layout == constrain::ToolLayout::kBare) {
    if (c == '}') {
      state_ = State::kText;
      closed_ = true;
    }
    return;
  }
  held_ += c;
  const std::string& end = syntax_.end;
  if (held_.size() >= end.size() &&
      held_.compare(held_.size() - end.size(), end.size(), end) == 0) {
    held_.clear();
    state_ = State::kText;
  }
}

}  // namespace ferry::adapters
