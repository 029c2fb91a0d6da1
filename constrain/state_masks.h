// ferry::constrain::StateMasks: per grammar, the part of a token mask that does not depend on
// what lies below the top of a parse stack, by (vocabulary, rule, state, depth): the tokens a
// rule state accepts whatever called it, and the few that leave the rule and so need the real
// stack. Filled lazily by Matcher, only for states whose trie walk is expensive (broad regex
// classes, free text); shared by every Matcher of the grammar. Thread-safe (one mutex; masks
// are computed outside it), bounded in bytes.
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
    bool cheap = false;                            // the plain trie walk is cheap: nothing kept
    std::vector<std::uint64_t> accepted;           // tokens accepted in any context (a mask)...
    std::vector<tokenizer::TokenId> accepted_ids;  // ...or, when few (accepted empty), their ids
    std::vector<tokenizer::TokenId> uncertain;     // tokens to check against the real stack
    // The longest shortest-completion (bytes) of the frames the start becomes after an
    // accepted token: below + this within the budget means every accepted token fits.
    std::uint64_t max_after = 0;
  };
  static constexpr std::size_t kMaxBytes = std::size_t{256} << 20;
  // Accepted tokens are kept as ids when fewer than mask words / kSparse.
  static constexpr std::size_t kSparse = 2;

  std::shared_ptr<const Entry> find(std::uint64_t vocab, std::uint64_t key) const;
  void insert(std::uint64_t vocab, std::uint64_t key, std::shared_ptr<const Entry> entry);
  std::size_t bytes() const;
  // True the first time for this vocabulary: the caller then computes every entry up front
  // (Matcher::prepare_state_masks), once per grammar and vocabulary.
  bool claim_prepare(std::uint64_t vocab);

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, std::unordered_map<std::uint64_t, std::shared_ptr<const Entry>>>
      by_vocab_;
  std::size_t bytes_ = 0;
  std::unordered_map<std::uint64_t, bool> prepared_;  // by vocabulary
};

}  // namespace ferry::constrain
