// The grammar of tool calls: OpenAI `tools` (function name + parameters schema) and
// `tool_choice` compiled into what the model may write. Stateless functions; thread-safe.
//
// Output syntax (ToolCallSyntax, default Hermes style, which Qwen2.5/Qwen3, SmolLM3 and Hermes
// templates document and which is also the generic format for templates with none of their
// own): each call is `<tool_call>` ws `{"name": "<declared name>", "arguments": {...}}` ws
// `</tool_call>`, calls separated by white space. The name is always a declared one and the
// arguments always valid against that function's parameters (JSON Schema, schema.h).
//   auto      free text; once the text contains the opening marker, the rest is calls
//   none      free text that never contains the opening marker
//   required  one or more calls from the first byte (one when parallel calls are off)
//   named     the same, of that function only
// The markers are generated as text bytes (a vocabulary's own marker token, when it is a
// special token, is never allowed).
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

struct ToolCallSyntax {
  std::string begin = "<tool_call>";
  std::string end = "</tool_call>";
  std::string name_key = "name";
  std::string arguments_key = "arguments";
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
