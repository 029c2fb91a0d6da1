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
// forgotten), and a sequence that keeps a drafted token with probability alpha gets k drafted
// tokens only where (1 + E(k)) / (a / n + b * (1 + k)) - tokens per unit of time, E(k) = alpha +
// ... + alpha^k kept on average, n sequences sharing the step's fixed cost - is the best over
// 0..k and beats no draft by kMinDraftGain at least: a predicted gain smaller than that is within
// what the fit cannot see (the drafter, the KV truncation, a rejected row's sampling), so it
// is not worth the risk of a slower sequence. A memory-bound model (b small against a) drafts in
// full; a compute-bound one, whose drafted positions cost about what the tokens they save do,
// not at all. Scheduler thread only.
inline constexpr double kMinDraftGain = 0.10;

class DraftCost {
 public:
  // One decode step: `positions` entries forwarded and sampled in `seconds`.
  void observe(int64_t positions, double seconds);
  // The number of tokens (0..limit) to draft for a sequence with acceptance estimate `alpha`
  // in a step of `sequences` decoding sequences; `limit` while the fit is not yet known.
  int64_t best_draft(int64_t limit, double alpha, int64_t sequences) const;
  bool known() const;
  // True when the fit says a drafted position costs at most a quarter of what a one-token step
  // does (a memory-bound model: the weights are read once for all positions). Then a draft
  // that is seldom kept still pays, and PromptLookup's back-off after misses is not wanted.
  bool drafts_nearly_free() const;

 private:
  // The fitted step time a + b * positions (least squares over the decayed sums).
  void line(double& a, double& b) const;
  double n_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;  // decayed sums over steps
};

// The longest suffix a lookup tries to match (longer ones are not searched further).
inline constexpr int64_t kMaxLookupMatch = 8;

class PromptLookup {
 public:
  PromptLookup(const SpeculativeOptions& options, std::span<const TokenId> prompt);

  // A token the sequence emitted (appended to what later drafts look in).
  void push(TokenId token) { tokens_.push_back(token); }
  // Proposes up to `limit` tokens to follow the sequence's tokens so far into `out` (emptied
  // first). Empty when nothing matches, when limit <= 0, or while backing off after misses
  // (unless `back_off` is false: drafts nearly free, DraftCost::drafts_nearly_free).
  void draft(int64_t limit, std::vector<TokenId>& out, bool back_off = true);
  // The verifier took `accepted` of the `drafted` tokens of the last draft: a draft taken whole
  // doubles the next one's length (up to max_draft), a partial one sets it near what was taken,
  // and a draft with none taken makes the next drafts wait 1, 2, 4, ... up to 16 steps, so a
  // sequence that does not repeat itself costs almost nothing.
  void feedback(int64_t drafted, int64_t accepted);

  const std::vector<TokenId>& tokens() const { return tokens_; }
  // The chance that a drafted token is kept, from this sequence's recent drafts (0.5 at first).
  double acceptance() const { return (kept_ + 1.0) / (drafted_ + 2.0); }

 private:
  double kept_ = 0, drafted_ = 0;  // decayed counts
  int64_t max_draft_;
  int64_t min_match_;
  int64_t cap_;         // the next draft's length, at most
  int64_t misses_ = 0;  // drafts in a row of which nothing was taken
  int64_t skip_ = 0;    // steps left before the next draft
  std::vector<TokenId> tokens_;
};

// Finds the longest suffix of `tokens` (at least min_match, at most kMaxLookupMatch tokens)
// that also ends earlier in `tokens`, the most recent occurrence on ties, and writes up to
// `limit` tokens that followed that occurrence into `out` (continuing periodically when the
// occurrence overlaps the suffix). Returns the suffix length matched (0: no draft).
int64_t lookup_draft(std::span<const TokenId> tokens, int64_t min_match, int64_t limit,
                     std::vector<TokenId>& out);

}  // namespace ferry::engine
