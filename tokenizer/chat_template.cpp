#include "tokenizer/chat_template.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "tokenizer/count_cache.h"
#include "tokenizer/jinja.h"
#include "tokenizer/tokenizer.h"

namespace ferry::tokenizer {
namespace {

using Json = nlohmann::ordered_json;

const Json& messages_of(const Json& request) {
  if (request.is_object() && request.contains("messages")) return request["messages"];
  return request;
}

// Text of an OpenAI content value: a string, or the text parts of a parts array joined by
// newlines (as vLLM presents parts to text-only templates).
Json content_text(const Json& content) {
  if (!content.is_array()) return content;
  std::string text;
  bool first = true;
  for (const Json& part : content) {
    if (part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
        part["text"].is_string()) {
      if (!first) text += "\n";
      text += part["text"].get<std::string>();
      first = false;
    }
  }
  return text;
}

}  // namespace

ChatFormatter::~ChatFormatter() = default;

Result<std::shared_ptr<const ChatFormatter>> ChatFormatter::create(
    std::shared_ptr<const Tokenizer> tokenizer, std::string_view template_source) {
  if (!tokenizer) return Error::make(ErrorCode::kInternal, "chat: no tokenizer");
  std::shared_ptr<ChatFormatter> f(new ChatFormatter());
  f->tokenizer_ = std::move(tokenizer);
  f->counts_ = std::make_unique<CountCache>(*f->tokenizer_);
  std::string_view source =
      template_source.empty() ? std::string_view(f->tokenizer_->chat_template()) : template_source;
  if (source.empty()) {
    const std::string& name = f->tokenizer_->name();
    if (name == "cl100k_base" || name == "o200k_base")
      return std::shared_ptr<const ChatFormatter>(f);
    return Error::make(
        ErrorCode::kInvalidRequest,
        "chat: tokenizer '" + name + "' ships no chat template and none was configured");
  }
  auto parsed = jinja::Template::parse(source);
  if (!parsed) return std::move(parsed).error();
  f->template_ = std::make_shared<const jinja::Template>(std::move(*parsed));
  f->compositional_ = f->probe_compositional();
  return std::shared_ptr<const ChatFormatter>(f);
}

namespace {

// Whether a message needs normalising for templates: content parts joined into text, tool-call
// arguments (JSON text) parsed into objects, as vLLM passes them.
bool needs_normalizing(const Json& m) {
  if (!m.is_object()) return false;
  if (const auto c = m.find("content"); c != m.end() && c->is_array()) return true;
  if (const auto calls = m.find("tool_calls"); calls != m.end() && calls->is_array()) {
    for (const Json& call : *calls) {
      if (call.is_object() && call.contains("function") && call["function"].is_object()) {
        const Json& fn = call["function"];
        if (fn.contains("arguments") && fn["arguments"].is_string()) return true;
      }
    }
  }
  return false;
}

Json normalized_message(const Json& m) {
  Json msg = m;
  if (msg.is_object() && msg.contains("content")) msg["content"] = content_text(msg["content"]);
  if (msg.is_object() && msg.contains("tool_calls") && msg["tool_calls"].is_array()) {
    for (Json& call : msg["tool_calls"]) {
      if (call.is_object() && call.contains("function") && call["function"].is_object()) {
        Json& fn = call["function"];
        if (fn.contains("arguments") && fn["arguments"].is_string()) {
          Json parsed = Json::parse(fn["arguments"].get<std::string>(), nullptr, false);
          if (!parsed.is_discarded()) fn["arguments"] = std::move(parsed);
        }
      }
    }
  }
  return msg;
}

}  // namespace

// The variables a request renders with, pointing into `request` where it can be used as it is
// and into `storage` (filled here, completely, before any pointer into it is taken: an object
// moves its members when it grows) where not. Later variables of the same name win.
std::vector<jinja::Template::Variable> ChatFormatter::template_variables(const Json& request,
                                                                         bool add_generation_prompt,
                                                                         Json& storage) const {
  static const Json kNull;
  const Json& messages = messages_of(request);
  storage = Json::object();
  bool normalize = false;
  for (const Json& m : messages) normalize = normalize || needs_normalizing(m);
  if (normalize) {
    Json normalized = Json::array();
    for (const Json& m : messages)
      normalized.push_back(needs_normalizing(m) ? normalized_message(m) : m);
    storage["messages"] = std::move(normalized);
  }
  storage["add_generation_prompt"] = add_generation_prompt;
  const auto bos = tokenizer_->bos_id();
  const auto eos = tokenizer_->eos_id();
  storage["bos_token"] = bos ? tokenizer_->token_text(*bos) : std::string();
  storage["eos_token"] = eos ? tokenizer_->token_text(*eos) : std::string();
  const bool has_tools = request.is_object() && request.contains("tools");
  std::vector<jinja::Template::Variable> vars{
      {"messages", normalize ? &storage["messages"] : &messages},
      {"tools", has_tools ? &request["tools"] : &kNull},
      {"add_generation_prompt", &storage["add_generation_prompt"]},
      {"bos_token", &storage["bos_token"]},
      {"eos_token", &storage["eos_token"]},
  };
  if (request.is_object() && request.contains("chat_template_kwargs") &&
      request["chat_template_kwargs"].is_object()) {
    const Json& kwargs = request["chat_template_kwargs"];
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it)
      vars.push_back({it.key(), &it.value()});
  }
  return vars;
}

Json ChatFormatter::template_context(const Json& request, bool add_generation_prompt) const {
  Json storage;
  Json ctx = Json::object();
  for (const auto& v : template_variables(request, add_generation_prompt, storage))
    ctx[std::string(v.name)] = *v.value;
  return ctx;
}

Result<std::string> ChatFormatter::render(const Json& request, bool add_generation_prompt) const {
  const Json& messages = messages_of(request);
  if (!messages.is_array())
    return Error::make(ErrorCode::kInvalidRequest, "'messages' must be an array", "messages");
  if (!template_) {
    // OpenAI models: the documented accounting has no text form; show the ChatML-like shape.
    std::string out;
    for (const Json& m : messages) {
      out += "<|im_start|>" + m.value("role", std::string()) + "\n";
      const Json c = content_text(m.value("content", Json()));
      if (c.is_string()) out += c.get<std::string>();
      out += "<|im_end|>\n";
    }
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
  }
  // The prompt is about as long as the messages' text plus the template's own.
  std::size_t hint = 1024;
  for (const Json& m : messages) {
    if (const auto c = m.find("content"); m.is_object() && c != m.end() && c->is_string()) {
      hint += c->get_ref<const std::string&>().size() + 64;
    }
  }
  Json storage;
  const auto vars = template_variables(request, add_generation_prompt, storage);
  return template_->render(vars, hint);
}

void encode_prompt(const Tokenizer& tokenizer, std::string_view text, std::vector<TokenId>& out) {
  const std::size_t start = out.size();
  tokenizer.encode(text, out, Specials::kParse);
  const auto bos = tokenizer.bos_id();
  if (tokenizer.add_bos() && bos && (out.size() == start || out[start] != *bos)) {
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(start), *bos);
  }
}

std::size_t count_prompt(const Tokenizer& tokenizer, std::string_view text) {
  thread_local std::vector<TokenId> ids;
  ids.clear();
  encode_prompt(tokenizer, text, ids);
  const std::size_t n = ids.size();
  if (ids.capacity() > (std::size_t{1} << 22))
    std::vector<TokenId>().swap(ids);  // do not pin huge buffers
  return n;
}

Result<std::size_t> ChatFormatter::count(const Json& request, bool add_generation_prompt) const {
  if (!template_) return count_openai(request, /*cached=*/true);
  auto text = render(request, add_generation_prompt);
  if (!text) return std::move(text).error();
  return counts_->count_prompt(*text);  // BOS as the engine runs it
}

Result<std::size_t> ChatFormatter::count_uncached(const Json& request,
                                                  bool add_generation_prompt) const {
  if (!template_) return count_openai(request, /*cached=*/false);
  auto text = render(request, add_generation_prompt);
  if (!text) return std::move(text).error();
  return count_prompt(*tokenizer_, *text);
}

namespace {

// What a message is found by in its rendered prompt: its text, else its first tool call's name.
std::string needle_of(const Json& m) {
  if (!m.is_object()) return {};
  if (const auto c = m.find("content"); c != m.end()) {
    const Json text = content_text(*c);
    if (text.is_string() && !text.get_ref<const std::string&>().empty()) return text;
  }
  if (const auto calls = m.find("tool_calls"); calls != m.end() && calls->is_array()) {
    for (const Json& call : *calls) {
      if (!call.is_object()) continue;
      const auto fn = call.find("function");
      if (fn != call.end() && fn->is_object() && fn->contains("name") && (*fn)["name"].is_string())
        return (*fn)["name"].get<std::string>();
    }
  }
  return {};
}

// Where each message's share starts in `text` (see MessageCounts), or empty.
std::vector<std::size_t> message_starts(const Json& messages, std::string_view text,
                                        const std::vector<PieceCount>& specials) {
  std::vector<std::size_t> starts;
  std::size_t cursor = 0;      // the end of the previous message's needle
  auto it = specials.begin();  // specials before `cursor` are behind it
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const std::string needle = needle_of(messages[i]);
    if (needle.empty()) return {};
    const std::size_t at = text.find(needle, cursor);
    if (at == std::string_view::npos) return {};
    std::size_t start = 0;
    if (i > 0) {
      // Just after the first special token past the previous message's text.
      while (it != specials.end() && it->offset < cursor) ++it;
      if (it == specials.end() || it->offset >= at) return {};
      start = it->offset + it->length;
    }
    starts.push_back(start);
    cursor = at + needle.size();
  }
  return starts;
}

}  // namespace

Result<MessageCounts> ChatFormatter::count_messages(const Json& request,
                                                    bool add_generation_prompt) const {
  MessageCounts out;
  if (!template_) {
    auto n = count_openai(request, /*cached=*/true, &out.per_message);
    if (!n) return std::move(n).error();
    out.total = *n;
    out.exact_shares = true;
    return out;
  }
  auto text = render(request, add_generation_prompt);
  if (!text) return std::move(text).error();
  thread_local std::vector<PieceCount> pieces;
  pieces.clear();
  out.total = counts_->count_prompt(*text, &pieces);
  // The special tokens, to find the messages' boundaries.
  thread_local std::vector<PieceCount> specials;
  specials.clear();
  for (const PieceCount& p : pieces) {
    if (p.special) specials.push_back(p);
  }
  const Json& messages = messages_of(request);
  const auto starts = message_starts(messages, *text, specials);
  if (starts.empty()) return out;
  out.per_message.assign(starts.size(), 0);
  out.compositional = compositional_;
  std::size_t m = 0;
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    if (pieces[k].offset < starts.front()) continue;
    while (m + 1 < starts.size() && pieces[k].offset >= starts[m + 1]) ++m;
    out.per_message[m] += pieces[k].tokens;
  }
  return out;
}

namespace {

// The conversations a template is probed with: distinct texts to find each message by, a
// system prompt or none, a tool call and its result.
std::vector<Json> probe_conversations() {
  auto msg = [](const char* role, int n) {
    return Json{{"role", role}, {"content", "ferry probe " + std::to_string(n) + " text"}};
  };
  Json call = msg("assistant", 3);
  call["tool_calls"] =
      Json::array({{{"id", "call_probe"},
                    {"type", "function"},
                    {"function", {{"name", "ferry_probe_tool"}, {"arguments", "{\"q\": 1}"}}}}});
  Json result = msg("tool", 4);
  result["tool_call_id"] = "call_probe";
  std::vector<Json> out;
  out.push_back({{"messages", Json::array({msg("system", 0), msg("user", 1), msg("assistant", 2),
                                           msg("user", 3), msg("assistant", 4), msg("user", 5),
                                           msg("assistant", 6), msg("user", 7)})}});
  out.push_back({{"messages", Json::array({msg("user", 1), msg("assistant", 2), msg("user", 3),
                                           msg("assistant", 4), msg("user", 5)})}});
  out.push_back({{"messages", Json::array({msg("system", 0), msg("user", 1), msg("assistant", 2),
                                           msg("user", 8), call, result, msg("assistant", 5),
                                           msg("user", 6)})}});
  return out;
}

}  // namespace

bool ChatFormatter::probe_compositional() const {
  std::vector<Tokenizer::Piece> split;
  for (const Json& probe : probe_conversations()) {
    const Json& messages = probe["messages"];
    const std::size_t n = messages.size();
    auto is_result = [&](std::size_t i) { return i < n && messages[i]["role"] == "tool"; };
    bool calls = false;
    for (std::size_t i = 0; i < n; ++i) calls = calls || is_result(i);
    auto whole = render(probe);
    if (!whole) {
      if (calls) continue;  // a template that cannot show a tool call renders no such request
      return false;
    }
    split.clear();
    tokenizer_->split_specials(*whole, split);
    std::vector<PieceCount> specials;
    for (const auto& p : split) {
      if (p.special) specials.push_back({p.offset, 1, p.length, true});
    }
    const auto starts = message_starts(messages, *whole, specials);
    if (starts.size() != n) return false;
    auto end_of = [&](std::size_t i) { return i + 1 < n ? starts[i + 1] : whole->size(); };
    // Every run of messages [first, last] after the first one, the last message kept.
    for (std::size_t first = 1; first + 1 < n; ++first) {
      for (std::size_t last = first; last + 1 < n; ++last) {
        // Trimming never splits a tool call from its results.
        if (is_result(first) || is_result(last + 1)) continue;
        Json fewer = probe;
        Json& m = fewer["messages"];
        m.erase(m.begin() + static_cast<std::ptrdiff_t>(first),
                m.begin() + static_cast<std::ptrdiff_t>(last + 1));
        auto got = render(fewer);
        if (!got) return false;
        const std::string want = whole->substr(0, starts[first]) + whole->substr(end_of(last));
        if (*got != want) return false;
      }
    }
  }
  return true;
}

Result<std::size_t> ChatFormatter::count_json(std::string_view request_json,
                                              bool add_generation_prompt) const {
  Json request = Json::parse(request_json, nullptr, false);
  if (request.is_discarded())
    return Error::make(ErrorCode::kInvalidRequest, "chat: request is not valid JSON");
  return count(request, add_generation_prompt);
}

std::size_t ChatFormatter::count_string(const std::string& text, bool cached) const {
  return cached ? counts_->count_text(text) : tokenizer_->count(text);
}

std::size_t ChatFormatter::count_field(std::string_view text) const {
  return counts_->count_text(text);
}

// OpenAI's documented accounting (openai-cookbook, "How to count tokens with tiktoken"):
// 3 tokens a message, the tokens of every string field, 1 more for a `name`, 3 to prime the
// reply. Content parts count their text; tool calls and tool definitions count their JSON
// text, which OpenAI does not document exactly.
Result<std::size_t> ChatFormatter::count_openai(const Json& request, bool cached,
                                                std::vector<std::size_t>* per_message) const {
  const Json& messages = messages_of(request);
  if (!messages.is_array())
    return Error::make(ErrorCode::kInvalidRequest, "'messages' must be an array", "messages");
  std::size_t total = 0;
  for (const Json& m : messages) {
    if (!m.is_object())
      return Error::make(ErrorCode::kInvalidRequest, "a message must be an object", "messages");
    std::size_t n = 3;
    for (auto it = m.begin(); it != m.end(); ++it) {
      const Json& v = it.value();
      if (it.key() == "content") {
        const Json c = content_text(v);
        if (c.is_string()) n += count_string(c.get_ref<const std::string&>(), cached);
      } else if (it.key() == "tool_calls" && v.is_array()) {
        for (const Json& call : v) {
          if (!call.contains("function")) continue;
          const Json& fn = call["function"];
          n += count_string(fn.value("name", std::string()), cached);
          if (fn.contains("arguments")) {
            n += count_string(fn["arguments"].is_string() ? fn["arguments"].get<std::string>()
                                                          : fn["arguments"].dump(),
                              cached);
          }
        }
      } else if (v.is_string()) {
        n += count_string(v.get_ref<const std::string&>(), cached);
        if (it.key() == "name") n += 1;
      }
    }
    total += n;
    if (per_message != nullptr) per_message->push_back(n);
  }
  total += 3;
  if (request.is_object() && request.contains("tools") && request["tools"].is_array() &&
      !request["tools"].empty()) {
    total += count_string(request["tools"].dump(), cached);
  }
  return total;
}

}  // namespace ferry::tokenizer
