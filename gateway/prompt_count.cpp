#include "gateway/prompt_count.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "api/chat_request.h"
#include "api/openai_parse.h"
#include "api/openai_render.h"
#include "common/json_text.h"
#include "config/config.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferry::gateway {

using nlohmann::ordered_json;

std::optional<int64_t> PromptCounter::count(bool chat_request, const ordered_json& body) const {
  if (!tokenizer || body.is_discarded() || !body.is_object()) return std::nullopt;
  if (chat_request) {
    if (!chat) return std::nullopt;
    auto n = chat->count(body, /*add_generation_prompt=*/true);
    if (!n) return std::nullopt;
    return static_cast<int64_t>(*n);
  }
  auto it = body.find("prompt");
  if (it == body.end()) return std::nullopt;
  const ordered_json& prompt = *it;
  int64_t total = 0;
  auto one = [&](const ordered_json& p) {
    if (p.is_string()) {
      total += static_cast<int64_t>(
          tokenizer::count_prompt(*tokenizer, p.get_ref<const std::string&>()));
    } else if (p.is_array()) {
      total += static_cast<int64_t>(p.size());  // token ids
    } else if (p.is_number_integer()) {
      total += 1;
    }
  };
  if (prompt.is_array() && !prompt.empty() && !prompt[0].is_number_integer()) {
    for (const auto& p : prompt) one(p);
  } else if (prompt.is_array()) {
    total = static_cast<int64_t>(prompt.size());
  } else {
    one(prompt);
  }
  return total;
}

std::optional<MessageShares> PromptCounter::shares(const ordered_json& chat_body) const {
  if (!tokenizer || !chat || !chat_body.is_object()) return std::nullopt;
  auto counts = chat->count_messages(chat_body, /*add_generation_prompt=*/true);
  if (!counts) return std::nullopt;
  MessageShares out{
      static_cast<int64_t>(counts->total), {}, counts->exact_shares, counts->compositional};
  out.per_message.assign(counts->per_message.begin(), counts->per_message.end());
  return out;
}

namespace {

// Unknown members of an object: null, or an object (empty when the client sent none).
bool has_members(const nlohmann::ordered_json& extra) {
  return extra.is_object() && !extra.empty();
}

// The tokens one message adds in ChatFormatter's OpenAI accounting of the message's tree in
// api::template_input: 3, then its members in their order (role, content, name, tool_calls,
// tool_call_id), each string counted, one more for `name`; content parts count their texts
// of type "text" joined by newlines, a call its function's name and arguments. nullopt when
// the tree would hold something this does not read (unknown members; text that is not UTF-8,
// which the tree holds with U+FFFD for each bad byte).
std::optional<int64_t> typed_message_tokens(const tokenizer::ChatFormatter& chat,
                                            const api::Message& m, std::string& joined) {
  if (has_members(m.extra)) return std::nullopt;
  int64_t n = 3;
  auto field = [&](std::string_view text) {
    if (!is_valid_utf8(text)) return false;
    n += static_cast<int64_t>(chat.count_field(text));
    return true;
  };
  if (!field(api::role_name(m.role))) return std::nullopt;
  switch (m.content.form) {
    case api::Content::Form::kAbsent:
      break;
    case api::Content::Form::kText:
      if (!field(m.content.text)) return std::nullopt;
      break;
    case api::Content::Form::kParts: {
      joined.clear();
      bool first = true;
      for (const api::ContentPart& p : m.content.parts) {
        if (p.extra.is_object() && (p.extra.contains("type") || p.extra.contains("text")))
          return std::nullopt;
        if (!is_valid_utf8(p.type)) return std::nullopt;
        if (p.type != "text") continue;
        if (!first) joined += '\n';
        joined += p.text;
        first = false;
      }
      if (!field(joined)) return std::nullopt;
      break;
    }
  }
  if (m.name) {
    if (!field(*m.name)) return std::nullopt;
    n += 1;
  }
  if (m.tool_calls) {
    for (const api::ToolCall& call : *m.tool_calls) {
      if (call.extra.is_object() && call.extra.contains("function")) return std::nullopt;
      if (!field(call.name) || !field(call.arguments)) return std::nullopt;
    }
  }
  if (m.tool_call_id && !field(*m.tool_call_id)) return std::nullopt;
  return n;
}

}  // namespace

std::optional<MessageShares> PromptCounter::typed_shares(const api::ChatRequest& request,
                                                         bool per_message) const {
  if (!tokenizer || !chat || !chat->uses_openai_accounting() || !request.chat()) {
    return std::nullopt;
  }
  // Tools count as their JSON text (ChatFormatter::count_openai): left to the tree.
  if ((request.tools && !request.tools->empty()) ||
      (!request.tools && request.extra.is_object() && request.extra.contains("tools"))) {
    return std::nullopt;
  }
  MessageShares out;
  out.exact = true;
  if (per_message) out.per_message.reserve(request.messages.size());
  std::string joined;
  for (const api::Message& m : request.messages) {
    auto n = typed_message_tokens(*chat, m, joined);
    if (!n) return std::nullopt;
    out.total += *n;
    if (per_message) out.per_message.push_back(*n);
  }
  out.total += 3;  // the reply's priming
  return out;
}

Result<std::map<std::string, PromptCounter, std::less<>>> load_prompt_counters(
    const config::Config& config) {
  std::map<std::string, PromptCounter, std::less<>> out;
  std::map<std::string, std::shared_ptr<const tokenizer::Tokenizer>> tokenizers;  // by spec
  // By spec and template: a formatter depends on nothing else.
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const tokenizer::ChatFormatter>>
      formatters;
  for (const auto& m : config.models) {
    PromptCounter& counter = out[m.name];
    const config::BackendConfig* backend = config.find_backend(m.backend);
    std::string spec = m.tokenizer;
    std::string chat_template;
    if (backend != nullptr && backend->local) {
      if (spec.empty()) spec = backend->local->model_path;
      chat_template = backend->local->chat_template;
    }
    if (spec.empty()) continue;
    if (!spec.starts_with("cl100k_base") && !spec.starts_with("o200k_base") &&
        spec.front() != '/') {
      spec = config.resolve_path(spec);
    }
    auto& tok = tokenizers[spec];
    if (!tok) {
      auto loaded = tokenizer::load_tokenizer(spec);
      if (!loaded) {
        return Error::make(ErrorCode::kInvalidRequest, "model '" + m.name + "': tokenizer '" +
                                                           spec + "': " + loaded.error().message);
      }
      tok = *loaded;
    }
    counter.tokenizer = tok;
    auto [known, added] = formatters.try_emplace({spec, chat_template});
    if (added) {
      auto chat = tokenizer::ChatFormatter::create(tok, chat_template);
      if (chat) {
        known->second = *chat;
      } else if (!chat_template.empty()) {
        return Error::make(ErrorCode::kInvalidRequest,
                           "model '" + m.name + "': chat template: " + chat.error().message);
      }
    }
    counter.chat = known->second;
    // Without a template (a tokenizer file that ships none) chats are estimated; plain
    // completions are still counted exactly.
  }
  return out;
}

ordered_json count_input(bool chat_request, std::string_view body) {
  auto typed = api::parse_openai(
      chat_request ? api::Endpoint::kChatCompletions : api::Endpoint::kCompletions, body);
  if (typed) return api::template_input(*typed);
  return ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
}

int64_t estimate_prompt_tokens(size_t body_bytes) {
  return std::max<int64_t>(1, static_cast<int64_t>(body_bytes / 4));
}

}  // namespace ferry::gateway
