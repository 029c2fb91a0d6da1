// How ferry counts a request's prompt for a model, in one place for the server (routing,
// admission, the ledger) and the CLIs (`ferry policy explain`): each model's tokenizer and chat
// template as the config names them (a local model's own GGUF), loaded once, counted with
// tokenizer::count_prompt (BOS as the engine adds it). Immutable once loaded; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"

namespace ferry::api {
struct ChatRequest;
}
namespace ferry::config {
struct Config;
}
namespace ferry::tokenizer {
class Tokenizer;
class ChatFormatter;
}  // namespace ferry::tokenizer

namespace ferry::gateway {

// A request's exact prompt tokens and each message's share of them (tokenizer::MessageCounts):
// exact shares add up (OpenAI's accounting), so do a compositional template's for every message
// but the first; others are predictions a caller checks.
struct MessageShares {
  int64_t total = 0;
  std::vector<int64_t> per_message;  // one a message, or empty: unknown
  bool exact = false;
  // Exact for any messages but the first (a compositional template: tokenizer::MessageCounts).
  bool compositional = false;
};

struct PromptCounter {
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;  // null: every count is an estimate
  std::shared_ptr<const tokenizer::ChatFormatter> chat;   // null: chats are estimated

  // The exact prompt tokens of a chat (`chat`) or completions request (the router passes
  // api::template_input of the typed request, the CLIs the parsed file); nullopt when this
  // model cannot count it (no tokenizer, no template, a body it cannot read).
  std::optional<int64_t> count(bool chat_request, const nlohmann::ordered_json& body) const;
  // A chat's exact count (as count() gives it) with its messages' shares; nullopt as count().
  std::optional<MessageShares> shares(const nlohmann::ordered_json& chat_body) const;
  // shares(api::template_input(request)) of a chat request (its shares only when `per_message`),
  // counted from the typed request without building the template's input, when this model
  // counts by OpenAI's accounting and every member that count reads is a typed field (no
  // unknown members of a message, a part or a call that could add to it, no tools, every text
  // well-formed UTF-8). nullopt otherwise: then count from api::template_input.
  std::optional<MessageShares> typed_shares(const api::ChatRequest& request,
                                            bool per_message) const;
};

// One counter a configured model, by model name. Models naming the same tokenizer share it,
// and those with the same chat template too share its formatter (so the planner, which counts
// once for targets whose tokenizer and formatter are the same objects, counts them once).
// Errors: a tokenizer that does not load, a configured chat template that does not parse.
Result<std::map<std::string, PromptCounter, std::less<>>> load_prompt_counters(
    const config::Config& config);

// The JSON PromptCounter::count reads for a body, made as the server makes it (the chat
// template's input from the typed request: api::template_input), or the body as parsed when it
// is not a request the server would take (a bare messages array for `ferry tokenize`).
nlohmann::ordered_json count_input(bool chat_request, std::string_view body);

// The count without a tokenizer: about four bytes a token of the whole body, at least 1.
int64_t estimate_prompt_tokens(size_t body_bytes);

}  // namespace ferry::gateway
