#include "constrain/schema.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "constrain/schema_compiler.h"

namespace ferry::constrain {
namespace {

const std::set<std::string, std::less<>> kAnnotations = {
    "title", "description", "default",  "examples",  "$comment", "$schema",
    "$id",   "deprecated",  "readOnly", "writeOnly", "$defs",    "definitions"};
const std::set<std::string, std::less<>> kKeywords = {"type",
                                                      "properties",
                                                      "required",
                                                      "additionalProperties",
                                                      "enum",
                                                      "const",
                                                      "anyOf",
                                                      "allOf",
                                                      "$ref",
                                                      "items",
                                                      "minItems",
                                                      "maxItems",
                                                      "pattern",
                                                      "format",
                                                      "minLength",
                                                      "maxLength",
                                                      "minimum",
                                                      "maximum",
                                                      "exclusiveMinimum",
                                                      "exclusiveMaximum",
                                                      "nullable"};

// Strict subsets of the formats ajv-formats checks (see schema.h). Email's domain labels have
// no hyphen: a class run followed by bytes of its own class would not take the run tables.
constexpr std::string_view kDate =
    R"(\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|02-(?:0[1-9]|1\d|2[0-8])))";
constexpr std::string_view kTime =
    R"((?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,6})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d))";
constexpr std::string_view kUuid = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
constexpr std::string_view kEmail =
    R"([a-z0-9_+-]{1,32}(?:\.[a-z0-9_+-]{1,32}){0,2}@[a-z0-9]{1,32}(?:\.[a-z0-9]{1,32}){1,3})";

std::string pointer_token(const std::string& name) {
  std::string out;
  for (const char c : name) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string show_path(const std::string& path) {
  return "#" + path;
}

bool is_type(const Json& v, const std::string& type) {
  if (type == "null") return v.is_null();
  if (type == "boolean") return v.is_boolean();
  if (type == "string") return v.is_string();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "number") return v.is_number();
  if (type == "integer") {
    if (v.is_number_integer()) return true;
    return v.is_number_float() && std::floor(v.get<double>()) == v.get<double>();
  }
  return false;
}

// ---- integer ranges as digit automata ------------------------------------------------------

struct Digits {
  GrammarBuilder& b;
  std::uint32_t rule;

  // Decimal strings of one length between x and y (same length, x <= y).
  std::uint32_t same_length(std::uint32_t from, const std::string& x, const std::string& y) {
    if (x.empty()) return b.literal(rule, from, "");
    const bool all_any = x.find_first_not_of('0') == std::string::npos &&
                         y.find_first_not_of('9') == std::string::npos;
    if (all_any) {
      std::uint32_t cur = from;
      for (std::size_t i = 0; i < x.size(); ++i) {
        const std::uint32_t next = b.add_state(rule);
        b.byte_edge(rule, cur, '0', '9', next);
        cur = next;
      }
      return cur;
    }
    if (x[0] == y[0])
      return same_length(b.literal(rule, from, x.substr(0, 1)), x.substr(1), y.substr(1));
    const std::uint32_t to = b.add_state(rule);
    const std::string nines(x.size() - 1, '9');
    const std::string zeros(x.size() - 1, '0');
    b.eps(rule, same_length(b.literal(rule, from, x.substr(0, 1)), x.substr(1), nines), to);
    if (x[0] + 1 <= y[0] - 1) {
      const std::uint32_t mid = b.add_state(rule);
      b.byte_edge(rule, from, static_cast<std::uint8_t>(x[0] + 1),
                  static_cast<std::uint8_t>(y[0] - 1), mid);
      b.eps(rule, same_length(mid, zeros, nines), to);
    }
    b.eps(rule, same_length(b.literal(rule, from, y.substr(0, 1)), zeros, y.substr(1)), to);
    return to;
  }

  std::uint32_t non_negative(std::uint32_t from, std::uint64_t lo, std::uint64_t hi) {
    const std::uint32_t to = b.add_state(rule);
    std::uint64_t low_of_len = 0;
    std::uint64_t high_of_len = 9;
    for (int len = 1; len <= 19; ++len) {
      const std::uint64_t a = std::max(lo, low_of_len);
      const std::uint64_t z = std::min(hi, high_of_len);
      if (a <= z) b.eps(rule, same_length(from, std::to_string(a), std::to_string(z)), to);
      if (high_of_len >= hi) break;
      low_of_len = high_of_len + 1;
      high_of_len = high_of_len * 10 + 9;
    }
    return to;
  }

  std::uint32_t range(std::uint32_t from, std::int64_t lo, std::int64_t hi) {
    const std::uint32_t to = b.add_state(rule);
    if (hi >= 0) {
      b.eps(rule,
            non_negative(from, static_cast<std::uint64_t>(std::max<std::int64_t>(lo, 0)),
                         static_cast<std::uint64_t>(hi)),
            to);
    }
    if (lo < 0) {
      const std::int64_t neg_hi = std::min<std::int64_t>(hi, -1);
      b.eps(rule,
            non_negative(b.literal(rule, from, "-"), static_cast<std::uint64_t>(-neg_hi),
                         static_cast<std::uint64_t>(-lo)),
            to);
    }
    return to;
  }
};

}  // namespace

SchemaCompiler::SchemaCompiler(GrammarBuilder& builder, const CompileOptions& options)
    : b_(builder), opt_(options) {
  b_.set_max_whitespace(options.max_whitespace);
}

void SchemaCompiler::fail(std::string message) {
  if (!error_) error_ = Error::make(ErrorCode::kInvalidRequest, std::move(message));
}

void SchemaCompiler::unsupported(const std::string& keyword, const std::string& path,
                                 const std::string& why) {
  fail("JSON Schema keyword '" + keyword + "' at '" + show_path(where_ + path) +
       "' is not supported" + (why.empty() ? "" : ": " + why));
}

Result<std::uint32_t> SchemaCompiler::document_rule(const Json& document,
                                                    const std::string& where) {
  doc_ = &document;
  where_ = where;
  refs_.clear();
  const std::uint32_t rule = node_rule(document, "");
  if (error_) return *error_;
  return rule;
}

std::uint32_t SchemaCompiler::any_rule(std::uint32_t depth) {
  if (const auto it = any_.find(depth); it != any_.end()) return it->second;
  const std::uint32_t rule = b_.add_rule("any" + std::to_string(depth));
  any_[depth] = rule;
  const std::uint32_t start = b_.start(rule);
  const std::uint32_t end = b_.add_state(rule);
  b_.accept(rule, end);
  b_.eps(rule, b_.one_of(rule, start, {"null", "true", "false"}), end);
  b_.eps(rule, number_fragment(false, Json::object(), "", rule, start), end);
  b_.eps(rule, b_.call(rule, start, b_.string_rule(0, opt_.max_string_chars)), end);
  if (depth + 1 < opt_.max_any_depth) {
    const std::uint32_t inner = any_rule(depth + 1);
    b_.eps(rule, map_fragment(inner, rule, start), end);
    b_.eps(rule, array_of(inner, 0, opt_.max_array_items, rule, start), end);
  }
  return rule;
}

std::uint32_t SchemaCompiler::any_object_rule() {
  const std::uint32_t rule = b_.add_rule("object");
  const std::uint32_t end = map_fragment(any_rule(1), rule, b_.start(rule));
  b_.accept(rule, end);
  return rule;
}

std::uint32_t SchemaCompiler::ref_rule(const std::string& ref, const std::string& path) {
  if (const auto it = refs_.find(ref); it != refs_.end()) return it->second;
  if (ref.empty() || ref[0] != '#' || (ref.size() > 1 && ref[1] != '/')) {
    unsupported("$ref", path, "only '#' and '#/...' pointers inside the schema are");
    return 0;
  }
  const Json* target = nullptr;
  try {
    const Json::json_pointer pointer(ref.substr(1));
    if (doc_->contains(pointer)) target = &doc_->at(pointer);
  } catch (const std::exception&) {
    target = nullptr;
  }
  if (!target) {
    fail("JSON Schema '$ref' at '" + show_path(where_ + path) + "' points to nothing: " + ref);
    return 0;
  }
  // A chain of references back to itself with nothing between would never write a byte.
  std::set<const Json*> chain{target};
  for (const Json* t = target; t->is_object() && t->contains("$ref") && (*t)["$ref"].is_string();) {
    const std::string next = (*t)["$ref"].get<std::string>();
    if (next.empty() || next[0] != '#') break;
    try {
      const Json::json_pointer pointer(next.substr(1));
      if (!doc_->contains(pointer)) break;
      t = &doc_->at(pointer);
    } catch (const std::exception&) {
      break;
    }
    if (!chain.insert(t).second) {
      unsupported("$ref", path, "a cycle of references with no value between them");
      return 0;
    }
  }
  // One rule per target, made before its body so that recursion finds it.
  const std::uint32_t rule = b_.add_rule("ref " + ref);
  refs_.emplace(ref, rule);
  const std::uint32_t body = node_rule(*target, ref.substr(1));
  b_.accept(rule, b_.call(rule, b_.start(rule), body));
  return rule;
}

// The rule of one schema node. Long: one branch per kind of node (ref, combinator, enum, types),
// each short, in the order a validator reads them.
std::uint32_t SchemaCompiler::node_rule(const Json& s, const std::string& path) {
  if (failed()) return 0;
  struct Nest {
    std::uint32_t& d;
    ~Nest() { --d; }
  } nest{++depth_};
  if (depth_ > opt_.max_schema_depth) {
    fail("JSON Schema at '" + show_path(where_ + path) + "' nests deeper than " +
         std::to_string(opt_.max_schema_depth) + " levels");
    return 0;
  }
  if (b_.state_count() > opt_.regex.max_states) {
    fail("JSON Schema too large: its grammar passes " + std::to_string(opt_.regex.max_states) +
         " states at '" + show_path(where_ + path) + "'");
    return 0;
  }
  if (s.is_boolean()) {
    if (s.get<bool>()) return any_rule(0);
    fail("JSON Schema 'false' at '" + show_path(where_ + path) + "' allows no value");
    return 0;
  }
  if (!s.is_object()) {
    fail("JSON Schema at '" + show_path(where_ + path) + "' is not an object");
    return 0;
  }
  std::vector<std::string> constraints;  // the keywords present, annotations aside
  for (const auto& [key, value] : s.items()) {
    if (kAnnotations.count(key) != 0) continue;
    if (kKeywords.count(key) == 0) {
      unsupported(key, path);
      return 0;
    }
    constraints.push_back(key);
  }
  const auto alone = [&](const char* keyword, std::initializer_list<const char*> also) {
    for (const std::string& k : constraints) {
      if (k == keyword) continue;
      if (std::find_if(also.begin(), also.end(), [&](const char* a) { return k == a; }) !=
          also.end())
        continue;
      unsupported(k, path, std::string("not beside '") + keyword + "'");
      return false;
    }
    return true;
  };

  if (s.contains("$ref")) {
    if (!alone("$ref", {}) || !s["$ref"].is_string()) return 0;
    return ref_rule(s["$ref"].get<std::string>(), path);
  }
  const std::uint32_t rule = b_.add_rule(path.empty() ? "root" : path);
  const std::uint32_t start = b_.start(rule);
  const std::uint32_t end = b_.add_state(rule);
  b_.accept(rule, end);

  for (const char* combinator : {"anyOf", "allOf"}) {
    if (!s.contains(combinator)) continue;
    const Json& alts = s[combinator];
    if (!alone(combinator, {}) || !alts.is_array() || alts.empty()) {
      if (!failed()) unsupported(combinator, path, "expects a non-empty array");
      return 0;
    }
    if (std::string(combinator) == "allOf" && alts.size() != 1) {
      unsupported("allOf", path, "only with one schema");
      return 0;
    }
    for (std::size_t i = 0; i < alts.size(); ++i) {
      const std::uint32_t alt =
          node_rule(alts[i], path + "/" + combinator + "/" + std::to_string(i));
      b_.eps(rule, b_.call(rule, start, alt), end);
    }
    return rule;
  }
  if (s.contains("enum") || s.contains("const")) {
    if (!alone(s.contains("enum") ? "enum" : "const", {"type"})) return 0;
    b_.eps(rule, enum_fragment(s, path, rule, start), end);
    return rule;
  }

  std::vector<std::string> types;
  if (s.contains("type")) {
    const Json& t = s["type"];
    if (t.is_string()) types.push_back(t.get<std::string>());
    if (t.is_array()) {
      for (const Json& e : t) {
        if (e.is_string()) types.push_back(e.get<std::string>());
      }
    }
    if (types.empty()) unsupported("type", path, "expects a type name or a list of them");
    // OpenAPI's `nullable: true` (what zod's .nullable() becomes): null is allowed too.
    if (s.contains("nullable")) {
      if (!s["nullable"].is_boolean()) {
        unsupported("nullable", path, "expects true or false");
      } else if (s["nullable"].get<bool>() &&
                 std::find(types.begin(), types.end(), "null") == types.end()) {
        types.push_back("null");
      }
    }
  } else {
    if (s.contains("nullable")) unsupported("nullable", path, "only beside 'type'");
    // No type: the keywords say which kind of value they constrain; none: any value.
    const auto has = [&](std::initializer_list<const char*> keys) {
      return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return s.contains(k); });
    };
    if (has({"properties", "required", "additionalProperties"})) types.push_back("object");
    if (has({"items", "minItems", "maxItems"})) types.push_back("array");
    if (has({"pattern", "format", "minLength", "maxLength"})) types.push_back("string");
    if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) {
      types.push_back("number");
    }
    if (types.size() > 1) {
      unsupported(constraints.front(), path, "without 'type', keywords of several types");
    }
    if (types.empty()) {
      b_.eps(rule, b_.call(rule, start, any_rule(0)), end);
      return rule;
    }
  }
  for (const std::string& type : types) {
    if (failed()) return 0;
    b_.eps(rule, type_fragment(type, s, path, rule, start), end);
  }
  return rule;
}

std::uint32_t SchemaCompiler::type_fragment(const std::string& type, const Json& s,
                                            const std::string& path, std::uint32_t rule,
                                            std::uint32_t from) {
  if (type == "null") return b_.literal(rule, from, "null");
  if (type == "boolean") return b_.one_of(rule, from, {"true", "false"});
  if (type == "integer") return number_fragment(true, s, path, rule, from);
  if (type == "number") return number_fragment(false, s, path, rule, from);
  if (type == "string") return string_fragment(s, path, rule, from);
  if (type == "object") return object_fragment(s, path, rule, from);
  if (type == "array") return array_fragment(s, path, rule, from);
  unsupported("type", path, "unknown type '" + type + "'");
  return from;
}

std::uint32_t SchemaCompiler::enum_fragment(const Json& s, const std::string& path,
                                            std::uint32_t rule, std::uint32_t from) {
  const bool is_const = s.contains("const");
  const std::string keyword = is_const ? "const" : "enum";
  const Json values = is_const ? Json::array({s["const"]}) : s["enum"];
  if (!values.is_array() || values.empty()) {
    unsupported(keyword, path, "expects a non-empty array");
    return from;
  }
  std::vector<std::string> types;
  if (s.contains("type")) {
    if (s["type"].is_string()) types.push_back(s["type"].get<std::string>());
    if (s["type"].is_array()) {
      for (const Json& t : s["type"])
        if (t.is_string()) types.push_back(t.get<std::string>());
    }
  }
  std::vector<std::string> literals;
  for (const Json& v : values) {
    const bool typed = types.empty() || std::any_of(types.begin(), types.end(),
                                                    [&](const auto& t) { return is_type(v, t); });
    if (typed) literals.push_back(v.dump());
  }
  if (literals.empty()) {
    fail("JSON Schema '" + keyword + "' at '" + show_path(where_ + path) +
         "' has no value of the declared type");
    return from;
  }
  std::size_t bytes = 0;
  for (const std::string& l : literals) bytes += l.size();
  if (b_.state_count() + bytes > opt_.regex.max_states) {
    unsupported(keyword, path,
                "its values pass " + std::to_string(opt_.regex.max_states) + " grammar states");
    return from;
  }
  return b_.one_of(rule, from, literals);
}

std::uint32_t SchemaCompiler::string_fragment(const Json& s, const std::string& path,
                                              std::uint32_t rule, std::uint32_t from) {
  const bool has_pattern = s.contains("pattern");
  const bool has_format = s.contains("format");
  if (has_pattern || has_format) {
    const char* keyword = has_pattern ? "pattern" : "format";
    for (const char* other : {"minLength", "maxLength"}) {
      if (s.contains(other)) {
        unsupported(other, path, std::string("not beside '") + keyword + "'");
        return from;
      }
    }
    if (has_pattern && has_format) {
      unsupported("format", path, "not beside 'pattern'");
      return from;
    }
    std::string pattern;
    if (has_pattern && s["pattern"].is_string()) pattern = s["pattern"].get<std::string>();
    if (has_format && s["format"].is_string()) {
      const std::string format = s["format"].get<std::string>();
      if (format == "date") pattern = kDate;
      if (format == "time") pattern = kTime;
      if (format == "date-time") pattern = std::string(kDate) + "T" + std::string(kTime);
      if (format == "uuid") pattern = kUuid;
      if (format == "email") pattern = kEmail;
      if (pattern.empty()) {
        unsupported("format", path,
                    "format '" + format + "' (supported: date, time, date-time, uuid, email)");
        return from;
      }
    }
    if (pattern.empty() && has_pattern) {
      unsupported("pattern", path, "expects a non-empty string");
      return from;
    }
    auto end = add_pattern(b_, rule, b_.literal(rule, from, "\""), pattern, opt_.regex);
    if (!end) {
      unsupported(keyword, path, end.error().message);
      return from;
    }
    return b_.literal(rule, *end, "\"");
  }
  std::uint64_t min = 0;
  std::uint64_t max = opt_.max_string_chars;
  for (const char* k : {"minLength", "maxLength"}) {
    if (!s.contains(k)) continue;
    if (!s[k].is_number_unsigned()) {
      unsupported(k, path, "expects a non-negative integer");
      return from;
    }
    (std::string(k) == "minLength" ? min : max) = s[k].get<std::uint64_t>();
  }
  if (min > 100000 || max < min) {
    unsupported("minLength", path, "minLength must be at most maxLength and 100000");
    return from;
  }
  if (!s.contains("maxLength")) max = std::max<std::uint64_t>(max, min);
  return b_.call(rule, from,
                 b_.string_rule(static_cast<std::uint32_t>(min), static_cast<std::uint32_t>(max)));
}

std::uint32_t SchemaCompiler::number_fragment(bool integer, const Json& s, const std::string& path,
                                              std::uint32_t rule, std::uint32_t from) {
  const bool bounded = s.contains("minimum") || s.contains("maximum") ||
                       s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum");
  const std::uint32_t digits = std::min<std::uint32_t>(opt_.max_integer_digits, 18);
  if (!integer && !bounded) {
    const std::string d = std::to_string(digits - 1);
    const std::string pattern = R"(-?(?:0|[1-9]\d{0,)" + d + R"(})(?:\.\d{1,)" +
                                std::to_string(digits) + R"(})?(?:[eE][+-]?\d{1,2})?)";
    auto end = add_pattern(b_, rule, from, pattern, opt_.regex);
    return end ? *end : from;
  }
  std::int64_t limit = 1;
  for (std::uint32_t i = 0; i < digits; ++i) limit *= 10;
  limit -= 1;
  double lo = -static_cast<double>(limit);
  double hi = static_cast<double>(limit);
  for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
    if (!s.contains(k)) continue;
    if (!s[k].is_number()) {
      unsupported(k, path, "expects a number");
      return from;
    }
    const double v = s[k].get<double>();
    const std::string key = k;
    if (key == "minimum") lo = std::max(lo, std::ceil(v));
    if (key == "exclusiveMinimum") lo = std::max(lo, std::floor(v) + 1);
    if (key == "maximum") hi = std::min(hi, std::floor(v));
    if (key == "exclusiveMaximum") hi = std::min(hi, std::ceil(v) - 1);
  }
  lo = std::max(lo, -static_cast<double>(limit));
  hi = std::min(hi, static_cast<double>(limit));
  if (lo > hi) {
    unsupported(s.contains("minimum") ? "minimum" : "exclusiveMinimum", path,
                "no integer of at most " + std::to_string(digits) + " digits is in range");
    return from;
  }
  Digits d{b_, rule};
  return d.range(from, static_cast<std::int64_t>(lo), static_cast<std::int64_t>(hi));
}

std::uint32_t SchemaCompiler::object_fragment(const Json& s, const std::string& path,
                                              std::uint32_t rule, std::uint32_t from) {
  const Json empty = Json::object();
  const Json& props = s.contains("properties") ? s["properties"] : empty;
  if (!props.is_object()) {
    unsupported("properties", path, "expects an object");
    return from;
  }
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) {
      unsupported("required", path, "expects an array of names");
      return from;
    }
    for (const Json& r : s["required"]) {
      if (!r.is_string() || !props.contains(r.get<std::string>())) {
        unsupported("required", path, "names a property not in 'properties': " + r.dump());
        return from;
      }
      required.insert(r.get<std::string>());
    }
  }
  const Json* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
  if (extra && !extra->is_boolean() && !extra->is_object()) {
    unsupported("additionalProperties", path, "expects a boolean or a schema");
    return from;
  }
  if (props.empty()) {
    if (extra && extra->is_boolean() && !extra->get<bool>()) {
      return b_.literal(rule, b_.ws(rule, b_.literal(rule, from, "{")), "}");
    }
    const std::uint32_t value = extra && extra->is_object()
                                    ? node_rule(*extra, path + "/additionalProperties")
                                    : any_rule(1);
    return map_fragment(value, rule, from);
  }
  // Declared members in order. `none`: nothing written yet; `some`: a member written (the next
  // one needs a comma). kNone marks a state that cannot be reached.
  constexpr std::uint32_t kNone = 0xFFFFFFFFu;
  std::uint32_t none = b_.ws(rule, b_.literal(rule, from, "{"));
  std::uint32_t some = kNone;
  for (const auto& [name, schema] : props.items()) {
    const std::uint32_t value = node_rule(schema, path + "/properties/" + pointer_token(name));
    if (failed()) return from;
    const bool optional = required.count(name) == 0;
    const std::string key = Json(name).dump();
    const auto member = [&](std::uint32_t at) {
      const std::uint32_t colon =
          b_.ws(rule, b_.literal(rule, b_.ws(rule, b_.literal(rule, at, key)), ":"));
      return b_.ws(rule, b_.call(rule, colon, value));
    };
    const std::uint32_t next_some = b_.add_state(rule);
    if (none != kNone) b_.eps(rule, member(none), next_some);
    if (some != kNone) {
      b_.eps(rule, member(b_.ws(rule, b_.literal(rule, some, ","))), next_some);
      if (optional) b_.eps(rule, some, next_some);
    }
    if (!optional) none = kNone;
    some = next_some;
  }
  const std::uint32_t close = b_.add_state(rule);
  if (none != kNone) b_.eps(rule, none, close);
  if (some != kNone) b_.eps(rule, some, close);
  return b_.literal(rule, close, "}");
}

std::uint32_t SchemaCompiler::map_fragment(std::uint32_t value_rule, std::uint32_t rule,
                                           std::uint32_t from) {
  const std::uint32_t key_rule =
      b_.string_rule(0, std::min<std::uint32_t>(64, opt_.max_string_chars));
  std::uint32_t cur = b_.ws(rule, b_.literal(rule, from, "{"));
  const std::uint32_t close = b_.add_state(rule);
  b_.eps(rule, cur, close);
  for (std::uint32_t i = 0; i < opt_.max_object_members; ++i) {
    if (i > 0) cur = b_.ws(rule, b_.literal(rule, cur, ","));
    const std::uint32_t colon =
        b_.ws(rule, b_.literal(rule, b_.ws(rule, b_.call(rule, cur, key_rule)), ":"));
    cur = b_.ws(rule, b_.call(rule, colon, value_rule));
    b_.eps(rule, cur, close);
  }
  return b_.literal(rule, close, "}");
}

std::uint32_t SchemaCompiler::array_fragment(const Json& s, const std::string& path,
                                             std::uint32_t rule, std::uint32_t from) {
  std::uint64_t min_items = 0;
  std::uint64_t max_items = 0;
  bool has_max = false;
  for (const char* k : {"minItems", "maxItems"}) {
    if (!s.contains(k)) continue;
    if (!s[k].is_number_unsigned()) {
      unsupported(k, path, "expects a non-negative integer");
      return from;
    }
    if (std::string(k) == "minItems") {
      min_items = s[k].get<std::uint64_t>();
    } else {
      max_items = s[k].get<std::uint64_t>();
      has_max = true;
    }
  }
  if (!has_max) max_items = min_items + opt_.max_array_items;
  if (max_items < min_items || min_items > 1000) {
    unsupported("minItems", path, "minItems must be at most maxItems and 1000");
    return from;
  }
  max_items = std::min<std::uint64_t>(max_items, min_items + opt_.max_array_items);
  std::uint32_t item = 0;
  if (s.contains("items")) {
    if (s["items"].is_array()) {
      unsupported("items", path, "tuple form (an array of schemas)");
      return from;
    }
    item = node_rule(s["items"], path + "/items");
  } else {
    item = any_rule(1);
  }
  if (failed()) return from;
  return array_of(item, min_items, max_items, rule, from);
}

std::uint32_t SchemaCompiler::array_of(std::uint32_t item_rule, std::uint64_t min_items,
                                       std::uint64_t max_items, std::uint32_t rule,
                                       std::uint32_t from) {
  std::uint32_t cur = b_.ws(rule, b_.literal(rule, from, "["));
  const std::uint32_t close = b_.add_state(rule);
  if (min_items == 0) b_.eps(rule, cur, close);
  for (std::uint64_t k = 1; k <= max_items; ++k) {
    if (k > 1) cur = b_.ws(rule, b_.literal(rule, cur, ","));
    cur = b_.ws(rule, b_.call(rule, cur, item_rule));
    if (k >= min_items) b_.eps(rule, cur, close);
  }
  return b_.literal(rule, close, "]");
}

// ---- entry points --------------------------------------------------------------------------

namespace {

// Counts each object's members as the text streams by (SAX: linear, no tree), keeping the
// path for the error.
class MemberScan : public nlohmann::json_sax<Json> {
 public:
  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override {
    value();
    open_.push_back(Level{true, 0, {}});
    return true;
  }
  bool key(string_t& k) override {
    Level& l = open_.back();
    l.key = k;
    if (++l.count <= kMaxMembers) return true;
    too_many_ = true;
    return false;
  }
  bool end_object() override {
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    value();
    open_.push_back(Level{false, 0, {}});
    return true;
  }
  bool end_array() override {
    open_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }
  bool too_many() const { return too_many_; }
  // The JSON pointer of the object that has too many members.
  std::string path() const {
    std::string p;
    for (std::size_t i = 0; i + 1 < open_.size(); ++i) {
      p += "/";
      p += open_[i].object ? open_[i].key : std::to_string(open_[i].count - 1);
    }
    return p;
  }

 private:
  struct Level {
    bool object;
    std::size_t count;  // members (object) or values (array) so far
    std::string key;    // the current member's key (object)
  };
  bool value() {
    if (!open_.empty() && !open_.back().object) ++open_.back().count;
    return true;
  }
  std::vector<Level> open_;
  bool too_many_ = false;
};

std::string pointer_text(const std::string& p) {
  return "#" + (p.size() > 200 ? p.substr(0, 200) + "..." : p);
}

}  // namespace

Result<Json> parse_schema_text(std::string_view text, const std::string& where) {
  MemberScan scan;
  nlohmann::json_sax<Json>& sax = scan;
  const bool ok = Json::sax_parse(text, &sax, nlohmann::detail::input_format_t::json, false);
  if (scan.too_many()) {
    return Error::make(ErrorCode::kInvalidRequest, "JSON Schema too large: the object at '" +
                                                       pointer_text(where + scan.path()) +
                                                       "' has more than " +
                                                       std::to_string(kMaxMembers) + " members");
  }
  (void)ok;  // a syntax error: the full parse below gives its message
  try {
    return Json::parse(text);
  } catch (const std::exception& e) {
    return Error::make(ErrorCode::kInvalidRequest,
                       std::string("the JSON schema is not valid JSON: ") + e.what());
  }
}

Result<Grammar> compile_json_schema(std::string_view schema_json, const CompileOptions& options,
                                    const ThinkBlock& think) {
  auto parsed = parse_schema_text(schema_json, "");
  if (!parsed) return std::move(parsed).error();
  const Json schema = std::move(parsed).value();
  GrammarBuilder b;
  SchemaCompiler compiler(b, options);
  auto body = compiler.document_rule(schema, "");
  if (!body) return std::move(body).error();
  const std::uint32_t root = b.add_rule("document");
  b.accept(root, b.call(root, b.ws(root, add_think_block(b, think, root)), *body));
  Grammar g = b.finish(root);
  if (g.rules[g.root].min_len == kNoPath) {
    return Error::make(ErrorCode::kInvalidRequest,
                       "the JSON schema admits no finite document (its recursion never ends)");
  }
  return g;
}

Grammar compile_json_object(const CompileOptions& options, const ThinkBlock& think) {
  GrammarBuilder b;
  SchemaCompiler compiler(b, options);
  const std::uint32_t object = compiler.any_object_rule();
  const std::uint32_t root = b.add_rule("document");
  b.accept(root, b.call(root, b.ws(root, add_think_block(b, think, root)), object));
  return b.finish(root);
}

}  // namespace ferry::constrain
