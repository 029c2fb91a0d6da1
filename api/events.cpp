#include "api/events.h"

#include "common/saturating.h"

namespace ferry::api {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStopSequence:
      return "stop_sequence";
    case FinishReason::kToolCalls:
      return "tool_calls";
    case FinishReason::kContentFilter:
      return "content_filter";
    case FinishReason::kError:
      return "error";
  }
  return "error";
}

int64_t Usage::total_tokens() const {
  return saturating_add(prompt_tokens, completion_tokens);
}

// ---------------------------------------------------------------------------------------------
// AnswerBuilder

void AnswerBuilder::fail(std::string message) {
  violation_ = Error::make(ErrorCode::kInternal, "event sequence: " + std::move(message));
  done_ = true;
}

namespace {

bool delta_fits(DeltaKind delta, BlockKind block) {
  switch (delta) {
    case DeltaKind::kText:
      return block == BlockKind::kText;
    case DeltaKind::kArguments:
      return block == BlockKind::kToolCall;
    case DeltaKind::kThinking:
    case DeltaKind::kSignature:
      return block == BlockKind::kThinking;
  }
  return false;
}

}  // namespace

void AnswerBuilder::on_event(const Event& event) {
  if (done_) return;
  if (const auto* e = std::get_if<ErrorEvent>(&event)) {
    answer_.finish = FinishReason::kError;
    answer_.error = *e->error;
    done_ = true;
    return;
  }
  if (const auto* e = std::get_if<StartEvent>(&event)) {
    if (started_) return fail("a second start");
    started_ = true;
    answer_.id = e->id;
    answer_.model = e->model;
    answer_.created = e->created;
    answer_.usage = e->usage;
    return;
  }
  if (!started_) return fail("an event before the start");
  if (const auto* e = std::get_if<BlockStartEvent>(&event)) {
    if (open_) return fail("a block starts while another is open");
    if (e->index != answer_.blocks.size()) return fail("a block index out of order");
    Block& b = answer_.blocks.emplace_back();
    b.kind = e->kind;
    b.call_id = e->call_id;
    b.name = e->name;
    open_ = true;
  } else if (const auto* e = std::get_if<DeltaEvent>(&event)) {
    if (!open_ || e->index + 1 != answer_.blocks.size()) return fail("a delta to no open block");
    Block& b = answer_.blocks.back();
    if (!delta_fits(e->kind, b.kind)) return fail("a delta of the wrong kind for its block");
    std::string& to = e->kind == DeltaKind::kArguments   ? b.arguments
                      : e->kind == DeltaKind::kSignature ? b.signature
                                                         : b.text;
    to.append(e->fragment);
  } else if (const auto* e = std::get_if<BlockStopEvent>(&event)) {
    if (!open_ || e->index + 1 != answer_.blocks.size()) return fail("a stop of no open block");
    open_ = false;
  } else if (const auto* e = std::get_if<FinishEvent>(&event)) {
    if (open_) return fail("finish while a block is open");
    answer_.finish = e->reason;
    answer_.stop_sequence = e->stop_sequence;
    answer_.usage = e->usage;
    done_ = true;
  }
}

// ---------------------------------------------------------------------------------------------
// replay

namespace {

// Sends `text` as deltas of at most `max` bytes, cut only before a UTF-8 lead byte.
void send_fragments(EventSink& sink, uint32_t index, DeltaKind kind, std::string_view text,
                    size_t max) {
  while (!text.empty()) {
    size_t n = max == 0 || text.size() <= max ? text.size() : max;
    while (n < text.size() && n > 0 && (static_cast<unsigned char>(text[n]) & 0xc0) == 0x80) --n;
    if (n == 0) {  // one sequence longer than max: send it whole
      n = 1;
      while (n < text.size() && (static_cast<unsigned char>(text[n]) & 0xc0) == 0x80) ++n;
    }
    sink.on_event(DeltaEvent{index, kind, text.substr(0, n)});
    text.remove_prefix(n);
  }
}

}  // namespace

void replay(const Answer& answer, EventSink& sink, size_t fragment_bytes,
            const Usage& start_usage) {
  sink.on_event(StartEvent{answer.id, answer.model, answer.created, start_usage});
  for (size_t i = 0; i < answer.blocks.size(); ++i) {
    const Block& b = answer.blocks[i];
    auto index = static_cast<uint32_t>(i);
    sink.on_event(BlockStartEvent{index, b.kind, b.call_id, b.name});
    switch (b.kind) {
      case BlockKind::kText:
        send_fragments(sink, index, DeltaKind::kText, b.text, fragment_bytes);
        break;
      case BlockKind::kToolCall:
        send_fragments(sink, index, DeltaKind::kArguments, b.arguments, fragment_bytes);
        break;
      case BlockKind::kThinking:
        send_fragments(sink, index, DeltaKind::kThinking, b.text, fragment_bytes);
        send_fragments(sink, index, DeltaKind::kSignature, b.signature, 0);
        break;
    }
    sink.on_event(BlockStopEvent{index});
  }
  if (answer.finish == FinishReason::kError) {
    Error fallback = Error::make(ErrorCode::kInternal, "the answer failed");
    sink.on_event(ErrorEvent{answer.error ? &*answer.error : &fallback});
    return;
  }
  sink.on_event(FinishEvent{answer.finish, answer.stop_sequence, answer.usage});
}

}  // namespace ferry::api
