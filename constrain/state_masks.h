// ferry::constrain::StateMasks: per grammar, the part of a token mask that does not depend on
// what lies below the top of a parse stack, by (vocabulary, rule, state[, depth]): the tokens a
// rule state accepts whatever called it, and the few that leave the rule and so need the real
// stack; and, by exact parse stacks (a context), the tokens those stacks accept with each one's
// shortest completion after it (what a trie walk or a check of uncertain tokens found there).
// Filled lazily by Matcher; shared by every Matcher of the grammar. Thread-safe (one mutex;
// masks are computed outside it), bounded in bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ferry::constrain {

class StateMasks {
 public:
  struct Entry {
    bool cheap = false;    // the plain trie walk is cheap: nothing kept
    bool pending = false;  // seen once in an expensive walk: computed on the next visit
    std::vector<std::uint64_t> accepted;        // tokens accepted in any context
    std::vector<tokenizer::TokenId> uncertain;  // tokens to check against the real stack
    // The longest shortest-completion (bytes) of the frames the start becomes after an
    // accepted token: below + this within the budget means every accepted token fits.
    std::uint64_t max_after = 0;
    // The deepest stack (frames above the start's caller) at which the walk called a rule: the
    // entry holds for a start with fewer than kMaxFrames - call_height frames below it.
    std::size_t call_height = 0;
  };
  // What one context accepts: its key (the stacks, flattened) and each accepted token with
  // the shortest completion (bytes) of the stacks after it.
  struct Context {
    std::vector<std::uint32_t> key;
    std::vector<std::pair<tokenizer::TokenId, std::uint64_t>> tokens;
  };
  static constexpr std::size_t kMaxBytes = std::size_t{256} << 20;

  std::shared_ptr<const Entry> find(std::uint64_t vocab, std::uint64_t key) const;
  // Replaces a pending entry; else the first one inserted stays.
  void insert(std::uint64_t vocab, std::uint64_t key, std::shared_ptr<const Entry> entry);
  // By the key's hash; null unless the stored context has exactly this key.
  std::shared_ptr<const Context> find_context(std::uint64_t vocab, std::uint64_t hash,
                                              const std::vector<std::uint32_t>& key) const;
  void insert_context(std::uint64_t vocab, std::uint64_t hash,
                      std::shared_ptr<const Context> context);
  std::size_t bytes() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, std::unordered_map<std::uint64_t, std::shared_ptr<const Entry>>>
      by_vocab_;
  std::unordered_map<std::uint64_t,
                     std::unordered_map<std::uint64_t, std::shared_ptr<const Context>>>
      contexts_;
  std::size_t bytes_ = 0;
};

}  // namespace ferry::constrain
