// The constraint engine: every supported keyword accepts and rejects byte strings as the schema
// says, every refused keyword is an error naming it and its path, the token masks equal a
// brute-force check of every token over real vocabularies (byte-level BPE, SentencePiece with
// byte fallback), special tokens never pass, tool-call grammars, and the grammar cache.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "constrain/cache.h"
#include "constrain/matcher.h"
#include "constrain/schema.h"
#include "constrain/tools.h"
#include "tests/constrain/test_vocab.h"

namespace ferry::constrain {
namespace {

using testing::test_vocab;

std::shared_ptr<const Grammar> schema_grammar(const std::string& schema,
                                              const CompileOptions& options = {}) {
  auto g = compile_json_schema(schema, options);
  EXPECT_TRUE(g.has_value()) << schema << ": " << (g ? "" : g.error().message);
  if (!g) return nullptr;
  return std::make_shared<const Grammar>(std::move(g).value());
}

// Whether the grammar accepts the whole text (fed byte by byte, then complete).
bool accepts(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g, test_vocab("demo")->vocab);
  for (const char c : text) {
    if (!m.accept_bytes(std::string_view(&c, 1))) return false;
  }
  return m.is_complete();
}

struct KeywordCase {
  const char* schema;
  std::vector<const char*> good;
  std::vector<const char*> bad;
};

class Keyword : public ::testing::TestWithParam<KeywordCase> {};

TEST_P(Keyword, AcceptsAndRejectsByteByByte) {
  const KeywordCase& c = GetParam();
  const auto g = schema_grammar(c.schema);
  ASSERT_NE(g, nullptr);
  for (const char* s : c.good) EXPECT_TRUE(accepts(g, s)) << c.schema << " should accept " << s;
  for (const char* s : c.bad) EXPECT_FALSE(accepts(g, s)) << c.schema << " should reject " << s;
}

INSTANTIATE_TEST_SUITE_P(
    Constrain, Keyword,
    ::testing::Values(
        KeywordCase{R"({"type":"string"})",
                    {R"("abc")", R"("")", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", R"("\u00e9")",
                     R"("a\"b\\c\n")", R"(  "x")"},
                    {"abc", R"("a)", R"("\ud800")", "\"\x01\"", "\"\xc3\"", "\"\xed\xa0\x80\"",
                     R"("\x")", R"("a" )"}},
        KeywordCase{R"({"type":"integer"})",
                    {"0", "-12", "123456789012345"},
                    {"01", "1.5", "-0", "1e3", "+1", "1234567890123456", ""}},
        KeywordCase{R"({"type":"integer","minimum":-5,"maximum":120})",
                    {"-5", "-1", "0", "9", "99", "120", "100"},
                    {"-6", "121", "200", "1000", "-10"}},
        KeywordCase{R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})",
                    {"1", "9"},
                    {"0", "10", "-1"}},
        KeywordCase{R"({"type":"number"})",
                    {"0", "1.5", "-0.25e10", "3E+2", "-7"},
                    {".5", "1.", "+1", "1e", "--1", "0x1"}},
        KeywordCase{
            R"({"type":"number","minimum":2.5,"maximum":7})", {"3", "7"}, {"2", "8", "2.5"}},
        KeywordCase{R"({"type":"boolean"})", {"true", "false"}, {"True", "1", "null"}},
        KeywordCase{R"({"type":"null"})", {"null"}, {"nul", "\"null\""}},
        KeywordCase{R"({"enum":["red","green",1,null]})",
                    {R"("red")", R"("green")", "1", "null"},
                    {R"("blue")", R"("re")", "2"}},
        KeywordCase{R"({"type":"string","enum":["a",1]})", {R"("a")"}, {"1"}},
        KeywordCase{R"({"const":{"a":[1,"x"]}})", {R"({"a":[1,"x"]})"}, {R"({"a":[1]})"}},
        KeywordCase{
            R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"]})",
            {R"({"a":1})", R"({"a":1,"b":"x"})", R"({ "a": 1, "b": "x" })", "{\n\"a\":1}"},
            {R"({"b":"x","a":1})", R"({})", R"({"a":1,"c":2})", R"({"a":"1"})", R"({"a":1,})",
             R"({"a":1   })"}},
        KeywordCase{
            R"({"type":"object","properties":{"x":{"type":"boolean"},"y":{"type":"null"}}})",
            {"{}", R"({"x":true})", R"({"y":null})", R"({"x":false,"y":null})"},
            {R"({"y":null,"x":true})", R"({,"y":null})"}},
        KeywordCase{
            R"({"type":"object","additionalProperties":false})", {"{}", "{ }"}, {R"({"a":1})"}},
        KeywordCase{R"({"type":"object","additionalProperties":{"type":"integer"}})",
                    {"{}", R"({"x":1,"y":2})"},
                    {R"({"x":"s"})", R"({"x":1,})"}},
        KeywordCase{R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
                    {"[1]", "[1,2,3]", "[ 1 , 2 ]"},
                    {"[]", "[1,2,3,4]", R"(["a"])", "[1,]"}},
        KeywordCase{R"({"anyOf":[{"type":"string"},{"type":"integer"}]})",
                    {R"("a")", "3"},
                    {"true", "1.5"}},
        KeywordCase{R"({"type":["string","null"]})", {R"("a")", "null"}, {"1"}},
        KeywordCase{R"({"type":"string","maxLength":2,"nullable":true})",
                    {R"("ab")", "null"},
                    {R"("abc")", "1"}},
        KeywordCase{R"({"type":"integer","nullable":false})", {"1"}, {"null"}},
        KeywordCase{R"({"allOf":[{"type":"integer","maximum":3}]})", {"3"}, {"4"}},
        KeywordCase{
            R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v","kids"]}},"$ref":"#/$defs/node"})",
            {R"({"v":1,"kids":[]})", R"({"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[]}]}]})"},
            {R"({"v":1})", R"({"v":1,"kids":[{"v":2}]})"}},
        KeywordCase{
            R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["next"]})",
            {R"({"next":null})", R"({"next":{"next":{"next":null}}})"},
            {R"({"next":{}})"}},
        KeywordCase{R"({"type":"string","pattern":"^[a-z]{2,4}-\\d+$"})",
                    {R"("ab-1")", R"("abcd-42")"},
                    {R"("a-1")", R"("ab-")", R"("AB-1")", R"("abcde-1")"}},
        KeywordCase{R"({"type":"string","pattern":"^(?:cat|dog)s?\\.$"})",
                    {R"("cat.")", R"("dogs.")"},
                    {R"("cow.")", R"("cats")"}},
        // An escaped non-ASCII character is the whole character (not its first byte).
        KeywordCase{R"({"type":"string","pattern":"^caf\\\u00e9{1,2}$"})",
                    {"\"caf\u00e9\"", "\"caf\u00e9\u00e9\""},
                    {R"("caf")", "\"caf\u00e9\u00e9\u00e9\""}},
        KeywordCase{R"({"type":"string","format":"date"})",
                    {R"("2024-02-28")", R"("1999-12-31")", R"("2023-04-30")"},
                    {R"("2024-02-30")", R"("2024-13-01")", R"("2024-04-31")", R"("24-01-01")"}},
        KeywordCase{R"({"type":"string","format":"time"})",
                    {R"("12:30:00Z")", R"("23:59:59.123+02:00")"},
                    {R"("24:00:00Z")", R"("12:60:00Z")", R"("12:30")"}},
        KeywordCase{R"({"type":"string","format":"date-time"})",
                    {R"("2024-01-02T03:04:05Z")"},
                    {R"("2024-01-02 03:04:05")"}},
        KeywordCase{
            R"({"type":"string","format":"uuid"})",
            {R"("123e4567-e89b-12d3-a456-426614174000")"},
            {R"("123e4567e89b12d3a456426614174000")", R"("123E4567-e89b-12d3-a456-42661417400")"}},
        KeywordCase{R"({"type":"string","format":"email"})",
                    {R"("a.b@example.com")", R"("x_1+y@mail.co.uk")"},
                    {R"("ab")", R"("a@b")", R"("@example.com")"}},
        KeywordCase{R"({"type":"string","minLength":2,"maxLength":3})",
                    {R"("ab")", R"("abc")", "\"\xc3\xa9\xc3\xa9\"", R"("\n\t")"},
                    {R"("a")", R"("abcd")", R"("")"}}));

// zod (and JavaScript) count a string's length in UTF-16 units, JSON Schema in code points: a
// character above U+FFFF counts 2 toward maxLength and 1 toward minLength, so every string
// satisfies both.
TEST(Constrain, StringLengthsFitBothCodePointsAndUtf16Units) {
  const std::string emoji = "\xf0\x9f\x98\x80";  // U+1F600: 1 code point, 2 UTF-16 units
  const auto max2 = schema_grammar(R"({"type":"string","maxLength":2})");
  ASSERT_NE(max2, nullptr);
  EXPECT_TRUE(accepts(max2, "\"" + emoji + "\""));
  EXPECT_TRUE(accepts(max2, "\"\xc3\xa9\xe2\x82\xac\""));  // BMP: one unit each
  EXPECT_FALSE(accepts(max2, "\"a" + emoji + "\""));       // 2 code points, 3 units
  EXPECT_FALSE(accepts(max2, "\"" + emoji + emoji + "\""));
  const auto min2 = schema_grammar(R"({"type":"string","minLength":2,"maxLength":3})");
  ASSERT_NE(min2, nullptr);
  EXPECT_FALSE(accepts(min2, "\"" + emoji + "\""));  // 2 units but 1 code point
  EXPECT_TRUE(accepts(min2, "\"" + emoji + "a\""));
  EXPECT_FALSE(accepts(min2, "\"" + emoji + emoji + "\""));  // 4 units
  // The shortest completion counts code points toward minLength.
  const auto g = schema_grammar(R"({"type":"string","minLength":2})");
  ASSERT_NE(g, nullptr);
  Matcher m(g, test_vocab("demo")->vocab);
  ASSERT_TRUE(m.accept_bytes("\"" + emoji));
  EXPECT_EQ(m.shortest_completion(), 2u);  // one more character and the quote
}

TEST(Constrain, BoundsWhitespaceAndStringLength) {
  CompileOptions o;
  o.max_whitespace = 2;
  o.max_string_chars = 5;
  const auto g = schema_grammar(R"({"type":"object","properties":{"s":{"type":"string"}}})", o);
  EXPECT_TRUE(accepts(g, R"({  "s":  "abcde"})"));
  EXPECT_FALSE(accepts(g, R"({   "s":"a"})"));  // three spaces
  EXPECT_FALSE(accepts(g, R"({"s":"abcdef"})"));
}

TEST(Constrain, JsonObjectIsAnyObject) {
  auto g = std::make_shared<const Grammar>(compile_json_object());
  EXPECT_TRUE(accepts(g, R"({"x":[1,{"y":null}],"z":"w"})"));
  EXPECT_TRUE(accepts(g, "{}"));
  EXPECT_FALSE(accepts(g, "[1]"));
  EXPECT_FALSE(accepts(g, R"("s")"));
  EXPECT_FALSE(accepts(g, R"({"x":1)"));
}

TEST(Constrain, NestingOfFreeValuesIsBounded) {
  CompileOptions o;
  o.max_any_depth = 3;
  auto g = std::make_shared<const Grammar>(compile_json_object(o));
  EXPECT_TRUE(accepts(g, R"({"a":{"b":1}})"));
  EXPECT_FALSE(accepts(g, R"({"a":{"b":{"c":{"d":1}}}})"));
}

// ---- refused keywords ----------------------------------------------------------------------

struct RefusedCase {
  const char* schema;
  const char* keyword;
  const char* path;
};

class Refused : public ::testing::TestWithParam<RefusedCase> {};

TEST_P(Refused, NamesTheKeywordAndItsPath) {
  const RefusedCase& c = GetParam();
  auto g = compile_json_schema(c.schema);
  ASSERT_FALSE(g.has_value()) << c.schema << " compiled";
  EXPECT_EQ(g.error().code, ErrorCode::kInvalidRequest);
  const std::string& m = g.error().message;
  EXPECT_NE(m.find(std::string("'") + c.keyword + "'"), std::string::npos) << m;
  EXPECT_NE(m.find(std::string("'") + c.path + "'"), std::string::npos) << m;
}

INSTANTIATE_TEST_SUITE_P(
    Constrain, Refused,
    ::testing::Values(
        RefusedCase{R"({"not":{"type":"string"}})", "not", "#"},
        RefusedCase{R"({"type":"object","properties":{"a":{"type":"string","format":"hostname"}}})",
                    "format", "#/properties/a"},
        RefusedCase{R"({"$defs":{"x":{"oneOf":[{"type":"string"}]}},"$ref":"#/$defs/x"})", "oneOf",
                    "#/$defs/x"},
        RefusedCase{R"({"type":"number","multipleOf":3})", "multipleOf", "#"},
        RefusedCase{R"({"type":"array","items":{"type":"string"},"uniqueItems":true})",
                    "uniqueItems", "#"},
        RefusedCase{R"({"type":"object","patternProperties":{"^a":{}}})", "patternProperties", "#"},
        RefusedCase{R"({"type":"array","prefixItems":[{"type":"string"}]})", "prefixItems", "#"},
        RefusedCase{R"({"type":"array","items":[{"type":"string"}]})", "items", "#"},
        RefusedCase{R"({"type":"object","minProperties":1})", "minProperties", "#"},
        RefusedCase{R"({"if":{"type":"string"},"then":{"minLength":1}})", "if", "#"},
        RefusedCase{R"({"type":"object","properties":{"a":{"type":"string","pattern":"(?=a)b"}}})",
                    "pattern", "#/properties/a"},
        RefusedCase{R"({"type":"string","pattern":"a\\1"})", "pattern", "#"},
        // A backslash before a control character (here a raw LF, JSON's \n): generated, it
        // would be a raw control byte in the string, which is not JSON (found by
        // fuzz_constrain_schema).
        RefusedCase{R"({"type":"string","pattern":"^(?:red|bl)(?<d>s\\\n])?$"})", "pattern", "#"},
        RefusedCase{R"({"type":"string","pattern":"a\\\u007f"})", "pattern", "#"},
        RefusedCase{R"({"type":"string","pattern":"[a\\\u00e9]"})", "pattern", "#"},
        RefusedCase{R"({"$ref":"http://example.com/s.json"})", "$ref", "#"},
        RefusedCase{R"({"allOf":[{"type":"string"},{"minLength":1}]})", "allOf", "#"},
        RefusedCase{R"({"type":"object","dependentRequired":{"a":["b"]}})", "dependentRequired",
                    "#"},
        RefusedCase{R"({"type":"array","contains":{"type":"string"}})", "contains", "#"},
        RefusedCase{R"({"type":"object","propertyNames":{"pattern":"^a"}})", "propertyNames", "#"},
        RefusedCase{R"({"type":"integer","exclusiveMinimum":true})", "exclusiveMinimum", "#"},
        RefusedCase{R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["b"]})",
                    "required", "#"},
        RefusedCase{R"({"type":"string","pattern":"^a","format":"date"})", "format", "#"},
        RefusedCase{
            R"({"type":"array","items":{"type":"object","properties":{"k":{"type":"string","x-custom":1}}}})",
            "x-custom", "#/items/properties/k"},
        RefusedCase{R"({"type":"integer","minimum":5,"maximum":4})", "minimum", "#"},
        RefusedCase{
            R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"type":"array","items":{"$ref":"#/$defs/a"}})",
            "$ref", "#/items"}));

// Every JSON Schema keyword outside the supported subset, each nested at a path: a 400 that
// names it and the path.
TEST(Constrain, EveryUnsupportedKeywordIsRefusedByNameAndPath) {
  const std::vector<std::pair<std::string, std::string>> keywords = {
      {"not", R"({"type":"string"})"},
      {"oneOf", R"([{"type":"string"}])"},
      {"if", R"({"type":"string"})"},
      {"then", R"({"type":"string"})"},
      {"else", R"({"type":"string"})"},
      {"multipleOf", "2"},
      {"uniqueItems", "true"},
      {"contains", R"({"type":"string"})"},
      {"minContains", "1"},
      {"maxContains", "1"},
      {"prefixItems", R"([{"type":"string"}])"},
      {"unevaluatedItems", "false"},
      {"unevaluatedProperties", "false"},
      {"patternProperties", R"({"^a":{}})"},
      {"propertyNames", R"({"maxLength":2})"},
      {"minProperties", "1"},
      {"maxProperties", "1"},
      {"dependentRequired", R"({"a":["b"]})"},
      {"dependentSchemas", R"({"a":{}})"},
      {"dependencies", R"({"a":["b"]})"},
      {"contentEncoding", R"("base64")"},
      {"contentMediaType", R"("text/plain")"},
      {"contentSchema", R"({})"},
      {"$dynamicRef", R"("#a")"},
      {"$dynamicAnchor", R"("a")"},
      {"$anchor", R"("a")"},
      {"$recursiveRef", R"("#")"},
      {"additionalItems", "false"},
      {"nullable", "true"},
      {"discriminator", R"({"propertyName":"k"})"},
  };
  for (const auto& [keyword, value] : keywords) {
    const std::string schema =
        R"({"type":"object","properties":{"outer":{"type":"array","items":{")" + keyword + R"(":)" +
        value + "}}}}";
    auto g = compile_json_schema(schema);
    ASSERT_FALSE(g.has_value()) << schema;
    EXPECT_EQ(g.error().code, ErrorCode::kInvalidRequest);
    const std::string& m = g.error().message;
    EXPECT_NE(m.find("'" + keyword + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("'#/properties/outer/items'"), std::string::npos) << m;
  }
}

// Hostile schemas are refused with a clear error, never a crash or an unbounded build.
TEST(Constrain, HostileSchemasAreRefusedWithinBounds) {
  // Nesting far deeper than any schema needs (the compiler would recurse per level).
  std::string deep;
  for (int i = 0; i < 20000; ++i) deep += R"({"type":"array","items":)";
  deep += R"({"type":"string"})";
  for (int i = 0; i < 20000; ++i) deep += "}";
  auto a = compile_json_schema(deep);
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.error().message.find("nests deeper than 48 levels"), std::string::npos)
      << a.error().message.substr(0, 300);
  // A huge enum: a million values.
  std::string values;
  for (int i = 0; i < 1000000; ++i) values += (i ? ",\"v" : "\"v") + std::to_string(i) + "\"";
  auto b = compile_json_schema(R"({"type":"object","properties":{"e":{"enum":[)" + values + "]}}}");
  ASSERT_FALSE(b.has_value());
  EXPECT_NE(b.error().message.find("'enum' at '#/properties/e'"), std::string::npos)
      << b.error().message;
  // Thousands of properties: the grammar's state bound, at the property where it passed.
  std::string props;
  for (int i = 0; i < 20000; ++i)
    props += (i ? ",\"p" : "\"p") + std::to_string(i) + R"(":{"type":"string","format":"uuid"})";
  auto c = compile_json_schema(R"({"type":"object","properties":{)" + props + "}}");
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("too large: the object at '#/properties' has more than 1000"),
            std::string::npos)
      << c.error().message;
  // Fewer properties, each a big pattern (a group repeated: unrolled; a class repeated would be
  // one run frame): the grammar's state bound, where it passed.
  std::string big;
  for (int i = 0; i < 900; ++i)
    big +=
        (i ? ",\"p" : "\"p") + std::to_string(i) + R"(":{"type":"string","pattern":"(?:ab){300}"})";
  auto c2 = compile_json_schema(R"({"type":"object","properties":{)" + big + "}}");
  ASSERT_FALSE(c2.has_value());
  EXPECT_NE(c2.error().message.find("grammar"), std::string::npos) << c2.error().message;
  EXPECT_NE(c2.error().message.find("#/properties/p"), std::string::npos) << c2.error().message;
  // Giant patterns: nested groups, and repetitions that multiply.
  std::string groups(5000, '(');
  groups += "a" + std::string(5000, ')');
  auto d = compile_json_schema(R"({"type":"string","pattern":")" + groups + R"("})");
  ASSERT_FALSE(d.has_value());
  EXPECT_NE(d.error().message.find("'pattern' at '#'"), std::string::npos) << d.error().message;
  EXPECT_NE(d.error().message.find("nested deeper"), std::string::npos) << d.error().message;
  auto e = compile_json_schema(R"x({"type":"string","pattern":"((([a-z]{1000}){1000}){1000})"})x");
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().message.find("grammar states"), std::string::npos) << e.error().message;
  // Recursion with no way out: no finite document.
  auto f = compile_json_schema(
      R"({"type":"object","properties":{"next":{"$ref":"#"}},"required":["next"]})");
  ASSERT_FALSE(f.has_value());
  EXPECT_NE(f.error().message.find("no finite document"), std::string::npos) << f.error().message;
  // The same recursion with a way out compiles (a linked list).
  EXPECT_TRUE(
      compile_json_schema(R"({"type":"object","properties":{"next":{"$ref":"#"}}})").has_value());
}

TEST(Constrain, SchemaThatIsNotJsonIsAnError) {
  auto g = compile_json_schema("{\"type\":");
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().code, ErrorCode::kInvalidRequest);
}

// ---- token masks -----------------------------------------------------------------------------

bool bit(const std::vector<std::uint64_t>& mask, TokenId id) {
  return (mask[id / 64] >> (id % 64)) & 1u;
}

// The ids a mask allows, in order.
std::vector<TokenId> allowed_ids(const std::vector<std::uint64_t>& mask) {
  std::vector<TokenId> ids;
  for (std::size_t w = 0; w < mask.size(); ++w)
    for (std::uint64_t bits = mask[w]; bits; bits &= bits - 1)
      ids.push_back(static_cast<TokenId>(w * 64 + __builtin_ctzll(bits)));
  return ids;
}

// At each step of a seeded walk, the mask equals a token-by-token check of what the matcher
// accepts, and no special token passes (the end of generation only where complete).
void check_masks_by_brute_force(const testing::TestVocab& tv,
                                const std::shared_ptr<const Grammar>& g, std::uint64_t seed,
                                int max_steps, bool state_masks = false) {
  ASSERT_NE(g, nullptr);
  const std::string schema = "(grammar)";
  Matcher m(g, tv.vocab);
  if (state_masks) m.set_state_mask_threshold(0);  // every rule state through StateMasks
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> mask;
  const std::size_t n = tv.vocab->size();
  for (int step = 0; step < max_steps && !m.ended(); ++step) {
    m.fill_mask(mask);
    std::vector<TokenId> allowed;
    for (TokenId id = 0; id < n; ++id) {
      Matcher probe = m;
      const bool ok = probe.accept_token(id);
      ASSERT_EQ(bit(mask, id), ok) << tv.name << " step " << step << " token " << id << " '"
                                   << tv.tokenizer->token_text(id) << "' schema " << schema;
      if (ok) allowed.push_back(id);
      if (tv.tokenizer->is_special(id) && !tv.vocab->is_eos(id)) {
        ASSERT_FALSE(ok);
      }
      if (tv.vocab->is_eos(id)) {
        ASSERT_EQ(ok, m.is_complete());
      }
    }
    ASSERT_FALSE(allowed.empty()) << tv.name << " dead at step " << step;
    ASSERT_TRUE(m.accept_token(allowed[rng() % allowed.size()]));
  }
}

void check_masks_by_brute_force(const testing::TestVocab& tv, const std::string& schema,
                                std::uint64_t seed, int max_steps, bool state_masks = false) {
  SCOPED_TRACE(schema);
  check_masks_by_brute_force(tv, schema_grammar(schema), seed, max_steps, state_masks);
}

const char* const kMaskSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"age":{"type":"integer","minimum":0,"maximum":130},"tags":{"type":"array","items":{"enum":["a","bb","ccc"]},"maxItems":3}},"required":["name","age"]})",
    R"({"anyOf":[{"type":"string","format":"date"},{"type":"number"},{"type":"object","properties":{"x":{"type":"boolean"}}}]})",
    R"({"type":"object","additionalProperties":{"type":"string","maxLength":4}})",
    // Class runs (kRun: email's parts, a pattern's `[A-Z]{2}`, `\d{3,5}`) and what follows them.
    R"({"type":"object","properties":{"e":{"type":"string","format":"email"},"p":{"type":"string","pattern":"^[A-Z]{2}-\\d{3,5}$"},"u":{"type":"string","format":"uuid"}},"required":["e","p","u"]})",
};

TEST(ConstrainMask, EqualsBruteForceOnTheDemoVocabulary) {
  const auto* tv = test_vocab("demo");
  ASSERT_NE(tv, nullptr);
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    for (const char* s : kMaskSchemas) check_masks_by_brute_force(*tv, s, seed, 40);
  }
}

TEST(ConstrainMask, StateMasksEqualBruteForce) {
  // Every rule state's mask through the grammar's StateMasks (context-free part + the tokens
  // that leave the rule), twice per state: computed, then reused by a second walk.
  const auto* tv = test_vocab("demo");
  for (const char* s : kMaskSchemas) {
    const auto g = schema_grammar(s);
    check_masks_by_brute_force(*tv, g, 11, 40, true);
    check_masks_by_brute_force(*tv, g, 11, 40, true);
    check_masks_by_brute_force(*tv, g, 12, 40, false);  // default threshold, same grammar
  }
  check_masks_by_brute_force(*tv, R"({"type":"string","format":"email"})", 3, 30, true);
  const auto* llama = test_vocab("llama2");
  if (llama) check_masks_by_brute_force(*llama, kMaskSchemas[0], 4, 12, true);
}

TEST(ConstrainMask, PreparedStateMasksEqualBruteForce) {
  // Every rule state's mask computed up front (as the served path does on its compile thread),
  // keyed without the stack depth (the grammar's stacks stay below kMaxFrames): the walks that
  // follow, from other depths, must get exactly the brute-force masks.
  const auto* tv = test_vocab("demo");
  std::vector<std::shared_ptr<const Grammar>> grammars;
  for (const char* s : kMaskSchemas) grammars.push_back(schema_grammar(s));
  CompileOptions small;
  small.max_string_chars = 6;
  small.max_array_items = 3;
  grammars.push_back(std::make_shared<const Grammar>(compile_json_object(small)));
  for (const auto& g : grammars) {
    ASSERT_NE(g, nullptr);
    EXPECT_LE(g->max_frames, Matcher::kMaxFrames);
    Matcher prepare(g, tv->vocab);
    prepare.set_state_mask_threshold(0);  // every state keeps its entry
    EXPECT_GT(prepare.prepare_state_masks(), 0u);
    for (std::uint64_t seed = 21; seed <= 23; ++seed) check_masks_by_brute_force(*tv, g, seed, 40);
  }
  // A grammar past Matcher::kPrepareStates (an enum of 6,000 values) is prepared in part; the
  // states left fill as the walks reach them.
  std::string values;
  for (int i = 0; i < 6000; ++i) values += (i ? ",\"v" : "\"v") + std::to_string(i * 7919) + "\"";
  const auto big = schema_grammar(R"({"type":"array","items":{"enum":[)" + values + "]}}");
  ASSERT_NE(big, nullptr);
  std::size_t reading = 0;  // states a stack may stop at
  for (const Rule& r : big->rules)
    for (const NfaState& st : r.states) reading += st.bytes.empty() ? 0 : 1;
  EXPECT_GT(reading, Matcher::kPrepareStates);
  Matcher big_prepare(big, tv->vocab);
  big_prepare.set_state_mask_threshold(0);
  EXPECT_GT(big_prepare.prepare_state_masks(), 0u);
  check_masks_by_brute_force(*tv, big, 24, 30);
  // A recursive grammar's entries depend on the depth: nothing is made up front.
  const auto tree = schema_grammar(
      R"({"$defs":{"n":{"type":"array","items":{"$ref":"#/$defs/n"},"maxItems":2}},"$ref":"#/$defs/n"})");
  EXPECT_EQ(tree->max_frames, kNoPath);
  EXPECT_EQ(Matcher(tree, tv->vocab).prepare_state_masks(), 0u);
}

TEST(ConstrainGrammar, MaxFramesIsTheDeepestChainOfCalls) {
  // document -> root -> string: three frames at most; json_object: document, object, then one
  // rule per level of the free-form value down to max_any_depth.
  EXPECT_EQ(schema_grammar(R"({"type":"string"})")->max_frames, 3u);
  CompileOptions o;
  o.max_any_depth = 4;
  const Grammar object = compile_json_object(o);
  EXPECT_GE(object.max_frames, 5u);
  EXPECT_LE(object.max_frames, Matcher::kMaxFrames);
  EXPECT_EQ(
      schema_grammar(
          R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v","kids"]}},"$ref":"#/$defs/node"})")
          ->max_frames,
      kNoPath);
}

TEST(ConstrainMask, EqualsBruteForceAtAQwenSizedVocabulary) {
  // 151,936 tokens (o200k's lowest ranks as a GGUF BPE, Qwen's added tokens special): the run
  // tables, the string tables of every sub-state (escapes, split characters) and state masks.
  const auto* tv = test_vocab("qwen152k");
  ASSERT_NE(tv, nullptr);
  EXPECT_EQ(tv->vocab->size(), 151936u);
  check_masks_by_brute_force(*tv, kMaskSchemas[3], 5, 6);
  check_masks_by_brute_force(*tv, R"({"type":"string","maxLength":40})", 9, 6);
}

TEST(ConstrainMask, EqualsBruteForceOnSentencePieceWithByteFallback) {
  const auto* tv = test_vocab("llama2");
  if (!tv) GTEST_SKIP() << "the shared llama-2-tiny-random.gguf is absent";
  for (const char* s : kMaskSchemas) check_masks_by_brute_force(*tv, s, 7, 12);
}

TEST(ConstrainMask, EqualsBruteForceOnCl100k) {
  const auto* tv = test_vocab("cl100k");
  ASSERT_NE(tv, nullptr);
  check_masks_by_brute_force(*tv, kMaskSchemas[0], 5, 8);
}

TEST(ConstrainMask, MultiByteCharactersSplitAcrossTokens) {
  // SentencePiece: "é" is not one token in llama-2's tiny vocabulary or it is; either way the
  // byte-fallback token of its first byte is a valid start and the second byte must follow.
  const auto* tv = test_vocab("llama2");
  if (!tv) GTEST_SKIP() << "the shared llama-2-tiny-random.gguf is absent";
  const auto g = schema_grammar(R"({"enum":["h\u00e9"]})");
  Matcher m(g, tv->vocab);
  ASSERT_TRUE(m.accept_bytes("\"h"));
  std::vector<std::uint64_t> mask;
  m.fill_mask(mask);
  const auto c3 = tv->tokenizer->token_id("<0xC3>");
  ASSERT_TRUE(c3.has_value());
  EXPECT_TRUE(bit(mask, *c3));
  ASSERT_TRUE(m.accept_token(*c3));
  m.fill_mask(mask);
  const auto a9 = tv->tokenizer->token_id("<0xA9>");
  ASSERT_TRUE(a9.has_value());
  EXPECT_TRUE(bit(mask, *a9));
  EXPECT_FALSE(bit(mask, *c3));
  ASSERT_TRUE(m.accept_token(*a9));
  EXPECT_TRUE(m.accept_bytes("\""));
  EXPECT_TRUE(m.is_complete());
}

TEST(ConstrainMask, SpacePrefixedSentencePiecePiecesInsideStrings) {
  const auto* tv = test_vocab("llama2");
  if (!tv) GTEST_SKIP() << "the shared llama-2-tiny-random.gguf is absent";
  const auto g = schema_grammar(R"({"type":"string"})");
  Matcher m(g, tv->vocab);
  ASSERT_TRUE(m.accept_bytes("\"a"));
  std::vector<std::uint64_t> mask;
  m.fill_mask(mask);
  const auto the = tv->tokenizer->token_id("\xe2\x96\x81the");  // "▁the" decodes to " the"
  ASSERT_TRUE(the.has_value());
  EXPECT_TRUE(bit(mask, *the));
}

// ---- tools -------------------------------------------------------------------------------

ToolSpec weather_tools(ToolChoice choice) {
  ToolSpec spec;
  spec.choice = choice;
  spec.functions.push_back(ToolFunction{
      "get_weather",
      R"({"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"],"additionalProperties":false})"});
  spec.functions.push_back(ToolFunction{"now", ""});
  return spec;
}

std::shared_ptr<const Grammar> tools_grammar(const ToolSpec& spec) {
  auto g = compile_tools(spec);
  EXPECT_TRUE(g.has_value()) << (g ? "" : g.error().message);
  return g ? std::make_shared<const Grammar>(std::move(g).value()) : nullptr;
}

TEST(ConstrainTools, RequiredIsACallOfADeclaredFunctionWithValidArguments) {
  const auto g = tools_grammar(weather_tools(ToolChoice::kRequired));
  EXPECT_TRUE(accepts(
      g, R"(<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>)"));
  EXPECT_TRUE(accepts(g, "<tool_call>\n{\"name\":\"now\",\"arguments\":{}}\n</tool_call>"));
  EXPECT_TRUE(accepts(
      g,
      R"(<tool_call>{"name":"now","arguments":{}}</tool_call> <tool_call>{"name":"now","arguments":{}}</tool_call>)"));
  EXPECT_FALSE(accepts(g, R"(<tool_call>{"name":"get_time","arguments":{}}</tool_call>)"));
  EXPECT_FALSE(accepts(g, R"(<tool_call>{"name":"get_weather","arguments":{}}</tool_call>)"));
  EXPECT_FALSE(accepts(
      g, R"(<tool_call>{"name":"get_weather","arguments":{"city":"P","x":1}}</tool_call>)"));
  EXPECT_FALSE(accepts(g, "Sure!"));
  EXPECT_FALSE(accepts(g, ""));
}

TEST(ConstrainTools, AutoAllowsTextOrCalls) {
  const auto g = tools_grammar(weather_tools(ToolChoice::kAuto));
  EXPECT_TRUE(accepts(g, "Hello there, <tool and <tool_cal are fine."));
  EXPECT_TRUE(accepts(g, ""));
  EXPECT_TRUE(accepts(g, R"(Let me check. <tool_call>{"name":"now","arguments":{}}</tool_call>)"));
  EXPECT_FALSE(accepts(g, "<tool_call>hello"));
  EXPECT_FALSE(accepts(g, R"(x<tool_call>{"name":"now","arguments":{}}</tool_call> more text)"));
}

TEST(ConstrainTools, NoneNeverOpensACall) {
  const auto g = tools_grammar(weather_tools(ToolChoice::kNone));
  EXPECT_TRUE(accepts(g, "Plain text <tool_cal"));
  EXPECT_FALSE(accepts(g, R"(<tool_call>{"name":"now","arguments":{}}</tool_call>)"));
}

TEST(ConstrainTools, NamedAndSingleCall) {
  ToolSpec spec = weather_tools(ToolChoice::kNamed);
  spec.named = "now";
  spec.parallel_tool_calls = false;
  const auto g = tools_grammar(spec);
  EXPECT_TRUE(accepts(g, R"(<tool_call>{"name":"now","arguments":{}}</tool_call>)"));
  EXPECT_FALSE(
      accepts(g, R"(<tool_call>{"name":"get_weather","arguments":{"city":"P"}}</tool_call>)"));
  EXPECT_FALSE(accepts(
      g,
      R"(<tool_call>{"name":"now","arguments":{}}</tool_call><tool_call>{"name":"now","arguments":{}}</tool_call>)"));
}

TEST(ConstrainTools, MistralListLayout) {
  ToolSpec spec = weather_tools(ToolChoice::kRequired);
  spec.syntax.layout = ToolLayout::kList;
  spec.syntax.begin = "[TOOL_CALLS]";
  spec.syntax.end.clear();
  const auto g = tools_grammar(spec);
  EXPECT_TRUE(accepts(g, R"([TOOL_CALLS][{"name":"now","arguments":{}}])"));
  EXPECT_TRUE(accepts(
      g,
      R"([TOOL_CALLS] [{"name":"now","arguments":{}}, {"name":"get_weather","arguments":{"city":"P"}}])"));
  EXPECT_FALSE(accepts(g, R"([TOOL_CALLS][{"name":"now","arguments":{}})"));
  EXPECT_FALSE(accepts(g, R"([TOOL_CALLS][])"));
  EXPECT_FALSE(accepts(g, R"({"name":"now","arguments":{}})"));
  spec.choice = ToolChoice::kAuto;
  const auto a = tools_grammar(spec);
  EXPECT_TRUE(accepts(a, "Sunny [TOOL_CALL"));
  EXPECT_TRUE(accepts(a, R"(ok [TOOL_CALLS][{"name":"now","arguments":{}}])"));
  EXPECT_FALSE(accepts(a, R"(ok [TOOL_CALLS][{"name":"no","arguments":{}}])"));
}

TEST(ConstrainTools, LlamaBareLayoutIsOneCallOrText) {
  ToolSpec spec = weather_tools(ToolChoice::kRequired);
  spec.syntax.layout = ToolLayout::kBare;
  spec.syntax.begin.clear();
  spec.syntax.end.clear();
  spec.syntax.arguments_key = "parameters";
  const auto g = tools_grammar(spec);
  EXPECT_TRUE(accepts(g, R"({"name":"now","parameters":{}})"));
  EXPECT_TRUE(accepts(g, R"( {"name": "get_weather", "parameters": {"city": "P"}})"));
  EXPECT_FALSE(accepts(g, R"({"name":"now","arguments":{}})"));
  EXPECT_FALSE(accepts(g, R"({"name":"now","parameters":{}}{"name":"now","parameters":{}})"));
  EXPECT_FALSE(accepts(g, "text"));
  spec.choice = ToolChoice::kAuto;
  const auto a = tools_grammar(spec);
  EXPECT_TRUE(accepts(a, "It is {sunny}"));
  EXPECT_TRUE(accepts(a, R"({"name":"now","parameters":{}})"));
  EXPECT_TRUE(accepts(a, ""));
  EXPECT_FALSE(accepts(a, "{not a call}"));
  EXPECT_FALSE(accepts(a, " leading space"));
  spec.choice = ToolChoice::kNone;
  const auto n = tools_grammar(spec);
  EXPECT_TRUE(accepts(n, "It is {sunny}"));
  EXPECT_FALSE(accepts(n, R"({"name":"now","parameters":{}})"));
}

// Llama 3.1+: where the vocabulary has <|python_tag|> as a token, a call may open with it (the
// model writes it or not); text never begins with its `<`, so a reader of the output can tell.
TEST(ConstrainTools, LlamaPythonTagMayOpenTheBareCall) {
  ToolSpec spec = weather_tools(ToolChoice::kRequired);
  spec.syntax.layout = ToolLayout::kBare;
  spec.syntax.begin = "<|python_tag|>";
  spec.syntax.end.clear();
  spec.syntax.arguments_key = "parameters";
  const std::string call = R"({"name":"now","parameters":{}})";
  const auto g = tools_grammar(spec);
  EXPECT_TRUE(accepts(g, call));
  EXPECT_TRUE(accepts(g, "<|python_tag|>" + call));
  EXPECT_TRUE(accepts(g, "<|python_tag|> " + call));
  EXPECT_FALSE(accepts(g, "<|python_tag|><|python_tag|>" + call));
  EXPECT_FALSE(accepts(g, "<|python_tag|>"));
  EXPECT_FALSE(accepts(g, call + "<|python_tag|>"));
  spec.choice = ToolChoice::kAuto;
  const auto a = tools_grammar(spec);
  EXPECT_TRUE(accepts(a, "<|python_tag|>" + call));
  EXPECT_TRUE(accepts(a, "It is <b>sunny</b>"));
  EXPECT_FALSE(accepts(a, "<b>sunny</b>"));
  EXPECT_FALSE(accepts(a, "<|python_tag|>text"));
}

TEST(ConstrainTools, AThinkBlockMayOpenTheOutputOnly) {
  ToolSpec spec = weather_tools(ToolChoice::kRequired);
  spec.syntax.think_begin = "<think>";
  spec.syntax.think_end = "</think>";
  const auto g = tools_grammar(spec);
  const std::string call = R"(<tool_call>{"name":"now","arguments":{}}</tool_call>)";
  EXPECT_TRUE(accepts(g, call));
  EXPECT_TRUE(accepts(g, "<think>\nany <tool_call> text\n</think>\n\n" + call));
  EXPECT_FALSE(accepts(g, "<think>never closed " + call));
  EXPECT_FALSE(accepts(g, call + "<think>x</think>"));
  EXPECT_FALSE(accepts(g, "<think>x</think>\n\n"));  // required: a call after it
  spec.syntax.think_end.clear();
  EXPECT_FALSE(compile_tools(spec).has_value());
}

// Seeded uniform walks over a Qwen-sized vocabulary whose <tool_call>, </tool_call>, <think> and
// </think> are special tokens: every marker is that one token (never spelled out, never a
// special token elsewhere), and the text between the markers is a call that parses.
TEST(ConstrainTools, MarkerTokensOfTheVocabularyAreTheMarkersAndNeverInsideJson) {
  const auto* tv = test_vocab("qwen152k");
  ASSERT_NE(tv, nullptr);
  const std::vector<std::string> markers = {"<tool_call>", "</tool_call>", "<think>", "</think>"};
  std::set<TokenId> marker_ids;
  for (const std::string& m : markers) {
    const auto id = tv->vocab->special_token(m);
    ASSERT_TRUE(id.has_value()) << m;
    marker_ids.insert(*id);
  }
  for (const ToolChoice choice : {ToolChoice::kRequired, ToolChoice::kAuto}) {
    ToolSpec spec = weather_tools(choice);
    spec.syntax.think_begin = "<think>";
    spec.syntax.think_end = "</think>";
    spec.syntax.token_markers = markers;
    const auto g = tools_grammar(spec);
    Matcher first(g, tv->vocab);
    std::vector<std::uint64_t> mask;
    first.fill_mask(mask);
    EXPECT_TRUE(bit(mask, *tv->vocab->special_token("<think>")));
    if (choice == ToolChoice::kRequired) {
      EXPECT_TRUE(bit(mask, *tv->vocab->special_token("<tool_call>")));
      EXPECT_FALSE(first.accept_bytes("<tool_call>"));  // not spelled out
    }
    int calls = 0;
    for (std::uint64_t seed = 1; seed <= 8; ++seed) {
      Matcher m(g, tv->vocab);
      m.set_token_budget(300);
      std::mt19937_64 rng(seed);
      std::string text;  // the output, a marker token as its text
      std::vector<TokenId> specials;
      while (!m.ended()) {
        m.fill_mask(mask);
        const auto ids = allowed_ids(mask);
        ASSERT_FALSE(ids.empty());
        // Markers and the end are rare among 150k tokens: pick them half the time they're there.
        // (This vocabulary's special tokens are its last ids, from 151,643.)
        std::vector<TokenId> rare;
        for (auto it = ids.rbegin(); it != ids.rend() && *it >= 151643; ++it) rare.push_back(*it);
        const TokenId id =
            !rare.empty() && rng() % 2 ? rare[rng() % rare.size()] : ids[rng() % ids.size()];
        for (const TokenId r : rare) {
          ASSERT_TRUE(marker_ids.count(r) == 1 || tv->vocab->is_eos(r))
              << tv->tokenizer->token_text(r);
        }
        if (marker_ids.count(id) != 0) specials.push_back(id);
        ASSERT_TRUE(m.accept_token(id));
        if (!tv->vocab->is_eos(id)) text += tv->tokenizer->token_bytes(id);
      }
      // Every marker text in the output is a marker token.
      std::size_t spelled = 0;
      for (const std::string& mk : markers) {
        for (std::size_t at = text.find(mk); at != std::string::npos; at = text.find(mk, at + 1))
          ++spelled;
      }
      EXPECT_EQ(spelled, specials.size()) << text;
      // Each call between its markers parses, names a declared function.
      for (std::size_t at = text.find("<tool_call>"); at != std::string::npos;
           at = text.find("<tool_call>", at + 1)) {
        const std::size_t end = text.find("</tool_call>", at);
        ASSERT_NE(end, std::string::npos) << text;
        const auto call = nlohmann::json::parse(text.substr(at + 11, end - at - 11));
        EXPECT_TRUE(call["name"] == "get_weather" || call["name"] == "now") << text;
        ++calls;
      }
    }
    EXPECT_GT(calls, 0);
  }
}

TEST(ConstrainThink, AFreeThinkBlockMayComeBeforeTheDocument) {
  const ThinkBlock think{"<think>", "</think>", {}};
  auto g = compile_json_schema(
      R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})", {}, think);
  ASSERT_TRUE(g.has_value()) << g.error().message;
  const auto s = std::make_shared<const Grammar>(std::move(g).value());
  EXPECT_TRUE(accepts(s, R"({"a":1})"));
  EXPECT_TRUE(accepts(s, "<think>free {not json\n</think>\n\n{\"a\":1}"));
  EXPECT_FALSE(accepts(s, "<think>x</think>not json"));
  EXPECT_FALSE(accepts(s, "<think>x</think>"));
  EXPECT_FALSE(accepts(s, R"({"a":1}<think>x</think>)"));
  const auto o = std::make_shared<const Grammar>(compile_json_object({}, think));
  EXPECT_TRUE(accepts(o, "<think>hm</think>{}"));
  EXPECT_FALSE(accepts(o, "<think>hm</think>[]"));
}

TEST(ConstrainTools, Errors) {
  ToolSpec spec = weather_tools(ToolChoice::kNamed);
  spec.named = "missing";
  auto a = compile_tools(spec);
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.error().message.find("missing"), std::string::npos);
  spec = weather_tools(ToolChoice::kRequired);
  spec.functions[0].parameters_json = R"({"type":"object","properties":{"a":{"not":{}}}})";
  auto b = compile_tools(spec);
  ASSERT_FALSE(b.has_value());
  EXPECT_NE(b.error().message.find("'#/tools/0/function/parameters/properties/a'"),
            std::string::npos)
      << b.error().message;
  spec = weather_tools(ToolChoice::kRequired);
  spec.functions[1].name = "get_weather";
  EXPECT_FALSE(compile_tools(spec).has_value());
}

// ---- cache -------------------------------------------------------------------------------

TEST(ConstrainCache, CompilesOncePerSchema) {
  GrammarCache cache(2);
  auto a = cache.json_schema(R"({"type":"string"})");
  auto b = cache.json_schema(R"({"type":"string"})");
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(a->grammar, b->grammar);
  EXPECT_EQ(a->hash, b->hash);
  EXPECT_EQ(a->hash.size(), 64u);
  EXPECT_EQ(cache.hits(), 1u);
  auto c = cache.json_schema(R"({"type":"integer"})");
  ASSERT_TRUE(c.has_value());
  EXPECT_NE(c->hash, a->hash);
  EXPECT_FALSE(cache.json_schema(R"({"not":{}})").has_value());
  EXPECT_EQ(cache.size(), 2u);
  auto d = cache.json_object();
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(cache.size(), 2u);  // bounded: the least recently used went
  auto t = cache.tools(weather_tools(ToolChoice::kAuto));
  auto t2 = cache.tools(weather_tools(ToolChoice::kRequired));
  ASSERT_TRUE(t.has_value() && t2.has_value());
  EXPECT_NE(t->hash, t2->hash);
}

// ---- token budgets ---------------------------------------------------------------------------

// With a token budget, the mask at each step equals a token-by-token check: a content token
// passes when the matcher accepts it and its shortest completion plus the end of generation
// fit the tokens left; when none does (a budget below the shortest document), those that
// shorten the way to the end. Returns whether the walk ended (end of generation) in time.
bool check_budget_masks(const testing::TestVocab& tv, const std::shared_ptr<const Grammar>& g,
                        std::uint64_t seed, std::uint64_t budget, bool state_masks,
                        std::string* out = nullptr) {
  Matcher m(g, tv.vocab);
  if (state_masks) m.set_state_mask_threshold(0);
  m.set_token_budget(budget);
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> mask;
  const auto n = static_cast<TokenId>(tv.vocab->size());
  for (std::uint64_t step = 0; step < budget && !m.ended(); ++step) {
    m.fill_mask(mask);
    std::vector<std::uint64_t> after(n, ~std::uint64_t{0});  // shortest completion, if accepted
    bool any_fits = false;
    for (TokenId id = 0; id < n; ++id) {
      Matcher probe = m;
      if (!probe.accept_token(id) || tv.vocab->is_eos(id)) continue;
      after[id] = probe.shortest_completion();
      any_fits = any_fits || after[id] + 2 <= m.token_budget();
    }
    std::vector<TokenId> allowed;
    for (TokenId id = 0; id < n; ++id) {
      bool expect = false;
      if (tv.vocab->is_eos(id)) {
        expect = m.is_complete();
      } else if (after[id] != ~std::uint64_t{0}) {
        expect = any_fits || m.is_complete() ? after[id] + 2 <= m.token_budget()
                                             : after[id] < m.shortest_completion();
      }
      EXPECT_EQ(bit(mask, id), expect)
          << tv.name << " step " << step << " budget " << m.token_budget() << " token " << id
          << " '" << tv.tokenizer->token_text(id) << "'";
      if (bit(mask, id)) allowed.push_back(id);
    }
    if (allowed.empty()) return false;
    const TokenId t = allowed[rng() % allowed.size()];
    EXPECT_TRUE(m.accept_token(t));
    if (out && !tv.vocab->is_eos(t)) *out += tv.vocab->bytes(t);
  }
  return m.ended();
}

// Long strings, a minimum of items with required members, an optional member: a random walk
// without a budget runs long; with one it closes in time.
constexpr const char* kBudgetSchema =
    R"({"type":"object","properties":{"s":{"type":"string","minLength":3,"maxLength":300},"xs":{"type":"array","items":{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a"]},"minItems":2},"opt":{"type":"string"},"n":{"type":"integer"}},"required":["s","xs","n"],"additionalProperties":false})";

TEST(ConstrainBudget, MasksEqualBruteForceAndEveryWalkEndsInTime) {
  const auto* tv = test_vocab("demo");
  const auto g = schema_grammar(kBudgetSchema);
  ASSERT_NE(g, nullptr);
  const std::uint64_t shortest = Matcher(g, tv->vocab).shortest_completion();
  // {"s":"___","xs":[{"a":""},{"a":""}],"n":0}
  EXPECT_EQ(shortest, std::string(R"({"s":"___","xs":[{"a":""},{"a":""}],"n":0})").size());
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const std::uint64_t budget = shortest + 1 + seed * 5;
    std::string out;
    EXPECT_TRUE(check_budget_masks(*tv, g, seed, budget, seed % 2 == 0, &out))
        << "seed " << seed << " budget " << budget << ": " << out;
    EXPECT_TRUE(nlohmann::json::accept(out)) << out;
  }
}

TEST(ConstrainBudget, StringFastPathsAndStateMasksRespectTheBudget) {
  const auto* tv = test_vocab("demo");
  for (const char* s : kMaskSchemas) {
    const auto g = schema_grammar(s);
    const std::uint64_t shortest = Matcher(g, tv->vocab).shortest_completion();
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      EXPECT_TRUE(check_budget_masks(*tv, g, seed, shortest + 1 + 3 * seed, seed == 2)) << s;
    }
  }
  // Free text before a tool call: the opening marker only while a whole call still fits.
  ToolSpec spec;
  spec.functions.push_back(
      {"f", R"({"type":"object","properties":{"q":{"type":"string"}},"required":["q"]})"});
  spec.choice = ToolChoice::kAuto;
  auto tg = compile_tools(spec);
  ASSERT_TRUE(tg.has_value());
  const auto tools = std::make_shared<const Grammar>(std::move(tg).value());
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    EXPECT_TRUE(check_budget_masks(*tv, tools, seed, 8 * seed, false));
  }
  if (const auto* llama = test_vocab("llama2")) {
    const auto g = schema_grammar(kMaskSchemas[0]);
    const std::uint64_t shortest = Matcher(g, llama->vocab).shortest_completion();
    EXPECT_TRUE(check_budget_masks(*llama, g, 5, shortest + 6, true));
  }
}

TEST(ConstrainBudget, BelowTheShortestDocumentTheOutputIsCutOnItsWayToTheEnd) {
  const auto* tv = test_vocab("demo");
  const auto g = schema_grammar(kBudgetSchema);
  const std::uint64_t shortest = Matcher(g, tv->vocab).shortest_completion();
  std::string out;
  EXPECT_FALSE(check_budget_masks(*tv, g, 3, shortest - 5, false, &out));
  // Every token shortened the way to the end: the rest is at most what was not written.
  Matcher m(g, tv->vocab);
  ASSERT_TRUE(m.accept_bytes(out)) << out;
  EXPECT_LE(m.shortest_completion() + out.size(), shortest) << out;
}

TEST(ConstrainBudget, WithoutABudgetTheSameWalksRunLong) {
  // The control: uniform walks without a budget are mostly far longer than the budgets above.
  const auto* tv = test_vocab("demo");
  const auto g = schema_grammar(kBudgetSchema);
  const std::uint64_t shortest = Matcher(g, tv->vocab).shortest_completion();
  int over = 0;
  std::vector<std::uint64_t> mask;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    Matcher m(g, tv->vocab);
    std::mt19937_64 rng(seed);
    std::uint64_t steps = 0;
    for (; steps < 2000 && !m.ended(); ++steps) {
      m.fill_mask(mask);
      const std::vector<TokenId> allowed = allowed_ids(mask);
      ASSERT_FALSE(allowed.empty());
      ASSERT_TRUE(m.accept_token(allowed[rng() % allowed.size()]));
    }
    if (steps > shortest + 1 + seed * 5) ++over;
  }
  EXPECT_GE(over, 4);
}

// ---- walks ---------------------------------------------------------------------------------

// Uniform random walks over the allowed tokens end (end of generation) within a bound the
// options imply, and what they write parses as JSON.
TEST(ConstrainWalk, UniformWalksTerminateAndParse) {
  const auto* tv = test_vocab("demo");
  CompileOptions o;
  o.max_string_chars = 12;
  o.max_array_items = 4;
  o.max_object_members = 4;
  o.max_any_depth = 3;
  const auto g = schema_grammar(kMaskSchemas[0], o);
  const auto free = std::make_shared<const Grammar>(compile_json_object(o));
  std::vector<std::uint64_t> mask;
  for (const auto& grammar : {g, free}) {
    for (std::uint64_t seed = 0; seed < 20; ++seed) {
      Matcher m(grammar, tv->vocab);
      std::mt19937_64 rng(seed);
      std::string out;
      int steps = 0;
      for (; steps < 5000 && !m.ended(); ++steps) {
        m.fill_mask(mask);
        const std::vector<TokenId> allowed = allowed_ids(mask);
        ASSERT_FALSE(allowed.empty());
        const TokenId t = allowed[rng() % allowed.size()];
        ASSERT_TRUE(m.accept_token(t));
        if (!tv->vocab->is_eos(t)) out += tv->vocab->bytes(t);
      }
      ASSERT_TRUE(m.ended()) << "seed " << seed << " did not end: " << out;
      EXPECT_TRUE(nlohmann::json::accept(out)) << out;
    }
  }
}

}  // namespace
}  // namespace ferry::constrain
