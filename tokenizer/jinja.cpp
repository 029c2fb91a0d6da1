#include "tokenizer/jinja.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

namespace ferry::tokenizer::jinja {
namespace {

// ---- Values -------------------------------------------------------------------------------

struct Value;
using ValueList = std::vector<Value>;
struct ValueDict;
struct Callable;

// An immutable string that copies without copying its text: a view of a shared buffer, or of
// text the render's JSON context owns (it outlives the render). Message contents pass through
// lookups, loops and filters like trim without a copy.
class Str {
 public:
  Str() = default;
  explicit Str(std::string text) {
    if (text.empty()) return;
    owner_ = std::make_shared<const std::string>(std::move(text));
    view_ = *owner_;
  }
  static Str borrow(std::string_view text) {
    Str s;
    s.view_ = text;
    return s;
  }
  // [pos, pos + n) of this string, sharing its buffer.
  Str sub(std::size_t pos, std::size_t n) const {
    Str s = *this;
    s.view_ = view_.substr(pos, n);
    return s;
  }
  std::string_view view() const { return view_; }
  std::string str() const { return std::string(view_); }
  bool empty() const { return view_.empty(); }
  std::size_t size() const { return view_.size(); }

 private:
  std::shared_ptr<const std::string> owner_;
  std::string_view view_;
};

struct Value {
  enum Kind : std::uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunc };
  Kind kind = kUndefined;
  bool b = false;
  std::int64_t i = 0;
  double f = 0;
  Str s;
  std::shared_ptr<ValueList> list;
  std::shared_ptr<ValueDict> dict;
  std::shared_ptr<Callable> fn;
  bool is_namespace = false;

  static Value none() {
    Value v;
    v.kind = kNone;
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.kind = kBool;
    v.b = x;
    return v;
  }
  static Value integer(std::int64_t x) {
    Value v;
    v.kind = kInt;
    v.i = x;
    return v;
  }
  static Value real(double x) {
    Value v;
    v.kind = kFloat;
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v;
    v.kind = kString;
    v.s = Str(std::move(x));
    return v;
  }
  static Value string(Str x) {
    Value v;
    v.kind = kString;
    v.s = std::move(x);
    return v;
  }
  static Value new_list() {
    Value v;
    v.kind = kList;
    v.list = std::make_shared<ValueList>();
    return v;
  }
  static Value new_dict();
};

struct ValueDict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const {
    for (const auto& [k, v] : items) {
      if (k == key) return &v;
    }
    return nullptr;
  }
  void set(const std::string& key, Value v) {
    for (auto& [k, old] : items) {
      if (k == key) {
        old = std::move(v);
        return;
      }
    }
    items.emplace_back(key, std::move(v));
  }
};

Value Value::new_dict() {
  Value v;
  v.kind = kDict;
  v.dict = std::make_shared<ValueDict>();
  return v;
}

struct RenderError {
  std::string message;
};
[[noreturn]] void fail(std::string message) {
  throw RenderError{std::move(message)};
}

// A template comes from a model file or a config, and a corrupt or hostile one must end in an
// error, never in a stack overflow, an exhausted memory or a render that never ends. These
// bounds are far past what real chat templates use (nesting below 20, a few thousand steps per
// message) and far below what would hurt the process.
constexpr int kMaxNesting = 600;  // parser and interpreter recursion (a parenthesis costs 3)
constexpr std::size_t kMaxStringBytes = 64u << 20;   // any one string, and the output
constexpr std::size_t kMaxListItems = 1u << 20;      // range(), string repetition counts
constexpr std::uint64_t kBaseSteps = 5'000'000;      // statements, loop turns and expressions, plus
constexpr std::uint64_t kStepsPerInputValue = 1000;  // per value of the context: templates loop
constexpr std::uint64_t kLoopTurnSteps = 10;         // over messages; a turn builds `loop`

// Counts recursion depth for the thread (parsing and rendering never interleave on one thread).
thread_local int t_nesting = 0;
class Nested {
 public:
  Nested() {
    if (++t_nesting > kMaxNesting) {
      --t_nesting;
      fail("nested more than " + std::to_string(kMaxNesting) + " levels deep");
    }
  }
  ~Nested() { --t_nesting; }
  Nested(const Nested&) = delete;
  Nested& operator=(const Nested&) = delete;
};

void check_string_size(std::size_t bytes) {
  if (bytes > kMaxStringBytes)
    fail("a string would be longer than " + std::to_string(kMaxStringBytes >> 20) + " MiB");
}

// A double as an integer, refusing what does not fit (the cast would be undefined behaviour).
std::int64_t to_int64(double d) {
  if (!(d >= -9.2e18 && d <= 9.2e18)) fail("number out of integer range");
  return static_cast<std::int64_t>(d);
}

// Integer arithmetic as Python's would give it, or an error where int64 cannot hold it.
std::int64_t add_int(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) fail("integer overflow");
  return r;
}
std::int64_t sub_int(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) fail("integer overflow");
  return r;
}
std::int64_t mul_int(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) fail("integer overflow");
  return r;
}

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
  const Value* get(std::size_t index, std::string_view name) const {
    if (index < positional.size()) return &positional[index];
    for (const auto& [k, v] : named) {
      if (k == name) return &v;
    }
    return nullptr;
  }
};

struct Callable {
  std::function<Value(Args&)> call;
};

// `values` counts what was converted (the render's step budget grows with its input).
Value from_json(const nlohmann::ordered_json& j, std::uint64_t& values) {
  const Nested nested;
  ++values;
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value::integer(j.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return Value::real(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(Str::borrow(j.get_ref<const std::string&>()));
    case nlohmann::ordered_json::value_t::array: {
      Value v = Value::new_list();
      for (const auto& e : j) v.list->push_back(from_json(e, values));
      return v;
    }
    case nlohmann::ordered_json::value_t::object: {
      Value v = Value::new_dict();
      for (auto it = j.begin(); it != j.end(); ++it)
        v.dict->items.emplace_back(it.key(), from_json(it.value(), values));
      return v;
    }
    default:
      return Value();
  }
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined:
    case Value::kNone:
      return false;
    case Value::kBool:
      return v.b;
    case Value::kInt:
      return v.i != 0;
    case Value::kFloat:
      return v.f != 0;
    case Value::kString:
      return !v.s.empty();
    case Value::kList:
      return !v.list->empty();
    case Value::kDict:
      return v.is_namespace || !v.dict->items.empty();
    case Value::kFunc:
      return true;
  }
  return false;
}

std::string float_text(double f) {
  if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 1e16) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f", f);
    return buf;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", f);
  // Shortest text that reads back the same, as JavaScript and Python print.
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, f);
    if (std::strtod(buf, nullptr) == f) break;
  }
  return buf;
}

void json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (u < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", u);
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

void to_json(std::string& out, const Value& v, int indent, int depth) {
  const Nested nested;  // a list appended into itself would otherwise recurse forever
  check_string_size(out.size());
  const std::string item_sep = indent > 0 ? "," : ", ";
  auto pad = [&](int d) {
    out.push_back('\n');
    out.append(static_cast<std::size_t>(indent) * static_cast<std::size_t>(d), ' ');
  };
  switch (v.kind) {
    case Value::kUndefined:
    case Value::kNone:
      out += "null";
      break;
    case Value::kBool:
      out += v.b ? "true" : "false";
      break;
    case Value::kInt:
      out += std::to_string(v.i);
      break;
    case Value::kFloat: {
      // JavaScript prints integral floats without ".0".
      if (std::isfinite(v.f) && v.f == std::floor(v.f) && std::fabs(v.f) < 1e16) {
        out += std::to_string(static_cast<std::int64_t>(v.f));
      } else {
        out += float_text(v.f);
      }
      break;
    }
    case Value::kString:
      json_string(out, v.s.view());
      break;
    case Value::kList: {
      out.push_back('[');
      for (std::size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += item_sep;
        if (indent > 0) pad(depth + 1);
        to_json(out, (*v.list)[k], indent, depth + 1);
      }
      if (indent > 0 && !v.list->empty()) pad(depth);
      out.push_back(']');
      break;
    }
    case Value::kDict: {
      out.push_back('{');
      std::size_t k = 0;
      for (const auto& [key, val] : v.dict->items) {
        if (k++) out += item_sep;
        if (indent > 0) pad(depth + 1);
        json_string(out, key);
        out += ": ";
        to_json(out, val, indent, depth + 1);
      }
      if (indent > 0 && !v.dict->items.empty()) pad(depth);
      out.push_back('}');
      break;
    }
    case Value::kFunc:
      out += "null";
      break;
  }
}

std::string to_string(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined:
      return "";
    case Value::kNone:
      return "None";
    case Value::kBool:
      return v.b ? "True" : "False";
    case Value::kInt:
      return std::to_string(v.i);
    case Value::kFloat:
      return float_text(v.f);
    case Value::kString:
      return v.s.str();
    case Value::kList:
    case Value::kDict: {
      std::string out;
      to_json(out, v, 0, 0);
      return out;
    }
    case Value::kFunc:
      return "<function>";
  }
  return "";
}

bool equal(const Value& a, const Value& b) {
  const Nested nested;
  const bool an = a.kind == Value::kInt || a.kind == Value::kFloat || a.kind == Value::kBool;
  const bool bn = b.kind == Value::kInt || b.kind == Value::kFloat || b.kind == Value::kBool;
  if (an && bn) {
    const double x = a.kind == Value::kInt     ? static_cast<double>(a.i)
                     : a.kind == Value::kFloat ? a.f
                                               : a.b;
    const double y = b.kind == Value::kInt     ? static_cast<double>(b.i)
                     : b.kind == Value::kFloat ? b.f
                                               : b.b;
    if (a.kind == Value::kBool || b.kind == Value::kBool) return a.kind == b.kind && x == y;
    return x == y;
  }
  if (a.kind != b.kind) {
    return (a.kind == Value::kNone || a.kind == Value::kUndefined) &&
           (b.kind == Value::kNone || b.kind == Value::kUndefined) && a.kind == b.kind;
  }
  switch (a.kind) {
    case Value::kUndefined:
    case Value::kNone:
      return true;
    case Value::kString:
      return a.s.view() == b.s.view();
    case Value::kList: {
      if (a.list->size() != b.list->size()) return false;
      for (std::size_t k = 0; k < a.list->size(); ++k) {
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    }
    case Value::kDict:
      return a.dict == b.dict;
    default:
      return false;
  }
}

double as_number(const Value& v) {
  if (v.kind == Value::kInt) return static_cast<double>(v.i);
  if (v.kind == Value::kFloat) return v.f;
  if (v.kind == Value::kBool) return v.b ? 1 : 0;
  fail("expected a number");
}

// ---- Lexer --------------------------------------------------------------------------------

enum class Tok { kName, kString, kInt, kFloat, kOp, kEnd };

struct Token {
  Tok type;
  std::string text;
};

// Long for a reason: a lexer, one loop over the characters with a case per token class
// (names, numbers, strings with escapes, operators); splitting it would scatter one state machine.
std::vector<Token> lex_expression(std::string_view src) {
  std::vector<Token> out;
  std::size_t i = 0;
  while (i < src.size()) {
    const char c = src[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < src.size() && (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_'))
        ++j;
      out.push_back({Tok::kName, std::string(src.substr(i, j - i))});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
      bool is_float = false;
      if (j + 1 < src.size() && src[j] == '.' &&
          std::isdigit(static_cast<unsigned char>(src[j + 1]))) {
        is_float = true;
        ++j;
        while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
      }
      out.push_back({is_float ? Tok::kFloat : Tok::kInt, std::string(src.substr(i, j - i))});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string s;
      std::size_t j = i + 1;
      while (j < src.size() && src[j] != c) {
        if (src[j] == '\\' && j + 1 < src.size()) {
          const char e = src[j + 1];
          switch (e) {
            case 'n':
              s.push_back('\n');
              break;
            case 't':
              s.push_back('\t');
              break;
            case 'r':
              s.push_back('\r');
              break;
            case 'b':
              s.push_back('\b');
              break;
            case 'f':
              s.push_back('\f');
              break;
            case 'v':
              s.push_back('\v');
              break;
            case '\'':
              s.push_back('\'');
              break;
            case '"':
              s.push_back('"');
              break;
            case '\\':
              s.push_back('\\');
              break;
            default:
              s.push_back('\\');
              s.push_back(e);
          }
          j += 2;
        } else {
          s.push_back(src[j++]);
        }
      }
      if (j >= src.size()) fail("unterminated string literal");
      out.push_back({Tok::kString, std::move(s)});
      i = j + 1;
    } else {
      static const char* const kOps[] = {"==", "!=", "<=", ">=", "//", "**", "(", ")", "[",
                                         "]",  "{",  "}",  ",",  ".",  ":",  "|", "~", "+",
                                         "-",  "*",  "/",  "%",  "<",  ">",  "="};
      bool matched = false;
      for (const char* op : kOps) {
        const std::size_t n = std::strlen(op);
        if (src.substr(i, n) == op) {
          out.push_back({Tok::kOp, op});
          i += n;
          matched = true;
          break;
        }
      }
      if (!matched) fail(std::string("unexpected character '") + c + "' in expression");
    }
  }
  out.push_back({Tok::kEnd, ""});
  return out;
}

// ---- AST ----------------------------------------------------------------------------------

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  enum Kind {
    kLiteral,
    kName,
    kAttr,
    kIndex,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kUnary,
    kBinary,
    kAnd,
    kOr,
    kTernary,
    kList,
    kDict,
    kTuple
  };
  Kind kind;
  Value literal;
  std::string name;  // variable, attribute, filter/test name, operator
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;                           // list/tuple items, call args, dict keys
  std::vector<ExprPtr> values;                          // dict values
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // call/filter keyword arguments
  bool negate = false;                                  // `is not`
};

struct AstNode {
  enum Kind { kText, kOutput, kIf, kFor, kSet, kMacro, kBreak, kContinue, kCallStmt, kBlock };
  Kind kind = kBlock;
  std::string text;
  ExprPtr expr;  // output / condition / iterable / value
  std::vector<std::pair<ExprPtr, std::vector<std::shared_ptr<const AstNode>>>>
      branches;                      // if/elif/else
  std::vector<std::string> targets;  // for/set targets
  std::string attr;                  // set ns.attr
  ExprPtr filter;                    // for ... if cond
  std::vector<std::shared_ptr<const AstNode>> body, else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters with defaults
};
using AstNodePtr = std::shared_ptr<const AstNode>;

class ExprParser {
 public:
  explicit ExprParser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  ExprPtr parse_expression() { return parse_ternary(); }
  bool at_end() const { return t_[p_].type == Tok::kEnd; }
  const Token& peek(std::size_t ahead = 0) const { return t_[std::min(p_ + ahead, t_.size() - 1)]; }
  bool is_op(std::string_view op) const { return peek().type == Tok::kOp && peek().text == op; }
  bool is_name(std::string_view n) const { return peek().type == Tok::kName && peek().text == n; }
  void expect_op(std::string_view op) {
    if (!is_op(op)) fail("expected '" + std::string(op) + "' but found '" + peek().text + "'");
    ++p_;
  }
  std::string expect_name() {
    if (peek().type != Tok::kName) fail("expected a name but found '" + peek().text + "'");
    return t_[p_++].text;
  }
  void expect_end() {
    if (!at_end()) fail("unexpected '" + peek().text + "'");
  }
  void skip() { ++p_; }

  // A primary without ternary/or/and (for `for x in <expr>` where `if` follows).
  ExprPtr parse_or_expr() { return parse_or(); }

 private:
  static ExprPtr make(Expr e) { return std::make_shared<const Expr>(std::move(e)); }

  ExprPtr parse_ternary() {
    const Nested nested;  // every parenthesis, list, call argument and subscript comes here
    ExprPtr cond_true = parse_or();
    if (is_name("if")) {
      ++p_;
      Expr e{Expr::kTernary};
      e.a = cond_true;
      e.b = parse_or();
      if (is_name("else")) {
        ++p_;
        e.c = parse_ternary();
      }
      return make(std::move(e));
    }
    return cond_true;
  }
  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      ++p_;
      Expr e{Expr::kOr};
      e.a = left;
      e.b = parse_and();
      left = make(std::move(e));
    }
    return left;
  }
  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      ++p_;
      Expr e{Expr::kAnd};
      e.a = left;
      e.b = parse_not();
      left = make(std::move(e));
    }
    return left;
  }
  ExprPtr parse_not() {
    const Nested nested;
    if (is_name("not")) {
      ++p_;
      Expr e{Expr::kUnary};
      e.name = "not";
      e.a = parse_not();
      return make(std::move(e));
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    while (true) {
      std::string op;
      if (peek().type == Tok::kOp &&
          (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">="))) {
        op = peek().text;
        ++p_;
      } else if (is_name("in")) {
        op = "in";
        ++p_;
      } else if (is_name("not") && peek(1).type == Tok::kName && peek(1).text == "in") {
        op = "not in";
        p_ += 2;
      } else {
        break;
      }
      Expr e{Expr::kBinary};
      e.name = op;
      e.a = left;
      e.b = parse_math1();
      left = make(std::move(e));
    }
    return left;
  }
  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      Expr e{Expr::kBinary};
      e.name = t_[p_++].text;
      e.a = left;
      e.b = parse_concat();
      left = make(std::move(e));
    }
    return left;
  }
  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      ++p_;
      Expr e{Expr::kBinary};
      e.name = "~";
      e.a = left;
      e.b = parse_math2();
      left = make(std::move(e));
    }
    return left;
  }
  ExprPtr parse_math2() {
    ExprPtr left = parse_unary();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      Expr e{Expr::kBinary};
      e.name = t_[p_++].text;
      e.a = left;
      e.b = parse_unary();
      left = make(std::move(e));
    }
    return left;
  }
  ExprPtr parse_unary() {
    const Nested nested;
    if (is_op("-") || is_op("+")) {
      Expr e{Expr::kUnary};
      e.name = t_[p_++].text;
      e.a = parse_unary();
      return make(std::move(e));
    }
    return parse_filters(parse_postfix(parse_primary()));
  }
  void parse_call_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().type == Tok::kName && peek(1).type == Tok::kOp && peek(1).text == "=") {
        std::string name = t_[p_].text;
        p_ += 2;
        e.kwargs.emplace_back(std::move(name), parse_expression());
      } else {
        e.items.push_back(parse_expression());
      }
      if (!is_op(",")) break;
      ++p_;
    }
    expect_op(")");
  }
  ExprPtr parse_filters(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        ++p_;
        Expr e{Expr::kFilter};
        e.name = expect_name();
        e.a = node;
        if (is_op("(")) parse_call_args(e);
        node = make(std::move(e));
      } else if (is_name("is")) {
        ++p_;
        Expr e{Expr::kTest};
        if (is_name("not")) {
          ++p_;
          e.negate = true;
        }
        // Test names may be keywords: none, true, false.
        if (peek().type != Tok::kName) fail("expected a test name");
        e.name = t_[p_++].text;
        e.a = node;
        if (is_op("(")) {
          parse_call_args(e);
        } else if (peek().type == Tok::kString || peek().type == Tok::kInt ||
                   (peek().type == Tok::kName && !is_name("and") && !is_name("or") &&
                    !is_name("else") && !is_name("if") && !is_name("in") && !is_name("not") &&
                    !is_name("is"))) {
          e.items.push_back(parse_primary());  // `is equalto 3`, `is sameas x`
        }
        node = make(std::move(e));
      } else {
        return node;
      }
    }
  }
  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        ++p_;
        Expr e{Expr::kAttr};
        e.name = expect_name();
        e.a = node;
        node = make(std::move(e));
      } else if (is_op("[")) {
        ++p_;
        ExprPtr start, stop, step;
        bool slice = false;
        if (!is_op(":")) start = parse_expression();
        if (is_op(":")) {
          slice = true;
          ++p_;
          if (!is_op(":") && !is_op("]")) stop = parse_expression();
          if (is_op(":")) {
            ++p_;
            if (!is_op("]")) step = parse_expression();
          }
        }
        expect_op("]");
        Expr e{slice ? Expr::kSlice : Expr::kIndex};
        e.a = node;
        e.b = start;
        if (slice) {
          e.items = {start, stop, step};
        }
        node = make(std::move(e));
      } else if (is_op("(")) {
        Expr e{Expr::kCall};
        e.a = node;
        parse_call_args(e);
        node = make(std::move(e));
      } else {
        return node;
      }
    }
  }
  ExprPtr parse_primary() {
    const Token& t = peek();
    if (t.type == Tok::kString) {
      ++p_;
      std::string s = t.text;
      while (peek().type == Tok::kString) s += t_[p_++].text;  // adjacent literals concatenate
      Expr e{Expr::kLiteral};
      e.literal = Value::string(std::move(s));
      return make(std::move(e));
    }
    if (t.type == Tok::kInt || t.type == Tok::kFloat) {
      ++p_;
      Expr e{Expr::kLiteral};
      e.literal =
          t.type == Tok::kInt ? Value::integer(std::stoll(t.text)) : Value::real(std::stod(t.text));
      return make(std::move(e));
    }
    if (t.type == Tok::kName) {
      ++p_;
      Expr e{Expr::kLiteral};
      if (t.text == "true" || t.text == "True") {
        e.literal = Value::boolean(true);
      } else if (t.text == "false" || t.text == "False") {
        e.literal = Value::boolean(false);
      } else if (t.text == "none" || t.text == "None") {
        e.literal = Value::none();
      } else {
        e.kind = Expr::kName;
        e.name = t.text;
      }
      return make(std::move(e));
    }
    if (is_op("(")) {
      ++p_;
      ExprPtr first = parse_expression();
      if (is_op(",")) {
        Expr e{Expr::kTuple};
        e.items.push_back(first);
        while (is_op(",")) {
          ++p_;
          if (is_op(")")) break;
          e.items.push_back(parse_expression());
        }
        expect_op(")");
        return make(std::move(e));
      }
      expect_op(")");
      return first;
    }
    if (is_op("[")) {
      ++p_;
      Expr e{Expr::kList};
      while (!is_op("]")) {
        e.items.push_back(parse_expression());
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op("]");
      return make(std::move(e));
    }
    if (is_op("{")) {
      ++p_;
      Expr e{Expr::kDict};
      while (!is_op("}")) {
        e.items.push_back(parse_expression());
        expect_op(":");
        e.values.push_back(parse_expression());
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op("}");
      return make(std::move(e));
    }
    fail("unexpected '" + t.text + "' in expression");
  }

  std::vector<Token> t_;
  std::size_t p_ = 0;
};

// ---- Template source -> nodes -------------------------------------------------------------

struct Chunk {
  enum Kind { kText, kExpr, kStmt } kind;
  std::string text;
};

// HF's preprocessing: drop one trailing newline; lstrip_blocks; trim_blocks.
std::string preprocess(std::string_view source) {
  std::string s(source);
  if (!s.empty() && s.back() == '\n') s.pop_back();
  // lstrip_blocks: spaces/tabs from a line start up to "{%", "{#" or "{-".
  std::string out;
  out.reserve(s.size());
  std::size_t line_start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '\n') {
      std::string_view line(s.data() + line_start, i - line_start);
      std::size_t k = 0;
      while (k < line.size() && (line[k] == ' ' || line[k] == '\t')) ++k;
      if (k > 0 && k + 1 < line.size() && line[k] == '{' &&
          (line[k + 1] == '%' || line[k + 1] == '#' || line[k + 1] == '-')) {
        line.remove_prefix(k);
      }
      out.append(line);
      if (i < s.size()) out.push_back('\n');
      line_start = i + 1;
    }
  }
  // trim_blocks: a newline right after "%}", "#}" or "-}".
  std::string trimmed;
  trimmed.reserve(out.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    trimmed.push_back(out[i]);
    if (out[i] == '}' && i > 0 && (out[i - 1] == '%' || out[i - 1] == '#' || out[i - 1] == '-') &&
        i + 1 < out.size() && out[i + 1] == '\n') {
      ++i;
    }
  }
  return trimmed;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// Where the tag opened by `kind` ('{', '%' or '#') whose body starts at `body` closes (the
// index of its "}}", "%}" or "#}"); quotes are skipped in expressions and statements. npos when
// it does not.
std::size_t find_tag_close(std::string_view src, std::size_t body, char kind) {
  const char close = kind == '{' ? '}' : kind;
  char quote = 0;
  for (std::size_t k = body; k + 1 < src.size(); ++k) {
    if (kind != '#' && quote) {
      if (src[k] == '\\') {
        ++k;
      } else if (src[k] == quote) {
        quote = 0;
      }
    } else if (kind != '#' && (src[k] == '\'' || src[k] == '"')) {
      quote = src[k];
    } else if (src[k] == close && src[k + 1] == '}') {
      return k;
    }
  }
  return std::string_view::npos;
}

// Text, expression and statement chunks ({# comments #} dropped), with the '-' whitespace
// control applied.
std::vector<Chunk> split_chunks(std::string_view src) {
  std::vector<Chunk> chunks;
  std::size_t i = 0;
  bool strip_next = false;
  std::string text;
  auto flush_text = [&](bool strip_right) {
    if (strip_right) {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    }
    if (!text.empty()) chunks.push_back({Chunk::kText, std::move(text)});
    text.clear();
  };
  while (i < src.size()) {
    if (src[i] == '{' && i + 1 < src.size() &&
        (src[i + 1] == '{' || src[i + 1] == '%' || src[i + 1] == '#')) {
      const char kind = src[i + 1];
      std::size_t body = i + 2;
      bool strip_left = false;
      if (body < src.size() && src[body] == '-') {
        strip_left = true;
        ++body;
      } else if (body < src.size() && src[body] == '+') {
        ++body;
      }
      const std::size_t end = find_tag_close(src, body, kind);
      if (end == std::string_view::npos) fail("unclosed tag");
      std::size_t body_end = end;
      bool strip_right = false;
      if (body_end > body && src[body_end - 1] == '-') {
        strip_right = true;
        --body_end;
      } else if (body_end > body && src[body_end - 1] == '+') {
        --body_end;
      }
      flush_text(strip_left);
      if (kind != '#') {
        chunks.push_back({kind == '{' ? Chunk::kExpr : Chunk::kStmt,
                          std::string(src.substr(body, body_end - body))});
      }
      i = end + 2;
      strip_next = strip_right;
      if (strip_next) {
        while (i < src.size() && is_space(src[i])) ++i;
      }
      continue;
    }
    text.push_back(src[i++]);
  }
  flush_text(false);
  return chunks;
}

class TemplateParser {
 public:
  explicit TemplateParser(std::vector<Chunk> chunks) : chunks_(std::move(chunks)) {}

  std::vector<AstNodePtr> parse_all() {
    std::string stop;
    auto body = parse_block({}, stop);
    if (!stop.empty()) fail("unexpected {% " + stop + " %}");
    return body;
  }

 private:
  // Parses nodes until a statement whose first word is in `stops`; returns it in `stop`
  // (with the statement's parser positioned after the word).
  std::vector<AstNodePtr> parse_block(const std::vector<std::string>& stops, std::string& stop) {
    const Nested nested;
    std::vector<AstNodePtr> nodes;
    stop.clear();
    while (pos_ < chunks_.size()) {
      const Chunk& c = chunks_[pos_++];
      if (c.kind == Chunk::kText) {
        AstNode n;
        n.kind = AstNode::kText;
        n.text = c.text;
        nodes.push_back(std::make_shared<const AstNode>(std::move(n)));
        continue;
      }
      if (c.kind == Chunk::kExpr) {
        ExprParser p(lex_expression(c.text));
        AstNode n;
        n.kind = AstNode::kOutput;
        n.expr = p.parse_expression();
        p.expect_end();
        nodes.push_back(std::make_shared<const AstNode>(std::move(n)));
        continue;
      }
      stmt_ = std::make_unique<ExprParser>(lex_expression(c.text));
      const std::string word = stmt_->expect_name();
      if (std::find(stops.begin(), stops.end(), word) != stops.end()) {
        stop = word;
        return nodes;
      }
      nodes.push_back(parse_statement(word));
    }
    if (!stops.empty()) fail("missing {% " + stops.back() + " %}");
    return nodes;
  }

  // Long for a reason: one branch per statement keyword (if, for, set, macro, break, continue;
  // the unsupported ones refused by name), each parsing its own header with ExprParser.
  AstNodePtr parse_statement(const std::string& word) {
    ExprParser& p = *stmt_;
    AstNode n;
    if (word == "if") {
      n.kind = AstNode::kIf;
      ExprPtr cond = p.parse_expression();
      p.expect_end();
      while (true) {
        std::string stop;
        auto body = parse_block({"elif", "else", "endif"}, stop);
        n.branches.emplace_back(cond, std::move(body));
        if (stop == "endif") break;
        if (stop == "else") {
          stmt_->expect_end();
          auto else_body = parse_block({"endif"}, stop);
          n.branches.emplace_back(nullptr, std::move(else_body));
          break;
        }
        cond = stmt_->parse_expression();
        stmt_->expect_end();
      }
    } else if (word == "for") {
      n.kind = AstNode::kFor;
      n.targets.push_back(p.expect_name());
      while (p.is_op(",")) {
        p.skip();
        n.targets.push_back(p.expect_name());
      }
      if (!p.is_name("in")) fail("expected 'in' in for");
      p.skip();
      n.expr = p.parse_or_expr();
      if (p.is_name("if")) {
        p.skip();
        n.filter = p.parse_expression();
      }
      if (p.is_name("recursive")) fail("recursive loops are not supported");
      p.expect_end();
      std::string stop;
      n.body = parse_block({"else", "endfor"}, stop);
      if (stop == "else") {
        stmt_->expect_end();
        n.else_body = parse_block({"endfor"}, stop);
      }
    } else if (word == "set") {
      n.kind = AstNode::kSet;
      n.targets.push_back(p.expect_name());
      if (p.is_op(".")) {
        p.skip();
        n.attr = p.expect_name();
      }
      while (p.is_op(",")) {
        p.skip();
        n.targets.push_back(p.expect_name());
      }
      if (p.is_op("=")) {
        p.skip();
        n.expr = p.parse_expression();
        if (p.is_op(",")) {
          fail("tuple assignment values are not supported");
        }
        p.expect_end();
      } else {
        p.expect_end();
        std::string stop;
        n.body = parse_block({"endset"}, stop);
      }
    } else if (word == "macro") {
      n.kind = AstNode::kMacro;
      n.text = p.expect_name();
      p.expect_op("(");
      while (!p.is_op(")")) {
        std::string param = p.expect_name();
        ExprPtr def;
        if (p.is_op("=")) {
          p.skip();
          def = p.parse_expression();
        }
        n.params.emplace_back(std::move(param), def);
        if (!p.is_op(",")) break;
        p.skip();
      }
      p.expect_op(")");
      p.expect_end();
      std::string stop;
      n.body = parse_block({"endmacro"}, stop);
    } else if (word == "break" || word == "continue") {
      n.kind = word == "break" ? AstNode::kBreak : AstNode::kContinue;
      p.expect_end();
    } else if (word == "filter" || word == "call" || word == "include" || word == "import" ||
               word == "extends" || word == "block" || word == "raw" || word == "with") {
      fail("{% " + word + " %} is not supported");
    } else {
      fail("unknown statement {% " + word + " %}");
    }
    return std::make_shared<const AstNode>(std::move(n));
  }

  std::vector<Chunk> chunks_;
  std::size_t pos_ = 0;
  std::unique_ptr<ExprParser> stmt_;
};

// ---- Interpreter --------------------------------------------------------------------------

enum class Flow { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  explicit Interpreter(std::string& out) : out_(&out) { scopes_.emplace_back(); }

  void set_global(const std::string& name, Value v) { scopes_.front()[name] = std::move(v); }
  void set_step_budget(std::uint64_t steps) { max_steps_ = steps; }

  Flow run(const std::vector<AstNodePtr>& nodes) {
    for (const AstNodePtr& n : nodes) {
      const Flow f = exec(*n);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

 private:
  // Variables of one scope: few (a loop's target and `loop`, a macro's parameters, the
  // globals), so a flat list searched from the end beats a hash map that allocates per entry.
  struct Scope {
    std::vector<std::pair<std::string, Value>> vars;
    const std::pair<std::string, Value>* find(const std::string& name) const {
      for (auto it = vars.rbegin(); it != vars.rend(); ++it) {
        if (it->first == name) return &*it;
      }
      return nullptr;
    }
    std::pair<std::string, Value>* find(const std::string& name) {
      return const_cast<std::pair<std::string, Value>*>(
          static_cast<const Scope*>(this)->find(name));
    }
    Value& operator[](const std::string& name) {
      if (auto* v = find(name)) return v->second;
      return vars.emplace_back(name, Value()).second;
    }
  };

  const Value* lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      if (const auto* f = it->find(name)) return &f->second;
    }
    return nullptr;
  }
  Value* lookup_mut(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      if (auto* f = it->find(name)) return &f->second;
    }
    return nullptr;
  }

  // Whether `v` holds the list or dict at `target`: storing it there would make a cycle (values
  // share their lists and dicts), which would never be freed and would print forever. Each
  // value visited is a step of the render's budget.
  bool reaches(const Value& v, const void* target, int depth) {
    step();
    if (depth > kMaxNesting)
      fail("nested more than " + std::to_string(kMaxNesting) + " levels deep");
    if (v.kind == Value::kList) {
      if (v.list.get() == target) return true;
      for (const Value& item : *v.list)
        if (reaches(item, target, depth + 1)) return true;
    } else if (v.kind == Value::kDict) {
      if (v.dict.get() == target) return true;
      for (const auto& [k, item] : v.dict->items)
        if (reaches(item, target, depth + 1)) return true;
    }
    return false;
  }

  // One unit of the render's work; a template that loops past the budget is refused.
  void step(std::uint64_t units = 1) {
    steps_ += units;
    if (steps_ > max_steps_)
      fail("the template takes more than " + std::to_string(max_steps_) + " steps");
  }

  Flow exec(const AstNode& n) {
    const Nested nested;
    step();
    switch (n.kind) {
      case AstNode::kText:
        check_string_size(out_->size() + n.text.size());
        *out_ += n.text;
        return Flow::kNormal;
      case AstNode::kOutput: {
        const Value v = eval(*n.expr);
        if (v.kind == Value::kString) {
          check_string_size(out_->size() + v.s.size());
          out_->append(v.s.view());
        } else {
          *out_ += to_string(v);
          check_string_size(out_->size());
        }
        return Flow::kNormal;
      }
      case AstNode::kIf:
        for (const auto& [cond, body] : n.branches) {
          if (!cond || truthy(eval(*cond))) return run(body);
        }
        return Flow::kNormal;
      case AstNode::kFor:
        return exec_for(n);
      case AstNode::kSet: {
        Value v;
        if (n.expr) {
          v = eval(*n.expr);
        } else {
          std::string captured;
          std::string* saved = out_;
          out_ = &captured;
          run(n.body);
          out_ = saved;
          v = Value::string(std::move(captured));
        }
        if (!n.attr.empty()) {
          Value* ns = lookup_mut(n.targets[0]);
          if (!ns || ns->kind != Value::kDict)
            fail("cannot set attribute of '" + n.targets[0] + "'");
          if (reaches(v, ns->dict.get(), 0)) fail("cannot store a namespace inside itself");
          ns->dict->set(n.attr, std::move(v));
        } else if (n.targets.size() == 1) {
          scopes_.back()[n.targets[0]] = std::move(v);
        } else {
          if (v.kind != Value::kList || v.list->size() != n.targets.size())
            fail("cannot unpack value in set");
          for (std::size_t k = 0; k < n.targets.size(); ++k)
            scopes_.back()[n.targets[k]] = (*v.list)[k];
        }
        return Flow::kNormal;
      }
      case AstNode::kMacro: {
        Value fn;
        fn.kind = Value::kFunc;
        fn.fn = std::make_shared<Callable>();
        const AstNode* macro = &n;
        fn.fn->call = [this, macro](Args& args) {
          Scope scope;
          for (std::size_t k = 0; k < macro->params.size(); ++k) {
            const auto& [name, def] = macro->params[k];
            const Value* given = args.get(k, name);
            scope[name] = given ? *given : def ? eval(*def) : Value();
          }
          std::string captured;
          std::string* saved = out_;
          out_ = &captured;
          scopes_.push_back(std::move(scope));
          run(macro->body);
          scopes_.pop_back();
          out_ = saved;
          return Value::string(std::move(captured));
        };
        scopes_.back()[n.text] = std::move(fn);
        return Flow::kNormal;
      }
      case AstNode::kBreak:
        return Flow::kBreak;
      case AstNode::kContinue:
        return Flow::kContinue;
      default:
        return run(n.body);
    }
  }

  Flow exec_for(const AstNode& n) {
    const Value iterable = eval(*n.expr);
    std::vector<Value> items;
    if (iterable.kind == Value::kList) {
      items = *iterable.list;
    } else if (iterable.kind == Value::kDict) {
      for (const auto& [k, v] : iterable.dict->items) items.push_back(Value::string(k));
    } else if (iterable.kind == Value::kString) {
      if (iterable.s.size() > kMaxListItems)
        fail("iterating a string of more than " + std::to_string(kMaxListItems) + " bytes");
      for (const char ch : iterable.s.view()) items.push_back(Value::string(std::string(1, ch)));
    } else if (iterable.kind == Value::kUndefined || iterable.kind == Value::kNone) {
      // Iterating nothing.
    } else {
      fail("cannot iterate over this value");
    }
    auto bind = [&](Scope& scope, const Value& item) {
      if (n.targets.size() == 1) {
        scope[n.targets[0]] = item;
        return;
      }
      if (item.kind != Value::kList || item.list->size() != n.targets.size())
        fail("cannot unpack loop item");
      for (std::size_t k = 0; k < n.targets.size(); ++k) scope[n.targets[k]] = (*item.list)[k];
    };
    if (n.filter) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        scopes_.emplace_back();
        bind(scopes_.back(), item);
        const bool keep = truthy(eval(*n.filter));
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items.swap(kept);
    }
    if (items.empty()) return run(n.else_body);
    const std::size_t count = items.size();
    for (std::size_t k = 0; k < count; ++k) {
      step(kLoopTurnSteps);
      Scope scope;
      bind(scope, items[k]);
      Value loop = Value::new_dict();
      auto& d = loop.dict->items;
      d.reserve(9);
      d.emplace_back("index", Value::integer(static_cast<std::int64_t>(k + 1)));
      d.emplace_back("index0", Value::integer(static_cast<std::int64_t>(k)));
      d.emplace_back("revindex", Value::integer(static_cast<std::int64_t>(count - k)));
      d.emplace_back("revindex0", Value::integer(static_cast<std::int64_t>(count - k - 1)));
      d.emplace_back("first", Value::boolean(k == 0));
      d.emplace_back("last", Value::boolean(k + 1 == count));
      d.emplace_back("length", Value::integer(static_cast<std::int64_t>(count)));
      d.emplace_back("previtem", k > 0 ? items[k - 1] : Value());
      d.emplace_back("nextitem", k + 1 < count ? items[k + 1] : Value());
      scope["loop"] = std::move(loop);
      scopes_.push_back(std::move(scope));
      const Flow f = run(n.body);
      scopes_.pop_back();
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Args eval_args(const Expr& e) {
    Args args;
    for (const ExprPtr& a : e.items) args.positional.push_back(eval(*a));
    for (const auto& [k, v] : e.kwargs) args.named.emplace_back(k, eval(*v));
    return args;
  }

  Value eval(const Expr& e) {
    const Nested nested;
    step();
    switch (e.kind) {
      case Expr::kLiteral:
        return e.literal;
      case Expr::kName: {
        const Value* v = lookup(e.name);
        return v ? *v : Value();
      }
      case Expr::kAttr: {
        const Value obj = eval(*e.a);
        return attribute(obj, e.name);
      }
      case Expr::kIndex: {
        const Value obj = eval(*e.a);
        const Value key = eval(*e.b);
        return index(obj, key);
      }
      case Expr::kSlice:
        return slice(eval(*e.a), e.items);
      case Expr::kCall:
        return call(e);
      case Expr::kFilter: {
        Value v = eval(*e.a);
        Args args = eval_args(e);
        return apply_filter(e.name, v, args);
      }
      case Expr::kTest: {
        Value v = (e.a->kind == Expr::kName) ? lookup_or_undefined(e.a->name) : eval(*e.a);
        Args args = eval_args(e);
        const bool r = apply_test(e.name, v, args);
        return Value::boolean(e.negate ? !r : r);
      }
      case Expr::kUnary: {
        Value v = eval(*e.a);
        if (e.name == "not") return Value::boolean(!truthy(v));
        if (e.name == "-") {
          if (v.kind == Value::kInt) return Value::integer(sub_int(0, v.i));
          return Value::real(-as_number(v));
        }
        return v;
      }
      case Expr::kAnd: {
        Value a = eval(*e.a);
        if (!truthy(a)) return a;
        return eval(*e.b);
      }
      case Expr::kOr: {
        Value a = eval(*e.a);
        if (truthy(a)) return a;
        return eval(*e.b);
      }
      case Expr::kTernary:
        if (truthy(eval(*e.b))) return eval(*e.a);
        return e.c ? eval(*e.c) : Value();
      case Expr::kBinary:
        return binary(e.name, eval(*e.a), eval(*e.b));
      case Expr::kList:
      case Expr::kTuple: {
        Value v = Value::new_list();
        for (const ExprPtr& item : e.items) v.list->push_back(eval(*item));
        return v;
      }
      case Expr::kDict: {
        Value v = Value::new_dict();
        for (std::size_t k = 0; k < e.items.size(); ++k)
          v.dict->set(to_string(eval(*e.items[k])), eval(*e.values[k]));
        return v;
      }
    }
    return Value();
  }

  Value lookup_or_undefined(const std::string& name) {
    const Value* v = lookup(name);
    return v ? *v : Value();
  }

  Value attribute(const Value& obj, const std::string& name) {
    if (obj.kind == Value::kDict) {
      if (const Value* v = obj.dict->find(name)) return *v;
      if (name == "items" || name == "keys" || name == "values" || name == "get")
        return method_value(obj, name);
      return Value();
    }
    static const char* const kStringMethods[] = {
        "strip",      "lstrip",   "rstrip", "upper",   "lower", "title", "capitalize",
        "startswith", "endswith", "split",  "replace", "find",  "format"};
    if (obj.kind == Value::kString) {
      for (const char* m : kStringMethods) {
        if (name == m) return method_value(obj, name);
      }
    }
    if (obj.kind == Value::kList && name == "append") return method_value(obj, name);
    return Value();
  }

  Value method_value(const Value& obj, const std::string& name) {
    Value m;
    m.kind = Value::kFunc;
    m.fn = std::make_shared<Callable>();
    m.fn->call = [this, self = obj, name](Args& args) { return call_method(self, name, args); };
    return m;
  }

  static Str strip_chars(const Str& str, const Value* chars, bool left, bool right) {
    const std::string_view s = str.view();
    const std::string_view set =
        chars && chars->kind == Value::kString ? chars->s.view() : " \t\n\r\f\v";
    std::size_t b = 0;
    std::size_t e = s.size();
    if (left) {
      while (b < e && set.find(s[b]) != std::string_view::npos) ++b;
    }
    if (right) {
      while (e > b && set.find(s[e - 1]) != std::string_view::npos) --e;
    }
    return str.sub(b, e - b);
  }

  // Long for a reason: a dispatch table of the methods templates call, grouped by receiver kind
  // (string, list, dict), each branch a few lines.
  Value call_method(const Value& self, std::string_view name, Args& args) {
    if (self.kind == Value::kString) {
      const std::string_view s = self.s.view();
      if (name == "strip")
        return Value::string(strip_chars(self.s, args.get(0, "chars"), true, true));
      if (name == "lstrip")
        return Value::string(strip_chars(self.s, args.get(0, "chars"), true, false));
      if (name == "rstrip")
        return Value::string(strip_chars(self.s, args.get(0, "chars"), false, true));
      if (name == "upper" || name == "lower") {
        std::string r(s);
        for (char& c : r)
          c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                                : std::tolower(static_cast<unsigned char>(c)));
        return Value::string(std::move(r));
      }
      if (name == "title" || name == "capitalize") return apply_text_filter(name, self);
      if (name == "startswith" || name == "endswith") {
        const Value* p = args.get(0, "prefix");
        if (!p || p->kind != Value::kString) fail(std::string(name) + " needs a string");
        const std::string_view x = p->s.view();
        const bool r = name == "startswith"
                           ? s.substr(0, x.size()) == x
                           : s.size() >= x.size() && s.substr(s.size() - x.size()) == x;
        return Value::boolean(r);
      }
      if (name == "split") {
        const Value* sep = args.get(0, "sep");
        const Value* max = args.get(1, "maxsplit");
        std::int64_t maxsplit = max && max->kind == Value::kInt ? max->i : -1;
        Value out = Value::new_list();
        if (!sep || sep->kind != Value::kString) {
          std::size_t i = 0;
          while (i < s.size()) {
            while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
            if (i >= s.size()) break;
            std::size_t j = i;
            if (maxsplit == 0) {
              j = s.size();
              while (j > i && std::isspace(static_cast<unsigned char>(s[j - 1]))) --j;
            } else {
              while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
            }
            out.list->push_back(Value::string(self.s.sub(i, j - i)));
            if (maxsplit > 0) --maxsplit;
            i = j;
          }
          return out;
        }
        const std::string_view separator = sep->s.view();
        if (separator.empty()) fail("empty separator");
        std::size_t start = 0;
        while (true) {
          const std::size_t at = maxsplit == 0 ? std::string_view::npos : s.find(separator, start);
          if (at == std::string_view::npos) {
            out.list->push_back(Value::string(self.s.sub(start, s.size() - start)));
            break;
          }
          out.list->push_back(Value::string(self.s.sub(start, at - start)));
          start = at + separator.size();
          if (maxsplit > 0) --maxsplit;
        }
        return out;
      }
      if (name == "replace") {
        const Value* a = args.get(0, "old");
        const Value* b = args.get(1, "new");
        if (!a || !b) fail("replace needs two arguments");
        return Value::string(replace_all(std::string(s), to_string(*a), to_string(*b)));
      }
      if (name == "find") {
        const Value* a = args.get(0, "sub");
        const std::size_t at = a ? s.find(to_string(*a)) : std::string_view::npos;
        return Value::integer(at == std::string_view::npos ? -1 : static_cast<std::int64_t>(at));
      }
      if (name == "format") fail("str.format is not supported");
    }
    if (self.kind == Value::kDict) {
      if (name == "items") {
        Value out = Value::new_list();
        for (const auto& [k, v] : self.dict->items) {
          Value pair = Value::new_list();
          pair.list->push_back(Value::string(k));
          pair.list->push_back(v);
          out.list->push_back(std::move(pair));
        }
        return out;
      }
      if (name == "keys" || name == "values") {
        Value out = Value::new_list();
        for (const auto& [k, v] : self.dict->items)
          out.list->push_back(name == "keys" ? Value::string(k) : v);
        return out;
      }
      if (name == "get") {
        const Value* key = args.get(0, "key");
        const Value* def = args.get(1, "default");
        if (key) {
          if (const Value* v = self.dict->find(to_string(*key))) return *v;
        }
        return def ? *def : Value::none();
      }
    }
    if (self.kind == Value::kList && name == "append") {
      if (args.positional.empty()) fail("append needs an argument");
      if (self.list->size() >= kMaxListItems)
        fail("a list of more than " + std::to_string(kMaxListItems) + " items");
      if (reaches(args.positional[0], self.list.get(), 0)) fail("cannot append a list into itself");
      self.list->push_back(args.positional[0]);
      return Value::none();
    }
    fail("unknown method '" + std::string(name) + "'");
  }

  // One pass into a new string: replacing in place moves the tail on every hit (quadratic).
  static std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    if (from.empty()) return s;
    std::string out;
    std::size_t pos = 0;
    for (std::size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
      out.append(s, pos, hit - pos);
      out += to;
      check_string_size(out.size());
    }
    out.append(s, pos);
    check_string_size(out.size());
    return out;
  }

  static Value index(const Value& obj, const Value& key) {
    if (obj.kind == Value::kList || obj.kind == Value::kString) {
      if (key.kind != Value::kInt) {
        if (obj.kind == Value::kList) return Value();
        fail("string index must be an integer");
      }
      const std::int64_t n = obj.kind == Value::kList ? static_cast<std::int64_t>(obj.list->size())
                                                      : static_cast<std::int64_t>(obj.s.size());
      std::int64_t k = key.i < 0 ? key.i + n : key.i;
      if (k < 0 || k >= n) return Value();
      if (obj.kind == Value::kList) return (*obj.list)[static_cast<std::size_t>(k)];
      return Value::string(obj.s.sub(static_cast<std::size_t>(k), 1));
    }
    if (obj.kind == Value::kDict) {
      if (const Value* v = obj.dict->find(to_string(key))) return *v;
      return Value();
    }
    return Value();
  }

  Value slice(const Value& obj, const std::vector<ExprPtr>& parts) {
    auto num = [&](const ExprPtr& p, bool& given) -> std::int64_t {
      given = false;
      if (!p) return 0;
      const Value v = eval(*p);
      if (v.kind == Value::kNone || v.kind == Value::kUndefined) return 0;
      if (v.kind != Value::kInt) fail("slice bounds must be integers");
      given = true;
      return v.i;
    };
    bool has_start, has_stop, has_step;
    std::int64_t start = num(parts[0], has_start);
    std::int64_t stop = num(parts[1], has_stop);
    std::int64_t step = num(parts[2], has_step);
    if (!has_step) step = 1;
    if (step == 0) fail("slice step cannot be zero");
    const std::int64_t n = obj.kind == Value::kList ? static_cast<std::int64_t>(obj.list->size())
                           : obj.kind == Value::kString ? static_cast<std::int64_t>(obj.s.size())
                                                        : -1;
    if (n < 0) fail("cannot slice this value");
    auto clamp = [&](std::int64_t v, bool given, std::int64_t def_pos, std::int64_t def_neg) {
      if (!given) return step > 0 ? def_pos : def_neg;
      if (v < 0) v += n;
      if (step > 0) return std::clamp<std::int64_t>(v, 0, n);
      return std::clamp<std::int64_t>(v, -1, n - 1);
    };
    start = clamp(start, has_start, 0, n - 1);
    stop = clamp(stop, has_stop, n, -1);
    std::vector<std::int64_t> picks;
    for (std::int64_t k = start; step > 0 ? k < stop : k > stop; k += step) picks.push_back(k);
    if (obj.kind == Value::kList) {
      Value out = Value::new_list();
      for (const std::int64_t k : picks)
        out.list->push_back((*obj.list)[static_cast<std::size_t>(k)]);
      return out;
    }
    std::string out;
    for (const std::int64_t k : picks) out.push_back(obj.s.view()[static_cast<std::size_t>(k)]);
    return Value::string(std::move(out));
  }

  Value call(const Expr& e) {
    if (e.a->kind == Expr::kName) {
      const std::string& name = e.a->name;
      const Value* fn = lookup(name);
      if (!fn || fn->kind != Value::kFunc) {
        Args args = eval_args(e);
        return call_global(name, args);
      }
    }
    const Value fn = eval(*e.a);
    if (fn.kind != Value::kFunc || !fn.fn) fail("called value is not a function");
    Args args = eval_args(e);
    return fn.fn->call(args);
  }

  Value call_global(std::string_view name, Args& args) {
    if (name == "raise_exception") {
      fail("template raised: " +
           (args.positional.empty() ? std::string() : to_string(args.positional[0])));
    }
    if (name == "namespace") {
      Value ns = Value::new_dict();
      ns.is_namespace = true;
      for (auto& [k, v] : args.named) ns.dict->set(k, v);
      return ns;
    }
    if (name == "range") {
      std::int64_t start = 0, stop = 0, step = 1;
      auto int_arg = [](const Value& v) {
        return v.kind == Value::kInt ? v.i : to_int64(as_number(v));
      };
      if (args.positional.size() == 1) {
        stop = int_arg(args.positional[0]);
      } else if (args.positional.size() >= 2) {
        start = int_arg(args.positional[0]);
        stop = int_arg(args.positional[1]);
        if (args.positional.size() > 2) step = int_arg(args.positional[2]);
      }
      if (step == 0) fail("range step cannot be zero");
      // The count in 128 bits: stop - start of two int64s does not fit in 64.
      const __int128 span = static_cast<__int128>(stop) - start;
      const __int128 count = step > 0 ? (span > 0 ? (span + step - 1) / step : 0)
                                      : (span < 0 ? (span + step + 1) / step : 0);
      if (count > static_cast<__int128>(kMaxListItems))
        fail("range of more than " + std::to_string(kMaxListItems) + " items");
      this->step(static_cast<std::uint64_t>(count));
      Value out = Value::new_list();
      for (__int128 k = 0; k < count; ++k)
        out.list->push_back(Value::integer(static_cast<std::int64_t>(start + k * step)));
      return out;
    }
    fail("unknown function '" + std::string(name) + "'");
  }

  static Value apply_text_filter(std::string_view name, const Value& v) {
    std::string s = to_string(v);
    if (name == "upper") {
      for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    } else if (name == "lower") {
      for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (name == "capitalize") {
      for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    } else if (name == "title") {
      bool start = true;
      for (char& c : s) {
        const bool alpha = std::isalpha(static_cast<unsigned char>(c));
        c = static_cast<char>(start && alpha ? std::toupper(static_cast<unsigned char>(c))
                                             : std::tolower(static_cast<unsigned char>(c)));
        start = !alpha;
      }
    }
    return Value::string(std::move(s));
  }

  // Long for a reason: one branch per supported filter, a dispatch table written as code (each
  // branch a few lines); a filter that grows gets a helper.
  Value apply_filter(std::string_view name, const Value& v, Args& args) {
    if (name == "trim") {
      return Value::string(strip_chars(v.kind == Value::kString ? v.s : Str(to_string(v)),
                                       args.get(0, "chars"), true, true));
    }
    if (name == "tojson") {
      const Value* indent = args.get(0, "indent");
      std::string out;
      const std::int64_t width = indent && indent->kind == Value::kInt ? indent->i : 0;
      if (width < 0 || width > 64) fail("tojson indent must be between 0 and 64");
      to_json(out, v, static_cast<int>(width), 0);
      return Value::string(std::move(out));
    }
    if (name == "length" || name == "count") {
      if (v.kind == Value::kList) return Value::integer(static_cast<std::int64_t>(v.list->size()));
      if (v.kind == Value::kDict)
        return Value::integer(static_cast<std::int64_t>(v.dict->items.size()));
      if (v.kind == Value::kString) {
        std::int64_t n = 0;
        for (const char c : v.s.view()) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
        return Value::integer(n);
      }
      fail("length of a value without one");
    }
    if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
      return apply_text_filter(name, v);
    }
    if (name == "string") return Value::string(to_string(v));
    if (name == "safe" || name == "e" || name == "escape") return v;
    if (name == "first" || name == "last") {
      if (v.kind == Value::kList) {
        if (v.list->empty()) return Value();
        return name == "first" ? v.list->front() : v.list->back();
      }
      if (v.kind == Value::kString) {
        if (v.s.empty()) return Value();
        return Value::string(v.s.sub(name == "first" ? 0 : v.s.size() - 1, 1));
      }
      fail(std::string(name) + " of a value that is not a sequence");
    }
    if (name == "join") {
      const Value* sep = args.get(0, "d");
      const std::string d = sep ? to_string(*sep) : std::string();
      if (v.kind != Value::kList) fail("join of a value that is not a list");
      std::string out;
      for (std::size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += d;
        out += to_string((*v.list)[k]);
        check_string_size(out.size());
      }
      return Value::string(std::move(out));
    }
    if (name == "default" || name == "d") {
      const Value* def = args.get(0, "default_value");
      const Value* boolean = args.get(1, "boolean");
      const bool use = boolean && truthy(*boolean) ? !truthy(v) : v.kind == Value::kUndefined;
      if (use) return def ? *def : Value::string("");
      return v;
    }
    if (name == "items") return call_method(v, "items", args);
    if (name == "list") {
      if (v.kind == Value::kList) return v;
      Value out = Value::new_list();
      if (v.kind == Value::kString) {
        for (const char c : v.s.view()) out.list->push_back(Value::string(std::string(1, c)));
      } else if (v.kind == Value::kDict) {
        for (const auto& [k, val] : v.dict->items) out.list->push_back(Value::string(k));
      }
      return out;
    }
    if (name == "reverse") {
      if (v.kind == Value::kList) {
        Value out = Value::new_list();
        out.list->assign(v.list->rbegin(), v.list->rend());
        return out;
      }
      if (v.kind == Value::kString)
        return Value::string(std::string(v.s.view().rbegin(), v.s.view().rend()));
      fail("reverse of a value that is not a sequence");
    }
    if (name == "int") {
      if (v.kind == Value::kString)
        return Value::integer(std::strtoll(v.s.str().c_str(), nullptr, 10));
      return Value::integer(
          to_int64(v.kind == Value::kUndefined || v.kind == Value::kNone ? 0 : as_number(v)));
    }
    if (name == "float")
      return Value::real(v.kind == Value::kString ? std::strtod(v.s.str().c_str(), nullptr)
                                                  : as_number(v));
    if (name == "abs")
      return v.kind == Value::kInt ? Value::integer(v.i < 0 ? sub_int(0, v.i) : v.i)
                                   : Value::real(std::fabs(as_number(v)));
    if (name == "replace") {
      const Value* a = args.get(0, "old");
      const Value* b = args.get(1, "new");
      if (!a || !b) fail("replace needs two arguments");
      return Value::string(replace_all(to_string(v), to_string(*a), to_string(*b)));
    }
    if (name == "indent") {
      const Value* width = args.get(0, "width");
      const Value* first = args.get(1, "first");
      const std::string pad(
          width && width->kind == Value::kInt ? static_cast<std::size_t>(width->i) : 4, ' ');
      const std::string s = to_string(v);
      std::string out;
      bool line_start = first && truthy(*first);
      for (std::size_t k = 0; k < s.size(); ++k) {
        if (line_start && s[k] != '\n') out += pad;
        line_start = false;
        out.push_back(s[k]);
        if (s[k] == '\n') line_start = true;
      }
      return Value::string(std::move(out));
    }
    if (name == "selectattr" || name == "rejectattr") {
      if (v.kind != Value::kList) fail(std::string(name) + " of a value that is not a list");
      const Value* attr = args.get(0, "attr");
      if (!attr) fail(std::string(name) + " needs an attribute");
      Value out = Value::new_list();
      for (const Value& item : *v.list) {
        const Value field = attribute(item, to_string(*attr));
        bool r;
        if (args.positional.size() >= 2) {
          Args test_args;
          for (std::size_t k = 2; k < args.positional.size(); ++k)
            test_args.positional.push_back(args.positional[k]);
          r = apply_test(to_string(args.positional[1]), field, test_args);
        } else {
          r = truthy(field);
        }
        if (r == (name == "selectattr")) out.list->push_back(item);
      }
      return out;
    }
    if (name == "map") {
      if (v.kind != Value::kList) fail("map of a value that is not a list");
      const Value* attr = args.get(99, "attribute");
      Value out = Value::new_list();
      for (const Value& item : *v.list) {
        if (attr) {
          out.list->push_back(attribute(item, to_string(*attr)));
        } else if (!args.positional.empty()) {
          Args none;
          out.list->push_back(apply_filter(to_string(args.positional[0]), item, none));
        }
      }
      return out;
    }
    if (name == "unique") {
      if (v.kind != Value::kList) fail("unique of a value that is not a list");
      Value out = Value::new_list();
      for (const Value& item : *v.list) {
        bool seen = false;
        for (const Value& o : *out.list) seen = seen || equal(o, item);
        if (!seen) out.list->push_back(item);
      }
      return out;
    }
    fail("unknown filter '" + std::string(name) + "'");
  }

  static bool apply_test(std::string_view name, const Value& v, Args& args) {
    if (name == "defined") return v.kind != Value::kUndefined;
    if (name == "undefined") return v.kind == Value::kUndefined;
    if (name == "none") return v.kind == Value::kNone;
    if (name == "string") return v.kind == Value::kString;
    if (name == "number") return v.kind == Value::kInt || v.kind == Value::kFloat;
    if (name == "integer") return v.kind == Value::kInt;
    if (name == "float") return v.kind == Value::kFloat;
    if (name == "boolean") return v.kind == Value::kBool;
    if (name == "true") return v.kind == Value::kBool && v.b;
    if (name == "false") return v.kind == Value::kBool && !v.b;
    if (name == "mapping") return v.kind == Value::kDict;
    if (name == "iterable")
      return v.kind == Value::kList || v.kind == Value::kDict || v.kind == Value::kString;
    if (name == "sequence") return v.kind == Value::kList || v.kind == Value::kString;
    if (name == "callable") return v.kind == Value::kFunc;
    if (name == "odd" || name == "even") {
      if (v.kind != Value::kInt) fail(std::string(name) + " of a value that is not an integer");
      return (v.i % 2 != 0) == (name == "odd");
    }
    if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") {
      const Value* o = args.get(0, "other");
      return o && equal(v, *o);
    }
    if (name == "lower" || name == "upper") {
      if (v.kind != Value::kString) return false;
      for (const char c : v.s.view()) {
        if (name == "lower" ? std::isupper(static_cast<unsigned char>(c))
                            : std::islower(static_cast<unsigned char>(c))) {
          return false;
        }
      }
      return true;
    }
    fail("unknown test '" + std::string(name) + "'");
  }

  static bool contains(const Value& container, const Value& item) {
    if (container.kind == Value::kString)
      return container.s.view().find(to_string(item)) != std::string_view::npos;
    if (container.kind == Value::kList) {
      for (const Value& v : *container.list) {
        if (equal(v, item)) return true;
      }
      return false;
    }
    if (container.kind == Value::kDict) return container.dict->find(to_string(item)) != nullptr;
    if (container.kind == Value::kUndefined || container.kind == Value::kNone)
      fail("'in' on an undefined value");
    return false;
  }

  static Value binary(std::string_view op, const Value& a, const Value& b) {
    if (op == "==") return Value::boolean(equal(a, b));
    if (op == "!=") return Value::boolean(!equal(a, b));
    if (op == "in") return Value::boolean(contains(b, a));
    if (op == "not in") return Value::boolean(!contains(b, a));
    if (op == "~") {
      std::string out = to_string(a);
      const std::string right = to_string(b);
      check_string_size(out.size() + right.size());
      return Value::string(out + right);
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int cmp;
      if (a.kind == Value::kString && b.kind == Value::kString) {
        cmp = a.s.view().compare(b.s.view());
      } else {
        const double x = as_number(a);
        const double y = as_number(b);
        cmp = x < y ? -1 : x > y ? 1 : 0;
      }
      if (op == "<") return Value::boolean(cmp < 0);
      if (op == ">") return Value::boolean(cmp > 0);
      if (op == "<=") return Value::boolean(cmp <= 0);
      return Value::boolean(cmp >= 0);
    }
    if (op == "+") {
      if (a.kind == Value::kString && b.kind == Value::kString) {
        check_string_size(a.s.size() + b.s.size());
        std::string out;
        out.reserve(a.s.size() + b.s.size());
        out.append(a.s.view());
        out.append(b.s.view());
        return Value::string(std::move(out));
      }
      if (a.kind == Value::kList && b.kind == Value::kList) {
        if (a.list->size() + b.list->size() > kMaxListItems)
          fail("a list of more than " + std::to_string(kMaxListItems) + " items");
        Value out = Value::new_list();
        *out.list = *a.list;
        out.list->insert(out.list->end(), b.list->begin(), b.list->end());
        return out;
      }
      if (a.kind == Value::kInt && b.kind == Value::kInt) return Value::integer(add_int(a.i, b.i));
      if (a.kind == Value::kString || b.kind == Value::kString)
        fail("cannot add a string and a non-string");
      return Value::real(as_number(a) + as_number(b));
    }
    if (op == "-") {
      if (a.kind == Value::kInt && b.kind == Value::kInt) return Value::integer(sub_int(a.i, b.i));
      return Value::real(as_number(a) - as_number(b));
    }
    if (op == "*") {
      if (a.kind == Value::kString && b.kind == Value::kInt) {
        if (b.i > 0) {
          if (static_cast<std::uint64_t>(b.i) > kMaxStringBytes) check_string_size(SIZE_MAX);
          check_string_size(a.s.size() * static_cast<std::size_t>(b.i));
        }
        std::string out;
        for (std::int64_t k = 0; k < b.i; ++k) out += a.s.view();
        return Value::string(std::move(out));
      }
      if (a.kind == Value::kInt && b.kind == Value::kInt) return Value::integer(mul_int(a.i, b.i));
      return Value::real(as_number(a) * as_number(b));
    }
    if (op == "/") return Value::real(as_number(a) / as_number(b));
    if (op == "//") {
      if (a.kind == Value::kInt && b.kind == Value::kInt) {
        if (b.i == 0) fail("division by zero");
        if (a.i == INT64_MIN && b.i == -1) fail("integer overflow");
        std::int64_t q = a.i / b.i;
        if ((a.i % b.i != 0) && ((a.i < 0) != (b.i < 0))) --q;
        return Value::integer(q);
      }
      return Value::real(std::floor(as_number(a) / as_number(b)));
    }
    if (op == "%") {
      if (a.kind == Value::kInt && b.kind == Value::kInt) {
        if (b.i == 0) fail("modulo by zero");
        if (b.i == -1) return Value::integer(0);  // INT64_MIN % -1 would trap
        std::int64_t r = a.i % b.i;
        if (r != 0 && ((r < 0) != (b.i < 0))) r += b.i;
        return Value::integer(r);
      }
      fail("% needs integers");
    }
    fail("unknown operator " + std::string(op));
  }

  std::string* out_;
  std::vector<Scope> scopes_;
  std::uint64_t steps_ = 0;
  std::uint64_t max_steps_ = kBaseSteps;
};

}  // namespace

struct Node {
  std::vector<AstNodePtr> body;
};

Result<Template> Template::parse(std::string_view source) {
  try {
    TemplateParser parser(split_chunks(preprocess(source)));
    auto body = parser.parse_all();
    auto root = std::make_shared<Node>();
    root->body = std::move(body);
    Template t;
    t.root_ = std::move(root);
    return t;
  } catch (const RenderError& e) {
    return Error::make(ErrorCode::kInvalidRequest, "chat template: " + e.message);
  } catch (const std::exception& e) {
    return Error::make(ErrorCode::kInvalidRequest, std::string("chat template: ") + e.what());
  }
}

Result<std::string> Template::render(const nlohmann::ordered_json& context) const {
  std::vector<Variable> variables;
  if (context.is_object()) {
    for (auto it = context.begin(); it != context.end(); ++it)
      variables.push_back(Variable{it.key(), &it.value()});
  }
  return render(variables);
}

Result<std::string> Template::render(std::span<const Variable> variables,
                                     std::size_t size_hint) const {
  std::string out;
  out.reserve(size_hint);
  try {
    Interpreter interp(out);
    std::uint64_t values = 0;
    for (const Variable& v : variables)
      interp.set_global(std::string(v.name), from_json(*v.value, values));
    interp.set_step_budget(kBaseSteps + kStepsPerInputValue * values);
    interp.run(root_->body);
  } catch (const RenderError& e) {
    return Error::make(ErrorCode::kInvalidRequest, "chat template: " + e.message);
  } catch (const std::exception& e) {
    return Error::make(ErrorCode::kInvalidRequest, std::string("chat template: ") + e.what());
  }
  return out;
}

}  // namespace ferry::tokenizer::jinja
