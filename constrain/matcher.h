// ferry::constrain::Matcher: one sequence's position in a Grammar over a Vocabulary. At each
// decoding step it gives the set of allowed token ids (a bit mask) and advances by the token
// the sampler chose. The position is a set of parse stacks (alternatives of anyOf, enum
// prefixes...), each at most kMaxFrames deep. One Matcher per sequence; not thread-safe. The
// Grammar and Vocabulary it shares are immutable.
//
// Mask computation walks the vocabulary's byte trie against the stacks, skipping a subtree at
// its first rejected byte; a stack inside a JSON string body uses the vocabulary's string
// tables instead (the tokens that stay inside, by character count, are one precomputed mask;
// only the tokens that close the string are checked against what follows it). A rule state whose
// walk is expensive keeps, in the grammar's StateMasks, what it accepts in any context; later
// steps (of any sequence) in that state check only the tokens that leave the rule.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "constrain/grammar.h"
#include "constrain/state_masks.h"
#include "constrain/vocabulary.h"

namespace ferry::constrain {

class Matcher {
 public:
  static constexpr std::size_t kMaxFrames = 64;   // nesting bound (rule calls)
  static constexpr std::size_t kMaxStacks = 128;  // alternatives kept (more: the first ones)
  static constexpr std::size_t kCheapNodes = 16;  // trie nodes below which no state mask is kept
  // prepare_state_masks stops past these (json_object: 1,798 entries, 0.7 MB at 152k tokens).
  static constexpr std::size_t kPrepareStates = 16384;
  static constexpr std::size_t kPrepareBytes = std::size_t{32} << 20;

  Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocabulary);

  // Bit i of mask[i / 64] set: token i may come next. mask gets vocabulary().mask_words()
  // words. End-of-generation ids are allowed exactly where the document is complete.
  void fill_mask(std::vector<std::uint64_t>& mask);
  // Advances by a token; false (and no change) when the grammar does not allow it. An
  // end-of-generation id is accepted when the document is complete and ends the matcher.
  bool accept_token(TokenId id);
  // Advances by raw bytes (tests, forced text); false (and no change) when not allowed.
  bool accept_bytes(std::string_view bytes);

  // Tokens that may still be sampled, the end-of-generation id included (max_tokens at the
  // start); every accept_token spends one. With a budget, a token is allowed only when the
  // shortest completion after it (in bytes, each a token at worst) and the end-of-generation id
  // still fit, so the document always closes in time; when even the shortest one cannot fit,
  // only tokens that shorten the way to the end are allowed (the output is then cut: length).
  // Default: no budget.
  static constexpr std::uint64_t kNoBudget = ~std::uint64_t{0};
  void set_token_budget(std::uint64_t tokens) { budget_ = tokens; }
  std::uint64_t token_budget() const { return budget_; }
  // Fewest bytes that complete the document from here (0 when complete).
  std::uint64_t shortest_completion() const { return min_cost(cur_); }

  // Computes the state mask of every rule state now (in the grammar's StateMasks, for this
  // vocabulary), and the vocabulary's tables of the grammar's class runs, so that no later step
  // of any sequence walks a state for the first time. State masks only
  // for grammars whose stacks stay below kMaxFrames (the entries of others depend on the
  // depth; they fill as sequences reach them), and at most kPrepareStates states or until the
  // grammar's masks hold kPrepareBytes. Returns the entries kept (expensive states).
  // Costs a trie walk per state: run it off the request path (a compile thread).
  std::size_t prepare_state_masks();

  // States whose trie walk visits fewer nodes than this keep no state mask (default
  // kCheapNodes; 0 keeps one for every rule state: tests compare both ways).
  void set_state_mask_threshold(std::size_t nodes) { cheap_nodes_ = nodes; }

  bool is_complete() const;  // what was accepted is a whole document
  bool is_dead() const;      // nothing can follow (a grammar bug or an exotic vocabulary)
  bool ended() const { return ended_; }  // an end-of-generation id was accepted
  const Vocabulary& vocabulary() const { return *vocab_; }

 private:
  struct Frame {
    std::uint32_t rule;
    std::uint32_t state;
    std::uint32_t count;  // kString: characters so far
    bool operator==(const Frame& o) const {
      return rule == o.rule && state == o.state && count == o.count;
    }
  };
  // A set of stacks, flat: stack i is frames[begin(i), ends[i]).
  struct Stacks {
    std::vector<Frame> frames;
    std::vector<std::uint32_t> ends;
    void clear() {
      frames.clear();
      ends.clear();
    }
    std::size_t size() const { return ends.size(); }
    std::uint32_t begin(std::size_t i) const { return i == 0 ? 0 : ends[i - 1]; }
  };

  void closure(std::vector<Frame>& stack, Stacks& out) const;
  void push(const std::vector<Frame>& stack, Stacks& out) const;
  void advance(const Stacks& in, std::uint8_t b, Stacks& out) const;
  bool advance_bytes(const Stacks& in, std::string_view bytes, Stacks& out) const;
  static void dedup(Stacks& s);
  std::uint64_t frame_cost(const Frame& f) const;
  std::uint64_t stack_cost(const Stacks& s, std::size_t i) const;
  std::uint64_t min_cost(const Stacks& s) const;
  // The stacks' shortest completion is within limit_ (always, without a budget).
  bool fits(const Stacks& s) const;
  void fill_content(std::vector<std::uint64_t>& mask);
  void keep_for_walk(const Stacks& s, std::size_t i);
  static bool complete(const Stacks& s);
  bool in_string(const Stacks& s, std::size_t i) const;  // its top frame is a string
  bool in_run(const Stacks& s, std::size_t i) const;
  // Returns the trie nodes visited. With `uncertain`, tokens that need the stack below the
  // start (they pop it and go on) are listed there instead of being decided.
  // With `max_after`, the largest shortest-completion of an accepted token's stacks.
  std::size_t walk_trie(const Stacks& start, std::vector<std::uint64_t>& mask,
                        std::vector<TokenId>* uncertain = nullptr,
                        std::uint64_t* max_after = nullptr);
  std::shared_ptr<const StateMasks::Entry> state_entry(const Stacks& s, std::size_t i);
  std::shared_ptr<const StateMasks::Entry> state_entry(const Frame& top, std::uint32_t depth);
  void apply_entry(const StateMasks::Entry& e, const Stacks& s, std::size_t i,
                   std::vector<std::uint64_t>& mask);
  void string_fast_path(const Stacks& s, std::size_t i, std::vector<std::uint64_t>& mask);
  void marker_tokens(std::vector<std::uint64_t>& mask);
  template <typename Fn>
  void each_marker_edge(Fn fn);
  void take_marker(std::size_t i, const MarkerEdge& e, Stacks& out);
  bool accept_marker(TokenId id);
  bool run_fast_path(const Stacks& s, std::size_t i, std::vector<std::uint64_t>& mask);
  template <typename Items, typename Keep, typename IdOf, typename RestOf>
  void check_sorted(const Stacks& start, const Items& items, Keep keep, IdOf id_of, RestOf rest_of,
                    std::vector<std::uint64_t>& mask);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::vector<std::optional<TokenId>> marker_ids_;  // Grammar::markers in this vocabulary
  Stacks cur_;
  bool ended_ = false;
  static constexpr std::int64_t kUnlimited = INT64_MAX;
  std::uint64_t budget_ = kNoBudget;
  std::int64_t limit_ = kUnlimited;  // fill_mask: longest completion allowed after a token
  // Scratch, kept between steps.
  std::vector<Stacks> levels_;
  mutable std::vector<Frame> tmp_;
  Stacks a_, b_, rest_, after_;
  mutable Stacks bytes_scratch_;  // advance_bytes
  Stacks one_;
  std::vector<char> marker_;              // walk_trie: the start was popped on this path
  mutable std::size_t depth_offset_ = 0;  // frames below the stack being walked (state_entry)
  std::size_t cheap_nodes_ = kCheapNodes;
};

}  // namespace ferry::constrain
