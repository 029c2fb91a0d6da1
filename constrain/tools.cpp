#include "constrain/tools.h"

#include <algorithm>
#include <set>

#include "constrain/schema_compiler.h"

namespace ferry::constrain {
namespace {

bool is_token(const std::vector<std::string>& token_markers, const std::string& marker) {
  return !marker.empty() &&
         std::find(token_markers.begin(), token_markers.end(), marker) != token_markers.end();
}

// The marker `text` from `from`: its special token when `token`, else its bytes.
std::uint32_t write_marker(GrammarBuilder& b, bool token, std::uint32_t rule, std::uint32_t from,
                           const std::string& text) {
  return token ? b.marker(rule, from, text) : b.literal(rule, from, text);
}

std::uint32_t write_marker(GrammarBuilder& b, const ToolCallSyntax& syn, std::uint32_t rule,
                           std::uint32_t from, const std::string& text) {
  return write_marker(b, syn.is_token(text), rule, from, text);
}

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
      auto parsed = parse_schema_text(f.parameters_json,
                                      "/tools/" + std::to_string(i) + "/function/parameters");
      if (!parsed) {
        Error e = std::move(parsed).error();
        e.param = "tools";
        return e;
      }
      params = std::move(parsed).value();
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

// The rule of the calls after the opening marker. kMarked: call, end marker, then (parallel)
// more marker-call-marker, white space between; kList: `[` call, call... `]`; kBare: one call.
std::uint32_t add_calls_rule(GrammarBuilder& b, const ToolSpec& spec, std::uint32_t call) {
  const ToolCallSyntax& syn = spec.syntax;
  const std::uint32_t calls = b.add_rule("tool calls");
  std::uint32_t n = spec.parallel_tool_calls ? std::max<std::uint32_t>(1, spec.max_calls) : 1;
  if (syn.layout == ToolLayout::kBare) n = 1;
  std::uint32_t cur = b.start(calls);
  if (syn.layout == ToolLayout::kList) cur = b.literal(calls, b.ws(calls, cur), "[");
  for (std::uint32_t k = 0; k < n; ++k) {
    if (k > 0 && syn.layout == ToolLayout::kMarked)
      cur = write_marker(b, syn, calls, b.ws(calls, cur), syn.begin);
    if (k > 0 && syn.layout == ToolLayout::kList) cur = b.literal(calls, b.ws(calls, cur), ",");
    cur = b.ws(calls, b.call(calls, b.ws(calls, cur), call));
    if (syn.layout == ToolLayout::kMarked) {
      cur = write_marker(b, syn, calls, cur, syn.end);
      b.accept(calls, cur);
    } else if (syn.layout == ToolLayout::kList) {
      b.accept(calls, b.literal(calls, cur, "]"));
    } else {
      b.accept(calls, cur);
    }
  }
  return calls;
}

// Free text in `rule` from `from`: one state per length of the marker's prefix that the text
// ends with (each accepting when `accept`); with `opens`, a completed marker leads to the
// returned state, else the text never contains the marker (and the returned state is unused).
// A marker that is a token (`token`) is never completed by bytes: its token leads there.
std::uint32_t add_text_states(GrammarBuilder& b, std::uint32_t rule, std::uint32_t from,
                              const std::string& marker, bool accept, bool opens,
                              bool token = false) {
  const auto m = static_cast<std::uint32_t>(marker.size());
  std::vector<std::uint32_t> text(m);
  text[0] = from;
  for (std::uint32_t k = 1; k < m; ++k) text[k] = b.add_state(rule);
  const std::uint32_t opened = b.add_state(rule);
  for (std::uint32_t k = 0; k < m; ++k) {
    if (accept) b.accept(rule, text[k]);
    std::uint32_t lo = 0;
    while (lo < 256) {
      const std::uint32_t target = kmp_next(marker, k, static_cast<std::uint8_t>(lo));
      std::uint32_t hi = lo;
      while (hi + 1 < 256 && kmp_next(marker, k, static_cast<std::uint8_t>(hi + 1)) == target) ++hi;
      if (target < m) {
        b.byte_edge(rule, text[k], static_cast<std::uint8_t>(lo), static_cast<std::uint8_t>(hi),
                    text[target]);
      } else if (opens && !token) {
        b.byte_edge(rule, text[k], static_cast<std::uint8_t>(lo), static_cast<std::uint8_t>(hi),
                    opened);
      }
      lo = hi + 1;
    }
    if (opens && token) b.marker_edge(rule, text[k], marker, opened);
  }
  return opened;
}

// kBare text: empty, or a first byte that cannot begin a call (not `{`, not white space; with
// an opening marker such as `<|python_tag|>`, not `<` either), then anything.
void add_bare_text(GrammarBuilder& b, std::uint32_t rule, std::uint32_t from, bool marker) {
  b.accept(rule, from);
  const std::uint32_t text = b.add_state(rule);
  b.accept(rule, text);
  b.byte_edge(rule, text, 0, 255, text);
  std::vector<std::uint8_t> excluded = {'\t', '\n', ' ', '{'};
  if (marker) excluded.insert(excluded.begin() + 3, '<');
  std::uint32_t lo = 0;
  for (const std::uint8_t x : excluded) {
    if (lo < x) b.byte_edge(rule, from, static_cast<std::uint8_t>(lo), x - 1, text);
    lo = x + 1u;
  }
  b.byte_edge(rule, from, static_cast<std::uint8_t>(lo), 255, text);
}

// The output after any think block, from `from` in `root`.
void add_body(GrammarBuilder& b, const ToolSpec& spec, std::uint32_t root, std::uint32_t from,
              std::uint32_t calls) {
  const ToolCallSyntax& syn = spec.syntax;
  const bool forced = spec.choice == ToolChoice::kRequired || spec.choice == ToolChoice::kNamed;
  if (syn.layout == ToolLayout::kBare) {
    if (spec.choice != ToolChoice::kNone) {
      // The call, after the opening marker when there is one (Llama's <|python_tag|>: the
      // model may write it or not).
      std::uint32_t start = from;
      if (!syn.begin.empty()) {
        start = b.add_state(root);
        b.eps(root, from, start);
        b.eps(root, write_marker(b, syn, root, from, syn.begin), start);
      }
      b.accept(root, b.call(root, b.ws(root, start), calls));
    }
    if (!forced) add_bare_text(b, root, from, !syn.begin.empty());
    return;
  }
  if (forced) {
    b.accept(root, b.call(root, write_marker(b, syn, root, b.ws(root, from), syn.begin), calls));
    return;
  }
  const bool opens = spec.choice == ToolChoice::kAuto;
  const std::uint32_t opened =
      add_text_states(b, root, from, syn.begin, true, opens, syn.is_token(syn.begin));
  if (opens) b.accept(root, b.call(root, opened, calls));
}

}  // namespace

bool ToolCallSyntax::is_token(const std::string& marker) const {
  return constrain::is_token(token_markers, marker);
}

// An optional think block first: free text up to its end marker, then white space.
std::uint32_t add_think_block(GrammarBuilder& b, const ThinkBlock& think, std::uint32_t root) {
  if (think.begin.empty() || think.end.empty()) return b.start(root);
  const std::uint32_t body = b.add_state(root);
  b.eps(root, b.start(root), body);
  const std::uint32_t in =
      write_marker(b, is_token(think.token_markers, think.begin), root, b.start(root), think.begin);
  const std::uint32_t text = add_text_states(b, root, in, think.end, false, true,
                                             is_token(think.token_markers, think.end));
  b.eps(root, b.ws(root, text), body);
  return body;
}

Result<Grammar> compile_tools(const ToolSpec& spec, const CompileOptions& options) {
  const ToolCallSyntax& syn = spec.syntax;
  if (syn.begin.empty() && syn.layout != ToolLayout::kBare) {
    return invalid("tool-call syntax: the opening marker is empty");
  }
  if (syn.think_begin.empty() != syn.think_end.empty()) {
    return invalid("tool-call syntax: a think block needs both markers");
  }
  GrammarBuilder b;
  SchemaCompiler compiler(b, options);
  auto call = add_call_rule(b, compiler, spec);
  if (!call) return std::move(call).error();
  const std::uint32_t calls = add_calls_rule(b, spec, *call);
  const std::uint32_t root = b.add_rule("document");
  const std::uint32_t body =
      add_think_block(b, ThinkBlock{syn.think_begin, syn.think_end, syn.token_markers}, root);
  add_body(b, spec, root, body, calls);
  Grammar g = b.finish(root);
  if (g.rules[g.root].min_len == kNoPath) {
    return invalid(
        "tools: no call of a declared function can be written (a parameters schema "
        "admits no finite document)");
  }
  return g;
}

}  // namespace ferry::constrain
