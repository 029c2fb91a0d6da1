// The OpenAI front-end's parser: a chat/completions or completions body validated into the typed
// request (api/chat_request.h) in one pass, every error a 400 naming the field. The one place of
// OpenAI's parameter rules. Stateless functions (a parser buffer per thread); thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "api/chat_request.h"
#include "common/error.h"

namespace ferry::api {

// The largest max_tokens / max_completion_tokens accepted at the edge: more than any model's
// context holds, small enough that no token or money arithmetic on it can overflow int64.
constexpr int64_t kMaxTokensLimit = INT32_MAX;
// The most choices (`n`) a request may ask for (OpenAI's limit).
constexpr int64_t kMaxChoices = 128;
// Token ids (logit_bias keys, completions prompt arrays) are non-negative int32 values; a local
// target further checks them against its vocabulary.
constexpr int64_t kMaxTokenId = INT32_MAX;

struct ParseOptions {
  // The largest max_tokens accepted. The gateway's edge uses kMaxTokensLimit; a backend that
  // parses a body itself (a BackendRequest without a typed value) takes any int64 and checks it
  // against its own context.
  int64_t max_tokens_limit = kMaxTokensLimit;
  // Bytes past the end of `body` that may be read (its string's spare capacity): with at least
  // kJsonReadSlack the body is parsed where it is, otherwise it is copied first.
  size_t readable_past_end = 0;
};

// Parses and validates `body` for `endpoint`. Top-level members ferry reads may appear once
// (parsers disagree on which duplicate wins); unknown members are kept in ChatRequest::extra.
// `model_keys` (when not null) receives the number of top-level members named "model" (escapes
// decoded), for a splicing rewrite of the raw body (gateway/openai_request.h).
Result<ChatRequest> parse_openai(Endpoint endpoint, std::string_view body,
                                 const ParseOptions& options = {}, int* model_keys = nullptr);

// The same into `out`, a fresh ChatRequest (one already in its shared_ptr: nothing is moved).
Status parse_openai_into(Endpoint endpoint, std::string_view body, ChatRequest& out,
                         const ParseOptions& options = {}, int* model_keys = nullptr);

// How many times parse_openai ran on this thread (for tests that show a request is parsed once).
uint64_t parses_on_this_thread();

// text == name for a string literal: a length check, then a fixed-size compare that the
// compiler inlines (string_view's operator== stays an out-of-line call on hot paths).
template <size_t N>
bool key_is(std::string_view text, const char (&name)[N]) {
  return text.size() == N - 1 && std::memcmp(text.data(), name, N - 1) == 0;
}

// A logit_bias key as a token id: decimal digits only (no sign, space or exponent), at most
// INT32_MAX; nullopt otherwise. The caller checks it against a vocabulary when it has one.
std::optional<int64_t> parse_token_id_key(std::string_view key);

// Splits "a, b,c" into trimmed, non-empty tags (at most 32, each at most 64 bytes).
std::vector<std::string> split_tags(std::string_view text);

}  // namespace ferry::api
