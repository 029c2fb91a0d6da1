// Pre-tokenizers: the split patterns of GPT-2, cl100k_base (= Llama 3), o200k_base and Qwen2,
// written as hand-made matchers over code points with the exact semantics of the regexes, with
// byte-level fast paths where the text is ASCII.
// Pure functions over immutable tables; thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace ferry::tokenizer {

enum class SplitPattern {
  kGpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kCl100k,  // cl100k_base and Llama 3: (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|...
  kQwen2,   // as kCl100k with \p{N} (one digit a piece)
  kO200k,   // o200k_base: case-aware letter runs, contractions as suffixes
  // llama.cpp's default for byte-level BPE (tokenizer.ggml.pre "default" or absent): four
  // regexes, each splitting the pieces of the one before: [\p{P}\$\+<=>\^~\|]+, then GPT-2's
  // (as llama.cpp runs it: the pieces of the first regex bound its look-ahead), then \p{N}+,
  // then [0-9][0-9][0-9]. Unmatched text between matches is a piece of its own.
  kLlamaDefault,
};

// The byte offset where the piece that starts at `pos` ends (pos < text.size()). Every byte
// belongs to exactly one piece; invalid UTF-8 bytes are pieces' "other" characters.
std::size_t next_piece(SplitPattern pattern, std::string_view text, std::size_t pos);
// The same without the ASCII fast paths: every code point through the Unicode tables. The
// reference that tests hold next_piece() to.
std::size_t next_piece_by_code_points(SplitPattern pattern, std::string_view text, std::size_t pos);

// Recognises the regex source of a known split pattern (as written in tiktoken encodings and
// HF tokenizer.json files); nullopt for anything else.
std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex);

std::string_view split_pattern_name(SplitPattern pattern);

}  // namespace ferry::tokenizer
