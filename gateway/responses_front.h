// The OpenAI Responses front-end (POST /v1/responses): the functions of its descriptor
// (gateway/frontend.h): the body parsed into the typed request (api/responses_parse.h), an
// answer translated from OpenAI chat rendered as a `response` object or its event stream
// (api/responses_render.h), and stored responses (ledger/response_store.h): what is kept of an
// answer, and a stored conversation put in front of a request with previous_response_id.
// Stateless functions; a stream renderer is one per stream, not thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "api/events.h"
#include "api/responses_parse.h"
#include "common/error.h"
#include "gateway/frontend.h"
#include "gateway/openai_request.h"
#include "ledger/response_store.h"

namespace ferry::gateway {

// The descriptor's parser: ParsedRequest::responses holds the Responses side, `typed` its chat
// request. The task is metadata.task_id, else prompt_cache_key (x-ferry-task wins over both).
Result<ParsedRequest> parse_responses_request(std::string body, const FrontEndHeaders& headers,
                                              bool count_only);

Result<api::WireBody> render_responses_answer(const api::Answer& answer,
                                              const RenderContext& context);
std::unique_ptr<StreamRenderer> responses_stream_renderer(const RenderContext& context);
// A Responses stream that fails outside a renderer: its `error` event (type, code, message,
// param).
std::string responses_stream_error(const Error& error);

// The 404 of a previous_response_id ferry does not have (missing, expired, another key's).
Error previous_response_not_found(std::string_view id);

// Puts the stored conversation in front of the request (its items, then its output) and
// re-checks the function calls; the typed request is replaced.
Status apply_previous_response(ParsedRequest& request, const ledger::StoredResponse& stored);

// What is kept of an answer: the request's input items (after the previous response's history)
// and the `response` object the client was sent (`response_json`); nullopt when the request
// asked not to be stored or the response is not one (an error body).
std::optional<ledger::StoredResponse> response_to_store(const api::ResponsesRequest& request,
                                                        std::string_view response_json,
                                                        const std::string& key_id);
// The same from what a renderer kept: its id and output as written when it says where they
// are (no parse), else read from the object as above.
std::optional<ledger::StoredResponse> response_to_store(const api::ResponsesRequest& request,
                                                        const FinalResponse& final,
                                                        const std::string& key_id);

}  // namespace ferry::gateway
