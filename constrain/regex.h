// The regular-expression subset a schema `pattern` may use, compiled into a GrammarBuilder
// fragment over the raw bytes of a JSON string's content. Stateless functions; thread-safe.
//
// Supported: literals (any character; metacharacters escaped with `\`), `.`, classes `[a-z_]`
// and `[^...]` of ASCII characters, `\d \w \s \D \W \S`, groups `(...)`, `(?:...)`,
// `(?<name>...)`, alternation `|`, quantifiers `* + ? {n} {n,} {n,m}` (a lazy `?` after one
// is accepted: same language), `^` at the start and `$` at the end. The generated language is
// a subset of the pattern's: every pattern is matched whole (a full match is also a match
// anywhere); `.` and negated classes stand for printable ASCII only; `"` and `\` are never
// generated (they would need a JSON escape); unbounded repetition is capped at `max_repeat`
// more. Refused, with a message: backreferences, lookaround, `\b`, anchors inside, control
// characters (escaped or not), non-ASCII characters inside classes, a class that leaves
// nothing to generate. An escaped non-ASCII character outside a class is that character.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"
#include "constrain/grammar.h"

namespace ferry::constrain {

struct RegexLimits {
  std::uint32_t max_repeat = 32;    // what `*`, `+` and `{n,}` allow beyond their minimum
  std::size_t max_states = 200000;  // of the whole grammar, after the pattern
};

// Adds the pattern's language as a fragment starting at `from` in `rule`; returns its end
// state, or an error whose message explains what is not supported.
Result<std::uint32_t> add_pattern(GrammarBuilder& builder, std::uint32_t rule, std::uint32_t from,
                                  std::string_view pattern, const RegexLimits& limits);

}  // namespace ferry::constrain
