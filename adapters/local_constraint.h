// What a local request's output must look like (response_format, tools + tool_choice) as a
// constraint for the engine, the tool-call format of a model's chat template, and the parser
// that turns a tool-mode output into text and OpenAI tool calls (streamed or whole).
// Thread-safety: the free functions are stateless (the GrammarCache they take is thread-safe);
// a ToolCallParser belongs to one choice of one request.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/chat_request.h"
#include "common/error.h"
#include "constrain/cache.h"
#include "constrain/tools.h"
#include "constrain/vocabulary.h"
#include "tokenizer/chat_template.h"

namespace ferry::adapters {

enum class ConstraintMode { kNone, kJsonObject, kJsonSchema, kTools };
// "none", "json_object", "json_schema", "tools": the x-ferry-constraint header and ledger value.
std::string_view constraint_mode_name(ConstraintMode mode);

// The OpenAI `code` of a refusal another target may serve (the gateway falls back to the next
// hop on it, and it does not count against the local target's health).
inline constexpr std::string_view kUnsupportedByTarget = "unsupported_by_target";
// A kInvalidRequest with that code.
Error unsupported_by_target(std::string message, std::string param);

// How a chat template writes tool calls, found by rendering a probe conversation with and
// without a tool: Hermes `<tool_call>` (Qwen2.5/Qwen3, SmolLM3, Hermes), Llama 3.1+ JSON,
// Mistral `[TOOL_CALLS]`, or none it names (generic: Hermes' markers). `renders_tools` false:
// the template ignores `tools` (the model would never see them).
enum class ToolFormat { kHermes, kLlama3Json, kMistral, kGeneric };
struct TemplateTools {
  bool renders_tools = false;
  ToolFormat format = ToolFormat::kGeneric;
  std::string arguments_key = "arguments";  // kLlama3Json: "parameters"
  // Why calls in this template's format cannot be written (e.g. Mistral's `name[ARGS]{...}`
  // variant); empty when they can.
  std::string unsupported;
  // A thinking template (Qwen3: `enable_thinking: false` closes an empty think block in the
  // prompt): the output may open with a think block between these markers.
  std::string think_begin;
  std::string think_end;
  // The markers of this format that the model's vocabulary has as special tokens: written as
  // that token only (find_token_markers).
  std::vector<std::string> token_markers;
};
// The think block a response_format document may open with on this template (empty when the
// template does not think).
constrain::ThinkBlock think_block(const TemplateTools& t);
// The constraint's syntax for a template's format (think block included when `thinking`).
constrain::ToolCallSyntax tool_call_syntax(const TemplateTools& t, bool thinking);
TemplateTools detect_template_tools(const tokenizer::ChatFormatter& chat);
// Fills t.token_markers: which of the format's markers (<tool_call>, </tool_call>,
// [TOOL_CALLS], the think markers) are special tokens of `vocab`.
void find_token_markers(TemplateTools& t, const constrain::Vocabulary& vocab);
std::string_view tool_format_name(ToolFormat format);

// The constraint a request asks for, not compiled yet.
struct ConstraintRequest {
  ConstraintMode mode = ConstraintMode::kNone;
  std::string schema_json;    // kJsonSchema: the schema's JSON text (member order kept)
  constrain::ToolSpec tools;  // kTools
  // kJsonObject / kJsonSchema on a thinking template: the think block before the document
  // (read back as reasoning, see think_syntax).
  constrain::ThinkBlock think;
};
// The syntax a ToolCallParser reads a response_format output with: its think block, then text
// (no calls).
constrain::ToolCallSyntax think_syntax(const constrain::ThinkBlock& think);
// Errors: kInvalidRequest naming the field; with code kUnsupportedByTarget when it is this
// engine that cannot serve it (a template that ignores tools, a format not wired, ...).
Result<ConstraintRequest> constraint_request(const api::ChatRequest& r, const TemplateTools& t);
// Compiles through the cache (the caller runs it off the I/O threads). Errors: a schema keyword
// the compiler cannot enforce (kInvalidRequest, kUnsupportedByTarget, the keyword and its path).
Result<constrain::CompiledGrammar> compile_constraint(const ConstraintRequest& c,
                                                      constrain::GrammarCache& cache);

// One piece of a tool-mode output, in order: a think block's text (reasoning), text before the
// first call, then per call its start (id and name) and its arguments' JSON text in fragments.
struct ToolPiece {
  enum class Kind { kText, kCallStart, kArguments, kReasoning };
  Kind kind = Kind::kText;
  std::string text;  // kText, kArguments, kReasoning
  std::string id;    // kCallStart
  std::string name;  // kCallStart
  int index = 0;     // kCallStart, kArguments: the call's index
};

// Reads the output of a tools constraint (any ToolLayout, as constrain/tools compiles it) as it
// arrives; never shows the markers. Text that might begin a marker is held back until it is
// known not to. A think block opening the output comes out as reasoning.
class ToolCallParser {
 public:
  ToolCallParser(constrain::ToolCallSyntax syntax, std::string id_seed);
  void feed(std::string_view bytes, std::vector<ToolPiece>& out);
  // The end of the output: text held back is text after all.
  void finish(std::vector<ToolPiece>& out);
  int calls() const { return calls_; }
  bool thinking() const { return state_ == State::kThink; }  // inside the think block
  // The prompt opened the think block (a template that ends with its opening marker): the
  // output starts inside it. Before the first feed.
  void open_think();

 private:
  enum class State { kText, kHead, kArguments, kTail, kThink };
  void text_byte(char c, std::vector<ToolPiece>& out);
  void start_byte(char c, std::vector<ToolPiece>& out);  // before the body is known
  void body_start_byte(char c, std::vector<ToolPiece>& out);
  void think_byte(char c);
  void open_call();
  void head_byte(char c, std::vector<ToolPiece>& out);
  void arguments_byte(char c, std::vector<ToolPiece>& out);
  void tail_byte(char c);
  void end_arguments(std::vector<ToolPiece>& out);
  void flush(std::vector<ToolPiece>& out);

  constrain::ToolCallSyntax syntax_;
  std::string id_seed_;
  State state_ = State::kText;
  std::string held_;       // kText: a marker prefix; kHead: the call's head so far; kTail: the end
  std::string text_;       // kText: text to emit at the end of this feed
  std::string args_;       // kArguments: fragment to emit at the end of this feed
  std::string reasoning_;  // kThink: reasoning to emit at the end of this feed
  bool think_pending_ = false;  // the output may still open with the think block
  bool bare_start_ = false;     // kBare: no byte of the body but white space yet
  bool tag_seen_ = false;       // kBare: the opening marker (<|python_tag|>) was read
  bool closed_ = false;         // kList/kBare: the calls are over
  std::string leading_ws_;      // white space before any text: dropped when a call follows
  bool text_shown_ = false;
  std::optional<std::string> name_;  // kHead: the name, once read
  bool colon_seen_ = false;          // kHead: the arguments key and its colon read
  int calls_ = 0;
  // kArguments: the value's scan (depth, string, escape, started).
  int depth_ = 0;
  bool in_string_ = false;
  bool escape_ = false;
  bool started_ = false;
  bool scalar_ = false;
};

}  // namespace ferry::adapters
