// Embeddings throughput of the local engine vs its own prefill, same model, same batch, same run:
//   prefill:      Engine::forward over the batch (every input a sequence, logits of its last
//                 token; the scheduler's prefill work without sampling), fresh KV each time;
//   prefill rows: the same pass keeping every row's final-norm hidden state
//                 (Engine::forward_hidden with every entry marked): the work a pass must do
//                 when every row is wanted (mean pooling), without the output projection;
//   embeddings:   Scheduler::submit_embeddings of the same inputs (batched passes, pooling,
//                 normalization, the hand-off back to the caller), end to end.
// Reported as input tokens/s and the ratios (issue 16: embeddings >= 1.0x prefill). Passes
// alternate, and each keeps its best of --reps (a shared machine's noise is one-sided).
// Pooling follows the model (synthesized decoders: none in the GGUF, so last-token); --mean
// forces mean pooling (every row through the last layer's FFN).
// An encoder (bert, nomic-bert: --preset bge-small | all-minilm-l6, or --model) has no prefill
// of its own: EncoderRunner::submit end to end (as the local backend serves it) and
// Encoder::embed alone are timed against the decoder engine's prefill (both forms above) of a
// llama of the same shape (width, layers, heads, ffn, vocabulary, type; its FFN has three
// matrices to bert's two, its attention is causal).
//   ferry_embeddings_bench [--model FILE] [--preset smollm2-360m|tiny|bge-small|all-minilm-l6]
//                          [--type Q8_0] [--threads 2] [--inputs 8] [--tokens 64]
//                          [--batch 512] [--reps 3] [--mean]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bench/bench_engine.h"
#include "local_engine/embeddings.h"
#include "local_engine/encoder.h"
#include "local_engine/encoder_runner.h"
#include "local_engine/gguf_source.h"
#include "local_engine/scheduler.h"
#include "model_tools/model_tools.h"

namespace {

using namespace ferry;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string model;
  std::string preset = "smollm2-360m";
  std::string type = "Q8_0";
  int threads = 2;
  int64_t inputs = 8;
  int64_t tokens = 64;
  int64_t batch = 512;
  int reps = 3;
  bool mean = false;
};

// One prefill of every input, in passes of at most `batch` tokens as the embeddings runner makes
// them (whole inputs while they fit): logits of each input's last token, or (`rows`) the hidden
// state of every row. Seconds.
double prefill(engine::Engine& e, const std::vector<std::vector<engine::TokenId>>& inputs,
               int64_t batch, engine::SeqId& next_seq, bool rows) {
  std::vector<engine::BatchEntry> entries;
  std::vector<float> out;
  std::vector<engine::SeqId> seqs;
  const auto t0 = Clock::now();
  size_t i = 0;
  std::vector<int64_t> pos(inputs.size(), 0);
  while (i < inputs.size()) {
    entries.clear();
    int64_t room = batch;
    for (size_t k = i; k < inputs.size() && room > 0; ++k) {
      if (pos[k] == 0) {
        seqs.push_back(next_seq);
        (void)e.kv().seq_add(next_seq++);
      }
      const auto n = static_cast<int64_t>(inputs[k].size());
      const int64_t take = std::min(n - pos[k], room);
      for (int64_t p = pos[k]; p < pos[k] + take; ++p) {
        entries.push_back({seqs[k], p, inputs[k][static_cast<size_t>(p)], rows || p == n - 1});
      }
      pos[k] += take;
      room -= take;
    }
    const Status s = rows ? e.forward_hidden(entries, out) : e.forward(entries, out);
    if (!s) std::exit(1);
    while (i < inputs.size() && pos[i] == static_cast<int64_t>(inputs[i].size())) ++i;
  }
  const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  for (const auto seq : seqs) e.kv().seq_remove(seq);
  return sec;
}

// One embeddings request of `inputs` handed to `submit` (a scheduler's or an encoder runner's),
// waited for end to end. Seconds.
template <typename Submit>
double embed_request(const std::vector<std::vector<engine::TokenId>>& inputs,
                     engine::Pooling pooling, Submit&& submit) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  engine::EmbeddingRequest r;
  r.inputs = inputs;
  r.pooling = pooling;
  r.on_done = [&](Result<engine::EmbeddingResult> res) {
    if (!res) std::fprintf(stderr, "embeddings: %s\n", res.error().message.c_str());
    std::lock_guard lock(mu);
    done = true;
    cv.notify_all();
  };
  const auto t0 = Clock::now();
  if (!submit(std::move(r))) std::exit(1);
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done; });
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double embed(engine::Scheduler& s, const std::vector<std::vector<engine::TokenId>>& inputs,
             engine::Pooling pooling) {
  return embed_request(inputs, pooling, [&](engine::EmbeddingRequest r) {
    return static_cast<bool>(s.submit_embeddings(std::move(r)));
  });
}

// Through an encoder runner (its pooling is the model's).
double embed_encoder(engine::EncoderRunner& runner,
                     const std::vector<std::vector<engine::TokenId>>& inputs) {
  return embed_request(inputs, runner.pooling(), [&](engine::EmbeddingRequest r) {
    return static_cast<bool>(runner.submit(std::move(r)));
  });
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--mean") {
      a.mean = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", k.c_str());
      std::exit(2);
    }
    const char* v = argv[++i];
    if (k == "--model") {
      a.model = v;
    } else if (k == "--preset") {
      a.preset = v;
    } else if (k == "--type") {
      a.type = v;
    } else if (k == "--threads") {
      a.threads = std::atoi(v);
    } else if (k == "--inputs") {
      a.inputs = std::atoll(v);
    } else if (k == "--tokens") {
      a.tokens = std::atoll(v);
    } else if (k == "--batch") {
      a.batch = std::atoll(v);
    } else if (k == "--reps") {
      a.reps = std::atoi(v);
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

}  // namespace

namespace {

// Synthesizes `o` into a temporary file; exits on failure.
std::filesystem::path synth_or_exit(const model_tools::SynthOptions& o, const std::string& tag) {
  auto path = std::filesystem::temp_directory_path() /
              ("ferry-embeddings-bench-" + std::to_string(::getpid()) + tag + ".gguf");
  if (auto s = model_tools::write_synth_model(o, path.string()); !s) {
    std::fprintf(stderr, "synth: %s\n", s.error().message.c_str());
    std::exit(1);
  }
  return path;
}

std::vector<std::vector<engine::TokenId>> make_inputs(const Args& a, int64_t vocab) {
  std::vector<std::vector<engine::TokenId>> inputs(static_cast<size_t>(a.inputs));
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (int64_t t = 0; t < a.tokens; ++t) {
      inputs[i].push_back(static_cast<engine::TokenId>((i * 7919 + t * 104729 + 1) % vocab));
    }
  }
  return inputs;
}

struct Best {
  double prefill = 1e30, rows = 1e30, embed = 1e30, bare = 1e30;
};

void print_rep(int rep, double tokens, double p, double r, double e, double b) {
  std::printf("rep %d: prefill %.1f, prefill rows %.1f, embeddings %.1f", rep, tokens / p,
              tokens / r, tokens / e);
  if (b > 0) std::printf(", encoder alone %.1f", tokens / b);
  std::printf(" tok/s\n");
}

void print_best(double tokens, const Best& best) {
  std::printf("best: prefill %.1f, prefill rows %.1f, embeddings %.1f tok/s", tokens / best.prefill,
              tokens / best.rows, tokens / best.embed);
  if (best.bare < 1e30) std::printf(", encoder alone %.1f tok/s", tokens / best.bare);
  std::printf("\nratio: embeddings / prefill %.3f, embeddings / prefill rows %.3f\n",
              best.prefill / best.embed, best.rows / best.embed);
}

// A decoder: the scheduler's embeddings against the engine's prefill of the same model.
int run_decoder(const Args& a) {
  const int64_t n_ctx = std::max<int64_t>(a.tokens, 64);
  auto prefill_engine = bench::load_engine_or_exit(a.model, a.threads, n_ctx);
  engine::SchedulerOptions so;
  so.embedding_batch_tokens = a.batch;
  engine::Scheduler scheduler(bench::load_engine_or_exit(a.model, a.threads, n_ctx), so,
                              engine::TokenPieceFn(), {});
  auto pooling = engine::pooling_for(scheduler.model_config());
  if (!pooling) {
    std::fprintf(stderr, "%s\n", pooling.error().message.c_str());
    return 1;
  }
  if (a.mean) *pooling = engine::Pooling::kMean;
  const auto inputs = make_inputs(a, scheduler.model_config().n_vocab);
  const double tokens = static_cast<double>(a.inputs * a.tokens);
  std::printf("model %s (%s), %d threads, %lld inputs x %lld tokens, passes of %lld, pooling %s\n",
              a.model.c_str(), a.preset.c_str(), a.threads, static_cast<long long>(a.inputs),
              static_cast<long long>(a.tokens), static_cast<long long>(a.batch),
              std::string(engine::pooling_name(*pooling)).c_str());
  engine::SeqId next_seq = 0;
  Best best;
  for (int rep = 0; rep < a.reps; ++rep) {
    const double p = prefill(*prefill_engine, inputs, a.batch, next_seq, false);
    const double e = embed(scheduler, inputs, *pooling);
    const double r = prefill(*prefill_engine, inputs, a.batch, next_seq, true);
    print_rep(rep, tokens, p, r, e, 0);
    best.prefill = std::min(best.prefill, p);
    best.rows = std::min(best.rows, r);
    best.embed = std::min(best.embed, e);
  }
  print_best(tokens, best);
  return 0;
}

// An encoder: its runner (and the encoder alone) against the decoder engine's prefill of a
// llama of the same shape.
int run_encoder(const Args& a, const std::shared_ptr<engine::GgufSource>& source,
                std::filesystem::path& reference) {
  auto model = engine::EncoderModel::load(source);
  if (!model) {
    std::fprintf(stderr, "%s\n", model.error().message.c_str());
    return 1;
  }
  const engine::EncoderConfig c = (*model)->config();
  auto bare = engine::Encoder::create(std::move(model).value(), a.threads);
  auto model2 = engine::EncoderModel::load(source);
  auto served = engine::Encoder::create(std::move(model2).value(), a.threads);
  if (!bare || !served) {
    std::fprintf(stderr, "the encoder does not run this model\n");
    return 1;
  }
  engine::EncoderRunner runner(std::move(served).value(), a.batch, 16);
  model_tools::SynthOptions o;
  o.arch = "llama";
  o.type = a.type;
  o.n_embd = c.n_embd;
  o.n_layer = c.n_layer;
  o.n_head = c.n_head;
  o.n_head_kv = c.n_head;
  o.n_ff = c.n_ff;
  o.n_vocab = c.n_vocab;
  o.n_ctx = std::max<int64_t>(a.tokens, 512);
  reference = synth_or_exit(o, "-llama");
  auto engine = bench::load_engine_or_exit(reference.string(), a.threads, o.n_ctx);
  const auto inputs = make_inputs(a, c.n_vocab);
  const double tokens = static_cast<double>(a.inputs * a.tokens);
  std::printf(
      "encoder %s (%s: %lld wide, %lld layers, ffn %lld), %d threads, %lld inputs x %lld "
      "tokens, passes of %lld, pooling %s; reference: a llama of that shape\n",
      a.model.c_str(), c.arch_name.c_str(), static_cast<long long>(c.n_embd),
      static_cast<long long>(c.n_layer), static_cast<long long>(c.n_ff), a.threads,
      static_cast<long long>(a.inputs), static_cast<long long>(a.tokens),
      static_cast<long long>(a.batch), std::string(engine::pooling_name(runner.pooling())).c_str());
  engine::SeqId next_seq = 0;
  Best best;
  for (int rep = 0; rep < a.reps; ++rep) {
    const double p = prefill(*engine, inputs, a.batch, next_seq, false);
    const double e = embed_encoder(runner, inputs);
    const double r = prefill(*engine, inputs, a.batch, next_seq, true);
    const auto t0 = Clock::now();
    if (!(*bare)->embed(inputs)) std::exit(1);
    const double b = std::chrono::duration<double>(Clock::now() - t0).count();
    print_rep(rep, tokens, p, r, e, b);
    best.prefill = std::min(best.prefill, p);
    best.rows = std::min(best.rows, r);
    best.embed = std::min(best.embed, e);
    best.bare = std::min(best.bare, b);
  }
  print_best(tokens, best);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  std::filesystem::path temp, reference;
  if (a.model.empty()) {
    model_tools::SynthOptions o;
    o.type = a.type;
    if (!model_tools::apply_synth_preset(a.preset, o)) {
      std::fprintf(stderr, "unknown preset %s\n", a.preset.c_str());
      return 2;
    }
    temp = synth_or_exit(o, "");
    a.model = temp.string();
  }
  auto source = engine::GgufSource::open(a.model);
  if (!source) {
    std::fprintf(stderr, "%s\n", source.error().message.c_str());
    return 1;
  }
  const bool encoder =
      engine::is_encoder_arch(source.value()->get_string("general.architecture").value_or(""));
  const int rc = encoder ? run_encoder(a, source.value(), reference) : run_decoder(a);
  for (const auto& p : {temp, reference}) {
    if (!p.empty()) std::filesystem::remove(p);
  }
  return rc;
}
