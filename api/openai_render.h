// The typed request written as OpenAI JSON: the whole body for an OpenAI-compatible backend
// (where the client's bytes cannot be passed through: a request another front-end parsed), and
// the chat template's input (messages, tools, chat_template_kwargs) for the local engine and
// the prompt counters. Stateless functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "api/chat_request.h"

namespace ferry::api {

// The request as an OpenAI chat/completions or completions body. Known members are written in
// OpenAI's documented order, each object's kept `extra` members after them; parse_openai of
// the result gives back the same typed value.
Json to_openai_json(const ChatRequest& request);

// to_openai_json text for a backend: `model` named `upstream_model`, a rule's overrides applied
// (max_tokens written under the name the client used, max_tokens when none), and for streams
// stream_options.include_usage set so usage always comes back.
std::string render_openai(const ChatRequest& request, std::string_view upstream_model,
                          const Overrides& overrides = {});

// What a chat template renders (tokenizer::ChatFormatter): {"messages": [...]} with `tools`
// and `chat_template_kwargs` when the request has them; for completions {"prompt": ...}.
// Messages are written as to_openai_json writes them. Built directly, equal (types included) to
// template_input_by_text, its definition: the same members written as text and parsed back.
Json template_input(const ChatRequest& request);
Json template_input_by_text(const ChatRequest& request);

}  // namespace ferry::api
