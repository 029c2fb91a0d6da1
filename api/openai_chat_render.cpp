#include "api/openai_chat_render.h"

#include <ctime>

#include "api/json_writer.h"
#include "common/ids.h"

namespace ferry::api {
namespace {

constexpr size_t kChatIdChars = 29;

std::string_view chat_finish_reason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
    case FinishReason::kStopSequence:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kToolCalls:
      return "tool_calls";
    case FinishReason::kContentFilter:
      return "content_filter";
    case FinishReason::kError:
      break;
  }
  return "stop";
}

void write_usage(JsonWriter& w, const Usage& u) {
  w.raw("{\"prompt_tokens\":").num(u.prompt_tokens);
  w.raw(",\"completion_tokens\":").num(u.completion_tokens);
  w.raw(",\"total_tokens\":").num(u.total_tokens());
  w.raw(",\"prompt_tokens_details\":{\"cached_tokens\":").num(u.cached_tokens);
  w.raw("},\"completion_tokens_details\":{\"reasoning_tokens\":").num(u.reasoning_tokens);
  w.raw("}}");
}

// `"id":..,"object":..,"created":..,"model":..` from the identity, else the answer's.
void write_header(JsonWriter& w, const RenderIdentity& identity, std::string_view answer_model,
                  int64_t answer_created, std::string_view object) {
  std::string id = identity.id.empty() ? make_random_id("chatcmpl-", kChatIdChars) : identity.id;
  int64_t created = identity.created != 0 ? identity.created
                    : answer_created != 0 ? answer_created
                                          : static_cast<int64_t>(std::time(nullptr));
  w.raw("{\"id\":").str(id).raw(",\"object\":\"").raw(object).raw("\",\"created\":").num(created);
  w.raw(",\"model\":").str(identity.model.empty() ? answer_model : identity.model);
}

// The message of a body: content, reasoning_content, tool_calls.
void write_message(JsonWriter& w, const Answer& answer) {
  std::string text, thinking;
  bool has_text = false;
  for (const Block& b : answer.blocks) {
    if (b.kind == BlockKind::kText) {
      text += b.text;
      has_text = true;
    } else if (b.kind == BlockKind::kThinking) {
      thinking += b.text;
    }
  }
  w.raw("{\"role\":\"assistant\",\"content\":");
  if (has_text) {
    w.str(text);
  } else {
    w.raw("null");
  }
  if (!thinking.empty()) w.raw(",\"reasoning_content\":").str(thinking);
  bool first = true;
  for (const Block& b : answer.blocks) {
    if (b.kind != BlockKind::kToolCall) continue;
    w.raw(first ? ",\"tool_calls\":[" : ",");
    first = false;
    w.raw("{\"id\":").str(b.call_id.empty() ? make_random_id("call_", 24) : b.call_id);
    w.raw(",\"type\":\"function\",\"function\":{\"name\":").str(b.name);
    w.raw(",\"arguments\":").str(b.arguments).raw("}}");
  }
  if (!first) w.raw("]");
  w.raw("}");
}

}  // namespace

WireBody render_chat_completion(const Answer& answer, const ChatRenderOptions& options) {
  if (answer.finish == FinishReason::kError) {
    Error e = answer.error.value_or(Error::make(ErrorCode::kInternal, "the answer failed"));
    return {openai_error_status(e), openai_error_json(e)};
  }
  WireBody reply;
  JsonWriter w(reply.body);
  write_header(w, options.identity, answer.model, answer.created, "chat.completion");
  w.raw(",\"choices\":[{\"index\":0,\"message\":");
  write_message(w, answer);
  w.raw(",\"logprobs\":null,\"finish_reason\":\"").raw(chat_finish_reason(answer.finish));
  w.raw("\"}],\"usage\":");
  write_usage(w, answer.usage);
  w.raw("}");
  return reply;
}

// ---------------------------------------------------------------------------------------------
// The stream

void ChatStreamRenderer::open_chunk(std::string& out) const {
  out.append(prefix_);
}

void ChatStreamRenderer::render(const Event& event, std::string& out) {
  if (done_) return;
  JsonWriter w(out);
  // Each chunk: prefix_ + `{"index":0,"delta":{...},"logprobs":null,"finish_reason":...}]}`.
  auto choice = [&](auto&& write_delta, std::string_view finish) {
    open_chunk(out);
    w.raw("{\"index\":0,\"delta\":{");
    write_delta();
    w.raw("},\"logprobs\":null,\"finish_reason\":").raw(finish).raw("}]}");
    end_sse_event(out);
  };
  if (const auto* e = std::get_if<StartEvent>(&event)) {
    std::string header;
    JsonWriter h(header);
    begin_sse_event(header, {});
    RenderIdentity identity = options_.identity;
    if (identity.id.empty()) identity.id = make_random_id("chatcmpl-", kChatIdChars);
    write_header(h, identity, e->model, e->created, "chat.completion.chunk");
    h.raw(",\"choices\":[");
    prefix_ = std::move(header);
    choice([&] { w.raw("\"role\":\"assistant\",\"content\":\"\""); }, "null");
  } else if (const auto* e = std::get_if<BlockStartEvent>(&event)) {
    if (e->kind != BlockKind::kToolCall) return;
    choice(
        [&] {
          w.raw("\"tool_calls\":[{\"index\":").num(tool_calls_).raw(",\"id\":");
          w.str(e->call_id.empty() ? make_random_id("call_", 24) : std::string(e->call_id));
          w.raw(",\"type\":\"function\",\"function\":{\"name\":").str(e->name);
          w.raw(",\"arguments\":\"\"}}]");
        },
        "null");
    ++tool_calls_;
  } else if (const auto* e = std::get_if<DeltaEvent>(&event)) {
    switch (e->kind) {
      case DeltaKind::kText:
        choice([&] { w.raw("\"content\":").str(e->fragment); }, "null");
        break;
      case DeltaKind::kThinking:
        choice([&] { w.raw("\"reasoning_content\":").str(e->fragment); }, "null");
        break;
      case DeltaKind::kArguments:
        choice(
            [&] {
              w.raw("\"tool_calls\":[{\"index\":").num(tool_calls_ - 1);
              w.raw(",\"function\":{\"arguments\":").str(e->fragment).raw("}}]");
            },
            "null");
        break;
      case DeltaKind::kSignature:  // chat has no place for it (see the header)
        break;
    }
  } else if (const auto* e = std::get_if<FinishEvent>(&event)) {
    std::string finish = "\"" + std::string(chat_finish_reason(e->reason)) + "\"";
    choice([] {}, finish);
    if (options_.include_usage) {
      open_chunk(out);
      out.pop_back();  // the '[' of choices: this chunk has none
      w.raw("[],\"usage\":");
      write_usage(w, e->usage);
      w.raw("}");
      end_sse_event(out);
    }
    out.append("data: [DONE]\n\n");
    done_ = true;
  } else if (const auto* e = std::get_if<ErrorEvent>(&event)) {
    begin_sse_event(out, {});
    out.append(openai_error_json(*e->error));
    end_sse_event(out);
    done_ = true;
  }
}

// ---------------------------------------------------------------------------------------------
// Errors

namespace {

std::string_view openai_error_type(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidRequest:
    case ErrorCode::kContextOverflow:
    case ErrorCode::kNotFound:
    case ErrorCode::kPayloadTooLarge:
      return "invalid_request_error";
    case ErrorCode::kUnauthorized:
      return "authentication_error";
    case ErrorCode::kForbidden:
      return "permission_error";
    case ErrorCode::kRateLimited:
      return "rate_limit_error";
    case ErrorCode::kTimeout:
      return "timeout_error";
    case ErrorCode::kBackendError:
    case ErrorCode::kUnavailable:
    case ErrorCode::kCancelled:
    case ErrorCode::kInternal:
      break;
  }
  return "server_error";
}

std::string_view openai_default_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::kUnauthorized:
      return "invalid_api_key";
    case ErrorCode::kNotFound:
      return "model_not_found";
    case ErrorCode::kPayloadTooLarge:
      return "request_too_large";
    case ErrorCode::kContextOverflow:
      return "context_length_exceeded";
    case ErrorCode::kRateLimited:
      return "rate_limit_exceeded";
    case ErrorCode::kBackendError:
      return "backend_error";
    case ErrorCode::kUnavailable:
      return "backend_unavailable";
    case ErrorCode::kTimeout:
      return "backend_timeout";
    default:
      return {};
  }
}

}  // namespace

int openai_error_status(const Error& error) {
  switch (error.code) {
    case ErrorCode::kInvalidRequest:
    case ErrorCode::kContextOverflow:
      return 400;
    case ErrorCode::kUnauthorized:
      return 401;
    case ErrorCode::kForbidden:
      return 403;
    case ErrorCode::kNotFound:
      return 404;
    case ErrorCode::kPayloadTooLarge:
      return 413;
    case ErrorCode::kRateLimited:
      return 429;
    case ErrorCode::kBackendError:
      return 502;
    case ErrorCode::kUnavailable:
      return 503;
    case ErrorCode::kTimeout:
      return 504;
    case ErrorCode::kCancelled:
      return 499;
    case ErrorCode::kInternal:
      return 500;
  }
  return 500;
}

std::string openai_error_json(const Error& error) {
  std::string out;
  JsonWriter w(out);
  w.raw("{\"error\":{\"message\":").str(error.message);
  w.raw(",\"type\":\"").raw(openai_error_type(error.code)).raw("\",\"param\":");
  w.str_or_null(error.param).raw(",\"code\":");
  w.str_or_null(error.type_code.empty() ? openai_default_code(error.code) : error.type_code);
  w.raw("}}");
  return out;
}

}  // namespace ferry::api
