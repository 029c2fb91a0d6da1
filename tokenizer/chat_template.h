// Chat prompts as the model sees them: renders an OpenAI messages array with the model's own
// chat template (Jinja subset) and counts its tokens, or applies OpenAI's documented
// per-message accounting for cl100k_base / o200k_base. Counts go through a per-formatter
// tokenizer::CountCache (exact; shared by every thread). Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"
#include "tokenizer/jinja.h"

namespace ferry::tokenizer {

class Tokenizer;
class CountCache;
using TokenId = std::uint32_t;

// A chat prompt's exact count, and each message's share of it (what dropping the message
// removes). OpenAI's accounting: exact, the shares add up with the fixed tokens (priming,
// tools). A template: read off the rendered prompt, a message's share running from just after
// the first special token that follows the message before it (its end of turn) to the same
// point after it; a share is then a prediction that holds where the template renders each
// message on its own between special tokens, and a caller checks it with one exact count.
// `per_message` is empty when a message cannot be found in the rendered prompt.
struct MessageCounts {
  std::size_t total = 0;
  std::vector<std::size_t> per_message;
  bool exact_shares = false;  // OpenAI's accounting: no check needed
  // A template proven compositional (ChatFormatter::compositional): the conversation without
  // some messages other than the first counts exactly `total` less their shares, no check
  // needed. (The first message's share also holds the prompt's opening.)
  bool compositional = false;
};

// A prompt as ferry runs and counts it everywhere (the local engine, routing and the ledger,
// `ferry tokenize`, `ferry policy explain`): `text` with special tokens parsed, and BOS in
// front when the vocabulary adds one (add_bos) and the text does not already begin with it.
void encode_prompt(const Tokenizer& tokenizer, std::string_view text, std::vector<TokenId>& out);
std::size_t count_prompt(const Tokenizer& tokenizer, std::string_view text);

class ChatFormatter {
 public:
  // Picks how `tokenizer` counts chats: `template_source` when not empty, else the template
  // the tokenizer file ships (GGUF tokenizer.chat_template, tokenizer_config.json), else
  // OpenAI's accounting for cl100k_base / o200k_base. A template that does not parse, or a
  // tokenizer with no template that is not an OpenAI encoding, is an error here.
  static Result<std::shared_ptr<const ChatFormatter>> create(
      std::shared_ptr<const Tokenizer> tokenizer, std::string_view template_source = {});
  ~ChatFormatter();

  // `request` is an OpenAI chat request ({"messages": [...], "tools": [...], ...}) or a bare
  // messages array. Parse it with nlohmann::ordered_json: tojson must keep key order.
  Result<std::string> render(const nlohmann::ordered_json& request,
                             bool add_generation_prompt = true) const;
  // count(): the rendered prompt's tokens as tokenizer::count_prompt counts them (with BOS).
  Result<std::size_t> count(const nlohmann::ordered_json& request,
                            bool add_generation_prompt = true) const;
  // The same count without the cache (each call tokenizes the whole prompt).
  Result<std::size_t> count_uncached(const nlohmann::ordered_json& request,
                                     bool add_generation_prompt = true) const;
  Result<MessageCounts> count_messages(const nlohmann::ordered_json& request,
                                       bool add_generation_prompt = true) const;
  // Same, from JSON text.
  Result<std::size_t> count_json(std::string_view request_json,
                                 bool add_generation_prompt = true) const;

  bool uses_openai_accounting() const { return !template_; }
  // OpenAI's accounting (uses_openai_accounting()) of one string field of a message: its
  // tokens, through the cache, as count() adds them. For a caller that walks a typed request
  // itself (gateway/prompt_count: the fixed tokens and the fields' order are count()'s).
  std::size_t count_field(std::string_view text) const;
  // Whether this template renders each message on its own, cut at this tokenizer's special
  // tokens: proven once at creation on probe conversations (system, user and assistant turns,
  // a tool call and its result), each rendered whole and with every run of messages after the
  // first dropped, and each of those renders found equal to the whole one with the dropped
  // messages' shares cut out. Then count_messages' shares are exact for any messages but the
  // first. A template that branches on position (role alternation, the system prompt moved
  // into a later turn) or whose turns are not cut by special tokens is not.
  bool compositional() const { return compositional_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

  // The Jinja context a request renders with (messages normalised, tools, bos/eos tokens,
  // add_generation_prompt, chat_template_kwargs); exposed for conformance tests.
  nlohmann::ordered_json template_context(const nlohmann::ordered_json& request,
                                          bool add_generation_prompt) const;

 private:
  ChatFormatter() = default;
  Result<std::size_t> count_openai(const nlohmann::ordered_json& request, bool cached,
                                   std::vector<std::size_t>* per_message = nullptr) const;
  std::size_t count_string(const std::string& text, bool cached) const;
  std::vector<jinja::Template::Variable> template_variables(const nlohmann::ordered_json& request,
                                                            bool add_generation_prompt,
                                                            nlohmann::ordered_json& storage) const;

  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<const jinja::Template> template_;
  std::unique_ptr<CountCache> counts_;  // thread-safe itself
  bool compositional_ = false;
  bool probe_compositional() const;
};

}  // namespace ferry::tokenizer
