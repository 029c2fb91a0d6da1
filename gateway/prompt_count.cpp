#include "gateway/prompt_count.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "api/openai_parse.h"
#include "api/openai_render.h"
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
