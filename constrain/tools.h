// The grammar of tool calls: OpenAI `tools` (function name + parameters schema) and
// `tool_choice` compiled into what the model may write. Stateless functions; thread-safe.
//
// Output syntax (ToolCallSyntax), by layout; a call is `{"<name_key>": "<declared name>",
// "<arguments_key>": {...}}`, the name always a declared one and the arguments always valid
// against that function's parameters (JSON Schema, schema.h):
//   kMarked (default; Hermes style, which Qwen2.5/Qwen3, SmolLM3 and Hermes templates document
//            and which is also the generic format): `<tool_call>` ws call ws `</tool_call>`
//            per call, white space between calls.
//   kList   (Mistral): `[TOOL_CALLS]` ws `[` call, call... `]`.
//   kBare   (Llama 3.1+ JSON, key "parameters"): one call as the whole output, after the
//            opening marker if there is one (Llama's `<|python_tag|>`, when the vocabulary has
//            it as a token: written or not, as the model likes).
// tool_choice:
//   auto      free text; once the text contains the opening marker, the rest is calls (kBare:
//             a call, or text that does not begin with `{`, white space or the marker's `<`)
//   none      free text that never contains the opening marker (kBare: the same text)
//   required  one or more calls from the first byte (one when parallel calls are off; kBare
//             always one)
//   named     the same, of that function only
// With think markers (Qwen3), a free think block `<think>`...`</think>` may come first; the
// rules above apply after it. A marker is written as text bytes, or, when it is in
// `token_markers` (the model's vocabulary has it as a special token, as Qwen's <tool_call> and
// <think>, Mistral's [TOOL_CALLS]), as that one token only: then free text never spells it out
// either, so an output's marker text always comes from the token. Special tokens are never
// allowed anywhere else (inside JSON in particular).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "constrain/grammar.h"
#include "constrain/schema.h"

namespace ferry::constrain {

struct ToolFunction {
  std::string name;
  std::string parameters_json;  // a JSON Schema; empty: no parameters (arguments are {})
};

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

enum class ToolLayout { kMarked, kList, kBare };

struct ToolCallSyntax {
  ToolLayout layout = ToolLayout::kMarked;
  std::string begin = "<tool_call>";  // kMarked: before each call; kList: before the list;
                                      // kBare: optional before the call (or empty)
  std::string end = "</tool_call>";   // kMarked: after each call
  std::string name_key = "name";
  std::string arguments_key = "arguments";
  std::string think_begin;  // non-empty: a think block may open the output
  std::string think_end;
  std::vector<std::string> token_markers;  // markers written as the vocabulary's own token
  bool is_token(const std::string& marker) const;
};

struct ToolSpec {
  std::vector<ToolFunction> functions;
  ToolChoice choice = ToolChoice::kAuto;
  std::string named;                // kNamed: the function
  bool parallel_tool_calls = true;  // more than one call
  std::uint32_t max_calls = 8;      // when parallel
  ToolCallSyntax syntax;
};

// Errors (kInvalidRequest): no functions, an unknown or repeated name, a parameters schema
// that is not supported (the message names the keyword and its path under /tools/N/...).
Result<Grammar> compile_tools(const ToolSpec& spec, const CompileOptions& options = {});

}  // namespace ferry::constrain
