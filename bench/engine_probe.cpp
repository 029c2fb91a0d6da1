// ferry_engine_probe: the local engine's greedy output and logits on given prompt ids, without
// the gateway binary (links only ferry_engine, so it rebuilds fast while kernels change). With
// FERRY_TRACE_DIR set, the forward pass also dumps its intermediate tensors
// (local_engine/kernels/trace.h) for tools/llamacpp/trace_compare.py.
//
//   ferry_engine_probe MODEL IDS [N_GEN] [THREADS]
//   ferry_engine_probe MODEL bench P N [THREADS] [REPS]
//
// Prints the greedy continuation (N_GEN tokens after the prompt, prompt as one batch, then one
// token per forward) and the top 5 next-token log-probabilities after the prompt. `bench` times
// a P-token random prompt (one batch) and N decode steps from an empty cache, best of REPS,
// the way `ferry engine bench` does, for quick kernel iterations without relinking the gateway.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "local_engine/engine.h"
#include "local_engine/gguf_source.h"

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

}  // namespace

int main(int argc, char** argv) {
  using namespace ferry;
  if (argc < 3) {
    std::fprintf(stderr, "usage: ferry_engine_probe MODEL IDS [N_GEN] [THREADS]\n");
    return 2;
  }
  if (std::string(argv[2]) == "bench") return run_bench(argc, argv);
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
