// ferry::tokenizer::Tokenizer: exact prompt token counts, encode and decode for every model
// ferry serves (tiktoken encodings, HF tokenizer.json, GGUF vocabularies). A loaded Tokenizer
// is immutable: every const method is thread-safe and may run on any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace ferry::tokenizer {

using TokenId = std::uint32_t;

// Whether special/added-token text inside the input becomes its special token (as a model's
// rendered chat prompt needs) or is encoded as ordinary text (as untrusted user text needs).
enum class Specials { kAsText, kParse };

struct TokenizerImpl;

class Tokenizer {
 public:
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Where it came from: "cl100k_base", "o200k_base", or the file path.
  const std::string& name() const;

  // Appends the ids of `text` to `out`. Never adds BOS/EOS (see bos_id/add_bos).
  void encode(std::string_view text, std::vector<TokenId>& out,
              Specials specials = Specials::kAsText) const;
  std::vector<TokenId> encode(std::string_view text, Specials specials = Specials::kAsText) const;
  // The number of ids encode() would produce, without keeping them.
  std::size_t count(std::string_view text, Specials specials = Specials::kAsText) const;

  // The input as encode(Specials::kParse) splits it: each special token (`special`) and the run
  // of text before it, and the last run (runs may be empty: `first` is the run encode treats
  // as the input's first). encode() is encode_run of every run with the specials between.
  struct Piece {
    std::size_t offset = 0;
    std::size_t length = 0;
    std::optional<TokenId> special;
    bool first = false;
  };
  void split_specials(std::string_view text, std::vector<Piece>& out) const;
  // Appends the ids of a run that holds no special token, as encode() encodes it.
  void encode_run(std::string_view run, bool first, std::vector<TokenId>& out) const;

  // The bytes the ids stand for (special tokens as their text). Unknown ids are skipped.
  std::string decode(std::span<const TokenId> ids) const;
  // The bytes of one token as it appears in the middle of a text (no leading-space stripping).
  std::string token_bytes(TokenId id) const;
  // The vocabulary's string for an id as its file spells it (e.g. "Ġthe", "▁the", "<|im_end|>").
  std::string token_text(TokenId id) const;
  std::optional<TokenId> token_id(std::string_view token_text) const;
  // Whether an id is never ordinary text: a special, control or added token, the unknown
  // token, or an unused (padding) slot. Constrained decoding never allows these inside a value.
  bool is_special(TokenId id) const;

  std::size_t vocab_size() const;  // one past the largest id
  std::optional<TokenId> bos_id() const;
  std::optional<TokenId> eos_id() const;
  bool add_bos() const;  // whether the model expects BOS in front of a prompt
  bool add_eos() const;
  // The model's own chat template (Jinja source), empty when the file has none.
  const std::string& chat_template() const;

  const TokenizerImpl& impl() const { return *impl_; }

 private:
  std::unique_ptr<TokenizerImpl> impl_;
};

// Loads a tokenizer named by config: "cl100k_base" or "o200k_base" (embedded, no file), a
// path to a tiktoken rank file (*.tiktoken), a HF tokenizer.json, or a .gguf model file.
// Errors are values: unknown names, unreadable files, unsupported models or pre-tokenizers.
Result<std::shared_ptr<const Tokenizer>> load_tokenizer(std::string_view spec);

// Feeds ids one at a time and returns only complete UTF-8 text: a character split across
// tokens is held back until its last byte arrives. One per stream; not thread-safe.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer);
  std::string push(TokenId id);
  std::string finish();  // whatever is still held back (invalid bytes as they are)

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;
  bool first_ = true;
};

}  // namespace ferry::tokenizer
