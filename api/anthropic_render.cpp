#include "api/anthropic_render.h"

#include "api/json_read.h"
#include "api/json_writer.h"
#include "common/ids.h"

namespace ferry::api {
namespace {

constexpr size_t kIdChars = 24;

std::string_view stop_reason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "end_turn";
    case FinishReason::kLength:
      return "max_tokens";
    case FinishReason::kStopSequence:
      return "stop_sequence";
    case FinishReason::kToolCalls:
      return "tool_use";
    case FinishReason::kContentFilter:
      return "refusal";
    case FinishReason::kError:
      break;
  }
  return "end_turn";
}

// Anthropic counts input apart from cache reads: input_tokens + cache_read = OpenAI's prompt.
void write_usage(JsonWriter& w, const Usage& u) {
  int64_t cached = u.cached_tokens < u.prompt_tokens ? u.cached_tokens : u.prompt_tokens;
  w.raw("{\"input_tokens\":").num(u.prompt_tokens - cached);
  w.raw(",\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":").num(cached);
  w.raw(",\"output_tokens\":").num(u.completion_tokens);
  if (u.reasoning_tokens > 0) {
    w.raw(",\"output_tokens_details\":{\"thinking_tokens\":").num(u.reasoning_tokens).raw("}");
  }
  w.raw("}");
}

void write_stop(JsonWriter& w, FinishReason reason, std::string_view sequence) {
  w.raw("\"stop_reason\":\"").raw(stop_reason(reason)).raw("\",\"stop_sequence\":");
  if (reason == FinishReason::kStopSequence) {
    w.str(sequence);
  } else {
    w.raw("null");
  }
}

// `{"id":..,"type":"message","role":"assistant","model":..,"content":[` (content left open).
void write_message_head(JsonWriter& w, std::string_view id, std::string_view model) {
  w.raw("{\"id\":").str(id).raw(",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
  w.str(model).raw(",\"content\":[");
}

std::string tool_use_id(std::string_view call_id) {
  return call_id.empty() ? make_random_id("toolu_", kIdChars) : std::string(call_id);
}

// A content block as content_block_start carries it: empty text, thinking and input.
void write_empty_block(JsonWriter& w, const BlockStartEvent& e) {
  switch (e.kind) {
    case BlockKind::kText:
      w.raw("{\"type\":\"text\",\"text\":\"\"}");
      break;
    case BlockKind::kToolCall:
      w.raw("{\"type\":\"tool_use\",\"id\":").str(tool_use_id(e.call_id));
      w.raw(",\"name\":").str(e.name).raw(",\"input\":{}}");
      break;
    case BlockKind::kThinking:
      w.raw("{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}");
      break;
  }
}

Error bad_arguments(std::string_view name) {
  return Error::make(ErrorCode::kBackendError, "the arguments of the model's call of tool \"" +
                                                   std::string(name) + "\" are not a JSON object");
}

// Block `i` is the last of an answer the output limit ended: what it holds was cut there.
bool cut_by_limit(const Answer& answer, size_t i) {
  return answer.finish == FinishReason::kLength && i + 1 == answer.blocks.size();
}

}  // namespace

std::optional<Error> anthropic_render_problem(const Answer& answer) {
  for (size_t i = 0; i < answer.blocks.size(); ++i) {
    const Block& b = answer.blocks[i];
    if (b.kind != BlockKind::kToolCall || b.arguments.empty() || cut_by_limit(answer, i)) continue;
    if (!is_json_object(b.arguments)) return bad_arguments(b.name);
  }
  return std::nullopt;
}

WireBody render_anthropic_message(const Answer& answer, const AnthropicRenderOptions& options) {
  auto error_body = [](const Error& e) {
    return WireBody{anthropic_error_kind(e).status, anthropic_error_json(e)};
  };
  if (answer.finish == FinishReason::kError) {
    return error_body(answer.error.value_or(Error::make(ErrorCode::kInternal, "failed")));
  }
  if (auto why = anthropic_render_problem(answer)) return error_body(*why);
  WireBody reply;
  JsonWriter w(reply.body);
  const RenderIdentity& id = options.identity;
  write_message_head(w, id.id.empty() ? make_random_id("msg_", kIdChars) : id.id,
                     id.model.empty() ? answer.model : id.model);
  for (size_t i = 0; i < answer.blocks.size(); ++i) {
    const Block& b = answer.blocks[i];
    if (i > 0) w.raw(",");
    switch (b.kind) {
      case BlockKind::kText:
        w.raw("{\"type\":\"text\",\"text\":").str(b.text).raw("}");
        break;
      case BlockKind::kToolCall: {
        std::string cut;  // the arguments of a call the output limit cut, closed
        std::string_view input = b.arguments.empty() ? std::string_view("{}") : b.arguments;
        if (!b.arguments.empty() && !is_json_object(b.arguments)) {
          cut = close_json_object_prefix(b.arguments);
          input = cut;
        }
        w.raw("{\"type\":\"tool_use\",\"id\":").str(tool_use_id(b.call_id));
        w.raw(",\"name\":").str(b.name).raw(",\"input\":").raw(input).raw("}");
        break;
      }
      case BlockKind::kThinking:
        w.raw("{\"type\":\"thinking\",\"thinking\":").str(b.text);
        w.raw(",\"signature\":").str(b.signature).raw("}");
        break;
    }
  }
  w.raw("],");
  write_stop(w, answer.finish, answer.stop_sequence);
  w.raw(",\"usage\":");
  write_usage(w, answer.usage);
  w.raw("}");
  return reply;
}

// ---------------------------------------------------------------------------------------------
// The stream

void AnthropicStreamRenderer::ping(std::string& out) {
  out.append("event: ping\ndata: {\"type\":\"ping\"}\n\n");
}

void AnthropicStreamRenderer::render_block_stop(uint32_t index, std::string& out) {
  JsonWriter w(out);
  begin_sse_event(out, "content_block_stop");
  w.raw("{\"type\":\"content_block_stop\",\"index\":").num(index).raw("}");
  end_sse_event(out);
}

void AnthropicStreamRenderer::render_error(const Error& error, std::string& out) {
  begin_sse_event(out, "error");
  out.append(anthropic_error_json(error));
  end_sse_event(out);
  done_ = true;
}

// A call whose arguments are not an object stops only if the output limit cut it: the finish
// that follows is max_tokens. False when `event` ended the stream with an error instead.
bool AnthropicStreamRenderer::stop_cut_call(const Event& event, std::string& out) {
  const auto* finish = std::get_if<FinishEvent>(&event);
  if (const auto* e = std::get_if<ErrorEvent>(&event)) {
    render_error(*e->error, out);
    return false;
  }
  if (finish == nullptr || finish->reason != FinishReason::kLength) {
    failure_ = bad_arguments(tool_name_);
    render_error(*failure_, out);
    return false;
  }
  render_block_stop(*cut_call_, out);
  cut_call_.reset();
  return true;
}

void AnthropicStreamRenderer::render_delta(const DeltaEvent& e, std::string& out) {
  if (e.kind == DeltaKind::kSignature) {
    signature_.append(e.fragment);
    return;
  }
  if (e.kind == DeltaKind::kArguments) arguments_.append(e.fragment);
  if (delta_kind_ != e.kind || delta_index_ != e.index || delta_head_.empty()) {
    // What every delta of this block and kind begins with, written once.
    delta_head_.clear();
    JsonWriter h(delta_head_);
    begin_sse_event(delta_head_, "content_block_delta");
    h.raw("{\"type\":\"content_block_delta\",\"index\":").num(e.index);
    switch (e.kind) {
      case DeltaKind::kText:
        h.raw(",\"delta\":{\"type\":\"text_delta\",\"text\":");
        break;
      case DeltaKind::kArguments:
        h.raw(",\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":");
        break;
      default:
        h.raw(",\"delta\":{\"type\":\"thinking_delta\",\"thinking\":");
        break;
    }
    delta_index_ = e.index;
    delta_kind_ = e.kind;
  }
  out.append(delta_head_);
  JsonWriter(out).str(e.fragment).raw("}}\n\n");
}

void AnthropicStreamRenderer::render(const Event& event, std::string& out) {
  if (done_) return;
  if (cut_call_ && !stop_cut_call(event, out)) return;
  JsonWriter w(out);
  if (const auto* e = std::get_if<StartEvent>(&event)) {
    start_usage_ = e->usage;
    const RenderIdentity& id = options_.identity;
    begin_sse_event(out, "message_start");
    w.raw("{\"type\":\"message_start\",\"message\":");
    write_message_head(w, id.id.empty() ? make_random_id("msg_", kIdChars) : id.id,
                       id.model.empty() ? e->model : id.model);
    w.raw("],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":");
    write_usage(w, e->usage);
    w.raw("}}");
    end_sse_event(out);
    ping(out);
  } else if (const auto* e = std::get_if<BlockStartEvent>(&event)) {
    open_kind_ = e->kind;
    tool_name_ = e->name;
    arguments_.clear();
    signature_.clear();
    begin_sse_event(out, "content_block_start");
    w.raw("{\"type\":\"content_block_start\",\"index\":").num(e->index);
    w.raw(",\"content_block\":");
    write_empty_block(w, *e);
    w.raw("}");
    end_sse_event(out);
  } else if (const auto* e = std::get_if<DeltaEvent>(&event)) {
    render_delta(*e, out);
  } else if (const auto* e = std::get_if<BlockStopEvent>(&event)) {
    if (open_kind_ == BlockKind::kToolCall && !arguments_.empty() && !is_json_object(arguments_)) {
      cut_call_ = e->index;  // its stop waits for the finish: cut by max_tokens, or an error
      return;
    }
    if (open_kind_ == BlockKind::kThinking && !signature_.empty()) {
      begin_sse_event(out, "content_block_delta");
      w.raw("{\"type\":\"content_block_delta\",\"index\":").num(e->index);
      w.raw(",\"delta\":{\"type\":\"signature_delta\",\"signature\":").str(signature_).raw("}}");
      end_sse_event(out);
    }
    render_block_stop(e->index, out);
  } else if (const auto* e = std::get_if<FinishEvent>(&event)) {
    begin_sse_event(out, "message_delta");
    w.raw("{\"type\":\"message_delta\",\"delta\":{");
    write_stop(w, e->reason, e->stop_sequence);
    w.raw("},\"usage\":");
    Usage u = e->usage.reported ? e->usage : start_usage_;
    write_usage(w, u);
    w.raw("}");
    end_sse_event(out);
    out.append("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    done_ = true;
  } else if (const auto* e = std::get_if<ErrorEvent>(&event)) {
    render_error(*e->error, out);
  }
}

// ---------------------------------------------------------------------------------------------
// Errors

AnthropicErrorKind anthropic_error_kind(const Error& error) {
  switch (error.code) {
    case ErrorCode::kInvalidRequest:
    case ErrorCode::kContextOverflow:
      return {400, "invalid_request_error"};
    case ErrorCode::kUnauthorized:
      return {401, "authentication_error"};
    case ErrorCode::kForbidden:
      return {403, "permission_error"};
    case ErrorCode::kNotFound:
      return {404, "not_found_error"};
    case ErrorCode::kPayloadTooLarge:
      return {413, "request_too_large"};
    case ErrorCode::kRateLimited:
      return {429, "rate_limit_error"};
    case ErrorCode::kBackendError:
      return {502, "api_error"};
    case ErrorCode::kUnavailable:
      return {529, "overloaded_error"};
    case ErrorCode::kTimeout:
      return {504, "timeout_error"};
    case ErrorCode::kCancelled:
    case ErrorCode::kInternal:
      break;
  }
  return {500, "api_error"};
}

std::string anthropic_error_json(const Error& error, std::string_view request_id) {
  std::string out;
  JsonWriter w(out);
  w.raw("{\"type\":\"error\",\"error\":{\"type\":\"").raw(anthropic_error_kind(error).type);
  w.raw("\",\"message\":").str(error.message).raw("}");
  if (!request_id.empty()) w.raw(",\"request_id\":").str(request_id);
  w.raw("}");
  return out;
}

}  // namespace ferry::api
