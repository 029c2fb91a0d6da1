#include "api/openai_chat_parse.h"

#include <array>
#include <iterator>

#include "api/json_read.h"

namespace ferry::api {
namespace {

using simdjson::SUCCESS;
using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

Error backend_error(std::string message) {
  return Error::make(ErrorCode::kBackendError, "backend reply: " + std::move(message));
}

simdjson::simdjson_result<element> parse_json(std::string_view text) {
  thread_local JsonReader reader;
  return reader.parse(text);
}

// obj[key] when present and not null.
bool member(const object& obj, std::string_view key, element& out) {
  return obj.at_key(key).get(out) == SUCCESS && !out.is_null();
}

// obj[key] as a string: "" when absent or null; false when present with another type.
bool string_member(const object& obj, std::string_view key, std::string_view& out) {
  out = {};
  element v;
  if (!member(obj, key, v)) return true;
  return v.get_string().get(out) == SUCCESS;
}

// The members of one object that a reader asks for (`kKeys`), found in one pass over the object,
// each at its first occurrence (as at_key finds it), and then read by their index in `kKeys`:
// one scan of each object of a chunk instead of one per key, the stream reading every chunk.
// a == b for short keys, compared inline (a libc memcmp call costs more than the compare).
bool same_key(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

template <const auto& kKeys>
class Picked {
 public:
  static constexpr size_t kCount = std::size(kKeys);
  explicit Picked(const object& obj) {
    for (auto field : obj) {
      for (size_t i = 0; i < kCount; ++i) {
        if (!same_key(field.key, kKeys[i])) continue;
        if (!found_[i]) values_[i] = field.value;
        found_[i] = true;
        break;
      }
    }
  }
  // kKeys[i] when present and not null.
  bool member(size_t i, element& out) const {
    if (!found_[i] || values_[i].is_null()) return false;
    out = values_[i];
    return true;
  }
  // kKeys[i] as a string: "" when absent or null; false when present with another type.
  bool string(size_t i, std::string_view& out) const {
    out = {};
    element v;
    if (!member(i, v)) return true;
    return v.get_string().get(out) == SUCCESS;
  }

 private:
  std::array<element, kCount> values_{};
  std::array<bool, kCount> found_{};
};

// What is read of a body or chunk, of its choice, and of the choice's message or delta.
constexpr std::string_view kRootKeys[] = {"error", "id", "model", "created", "choices", "usage"};
enum RootKey : size_t { kError, kId, kModel, kCreated, kChoices, kUsage };
constexpr std::string_view kChoiceKeys[] = {"index", "message", "delta", "finish_reason",
                                            "stop_reason"};
enum ChoiceKey : size_t { kIndex, kMessage, kDelta, kFinishReason, kStopReason };
constexpr std::string_view kMessageKeys[] = {"reasoning_content", "reasoning", "content", "refusal",
                                             "tool_calls"};
enum MessageKey : size_t { kReasoningContent, kReasoning, kContent, kRefusal, kToolCalls };
using Root = Picked<kRootKeys>;
using Choice = Picked<kChoiceKeys>;
using MessageFields = Picked<kMessageKeys>;

// A token count: a non-negative integer within int64.
bool count_value(const element& v, int64_t& out) {
  if (v.type() != element_type::INT64 && v.type() != element_type::UINT64) return false;
  return v.get_int64().get(out) == SUCCESS && out >= 0;
}

// The usage object; `reported` false when any count is malformed.
Usage read_usage(const object& u) {
  Usage usage;
  bool ok = true;
  auto count = [&](const object& obj, std::string_view key, int64_t& out) {
    element v;
    if (member(obj, key, v)) ok = ok && count_value(v, out);
  };
  count(u, "prompt_tokens", usage.prompt_tokens);
  count(u, "completion_tokens", usage.completion_tokens);
  element details;
  object d;
  if (member(u, "prompt_tokens_details", details) && details.get_object().get(d) == SUCCESS) {
    count(d, "cached_tokens", usage.cached_tokens);
  }
  if (member(u, "completion_tokens_details", details) && details.get_object().get(d) == SUCCESS) {
    count(d, "reasoning_tokens", usage.reasoning_tokens);
  }
  if (!ok) return Usage{};
  usage.reported = true;
  return usage;
}

// The upstream's `{"error": ...}` as an Error, when `root` is one.
std::optional<Error> upstream_error(const Root& root) {
  element e;
  if (!root.member(kError, e)) return std::nullopt;
  std::string_view message = "the backend sent an error";
  object eo;
  if (e.get_object().get(eo) == SUCCESS) {
    std::string_view m;
    if (string_member(eo, "message", m) && !m.empty()) message = m;
  } else if (std::string_view m; e.get_string().get(m) == SUCCESS && !m.empty()) {
    message = m;
  }
  return Error::make(ErrorCode::kBackendError, std::string(message));
}

// choices[0] of `root`, or an error for zero-or-more-than-one rules: `required` says whether a
// missing or empty choices array is an error (a body) or nothing to do (a usage-only chunk).
Result<std::optional<Choice>> only_choice(const Root& root, bool required) {
  element c;
  array choices;
  if (!root.member(kChoices, c) || c.get_array().get(choices) != SUCCESS) {
    if (required) return backend_error("no choices array");
    return std::optional<Choice>();
  }
  size_t n = choices.size();
  if (n == 0) {
    if (required) return backend_error("an empty choices array");
    return std::optional<Choice>();
  }
  object choice_object;
  if (n > 1) return backend_error("more than one choice (n > 1 cannot be rendered)");
  if (choices.at(0).get_object().get(choice_object) != SUCCESS) return backend_error("a choice");
  Choice choice(choice_object);
  element index;
  int64_t i = 0;
  if (choice.member(kIndex, index) && (index.get_int64().get(i) != SUCCESS || i != 0)) {
    return backend_error("a choice index other than 0");
  }
  return std::optional<Choice>(choice);
}

// finish_reason (+ vLLM's stop_reason) of a choice; `has` false when it is absent or null.
Status read_finish(const Choice& choice, bool& has, FinishReason& reason, std::string& stop) {
  std::string_view f;
  if (!choice.string(kFinishReason, f)) return backend_error("finish_reason");
  has = !f.empty();
  if (!has) return {};
  if (f == "stop") {
    reason = FinishReason::kStop;
    std::string_view seq;
    if (choice.string(kStopReason, seq) && !seq.empty()) {
      reason = FinishReason::kStopSequence;
      stop.assign(seq);
    }
  } else if (f == "length") {
    reason = FinishReason::kLength;
  } else if (f == "tool_calls") {
    reason = FinishReason::kToolCalls;
  } else if (f == "content_filter") {
    reason = FinishReason::kContentFilter;
  } else {
    return backend_error("an unknown finish_reason \"" + std::string(f) + "\"");
  }
  return {};
}

void read_header(const Root& root, std::string_view& id, std::string_view& model,
                 int64_t& created) {
  root.string(kId, id);
  root.string(kModel, model);
  element c;
  if (!root.member(kCreated, c) || c.get_int64().get(created) != SUCCESS) created = 0;
}

// The thinking text of a message or delta (`reasoning_content`, else `reasoning`).
bool reasoning_text(const MessageFields& m, std::string_view& out) {
  if (!m.string(kReasoningContent, out)) return false;
  if (out.empty() && !m.string(kReasoning, out)) return false;
  return true;
}

struct ToolCallFields {
  int64_t index = 0;
  std::string_view id, name, arguments;
  bool has_name = false;
};

// One element of `tool_calls` (a message's, or a delta's fragment with `index`).
Result<ToolCallFields> read_tool_call(const element& e, bool want_index) {
  object t;
  if (e.get_object().get(t) != SUCCESS) return backend_error("a tool call is not an object");
  ToolCallFields f;
  element v;
  if (want_index && (!member(t, "index", v) || v.get_int64().get(f.index) != SUCCESS)) {
    return backend_error("a tool call fragment without an integer index");
  }
  std::string_view type;
  if (!string_member(t, "type", type) || (!type.empty() && type != "function")) {
    return backend_error("a tool call of a type other than function");
  }
  if (!string_member(t, "id", f.id)) return backend_error("a tool call id");
  element fn;
  object fo;
  if (member(t, "function", fn)) {
    if (fn.get_object().get(fo) != SUCCESS) return backend_error("a tool call function");
    element name;
    f.has_name = member(fo, "name", name);
    if (!string_member(fo, "name", f.name) || !string_member(fo, "arguments", f.arguments)) {
      return backend_error("a tool call's name or arguments is not a string");
    }
  }
  return f;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// A whole body

namespace {

Status read_message(const object& message, Answer& answer) {
  const MessageFields msg(message);
  std::string_view thinking, content, refusal;
  if (!reasoning_text(msg, thinking)) return backend_error("reasoning is not a string");
  if (!msg.string(kContent, content)) return backend_error("content is not a string");
  if (!msg.string(kRefusal, refusal)) return backend_error("refusal is not a string");
  auto add = [&](BlockKind kind, std::string_view text) {
    if (text.empty()) return;
    Block& b = answer.blocks.emplace_back();
    b.kind = kind;
    b.text = text;
  };
  add(BlockKind::kThinking, thinking);
  add(BlockKind::kText, content);
  add(BlockKind::kText, refusal);
  element tc;
  array calls;
  if (!msg.member(kToolCalls, tc)) return {};
  if (tc.get_array().get(calls) != SUCCESS) return backend_error("tool_calls is not an array");
  for (element call : calls) {
    auto f = read_tool_call(call, /*want_index=*/false);
    if (!f) return f.error();
    if (f->name.empty()) return backend_error("a tool call without a function name");
    Block& b = answer.blocks.emplace_back();
    b.kind = BlockKind::kToolCall;
    b.call_id = f->id;
    b.name = f->name;
    b.arguments = f->arguments;
  }
  return {};
}

}  // namespace

Result<Answer> parse_chat_completion(std::string_view body) {
  object root_object;
  if (parse_json(body).get_object().get(root_object) != SUCCESS) {
    return backend_error("not one valid JSON object");
  }
  const Root root(root_object);
  if (auto e = upstream_error(root)) return std::move(*e);
  Answer answer;
  std::string_view id, model;
  read_header(root, id, model, answer.created);
  answer.id = id;
  answer.model = model;
  auto choice = only_choice(root, /*required=*/true);
  if (!choice) return choice.error();
  element m;
  object msg;
  if (!(*choice)->member(kMessage, m) || m.get_object().get(msg) != SUCCESS) {
    return backend_error("a choice without a message object");
  }
  if (Status s = read_message(msg, answer); !s) return s.error();
  bool has_finish = false;
  if (Status s = read_finish(**choice, has_finish, answer.finish, answer.stop_sequence); !s) {
    return s.error();
  }
  if (!has_finish) return backend_error("a choice without a finish_reason");
  element u;
  object uo;
  if (root.member(kUsage, u) && u.get_object().get(uo) == SUCCESS) answer.usage = read_usage(uo);
  return answer;
}

// ---------------------------------------------------------------------------------------------
// A stream

Status ChatStreamParser::fail(std::string message) {
  return fail(backend_error(std::move(message)));
}

Status ChatStreamParser::fail(Error error) {
  failed_ = true;
  return error;
}

void ChatStreamParser::close_block(EventSink& sink) {
  if (!open_) return;
  sink.on_event(BlockStopEvent{blocks_ - 1});
  open_ = false;
  open_tool_ = -1;
}

void ChatStreamParser::open_block(BlockKind kind, std::string_view call_id, std::string_view name,
                                  EventSink& sink) {
  close_block(sink);
  sink.on_event(BlockStartEvent{blocks_, kind, call_id, name});
  ++blocks_;
  open_ = true;
  open_kind_ = kind;
}

void ChatStreamParser::on_fragment(BlockKind kind, DeltaKind delta, std::string_view text,
                                   EventSink& sink) {
  if (text.empty()) return;
  if (!open_ || open_kind_ != kind) open_block(kind, {}, {}, sink);
  sink.on_event(DeltaEvent{blocks_ - 1, delta, text});
}

Status ChatStreamParser::on_tool_fragment(int64_t tool_index, std::string_view id,
                                          std::string_view name, std::string_view arguments,
                                          bool has_name, EventSink& sink) {
  if (tool_index < 0 || tool_index >= kMaxToolCalls) {
    return fail("a tool call index out of range");
  }
  auto t = static_cast<size_t>(tool_index);
  if (t >= tool_blocks_.size()) tool_blocks_.resize(t + 1, -1);
  if (tool_blocks_[t] < 0) {
    if (!has_name || name.empty()) return fail("a tool call's first fragment has no name");
    open_block(BlockKind::kToolCall, id, name, sink);
    tool_blocks_[t] = static_cast<int32_t>(blocks_ - 1);
    open_tool_ = static_cast<int32_t>(t);
  } else if (!open_ || open_tool_ != static_cast<int32_t>(t)) {
    return fail("interleaved tool call fragments (a call continued after another began)");
  }
  if (!arguments.empty()) sink.on_event(DeltaEvent{blocks_ - 1, DeltaKind::kArguments, arguments});
  return {};
}

Status ChatStreamParser::finish(EventSink& sink) {
  if (!have_finish_) return fail("the stream ended before a finish_reason");
  close_block(sink);
  finished_ = true;
  sink.on_event(FinishEvent{finish_, stop_sequence_, usage_});
  return {};
}

Status ChatStreamParser::end(EventSink& sink) {
  if (finished_ || failed_) return {};
  return finish(sink);
}

// Runs over one chunk (feed_root): the header once, the choice's delta in order (thinking, text,
// refusal, tool-call fragments), its finish_reason, the usage.
Status ChatStreamParser::feed(std::string_view data, EventSink& sink) {
  if (failed_ || finished_) return failed_ ? backend_error("the stream already failed") : Status{};
  if (data == "[DONE]") return finish(sink);
  object root;
  if (parse_json(data).get_object().get(root) != SUCCESS) {
    return fail("a stream chunk is not one valid JSON object");
  }
  return feed_root(root, sink);
}

bool ChatStreamParser::feed_object(std::string_view data, EventSink& sink, Status& status,
                                   MemberProbe* probes, size_t count) {
  element doc;
  object root;
  if (parse_json(data).get(doc) != SUCCESS || doc.get_object().get(root) != SUCCESS) return false;
  if (count > 0) probe_members(doc, probes, count);
  if (failed_ || finished_) {
    status = failed_ ? Status(backend_error("the stream already failed")) : Status{};
  } else {
    status = feed_root(root, sink);
  }
  return true;
}

Status ChatStreamParser::feed_root(const object& chunk, EventSink& sink) {
  const Root root(chunk);
  if (auto e = upstream_error(root)) {
    finished_ = true;
    sink.on_event(ErrorEvent{&*e});
    return {};
  }
  if (!started_) {
    StartEvent start;
    read_header(root, start.id, start.model, start.created);
    sink.on_event(start);
    started_ = true;
  }
  auto choice = only_choice(root, /*required=*/false);
  if (!choice) return fail(choice.error());
  if (*choice) {
    const Choice& c = **choice;
    element d;
    object delta_object;
    if (c.member(kDelta, d) && d.get_object().get(delta_object) == SUCCESS) {
      const MessageFields delta(delta_object);
      std::string_view thinking, content, refusal;
      if (!reasoning_text(delta, thinking) || !delta.string(kContent, content) ||
          !delta.string(kRefusal, refusal)) {
        return fail("a delta's reasoning, content or refusal is not a string");
      }
      on_fragment(BlockKind::kThinking, DeltaKind::kThinking, thinking, sink);
      on_fragment(BlockKind::kText, DeltaKind::kText, content, sink);
      on_fragment(BlockKind::kText, DeltaKind::kText, refusal, sink);
      element tc;
      array calls;
      if (delta.member(kToolCalls, tc)) {
        if (tc.get_array().get(calls) != SUCCESS) return fail("tool_calls is not an array");
        for (element call : calls) {
          auto f = read_tool_call(call, /*want_index=*/true);
          if (!f) return fail(f.error());
          Status s = on_tool_fragment(f->index, f->id, f->name, f->arguments, f->has_name, sink);
          if (!s) return s;
        }
      }
    }
    bool has = false;
    if (Status s = read_finish(c, has, finish_, stop_sequence_); !s) return fail(s.error());
    if (has) {
      have_finish_ = true;
      close_block(sink);
    }
  }
  element u;
  object uo;
  if (root.member(kUsage, u) && u.get_object().get(uo) == SUCCESS) usage_ = read_usage(uo);
  return {};
}

}  // namespace ferry::api
