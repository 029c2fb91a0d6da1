// The typed answer and its event sequence: what every producer (the local engine, an HTTP
// backend's reply parsed by openai_chat_parse.h) hands back, and every front-end renders
// (anthropic_render.h, responses_render.h, openai_chat_render.h). Plain values; thread-safe to
// copy. An Event only views bytes its producer owns: it is valid during the call that passes it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/error.h"

namespace ferry::api {

// Why the answer ended, in a vocabulary of no API: each renderer maps it to its own words.
enum class FinishReason : uint8_t {
  kStop,           // the model ended its turn
  kLength,         // the output token limit
  kStopSequence,   // a stop sequence matched (Answer::stop_sequence says which)
  kToolCalls,      // the model called tools and waits for their results
  kContentFilter,  // the output was refused or filtered
  kError,          // it failed (Answer::error says why)
};
std::string_view finish_reason_name(FinishReason reason);

enum class BlockKind : uint8_t { kText, kToolCall, kThinking };

// Token counts, as reported (counts are never negative). cached_tokens are part of
// prompt_tokens and reasoning_tokens part of completion_tokens, as OpenAI counts them.
struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t reasoning_tokens = 0;
  bool reported = false;         // the producer knew these numbers (false: all zero, unknown)
  int64_t total_tokens() const;  // saturating
  bool operator==(const Usage&) const = default;
};

// One content block of an answer, in answer order.
struct Block {
  BlockKind kind = BlockKind::kText;
  std::string text;       // kText: the text; kThinking: the reasoning text
  std::string signature;  // kThinking: an opaque signature from the producer, if it had one
  std::string call_id;    // kToolCall: the call's id as the producer named it (may be empty)
  std::string name;       // kToolCall: the function's name
  std::string arguments;  // kToolCall: the arguments, JSON text as the model wrote it
  bool operator==(const Block&) const = default;
};

// A whole answer.
struct Answer {
  std::string id;       // the producer's id (provenance); renderers make ids in their own format
  std::string model;    // the model name the client sees
  int64_t created = 0;  // Unix seconds
  std::vector<Block> blocks;
  FinishReason finish = FinishReason::kStop;
  std::string stop_sequence;  // kStopSequence: the sequence that matched
  Usage usage;
  std::optional<Error> error;  // kError: why
};

// A rendered non-stream reply: the HTTP status and the JSON body (an answer, or the API's error
// shape when the answer failed or cannot be rendered).
struct WireBody {
  int status = 200;
  std::string body;
};

// What a renderer says to the client, beyond the answer: ids and the model are its own, in
// its API's format; empty fields are made by the renderer (a fresh id, the answer's model,
// the answer's created time or now).
struct RenderIdentity {
  std::string id;
  std::string model;
  int64_t created = 0;
};

// ---------------------------------------------------------------------------------------------
// The event sequence. A well-formed stream is
//   Start (BlockStart Delta* BlockStop)* (Finish | Error)
// or Error anywhere: blocks never overlap, block i is the i-th BlockStart (0-based), deltas go
// to the open block and match its kind (text and thinking deltas to their blocks, argument
// fragments to a tool call, signature fragments to a thinking block).

enum class DeltaKind : uint8_t { kText, kArguments, kThinking, kSignature };

struct StartEvent {
  std::string_view id;
  std::string_view model;
  int64_t created = 0;
  Usage usage;  // what is known at the start (ferry's own prompt count), zero otherwise
};
struct BlockStartEvent {
  uint32_t index = 0;
  BlockKind kind = BlockKind::kText;
  std::string_view call_id;  // kToolCall
  std::string_view name;     // kToolCall
};
struct DeltaEvent {
  uint32_t index = 0;
  DeltaKind kind = DeltaKind::kText;
  std::string_view fragment;
};
struct BlockStopEvent {
  uint32_t index = 0;
};
struct FinishEvent {
  FinishReason reason = FinishReason::kStop;
  std::string_view stop_sequence;
  Usage usage;  // the final counts
};
struct ErrorEvent {
  const Error* error = nullptr;  // never null
};
using Event =
    std::variant<StartEvent, BlockStartEvent, DeltaEvent, BlockStopEvent, FinishEvent, ErrorEvent>;

// Where a producer sends its events.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void on_event(const Event& event) = 0;
};

// Folds an event sequence into the Answer it describes, and checks it is well-formed (the
// first violation is kept as an error and later events are ignored). Not thread-safe.
class AnswerBuilder final : public EventSink {
 public:
  void on_event(const Event& event) override;
  bool done() const { return done_; }  // a Finish or Error was seen
  // The first way the sequence broke the grammar above, if any.
  const std::optional<Error>& violation() const { return violation_; }
  const Answer& answer() const { return answer_; }
  Answer take() { return std::move(answer_); }

 private:
  void fail(std::string message);
  Answer answer_;
  std::optional<Error> violation_;
  bool started_ = false;
  bool open_ = false;
  bool done_ = false;
};

// Sends the events of `answer` to `sink`: Start, each block with its text cut into fragments
// of at most `fragment_bytes` bytes (never inside a UTF-8 sequence; 0: one fragment), then
// Finish or Error. `start_usage` goes in the Start event.
void replay(const Answer& answer, EventSink& sink, size_t fragment_bytes = 0,
            const Usage& start_usage = {});

}  // namespace ferry::api
