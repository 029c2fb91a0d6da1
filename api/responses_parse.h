// The OpenAI Responses front-end's parser: a /v1/responses body validated into the typed chat
// request (api/chat_request.h) plus what only Responses has (instructions, store,
// previous_response_id, the echo of the response object), every error in OpenAI's words and
// codes naming the field's path. Stateless functions (a parser buffer per thread); thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/chat_request.h"
#include "api/openai_parse.h"
#include "api/responses_render.h"
#include "common/error.h"

namespace ferry::api {

// A Responses request. `chat` is the same typed value every other front-end produces: the
// instructions as the first (system) message, the input items as chat messages (consecutive
// function_call items joined into one assistant message with tool_calls, function_call_output
// items as tool messages), function tools, tool_choice, text.format as response_format,
// max_output_tokens as max_tokens, reasoning.effort as `reasoning_effort`.
struct ResponsesRequest {
  ChatRequest chat;
  bool store = true;                 // OpenAI's default
  std::string previous_response_id;  // "" when none
  std::string prompt_cache_key;      // "" when none (also the task id when metadata has none)
  // The input as items, normalized (a string input becomes one user message item), without
  // the instructions: what a stored response keeps as the input that led to it. A JSON array's
  // text: the client's, without white space between tokens (members, strings and numbers as
  // sent), written only when the response is to be stored (`store`); "[]" otherwise.
  std::string input_items = "[]";
  // The first part or tool only a backend that speaks Responses natively can take (an image,
  // a built-in tool such as web_search): the front-end answers with it unless it passes the
  // request through unchanged.
  std::optional<Error> needs_native;
  // What the response object echoes, as the client's JSON text.
  ResponsesEcho echo;
  // The stored conversation this request continues (continue_from): a JSON array of items,
  // its input items then its output; "[]" when none.
  std::string history = "[]";
  size_t history_messages = 0;  // messages of chat.messages that came from `history`
};

// Parses and validates `body`. Without previous_response_id, a function_call_output whose
// call_id no function_call in the input has is a 400; with one, the check waits for
// continue_from (the calls may be in the stored response).
Result<ResponsesRequest> parse_responses(std::string_view body, const ParseOptions& options = {});

// Puts a stored conversation in front of the request's input: `history` is a JSON array of
// items (a stored response's input items and then its output items), parsed by the same rules.
// Then checks every function_call_output against the calls of the history and the input.
Status continue_from(ResponsesRequest& request, std::string_view history);

// The 400 of a function_call_output without its function_call (OpenAI's words), and the check
// itself over a chat history: every tool message's id must be one an assistant called before.
Status check_tool_outputs(const std::vector<Message>& messages);

}  // namespace ferry::api
