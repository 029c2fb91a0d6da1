#include "constrain/matcher.h"

#include <algorithm>

namespace ferry::constrain {

Matcher::Matcher(std::shared_ptr<const Grammar> grammar,
                 std::shared_ptr<const Vocabulary> vocabulary)
    : grammar_(std::move(grammar)), vocab_(std::move(vocabulary)) {
  for (const std::string& m : grammar_->markers) marker_ids_.push_back(vocab_->special_token(m));
  std::vector<Frame> start{Frame{grammar_->root, grammar_->rules[grammar_->root].start, 0}};
  closure(start, cur_);
  dedup(cur_);
}

// ---- stacks ------------------------------------------------------------------------------

void Matcher::push(const std::vector<Frame>& stack, Stacks& out) const {
  if (out.size() >= kMaxStacks) return;
  out.frames.insert(out.frames.end(), stack.begin(), stack.end());
  out.ends.push_back(static_cast<std::uint32_t>(out.frames.size()));
}

// Adds to `out` every stack reachable from `stack` without reading a byte (epsilon moves, rule
// calls, returns), stopping at states that read one. Leaves `stack` as it found it. An empty
// stack (the root returned) means the document is complete.
void Matcher::closure(std::vector<Frame>& stack, Stacks& out) const {
  if (out.size() >= kMaxStacks) return;
  if (stack.empty()) {
    push(stack, out);
    return;
  }
  const std::size_t top = stack.size() - 1;
  const Rule& rule = grammar_->rules[stack[top].rule];
  if (rule.kind == RuleKind::kString) {
    push(stack, out);
    return;
  }
  if (rule.kind == RuleKind::kRun) {
    const Frame f = stack[top];
    if (f.count < rule.max_chars) push(stack, out);
    if (f.count >= rule.min_chars) {
      stack.pop_back();
      closure(stack, out);
      stack.push_back(f);
    }
    return;
  }
  const std::uint32_t here = stack[top].state;
  const NfaState& st = rule.states[here];
  if (!st.bytes.empty() || !st.markers.empty()) push(stack, out);
  for (const std::uint32_t e : st.eps) {
    stack[top].state = e;
    closure(stack, out);
  }
  for (const CallEdge& c : st.calls) {
    if (stack.size() + depth_offset_ >= kMaxFrames) break;
    stack[top].state = c.to;
    stack.push_back(Frame{c.rule, grammar_->rules[c.rule].start, 0});
    closure(stack, out);
    stack.pop_back();
  }
  stack[top].state = here;
  if (st.accept) {
    const Frame f = stack.back();
    stack.pop_back();
    closure(stack, out);
    stack.push_back(f);
  }
}

void Matcher::advance(const Stacks& in, std::uint8_t b, Stacks& out) const {
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint32_t begin = in.begin(i);
    const std::uint32_t end = in.ends[i];
    if (begin == end) continue;  // complete: nothing more
    const Frame& top = in.frames[end - 1];
    const Rule& rule = grammar_->rules[top.rule];
    if (rule.kind == RuleKind::kString) {
      const StringStep s = string_step(str_sub(top.state), b);
      const std::uint32_t units = s.new_char ? (s.astral ? 2 : 1) : 0;
      if (!s.ok || (units != 0 && top.count + units > rule.max_chars)) continue;
      const std::uint32_t astral = str_astral(top.state);
      if (s.close && top.count - astral < rule.min_chars) continue;
      tmp_.assign(in.frames.begin() + begin, in.frames.begin() + end);
      if (s.close) {
        tmp_.pop_back();
        closure(tmp_, out);
      } else {
        tmp_.back().state = s.next | ((astral + (s.astral ? 1 : 0)) << kStrSubBits);
        tmp_.back().count += units;
        push(tmp_, out);
      }
      continue;
    }
    if (rule.kind == RuleKind::kRun) {
      if (top.count >= rule.max_chars || !rule.run_bytes.test(b)) continue;
      tmp_.assign(in.frames.begin() + begin, in.frames.begin() + end);
      ++tmp_.back().count;
      closure(tmp_, out);
      continue;
    }
    const NfaState& st = rule.states[top.state];
    bool copied = false;
    for (const ByteEdge& e : st.bytes) {
      if (b < e.lo || b > e.hi) continue;
      if (!copied) tmp_.assign(in.frames.begin() + begin, in.frames.begin() + end);
      copied = true;
      tmp_.back().state = e.to;
      closure(tmp_, out);
    }
  }
  dedup(out);
}

bool Matcher::advance_bytes(const Stacks& in, std::string_view bytes, Stacks& out) const {
  if (bytes.empty()) {
    out = in;
    return true;
  }
  Stacks& other = bytes_scratch_;
  const Stacks* from = &in;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    // Alternate between the two buffers so that the last step lands in `out`.
    Stacks& to = (bytes.size() - i) % 2 == 1 ? out : other;
    advance(*from, static_cast<std::uint8_t>(bytes[i]), to);
    if (to.size() == 0) return false;
    from = &to;
  }
  return true;
}

// Drops repeated stacks, keeping the first of each (in place).
void Matcher::dedup(Stacks& s) {
  if (s.size() < 2) return;
  std::size_t kept = 0;
  std::uint32_t write = 0;
  std::uint32_t read_begin = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const std::uint32_t read_end = s.ends[i];
    const std::uint32_t len = read_end - read_begin;
    bool dup = false;
    std::uint32_t kb = 0;
    for (std::size_t j = 0; j < kept && !dup; ++j) {
      const std::uint32_t ke = s.ends[j];
      // From the top down: stacks of one grammar mostly differ near their tops.
      dup = ke - kb == len && std::equal(s.frames.rbegin() + (s.frames.size() - ke),
                                         s.frames.rbegin() + (s.frames.size() - kb),
                                         s.frames.rbegin() + (s.frames.size() - read_end));
      kb = ke;
    }
    if (!dup) {
      std::copy(s.frames.begin() + read_begin, s.frames.begin() + read_end,
                s.frames.begin() + write);
      write += len;
      s.ends[kept++] = write;
    }
    read_begin = read_end;
  }
  s.frames.resize(write);
  s.ends.resize(kept);
}

std::uint64_t Matcher::frame_cost(const Frame& f) const {
  const Rule& rule = grammar_->rules[f.rule];
  if (rule.kind == RuleKind::kString) return string_close_bytes(rule, f.state, f.count);
  if (rule.kind == RuleKind::kRun) return f.count < rule.min_chars ? rule.min_chars - f.count : 0;
  const std::uint32_t d = rule.states[f.state].dist;
  return d == kNoPath ? std::uint64_t{1} << 40 : d;  // unreachable: never fits
}

std::uint64_t Matcher::stack_cost(const Stacks& s, std::size_t i) const {
  std::uint64_t c = 0;
  for (std::uint32_t f = s.begin(i); f < s.ends[i]; ++f) c += frame_cost(s.frames[f]);
  return c;
}

std::uint64_t Matcher::min_cost(const Stacks& s) const {
  std::uint64_t best = ~std::uint64_t{0};
  for (std::size_t i = 0; i < s.size() && best != 0; ++i) best = std::min(best, stack_cost(s, i));
  return best;
}

bool Matcher::fits(const Stacks& s) const {
  if (limit_ == kUnlimited) return true;
  if (limit_ < 0) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (stack_cost(s, i) <= static_cast<std::uint64_t>(limit_)) return true;
  }
  return false;
}

bool Matcher::complete(const Stacks& s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s.begin(i) == s.ends[i]) return true;
  }
  return false;
}

bool Matcher::in_string(const Stacks& s, std::size_t i) const {
  if (s.begin(i) == s.ends[i]) return false;
  const Frame& top = s.frames[s.ends[i] - 1];
  return grammar_->rules[top.rule].kind == RuleKind::kString;
}

bool Matcher::in_run(const Stacks& s, std::size_t i) const {
  return s.begin(i) != s.ends[i] &&
         grammar_->rules[s.frames[s.ends[i] - 1].rule].kind == RuleKind::kRun;
}

bool Matcher::is_complete() const {
  return complete(cur_);
}

bool Matcher::is_dead() const {
  return cur_.size() == 0 && !ended_;
}

// ---- masks -------------------------------------------------------------------------------

void Matcher::fill_mask(std::vector<std::uint64_t>& mask) {
  mask.assign(vocab_->mask_words(), 0);
  if (ended_ || cur_.size() == 0) return;
  const bool done = complete(cur_);
  if (done) {
    for (const TokenId id : vocab_->eos())
      if (id < vocab_->size()) mask[id / 64] |= std::uint64_t{1} << (id % 64);
  }
  if (budget_ == kNoBudget) {
    fill_content(mask);
    return;
  }
  // This token and the end-of-generation id leave budget - 2 for the rest.
  limit_ = static_cast<std::int64_t>(std::min<std::uint64_t>(budget_, INT64_MAX)) - 2;
  fill_content(mask);
  const auto none = [&] {
    return std::all_of(mask.begin(), mask.end(), [](std::uint64_t w) { return w == 0; });
  };
  if (!done && none()) {
    // Too short even for the shortest document: bring the end closer (the output is cut).
    limit_ = static_cast<std::int64_t>(std::min<std::uint64_t>(min_cost(cur_), INT64_MAX)) - 1;
    fill_content(mask);
    if (none()) {
      limit_ = kUnlimited;
      fill_content(mask);
    }
  }
  limit_ = kUnlimited;
}

void Matcher::keep_for_walk(const Stacks& s, std::size_t i) {
  rest_.frames.insert(rest_.frames.end(), s.frames.begin() + s.begin(i),
                      s.frames.begin() + s.ends[i]);
  rest_.ends.push_back(static_cast<std::uint32_t>(rest_.frames.size()));
}

// The content tokens (not end-of-generation) allowed within limit_. A string body's fast path
// serves when any token staying inside fits (one leaves at most 4 bytes of a character open),
// a state mask when its worst accepted token fits; other stacks are walked token by token.
void Matcher::fill_content(std::vector<std::uint64_t>& mask) {
  rest_.clear();
  const auto within = [&](std::uint64_t cost) {
    return limit_ == kUnlimited || (limit_ >= 0 && cost <= static_cast<std::uint64_t>(limit_));
  };
  for (std::size_t i = 0; i < cur_.size(); ++i) {
    if (in_string(cur_, i)) {
      if (within(stack_cost(cur_, i) + 4)) {
        string_fast_path(cur_, i, mask);
        continue;
      }
    } else if (in_run(cur_, i)) {
      // A token inside the run only shortens the way to the end; exits are checked one by one.
      if (within(stack_cost(cur_, i)) && run_fast_path(cur_, i, mask)) continue;
    } else if (const auto e = state_entry(cur_, i); e && !e->cheap) {
      const std::uint64_t below =
          limit_ == kUnlimited ? 0
                               : stack_cost(cur_, i) - frame_cost(cur_.frames[cur_.ends[i] - 1]);
      if (within(below + e->max_after)) {
        apply_entry(*e, cur_, i, mask);
        continue;
      }
    }
    keep_for_walk(cur_, i);
  }
  if (rest_.size() != 0) walk_trie(rest_, mask);
  if (!marker_ids_.empty()) marker_tokens(mask);
}

// Calls fn(i, edge) for each marker edge of stack i's top state, every stack in turn.
template <typename Fn>
void Matcher::each_marker_edge(Fn fn) {
  for (std::size_t i = 0; i < cur_.size(); ++i) {
    if (cur_.begin(i) == cur_.ends[i]) continue;
    const Frame& top = cur_.frames[cur_.ends[i] - 1];
    const Rule& rule = grammar_->rules[top.rule];
    if (rule.kind != RuleKind::kNfa) continue;
    for (const MarkerEdge& e : rule.states[top.state].markers) fn(i, e);
  }
}

// Stack i past marker edge e, and what follows without a byte, into `out`.
void Matcher::take_marker(std::size_t i, const MarkerEdge& e, Stacks& out) {
  tmp_.assign(cur_.frames.begin() + cur_.begin(i), cur_.frames.begin() + cur_.ends[i]);
  tmp_.back().state = e.to;
  closure(tmp_, out);
}

// The marker tokens the stacks' top states may take here (within the budget).
void Matcher::marker_tokens(std::vector<std::uint64_t>& mask) {
  each_marker_edge([&](std::size_t i, const MarkerEdge& e) {
    const std::optional<TokenId> id = marker_ids_[e.marker];
    if (!id || *id >= vocab_->size()) return;
    a_.clear();
    take_marker(i, e, a_);
    if (fits(a_)) mask[*id / 64] |= std::uint64_t{1} << (*id % 64);
  });
}

// A marker token: every stack whose top state takes it moves on; false when none does.
bool Matcher::accept_marker(TokenId id) {
  a_.clear();
  each_marker_edge([&](std::size_t i, const MarkerEdge& e) {
    if (marker_ids_[e.marker] == id) take_marker(i, e, a_);
  });
  dedup(a_);
  if (a_.size() == 0) return false;
  std::swap(cur_, a_);
  return true;
}

// Every token whose bytes the stacks accept, by a pre-order walk of the trie: levels_[d] holds
// the stacks after the first d bytes of the current path; a node they reject skips its subtree.
std::size_t Matcher::walk_trie(const Stacks& start, std::vector<std::uint64_t>& mask,
                               std::vector<TokenId>* uncertain, std::uint64_t* max_after) {
  const auto& trie = vocab_->trie();
  const auto& tokens = vocab_->token_list();
  levels_.resize(static_cast<std::size_t>(vocab_->max_depth()) + 1);
  marker_.assign(levels_.size(), 0);
  levels_[0] = start;
  std::size_t i = 0;
  std::size_t visited = 0;
  while (i < trie.size()) {
    const Vocabulary::TrieNode& node = trie[i];
    ++visited;
    Stacks& out = levels_[node.depth];
    advance(levels_[node.depth - 1], node.byte, out);
    if (out.size() == 0) {
      if (uncertain && marker_[node.depth - 1]) {
        // Past the start's return: the tokens of this subtree depend on what called it.
        const std::uint32_t end = node.skip < trie.size()
                                      ? trie[node.skip].tokens
                                      : static_cast<std::uint32_t>(tokens.size());
        uncertain->insert(uncertain->end(), tokens.begin() + node.tokens, tokens.begin() + end);
      }
      i = node.skip;
      continue;
    }
    if (uncertain) marker_[node.depth] = marker_[node.depth - 1] || complete(out);
    if (node.tokens < node.tokens_end) {
      if (max_after) *max_after = std::max(*max_after, min_cost(out));
      if (fits(out)) {
        for (std::uint32_t t = node.tokens; t < node.tokens_end; ++t)
          mask[tokens[t] / 64] |= std::uint64_t{1} << (tokens[t] % 64);
      }
    }
    ++i;
  }
  return visited;
}

// The context-free part of stack i's mask, by its top frame (computed once per grammar,
// vocabulary, rule state and depth); null for a string frame or a complete stack.
std::shared_ptr<const StateMasks::Entry> Matcher::state_entry(const Stacks& s, std::size_t i) {
  const std::uint32_t depth = s.ends[i] - s.begin(i);
  if (depth == 0) return nullptr;
  return state_entry(s.frames[s.ends[i] - 1], depth);
}

// The depth matters only where a token could push the stack to kMaxFrames (the closure stops
// there): never in a grammar whose stacks stay below it, whose entries are keyed without it.
std::shared_ptr<const StateMasks::Entry> Matcher::state_entry(const Frame& top,
                                                              std::uint32_t depth) {
  if (!grammar_->masks || grammar_->rules[top.rule].kind != RuleKind::kNfa) return nullptr;
  if (grammar_->max_frames <= kMaxFrames) depth = 1;
  const std::uint64_t key =
      (std::uint64_t{top.rule} << 40) | (std::uint64_t{depth} << 32) | top.state;
  if (auto e = grammar_->masks->find(vocab_->serial(), key)) return e;
  auto e = std::make_shared<StateMasks::Entry>();
  one_.clear();
  one_.frames.push_back(top);
  one_.ends.push_back(1);
  e->accepted.assign(vocab_->mask_words(), 0);
  depth_offset_ = depth - 1;
  const std::int64_t limit = limit_;
  limit_ = kUnlimited;  // what the state accepts, whatever the budget
  const std::size_t visited = walk_trie(one_, e->accepted, &e->uncertain, &e->max_after);
  limit_ = limit;
  depth_offset_ = 0;
  std::size_t accepted = 0;
  for (const std::uint64_t w : e->accepted) accepted += __builtin_popcountll(w);
  if (visited < cheap_nodes_) {
    e->cheap = true;
    e->accepted.clear();
    e->uncertain.clear();
  } else if (accepted * StateMasks::kSparse < e->accepted.size()) {
    // Few tokens (a punctuation or white-space state): their ids, not a whole mask.
    for (std::size_t w = 0; w < e->accepted.size(); ++w)
      for (std::uint64_t bits = e->accepted[w]; bits; bits &= bits - 1)
        e->accepted_ids.push_back(static_cast<TokenId>(w * 64 + __builtin_ctzll(bits)));
    e->accepted.clear();
    e->accepted.shrink_to_fit();
  }
  grammar_->masks->insert(vocab_->serial(), key, e);
  return e;
}

std::size_t Matcher::prepare_state_masks() {
  for (const Rule& rule : grammar_->rules) {
    if (rule.kind == RuleKind::kRun) vocab_->run_table(rule.run_bytes);  // made on first use
  }
  if (!grammar_->masks || grammar_->max_frames > kMaxFrames) return 0;
  std::size_t made = 0;
  std::size_t walked = 0;
  for (std::uint32_t r = 0; r < grammar_->rules.size(); ++r) {
    const Rule& rule = grammar_->rules[r];
    if (rule.kind != RuleKind::kNfa) continue;
    for (std::uint32_t st = 0; st < rule.states.size(); ++st) {
      if (rule.states[st].bytes.empty()) continue;  // no stack stops here
      // A huge grammar (a hostile schema near the state limit) is prepared in part; its other
      // states fill as sequences reach them.
      if (++walked > kPrepareStates || grammar_->masks->bytes() > kPrepareBytes) return made;
      const auto e = state_entry(Frame{r, st, 0}, 1);
      if (e && !e->cheap) ++made;
    }
  }
  return made;
}

void Matcher::apply_entry(const StateMasks::Entry& e, const Stacks& s, std::size_t i,
                          std::vector<std::uint64_t>& mask) {
  if (e.accepted.empty()) {
    for (const TokenId id : e.accepted_ids) mask[id / 64] |= std::uint64_t{1} << (id % 64);
  } else {
    for (std::size_t w = 0; w < mask.size(); ++w) mask[w] |= e.accepted[w];
  }
  one_.clear();
  one_.frames.assign(s.frames.begin() + s.begin(i), s.frames.begin() + s.ends[i]);
  one_.ends.push_back(static_cast<std::uint32_t>(one_.frames.size()));
  // The uncertain tokens are in the trie's order: sorted by their bytes.
  check_sorted(
      one_, e.uncertain, [](TokenId) { return true; }, [](TokenId id) { return id; },
      [&](TokenId id) { return vocab_->bytes(id); }, mask);
}

// Allows each item that `keep` keeps when `start` accepts its bytes (`rest_of`, the items
// sorted by them) and the stacks after them fit. Like a trie walk over the items: one shares
// the stacks of the bytes it has in common with the one before (levels_), and a prefix
// rejected once skips the items that begin with it.
template <typename Items, typename Keep, typename IdOf, typename RestOf>
void Matcher::check_sorted(const Stacks& start, const Items& items, Keep keep, IdOf id_of,
                           RestOf rest_of, std::vector<std::uint64_t>& mask) {
  constexpr std::size_t kNone = ~std::size_t{0};
  levels_.resize(std::max<std::size_t>(levels_.size(), std::size_t{vocab_->max_depth()} + 2));
  levels_[0] = start;
  std::string_view prev;
  std::size_t valid = 0;     // levels_[0..valid] hold the stacks after prev's first bytes
  std::size_t dead = kNone;  // prev's first `dead` bytes are rejected
  for (const auto& item : items) {
    if (!keep(item)) continue;
    const std::string_view bytes = rest_of(item);
    std::size_t common = 0;
    const std::size_t most = std::min(bytes.size(), prev.size());
    while (common < most && bytes[common] == prev[common]) ++common;
    if (dead != kNone && common >= dead) continue;
    std::size_t d = std::min(common, valid);
    prev = bytes;
    dead = kNone;
    while (d < bytes.size()) {
      advance(levels_[d], static_cast<std::uint8_t>(bytes[d]), levels_[d + 1]);
      if (levels_[d + 1].size() == 0) break;
      ++d;
    }
    if (d < bytes.size()) {
      valid = d;
      dead = d + 1;
      continue;
    }
    valid = d;
    if (fits(levels_[d])) {
      const TokenId id = id_of(item);
      mask[id / 64] |= std::uint64_t{1} << (id % 64);
    }
  }
}

// Stack i is inside a string: the tokens that stay inside come from the precomputed masks (of
// its sub-state) by the characters left; those that close the string are checked against what
// follows it.
void Matcher::string_fast_path(const Stacks& s, std::size_t i, std::vector<std::uint64_t>& mask) {
  const Frame& top = s.frames[s.ends[i] - 1];
  const Rule& rule = grammar_->rules[top.rule];
  const std::uint32_t sub = str_sub(top.state);
  const std::uint32_t left = rule.max_chars - std::min(rule.max_chars, top.count);
  const std::uint32_t points = top.count - str_astral(top.state);
  const std::uint64_t* inside =
      vocab_->inside_le(sub, std::min<std::uint32_t>(left, Vocabulary::kMaxInsideChars));
  for (std::size_t w = 0; w < mask.size(); ++w) mask[w] |= inside[w];
  const auto set = [&](TokenId id) { mask[id / 64] |= std::uint64_t{1} << (id % 64); };
  for (const auto& [id, chars] : vocab_->long_inside(sub))
    if (chars <= left) set(id);

  const auto may_close = [&](const Vocabulary::StringExit& e) {
    return e.chars <= left && points + e.points >= rule.min_chars;
  };
  tmp_.assign(s.frames.begin() + s.begin(i), s.frames.begin() + s.ends[i] - 1);
  a_.clear();
  closure(tmp_, a_);
  dedup(a_);
  const bool closed_fits = fits(a_);
  for (const Vocabulary::StringExit& e : vocab_->exits(sub, 256))
    if (closed_fits && may_close(e)) set(e.id);
  for (std::uint32_t b = 0; b < 256; ++b) {
    const auto& exits = vocab_->exits(sub, b);
    if (exits.empty()) continue;
    advance(a_, static_cast<std::uint8_t>(b), b_);
    if (b_.size() == 0) continue;
    check_sorted(
        b_, exits, [&](const Vocabulary::StringExit& e) { return may_close(e); },
        [](const Vocabulary::StringExit& e) { return e.id; },
        [&](const Vocabulary::StringExit& e) { return vocab_->bytes(e.id).substr(e.suffix + 1); },
        mask);
  }
}

// Stack i is in a class run: the tokens made of class bytes that fit what is left come from the
// vocabulary's table of the class; those that leave the run are checked, by the first byte
// after it, against what follows the run. False when the vocabulary keeps no table for it.
bool Matcher::run_fast_path(const Stacks& s, std::size_t i, std::vector<std::uint64_t>& mask) {
  const Frame& top = s.frames[s.ends[i] - 1];
  const Rule& rule = grammar_->rules[top.rule];
  const auto table = vocab_->run_table(rule.run_bytes);
  if (!table) return false;
  tmp_.assign(s.frames.begin() + s.begin(i), s.frames.begin() + s.ends[i] - 1);
  a_.clear();
  closure(tmp_, a_);  // the run over: what follows it
  dedup(a_);
  // When what follows may begin with a class byte, a token may end the run before its last
  // class byte: the tables do not say where, so the trie is walked instead.
  for (std::uint32_t b = 0; b < 128; ++b) {
    if (!rule.run_bytes.test(b)) continue;
    advance(a_, static_cast<std::uint8_t>(b), b_);
    if (b_.size() != 0) return false;
  }
  const std::uint32_t left = rule.max_chars - std::min(rule.max_chars, top.count);
  const auto set = [&](TokenId id) { mask[id / 64] |= std::uint64_t{1} << (id % 64); };
  if (table->dense) {
    const std::uint64_t* inside =
        table->inside_le.data() +
        std::size_t{std::min<std::uint32_t>(left, Vocabulary::kMaxInsideChars)} * mask.size();
    for (std::size_t w = 0; w < mask.size(); ++w) mask[w] |= inside[w];
  }
  for (const auto& [id, run] : table->inside) {
    if (run > left) break;  // by length, ascending
    set(id);
  }
  for (std::uint32_t b = 0; b < 256; ++b) {
    const auto& exits = table->exits[b];
    if (exits.empty()) continue;
    advance(a_, static_cast<std::uint8_t>(b), b_);
    if (b_.size() == 0) continue;
    check_sorted(
        b_, exits,
        [&](const Vocabulary::RunExit& e) {
          return e.run <= left && top.count + e.run >= rule.min_chars;
        },
        [](const Vocabulary::RunExit& e) { return e.id; },
        [&](const Vocabulary::RunExit& e) { return vocab_->bytes(e.id).substr(e.run + 1); }, mask);
  }
  return true;
}

// ---- advancing ---------------------------------------------------------------------------

bool Matcher::accept_token(TokenId id) {
  if (ended_) return false;
  if (vocab_->is_eos(id)) {
    if (!complete(cur_)) return false;
    ended_ = true;
    if (budget_ != kNoBudget && budget_ > 0) --budget_;
    return true;
  }
  if (vocab_->is_special(id)) {
    if (!accept_marker(id)) return false;
    if (budget_ != kNoBudget && budget_ > 0) --budget_;
    return true;
  }
  const std::string_view bytes = vocab_->bytes(id);
  if (bytes.empty() || !accept_bytes(bytes)) return false;
  if (budget_ != kNoBudget && budget_ > 0) --budget_;
  return true;
}

bool Matcher::accept_bytes(std::string_view bytes) {
  if (ended_) return false;
  if (!advance_bytes(cur_, bytes, a_)) return false;
  std::swap(cur_, a_);
  return true;
}

}  // namespace ferry::constrain
