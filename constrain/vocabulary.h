// ferry::constrain::Vocabulary: a model's tokens as the constraint engine walks them: the bytes
// of every ordinary token in a byte trie (pre-order, so a rejected prefix skips its subtree),
// the end-of-generation ids, the tables of the JSON-string fast path (per string sub-state:
// which tokens stay inside, with how many characters, and which close it), and, made on first
// use, the tables of class runs (kRun). Built once per model; every const method is
// thread-safe (the run tables are made under a mutex, then immutable).
#pragma once

#include <bitset>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "constrain/grammar.h"
#include "tokenizer/tokenizer.h"

namespace ferry::constrain {

using TokenId = tokenizer::TokenId;

// One step of a kString frame's sub-state machine (grammar.h) on byte b.
struct StringStep {
  std::uint32_t next = 0;
  bool ok = false;        // the byte may come here
  bool new_char = false;  // it starts a character (counts against max_chars)
  bool close = false;     // it is the closing quote
  bool astral = false;    // the character it starts is above U+FFFF (two UTF-16 units)
};
StringStep string_step(std::uint32_t state, std::uint8_t b);

class Vocabulary {
 public:
  struct TrieNode {
    std::uint8_t byte = 0;
    std::uint16_t depth = 0;   // 1 for a token's first byte
    std::uint32_t skip = 0;    // the index just past this node's subtree
    std::uint32_t tokens = 0;  // [tokens, tokens_end) in token_list()
    std::uint32_t tokens_end = 0;
  };
  // A token that closes a string from the body state: characters before the quote (in UTF-16
  // units, and in code points), and where the bytes after the quote start.
  struct StringExit {
    TokenId id = 0;
    std::uint32_t chars = 0;
    std::uint32_t points = 0;
    std::uint32_t suffix = 0;
  };
  static constexpr std::uint32_t kMaxInsideChars = 32;  // inside_le(k) for k up to this

  // The tokens of a class run (RuleKind::kRun) whose first byte is in the class: those made
  // only of class bytes (`inside`, by length, ascending; with `dense`, inside_le(k) masks for
  // k up to kMaxInsideChars hold those of at most k bytes and `inside` only the longer ones),
  // and those that leave it after `run` bytes, by the first byte outside it.
  struct RunExit {
    TokenId id = 0;
    std::uint32_t run = 0;  // class bytes before the first byte outside the class
  };
  struct RunTable {
    bool dense = false;
    std::vector<std::uint64_t> inside_le;  // dense: (kMaxInsideChars + 1) masks
    std::vector<std::pair<TokenId, std::uint32_t>> inside;
    std::vector<std::vector<RunExit>> exits = std::vector<std::vector<RunExit>>(256);
  };
  static constexpr std::size_t kMaxRunTables = 64;  // classes kept; more: null (trie walks)
  static constexpr std::size_t kDenseRun = 2048;    // inside tokens from which masks pay
  // The table of a class (ASCII bytes only), made on first use; null past kMaxRunTables.
  std::shared_ptr<const RunTable> run_table(const std::bitset<256>& bytes) const;

  // Every id below tokenizer.vocab_size() that is not special (Tokenizer::is_special), has
  // bytes and is not an end-of-generation id goes into the trie.
  static std::shared_ptr<const Vocabulary> build(const tokenizer::Tokenizer& tokenizer,
                                                 std::vector<TokenId> eos_ids);

  std::size_t size() const { return size_; }        // mask bits
  std::uint64_t serial() const { return serial_; }  // names this vocabulary in caches
  std::size_t mask_words() const { return (size_ + 63) / 64; }
  std::string_view bytes(TokenId id) const {
    return id < offsets_.size() - 1
               ? std::string_view(arena_).substr(offsets_[id], offsets_[id + 1] - offsets_[id])
               : std::string_view();
  }
  const std::vector<TokenId>& eos() const { return eos_; }
  bool is_eos(TokenId id) const;
  // The special token (not an end-of-generation one) whose text this is: a marker the grammar
  // may write as one token (MarkerEdge). Null when the vocabulary has none.
  std::optional<TokenId> special_token(std::string_view text) const;
  bool is_special(TokenId id) const { return id < special_.size() && special_[id]; }
  const std::vector<TrieNode>& trie() const { return trie_; }
  const std::vector<TokenId>& token_list() const { return trie_tokens_; }
  std::uint16_t max_depth() const { return max_depth_; }

  // String fast path, from string sub-state `state` (below kStrStates; kStrOpen: the opening
  // quote first): tokens that stay inside the string with at most k characters (UTF-16 units,
  // as every count of the tables).
  const std::uint64_t* inside_le(std::uint32_t state, std::uint32_t k) const {
    return tables_[state].inside_le.data() + static_cast<std::size_t>(k) * mask_words();
  }
  // Tokens inside a string with more than kMaxInsideChars characters: (id, chars).
  const std::vector<std::pair<TokenId, std::uint32_t>>& long_inside(std::uint32_t state) const {
    return tables_[state].long_inside;
  }
  // String exits by the first byte after the quote; bucket 256: nothing after it.
  const std::vector<StringExit>& exits(std::uint32_t state, std::uint32_t first_byte) const {
    return tables_[state].exits[first_byte];
  }

 private:
  void build_trie(const std::vector<TokenId>& ids);
  void build_string_tables(const std::vector<TokenId>& ids, std::uint32_t state);

  std::size_t size_ = 0;
  std::uint64_t serial_ = 0;
  std::string arena_;
  std::vector<std::uint32_t> offsets_;
  std::vector<TokenId> eos_;
  std::map<std::string, TokenId, std::less<>> specials_;  // by text
  std::vector<bool> special_;
  std::vector<TrieNode> trie_;
  std::vector<TokenId> trie_tokens_;
  std::uint16_t max_depth_ = 0;
  struct StringTables {
    std::vector<std::uint64_t> inside_le;  // (kMaxInsideChars + 1) masks
    std::vector<std::pair<TokenId, std::uint32_t>> long_inside;
    std::vector<std::vector<StringExit>> exits = std::vector<std::vector<StringExit>>(257);
  };
  std::vector<StringTables> tables_ = std::vector<StringTables>(kStrStates);  // by sub-state
  mutable std::mutex run_mu_;
  mutable std::map<std::string, std::shared_ptr<const RunTable>> runs_;  // by class bits
};

}  // namespace ferry::constrain
