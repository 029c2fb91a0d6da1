// ferry_engine_probe: the local engine's greedy output and logits on given prompt ids, without
// the gateway binary (links only ferry_engine, so it rebuilds fast while kernels change). With
// FERRY_TRACE_DIR set, the forward pass also dumps its intermediate tensors
// (local_engine/kernels/trace.h) for tools/llamacpp/trace_compare.py.
//
//   ferry_engine_probe MODEL IDS [N_GEN] [THREADS]
//   ferry_engine_probe MODEL bench P N [THREADS] [REPS]
//   ferry_engine_probe MODEL steps [THREADS] [STEPS] [SWEEP]
//
// Prints the greedy continuation (N_GEN tokens after the prompt, prompt as one batch, then one
// token per forward) and the top 5 next-token log-probabilities after the prompt. `bench` times
// a P-token random prompt (one batch) and N decode steps from an empty cache, best of REPS,
// the way `ferry engine bench` does, for quick kernel iterations without relinking the gateway.
// `steps` times, per batch size, (a) the model's matrix products alone (all layers' seven
// matrices plus the output, batch-invariant forms, G multiply-adds/s) and (b) whole decode
// steps of the batch-invariant engine with that many sequences (one token each), best and
// median of STEPS (SWEEP 0 skips (a)): where a batched decode step loses against prefill.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "local_engine/engine.h"
#include "local_engine/gguf_source.h"
#include "local_engine/kernels/matmul.h"
#include "local_engine/kernels/packed.h"
#include "local_engine/kernels/thread_pool.h"

namespace {

int argmax(const std::vector<float>& logits) {
  return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int run_bench(int argc, char** argv) {
  using namespace ferry;
  const int64_t n_prompt = argc > 3 ? std::atoll(argv[3]) : 512;
  const int64_t n_gen = argc > 4 ? std::atoll(argv[4]) : 128;
  const int threads = argc > 5 ? std::atoi(argv[5]) : 2;
  const int reps = argc > 6 ? std::atoi(argv[6]) : 2;
  auto src = engine::GgufSource::open(argv[1]);
  if (!src) return 1;
  auto model = engine::Model::load(src.value());
  if (!model) return 1;
  engine::Engine e(std::move(model).value(), engine::EngineOptions{threads, n_prompt + n_gen + 1});
  std::mt19937 rng(1234);
  std::uniform_int_distribution<engine::TokenId> pick(
      0, static_cast<engine::TokenId>(e.config().n_vocab - 1));
  std::vector<float> logits;
  double pp = 0, tg = 0;
  for (int rep = 0; rep < reps; ++rep) {
    e.kv().seq_remove(0);
    (void)e.kv().seq_add(0);
    std::vector<engine::BatchEntry> batch;
    for (int64_t i = 0; i < n_prompt; ++i) batch.push_back({0, i, pick(rng), i + 1 == n_prompt});
    auto start = std::chrono::steady_clock::now();
    if (n_prompt > 0 && !e.forward(batch, logits)) return 1;
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (n_prompt > 0) pp = std::max(pp, static_cast<double>(n_prompt) / secs);
    e.kv().seq_remove(0);
    (void)e.kv().seq_add(0);
    start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n_gen; ++i) {
      const engine::BatchEntry entry{0, i, pick(rng), true};
      if (!e.forward(std::span<const engine::BatchEntry>(&entry, 1), logits)) return 1;
    }
    secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (n_gen > 0) tg = std::max(tg, static_cast<double>(n_gen) / secs);
  }
  std::printf("pp%lld: %.2f t/s  tg%lld: %.2f t/s\n", static_cast<long long>(n_prompt), pp,
              static_cast<long long>(n_gen), tg);
  return 0;
}

double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

int run_steps(int argc, char** argv) {
  using namespace ferry;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 2;
  const int n_steps = argc > 4 ? std::atoi(argv[4]) : 24;
  const bool sweep = argc > 5 ? std::atoi(argv[5]) != 0 : true;  // 0: decode steps only
  const std::vector<int64_t> sizes = {1, 2, 4, 8, 16, 64};
  auto src = engine::GgufSource::open(argv[1]);
  if (!src) return 1;
  auto loaded = engine::Model::load(src.value());
  if (!loaded) return 1;
  std::unique_ptr<engine::Model> model = std::move(loaded).value();
  const engine::ModelConfig& c = model->config();
  std::mt19937 rng(1234);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  if (sweep) {
    kernels::ThreadPool pool(threads);
    std::vector<const engine::WeightView*> mats;
    for (const auto& l : model->layers) {
      for (const auto* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
        mats.push_back(w);
      }
    }
    mats.push_back(&model->output);
    double macs_per_token = 0;
    for (const auto* w : mats) macs_per_token += static_cast<double>(w->rows * w->cols);
    const int64_t max_cols = std::max(c.n_embd, c.n_ff);
    std::vector<float> x(static_cast<size_t>(64 * max_cols)),
        y(static_cast<size_t>(64 * c.n_vocab));
    for (auto& v : x) v = dist(rng);
    std::printf(
        "matrix products, %d threads, %.3f G multiply-adds per token (all layers + output)\n",
        threads, macs_per_token * 1e-9);
    // The packed form (packed.h: Q8_0, Q5_0) where the matrix and the CPU allow it.
    std::vector<std::unique_ptr<kernels::PackedWeights>> packed;
    for (const auto* w : mats) {
      packed.push_back(kernels::packed_supported() && kernels::packable(*w)
                           ? std::make_unique<kernels::PackedWeights>(*w)
                           : nullptr);
    }
    for (const bool use_packed : {false, true}) {
      std::printf("%s\n%6s %10s %10s %12s %10s %14s\n",
                  use_packed ? "packed Q8_0 / Q5_0 (serial order)" : "row layout (lane order)",
                  "tokens", "best ms", "median ms", "ms / token", "G MAC/s", "CPU ms/thread");
      for (const int64_t nt : sizes) {
        std::vector<double> times, cpu;
        for (int rep = 0; rep < std::max(3, 48 / static_cast<int>(nt)); ++rep) {
          const double c0 = cpu_ms();
          const auto t0 = std::chrono::steady_clock::now();
          for (size_t m = 0; m < mats.size(); ++m) {
            const auto* w = mats[m];
            if (!use_packed || !packed[m]) {
              kernels::matmul(*w, x.data(), nt, y.data(), pool, kernels::BatchForms::kInvariant);
              continue;
            }
            const auto qa = kernels::quantize_activations(w->type, x.data(), nt, w->cols);
            pool.parallel_for(w->rows, kernels::kPackRows, [&](int64_t begin, int64_t end) {
              kernels::packed_rows(*packed[m], qa, y.data(), w->rows, begin, end);
            });
          }
          times.push_back(ms_since(t0));
          cpu.push_back((cpu_ms() - c0) / threads);
        }
        std::sort(times.begin(), times.end());
        std::sort(cpu.begin(), cpu.end());
        std::printf("%6lld %10.2f %10.2f %12.3f %10.1f %14.2f\n", static_cast<long long>(nt),
                    times[0], times[times.size() / 2], times[0] / static_cast<double>(nt),
                    macs_per_token * static_cast<double>(nt) / (times[0] * 1e6), cpu[0]);
      }
    }
  }
  // Whole decode steps: B sequences of a 32-token prompt, then n_steps steps of B tokens.
  const auto made = std::chrono::steady_clock::now();
  engine::Engine e(std::move(model),
                   engine::EngineOptions{threads, 32 + n_steps + 8, /*batch_invariant=*/true});
  std::printf("batch-invariant engine made in %.0f ms (Q8_0 packing included)\n", ms_since(made));
  std::uniform_int_distribution<engine::TokenId> pick(0,
                                                      static_cast<engine::TokenId>(c.n_vocab - 1));
  std::vector<float> logits;
  std::printf("decode steps (batch-invariant engine), %d threads, prompts of 32 tokens\n", threads);
  std::printf("%6s %10s %10s %10s\n", "seqs", "best ms", "median ms", "tok/s");
  for (const int64_t b : {1, 4, 8, 16}) {
    std::vector<engine::BatchEntry> batch;
    for (engine::SeqId s = 0; s < b; ++s) {
      e.kv().seq_remove(s);
      if (!e.kv().seq_add(s)) return 1;
      for (int64_t i = 0; i < 32; ++i) batch.push_back({s, i, pick(rng), i == 31});
      if (!e.forward(batch, logits)) return 1;
      batch.clear();
    }
    std::vector<double> times;
    for (int step = 0; step < n_steps; ++step) {
      batch.clear();
      for (engine::SeqId s = 0; s < b; ++s) batch.push_back({s, 32 + step, pick(rng), true});
      const auto t0 = std::chrono::steady_clock::now();
      if (!e.forward(batch, logits)) return 1;
      times.push_back(ms_since(t0));
    }
    std::sort(times.begin(), times.end());
    std::printf("%6lld %10.2f %10.2f %10.1f\n", static_cast<long long>(b), times[0],
                times[times.size() / 2], static_cast<double>(b) * 1000.0 / times[times.size() / 2]);
    for (engine::SeqId s = 0; s < b; ++s) e.kv().seq_remove(s);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ferry;
  if (argc < 3) {
    std::fprintf(stderr, "usage: ferry_engine_probe MODEL IDS [N_GEN] [THREADS]\n");
    return 2;
  }
  if (std::string(argv[2]) == "bench") return run_bench(argc, argv);
  if (std::string(argv[2]) == "steps") return run_steps(argc, argv);
  std::vector<engine::TokenId> prompt;
  for (const char* p = argv[2]; *p;) {
    char* end = nullptr;
    prompt.push_back(static_cast<engine::TokenId>(std::strtol(p, &end, 10)));
    p = *end == ',' ? end + 1 : end;
  }
  const int n_gen = argc > 3 ? std::atoi(argv[3]) : 0;
  const int threads = argc > 4 ? std::atoi(argv[4]) : 2;
  auto src = engine::GgufSource::open(argv[1]);
  if (!src) {
    std::fprintf(stderr, "%s\n", src.error().message.c_str());
    return 1;
  }
  auto model = engine::Model::load(src.value());
  if (!model) {
    std::fprintf(stderr, "%s\n", model.error().message.c_str());
    return 1;
  }
  engine::Engine e(std::move(model).value(), engine::EngineOptions{threads, 256});
  if (auto s = e.kv().seq_add(0); !s) return 1;
  std::vector<engine::BatchEntry> batch;
  for (size_t i = 0; i < prompt.size(); ++i) {
    batch.push_back({0, static_cast<int64_t>(i), prompt[i], i + 1 == prompt.size()});
  }
  std::vector<float> logits;
  if (auto s = e.forward(batch, logits); !s) {
    std::fprintf(stderr, "%s\n", s.error().message.c_str());
    return 1;
  }
  // Top log-probabilities after the prompt.
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max_logit));
  const double log_sum = std::log(sum) + max_logit;
  std::vector<int> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                    [&](int a, int b) { return logits[a] > logits[b]; });
  std::printf("top:");
  for (int i = 0; i < 5; ++i) {
    std::printf(" %d:%.6f", order[i], static_cast<double>(logits[order[i]]) - log_sum);
  }
  std::printf("\ngreedy:");
  int64_t pos = static_cast<int64_t>(prompt.size());
  int next = argmax(logits);
  for (int i = 0; i < n_gen; ++i) {
    std::printf(" %d", next);
    const engine::BatchEntry entry{0, pos++, next, true};
    if (auto s = e.forward(std::span<const engine::BatchEntry>(&entry, 1), logits); !s) return 1;
    next = argmax(logits);
  }
  std::printf(" %d\n", next);
  return 0;
}
