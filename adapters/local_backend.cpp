#include "adapters/local_backend.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <random>

#include <nlohmann/json.hpp>

#include "adapters/openai_wire.h"
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
constexpr int32_t kMaxTopLogprobs = 20;        // chat: top_logprobs
constexpr int32_t kMaxCompletionLogprobs = 5;  // completions: logprobs (OpenAI's limit)

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

Error invalid(std::string message, std::string param) {
  return Error::make(ErrorCode::kInvalidRequest, std::move(message), std::move(param));
}

// The parameters of an OpenAI request that the engine acts on.
struct Params {
  std::vector<TokenId> prompt;
  std::optional<int64_t> max_tokens;
  engine::SamplingParams sampling;
  std::vector<std::string> stop;
  bool stop_at_eog = true;
  int32_t top_logprobs = -1;  // < 0: no logprobs
  int64_t n = 1;              // choices, decoded as parallel sequences over one prompt
};

// OpenAI's limit on `n`.
constexpr int64_t kMaxChoices = 128;

// Choice i > 0 samples with its own stream: splitmix64 of the request's seed and i, so a fixed
// seed reproduces every choice and choice 0 is what n = 1 gives.
uint64_t choice_seed(uint64_t seed, int64_t index) {
  if (index == 0) return seed;
  uint64_t z = seed + static_cast<uint64_t>(index) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Result<std::optional<double>> number(const Json& body, const char* key, double lo, double hi) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::optional<double>();
  if (!it->is_number()) return invalid(std::string("'") + key + "' must be a number", key);
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) {
    return invalid(std::string("'") + key + "' must be between " + std::to_string(lo) + " and " +
                       std::to_string(hi),
                   key);
  }
  return std::optional<double>(v);
}

// An integer that fits in int64: a float (1e300), a string or a uint64 above INT64_MAX is an
// error naming the field, never a wrapped value.
Result<std::optional<int64_t>> integer(const Json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::optional<int64_t>();
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return invalid(std::string("'") + key + "' is out of range", key);
  }
  if (!it->is_number_integer())
    return invalid(std::string("'") + key + "' must be an integer", key);
  return std::optional<int64_t>(it->get<int64_t>());
}

// A token id of this model: an integer in [0, n_vocab).
std::optional<TokenId> token_id(const Json& v, int64_t n_vocab) {
  if (!v.is_number_integer()) return std::nullopt;
  if (v.is_number_unsigned() ? v.get<uint64_t>() >= static_cast<uint64_t>(n_vocab)
                             : (v.get<int64_t>() < 0 || v.get<int64_t>() >= n_vocab)) {
    return std::nullopt;
  }
  return static_cast<TokenId>(v.get<int64_t>());
}

uint64_t random_seed() {
  static std::atomic<uint64_t> counter{std::random_device{}()};
  return counter.fetch_add(0x9e3779b97f4a7c15ull, std::memory_order_relaxed);
}

// Sampling, limits, stop strings and logprobs from the body (the prompt is separate).
Status parse_params(const Json& body, Endpoint endpoint, int64_t n_vocab, Params& p) {
  if (auto n = integer(body, "n"); !n) {
    return n.error();
  } else if (n.value()) {
    if (*n.value() < 1 || *n.value() > kMaxChoices) {
      return invalid("'n' must be between 1 and " + std::to_string(kMaxChoices), "n");
    }
    p.n = *n.value();
  }
  if (auto it = body.find("echo"); it != body.end() && it->is_boolean() && it->get<bool>()) {
    return invalid("'echo' is not supported by the local engine", "echo");
  }
  if (auto it = body.find("best_of");
      it != body.end() && it->is_number() && it->get<double>() > 1) {
    return invalid("'best_of' is not supported by the local engine", "best_of");
  }
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    auto v = integer(body, key);
    if (!v) return v.error();
    if (!v.value()) continue;
    if (*v.value() < 1) return invalid(std::string("'") + key + "' must be at least 1", key);
    p.max_tokens = *v.value();
    break;
  }
  auto temperature = number(body, "temperature", 0, 2);
  if (!temperature) return temperature.error();
  p.sampling.temperature = static_cast<float>(temperature.value().value_or(1.0));
  auto top_p = number(body, "top_p", 0, 1);
  if (!top_p) return top_p.error();
  p.sampling.top_p = static_cast<float>(top_p.value().value_or(1.0));
  auto min_p = number(body, "min_p", 0, 1);  // vLLM / llama.cpp extension
  if (!min_p) return min_p.error();
  p.sampling.min_p = static_cast<float>(min_p.value().value_or(0.0));
  auto top_k = integer(body, "top_k");  // extension
  if (!top_k) return top_k.error();
  p.sampling.top_k =
      static_cast<int32_t>(std::clamp<int64_t>(top_k.value().value_or(0), -1, 1 << 20));
  auto frequency = number(body, "frequency_penalty", -2, 2);
  if (!frequency) return frequency.error();
  p.sampling.frequency_penalty = static_cast<float>(frequency.value().value_or(0.0));
  auto presence = number(body, "presence_penalty", -2, 2);
  if (!presence) return presence.error();
  p.sampling.presence_penalty = static_cast<float>(presence.value().value_or(0.0));
  auto repetition = number(body, "repetition_penalty", 0.01, 10);  // extension
  if (!repetition) return repetition.error();
  p.sampling.repetition_penalty = static_cast<float>(repetition.value().value_or(1.0));
  p.sampling.penalty_last_n = -1;  // OpenAI's penalties look at the whole completion
  auto seed = integer(body, "seed");
  if (!seed) return seed.error();
  p.sampling.seed = seed.value() ? static_cast<uint64_t>(*seed.value()) : random_seed();
  if (auto it = body.find("logit_bias"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return invalid("'logit_bias' must be an object", "logit_bias");
    for (auto b = it->begin(); b != it->end(); ++b) {
      // A decimal token id of this model: no sign, no spaces, below the vocabulary size.
      const std::string& key = b.key();
      const std::optional<int64_t> id = parse_token_id_key(key);
      if (!id || *id >= n_vocab) {
        return invalid("'logit_bias' keys must be token ids below the vocabulary size " +
                           std::to_string(n_vocab) + ", got '" + key + "'",
                       "logit_bias");
      }
      const auto token = static_cast<TokenId>(*id);
      if (!b->is_number() || b->get<double>() < -100 || b->get<double>() > 100) {
        return invalid("'logit_bias' values must be numbers between -100 and 100", "logit_bias");
      }
      p.sampling.logit_bias[token] = b->get<float>();
    }
  }
  if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      p.stop.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      for (const auto& s : *it) {
        if (!s.is_string())
          return invalid("'stop' must be a string or an array of strings", "stop");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      return invalid("'stop' must be a string or an array of strings", "stop");
    }
  }
  if (auto it = body.find("ignore_eos"); it != body.end() && it->is_boolean()) {  // extension
    p.stop_at_eog = !it->get<bool>();
  }
  if (endpoint == Endpoint::kChatCompletions) {
    auto it = body.find("logprobs");
    if (it != body.end() && !it->is_null() && !it->is_boolean()) {
      return invalid("'logprobs' must be a boolean", "logprobs");
    }
    const bool want = it != body.end() && it->is_boolean() && it->get<bool>();
    auto top = integer(body, "top_logprobs");
    if (!top) return top.error();
    if (top.value() && (*top.value() < 0 || *top.value() > kMaxTopLogprobs)) {
      return invalid("'top_logprobs' must be between 0 and 20", "top_logprobs");
    }
    if (top.value() && !want)
      return invalid("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (want) p.top_logprobs = static_cast<int32_t>(top.value().value_or(0));
  } else {
    auto n = integer(body, "logprobs");
    if (!n) return n.error();
    if (n.value()) {
      if (*n.value() < 0 || *n.value() > kMaxCompletionLogprobs) {
        return invalid("'logprobs' must be between 0 and 5", "logprobs");
      }
      p.top_logprobs = static_cast<int32_t>(*n.value());
    }
  }
  return {};
}

Json usage_json(const engine::Completion& c) {
  Json u;
  u["prompt_tokens"] = c.prompt_tokens;
  u["completion_tokens"] = c.completion_tokens;
  u["total_tokens"] = c.prompt_tokens + c.completion_tokens;
  u["prompt_tokens_details"] = Json{{"cached_tokens", c.cached_tokens}};
  u["completion_tokens_details"] = Json{{"reasoning_tokens", 0}};
  return u;
}

std::string format_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string escape_label(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

struct LocalBackend::Impl {
  config::BackendConfig cfg;
  std::shared_ptr<const tokenizer::Tokenizer> tok;
  std::shared_ptr<const tokenizer::ChatFormatter> chat;  // null: the model has no template
  std::string chat_error;
  std::unique_ptr<engine::Scheduler> scheduler;

  std::string token_text(TokenId id) const {
    return tok->token_bytes(static_cast<tokenizer::TokenId>(id));
  }

  // The prompt's token ids, as the engine will run them.
  Result<std::vector<TokenId>> prompt_tokens(Endpoint endpoint, const Json& body) const {
    std::vector<tokenizer::TokenId> ids;
    if (endpoint == Endpoint::kChatCompletions) {
      if (!chat) return Error::make(ErrorCode::kInvalidRequest, chat_error, "messages");
      auto it = body.find("messages");
      if (it == body.end() || !it->is_array() || it->empty()) {
        return invalid("'messages' must be a non-empty array", "messages");
      }
      auto text = chat->render(body);
      if (!text) return std::move(text).error();
      tokenizer::encode_prompt(*tok, *text, ids);
    } else {
      auto it = body.find("prompt");
      if (it == body.end() || it->is_null()) return invalid("'prompt' is required", "prompt");
      const Json* prompt = &*it;
      if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
        prompt = &(*prompt)[0];
      }
      if (prompt->is_string()) {
        tokenizer::encode_prompt(*tok, prompt->get<std::string>(), ids);
      } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number_integer()) {
        const int64_t n_vocab = scheduler->model_config().n_vocab;
        for (const auto& t : *prompt) {
          auto id = token_id(t, n_vocab);
          if (!id) {
            return invalid("'prompt' token ids must be integers between 0 and " +
                               std::to_string(n_vocab - 1) + " (the vocabulary), got " + t.dump(),
                           "prompt");
          }
          ids.push_back(static_cast<tokenizer::TokenId>(*id));
        }
      } else if (prompt->is_array() && prompt->size() > 1) {
        return invalid("the local engine takes one prompt per request", "prompt");
      } else {
        return invalid("'prompt' must be a string or an array of token ids", "prompt");
      }
    }
    if (ids.empty()) return invalid("the prompt is empty", "prompt");
    return std::vector<TokenId>(ids.begin(), ids.end());
  }

  Result<Json> parse_body(std::string_view body) const {
    Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return invalid("the request body is not a JSON object", "");
    return j;
  }

  Error with_name(Error e) const {
    if (e.code == ErrorCode::kUnavailable || e.code == ErrorCode::kInternal) {
      e.message = "backend '" + cfg.name + "': " + e.message;
    }
    return e;
  }
};

LocalBackend::LocalBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
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
  auto eng = std::make_unique<engine::Engine>(std::move(model).value(),
                                              engine::EngineOptions{lc.threads, lc.context_length,
                                                                    /*batch_invariant=*/true});
  engine::SchedulerOptions options;
  options.max_sequences = lc.max_sequences;
  options.max_queue = lc.max_queue;
  options.kv_budget_bytes = lc.kv_budget_mb > 0 ? lc.kv_budget_mb << 20 : 0;
  options.prefill_chunk = lc.prefill_chunk;
  options.prefix_cache = lc.prefix_cache;
  const tokenizer::Tokenizer* raw_tok = impl->tok.get();
  engine::TokenPieceFn piece = [raw_tok](TokenId id) {
    return raw_tok->token_bytes(static_cast<tokenizer::TokenId>(id));
  };
  impl->scheduler =
      std::make_unique<engine::Scheduler>(std::move(eng), options, std::move(piece), eog);
  return std::unique_ptr<LocalBackend>(new LocalBackend(std::move(impl)));
}

const std::string& LocalBackend::name() const {
  return impl_->cfg.name;
}

int64_t LocalBackend::context_length() const {
  return impl_->scheduler->n_ctx();
}

engine::LoadSnapshot LocalBackend::load() const {
  return impl_->scheduler->load();
}

BackendLoad LocalBackend::load_facts() const {
  const engine::LoadSnapshot s = impl_->scheduler->load();
  BackendLoad l;
  l.queue_depth = s.queue_depth;
  l.est_wait_ms = s.est_wait_ms;
  l.context_length = impl_->scheduler->n_ctx();
  return l;
}

Result<int64_t> LocalBackend::count_prompt(Endpoint endpoint, std::string_view body) const {
  auto json = impl_->parse_body(body);
  if (!json) return std::move(json).error();
  auto tokens = impl_->prompt_tokens(endpoint, json.value());
  if (!tokens) return std::move(tokens).error();
  return static_cast<int64_t>(tokens->size());
}

asio::awaitable<Result<BackendReply>> LocalBackend::send(const BackendRequest& request,
                                                         StreamSink* sink, CancelSignal& cancel) {
  Impl& im = *impl_;
  const auto started = Clock::now();
  const bool chat = request.endpoint == Endpoint::kChatCompletions;
  const bool stream = request.stream && sink != nullptr;

  // Parse and tokenize here (the gateway counts prompts on this thread too); all model work
  // happens on the scheduler thread.
  auto body = im.parse_body(request.body);
  if (!body) co_return std::move(body).error();
  Params params;
  if (Status s = parse_params(body.value(), request.endpoint, im.scheduler->model_config().n_vocab,
                              params);
      !s) {
    co_return s.error();
  }
  auto prompt = im.prompt_tokens(request.endpoint, body.value());
  if (!prompt) co_return std::move(prompt).error();
  params.prompt = std::move(prompt).value();
  const int64_t n_ctx = im.scheduler->n_ctx();
  const auto n_prompt = static_cast<int64_t>(params.prompt.size());
  const char* prompt_param = chat ? "messages" : "prompt";
  // Compared without adding: prompt + max_tokens would overflow for a max_tokens near INT64_MAX.
  if (n_prompt > n_ctx - params.max_tokens.value_or(1)) {
    co_return Error::make(
        ErrorCode::kContextOverflow,
        engine::Scheduler::context_overflow_message(n_ctx, n_prompt, params.max_tokens),
        params.max_tokens ? "max_tokens" : prompt_param, "context_length_exceeded");
  }
  if (cancel.cancelled()) co_return Error::make(ErrorCode::kCancelled, "client went away");

  // One sequence per choice. Choice 0 is submitted at once; the others once its first token is
  // out, when its prompt's KV is in the prefix cache: they copy it instead of prefilling again
  // (all but the last partial block), and decode alongside it.
  const auto executor = co_await asio::this_coro::executor;
  WakeChannel wake(executor, 1);
  struct Choice {
    std::shared_ptr<Pending> pending = std::make_shared<Pending>();
    std::optional<engine::RequestId> id;
    std::optional<engine::Completion> done;
    std::string content;  // non-streaming: the whole text
    Json chat_logprobs = Json::array();
    Json cmpl_tokens = Json::array(), cmpl_logprobs = Json::array(), cmpl_top = Json::array(),
         cmpl_offsets = Json::array();
    int64_t text_offset = 0;
    bool role_sent = false;
  };
  std::vector<Choice> choices(static_cast<size_t>(params.n));
  for (Choice& c : choices) c.pending->wake = &wake;
  engine::Scheduler* scheduler = im.scheduler.get();
  // Whatever way this coroutine ends (even destroyed mid-way at shutdown), the scheduler thread
  // must stop touching the channel, and the sequences must not run on.
  struct Detach {
    std::vector<Choice>* choices;
    engine::Scheduler* scheduler;
    ~Detach() {
      for (Choice& c : *choices) {
        bool finished = false;
        {
          std::lock_guard lock(c.pending->mu);
          c.pending->wake = nullptr;
          finished = c.pending->done.has_value();
        }
        if (c.id && !finished) scheduler->cancel(*c.id);
      }
    }
  } detach{&choices, scheduler};
  const uint64_t seed = params.sampling.seed;
  auto make_request = [&](size_t index) {
    engine::GenerationRequest gen;
    gen.prompt = params.prompt;
    gen.max_tokens = params.max_tokens.value_or(n_ctx - n_prompt);
    gen.sampling = params.sampling;
    gen.sampling.seed = choice_seed(seed, static_cast<int64_t>(index));
    gen.stop = params.stop;
    gen.stop_at_eog = params.stop_at_eog;
    gen.top_logprobs = params.top_logprobs;
    gen.max_unread = im.cfg.local->max_unread_tokens;  // back-pressure: consumed() below
    if (im.cfg.timeouts.total_ms > 0) {
      gen.deadline = started + std::chrono::milliseconds(im.cfg.timeouts.total_ms);
    }
    std::shared_ptr<Pending> pending = choices[index].pending;
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
  };
  // The ids submitted so far, shared with the cancel hook (which may outlive this frame).
  auto ids = std::make_shared<std::vector<engine::RequestId>>();
  auto cancel_all = [ids, scheduler] {
    for (engine::RequestId id : *ids) scheduler->cancel(id);
  };
  auto submitted = scheduler->submit(make_request(0));
  if (!submitted) co_return im.with_name(std::move(submitted).error());
  choices[0].id = submitted.value();
  ids->push_back(submitted.value());
  cancel.set_hook(cancel_all);
  bool others_submitted = choices.size() == 1;
  std::optional<Error> submit_error;  // a later choice the engine refused (queue full, ...)

  // The answer's shape.
  const std::string model =
      request.reply_model.empty() ? body->value("model", std::string()) : request.reply_model;
  const std::string id_text =
      (chat ? "chatcmpl-" : "cmpl-") +
      (request.request_id.empty() ? std::to_string(*choices[0].id) : request.request_id);
  const auto created = static_cast<int64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count());
  const bool want_logprobs = params.top_logprobs >= 0;
  const bool usage_null = stream && request.client_wants_usage;
  auto chunk = [&](Json choice) {
    Json j;
    j["id"] = id_text;
    j["object"] = chat ? "chat.completion.chunk" : "text_completion";
    j["created"] = created;
    j["model"] = model;
    j["choices"] = Json::array({std::move(choice)});
    if (usage_null) j["usage"] = nullptr;
    return "data: " + dump(j) + "\n\n";
  };
  // Logprobs entries: chat's {"content": [...]} items, or completions' parallel arrays.
  auto chat_logprob = [&](const TokenOut& t) {
    auto entry = [&](TokenId token, float lp) {
      const std::string text = im.token_text(token);
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
  };
  auto add_cmpl_logprob = [&](const TokenOut& t, int64_t& text_offset, Json& tokens, Json& lps,
                              Json& tops, Json& offsets) {
    const std::string text = im.token_text(t.token);
    tokens.push_back(text);
    lps.push_back(t.logprob);
    Json top = Json::object();
    for (const auto& alt : t.top) top[im.token_text(alt.token)] = alt.logprob;
    tops.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(text.size());
  };
  auto role_chunk = [&](size_t index) {
    return chunk(Json{{"index", index},
                      {"delta", Json{{"role", "assistant"}, {"content", ""}}},
                      {"logprobs", nullptr},
                      {"finish_reason", nullptr}});
  };

  BackendReply reply;
  bool client_gone = false;
  std::deque<TokenOut> batch;
  std::string out;
  auto all_done = [&] {
    if (!others_submitted) return false;
    for (const Choice& c : choices) {
      if (c.id && !c.done) return false;
    }
    return true;
  };
  while (true) {
    out.clear();
    for (size_t index = 0; index < choices.size(); ++index) {
      Choice& ch = choices[index];
      if (!ch.id || ch.done) continue;
      {
        std::lock_guard lock(ch.pending->mu);
        batch.swap(ch.pending->tokens);
        if (ch.pending->done && ch.pending->tokens.empty()) ch.done = ch.pending->done;
      }
      if (!batch.empty()) scheduler->consumed(*ch.id, static_cast<int64_t>(batch.size()));
      if (!batch.empty() && reply.first_byte_us < 0) {
        reply.first_byte_us =
            std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count();
      }
      if (index == 0 && !others_submitted && (!batch.empty() || ch.done)) {
        // Choice 0's prompt is prefilled (and cached): the others start from it.
        others_submitted = true;
        for (size_t k = 1; k < choices.size() && !submit_error; ++k) {
          auto more = scheduler->submit(make_request(k));
          if (!more) {
            submit_error = im.with_name(std::move(more).error());
            cancel_all();
            break;
          }
          choices[k].id = more.value();
          ids->push_back(more.value());
        }
      }
      for (TokenOut& t : batch) {
        if (!stream) {
          ch.content += t.text;
          if (want_logprobs && t.token >= 0) {
            if (chat) {
              ch.chat_logprobs.push_back(chat_logprob(t));
            } else {
              add_cmpl_logprob(t, ch.text_offset, ch.cmpl_tokens, ch.cmpl_logprobs, ch.cmpl_top,
                               ch.cmpl_offsets);
            }
          }
          continue;
        }
        const bool with_lp = want_logprobs && t.token >= 0;
        if (t.text.empty() && !with_lp) continue;
        if (chat && !ch.role_sent) {
          out += role_chunk(index);
          ch.role_sent = true;
        }
        Json choice;
        if (chat) {
          choice["index"] = index;
          choice["delta"] = Json{{"content", t.text}};
          choice["logprobs"] = with_lp ? Json{{"content", Json::array({chat_logprob(t)})}} : Json();
        } else {
          choice["text"] = t.text;
          choice["index"] = index;
          if (with_lp) {
            Json tokens = Json::array(), lps = Json::array(), tops = Json::array(),
                 offsets = Json::array();
            add_cmpl_logprob(t, ch.text_offset, tokens, lps, tops, offsets);
            choice["logprobs"] = Json{{"tokens", std::move(tokens)},
                                      {"token_logprobs", std::move(lps)},
                                      {"top_logprobs", std::move(tops)},
                                      {"text_offset", std::move(offsets)}};
          } else {
            choice["logprobs"] = nullptr;
          }
        }
        choice["finish_reason"] = nullptr;
        out += chunk(std::move(choice));
      }
      batch.clear();
      if (ch.done && !ch.done->error && stream && !submit_error) {
        const std::string finish(engine::finish_reason_name(ch.done->finish));
        if (chat && !ch.role_sent) {
          out += role_chunk(index);
          ch.role_sent = true;
        }
        if (chat) {
          out += chunk(Json{{"index", index},
                            {"delta", Json::object()},
                            {"logprobs", nullptr},
                            {"finish_reason", finish}});
        } else {
          out += chunk(Json{
              {"text", ""}, {"index", index}, {"logprobs", nullptr}, {"finish_reason", finish}});
        }
      }
    }
    const bool finished = all_done();
    if (finished && stream && request.client_wants_usage && !submit_error) {
      bool ok_all = true;
      for (const Choice& c : choices) ok_all = ok_all && c.done && !c.done->error;
      if (ok_all) {
        Json j;
        j["id"] = id_text;
        j["object"] = chat ? "chat.completion.chunk" : "text_completion";
        j["created"] = created;
        j["model"] = model;
        j["choices"] = Json::array();
        engine::Completion total = *choices[0].done;
        for (size_t k = 1; k < choices.size(); ++k) {
          total.completion_tokens += choices[k].done->completion_tokens;
        }
        j["usage"] = usage_json(total);
        out += "data: " + dump(j) + "\n\n";
      }
    }
    if (stream && !out.empty() && !client_gone) {
      const bool ok = co_await sink->write(out);
      if (!ok) {
        client_gone = true;
        cancel_all();  // the sequences end within a step; their on_done still arrives
      }
    }
    if (finished) break;
    auto [ec] = co_await wake.async_receive(kAwait);
    (void)ec;
  }
  cancel.clear_hook();

  if (client_gone || cancel.cancelled()) {
    co_return Error::make(ErrorCode::kCancelled, "client went away");
  }
  if (submit_error) co_return *submit_error;
  for (const Choice& ch : choices) {
    const engine::Completion& c = *ch.done;
    if (!c.error) continue;
    if (c.error->code == ErrorCode::kTimeout) {
      co_return Error::make(ErrorCode::kTimeout, "backend '" + im.cfg.name +
                                                     "' did not finish within total_ms=" +
                                                     std::to_string(im.cfg.timeouts.total_ms));
    }
    co_return im.with_name(*c.error);
  }
  // Billed as one prompt plus every choice's output.
  engine::Completion total = *choices[0].done;
  for (size_t k = 1; k < choices.size(); ++k) {
    total.completion_tokens += choices[k].done->completion_tokens;
  }
  reply.status = 200;
  reply.finish_reason = std::string(engine::finish_reason_name(total.finish));
  reply.usage.prompt_tokens = total.prompt_tokens;
  reply.usage.completion_tokens = total.completion_tokens;
  reply.usage.total_tokens = total.prompt_tokens + total.completion_tokens;
  reply.usage.cached_tokens = total.cached_tokens;
  if (reply.first_byte_us < 0) {
    reply.first_byte_us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count();
  }
  if (!stream) {
    Json list = Json::array();
    for (size_t index = 0; index < choices.size(); ++index) {
      Choice& ch = choices[index];
      Json choice;
      if (chat) {
        choice["index"] = index;
        choice["message"] = Json{{"role", "assistant"}, {"content", ch.content}};
        choice["logprobs"] =
            want_logprobs ? Json{{"content", std::move(ch.chat_logprobs)}} : Json();
      } else {
        choice["text"] = ch.content;
        choice["index"] = index;
        choice["logprobs"] = want_logprobs ? Json{{"tokens", std::move(ch.cmpl_tokens)},
                                                  {"token_logprobs", std::move(ch.cmpl_logprobs)},
                                                  {"top_logprobs", std::move(ch.cmpl_top)},
                                                  {"text_offset", std::move(ch.cmpl_offsets)}}
                                           : Json();
      }
      choice["finish_reason"] = std::string(engine::finish_reason_name(ch.done->finish));
      list.push_back(std::move(choice));
    }
    Json j;
    j["id"] = id_text;
    j["object"] = chat ? "chat.completion" : "text_completion";
    j["created"] = created;
    j["model"] = model;
    j["choices"] = std::move(list);
    j["usage"] = usage_json(total);
    reply.body = dump(j);
  }
  co_return reply;
}

void LocalBackend::render_metrics(std::string& out) const {
  const LocalBackend* self = this;
  render_metrics(std::span<const LocalBackend* const>(&self, 1), out);
}

void LocalBackend::render_metrics(std::span<const LocalBackend* const> backends, std::string& out) {
  using Snapshot = engine::LoadSnapshot;
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    std::string (*value)(const Snapshot&);
  };
  static const Family kFamilies[] = {
      {"ferry_local_queue_depth", "gauge", "Requests waiting for a sequence slot.",
       [](const Snapshot& s) { return std::to_string(s.queue_depth); }},
      {"ferry_local_active_sequences", "gauge", "Sequences being prefilled or decoded.",
       [](const Snapshot& s) { return std::to_string(s.active_sequences); }},
      {"ferry_local_paused_sequences", "gauge", "Sequences paused: their client reads slowly.",
       [](const Snapshot& s) { return std::to_string(s.paused_sequences); }},
      {"ferry_local_kv_bytes", "gauge", "KV cache bytes allocated (running and cached prefixes).",
       [](const Snapshot& s) { return std::to_string(s.kv_bytes_used); }},
      {"ferry_local_kv_budget_bytes", "gauge", "KV cache memory budget in bytes.",
       [](const Snapshot& s) { return std::to_string(s.kv_budget_bytes); }},
      {"ferry_local_est_wait_ms", "gauge", "Estimated wait for a sequence slot, in ms.",
       [](const Snapshot& s) { return std::to_string(s.est_wait_ms); }},
      {"ferry_local_tokens_per_second", "gauge", "Generated tokens per second (last 10 s).",
       [](const Snapshot& s) { return format_double(s.tokens_per_second); }},
      {"ferry_local_prefix_cache_hit_ratio", "gauge",
       "Prompt tokens reused from the prefix cache / prompt tokens.",
       [](const Snapshot& s) { return format_double(s.prefix_cache_hit_ratio); }},
      {"ferry_local_sequences_cancelled_total", "counter",
       "Sequences cancelled by the client or stopped at their deadline.",
       [](const Snapshot& s) { return std::to_string(s.sequences_cancelled); }},
  };
  std::vector<Snapshot> loads;
  for (const LocalBackend* b : backends) loads.push_back(b->load());
  for (const Family& f : kFamilies) {
    out +=
        std::string("# HELP ") + f.name + " " + f.help + "\n# TYPE " + f.name + " " + f.type + "\n";
    for (size_t i = 0; i < backends.size(); ++i) {
      out += std::string(f.name) + "{backend=\"" + escape_label(backends[i]->name()) + "\"} " +
             f.value(loads[i]) + "\n";
    }
  }
}

std::optional<int64_t> LocalBackend::exact_prompt_tokens(Endpoint endpoint,
                                                         std::string_view body) const {
  auto n = count_prompt(endpoint, body);
  if (!n) return std::nullopt;
  return *n;
}

}  // namespace ferry::adapters
