#include "adapters/local_backend.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <deque>
#include <mutex>
#include <optional>
#include <random>

#include <nlohmann/json.hpp>

#include "adapters/local_constraint.h"
#include "adapters/local_embeddings.h"
#include "adapters/openai_wire.h"
#include "api/openai_parse.h"
#include "api/openai_render.h"
#include "constrain/matcher.h"
#include "constrain/vocabulary.h"
#include "local_engine/encoder_runner.h"
#include "local_engine/gguf_source.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferry::adapters {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;
using engine::TokenId;

namespace {

constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);

// Wakes the waiting send() coroutine: try_send from the scheduler thread never blocks, and a
// full buffer means a wake-up is already pending.
using WakeChannel = asio::experimental::concurrent_channel<void(boost::system::error_code)>;

// One generated token (or the held-back text at the end) as handed to the I/O side.
struct TokenOut {
  TokenId token = -1;
  std::string text;
  float logprob = 0;
  std::vector<engine::TopLogprob> top;
};

// What the scheduler thread hands to one send() call. The wake channel belongs to the send()
// coroutine (it must die with its executor's context); `wake` is null once send() has left.
struct Pending {
  std::mutex mu;
  std::deque<TokenOut> tokens;
  std::optional<engine::Completion> done;
  WakeChannel* wake = nullptr;

  void notify_locked() {
    if (wake != nullptr) wake->try_send(boost::system::error_code{});
  }
};

std::string dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// One result handed from another thread (the compile pool, the scheduler) to a coroutine of
// an I/O loop. The wake channel lives in the coroutine's frame, never here: a channel is
// destroyed through its executor's context, so the other thread must never hold the last
// reference to one (the context may be gone by the time that thread lets go). The other thread
// touches the channel only under the mutex, while a Hook has it.
template <typename T>
struct Handoff {
  std::mutex mu;
  std::optional<T> value;
  WakeChannel* wake = nullptr;

  // From the other thread.
  void deliver(T v) {
    std::lock_guard lock(mu);
    value = std::move(v);
    if (wake != nullptr) wake->try_send(boost::system::error_code{});
  }

  // The frame's hold on its channel: however the frame ends (even destroyed mid-wait when its
  // context goes away), the other thread stops touching the channel.
  struct Hook {
    Handoff& h;
    Hook(Handoff& handoff, WakeChannel& channel) : h(handoff) {
      std::lock_guard lock(h.mu);
      h.wake = &channel;
    }
    Hook(const Hook&) = delete;
    Hook& operator=(const Hook&) = delete;
    ~Hook() {
      std::lock_guard lock(h.mu);
      h.wake = nullptr;
    }
  };

  // In the frame: waits on `channel` (hooked) until the value is delivered, and takes it.
  asio::awaitable<T> receive(WakeChannel& channel) {
    for (;;) {
      std::optional<T> got;
      {
        std::lock_guard lock(mu);
        got = std::move(value);
        value.reset();
      }
      if (got) co_return std::move(*got);
      auto [ec] = co_await channel.async_receive(kAwait);
      (void)ec;
    }
  }
};

Error invalid(std::string message, std::string param) {
  return Error::make(ErrorCode::kInvalidRequest, std::move(message), std::move(param));
}

// The parameters of a request that the engine acts on.
struct Params {
  std::vector<TokenId> prompt;
  std::optional<int64_t> max_tokens;
  engine::SamplingParams sampling;
  std::vector<std::string> stop;
  bool stop_at_eog = true;
  int32_t top_logprobs = -1;           // < 0: no logprobs
  int64_t n = 1;                       // choices, decoded as parallel sequences over one prompt
  ConstraintRequest constraint;        // response_format / tools
  constrain::CompiledGrammar grammar;  // compiled from it (null grammar: none)
};

// Choice i > 0 samples with its own stream: splitmix64 of the request's seed and i, so a fixed
// seed reproduces every choice and choice 0 is what n = 1 gives.
uint64_t choice_seed(uint64_t seed, int64_t index) {
  if (index == 0) return seed;
  uint64_t z = seed + static_cast<uint64_t>(index) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t random_seed() {
  static std::atomic<uint64_t> counter{std::random_device{}()};
  return counter.fetch_add(0x9e3779b97f4a7c15ull, std::memory_order_relaxed);
}

// What the engine cannot do, and the checks HTTP backends leave to themselves: refused here.
// The OpenAI ranges were checked when the request was parsed (api/openai_parse.h).
Status check_supported(const api::ChatRequest& r) {
  if (r.extension_error) return *r.extension_error;
  if (r.limits.echo.value_or(false)) {
    return invalid("'echo' is not supported by the local engine", "echo");
  }
  if (r.limits.best_of.value_or(1) > 1) {
    return invalid("'best_of' is not supported by the local engine", "best_of");
  }
  return {};
}

// Sampling from the typed request and a rule's overrides; logit_bias keys checked against this
// model's vocabulary.
Status sampling_params(const api::ChatRequest& r, const api::Overrides& o, int64_t n_vocab,
                       engine::SamplingParams& out) {
  const api::Sampling& s = r.sampling;
  out.temperature = static_cast<float>(o.temperature.value_or(s.temperature.value_or(1.0)));
  out.top_p = static_cast<float>(o.top_p.value_or(s.top_p.value_or(1.0)));
  out.min_p = static_cast<float>(s.min_p.value_or(0.0));  // vLLM / llama.cpp extension
  out.top_k = static_cast<int32_t>(std::clamp<int64_t>(s.top_k.value_or(0), -1, 1 << 20));
  out.frequency_penalty = static_cast<float>(s.frequency_penalty.value_or(0.0));
  out.presence_penalty = static_cast<float>(s.presence_penalty.value_or(0.0));
  out.repetition_penalty = static_cast<float>(s.repetition_penalty.value_or(1.0));
  out.penalty_last_n = -1;  // OpenAI's penalties look at the whole completion
  out.seed = s.seed ? static_cast<uint64_t>(*s.seed) : random_seed();
  if (!s.logit_bias) return {};
  for (const auto& [id, bias] : *s.logit_bias) {
    if (id >= n_vocab) {
      return invalid("'logit_bias' keys must be token ids below the vocabulary size " +
                         std::to_string(n_vocab) + ", got '" + std::to_string(id) + "'",
                     "logit_bias");
    }
    out.logit_bias[id] = static_cast<float>(bias);
  }
  return {};
}

// What a constrained output cannot be combined with on this engine: a stop string would cut the
// document (valid by construction only when whole), ignore_eos would run past its end, and a
// tool call's tokens carry no logprobs entry. Refused so another target may serve them.
Status check_constrained(const api::ChatRequest& r, const Params& p) {
  if (p.constraint.mode == ConstraintMode::kNone) return {};
  const std::string what =
      p.constraint.mode == ConstraintMode::kTools ? "'tools'" : "'response_format'";
  if (!r.chat()) return invalid(what + " needs /v1/chat/completions", "response_format");
  if (!p.stop.empty()) {
    return unsupported_by_target(
        "'stop' cannot be combined with " + what +
            " on the local engine (a stop string would cut the constrained output)",
        "stop");
  }
  if (!p.stop_at_eog) {
    return unsupported_by_target(
        "'ignore_eos' cannot be combined with " + what + " on the local engine", "ignore_eos");
  }
  if (p.constraint.mode == ConstraintMode::kTools && p.top_logprobs >= 0) {
    return unsupported_by_target("'logprobs' with 'tools' is not supported by the local engine",
                                 "logprobs");
  }
  if (!p.constraint.think.begin.empty() && p.top_logprobs >= 0) {
    return unsupported_by_target(
        "'logprobs' with 'response_format' on a thinking model is not supported by the local "
        "engine (set chat_template_kwargs.enable_thinking: false)",
        "logprobs");
  }
  return {};
}

// Limits, sampling, stop strings and logprobs (the prompt is separate).
Result<Params> engine_params(const api::ChatRequest& r, const api::Overrides& o, int64_t n_vocab) {
  if (Status s = check_supported(r); !s) return s.error();
  Params p;
  p.n = r.limits.choices();
  const int64_t max_tokens = o.max_tokens.value_or(r.limits.effective_max_tokens());
  if (o.max_tokens && max_tokens < 1) {
    return invalid("'max_tokens' must be at least 1", "max_tokens");
  }
  if (max_tokens > 0) p.max_tokens = max_tokens;
  if (Status s = sampling_params(r, o, n_vocab, p.sampling); !s) return s.error();
  if (r.sampling.stop) p.stop = *r.sampling.stop;
  p.stop_at_eog = !r.sampling.ignore_eos.value_or(false);  // extension
  if (r.logprobs.logprobs.value_or(false)) {
    p.top_logprobs = static_cast<int32_t>(r.logprobs.top_logprobs.value_or(0));
  }
  return p;
}

// A prompt item as the client wrote it, for an error message.
std::string item_text(const api::PromptItem& item) {
  switch (item.kind) {
    case api::PromptItem::Kind::kText:
      return dump(Json(item.text));
    case api::PromptItem::Kind::kTokenId:
      return std::to_string(item.tokens.at(0));
    case api::PromptItem::Kind::kTokenIds:
      break;
  }
  return dump(Json(item.tokens));
}

Json usage_json(const engine::Completion& c, int64_t reasoning_tokens = 0) {
  Json u;
  u["prompt_tokens"] = c.prompt_tokens;
  u["completion_tokens"] = c.completion_tokens;
  u["total_tokens"] = c.prompt_tokens + c.completion_tokens;
  u["prompt_tokens_details"] = Json{{"cached_tokens", c.cached_tokens}};
  u["completion_tokens_details"] = Json{{"reasoning_tokens", reasoning_tokens}};
  return u;
}

}  // namespace

struct LocalBackend::Impl {
  config::BackendConfig cfg;
  std::shared_ptr<const tokenizer::Tokenizer> tok;
  std::shared_ptr<const tokenizer::ChatFormatter> chat;  // null: the model has no template
  std::string chat_error;
  TemplateTools template_tools;  // how the template writes tool calls
  // The think block's markers as token ids (a thinking template), for a reasoning budget.
  std::vector<TokenId> think_open, think_close;
  std::shared_ptr<const constrain::Vocabulary> vocab;  // the constraint engine's view of tok
  constrain::GrammarCache grammars;
  // Every state mask of a newly compiled grammar is computed here for the model's vocabulary,
  // once per grammar, while its first requests run (they fill masks as they go meanwhile):
  // later steps never walk a state for the first time. Apart from compile_pool, so that a
  // long preparation (json_object: 25-40 ms at 152k tokens) never delays a compilation.
  asio::thread_pool prepare_pool{1};  // declared before compile_pool: joined after it
  // Constraints compile here, off the I/O loops and off the scheduler thread (one thread: a
  // cache hit costs a hand-off; a miss a few ms at the p99 of the schema set).
  asio::thread_pool compile_pool{1};
  // json_object is one grammar for every request (with the template's think block or
  // without): compiled and prepared at load, on prepare_pool.
  void prepare_json_object() {
    std::vector<constrain::ThinkBlock> thinks{constrain::ThinkBlock{}};
    if (!template_tools.think_begin.empty()) thinks.push_back(think_block(template_tools));
    for (const constrain::ThinkBlock& think : thinks) {
      auto g = grammars.json_object({}, think);
      if (g && g->grammar->masks && g->grammar->masks->claim_prepare(vocab->serial()))
        constrain::Matcher(g->grammar, vocab).prepare_state_masks();
    }
  }
  void prepare_masks(const std::shared_ptr<const constrain::Grammar>& grammar) {
    if (!grammar->masks || !grammar->masks->claim_prepare(vocab->serial())) return;
    asio::post(prepare_pool,
               [grammar, v = vocab] { constrain::Matcher(grammar, v).prepare_state_masks(); });
  }
  std::unique_ptr<engine::Scheduler> scheduler;
  // An encoder model (bert) has no scheduler: its embeddings run here, and it answers nothing
  // else.
  std::unique_ptr<engine::EncoderRunner> encoder;

  // Compiles `c` on the compile pool; the coroutine waits on its own executor.
  asio::awaitable<Result<constrain::CompiledGrammar>> compile(const ConstraintRequest& c);

  int64_t n_vocab() const {
    return encoder ? encoder->config().n_vocab : scheduler->model_config().n_vocab;
  }
  int64_t n_ctx() const { return encoder ? encoder->n_ctx() : scheduler->n_ctx(); }

  // The prompt's token ids, as the engine will run them.
  Result<std::vector<TokenId>> prompt_tokens(const api::ChatRequest& r) const {
    std::vector<tokenizer::TokenId> ids;
    if (r.chat()) {
      if (!chat) return Error::make(ErrorCode::kInvalidRequest, chat_error, "messages");
      auto text = chat->render(api::template_input(r));
      if (!text) return std::move(text).error();
      tokenizer::encode_prompt(*tok, *text, ids);
    } else if (Status s = completion_tokens(r.prompt, ids); !s) {
      return s.error();
    }
    if (ids.empty()) return invalid("the prompt is empty", "prompt");
    return std::vector<TokenId>(ids.begin(), ids.end());
  }

  // One prompt: a string (or an array of one string), or token ids of this vocabulary.
  Status completion_tokens(const api::Prompt& prompt, std::vector<tokenizer::TokenId>& ids) const {
    using Kind = api::PromptItem::Kind;
    const auto& items = prompt.items;
    if (items.size() == 1 && items[0].kind == Kind::kText) {
      tokenizer::encode_prompt(*tok, items[0].text, ids);
    } else if (prompt.array && !items.empty() && items[0].kind == Kind::kTokenId) {
      const int64_t vocab = n_vocab();
      for (const api::PromptItem& item : items) {
        if (item.kind != Kind::kTokenId || item.tokens.at(0) >= vocab) {
          return invalid("'prompt' token ids must be integers between 0 and " +
                             std::to_string(vocab - 1) + " (the vocabulary), got " +
                             item_text(item),
                         "prompt");
        }
        ids.push_back(static_cast<tokenizer::TokenId>(item.tokens[0]));
      }
    } else if (prompt.array && items.size() > 1) {
      return invalid("the local engine takes one prompt per request", "prompt");
    } else {
      return invalid("'prompt' must be a string or an array of token ids", "prompt");
    }
    return {};
  }

  // The engine's parameters and prompt for `request`: the tokens routing counted when it did
  // (not tokenized again), and the context checked.
  Result<Params> prepare(const api::ChatRequest& r, const BackendRequest& request) const {
    auto params = engine_params(r, request.overrides, n_vocab());
    if (!params) return params;
    auto constraint = constraint_request(r, template_tools);
    if (!constraint) return std::move(constraint).error();
    params->constraint = std::move(constraint).value();
    if (Status s = check_constrained(r, *params); !s) return s.error();
    if (request.prompt) {
      params->prompt = request.prompt->ids;
    } else {
      auto prompt = prompt_tokens(r);
      if (!prompt) return std::move(prompt).error();
      params->prompt = std::move(prompt).value();
    }
    if (request.think_budget >= 0) params->sampling.think = think_budget(*params, request);
    const int64_t n_ctx = this->n_ctx();
    const auto n_prompt = static_cast<int64_t>(params->prompt.size());
    // Compared without adding: prompt + max_tokens would overflow for a max_tokens near INT64_MAX.
    if (n_prompt > n_ctx - params->max_tokens.value_or(1)) {
      return Error::make(
          ErrorCode::kContextOverflow,
          engine::Scheduler::context_overflow_message(n_ctx, n_prompt, params->max_tokens),
          params->max_tokens ? "max_tokens" : (r.chat() ? "messages" : "prompt"),
          "context_length_exceeded");
    }
    return params;
  }

  // A policy's reasoning budget for this request's think block: inactive where there is none
  // to close (no thinking template, a completion) or where a constraint's grammar would not take
  // the closing marker there (its think block opens in the output, never in the prompt).
  engine::ThinkBudget think_budget(const Params& p, const BackendRequest& request) const {
    engine::ThinkBudget t;
    if (think_close.empty() || request.endpoint != Endpoint::kChatCompletions) return t;
    t.open_at_start = prompt_opens_think(p.prompt);
    if (p.constraint.mode != ConstraintMode::kNone &&
        (p.constraint.think.begin.empty() || t.open_at_start)) {
      return t;
    }
    t.open = think_open;
    t.close = think_close;
    t.max_tokens = request.think_budget;
    return t;
  }

  // Whether the prompt ends inside a think block: its text ends with the opening marker (and
  // white space), as a template that starts the model's thinking for it writes.
  bool prompt_opens_think(const std::vector<TokenId>& prompt) const {
    const std::string& open = template_tools.think_begin;
    const size_t n = std::min<size_t>(prompt.size(), open.size() + 8);
    std::string tail;
    for (size_t i = prompt.size() - n; i < prompt.size(); ++i) {
      tail += tok->token_bytes(static_cast<tokenizer::TokenId>(prompt[i]));
    }
    while (!tail.empty() && std::isspace(static_cast<unsigned char>(tail.back())) != 0) {
      tail.pop_back();
    }
    return tail.size() >= open.size() &&
           tail.compare(tail.size() - open.size(), open.size(), open) == 0;
  }

  LocalEmbeddingsModel embeddings_model() const {
    const int64_t n_embd = encoder ? encoder->config().n_embd : scheduler->model_config().n_embd;
    LocalEmbeddingsModel m{tok.get(), n_vocab(), n_ctx(), n_embd, cfg.local->embeddings, {}, {}};
    set_frame_tokens(m);
    return m;
  }

  // The embeddings request to the scheduler (a decoder, with the pooling its file names) or to
  // the encoder's runner; its id for cancel_embeddings.
  Result<uint64_t> submit_embeddings(engine::EmbeddingRequest er) {
    if (encoder) return encoder->submit(std::move(er));
    auto pooling = engine::pooling_for(scheduler->model_config());
    if (!pooling) return std::move(pooling).error();
    er.pooling = *pooling;
    return scheduler->submit_embeddings(std::move(er));
  }
  void cancel_embeddings(uint64_t id) {
    if (encoder) {
      encoder->cancel(id);
    } else {
      scheduler->cancel(id);
    }
  }

  Error with_name(Error e) const {
    if (e.code == ErrorCode::kUnavailable || e.code == ErrorCode::kInternal) {
      e.message = "backend '" + cfg.name + "': " + e.message;
    }
    return e;
  }
};

asio::awaitable<Result<constrain::CompiledGrammar>> LocalBackend::Impl::compile(
    const ConstraintRequest& c) {
  auto handoff = std::make_shared<Handoff<Result<constrain::CompiledGrammar>>>();
  WakeChannel wake(co_await asio::this_coro::executor, 1);
  Handoff<Result<constrain::CompiledGrammar>>::Hook hook(*handoff, wake);
  asio::post(compile_pool, [this, handoff, c] {
    Result<constrain::CompiledGrammar> out = compile_constraint(c, grammars);
    if (out) prepare_masks(out->grammar);
    handoff->deliver(std::move(out));
  });
  co_return co_await handoff->receive(wake);
}

LocalBackend::LocalBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

// An encoder (bert): its tokenizer and its runner; no chat template, no scheduler.
Result<std::unique_ptr<LocalBackend>> LocalBackend::open_encoder(
    const config::BackendConfig& config, std::shared_ptr<const engine::GgufSource> source) {
  const config::LocalEngineConfig& lc = *config.local;
  auto fail = [&](const std::string& what) {
    return Error::make(ErrorCode::kUnavailable,
                       "backend '" + config.name + "': " + lc.model_path + ": " + what);
  };
  if (!lc.decoder_keys.empty()) {
    std::string keys;
    for (const std::string& k : lc.decoder_keys) keys += (keys.empty() ? "" : ", ") + k;
    return fail("an encoder model (embeddings only) has no use for " + keys +
                ": these keys apply to decoder models; remove them");
  }
  auto model = engine::EncoderModel::load(std::move(source));
  if (!model) return fail(model.error().message);
  auto encoder = engine::Encoder::create(std::move(model).value(), lc.threads);
  if (!encoder) return fail(encoder.error().message);
  auto tok = tokenizer::load_tokenizer(lc.model_path);
  if (!tok) return fail("tokenizer: " + tok.error().message);
  auto impl = std::make_unique<Impl>();
  impl->cfg = config;
  impl->tok = tok.value();
  impl->chat_error = "backend '" + config.name + "' serves an embedding model: use /v1/embeddings";
  impl->encoder = std::make_unique<engine::EncoderRunner>(
      std::move(encoder).value(), engine::SchedulerOptions{}.embedding_batch_tokens, lc.max_queue);
  return std::unique_ptr<LocalBackend>(new LocalBackend(std::move(impl)));
}
LocalBackend::~LocalBackend() = default;

Result<std::unique_ptr<LocalBackend>> LocalBackend::open(const config::BackendConfig& config) {
  if (config.kind != "local" || !config.local) {
    return Error::make(ErrorCode::kInternal, "backend '" + config.name + "' is not a local model");
  }
  const config::LocalEngineConfig& lc = *config.local;
  auto fail = [&](const std::string& what) {
    return Error::make(ErrorCode::kUnavailable,
                       "backend '" + config.name + "': " + lc.model_path + ": " + what);
  };
  auto source = engine::GgufSource::open(lc.model_path);
  if (!source) return fail(source.error().message);
  if (engine::is_encoder_arch(source.value()->get_string("general.architecture").value_or(""))) {
    return open_encoder(config, source.value());
  }
  auto model = engine::Model::load(source.value());
  if (!model) return fail(model.error().message);
  auto tok = tokenizer::load_tokenizer(lc.model_path);
  if (!tok) return fail("tokenizer: " + tok.error().message);

  auto impl = std::make_unique<Impl>();
  impl->cfg = config;
  impl->tok = tok.value();
  if (auto chat = tokenizer::ChatFormatter::create(impl->tok, lc.chat_template)) {
    impl->chat = chat.value();
  } else if (!lc.chat_template.empty()) {
    return fail("chat_template: " + chat.error().message);
  } else {
    impl->chat_error = "backend '" + config.name +
                       "' has no chat template (the model ships none and none is configured); "
                       "use /v1/completions";
  }
  const std::vector<TokenId> eog = engine::eog_tokens_from_source(*source.value());
  if (impl->chat) impl->template_tools = detect_template_tools(*impl->chat);
  impl->vocab = constrain::Vocabulary::build(
      *impl->tok, std::vector<constrain::TokenId>(eog.begin(), eog.end()));
  find_token_markers(impl->template_tools, *impl->vocab);
  if (!impl->template_tools.think_begin.empty()) {
    for (const auto& [text, ids] :
         {std::pair{&impl->template_tools.think_begin, &impl->think_open},
          std::pair{&impl->template_tools.think_end, &impl->think_close}}) {
      const std::vector<tokenizer::TokenId> enc =
          impl->tok->encode(*text, tokenizer::Specials::kParse);
      ids->assign(enc.begin(), enc.end());
    }
  }
  auto eng = std::make_unique<engine::Engine>(std::move(model).value(),
                                              engine::EngineOptions{lc.threads, lc.context_length,
                                                                    /*batch_invariant=*/true});
  engine::SchedulerOptions options;
  options.max_sequences = lc.max_sequences;
  options.max_queue = lc.max_queue;
  options.kv_budget_bytes = lc.kv_budget_mb > 0 ? lc.kv_budget_mb << 20 : 0;
  options.prefill_chunk = lc.prefill_chunk;
  options.prefix_cache = lc.prefix_cache;
  options.speculative = {lc.speculative.prompt_lookup, lc.speculative.max_draft,
                         lc.speculative.min_match};
  const tokenizer::Tokenizer* raw_tok = impl->tok.get();
  engine::TokenPieceFn piece = [raw_tok](TokenId id) {
    return raw_tok->token_bytes(static_cast<tokenizer::TokenId>(id));
  };
  impl->scheduler =
      std::make_unique<engine::Scheduler>(std::move(eng), options, std::move(piece), eog);
  asio::post(impl->prepare_pool, [im = impl.get()] { im->prepare_json_object(); });
  return std::unique_ptr<LocalBackend>(new LocalBackend(std::move(impl)));
}

const std::string& LocalBackend::name() const {
  return impl_->cfg.name;
}

int64_t LocalBackend::context_length() const {
  return impl_->n_ctx();
}

engine::LoadSnapshot LocalBackend::load() const {
  if (impl_->encoder) {
    engine::LoadSnapshot s;
    s.queue_depth = impl_->encoder->queue_depth();
    return s;
  }
  return impl_->scheduler->load();
}

constrain::GrammarCache& LocalBackend::grammar_cache() {
  return impl_->grammars;
}

BackendLoad LocalBackend::load_facts() const {
  const engine::LoadSnapshot s = load();
  BackendLoad l;
  l.queue_depth = s.queue_depth;
  l.est_wait_ms = s.est_wait_ms;
  l.context_length = impl_->n_ctx();
  return l;
}

Result<int64_t> LocalBackend::count_prompt(Endpoint endpoint, std::string_view body) const {
  auto typed = api::parse_openai(endpoint, body, {.max_tokens_limit = INT64_MAX});
  if (!typed) return std::move(typed).error();
  auto tokens = impl_->prompt_tokens(typed.value());
  if (!tokens) return std::move(tokens).error();
  return static_cast<int64_t>(tokens->size());
}

namespace {

std::string token_text(const tokenizer::Tokenizer& tok, TokenId id) {
  return tok.token_bytes(static_cast<tokenizer::TokenId>(id));
}

// The answer's OpenAI shape: ids, chunks, logprobs entries and the final body.
struct ReplyFormat {
  const tokenizer::Tokenizer* tok = nullptr;
  bool chat = true;
  std::string id_text;
  std::string model;
  int64_t created = 0;
  bool usage_null = false;  // streams with usage asked for: every chunk says "usage": null

  Json envelope(const char* object) const {
    Json j;
    j["id"] = id_text;
    j["object"] = object;
    j["created"] = created;
    j["model"] = model;
    return j;
  }
  const char* chunk_object() const { return chat ? "chat.completion.chunk" : "text_completion"; }
  std::string chunk(Json choice) const {
    Json j = envelope(chunk_object());
    j["choices"] = Json::array({std::move(choice)});
    if (usage_null) j["usage"] = nullptr;
    return "data: " + dump(j) + "\n\n";
  }
  std::string role_chunk(size_t index) const {
    return chunk(Json{{"index", index},
                      {"delta", Json{{"role", "assistant"}, {"content", ""}}},
                      {"logprobs", nullptr},
                      {"finish_reason", nullptr}});
  }
  std::string finish_chunk(size_t index, const std::string& finish) const {
    if (chat) {
      return chunk(Json{{"index", index},
                        {"delta", Json::object()},
                        {"logprobs", nullptr},
                        {"finish_reason", finish}});
    }
    return chunk(
        Json{{"text", ""}, {"index", index}, {"logprobs", nullptr}, {"finish_reason", finish}});
  }
  std::string usage_chunk(const engine::Completion& total, int64_t reasoning_tokens) const {
    Json j = envelope(chunk_object());
    j["choices"] = Json::array();
    j["usage"] = usage_json(total, reasoning_tokens);
    return "data: " + dump(j) + "\n\n";
  }
  // Logprobs entries: chat's {"content": [...]} items.
  Json chat_logprob(const TokenOut& t) const {
    auto entry = [&](TokenId token, float lp) {
      const std::string text = token_text(*tok, token);
      Json bytes = Json::array();
      for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
      Json e;
      e["token"] = text;
      e["logprob"] = lp;
      e["bytes"] = std::move(bytes);
      return e;
    };
    Json e = entry(t.token, t.logprob);
    Json top = Json::array();
    for (const auto& alt : t.top) top.push_back(entry(alt.token, alt.logprob));
    e["top_logprobs"] = std::move(top);
    return e;
  }
};

// Completions' logprobs: parallel arrays, with each token's offset in the text.
struct CompletionLogprobs {
  Json tokens = Json::array(), logprobs = Json::array(), top = Json::array(),
       offsets = Json::array();
  int64_t text_offset = 0;

  void add(const tokenizer::Tokenizer& tok, const TokenOut& t) {
    const std::string text = token_text(tok, t.token);
    tokens.push_back(text);
    logprobs.push_back(t.logprob);
    Json alternatives = Json::object();
    for (const auto& alt : t.top) alternatives[token_text(tok, alt.token)] = alt.logprob;
    top.push_back(std::move(alternatives));
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(text.size());
  }
  // The object, the arrays moved out (the text offset is kept for the next tokens).
  Json take() {
    Json out = Json{{"tokens", std::move(tokens)},
                    {"token_logprobs", std::move(logprobs)},
                    {"top_logprobs", std::move(top)},
                    {"text_offset", std::move(offsets)}};
    tokens = Json::array(), logprobs = Json::array(), top = Json::array(), offsets = Json::array();
    return out;
  }
};

// One sequence per choice, as the I/O side follows it.
struct Choice {
  std::shared_ptr<Pending> pending = std::make_shared<Pending>();
  std::optional<engine::RequestId> id;
  std::optional<engine::Completion> done;
  std::string content;  // non-streaming: the whole text
  Json chat_logprobs = Json::array();
  CompletionLogprobs cmpl;
  bool role_sent = false;
  std::optional<ToolCallParser> tools;  // a tools constraint: the output read as calls
  Json tool_calls = Json::array();      // non-streaming: the calls read so far
  std::string reasoning;                // non-streaming: a think block's text
  int64_t reasoning_tokens = 0;         // tokens of the think block
};

}  // namespace

// One send(): submits a sequence per choice, follows their tokens and writes the answer.
// Choice 0 is submitted at once; the others once its first token is out, when its prompt's KV
// is in the prefix cache: they copy it instead of prefilling again (all but the last partial
// block), and decode alongside it. Lives in send()'s coroutine frame, on its executor.
class LocalBackend::Call {
 public:
  Call(Impl& im, const BackendRequest& request, const api::ChatRequest& typed, Params params,
       StreamSink* sink, CancelSignal& cancel, const asio::any_io_executor& executor)
      : im_(im),
        request_(request),
        params_(std::move(params)),
        sink_(sink),
        cancel_(cancel),
        stream_(request.stream && sink != nullptr),
        started_(Clock::now()),
        wake_(executor, 1),
        choices_(static_cast<size_t>(params_.n)),
        scheduler_(im.scheduler.get()) {
    for (Choice& c : choices_) c.pending->wake = &wake_;
    format_.tok = im.tok.get();
    format_.chat = request.endpoint == Endpoint::kChatCompletions;
    format_.model = request.reply_model.empty() ? typed.model : request.reply_model;
    format_.created = static_cast<int64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                               std::chrono::system_clock::now().time_since_epoch())
                                               .count());
    format_.usage_null = stream_ && request.client_wants_usage;
    const ConstraintRequest& c = params_.constraint;
    if (c.mode == ConstraintMode::kTools || !c.think.begin.empty()) {
      // Tool calls, or a think block before a response_format document: read as pieces.
      const constrain::ToolCallSyntax syn =
          c.mode == ConstraintMode::kTools ? c.tools.syntax : think_syntax(c.think);
      for (size_t k = 0; k < choices_.size(); ++k) {
        choices_[k].tools.emplace(syn, request.request_id + "/" + std::to_string(k) + "/" +
                                           std::to_string(random_seed()));
      }
    }
    const engine::ThinkBudget& think = params_.sampling.think;
    if (think.active() && !choices_[0].tools) {
      // A reasoning budget: the output's think block is read back as reasoning.
      const TemplateTools& tt = im.template_tools;
      const constrain::ToolCallSyntax syn =
          think_syntax(constrain::ThinkBlock{tt.think_begin, tt.think_end, tt.token_markers});
      for (size_t k = 0; k < choices_.size(); ++k) {
        choices_[k].tools.emplace(syn, request.request_id + "/" + std::to_string(k));
        if (think.open_at_start) choices_[k].tools->open_think();
      }
    }
    reply_.constraint = std::string(constraint_mode_name(c.mode));
    reply_.constraint_hash = params_.grammar.hash;
    reply_.headers.emplace_back("x-ferry-constraint", reply_.constraint);
  }
  // Whatever way the call ends (even destroyed mid-way at shutdown), the scheduler thread must
  // stop touching the channel, and the sequences must not run on.
  ~Call() {
    for (Choice& c : choices_) {
      bool finished = false;
      {
        std::lock_guard lock(c.pending->mu);
        c.pending->wake = nullptr;
        finished = c.pending->done.has_value();
      }
      if (c.id && !finished) scheduler_->cancel(*c.id);
    }
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  asio::awaitable<Result<BackendReply>> run();

 private:
  engine::GenerationRequest make_request(size_t index);
  void submit_others();
  void cancel_all() const {
    for (engine::RequestId id : *ids_) scheduler_->cancel(id);
  }
  bool all_done() const;
  void take_tokens(size_t index, std::string& out);
  void add_token(size_t index, TokenOut& t, std::string& out);
  void add_tool_pieces(size_t index, const std::vector<ToolPiece>& pieces, std::string& out);
  std::string finish_reason(const Choice& ch) const;
  engine::Completion total() const;
  int64_t reasoning_total() const {
    int64_t n = 0;
    for (const Choice& c : choices_) n += c.reasoning_tokens;
    return n;
  }
  Result<BackendReply> settle();
  std::string final_body();

  Impl& im_;
  const BackendRequest& request_;
  Params params_;
  StreamSink* sink_;
  CancelSignal& cancel_;
  const bool stream_;
  const Clock::time_point started_;
  WakeChannel wake_;
  std::vector<Choice> choices_;
  engine::Scheduler* scheduler_;
  // The ids submitted so far, shared with the cancel hook (which may outlive this frame).
  std::shared_ptr<std::vector<engine::RequestId>> ids_ =
      std::make_shared<std::vector<engine::RequestId>>();
  bool others_submitted_ = false;
  std::optional<Error> submit_error_;  // a later choice the engine refused (queue full, ...)
  ReplyFormat format_;
  BackendReply reply_;
  bool client_gone_ = false;
  bool header_added_ = false;  // x-ferry-constraint given to the sink
  std::deque<TokenOut> batch_;
};

engine::GenerationRequest LocalBackend::Call::make_request(size_t index) {
  const int64_t n_ctx = scheduler_->n_ctx();
  const auto n_prompt = static_cast<int64_t>(params_.prompt.size());
  engine::GenerationRequest gen;
  gen.prompt = params_.prompt;
  gen.max_tokens = params_.max_tokens.value_or(n_ctx - n_prompt);
  gen.sampling = params_.sampling;
  gen.sampling.seed = choice_seed(params_.sampling.seed, static_cast<int64_t>(index));
  gen.stop = params_.stop;
  gen.stop_at_eog = params_.stop_at_eog;
  if (params_.grammar.grammar) {
    gen.sampling.constraint =
        std::make_shared<constrain::Matcher>(params_.grammar.grammar, im_.vocab);
    // The document closes within max_tokens (end-of-generation id included).
    gen.sampling.constraint->set_token_budget(static_cast<std::uint64_t>(gen.max_tokens));
  }
  gen.top_logprobs = params_.top_logprobs;
  gen.max_unread = im_.cfg.local->max_unread_tokens;  // back-pressure: consumed() below
  if (im_.cfg.timeouts.total_ms > 0) {
    gen.deadline = started_ + std::chrono::milliseconds(im_.cfg.timeouts.total_ms);
  }
  std::shared_ptr<Pending> pending = choices_[index].pending;
  gen.on_token = [pending](const engine::TokenEvent& ev) {
    TokenOut t;
    t.token = ev.token;
    t.text = std::string(ev.text);
    t.logprob = ev.logprob;
    t.top.assign(ev.top_logprobs.begin(), ev.top_logprobs.end());
    std::lock_guard lock(pending->mu);
    pending->tokens.push_back(std::move(t));
    pending->notify_locked();
  };
  gen.on_done = [pending](const engine::Completion& c) {
    std::lock_guard lock(pending->mu);
    pending->done = c;
    pending->notify_locked();
  };
  return gen;
}

// Choice 0's prompt is prefilled (and cached): the others start from it.
void LocalBackend::Call::submit_others() {
  others_submitted_ = true;
  for (size_t k = 1; k < choices_.size() && !submit_error_; ++k) {
    auto more = scheduler_->submit(make_request(k));
    if (!more) {
      submit_error_ = im_.with_name(std::move(more).error());
      cancel_all();
      break;
    }
    choices_[k].id = more.value();
    ids_->push_back(more.value());
  }
}

bool LocalBackend::Call::all_done() const {
  if (!others_submitted_) return false;
  for (const Choice& c : choices_) {
    if (c.id && !c.done) return false;
  }
  return true;
}

// One token of choice `index`: kept for the final body, or written as a stream chunk.
void LocalBackend::Call::add_token(size_t index, TokenOut& t, std::string& out) {
  Choice& ch = choices_[index];
  if (ch.tools) {
    std::vector<ToolPiece> pieces;
    const bool thinking = ch.tools->thinking();
    ch.tools->feed(t.text, pieces);
    if (t.token >= 0 && (thinking || ch.tools->thinking())) ++ch.reasoning_tokens;
    add_tool_pieces(index, pieces, out);
    return;
  }
  const bool with_lp = params_.top_logprobs >= 0 && t.token >= 0;
  if (!stream_) {
    ch.content += t.text;
    if (with_lp && format_.chat) ch.chat_logprobs.push_back(format_.chat_logprob(t));
    if (with_lp && !format_.chat) ch.cmpl.add(*im_.tok, t);
    return;
  }
  if (t.text.empty() && !with_lp) return;
  if (format_.chat && !ch.role_sent) {
    out += format_.role_chunk(index);
    ch.role_sent = true;
  }
  Json choice;
  if (format_.chat) {
    choice["index"] = index;
    choice["delta"] = Json{{"content", t.text}};
    choice["logprobs"] =
        with_lp ? Json{{"content", Json::array({format_.chat_logprob(t)})}} : Json();
  } else {
    choice["text"] = t.text;
    choice["index"] = index;
    if (with_lp) {
      ch.cmpl.add(*im_.tok, t);
      choice["logprobs"] = ch.cmpl.take();
    } else {
      choice["logprobs"] = nullptr;
    }
  }
  choice["finish_reason"] = nullptr;
  out += format_.chunk(std::move(choice));
}

// A tools constraint's output, read: text as content, calls as OpenAI's tool_calls (streamed as
// deltas: id, type and name in a call's first, then its arguments in fragments).
void LocalBackend::Call::add_tool_pieces(size_t index, const std::vector<ToolPiece>& pieces,
                                         std::string& out) {
  Choice& ch = choices_[index];
  for (const ToolPiece& p : pieces) {
    if (!stream_) {
      if (p.kind == ToolPiece::Kind::kText) {
        ch.content += p.text;
      } else if (p.kind == ToolPiece::Kind::kReasoning) {
        ch.reasoning += p.text;
      } else if (p.kind == ToolPiece::Kind::kCallStart) {
        ch.tool_calls.push_back(Json{{"id", p.id},
                                     {"type", "function"},
                                     {"function", Json{{"name", p.name}, {"arguments", ""}}}});
      } else {
        Json& args = ch.tool_calls.back()["function"]["arguments"];
        args = args.get<std::string>() + p.text;
      }
      continue;
    }
    if (!ch.role_sent) {
      out += format_.role_chunk(index);
      ch.role_sent = true;
    }
    Json delta;
    if (p.kind == ToolPiece::Kind::kText) {
      delta["content"] = p.text;
    } else if (p.kind == ToolPiece::Kind::kReasoning) {
      delta["reasoning_content"] = p.text;
    } else {
      Json call{{"index", p.index}};
      if (p.kind == ToolPiece::Kind::kCallStart) {
        call["id"] = p.id;
        call["type"] = "function";
        call["function"] = Json{{"name", p.name}, {"arguments", ""}};
      } else {
        call["function"] = Json{{"arguments", p.text}};
      }
      delta["tool_calls"] = Json::array({std::move(call)});
    }
    out += format_.chunk(Json{{"index", index},
                              {"delta", std::move(delta)},
                              {"logprobs", nullptr},
                              {"finish_reason", nullptr}});
  }
}

// OpenAI's finish_reason: tool_calls when the choice ended after writing calls.
std::string LocalBackend::Call::finish_reason(const Choice& ch) const {
  if (ch.tools && ch.tools->calls() > 0 && ch.done->finish == engine::FinishReason::kStop) {
    return "tool_calls";
  }
  return std::string(engine::finish_reason_name(ch.done->finish));
}

// Takes choice `index`'s tokens from the scheduler's hand-off and writes what they make.
void LocalBackend::Call::take_tokens(size_t index, std::string& out) {
  Choice& ch = choices_[index];
  {
    std::lock_guard lock(ch.pending->mu);
    batch_.swap(ch.pending->tokens);
    if (ch.pending->done && ch.pending->tokens.empty()) ch.done = ch.pending->done;
  }
  if (!batch_.empty()) scheduler_->consumed(*ch.id, static_cast<int64_t>(batch_.size()));
  if (!batch_.empty() && reply_.first_byte_us < 0) {
    reply_.first_byte_us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started_).count();
  }
  if (index == 0 && !others_submitted_ && (!batch_.empty() || ch.done)) submit_others();
  for (TokenOut& t : batch_) add_token(index, t, out);
  batch_.clear();
  if (ch.done && ch.tools) {
    std::vector<ToolPiece> pieces;
    ch.tools->finish(pieces);
    add_tool_pieces(index, pieces, out);
  }
  if (ch.done && !ch.done->error && stream_ && !submit_error_) {
    if (format_.chat && !ch.role_sent) {
      out += format_.role_chunk(index);
      ch.role_sent = true;
    }
    out += format_.finish_chunk(index, finish_reason(ch));
  }
}

// Billed as one prompt plus every choice's output.
engine::Completion LocalBackend::Call::total() const {
  engine::Completion total = *choices_[0].done;
  for (size_t k = 1; k < choices_.size(); ++k) {
    total.completion_tokens += choices_[k].done->completion_tokens;
  }
  return total;
}

asio::awaitable<Result<BackendReply>> LocalBackend::Call::run() {
  auto submitted = scheduler_->submit(make_request(0));
  if (!submitted) co_return im_.with_name(std::move(submitted).error());
  choices_[0].id = submitted.value();
  ids_->push_back(submitted.value());
  cancel_.set_hook([ids = ids_, scheduler = scheduler_] {
    for (engine::RequestId id : *ids) scheduler->cancel(id);
  });
  others_submitted_ = choices_.size() == 1;
  format_.id_text =
      (format_.chat ? "chatcmpl-" : "cmpl-") +
      (request_.request_id.empty() ? std::to_string(*choices_[0].id) : request_.request_id);
  std::string out;
  while (true) {
    out.clear();
    for (size_t index = 0; index < choices_.size(); ++index) {
      if (choices_[index].id && !choices_[index].done) take_tokens(index, out);
    }
    const bool finished = all_done();
    if (finished && stream_ && request_.client_wants_usage && !submit_error_) {
      bool ok_all = true;
      for (const Choice& c : choices_) ok_all = ok_all && c.done && !c.done->error;
      if (ok_all) out += format_.usage_chunk(total(), reasoning_total());
    }
    if (stream_ && !out.empty() && !client_gone_) {
      // With the first bytes only: a hop that fails before them leaves the next one's headers.
      if (!header_added_) sink_->add_header("x-ferry-constraint", reply_.constraint);
      header_added_ = true;
      const bool ok = co_await sink_->write(out);
      if (!ok) {
        client_gone_ = true;
        cancel_all();  // the sequences end within a step; their on_done still arrives
      }
    }
    if (finished) break;
    auto [ec] = co_await wake_.async_receive(kAwait);
    (void)ec;
  }
  cancel_.clear_hook();
  co_return settle();
}

// The outcome once every sequence is done: an error, or the reply (usage, and the body when
// not streaming).
Result<BackendReply> LocalBackend::Call::settle() {
  if (client_gone_ || cancel_.cancelled()) {
    return Error::make(ErrorCode::kCancelled, "client went away");
  }
  if (submit_error_) return *submit_error_;
  for (const Choice& ch : choices_) {
    const engine::Completion& c = *ch.done;
    if (!c.error) continue;
    if (c.error->code == ErrorCode::kTimeout) {
      return Error::make(ErrorCode::kTimeout, "backend '" + im_.cfg.name +
                                                  "' did not finish within total_ms=" +
                                                  std::to_string(im_.cfg.timeouts.total_ms));
    }
    return im_.with_name(*c.error);
  }
  const engine::Completion sum = total();
  reply_.status = 200;
  reply_.finish_reason = finish_reason(choices_[0]);
  reply_.usage.prompt_tokens = sum.prompt_tokens;
  reply_.usage.completion_tokens = sum.completion_tokens;
  reply_.usage.total_tokens = sum.prompt_tokens + sum.completion_tokens;
  reply_.usage.cached_tokens = sum.cached_tokens;
  reply_.usage.reasoning_tokens = reasoning_total();
  if (reply_.first_byte_us < 0) {
    reply_.first_byte_us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started_).count();
  }
  if (!stream_) reply_.body = final_body();
  return std::move(reply_);
}

// The non-streaming answer: every choice's whole text, logprobs and finish reason.
std::string LocalBackend::Call::final_body() {
  const bool want_logprobs = params_.top_logprobs >= 0;
  Json list = Json::array();
  for (size_t index = 0; index < choices_.size(); ++index) {
    Choice& ch = choices_[index];
    Json choice;
    if (format_.chat) {
      choice["index"] = index;
      choice["message"] = Json{{"role", "assistant"}, {"content", ch.content}};
      if (!ch.reasoning.empty()) choice["message"]["reasoning_content"] = ch.reasoning;
      if (!ch.tool_calls.empty()) {
        if (ch.content.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] = std::move(ch.tool_calls);
      }
      choice["logprobs"] = want_logprobs ? Json{{"content", std::move(ch.chat_logprobs)}} : Json();
    } else {
      choice["text"] = ch.content;
      choice["index"] = index;
      choice["logprobs"] = want_logprobs ? ch.cmpl.take() : Json();
    }
    choice["finish_reason"] = finish_reason(ch);
    list.push_back(std::move(choice));
  }
  Json j = format_.envelope(format_.chat ? "chat.completion" : "text_completion");
  j["choices"] = std::move(list);
  j["usage"] = usage_json(total(), reasoning_total());
  return dump(j);
}

// GCC 12 reports a false -Wmismatched-new-delete on the frames of embed() and send() (GCC PR
// 109224; as in http_backend.cpp: Asio's frame allocator pairs its own operator new and delete).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
// Embeddings: the job planned here, pooled vectors from the scheduler thread (one hand-off,
// through a wake channel as for tokens), the body written here (adapters/local_embeddings.h).
asio::awaitable<Result<BackendReply>> LocalBackend::embed(const BackendRequest& request,
                                                          const api::EmbeddingsRequest& typed,
                                                          CancelSignal& cancel) {
  auto job = plan_embeddings(impl_->embeddings_model(), typed, request.prompt.get());
  if (!job) co_return std::move(job).error();
  auto handoff = std::make_shared<Handoff<Result<engine::EmbeddingResult>>>();
  WakeChannel wake(co_await asio::this_coro::executor, 1);
  Handoff<Result<engine::EmbeddingResult>>::Hook hook(*handoff, wake);
  engine::EmbeddingRequest er;
  er.inputs = job->inputs;
  er.deadline = Clock::now() + std::chrono::milliseconds(impl_->cfg.timeouts.total_ms);
  er.on_done = [handoff](Result<engine::EmbeddingResult> r) { handoff->deliver(std::move(r)); };
  const auto started = Clock::now();
  auto id = impl_->submit_embeddings(std::move(er));
  if (!id) co_return impl_->with_name(std::move(id).error());
  cancel.set_hook([im = impl_.get(), id = *id] { im->cancel_embeddings(id); });
  Result<engine::EmbeddingResult> done = co_await handoff->receive(wake);
  cancel.clear_hook();
  if (cancel.cancelled()) co_return Error::make(ErrorCode::kCancelled, "client went away");
  if (!done) {
    Error e = done.error();
    if (e.code == ErrorCode::kTimeout) {
      e.message = "backend '" + impl_->cfg.name + "' did not finish within total_ms=" +
                  std::to_string(impl_->cfg.timeouts.total_ms);
    }
    co_return impl_->with_name(std::move(e));
  }
  const auto vectors = client_vectors(*job, done.value().vectors);
  auto body = embeddings_body(*job, vectors,
                              request.reply_model.empty() ? typed.model : request.reply_model);
  if (!body) co_return impl_->with_name(std::move(body).error());
  BackendReply reply;
  reply.body = std::move(body).value();
  reply.usage.prompt_tokens = job->prompt_tokens;
  reply.usage.completion_tokens = 0;
  reply.usage.total_tokens = job->prompt_tokens;
  reply.finish_reason = "stop";
  reply.first_byte_us =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count();
  co_return reply;
}

asio::awaitable<Result<BackendReply>> LocalBackend::send(const BackendRequest& request,
                                                         StreamSink* sink, CancelSignal& cancel) {
  // The gateway's typed request; a caller with only a body has it parsed by the one parser.
  std::shared_ptr<const api::ChatRequest> typed = request.typed;
  if (typed && typed->embeddings) co_return co_await embed(request, *typed->embeddings, cancel);
  if (impl_->encoder) {
    co_return Error::make(ErrorCode::kInvalidRequest,
                          "backend '" + impl_->cfg.name + "' serves an embedding model (" +
                              impl_->encoder->config().arch_name +
                              ", an encoder): it answers /v1/embeddings only",
                          "model", "model_not_supported");
  }
  if (!typed) {
    auto parsed =
        api::parse_openai(request.endpoint, request.body, {.max_tokens_limit = INT64_MAX});
    if (!parsed) co_return std::move(parsed).error();
    typed = std::make_shared<const api::ChatRequest>(std::move(parsed).value());
  }
  // Prepared here (the gateway counts prompts on this thread too); all model work happens on
  // the scheduler thread.
  auto params = impl_->prepare(*typed, request);
  if (!params) co_return std::move(params).error();
  if (params->constraint.mode != ConstraintMode::kNone) {
    auto grammar = co_await impl_->compile(params->constraint);
    if (!grammar) co_return std::move(grammar).error();
    params->grammar = std::move(grammar).value();
  }
  if (cancel.cancelled()) co_return Error::make(ErrorCode::kCancelled, "client went away");
  Call call(*impl_, request, *typed, std::move(params).value(), sink, cancel,
            co_await asio::this_coro::executor);
  co_return co_await call.run();
}
#pragma GCC diagnostic pop

bool LocalBackend::closes_think_blocks() const {
  return !impl_->think_close.empty();
}

std::shared_ptr<const PromptTokens> LocalBackend::exact_prompt(
    const api::ChatRequest& request) const {
  if (request.embeddings) {
    auto tokens = embedding_tokens(impl_->embeddings_model(), *request.embeddings);
    if (!tokens) return nullptr;
    return std::make_shared<const PromptTokens>(std::move(tokens).value());
  }
  auto tokens = impl_->prompt_tokens(request);
  if (!tokens) return nullptr;
  return std::make_shared<const PromptTokens>(PromptTokens{std::move(tokens).value()});
}

}  // namespace ferry::adapters
