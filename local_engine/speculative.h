// Speculative decoding's drafts without a second model: prompt lookup (n-gram drafting). A
// sequence's longest recent suffix found earlier in its own tokens (prompt + output so far)
// proposes the tokens that followed it there; the scheduler verifies them in one forward pass.
// One PromptLookup per sequence, used by the scheduler thread only (not thread-safe).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ferry::engine {

using TokenId = int32_t;

struct SpeculativeOptions {
  bool enabled = true;    // mode: prompt_lookup (true) | off (false)
  int64_t max_draft = 8;  // K: drafted tokens verified with a sequence's next token, at most
  int64_t min_match = 2;  // the shortest suffix (tokens) whose earlier occurrence may propose
  // Draft only as many tokens as pay on this model and machine (DraftCost below); false: the
  // drafter's own length (tests that need drafts whatever the timings).
  bool cost_gate = true;
};

// Whether drafted tokens pay: a decode step's time (the forward pass and the sampling of its
// rows) is fitted as a + b * positions over recent decode steps (least squares, older steps
// forgotten), and a sequence whose drafted tokens are each kept with probability alpha (given
// the one before was; DraftOdds) gets k drafted tokens only where (1 + E(k)) / (a / n + b * (1 +
// k)) - tokens per unit of time, E(k) = alpha + ... + alpha^k kept on average, n sequences
// sharing the step's fixed cost - is the best over 0..k and beats no draft by kMinDraftGain at
// least: a predicted gain smaller than that is within what the fit cannot see (the drafter, the
// KV truncation, a rejected row's sampling), so it is not worth the risk of a slower sequence.
// A memory-bound model (b small against a) drafts what is likely to be kept; a compute-bound
// one, whose drafted positions cost about what the tokens they save do, only nearly sure
// drafts. Scheduler thread only.
inline constexpr double kMinDraftGain = 0.10;

class DraftCost {
 public:
  // One decode step: `positions` entries forwarded and sampled in `seconds`.
  void observe(int64_t positions, double seconds);
  // The number of tokens (0..limit) to draft for a sequence with acceptance estimate `alpha`
  // in a step of `sequences` decoding sequences; `limit` while the fit is not yet known.
  int64_t best_draft(int64_t limit, double alpha, int64_t sequences) const;
  // Once steps of different sizes have been seen. The line is refitted whenever the recent
  // steps still differ in size; while they do not (every step drafting the same length, or none
  // drafting), the last line fitted stands: a window of one size says nothing about the slope.
  bool known() const { return known_; }
  // How many declined drafts a one-token draft may be spread over so that it costs at most 1 %
  // of their steps (DraftOdds::explore): 16 at least, more where a drafted position is dear.
  int64_t explore_interval(int64_t sequences) const;

 private:
  double n_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;  // decayed sums over steps
  bool known_ = false;
  double a_ = 0, b_ = 0;  // the last line fitted: a + b * positions seconds
};

// How often drafted tokens are kept, over every sequence of one scheduler, by the class of the
// draft: how long the suffix that proposed it was (a suffix of 8 tokens seen before nearly
// always goes on as it did, one of 2 often does not) and whether the sequence samples or is
// greedy. Drafting decisions come from these counts and DraftCost's line, not from one
// sequence's luck: a sequence whose last draft failed still drafts after a long match, and
// one that has just matched 2 tokens of a sampled text does not. Scheduler thread only.
class DraftOdds {
 public:
  // The chance that a drafted token of this class is kept, given the one before it was.
  double acceptance(int64_t match, bool sampled) const;
  // A draft of this class: `drafted` tokens verified, the first `accepted` of them kept.
  void observe(int64_t match, bool sampled, int64_t drafted, int64_t accepted);
  // Called when the cost model declines a draft of this class: true for every `every`-th one
  // (DraftCost::explore_interval), which is then drafted anyway (one token), so that a class
  // whose estimate fell is measured again instead of never drafting again.
  bool explore(int64_t match, bool sampled, int64_t every);

 private:
  struct Cell {
    double kept = 0, drafted = 0;  // decayed counts
    int64_t declined = 0;
  };
  static constexpr int kMatchClasses = 6;  // suffixes of 1, 2, 3, 4, 5-7 and 8 tokens
  static size_t cell(int64_t match, bool sampled);
  Cell cells_[2 * kMatchClasses];
};

// The longest suffix a lookup tries to match (longer ones are not searched further).
inline constexpr int64_t kMaxLookupMatch = 8;

class PromptLookup {
 public:
  PromptLookup(const SpeculativeOptions& options, std::span<const TokenId> prompt);

  // A token the sequence emitted (appended to what later drafts look in).
  void push(TokenId token) { tokens_.push_back(token); }
  // Proposes up to min(limit, max_draft) tokens to follow the sequence's tokens so far into
  // `out` (emptied first), and returns the length of the suffix that proposed them (0: none
  // matched, `out` empty).
  int64_t draft(int64_t limit, std::vector<TokenId>& out) const;

 private:
  int64_t max_draft_;
  int64_t min_match_;
  std::vector<TokenId> tokens_;
};

// Finds the longest suffix of `tokens` (at least min_match, at most kMaxLookupMatch tokens)
// that also ends earlier in `tokens`, the most recent occurrence on ties, and writes up to
// `limit` tokens that followed that occurrence into `out` (continuing periodically when the
// occurrence overlaps the suffix). Returns the suffix length matched (0: no draft).
int64_t lookup_draft(std::span<const TokenId> tokens, int64_t min_match, int64_t limit,
                     std::vector<TokenId>& out);

}  // namespace ferry::engine
