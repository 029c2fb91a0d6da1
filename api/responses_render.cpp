#include "api/responses_render.h"

#include <ctime>
#include <tuple>
#include <utility>

#include "api/json_writer.h"
#include "api/openai_chat_render.h"
#include "common/ids.h"

namespace ferry::api {
namespace {

constexpr size_t kIdChars = 48;
constexpr size_t kCallIdChars = 24;

using ItemStatus = ResponsesStreamRenderer::ItemStatus;

std::string_view status_name(ItemStatus s) {
  switch (s) {
    case ItemStatus::kInProgress:
      return "in_progress";
    case ItemStatus::kCompleted:
      return "completed";
    case ItemStatus::kIncomplete:
      return "incomplete";
    case ItemStatus::kFailed:
      return "failed";
  }
  return "failed";
}

ItemStatus final_status(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
    case FinishReason::kContentFilter:
      return ItemStatus::kIncomplete;
    case FinishReason::kError:
      return ItemStatus::kFailed;
    default:
      return ItemStatus::kCompleted;
  }
}

// A finished item's status: the item the answer ended in is cut short (incomplete) when the
// limit, a filter or a failure ended the response; the others completed.
ItemStatus item_status(ItemStatus response, bool last) {
  return last && response != ItemStatus::kCompleted ? ItemStatus::kIncomplete
                                                    : ItemStatus::kCompleted;
}

ResponseItemIds make_item_ids(BlockKind kind, std::string_view call_id) {
  switch (kind) {
    case BlockKind::kText:
      return {make_random_id("msg_", kIdChars), {}};
    case BlockKind::kThinking:
      return {make_random_id("rs_", kIdChars), {}};
    case BlockKind::kToolCall:
      break;
  }
  return {make_random_id("fc_", kIdChars),
          call_id.empty() ? make_random_id("call_", kCallIdChars) : std::string(call_id)};
}

// The `code` of a failed response's `error`, in the vocabulary Responses allows.
std::string_view failed_code(const Error& e) {
  switch (e.code) {
    case ErrorCode::kRateLimited:
      return "rate_limit_exceeded";
    case ErrorCode::kInvalidRequest:
    case ErrorCode::kContextOverflow:
      return "invalid_prompt";
    default:
      return "server_error";
  }
}

// An output_text or reasoning_text part with `text`.
void write_part(JsonWriter& w, BlockKind kind, std::string_view text) {
  if (kind == BlockKind::kThinking) {
    w.raw("{\"type\":\"reasoning_text\",\"text\":").str(text).raw("}");
  } else {
    w.raw("{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":").str(text);
    w.raw("}");
  }
}

// One output item for block `b`; `whole` false writes it as output_item.added does (no
// content, empty arguments).
void write_item(JsonWriter& w, const Block& b, const ResponseItemIds& ids, ItemStatus status,
                bool whole) {
  w.raw("{\"id\":").quoted_id(ids.item);
  switch (b.kind) {
    case BlockKind::kText:
      w.raw(",\"type\":\"message\",\"status\":\"").raw(status_name(status));
      w.raw("\",\"role\":\"assistant\",\"content\":[");
      if (whole) write_part(w, b.kind, b.text);
      w.raw("]}");
      break;
    case BlockKind::kThinking:
      w.raw(",\"type\":\"reasoning\",\"summary\":[],\"content\":[");
      if (whole) write_part(w, b.kind, b.text);
      w.raw("]}");
      break;
    case BlockKind::kToolCall:
      w.raw(",\"type\":\"function_call\",\"status\":\"").raw(status_name(status));
      w.raw("\",\"arguments\":").str(whole ? std::string_view(b.arguments) : "");
      w.raw(",\"call_id\":").str(ids.call).raw(",\"name\":").str(b.name).raw("}");
      break;
  }
}

void write_usage(JsonWriter& w, const Usage& u) {
  w.raw("{\"input_tokens\":").num(u.prompt_tokens);
  w.raw(",\"input_tokens_details\":{\"cached_tokens\":").num(u.cached_tokens);
  w.raw("},\"output_tokens\":").num(u.completion_tokens);
  w.raw(",\"output_tokens_details\":{\"reasoning_tokens\":").num(u.reasoning_tokens);
  w.raw("},\"total_tokens\":").num(u.total_tokens()).raw("}");
}

// The whole `response` object. `answer` holds the blocks so far (all when the status is
// final); `ids` has one entry per block.
struct ResponseView {
  std::string_view id;
  int64_t created_at = 0;
  std::string_view model;
  ItemStatus status = ItemStatus::kInProgress;
  const Answer* answer = nullptr;
  const std::vector<ResponseItemIds>* ids = nullptr;
  const ResponsesEcho* echo = nullptr;
};

// `output` (when given) is set to where the `output` array lies in w.out().
void write_response(JsonWriter& w, const ResponseView& r,
                    std::pair<size_t, size_t>* output = nullptr) {
  const Answer& a = *r.answer;
  const ResponsesEcho& echo = *r.echo;
  w.raw("{\"id\":").str(r.id).raw(",\"object\":\"response\",\"created_at\":").num(r.created_at);
  w.raw(",\"status\":\"").raw(status_name(r.status)).raw("\",\"error\":");
  if (r.status == ItemStatus::kFailed && a.error) {
    w.raw("{\"code\":\"").raw(failed_code(*a.error)).raw("\",\"message\":").str(a.error->message);
    w.raw("}");
  } else {
    w.raw("null");
  }
  w.raw(",\"incomplete_details\":");
  if (r.status == ItemStatus::kIncomplete) {
    w.raw(a.finish == FinishReason::kLength ? "{\"reason\":\"max_output_tokens\"}"
                                            : "{\"reason\":\"content_filter\"}");
  } else {
    w.raw("null");
  }
  w.raw(",\"instructions\":").raw(echo.instructions).raw(",\"max_output_tokens\":");
  if (echo.max_output_tokens < 0) {
    w.raw("null");
  } else {
    w.num(echo.max_output_tokens);
  }
  w.raw(",\"model\":").str(r.model).raw(",\"output\":");
  const size_t output_at = w.out().size();
  w.raw("[");
  bool final_status = r.status != ItemStatus::kInProgress;
  for (size_t i = 0; final_status && i < a.blocks.size(); ++i) {
    if (i > 0) w.raw(",");
    write_item(w, a.blocks[i], (*r.ids)[i], item_status(r.status, i + 1 == a.blocks.size()),
               /*whole=*/true);
  }
  w.raw("]");
  if (output != nullptr) *output = {output_at, w.out().size()};
  w.raw(",\"parallel_tool_calls\":").raw(echo.parallel_tool_calls ? "true" : "false");
  w.raw(",\"previous_response_id\":").str_or_null(echo.previous_response_id);
  w.raw(",\"reasoning\":{\"effort\":null,\"summary\":null},\"store\":");
  w.raw(echo.store ? "true" : "false").raw(",\"temperature\":").raw(echo.temperature);
  w.raw(",\"text\":").raw(echo.text).raw(",\"tool_choice\":").raw(echo.tool_choice);
  w.raw(",\"tools\":").raw(echo.tools).raw(",\"top_p\":").raw(echo.top_p);
  w.raw(",\"truncation\":\"disabled\",\"usage\":");
  if (final_status) {
    write_usage(w, a.usage);
  } else {
    w.raw("null");
  }
  w.raw(",\"metadata\":").raw(echo.metadata).raw("}");
}

int64_t created_or_now(int64_t a, int64_t b) {
  if (a != 0) return a;
  if (b != 0) return b;
  return static_cast<int64_t>(std::time(nullptr));
}

}  // namespace

WireBody render_response(const Answer& answer, const ResponsesRenderOptions& options) {
  if (answer.finish == FinishReason::kError) {
    Error e = answer.error.value_or(Error::make(ErrorCode::kInternal, "the answer failed"));
    return {openai_error_status(e), openai_error_json(e)};
  }
  std::vector<ResponseItemIds> ids;
  ids.reserve(answer.blocks.size());
  for (const Block& b : answer.blocks) ids.push_back(make_item_ids(b.kind, b.call_id));
  const RenderIdentity& identity = options.identity;
  std::string id = identity.id.empty() ? make_random_id("resp_", kIdChars) : identity.id;
  ResponseView view{id,
                    created_or_now(identity.created, answer.created),
                    identity.model.empty() ? answer.model : identity.model,
                    final_status(answer.finish),
                    &answer,
                    &ids,
                    &options.echo};
  WireBody reply;
  JsonWriter w(reply.body);
  write_response(w, view);
  return reply;
}

// ---------------------------------------------------------------------------------------------
// The stream

ResponsesStreamRenderer::ResponsesStreamRenderer(ResponsesRenderOptions options)
    : options_(std::move(options)) {}

void ResponsesStreamRenderer::begin(std::string& out, std::string_view type) {
  response_at_ = response_end_ = output_at_ = output_end_ = 0;
  begin_sse_event(out, type);
  JsonWriter w(out);
  w.raw("{\"type\":\"").raw(type).raw("\",\"sequence_number\":").num(sequence_++);
}

// An event that carries the whole response in its present state.
void ResponsesStreamRenderer::render_response_event(std::string& out, std::string_view type) {
  const Answer& a = builder_.answer();
  ItemStatus status = type == "response.created" || type == "response.in_progress"
                          ? ItemStatus::kInProgress
                          : final_status(a.finish);
  begin(out, type);
  JsonWriter w(out);
  w.raw(",\"response\":");
  response_at_ = out.size();
  std::pair<size_t, size_t> output;
  write_response(w, ResponseView{id_, created_at_, model_, status, &a, &ids_, &options_.echo},
                 &output);
  response_end_ = out.size();
  std::tie(output_at_, output_end_) = output;
  w.raw("}");
  end_sse_event(out);
}

void ResponsesStreamRenderer::render_start(const StartEvent& e, std::string& out) {
  const RenderIdentity& identity = options_.identity;
  id_ = identity.id.empty() ? make_random_id("resp_", kIdChars) : identity.id;
  model_ = identity.model.empty() ? std::string(e.model) : identity.model;
  created_at_ = created_or_now(identity.created, e.created);
  started_ = true;
  render_response_event(out, "response.created");
  // response.in_progress carries the same object (in progress, no output, usage null): its
  // bytes again rather than written twice.
  const size_t at = response_at_, size = response_end_ - response_at_;
  begin(out, "response.in_progress");
  out.append(",\"response\":");
  response_at_ = out.size();
  out.append(out, at, size);  // a self-append: libstdc++ copies before it frees
  response_end_ = out.size();
  output_at_ = output_end_ = 0;
  out.push_back('}');
  end_sse_event(out);
}

void ResponsesStreamRenderer::render_block_start(const BlockStartEvent& e, std::string& out) {
  render_item_done(out, ItemStatus::kCompleted);  // another block follows the last one
  const ResponseItemIds& ids = ids_.emplace_back(make_item_ids(e.kind, e.call_id));
  const Block& b = builder_.answer().blocks.back();
  JsonWriter w(out);
  begin(out, "response.output_item.added");
  w.raw(",\"output_index\":").num(e.index).raw(",\"item\":");
  write_item(w, b, ids, ItemStatus::kInProgress, /*whole=*/false);
  w.raw("}");
  end_sse_event(out);
  if (e.kind == BlockKind::kToolCall) return;
  begin(out, "response.content_part.added");
  w.raw(",\"item_id\":").quoted_id(ids.item).raw(",\"output_index\":").num(e.index);
  w.raw(",\"content_index\":0,\"part\":");
  write_part(w, e.kind, "");
  w.raw("}");
  end_sse_event(out);
}

void ResponsesStreamRenderer::render_delta(const DeltaEvent& e, std::string& out) {
  if (e.kind == DeltaKind::kSignature) return;  // Responses has no place for another API's
  if (delta_heads_.size() <= e.index) delta_heads_.resize(e.index + 1);
  ResponseDeltaHead& head = delta_heads_[e.index];
  if (head.kind != static_cast<int>(e.kind)) {
    // `event: <type>\ndata: {"type":"<type>","sequence_number":` and, after the number,
    // `,"item_id":"…","output_index":N[,"content_index":0],"delta":`.
    std::string_view type = e.kind == DeltaKind::kText ? "response.output_text.delta"
                            : e.kind == DeltaKind::kThinking
                                ? "response.reasoning_text.delta"
                                : "response.function_call_arguments.delta";
    head.open.clear();
    begin_sse_event(head.open, type);
    JsonWriter o(head.open);
    o.raw("{\"type\":\"").raw(type).raw("\",\"sequence_number\":");
    head.middle.clear();
    JsonWriter m(head.middle);
    m.raw(",\"item_id\":").quoted_id(ids_[e.index].item).raw(",\"output_index\":").num(e.index);
    if (e.kind != DeltaKind::kArguments) m.raw(",\"content_index\":0");
    m.raw(",\"delta\":");
    head.close = e.kind == DeltaKind::kText ? ",\"logprobs\":[]}" : "}";
    head.kind = static_cast<int>(e.kind);
  }
  response_at_ = response_end_ = output_at_ = output_end_ = 0;  // an event begun (as begin())
  // One allocation at most: the event's size is known but for the escapes of the fragment.
  out.reserve(out.size() + head.open.size() + 20 + head.middle.size() + e.fragment.size() + 2 +
              head.close.size() + 2);
  JsonWriter w(out);
  w.raw(head.open).num(sequence_++).raw(head.middle).str(e.fragment).raw(head.close);
  end_sse_event(out);
}

void ResponsesStreamRenderer::render_block_stop(const BlockStopEvent& e, std::string& out) {
  const Block& b = builder_.answer().blocks[e.index];
  const ResponseItemIds& ids = ids_[e.index];
  JsonWriter w(out);
  auto head = [&](std::string_view type) {
    begin(out, type);
    w.raw(",\"item_id\":").quoted_id(ids.item).raw(",\"output_index\":").num(e.index);
  };
  if (b.kind == BlockKind::kToolCall) {
    head("response.function_call_arguments.done");
    w.raw(",\"arguments\":").str(b.arguments).raw(",\"name\":").str(b.name).raw("}");
    end_sse_event(out);
  } else {
    bool text = b.kind == BlockKind::kText;
    head(text ? "response.output_text.done" : "response.reasoning_text.done");
    w.raw(",\"content_index\":0,\"text\":").str(b.text).raw(text ? ",\"logprobs\":[]}" : "}");
    end_sse_event(out);
    head("response.content_part.done");
    w.raw(",\"content_index\":0,\"part\":");
    write_part(w, b.kind, b.text);
    w.raw("}");
    end_sse_event(out);
  }
  pending_done_ = static_cast<int64_t>(e.index);  // its status: when the next event says
}

void ResponsesStreamRenderer::render_item_done(std::string& out, ItemStatus status) {
  if (pending_done_ < 0) return;
  auto index = static_cast<size_t>(std::exchange(pending_done_, -1));
  JsonWriter w(out);
  begin(out, "response.output_item.done");
  w.raw(",\"output_index\":").num(static_cast<int64_t>(index)).raw(",\"item\":");
  write_item(w, builder_.answer().blocks[index], ids_[index], status, /*whole=*/true);
  w.raw("}");
  end_sse_event(out);
}

void ResponsesStreamRenderer::render_failed(const Error& error, std::string& out) {
  Answer failed = builder_.answer();
  failed.finish = FinishReason::kError;
  failed.error = error;
  render_item_done(out, ItemStatus::kIncomplete);
  begin(out, "response.failed");
  JsonWriter w(out);
  w.raw(",\"response\":");
  response_at_ = out.size();
  std::pair<size_t, size_t> output;
  write_response(
      w,
      ResponseView{id_, created_at_, model_, ItemStatus::kFailed, &failed, &ids_, &options_.echo},
      &output);
  response_end_ = out.size();
  std::tie(output_at_, output_end_) = output;
  w.raw("}");
  end_sse_event(out);
}

void ResponsesStreamRenderer::fail_after_end(const Error& error, std::string& out) {
  if (!started_) return;
  done_ = true;
  sequence_ = end_sequence_;  // the end rendered is not sent: its numbers are free again
  pending_done_ = end_pending_;
  render_failed(error, out);
}

void ResponsesStreamRenderer::render_end(std::string& out) {
  done_ = true;
  end_sequence_ = sequence_;
  end_pending_ = pending_done_;
  const Answer& a = builder_.answer();
  // A producer broke the event grammar: the stream fails rather than render nonsense.
  if (builder_.violation() && started_) return render_failed(*builder_.violation(), out);
  if (a.finish != FinishReason::kError && !builder_.violation()) {
    render_item_done(out, item_status(final_status(a.finish), true));
    bool complete = final_status(a.finish) == ItemStatus::kCompleted;
    return render_response_event(out, complete ? "response.completed" : "response.incomplete");
  }
  render_item_done(out, ItemStatus::kIncomplete);
  if (started_) return render_response_event(out, "response.failed");
  // Nothing started: no response to fail, an `error` event.
  const Error& e = builder_.violation() ? *builder_.violation() : *a.error;
  JsonWriter w(out);
  begin(out, "error");
  w.raw(",\"code\":").str(failed_code(e)).raw(",\"message\":").str(e.message);
  w.raw(",\"param\":").str_or_null(e.param).raw("}");
  end_sse_event(out);
}

std::string_view ResponsesStreamRenderer::last_response(std::string_view out) const {
  if (response_end_ <= response_at_ || response_end_ > out.size()) return {};
  return out.substr(response_at_, response_end_ - response_at_);
}

std::string_view ResponsesStreamRenderer::last_output(std::string_view out) const {
  if (last_response(out).empty() || output_end_ <= output_at_ || output_end_ > response_end_) {
    return {};
  }
  return out.substr(output_at_, output_end_ - output_at_);
}

void ResponsesStreamRenderer::render(const Event& event, std::string& out) {
  response_at_ = response_end_ = output_at_ = output_end_ = 0;
  if (done_) return;
  builder_.on_event(event);
  if (builder_.violation()) return render_end(out);
  if (const auto* e = std::get_if<StartEvent>(&event)) {
    render_start(*e, out);
  } else if (const auto* e = std::get_if<BlockStartEvent>(&event)) {
    render_block_start(*e, out);
  } else if (const auto* e = std::get_if<DeltaEvent>(&event)) {
    render_delta(*e, out);
  } else if (const auto* e = std::get_if<BlockStopEvent>(&event)) {
    render_block_stop(*e, out);
  } else {
    render_end(out);  // Finish or Error
  }
}

}  // namespace ferry::api
