// The front-ends ferry serves, one descriptor each (OpenAI chat and completions, Anthropic
// Messages, OpenAI embeddings; OpenAI Responses next): which api::Endpoint it is, its parser to the
// typed request, its error shape, and the renderers of an answer translated from a backend that
// does not speak it. Adding a front-end is one descriptor here and one row of the endpoint table.
// Thread-safety: the descriptors are constants; a StreamRenderer is one per stream.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "api/chat_request.h"
#include "api/events.h"
#include "common/error.h"
#include "gateway/openai_request.h"

namespace ferry::api {
struct ResponsesRequest;
}

namespace ferry::gateway {

// The final `response` object of a Responses answer as the client got it, kept for the response
// store (gateway/responses_front's response_to_store).
struct FinalResponse {
  std::string json;  // empty: none
  // When ferry's stream renderer wrote it: its id and where its `output` array lies in `json`
  // (bytes as api::append_dom_json writes them), so the store need not parse it back.
  // output_size 0: unknown (a backend's body), read from `json`.
  std::string id;
  size_t output_at = 0;
  size_t output_size = 0;
  // Keeps `response` with nothing known of it.
  void assign(std::string_view response) {
    json.assign(response);
    id.clear();
    output_at = output_size = 0;
  }
  void clear() { assign({}); }
};

// What a renderer of a translated answer says beside the answer: the request's id (errors), the
// model the client asked for, and ferry's own prompt count (a stream's start).
struct RenderContext {
  std::string_view request_id;
  std::string_view model;
  int64_t prompt_tokens = -1;  // -1: unknown
  // Responses (gateway/responses_front.h): what the response object echoes of the request, and
  // where the renderer puts the final `response` object for the response store. Null else.
  const api::ResponsesRequest* responses = nullptr;
  FinalResponse* final_response = nullptr;
};

// One stream's renderer: the events of a translated answer to the API's SSE bytes.
class StreamRenderer {
 public:
  virtual ~StreamRenderer() = default;
  virtual void render(const api::Event& event, std::string& out) = 0;
  // Why the renderer could not render the answer it was given (it ended the stream with its
  // error event), if it could not.
  virtual std::optional<Error> failure() const = 0;
  // The answer this renderer ended (its end not sent) failed after all (the ledger): the
  // API's failure event in the same stream (Responses: response.failed with its id and next
  // sequence number); false when the front-end's plain stream_error is its failure event.
  virtual bool fail_after_end(const Error& /*error*/, std::string& /*out*/) { return false; }
};

// What the client's request carries beside its body that a front-end reads.
struct FrontEndHeaders {
  std::string_view anthropic_version;
  std::string_view anthropic_beta;
};

struct FrontEnd {
  api::Endpoint api;
  // The body parsed and validated into the typed request and its routing fields (this API's
  // errors). The body is moved in (ParsedRequest::raw). `count_only`: a token-count request
  // (Messages' count_tokens: no max_tokens).
  Result<ParsedRequest> (*parse)(std::string body, const FrontEndHeaders& headers, bool count_only);
  // An error as this API shapes it: the HTTP status and the JSON body.
  api::WireBody (*error_body)(const Error& error, std::string_view request_id);
  // A stream that has begun ends with this error event (SSE bytes).
  std::string (*stream_error)(const Error& error);
  // What ends a stream that succeeded ("data: [DONE]\n\n" for OpenAI, nothing for Messages).
  std::string_view stream_done;
  // The renderers of an answer translated from OpenAI chat (null: this front-end is never
  // translated, its requests go to backends that speak it); an answer the API cannot carry is
  // an error (kBackendError).
  Result<api::WireBody> (*render_answer)(const api::Answer& answer,
                                         const RenderContext& context) = nullptr;
  std::unique_ptr<StreamRenderer> (*stream_renderer)(const RenderContext& context) = nullptr;
};

// The descriptor of a front-end (every api::Endpoint has one).
const FrontEnd& frontend(api::Endpoint api);

// Whether a hop to a backend that speaks `backend` answers a `client` request in another API
// (then the reply is translated through the typed events).
inline bool translates(api::Endpoint client, api::Endpoint backend) {
  return client != backend;
}

}  // namespace ferry::gateway
