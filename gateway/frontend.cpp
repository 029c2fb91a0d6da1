#include "gateway/frontend.h"

#include <utility>

#include "api/anthropic_parse.h"
#include "api/anthropic_render.h"
#include "api/openai_chat_render.h"
#include "gateway/errors.h"
#include "gateway/responses_front.h"

namespace ferry::gateway {

namespace {

// ---- OpenAI chat and completions ------------------------------------------------------------

template <api::Endpoint kApi>
Result<ParsedRequest> parse_openai_request(std::string body, const FrontEndHeaders&, bool) {
  return parse_request(kApi, std::move(body));
}

api::WireBody openai_error_body(const Error& error, std::string_view /*request_id*/) {
  return {http_status_for(error), error_json(error)};
}

std::string openai_stream_error(const Error& error) {
  return "data: " + error_json(error) + "\n\n";
}

Result<api::WireBody> render_chat(const api::Answer& answer, const RenderContext& context) {
  api::ChatRenderOptions options;
  options.identity.model = std::string(context.model);
  return api::render_chat_completion(answer, options);
}

// ---- Anthropic Messages ---------------------------------------------------------------------

Result<ParsedRequest> parse_messages(std::string body, const FrontEndHeaders& headers,
                                     bool count_only) {
  ParsedRequest out;
  out.endpoint = api::Endpoint::kChatCompletions;  // the typed value is chat-shaped
  out.api = api::Endpoint::kMessages;
  out.raw = std::move(body);
  auto request = std::make_shared<api::ChatRequest>();
  api::AnthropicParseInfo info;
  api::AnthropicParseOptions options;
  options.count_tokens = count_only;
  options.readable_past_end = out.raw.capacity() - out.raw.size();  // the reader's slack: no copy
  if (Status s = api::parse_anthropic_into(out.raw, *request, info, options); !s) {
    return s.error();
  }
  out.model = request->model;
  out.stream = request->streams();
  out.max_tokens = request->limits.effective_max_tokens();
  out.temperature = request->sampling.temperature;
  out.top_p = request->sampling.top_p;
  out.tools = request->has_tools();
  out.model_keys = info.model_keys;
  out.native_only = std::move(info.native_only);
  if (!headers.anthropic_version.empty()) {
    out.native_headers.emplace_back("anthropic-version", std::string(headers.anthropic_version));
  }
  if (!headers.anthropic_beta.empty()) {
    out.native_headers.emplace_back("anthropic-beta", std::string(headers.anthropic_beta));
  }
  out.typed = std::move(request);
  return out;
}

api::WireBody anthropic_error_body(const Error& error, std::string_view request_id) {
  return {api::anthropic_error_kind(error).status, api::anthropic_error_json(error, request_id)};
}

std::string anthropic_stream_error(const Error& error) {
  std::string out;
  api::AnthropicStreamRenderer renderer;
  renderer.render(api::ErrorEvent{&error}, out);
  return out;
}

Result<api::WireBody> render_message(const api::Answer& answer, const RenderContext& context) {
  if (auto why = api::anthropic_render_problem(answer)) return std::move(*why);
  api::AnthropicRenderOptions options;
  options.identity.model = std::string(context.model);
  return api::render_anthropic_message(answer, options);
}

// ---- stream renderers -----------------------------------------------------------------------

// An api/ stream renderer behind the StreamRenderer interface.
template <typename Renderer>
class RendererOf final : public StreamRenderer {
 public:
  explicit RendererOf(Renderer r) : renderer_(std::move(r)) {}
  void render(const api::Event& event, std::string& out) override { renderer_.render(event, out); }
  std::optional<Error> failure() const override {
    if constexpr (requires { renderer_.failure(); }) {
      return renderer_.failure();
    } else {
      return std::nullopt;
    }
  }

 private:
  Renderer renderer_;
};

std::unique_ptr<StreamRenderer> chat_stream(const RenderContext& context) {
  api::ChatRenderOptions options;
  options.identity.model = std::string(context.model);
  options.include_usage = true;
  return std::make_unique<RendererOf<api::ChatStreamRenderer>>(api::ChatStreamRenderer(options));
}

std::unique_ptr<StreamRenderer> messages_stream(const RenderContext& context) {
  api::AnthropicRenderOptions options;
  options.identity.model = std::string(context.model);
  return std::make_unique<RendererOf<api::AnthropicStreamRenderer>>(
      api::AnthropicStreamRenderer(options));
}

// The front-ends, in api::Endpoint's order.
const FrontEnd kFrontEnds[] = {
    {api::Endpoint::kChatCompletions, parse_openai_request<api::Endpoint::kChatCompletions>,
     openai_error_body, openai_stream_error, "data: [DONE]\n\n", render_chat, chat_stream},
    {api::Endpoint::kCompletions, parse_openai_request<api::Endpoint::kCompletions>,
     openai_error_body, openai_stream_error, "data: [DONE]\n\n"},
    {api::Endpoint::kMessages, parse_messages, anthropic_error_body, anthropic_stream_error, "",
     render_message, messages_stream},
    {api::Endpoint::kResponses, parse_responses_request, openai_error_body, responses_stream_error,
     "", render_responses_answer, responses_stream_renderer},
    {api::Endpoint::kEmbeddings, parse_openai_request<api::Endpoint::kEmbeddings>,
     openai_error_body, openai_stream_error, "data: [DONE]\n\n"},
};

}  // namespace

const FrontEnd& frontend(api::Endpoint api) {
  for (const auto& f : kFrontEnds) {
    if (f.api == api) return f;
  }
  return kFrontEnds[0];
}

}  // namespace ferry::gateway
