// TokenizerImpl: the pipeline a Tokenizer runs (specials split, normalizer, pre-tokenizer,
// model, decoder). Private to tokenizer/; filled by the loaders, immutable afterwards.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"

namespace ferry::tokenizer {

// Leftmost-longest matcher over a set of literal strings (special and added tokens).
class SpecialMatcher {
 public:
  struct Match {
    std::size_t pos;
    std::size_t len;
    TokenId id;
  };
  void add(std::string text, TokenId id, bool lstrip = false, bool rstrip = false);
  void finish();
  bool empty() const { return entries_.empty(); }
  // The first match at or after `from`; pos == npos when none. With lstrip/rstrip the match
  // includes the white space the token swallows.
  Match find(std::string_view text, std::size_t from) const;

 private:
  struct Entry {
    std::string text;
    TokenId id;
    bool lstrip;
    bool rstrip;
  };
  std::vector<Entry> entries_;
  std::unordered_map<std::string_view, std::size_t> by_text_;
  std::vector<std::size_t> lengths_;  // distinct lengths, longest first
  std::array<bool, 256> first_byte_{};
  int single_first_byte_ = -1;  // the only first byte, when all share one
};

enum class ModelKind {
  kBpe,        // merges by pair rank (tiktoken, HF BPE)
  kSpmScore,   // llama.cpp SentencePiece: bigrams by score, byte fallback
  kWordPiece,  // llama.cpp WPM (GGUF "bert"): words cut into the longest vocabulary strings
};

enum class PreKind {
  kNone,       // the whole segment is one piece
  kSplit,      // a SplitPattern
  kMetaspace,  // split before each U+2581
};

struct TokenizerImpl {
  std::string name;
  ModelKind model = ModelKind::kBpe;
  BpeModel bpe;

  // Normalization, applied to each segment between special tokens.
  bool nfc = false;
  bool spaces_to_metaspace = false;  // ' ' -> U+2581
  bool prepend_metaspace = false;    // U+2581 in front of a segment
  bool prepend_first_only = false;   // ... only the first segment of the input
  bool prepend_if_missing = false;   // ... unless it already starts with U+2581 (Metaspace)
  // llama.cpp SPM: a space in front of the text (and after a special token).
  bool spm_add_space_prefix = false;

  PreKind pre = PreKind::kSplit;
  SplitPattern pattern = SplitPattern::kCl100k;

  // Initial symbols: raw bytes (byte-level) or UTF-8 characters looked up as vocab strings.
  bool byte_level = true;
  bool whole_piece_first = true;  // a piece that is itself a token is that token
  bool merge_by_rank = false;     // tiktoken: merges by the rank of the concatenated bytes
  bool byte_fallback = false;
  TokenId unk_id = kNoToken;
  std::array<TokenId, 256> byte_ids{};  // byte-level symbol or <0xXX> fallback token

  // WordPiece (kWordPiece): BERT's normalizer options and the longest token, in bytes.
  bool wpm_lowercase = true;
  bool wpm_strip_accents = true;
  std::size_t wpm_max_token_len = 0;

  // SentencePiece scores (kSpmScore), by id.
  std::vector<float> scores;

  SpecialMatcher specials;
  std::unordered_map<TokenId, std::string> special_text;  // id -> content, for decode
  std::vector<TokenId> unused_ids;  // GGUF "unused" tokens (padding): never text

  // Decoding: per-id output bytes, and whether the very first output space is dropped.
  std::vector<std::string> decoded;  // empty: use bpe.token_bytes(id)
  bool strip_leading_space = false;

  std::vector<std::string> token_text;  // the file's spelling, for token_text()/token_id()
  std::unordered_map<std::string, TokenId> text_to_id;

  TokenId bos = kNoToken;
  TokenId eos = kNoToken;
  bool add_bos = false;
  bool add_eos = false;
  std::string chat_template;

  std::size_t vocab_size = 0;

  // Encodes a segment that contains no special token.
  void encode_segment(std::string_view text, bool first_segment, std::vector<TokenId>& out) const;
  void encode_piece(std::string_view piece, std::vector<TokenId>& out) const;
  // encode_piece without the whole-piece lookup.
  void encode_merged(std::string_view piece, std::vector<TokenId>& out) const;
  // A segment split by `pattern`, with the whole-piece lookups batched (whole_piece_first).
  void encode_split_pieces(std::string_view text, std::vector<TokenId>& out) const;
  void encode_spm(std::string_view text, std::vector<TokenId>& out) const;
  // WordPiece (wordpiece.cpp): the words of a segment, then each word's pieces.
  void wpm_words(std::string_view text, std::vector<std::string>& words) const;
  void encode_wpm(std::string_view text, std::vector<TokenId>& out) const;
  std::string_view output_bytes(TokenId id) const;
};

// Loaders (tiktoken.cpp, hf_tokenizer_json.cpp, gguf_vocab.cpp).
Result<std::unique_ptr<TokenizerImpl>> load_tiktoken_text(std::string name, std::string_view ranks,
                                                          SplitPattern pattern);
Result<std::unique_ptr<TokenizerImpl>> load_embedded_encoding(std::string_view name);
Result<std::unique_ptr<TokenizerImpl>> load_hf_tokenizer_json(const std::string& name,
                                                              std::string_view json_text);
Result<std::unique_ptr<TokenizerImpl>> load_gguf_vocab(const std::string& path);

// Shared helpers.
std::string nfc_normalize(std::string_view text);
// GPT-2 byte-level text ("Ġthe") to the bytes it stands for; ok=false if a character is not
// one of the 256 byte characters.
std::string byte_level_to_bytes(std::string_view text, bool& ok);
bool decode_base64(std::string_view in, std::string& out);

}  // namespace ferry::tokenizer
