// Embeddings throughput of the local engine vs its own prefill, same model, same batch, same run:
//   prefill:    Engine::forward over the batch (every input a sequence, logits of its last
//               token; the scheduler's prefill work without sampling), fresh KV each time;
//   embeddings: Scheduler::submit_embeddings of the same inputs (batched passes, pooling,
//               normalization, the hand-off back to the caller), end to end.
// Reported as input tokens/s and their ratio (issue 16: embeddings >= 1.0x prefill). Passes of
// the two alternate, and each side keeps its best of --reps (a shared machine's noise is
// one-sided). Pooling follows the model (synthesized: none in the GGUF, so last-token); --mean
// forces mean pooling (every row through the last layer's FFN).
//   ferry_embeddings_bench [--model FILE] [--preset smollm2-360m|tiny] [--type Q8_0]
//                          [--threads 2] [--inputs 8] [--tokens 64] [--batch 512] [--reps 3]
//                          [--mean]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "bench/bench_engine.h"
#include "local_engine/embeddings.h"
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
// them (whole inputs while they fit). Seconds.
double prefill(engine::Engine& e, const std::vector<std::vector<engine::TokenId>>& inputs,
               int64_t batch, engine::SeqId& next_seq) {
  std::vector<engine::BatchEntry> entries;
  std::vector<float> logits;
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
        entries.push_back({seqs[k], p, inputs[k][static_cast<size_t>(p)], p == n - 1});
      }
      pos[k] += take;
      room -= take;
    }
    if (!e.forward(entries, logits)) std::exit(1);
    while (i < inputs.size() && pos[i] == static_cast<int64_t>(inputs[i].size())) ++i;
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  for (const auto seq : seqs) e.kv().seq_remove(seq);
  return s;
}

double embed(engine::Scheduler& s, const std::vector<std::vector<engine::TokenId>>& inputs,
             engine::Pooling pooling) {
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
  if (!s.submit_embeddings(std::move(r))) std::exit(1);
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done; });
  return std::chrono::duration<double>(Clock::now() - t0).count();
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

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  std::filesystem::path temp;
  if (a.model.empty()) {
    model_tools::SynthOptions o;
    o.type = a.type;
    if (!model_tools::apply_synth_preset(a.preset, o)) {
      std::fprintf(stderr, "unknown preset %s\n", a.preset.c_str());
      return 2;
    }
    temp = std::filesystem::temp_directory_path() /
           ("ferry-embeddings-bench-" + std::to_string(::getpid()) + ".gguf");
    a.model = temp.string();
    if (auto s = model_tools::write_synth_model(o, a.model); !s) {
      std::fprintf(stderr, "synth: %s\n", s.error().message.c_str());
      return 1;
    }
  }
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
  const int64_t vocab = scheduler.model_config().n_vocab;
  std::vector<std::vector<engine::TokenId>> inputs(static_cast<size_t>(a.inputs));
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (int64_t t = 0; t < a.tokens; ++t) {
      inputs[i].push_back(static_cast<engine::TokenId>((i * 7919 + t * 104729 + 1) % vocab));
    }
  }
  const double tokens = static_cast<double>(a.inputs * a.tokens);
  std::printf("model %s (%s), %d threads, %lld inputs x %lld tokens, passes of %lld, pooling %s\n",
              a.model.c_str(), a.preset.c_str(), a.threads, static_cast<long long>(a.inputs),
              static_cast<long long>(a.tokens), static_cast<long long>(a.batch),
              std::string(engine::pooling_name(*pooling)).c_str());
  engine::SeqId next_seq = 0;
  double best_prefill = 1e30, best_embed = 1e30;
  for (int rep = 0; rep < a.reps; ++rep) {
    const double p = prefill(*prefill_engine, inputs, a.batch, next_seq);
    const double e = embed(scheduler, inputs, *pooling);
    std::printf("rep %d: prefill %.1f tok/s, embeddings %.1f tok/s\n", rep, tokens / p, tokens / e);
    best_prefill = std::min(best_prefill, p);
    best_embed = std::min(best_embed, e);
  }
  std::printf("best: prefill %.1f tok/s, embeddings %.1f tok/s, ratio %.3f\n",
              tokens / best_prefill, tokens / best_embed, best_prefill / best_embed);
  if (!temp.empty()) std::filesystem::remove(temp);
  return 0;
}
