// ferry::constrain::Matcher: one sequence's position in a Grammar over a Vocabulary. At each
// decoding step it gives the set of allowed token ids (a bit mask) and advances by the token
// the sampler chose. The position is a set of parse stacks (alternatives of anyOf, enum
// prefixes...), each at most kMaxFrames deep. One Matcher per sequence; not thread-safe. The
// Grammar and Vocabulary it shares are immutable.
//
// Mask computation walks the vocabulary's byte trie against the stacks, skipping a subtree at
// its first rejected byte; a stack inside a JSON string body uses the vocabulary's string
// tables instead (the tokens that stay inside, by character count, are one precomputed mask;
// only the tokens that close the string are checked against what follows it).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "constrain/grammar.h"
#include "constrain/vocabulary.h"

namespace ferry::constrain {

class Matcher {
 public:
  static constexpr std::size_t kMaxFrames = 64;   // nesting bound (rule calls)
  static constexpr std::size_t kMaxStacks = 128;  // alternatives kept (more: the first ones)

  Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocabulary);

  // Bit i of mask[i / 64] set: token i may come next. mask gets vocabulary().mask_words()
  // words. End-of-generation ids are allowed exactly where the document is complete.
  void fill_mask(std::vector<std::uint64_t>& mask);
  // Advances by a token; false (and no change) when the grammar does not allow it. An
  // end-of-generation id is accepted when the document is complete and ends the matcher.
  bool accept_token(TokenId id);
  // Advances by raw bytes (tests, forced text); false (and no change) when not allowed.
  bool accept_bytes(std::string_view bytes);

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
  static bool complete(const Stacks& s);
  bool in_string_body(const Stacks& s, std::size_t i) const;
  void walk_trie(const Stacks& start, std::vector<std::uint64_t>& mask);
  void string_fast_path(const Stacks& s, std::size_t i, std::vector<std::uint64_t>& mask);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const Vocabulary> vocab_;
  Stacks cur_;
  bool ended_ = false;
  // Scratch, kept between steps.
  std::vector<Stacks> levels_;
  mutable std::vector<Frame> tmp_;
  Stacks a_, b_, rest_;
};

}  // namespace ferry::constrain
