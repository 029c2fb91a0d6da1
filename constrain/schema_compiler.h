// SchemaCompiler: turns schema documents into rules of one GrammarBuilder (schema.cpp); shared
// by compile_json_schema and the tool-call grammar (several documents, one grammar). Private
// to constrain/; one per compilation, not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "constrain/grammar.h"
#include "constrain/schema.h"

namespace ferry::constrain {

using Json = nlohmann::ordered_json;

// Parses a schema's JSON text (member order kept) after a linear pre-scan that refuses an
// object of more than kMaxMembers members (the ordered parse is quadratic in them), naming
// its path under `where`. Errors: kInvalidRequest.
inline constexpr std::size_t kMaxMembers = 1000;
Result<Json> parse_schema_text(std::string_view text, const std::string& where);

// The think block (if any) at the start of `root`; returns the state the body starts from.
std::uint32_t add_think_block(GrammarBuilder& b, const ThinkBlock& think, std::uint32_t root);

class SchemaCompiler {
 public:
  SchemaCompiler(GrammarBuilder& builder, const CompileOptions& options);

  // The rule of a whole document (its own `$ref` root); `where` prefixes error paths.
  Result<std::uint32_t> document_rule(const Json& document, const std::string& where);
  // Any JSON value (free-form), nested `depth` levels deep already.
  std::uint32_t any_rule(std::uint32_t depth);
  // Any JSON object (json_object).
  std::uint32_t any_object_rule();

 private:
  std::uint32_t node_rule(const Json& s, const std::string& path);
  std::uint32_t ref_rule(const std::string& ref, const std::string& path);
  std::uint32_t type_fragment(const std::string& type, const Json& s, const std::string& path,
                              std::uint32_t rule, std::uint32_t from);
  std::uint32_t object_fragment(const Json& s, const std::string& path, std::uint32_t rule,
                                std::uint32_t from);
  std::uint32_t map_fragment(std::uint32_t value_rule, std::uint32_t rule, std::uint32_t from);
  std::uint32_t array_fragment(const Json& s, const std::string& path, std::uint32_t rule,
                               std::uint32_t from);
  std::uint32_t array_of(std::uint32_t item_rule, std::uint64_t min_items, std::uint64_t max_items,
                         std::uint32_t rule, std::uint32_t from);
  std::uint32_t string_fragment(const Json& s, const std::string& path, std::uint32_t rule,
                                std::uint32_t from);
  std::uint32_t number_fragment(bool integer, const Json& s, const std::string& path,
                                std::uint32_t rule, std::uint32_t from);
  std::uint32_t enum_fragment(const Json& s, const std::string& path, std::uint32_t rule,
                              std::uint32_t from);
  void fail(std::string message);
  void unsupported(const std::string& keyword, const std::string& path,
                   const std::string& why = {});
  bool failed() const { return error_.has_value(); }

  GrammarBuilder& b_;
  const CompileOptions& opt_;
  const Json* doc_ = nullptr;
  std::string where_;
  std::map<std::string, std::uint32_t> refs_;   // JSON pointer -> rule, per document
  std::map<std::uint32_t, std::uint32_t> any_;  // depth -> rule
  std::optional<Error> error_;
  std::uint32_t depth_ = 0;  // node_rule nesting
};

}  // namespace ferry::constrain
