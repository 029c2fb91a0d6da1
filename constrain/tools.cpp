#include "constrain/tools.h"

#include <set>

#include "constrain/schema_compiler.h"

namespace ferry::constrain {
namespace {

Error invalid(std::string message) {
  return Error::make(ErrorCode::kInvalidRequest, std::move(message), "tools");
}

// The KMP automaton of `marker`: the length of the longest prefix of it that ends the text
// after reading byte b with k bytes of it matched.
std::uint32_t kmp_next(const std::string& marker, std::uint32_t k, std::uint8_t b) {
  while (true) {
    if (k < marker.size() && static_cast<std::uint8_t>(marker[k]) == b) return k + 1;
    if (k == 0) return 0;
    // The longest proper border of marker[0, k).
    std::uint32_t border = k - 1;
    while (border > 0 && marker.compare(0, border, marker, k - border, border) != 0) --border;
    k = border;
  }
}

// The rule of one call: {"name": "<f>", "arguments": <args of f>}, over the functions allowed.
Result<std::uint32_t> add_call_rule(GrammarBuilder& b, SchemaCompiler& compiler,
                                    const ToolSpec& spec) {
  const ToolCallSyntax& syn = spec.syntax;
  const std::uint32_t call = b.add_rule("tool call");
  const std::uint32_t names = b.ws(call, b.literal(call, b.start(call), "{"));
  const std::uint32_t colon = b.ws(
      call, b.literal(call, b.ws(call, b.literal(call, names, Json(syn.name_key).dump())), ":"));
  const std::uint32_t call_end = b.add_state(call);
  std::set<std::string> seen;
  std::size_t allowed = 0;
  for (std::size_t i = 0; i < spec.functions.size(); ++i) {
    const ToolFunction& f = spec.functions[i];
    if (f.name.empty())
      return invalid("tools[" + std::to_string(i) + "]: the function has no name");
    if (!seen.insert(f.name).second)
      return invalid("tools: the function '" + f.name + "' is declared twice");
    if (spec.choice == ToolChoice::kNamed && f.name != spec.named) continue;
    Json params = Json::object({{"type", "object"}, {"additionalProperties", false}});
    if (!f.parameters_json.empty()) {
      try {
        params = Json::parse(f.parameters_json);
      } catch (const std::exception& e) {
        return invalid("tools[" + std::to_string(i) +
                       "].function.parameters is not JSON: " + e.what());
      }
    }
    auto args =
        compiler.document_rule(params, "/tools/" + std::to_string(i) + "/function/parameters");
    if (!args) return std::move(args).error();
    std::uint32_t at = b.literal(call, colon, Json(f.name).dump());
    at = b.ws(call, b.literal(call, b.ws(call, at), ","));
    at = b.ws(call, b.literal(call, b.ws(call, b.literal(call, at, Json(syn.arguments_key).dump())),
                              ":"));
    b.eps(call, b.ws(call, b.call(call, at, *args)), call_end);
    ++allowed;
  }
  if (allowed == 0 && spec.choice != ToolChoice::kNone) {
    if (spec.choice == ToolChoice::kNamed)
      return invalid("tool_choice names the function '" + spec.named + "', which is not in tools");
    return invalid("tools: no function declared");
  }
  b.accept(call, b.literal(call, call_end, "}"));
  return call;
}

// The rule of the calls: marker, call, marker, repeated up to max_calls, white space between.
std::uint32_t add_calls_rule(GrammarBuilder& b, const ToolSpec& spec, std::uint32_t call) {
  const ToolCallSyntax& syn = spec.syntax;
  const std::uint32_t calls = b.add_rule("tool calls");
  const std::uint32_t n = spec.parallel_tool_calls ? std::max<std::uint32_t>(1, spec.max_calls) : 1;
  std::uint32_t cur = b.start(calls);
  for (std::uint32_t k = 0; k < n; ++k) {
    if (k > 0) cur = b.literal(calls, b.ws(calls, cur), syn.begin);
    cur = b.literal(calls, b.ws(calls, b.call(calls, b.ws(calls, cur), call)), syn.end);
    b.accept(calls, cur);
  }
  return calls;
}

// Free text in `root`: one state per length of the opening marker's prefix that the text ends
// with; with tool_choice auto, a completed marker goes on to the calls.
void add_text_states(GrammarBuilder& b, const ToolSpec& spec, std::uint32_t root,
                     std::uint32_t calls) {
  const std::string& marker = spec.syntax.begin;
  const auto m = static_cast<std::uint32_t>(marker.size());
  std::vector<std::uint32_t> text(m);
  text[0] = b.start(root);
  for (std::uint32_t k = 1; k < m; ++k) text[k] = b.add_state(root);
  const std::uint32_t opened = b.add_state(root);
  for (std::uint32_t k = 0; k < m; ++k) {
    b.accept(root, text[k]);
    std::uint32_t lo = 0;
    while (lo < 256) {
      const std::uint32_t target = kmp_next(marker, k, static_cast<std::uint8_t>(lo));
      std::uint32_t hi = lo;
      while (hi + 1 < 256 && kmp_next(marker, k, static_cast<std::uint8_t>(hi + 1)) == target) ++hi;
      if (target < m) {
        b.byte_edge(root, text[k], static_cast<std::uint8_t>(lo), static_cast<std::uint8_t>(hi),
                    text[target]);
      } else if (spec.choice == ToolChoice::kAuto) {
        b.byte_edge(root, text[k], static_cast<std::uint8_t>(lo), static_cast<std::uint8_t>(hi),
                    opened);
      }
      lo = hi + 1;
    }
  }
  if (spec.choice == ToolChoice::kAuto) b.accept(root, b.call(root, opened, calls));
}

}  // namespace

Result<Grammar> compile_tools(const ToolSpec& spec, const CompileOptions& options) {
  const ToolCallSyntax& syn = spec.syntax;
  if (syn.begin.empty()) return invalid("tool-call syntax: the opening marker is empty");
  GrammarBuilder b;
  SchemaCompiler compiler(b, options);
  auto call = add_call_rule(b, compiler, spec);
  if (!call) return std::move(call).error();
  const std::uint32_t calls = add_calls_rule(b, spec, *call);
  const std::uint32_t root = b.add_rule("document");
  if (spec.choice == ToolChoice::kRequired || spec.choice == ToolChoice::kNamed) {
    b.accept(root, b.call(root, b.literal(root, b.ws(root, b.start(root)), syn.begin), calls));
    return b.finish(root);
  }
  add_text_states(b, spec, root, calls);
  return b.finish(root);
}

}  // namespace ferry::constrain
