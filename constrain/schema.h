// JSON Schema (the structured-outputs subset) and `json_object` compiled into a Grammar whose
// language is a subset of the schema's valid documents. Stateless functions; thread-safe.
//
// Supported: `type` (one or a list of object, array, string, number, integer, boolean, null),
// `properties` (generated in declared order; required ones always, optional ones may be
// left out; no other members are generated), `required`, `additionalProperties` (false, true,
// or a schema for objects without properties), `enum`, `const`, `anyOf`, `allOf` of one
// schema, `$ref` to `#` or a JSON pointer inside the document (`$defs`, `definitions`;
// recursion allowed), `items` (one schema), `minItems`/`maxItems`, string `pattern` (the
// subset in regex.h), `format` date, time, date-time, uuid, email (generated from a strict
// subset of each: e.g. days 01-28 in February, times with a Z or an offset),
// `minLength`/`maxLength`, and `minimum`/`maximum`/`exclusiveMinimum`/`exclusiveMaximum`
// (integers exactly; a bounded `number` is generated as an integer in its range), OpenAPI's
// `nullable` beside `type` (what zod's .nullable() writes: null allowed too). Annotations
// (title, description, default, examples, $comment, $schema, $id, deprecated, readOnly,
// writeOnly) are accepted. Any other keyword is an error naming it and its JSON pointer path.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "constrain/grammar.h"
#include "constrain/regex.h"

namespace ferry::constrain {

// Bounds that make every generation finish: whitespace between tokens, string and number
// lengths, collection sizes when the schema sets none, and the nesting of free-form values.
struct CompileOptions {
  std::uint32_t max_whitespace = 2;       // bytes of white space at each structural gap
  std::uint32_t max_string_chars = 512;   // a string without maxLength
  std::uint32_t max_array_items = 64;     // an array without maxItems (beyond minItems)
  std::uint32_t max_object_members = 32;  // a free-form object or map
  std::uint32_t max_any_depth = 6;        // nesting of free-form (untyped) values
  std::uint32_t max_integer_digits = 15;  // |value| < 10^15 keeps JSON numbers exact in JS
  std::uint32_t max_schema_depth = 48;    // nesting of subschemas in the document
  // regex.max_states also bounds the whole grammar: a bigger schema (huge enums, thousands
  // of properties) is refused before it is built.
  RegexLimits regex;
};

// An optional think block before the document (a thinking template, Qwen3): free text between
// `begin` and `end`, then white space, then the document. Empty markers: no think block. A
// marker listed in `token_markers` is written as the vocabulary's own token (see tools.h).
struct ThinkBlock {
  std::string begin;
  std::string end;
  std::vector<std::string> token_markers;
};

// Compiles the schema given as JSON text (the declared property order is read from the
// text). Errors (kInvalidRequest) name the keyword and its path, e.g.
// "JSON Schema keyword 'not' at '/properties/a' is not supported"; a schema nested deeper
// than max_schema_depth, or whose grammar would pass regex.max_states states, or that admits
// no finite document, is refused too (time and memory stay bounded whatever the input).
Result<Grammar> compile_json_schema(std::string_view schema_json,
                                    const CompileOptions& options = {},
                                    const ThinkBlock& think = {});

// `response_format: json_object`: any JSON object (bounded as above).
Grammar compile_json_object(const CompileOptions& options = {}, const ThinkBlock& think = {});

}  // namespace ferry::constrain
