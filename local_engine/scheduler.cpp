#include "local_engine/scheduler.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "local_engine/text_stream.h"

namespace ferry::engine {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kMinCapacity = 64;  // KvCache's smallest allocation, in positions
constexpr int64_t kMinBlock = 8;      // the engine's batched-attention threshold (see header)
constexpr auto kRateWindow = std::chrono::seconds(10);

int64_t micros(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

// Chain hashes of a prompt's whole blocks: hash[j] covers tokens [0, (j + 1) * block).
std::vector<uint64_t> block_hashes(std::span<const TokenId> tokens, int64_t block) {
  std::vector<uint64_t> out;
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a offset basis
  const auto n_blocks = static_cast<int64_t>(tokens.size()) / block;
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int64_t i = b * block; i < (b + 1) * block; ++i) {
      h = (h ^ static_cast<uint32_t>(tokens[static_cast<size_t>(i)])) * 0x100000001b3ull;
    }
    uint64_t z = h + 0x9e3779b97f4a7c15ull;  // splitmix64 finalizer per block
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    h = z ^ (z >> 31);
    out.push_back(h);
  }
  return out;
}

// Running sequences plus a quarter for cached prefixes, within a quarter of physical memory,
// but always room for two full-context sequences.
int64_t auto_budget(int64_t bytes_per_token, int64_t n_ctx, int64_t max_sequences) {
  const int64_t per_seq = bytes_per_token * n_ctx;
  const int64_t want = per_seq * max_sequences + per_seq * max_sequences / 4;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  const int64_t cap =
      pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page / 4 : int64_t{4} << 30;
  return std::max(2 * per_seq, std::min(want, cap));
}

// "12 MiB", or "96 KiB" below a MiB (a small budget must not read as 0 MiB).
std::string kv_size_text(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20)) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string((bytes + 1023) >> 10) + " KiB";
}

Error cancelled_error() {
  return Error::make(ErrorCode::kCancelled, "request cancelled");
}
Error deadline_error() {
  return Error::make(ErrorCode::kTimeout, "the local engine did not finish before the deadline");
}
Error shutdown_error() {
  return Error::make(ErrorCode::kUnavailable, "the local engine is shutting down");
}

}  // namespace

std::string Scheduler::context_overflow_message(int64_t n_ctx, int64_t n_prompt,
                                                std::optional<int64_t> max_tokens) {
  std::string m = "this model's context is " + std::to_string(n_ctx) + " tokens; the prompt is " +
                  std::to_string(n_prompt) + " tokens";
  if (max_tokens) return m + " and max_tokens is " + std::to_string(*max_tokens);
  return m + ", which leaves no room for a reply";
}

struct Scheduler::Impl {
  struct Waiting {
    RequestId id = 0;
    GenerationRequest req;
    Clock::time_point submitted;
  };

  struct Running {
    Running(Waiting&& w, Clock::time_point now)
        : id(w.id),
          req(std::move(w.req)),
          submitted(w.submitted),
          admitted(now),
          sampler(req.sampling),
          stream(req.stop) {}
    RequestId id;
    GenerationRequest req;
    Clock::time_point submitted, admitted;
    Sampler sampler;
    TextStream stream;
    int64_t reserve_tokens = 0;  // positions held against the budget
    int64_t reserved_bytes = 0;
    bool started = false;  // KV allocated and the prefix cache consulted
    SeqId seq = -1;
    int64_t capacity = 0;  // positions allocated for seq
    int64_t cached = 0;
    std::vector<uint64_t> hashes;  // of the prompt's whole blocks
    bool decoding = false;
    // Prefilled, its prompt's blocks not yet in the prefix cache: they go in after the first
    // token is out (or when the request ends with it), so the copy does not delay that token.
    bool prefix_pending = false;
    TokenId next_token = -1;
    // Speculative decoding (null when off): this sequence's drafter, and the tokens it drafted
    // for the current step (verified beside next_token).
    std::optional<PromptLookup> lookup;
    std::vector<TokenId> draft;
    int64_t draft_match = 0;  // the length of the suffix that proposed `draft`
    int64_t generated = 0;
    int64_t unread = 0;  // on_token events not yet acknowledged (Scheduler::consumed)
    int64_t first_token_us = -1;
    std::optional<Error> error;  // cancelled or past the deadline: ends before the next step
    bool done = false;
  };

  struct CacheEntry {
    SeqId seq = -1;
    std::vector<TokenId> tokens;   // whole blocks
    std::vector<uint64_t> hashes;  // per block
    int64_t bytes = 0;
    uint64_t last_used = 0;
  };

  Impl(std::unique_ptr<Engine> e, SchedulerOptions o, TokenPieceFn p, std::vector<TokenId> eog_ids)
      : engine(std::move(e)), opt(std::move(o)), piece(std::move(p)), eog(std::move(eog_ids)) {
    const ModelConfig& c = engine->config();
    n_ctx = engine->n_ctx();
    n_vocab = c.n_vocab;
    bytes_per_token = 2 * c.n_layer * c.kv_dim() * static_cast<int64_t>(sizeof(uint16_t));
    opt.max_sequences = std::max<int64_t>(1, opt.max_sequences);
    opt.max_queue = std::max<int64_t>(0, opt.max_queue);
    block = std::max(kMinBlock, opt.prefix_block);
    chunk = std::max(block, opt.prefill_chunk / block * block);
    budget = opt.kv_budget_bytes > 0 ? opt.kv_budget_bytes
                                     : auto_budget(bytes_per_token, n_ctx, opt.max_sequences);
    snapshot.max_sequences = opt.max_sequences;
    snapshot.kv_budget_bytes = budget;
    embedder = std::make_unique<EmbeddingRunner>(std::max<int64_t>(1, opt.embedding_batch_tokens));
    speculate =
        opt.speculative.enabled && opt.speculative.max_draft > 0 && engine->batch_invariant();
    thread = std::thread([this] { run(); });
  }

  int64_t capacity_tokens(int64_t len) const {
    return std::min(n_ctx, std::max(len, kMinCapacity));
  }

  // The KV bytes a request holds while it runs: its prompt and max_tokens, within the context.
  // Saturating: a max_tokens near INT64_MAX must not wrap to a small reservation.
  int64_t reservation_tokens(const GenerationRequest& req) const {
    int64_t len = 0;
    if (__builtin_add_overflow(static_cast<int64_t>(req.prompt.size()), req.max_tokens, &len)) {
      len = INT64_MAX;
    }
    return capacity_tokens(len);
  }

  // ------------------------------------------------------------ the scheduler thread

  void run() {
    for (;;) {
      std::vector<Waiting> expired;
      std::vector<Error> expired_errors;
      std::vector<RequestId> cancelled;
      Clock::time_point now;
      {
        std::unique_lock lock(mu);
        wait_for_work(lock);
        if (stopping) return;
        seen_submits = submits;
        now = Clock::now();
        take_embeddings(cancelled);
        take_cancels_and_deadlines(now, expired, expired_errors);
        take_acknowledgements();
        admit(now);
        stalled = active.empty() && !waiting.empty();
        n_active_shared = static_cast<int64_t>(active.size());
      }
      for (size_t i = 0; i < expired.size(); ++i) {
        end_waiting(expired[i], std::move(expired_errors[i]));
      }
      for (auto& r : active) {
        if (r->error) finish(*r, FinishReason::kCancelled, r->error);
      }
      compact();
      idle = !active.empty() && !step();
      compact();
      if (step_embeddings(cancelled, now)) idle = false;
      publish();
    }
  }

  // Moves submitted embeddings requests to the runner and notes the cancels it must see (the
  // runner ends them outside the lock: on_done never runs under mu). Under mu.
  void take_embeddings(std::vector<RequestId>& cancelled) {
    while (!embed_waiting.empty()) {
      EmbedWaiting& w = embed_waiting.front();
      embedder->add(w.id, std::move(w.req), w.submitted);
      embed_waiting.pop_front();
    }
    if (embedder->busy()) cancelled = cancels;
  }

  // Cancels and deadlines of embeddings requests, then one embeddings forward pass (between two
  // decode steps, so chat sequences keep their pace). True when it computed something.
  bool step_embeddings(const std::vector<RequestId>& cancelled, Clock::time_point now) {
    if (!embedder->busy()) return false;
    for (const RequestId id : cancelled) embedder->fail(*engine, id, cancelled_error());
    embedder->expire(*engine, now);
    // The next input's KV is charged to the budget beside the chat sequences' reservations:
    // cached prefixes make room for it, else it waits for sequences to end (chat admission
    // waits behind it meanwhile, see admit()).
    const int64_t need = embedder->next_kv_bytes(*engine);
    while (committed() + cache_bytes + need > budget && !cache.empty()) evict_lru();
    const int64_t computed = embedder->step(*engine, next_seq, budget - committed() - cache_bytes);
    kv_peak = std::max(kv_peak, embedder->last_pass_kv_bytes());
    return computed > 0;
  }

  // KV bytes held against the budget by running work: chat sequences' reservations and the
  // embeddings inputs being computed (cached prefixes come on top and are evictable).
  int64_t committed() const { return reserved + embedder->kv_bytes(); }

  // Blocks until the loop has something to do: a request queued, running or cancelled. After a
  // step that computed nothing (every running sequence paused at its max_unread bound) only news
  // wakes it (a submit, cancel, acknowledgement or stop) or the earliest deadline of a running or
  // queued request, so paused sequences cost no CPU. Under mu.
  void wait_for_work(std::unique_lock<std::mutex>& lock) {
    if (idle) {
      auto news = [&] {
        return stopping || !cancels.empty() || !acks.empty() || submits != seen_submits;
      };
      const Clock::time_point until = earliest_deadline();
      if (until == Clock::time_point::max()) {
        cv.wait(lock, news);
      } else {
        cv.wait_until(lock, until, news);
      }
      return;
    }
    auto has_work = [&] {
      return stopping || !cancels.empty() || !waiting.empty() || !active.empty() ||
             !embed_waiting.empty() || embedder->busy();
    };
    if (!has_work()) cv.wait(lock, has_work);
    if (!stopping && active.empty() && stalled && !embedder->busy()) {
      cv.wait_for(lock, std::chrono::milliseconds(5));
    }
  }

  Clock::time_point earliest_deadline() const {
    Clock::time_point t = Clock::time_point::max();
    for (const auto& r : active) t = std::min(t, r->req.deadline);
    for (const Waiting& w : waiting) t = std::min(t, w.req.deadline);
    return t;
  }

  // Marks cancelled and expired running requests (they end before the next step) and takes
  // cancelled and expired queued ones out of the queue. Under mu.
  void take_cancels_and_deadlines(Clock::time_point now, std::vector<Waiting>& expired,
                                  std::vector<Error>& expired_errors) {
    for (const RequestId id : cancels) {
      for (auto& r : active) {
        if (r->id == id && !r->error) r->error = cancelled_error();
      }
    }
    for (auto it = waiting.begin(); it != waiting.end();) {
      const bool cancelled = std::find(cancels.begin(), cancels.end(), it->id) != cancels.end();
      if (cancelled || now >= it->req.deadline) {
        expired_errors.push_back(cancelled ? cancelled_error() : deadline_error());
        expired.push_back(std::move(*it));
        it = waiting.erase(it);
      } else {
        ++it;
      }
    }
    cancels.clear();
    for (auto& r : active) {
      if (!r->error && now >= r->req.deadline) r->error = deadline_error();
    }
  }

  // Applies the consumers' acknowledgements: a paused sequence under its bound runs again.
  // Under mu.
  void take_acknowledgements() {
    for (const auto& [id, events] : acks) {
      for (auto& r : active) {
        if (r->id == id) r->unread = std::max<int64_t>(0, r->unread - events);
      }
    }
    acks.clear();
  }

  static bool paused(const Running& r) {
    return r.req.max_unread > 0 && r.unread >= r.req.max_unread;
  }

  // Moves queued requests into sequence slots while the budget holds their worst case
  // (prompt + max_tokens) beside the embeddings' KV, evicting cached prefixes when that makes
  // room. An embeddings input waiting for KV goes first, so a stream of chat requests cannot
  // starve it. Under mu.
  void admit(Clock::time_point now) {
    if (embedder->busy() && embedder->waiting_for_kv()) return;
    while (!waiting.empty() && static_cast<int64_t>(active.size()) < opt.max_sequences) {
      Waiting& w = waiting.front();
      const int64_t tokens = reservation_tokens(w.req);
      const int64_t need = tokens * bytes_per_token;  // tokens <= n_ctx: checked at submit
      if (committed() + need > budget) break;         // wait for running work to finish (FIFO)
      while (committed() + cache_bytes + need > budget && !cache.empty()) evict_lru();
      auto r = std::make_unique<Running>(std::move(w), now);
      waiting.pop_front();
      r->reserve_tokens = tokens;
      r->reserved_bytes = need;
      reserved += need;
      if (speculate) r->lookup.emplace(opt.speculative, r->req.prompt);
      active.push_back(std::move(r));
    }
  }

  // One forward pass: a decode token for every running sequence that is not paused, then prompt
  // chunks within the prefill budget; then each finished row is sampled and its token delivered.
  // False when there was nothing to compute.
  bool step() {
    batch.clear();
    rows.clear();
    StepStats stats;
    add_decodes(stats);
    add_prefills(stats);
    if (batch.empty()) return false;

    kv_peak = std::max(kv_peak, static_cast<int64_t>(engine->kv().memory_bytes()));
    const auto started = Clock::now();
    const Status s = engine->forward(batch, logits);
    const auto ended = Clock::now();
    stats.seconds = std::chrono::duration<double>(ended - started).count();
    if (!s) {
      fail_batch(s.error());
      return true;
    }
    produced = 0;
    float* next_row = logits.data();  // each sequence's rows: its next token's, then its draft's
    for (Running* rp : rows) {
      Running& r = *rp;
      float* first = next_row;
      next_row += (1 + r.draft.size()) * static_cast<size_t>(n_vocab);
      if (r.decoding) {
        take_decode(r, first, stats);
        continue;
      }
      r.decoding = true;
      r.prefix_pending = true;
      sample_and_emit(r, {first, static_cast<size_t>(n_vocab)}, engine->kv().seq_len(r.seq));
      if (r.prefix_pending && !r.done) {
        r.prefix_pending = false;
        insert_prefix(r);
      }
    }
    if (stats.decode_tokens > 0 && stats.prefill_tokens == 0) {
      // The rows' sampling counts too: a drafted position costs its forward share and a draw.
      const double step_seconds = std::chrono::duration<double>(Clock::now() - started).count();
      draft_cost.observe(stats.decode_tokens + stats.draft_tokens, step_seconds);
    }
    decoding_sequences = stats.decode_tokens;
    if (stats.decode_tokens > 0) {
      const double ms = stats.seconds * 1000.0;
      step_ms = step_ms <= 0 ? ms : 0.8 * step_ms + 0.2 * ms;
    }
    rate.push_back({started, ended, produced});
    if (opt.on_step) opt.on_step(stats);
    return true;
  }

  // The next token of every decoding sequence (with the tokens drafted after it, when
  // speculating), except those paused at their max_unread bound: they stay in `active` with
  // their KV, and rejoin once their consumer has caught up.
  void add_decodes(StepStats& stats) {
    for (auto& rp : active) {
      Running& r = *rp;
      r.draft.clear();
      if (!r.decoding || r.done || paused(r)) continue;
      const int64_t pos = engine->kv().seq_len(r.seq);
      if (pos + 1 > r.reserve_tokens) {
        // Never write KV past what the sequence reserved (submit and the stop checks keep it
        // within; this guards the budget's arithmetic, not a path taken).
        finish(
            r, FinishReason::kCancelled,
            Error::make(ErrorCode::kInternal, "local engine: sequence reached its KV reservation"));
        continue;
      }
      if (r.lookup) choose_draft(r, pos);
      const auto drafted = static_cast<int64_t>(r.draft.size());
      grow(r, pos + 1 + drafted);
      batch.push_back({r.seq, pos, r.next_token, true});
      for (int64_t i = 0; i < drafted; ++i) {
        batch.push_back({r.seq, pos + 1 + i, r.draft[static_cast<size_t>(i)], true});
      }
      rows.push_back(&r);
      ++stats.decode_tokens;
      stats.draft_tokens += drafted;
    }
  }

  // Whether a sequence draws its tokens (temperature) rather than taking the argmax: its drafts
  // are a class of their own in DraftOdds.
  static bool samples(const Running& r) { return r.req.sampling.temperature > 0.0f; }

  // The tokens drafted after a sequence's next token at `pos`: what its lookup proposes, cut to
  // the length that pays for drafts of its class (DraftOdds) at the step's measured cost
  // (DraftCost), or one token now and then for a class the cost model declines.
  void choose_draft(Running& r, int64_t pos) {
    r.draft_match = r.lookup->draft(draft_limit(r, pos), r.draft);
    if (r.draft.empty() || !opt.speculative.cost_gate) return;
    const bool sampled = samples(r);
    int64_t k =
        draft_cost.best_draft(static_cast<int64_t>(r.draft.size()),
                              draft_odds.acceptance(r.draft_match, sampled), decoding_sequences);
    if (k == 0 && draft_odds.explore(r.draft_match, sampled,
                                     draft_cost.explore_interval(decoding_sequences))) {
      k = 1;
    }
    r.draft.resize(static_cast<size_t>(k));
  }

  // How many tokens may be drafted after a sequence's next token at `pos`: every one kept is
  // emitted, so within max_tokens, the KV reservation, the context and the max_unread bound.
  int64_t draft_limit(const Running& r, int64_t pos) const {
    int64_t limit = std::min({opt.speculative.max_draft, r.req.max_tokens - r.generated - 1,
                              r.reserve_tokens - pos - 1, n_ctx - pos - 1});
    if (r.req.max_unread > 0) limit = std::min(limit, r.req.max_unread - r.unread - 1);
    return limit;
  }

  // Samples a decoding sequence's rows in order: its next token's, then one per drafted token
  // for as long as the token sampled is the one drafted (the logits of row i + 1 are those that
  // follow it). For a deterministic draft this is the speculative-sampling rule: the drafted x
  // is kept with probability p(x), and otherwise the token is a draw from p without x,
  // renormalised; every emitted token is the sampler's own draw from the right logits, so the
  // output is what decoding without a draft gives. The KV of the drafted tokens not kept is
  // truncated (their positions are written again by the next step).
  void take_decode(Running& r, float* first_row, StepStats& stats) {
    const auto drafted = static_cast<int64_t>(r.draft.size());
    const int64_t pos = engine->kv().seq_len(r.seq) - 1 - drafted;  // the next token's
    int64_t accepted = 0;
    for (int64_t i = 0; i <= drafted; ++i) {
      const std::span<float> row(first_row + i * n_vocab, static_cast<size_t>(n_vocab));
      const TokenId token = sample_and_emit(r, row, pos + i + 1);
      if (r.done || i == drafted || token != r.draft[static_cast<size_t>(i)]) break;
      ++accepted;
    }
    if (drafted == 0) return;
    draft_odds.observe(r.draft_match, samples(r), drafted, accepted);
    if (!r.done) engine->kv().seq_truncate(r.seq, pos + 1 + accepted);
    stats.accepted_tokens += accepted;
    spec_drafted_total += drafted;
    spec_accepted_total += accepted;
  }

  // Prompt pieces of the sequences still prefilling, in admission order, within `chunk` tokens.
  void add_prefills(StepStats& stats) {
    int64_t budget_left = chunk;
    for (auto& rp : active) {
      Running& r = *rp;
      if (r.decoding) continue;
      const auto n = static_cast<int64_t>(r.req.prompt.size());
      if (!r.started) {
        if (budget_left < std::min(block, n)) continue;
        start(r);
      }
      const auto [begin, end] = next_piece(r, budget_left);
      if (begin == end) continue;
      grow(r, end);
      for (int64_t i = begin; i < end; ++i) {
        batch.push_back({r.seq, i, r.req.prompt[static_cast<size_t>(i)], i == n - 1});
      }
      if (end == n) rows.push_back(&r);
      budget_left -= end - begin;
      stats.prefill_tokens += end - begin;
      ++stats.prefill_sequences;
    }
  }

  // Not expected (batches are built valid): ends every sequence that was in the batch.
  void fail_batch(const Error& error) {
    for (auto& rp : active) {
      for (const BatchEntry& e : batch) {
        if (rp->started && e.seq == rp->seq && !rp->done) {
          finish(*rp, FinishReason::kCancelled,
                 Error::make(ErrorCode::kInternal, "local engine: " + error.message));
        }
      }
    }
  }

  // Allocates the sequence's KV and copies the longest cached prefix of its prompt (whole
  // blocks, leaving at least one prompt token to compute for the first logits).
  void start(Running& r) {
    const auto& prompt = r.req.prompt;
    const auto n = static_cast<int64_t>(prompt.size());
    r.hashes = block_hashes(prompt, block);
    CacheEntry* from = nullptr;
    int64_t reuse_blocks = 0;
    if (opt.prefix_cache) {
      const int64_t max_blocks = (n - 1) / block;
      for (CacheEntry& e : cache) {
        const int64_t m = matching_blocks(e, prompt, r.hashes, max_blocks);
        if (m > reuse_blocks) {
          reuse_blocks = m;
          from = &e;
        }
      }
    }
    r.seq = next_seq++;
    (void)engine->kv().seq_add(r.seq);  // ids are never reused: cannot fail
    r.capacity = 0;
    r.started = true;
    const int64_t first = std::min(r.reserve_tokens, n + std::min<int64_t>(r.req.max_tokens, 256));
    reallocate(r, first, 0);
    if (from != nullptr) {
      r.cached = reuse_blocks * block;
      copy_positions(from->seq, r.seq, r.cached);
      engine->kv().seq_extend(r.seq, r.cached);  // within capacity: marks them filled
      from->last_used = ++tick;
    }
    prompt_tokens_total += n;
    cached_tokens_total += r.cached;
  }

  // The prompt positions to prefill next within `budget` tokens: whole blocks, or the last
  // partial block on its own (empty when it does not fit).
  std::pair<int64_t, int64_t> next_piece(const Running& r, int64_t budget_tokens) const {
    const auto n = static_cast<int64_t>(r.req.prompt.size());
    const int64_t pos = engine->kv().seq_len(r.seq);
    const int64_t full_end = n / block * block;
    if (pos < full_end) {
      const int64_t k = std::min(full_end - pos, budget_tokens / block * block);
      return {pos, pos + k};
    }
    return n - pos <= budget_tokens ? std::pair{pos, n} : std::pair{pos, pos};
  }

  // Makes room for positions [0, len): capacity doubles, never beyond the reservation.
  void grow(Running& r, int64_t len) {
    if (len <= r.capacity) return;
    reallocate(r, std::min(r.reserve_tokens, std::max(len, 2 * r.capacity)),
               engine->kv().seq_len(r.seq));
  }

  // Moves the sequence to storage of exactly capacity_tokens(target) positions, keeping its
  // first `keep` positions (KvCache would round growth up to a doubling; this stays exact).
  void reallocate(Running& r, int64_t target, int64_t keep) {
    KvCache& kv = engine->kv();
    if (r.capacity == 0 && kv.seq_len(r.seq) == 0) {
      kv.seq_extend(r.seq, target);
      kv.seq_truncate(r.seq, 0);
    } else {
      const SeqId fresh = next_seq++;
      (void)kv.seq_add(fresh);
      kv.seq_extend(fresh, target);
      copy_positions(r.seq, fresh, keep);
      kv.seq_truncate(fresh, keep);
      kv.seq_remove(r.seq);
      r.seq = fresh;
    }
    r.capacity = capacity_tokens(target);
  }

  // Copies KV positions [0, len) between existing sequences whose storage holds them.
  void copy_positions(SeqId from, SeqId to, int64_t len) {
    KvCache& kv = engine->kv();
    const auto n = static_cast<size_t>(len * kv.kv_dim()) * sizeof(uint16_t);
    if (n == 0) return;
    for (int64_t layer = 0; layer < engine->config().n_layer; ++layer) {
      std::memcpy(kv.k(to, layer, 0), kv.k(from, layer, 0), n);
      std::memcpy(kv.v(to, layer, 0), kv.v(from, layer, 0), n);
    }
  }

  // Whole blocks an entry shares with a prompt (at most max_blocks); hashes find them, the
  // tokens confirm them.
  int64_t matching_blocks(const CacheEntry& e, const std::vector<TokenId>& prompt,
                          const std::vector<uint64_t>& hashes, int64_t max_blocks) const {
    const int64_t limit = std::min(
        {static_cast<int64_t>(e.hashes.size()), static_cast<int64_t>(hashes.size()), max_blocks});
    int64_t m = 0;
    while (m < limit && e.hashes[static_cast<size_t>(m)] == hashes[static_cast<size_t>(m)]) ++m;
    int64_t verified = 0;
    while (verified < m &&
           std::equal(prompt.begin() + verified * block, prompt.begin() + (verified + 1) * block,
                      e.tokens.begin() + verified * block)) {
      ++verified;
    }
    return verified;
  }

  // Keeps the KV of the prompt's whole blocks (just prefilled) for later requests.
  void insert_prefix(const Running& r) {
    if (!opt.prefix_cache) return;
    const int64_t blocks = static_cast<int64_t>(r.hashes.size());
    if (blocks == 0) return;
    for (CacheEntry& e : cache) {
      if (matching_blocks(e, r.req.prompt, r.hashes, blocks) == blocks) {
        e.last_used = ++tick;  // already cached (as this prefix or a longer one)
        return;
      }
    }
    // Entries the new one contains add nothing.
    for (size_t i = 0; i < cache.size();) {
      const CacheEntry& e = cache[i];
      if (matching_blocks(e, r.req.prompt, r.hashes, blocks) ==
          static_cast<int64_t>(e.hashes.size())) {
        drop_entry(i);
      } else {
        ++i;
      }
    }
    const int64_t len = blocks * block;
    const int64_t need = capacity_tokens(len) * bytes_per_token;
    while (committed() + cache_bytes + need > budget && !cache.empty()) evict_lru();
    if (committed() + cache_bytes + need > budget) return;
    CacheEntry e;
    e.seq = next_seq++;
    if (!engine->kv().seq_copy(r.seq, e.seq, len)) return;
    e.tokens.assign(r.req.prompt.begin(), r.req.prompt.begin() + len);
    e.hashes = r.hashes;
    e.bytes = need;
    e.last_used = ++tick;
    cache_bytes += need;
    cache.push_back(std::move(e));
  }

  void drop_entry(size_t i) {
    engine->kv().seq_remove(cache[i].seq);
    cache_bytes -= cache[i].bytes;
    cache.erase(cache.begin() + static_cast<ptrdiff_t>(i));
  }

  void evict_lru() {
    size_t oldest = 0;
    for (size_t i = 1; i < cache.size(); ++i) {
      if (cache[i].last_used < cache[oldest].last_used) oldest = i;
    }
    drop_entry(oldest);
  }

  // Samples the token after `filled` KV positions from `row` and delivers it, or ends the
  // request (end of generation, a stop string, max_tokens, the context). Returns the token.
  TokenId sample_and_emit(Running& r, std::span<float> row, int64_t filled) {
    const bool want_logprobs = r.req.top_logprobs >= 0;
    if (want_logprobs) raw.assign(row.begin(), row.end());
    const int32_t sampled = r.sampler.sample(row);
    if (sampled == kNoAllowedToken) {
      finish(r, FinishReason::kStop, no_allowed_token());
      return sampled;
    }
    const TokenId token = sampled;
    if (r.req.stop_at_eog && std::find(eog.begin(), eog.end(), token) != eog.end()) {
      finish(r, FinishReason::kStop, std::nullopt);
      return token;
    }
    r.sampler.accept(token);
    if (r.lookup) r.lookup->push(token);
    ++r.generated;
    ++produced;
    if (r.first_token_us < 0) r.first_token_us = micros(Clock::now() - r.submitted);
    const std::string text = piece ? r.stream.push(piece(token)) : std::string();
    if (r.req.on_token) {
      TokenEvent ev;
      ev.token = token;
      ev.text = text;
      if (want_logprobs) {
        const float max_logit = *std::max_element(raw.begin(), raw.end());
        double sum = 0;
        for (const float l : raw) sum += std::exp(static_cast<double>(l - max_logit));
        const double lse = std::log(sum) + static_cast<double>(max_logit);
        ev.logprob = static_cast<float>(static_cast<double>(raw[static_cast<size_t>(token)]) - lse);
        const auto n_top = std::min<size_t>(static_cast<size_t>(r.req.top_logprobs), raw.size());
        order.resize(raw.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<TokenId>(i);
        std::partial_sort(order.begin(), order.begin() + static_cast<ptrdiff_t>(n_top), order.end(),
                          [&](TokenId a, TokenId b) {
                            const float la = raw[static_cast<size_t>(a)];
                            const float lb = raw[static_cast<size_t>(b)];
                            return la > lb || (la == lb && a < b);
                          });
        top.clear();
        for (size_t i = 0; i < n_top; ++i) {
          const float l = raw[static_cast<size_t>(order[i])];
          top.push_back({order[i], static_cast<float>(static_cast<double>(l) - lse)});
        }
        ev.top_logprobs = top;
      }
      deliver(r, ev);
    }
    if (r.stream.stopped()) {
      finish(r, FinishReason::kStop, std::nullopt);
    } else if (r.generated >= r.req.max_tokens || filled >= n_ctx) {
      finish(r, FinishReason::kLength, std::nullopt);
    } else {
      r.next_token = token;
    }
    return token;
  }

  void deliver(Running& r, const TokenEvent& ev) {
    ++r.unread;
    r.req.on_token(ev);
  }

  // Ends a running request: last held-back text, KV freed, on_done.
  void finish(Running& r, FinishReason reason, std::optional<Error> error) {
    if (r.done) return;
    r.done = true;
    if (!error && piece) {
      const std::string rest = r.stream.finish();
      if (!rest.empty() && r.generated > 0 && r.req.on_token) {
        TokenEvent ev;
        ev.text = rest;
        deliver(r, ev);
      }
    }
    if (r.prefix_pending) {
      r.prefix_pending = false;
      insert_prefix(r);
    }
    if (r.started) engine->kv().seq_remove(r.seq);
    reserved -= r.reserved_bytes;
    const auto now = Clock::now();
    Completion c;
    c.finish = error ? FinishReason::kCancelled : reason;
    c.error = std::move(error);
    c.prompt_tokens = static_cast<int64_t>(r.req.prompt.size());
    c.cached_tokens = r.cached;
    c.completion_tokens = r.generated;
    c.queued_us = micros(r.admitted - r.submitted);
    c.first_token_us = r.first_token_us;
    c.total_us = micros(now - r.submitted);
    completion_tokens_total += r.generated;
    ++requests_completed;
    if (c.error) {
      if (c.error->code == ErrorCode::kCancelled || c.error->code == ErrorCode::kTimeout) {
        ++sequences_cancelled;
      }
    } else {
      avg_completion = 0.8 * avg_completion + 0.2 * static_cast<double>(r.generated);
    }
    publish();
    if (r.req.on_done) r.req.on_done(c);
  }

  void end_waiting(const Waiting& w, Error error) {
    const auto now = Clock::now();
    Completion c;
    c.finish = FinishReason::kCancelled;
    c.prompt_tokens = static_cast<int64_t>(w.req.prompt.size());
    c.queued_us = micros(now - w.submitted);
    c.total_us = c.queued_us;
    if (error.code == ErrorCode::kCancelled || error.code == ErrorCode::kTimeout) {
      ++sequences_cancelled;
    }
    c.error = std::move(error);
    ++requests_completed;
    publish();
    if (w.req.on_done) w.req.on_done(c);
  }

  void compact() {
    std::erase_if(active, [](const std::unique_ptr<Running>& r) { return r->done; });
  }

  // Refreshes the snapshot load() returns. Scheduler thread.
  void publish() {
    const auto now = Clock::now();
    while (!rate.empty() && now - rate.front().end > kRateWindow) rate.pop_front();
    double tps = 0;
    if (!rate.empty()) {
      int64_t tokens = 0;
      for (const auto& s : rate) tokens += s.tokens;
      const double span = std::chrono::duration<double>(now - rate.front().start).count();
      if (span > 0) tps = static_cast<double>(tokens) / span;
    }
    // Steps until each running sequence is expected to end (at most its max_tokens, else about
    // the recent average length), soonest first: a newcomer waits for the slot after the queue.
    std::vector<int64_t> left;
    int64_t running = 0, n_paused = 0;
    for (const auto& r : active) {
      if (r->done) continue;
      ++running;
      if (r->decoding && paused(*r)) ++n_paused;
      const int64_t cap = r->req.max_tokens - r->generated;
      const auto expected = static_cast<int64_t>(avg_completion) - r->generated;
      left.push_back(std::clamp<int64_t>(expected, 1, std::max<int64_t>(1, cap)));
    }
    std::sort(left.begin(), left.end());
    const int64_t kv_used = static_cast<int64_t>(engine->kv().memory_bytes());
    std::lock_guard lock(mu);
    const auto ahead = static_cast<int64_t>(waiting.size());
    const int64_t free_slots = opt.max_sequences - running;
    int64_t wait_steps = 0;
    if (ahead >= free_slots && !left.empty()) {
      const int64_t k = ahead - free_slots;  // slots that must free up first
      const auto n_left = static_cast<int64_t>(left.size());
      wait_steps = left[static_cast<size_t>(std::min(k, n_left - 1))] +
                   (k / n_left) * std::max<int64_t>(1, static_cast<int64_t>(avg_completion));
    }
    LoadSnapshot& s = snapshot;
    s.active_sequences = running;
    s.paused_sequences = n_paused;
    s.kv_bytes_used = kv_used;
    s.kv_bytes_embeddings = embedder->kv_bytes();
    s.kv_bytes_peak = kv_peak;
    s.prefix_cache_bytes = cache_bytes;
    s.prefix_cache_entries = static_cast<int64_t>(cache.size());
    s.est_wait_ms = static_cast<int64_t>(static_cast<double>(wait_steps) * std::max(step_ms, 1.0));
    s.tokens_per_second = tps;
    s.prompt_tokens_total = prompt_tokens_total;
    s.cached_tokens_total = cached_tokens_total;
    s.prefix_cache_hit_ratio =
        prompt_tokens_total > 0
            ? static_cast<double>(cached_tokens_total) / static_cast<double>(prompt_tokens_total)
            : 0.0;
    s.completion_tokens_total = completion_tokens_total;
    s.requests_completed = requests_completed;
    s.sequences_cancelled = sequences_cancelled;
    s.spec_drafted_total = spec_drafted_total;
    s.spec_accepted_total = spec_accepted_total;
    n_active_shared = running;
  }

  // Ends every queued and running request (the thread has stopped).
  void shutdown() {
    std::deque<Waiting> left;
    {
      std::lock_guard lock(mu);
      left.swap(waiting);
    }
    for (Waiting& w : left) end_waiting(w, shutdown_error());
    for (auto& r : active) finish(*r, FinishReason::kCancelled, shutdown_error());
    compact();
    std::deque<EmbedWaiting> embed_left;
    {
      std::lock_guard lock(mu);
      embed_left.swap(embed_waiting);
    }
    for (EmbedWaiting& w : embed_left) {
      if (w.req.on_done) w.req.on_done(shutdown_error());
    }
    embedder->fail_all(*engine, shutdown_error());
  }

  std::unique_ptr<Engine> engine;
  SchedulerOptions opt;
  TokenPieceFn piece;
  std::vector<TokenId> eog;
  int64_t n_ctx = 0;
  int64_t n_vocab = 0;
  int64_t bytes_per_token = 0;
  int64_t block = 16;
  int64_t chunk = 256;
  int64_t budget = 0;

  // Shared with submit/cancel/load, guarded by mu.
  mutable std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::deque<Waiting> waiting;
  struct EmbedWaiting {
    RequestId id = 0;
    EmbeddingRequest req;
    Clock::time_point submitted;
  };
  std::deque<EmbedWaiting> embed_waiting;
  int64_t embed_pending = 0;  // embeddings requests submitted and not yet ended
  std::vector<RequestId> cancels;
  std::vector<std::pair<RequestId, int64_t>> acks;  // consumed(): events taken per request
  uint64_t submits = 0;                             // requests submitted, ever
  RequestId next_id = 1;
  int64_t n_active_shared = 0;
  LoadSnapshot snapshot;

  // The scheduler thread's own state (admit() runs on it, under mu).
  std::vector<std::unique_ptr<Running>> active;
  std::vector<CacheEntry> cache;
  bool stalled = false;
  bool idle = false;  // the last step computed nothing: every running sequence is paused
  uint64_t seen_submits = 0;
  int64_t reserved = 0;     // bytes reserved by running sequences
  int64_t cache_bytes = 0;  // bytes held by cached prefixes
  int64_t kv_peak = 0;      // the most KV allocated at any forward pass, since start
  SeqId next_seq = 0;
  uint64_t tick = 0;
  int64_t prompt_tokens_total = 0;
  int64_t cached_tokens_total = 0;
  int64_t completion_tokens_total = 0;
  int64_t requests_completed = 0;
  int64_t sequences_cancelled = 0;
  bool speculate = false;  // prompt-lookup drafts (options on, batch-invariant engine)
  int64_t spec_drafted_total = 0;
  int64_t spec_accepted_total = 0;
  DraftCost draft_cost;            // what a drafted position costs, from the steps' timings
  DraftOdds draft_odds;            // how often drafts of each kind are kept
  int64_t decoding_sequences = 1;  // in the last step
  int64_t produced = 0;            // tokens generated in the current step
  double step_ms = 0;              // recent decode step time
  double avg_completion = 128;     // recent completion length
  struct RateSample {
    Clock::time_point start, end;
    int64_t tokens;
  };
  std::deque<RateSample> rate;
  std::vector<BatchEntry> batch;
  std::vector<Running*> rows;  // the sequence of each logits row
  std::vector<float> logits, raw;
  std::vector<TokenId> order;
  std::vector<TopLogprob> top;
  std::unique_ptr<EmbeddingRunner> embedder;  // the scheduler thread's
  std::thread thread;
};

Scheduler::Scheduler(std::unique_ptr<Engine> engine, SchedulerOptions options, TokenPieceFn piece,
                     std::vector<TokenId> eog_tokens)
    : impl_(std::make_unique<Impl>(std::move(engine), std::move(options), std::move(piece),
                                   std::move(eog_tokens))) {}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  impl_->thread.join();
  impl_->shutdown();
}

Result<RequestId> Scheduler::submit(GenerationRequest request) {
  Impl& im = *impl_;
  const auto n = static_cast<int64_t>(request.prompt.size());
  if (n == 0) return Error::make(ErrorCode::kInvalidRequest, "the prompt is empty", "prompt");
  for (const TokenId t : request.prompt) {
    if (t < 0 || t >= im.n_vocab) {
      return Error::make(ErrorCode::kInvalidRequest,
                         "token " + std::to_string(t) + " is outside the vocabulary", "prompt");
    }
  }
  if (request.max_tokens < 1) {
    return Error::make(ErrorCode::kInvalidRequest, "max_tokens must be at least 1", "max_tokens");
  }
  // Compared without adding: n + max_tokens overflows for a max_tokens near INT64_MAX.
  if (request.max_tokens > im.n_ctx - n) {
    return Error::make(ErrorCode::kContextOverflow,
                       context_overflow_message(im.n_ctx, n, request.max_tokens), "messages",
                       "context_length_exceeded");
  }
  int64_t need = 0;
  if (__builtin_mul_overflow(im.reservation_tokens(request), im.bytes_per_token, &need)) {
    need = INT64_MAX;
  }
  if (need > im.budget) {
    return Error::make(ErrorCode::kContextOverflow,
                       "the prompt and max_tokens need " + kv_size_text(need) +
                           " of KV cache, more than the local engine's budget of " +
                           kv_size_text(im.budget),
                       "max_tokens", "context_length_exceeded");
  }
  std::unique_lock lock(im.mu);
  if (im.stopping) return shutdown_error();
  const int64_t free_slots = std::max<int64_t>(0, im.opt.max_sequences - im.n_active_shared);
  if (static_cast<int64_t>(im.waiting.size()) >= im.opt.max_queue + free_slots) {
    Error e = Error::make(ErrorCode::kUnavailable, "the local engine is overloaded (" +
                                                       std::to_string(im.waiting.size()) +
                                                       " requests queued); retry later");
    e.retry_after_s = std::max<int64_t>(1, (im.snapshot.est_wait_ms + 999) / 1000);
    return e;
  }
  const RequestId id = im.next_id++;
  im.waiting.push_back({id, std::move(request), Clock::now()});
  ++im.submits;
  lock.unlock();
  im.cv.notify_one();
  return id;
}

Result<RequestId> Scheduler::submit_embeddings(EmbeddingRequest request) {
  Impl& im = *impl_;
  if (request.inputs.empty()) {
    return Error::make(ErrorCode::kInvalidRequest, "no input to embed", "input");
  }
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const auto& in = request.inputs[i];
    const auto n = static_cast<int64_t>(in.size());
    if (n == 0) {
      return Error::make(ErrorCode::kInvalidRequest,
                         "input " + std::to_string(i) + " has no tokens", "input");
    }
    for (const TokenId t : in) {
      if (t < 0 || t >= im.n_vocab) {
        return Error::make(ErrorCode::kInvalidRequest,
                           "token " + std::to_string(t) + " is outside the vocabulary", "input");
      }
    }
    if (n > im.n_ctx) {
      return Error::make(ErrorCode::kContextOverflow,
                         "this model's context is " + std::to_string(im.n_ctx) + " tokens; input " +
                             std::to_string(i) + " is " + std::to_string(n) + " tokens",
                         "input", "context_length_exceeded");
    }
    // Each input's KV is held while it is computed; one that the whole budget cannot hold
    // would wait for ever.
    const int64_t need = im.capacity_tokens(n) * im.bytes_per_token;
    if (need > im.budget) {
      return Error::make(ErrorCode::kContextOverflow,
                         "input " + std::to_string(i) + " (" + std::to_string(n) +
                             " tokens) needs " + kv_size_text(need) +
                             " of KV cache, more than the local engine's budget of " +
                             kv_size_text(im.budget),
                         "input", "context_length_exceeded");
    }
  }
  std::unique_lock lock(im.mu);
  if (im.stopping) return shutdown_error();
  if (im.embed_pending >= std::max<int64_t>(1, im.opt.max_queue)) {
    Error e = Error::make(ErrorCode::kUnavailable, "the local engine is overloaded (" +
                                                       std::to_string(im.embed_pending) +
                                                       " embeddings requests queued); retry later");
    e.retry_after_s = 1;
    return e;
  }
  ++im.embed_pending;
  // The count drops when the request ends, on the scheduler thread and never under mu; the
  // snapshot is refreshed first (its last pass counted), as a generation's is before on_done.
  request.on_done = [&im, done = std::move(request.on_done)](Result<EmbeddingResult> r) {
    {
      std::lock_guard guard(im.mu);
      --im.embed_pending;
    }
    im.kv_peak = std::max(im.kv_peak, im.embedder->last_pass_kv_bytes());
    im.publish();
    if (done) done(std::move(r));
  };
  const RequestId id = im.next_id++;
  im.embed_waiting.push_back({id, std::move(request), Clock::now()});
  ++im.submits;
  lock.unlock();
  im.cv.notify_one();
  return id;
}

void Scheduler::cancel(RequestId id) {
  {
    std::lock_guard lock(impl_->mu);
    impl_->cancels.push_back(id);
  }
  impl_->cv.notify_one();
}

void Scheduler::consumed(RequestId id, int64_t events) {
  if (events <= 0) return;
  {
    std::lock_guard lock(impl_->mu);
    impl_->acks.emplace_back(id, events);
  }
  impl_->cv.notify_one();
}

LoadSnapshot Scheduler::load() const {
  std::lock_guard lock(impl_->mu);
  LoadSnapshot s = impl_->snapshot;
  s.queue_depth = static_cast<int64_t>(impl_->waiting.size());
  return s;
}

int64_t Scheduler::n_ctx() const {
  return impl_->n_ctx;
}
const ModelConfig& Scheduler::model_config() const {
  return impl_->engine->config();
}
int64_t Scheduler::kv_budget_bytes() const {
  return impl_->budget;
}
int64_t Scheduler::kv_bytes_per_token() const {
  return impl_->bytes_per_token;
}

}  // namespace ferry::engine
