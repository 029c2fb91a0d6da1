// Benchmark support: an Engine loaded from a GGUF file (batch-invariant, as the local backend
// runs it), exiting with the error message when the file does not load; seeded random prompts.
// Bench binaries only.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "local_engine/engine.h"
#include "local_engine/gguf_source.h"

namespace ferry::bench {

// n token ids drawn uniformly from [0, n_vocab) by a seeded generator (the same on every run).
inline std::vector<engine::TokenId> random_tokens(int64_t n, int64_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<engine::TokenId> pick(0, static_cast<engine::TokenId>(n_vocab - 1));
  std::vector<engine::TokenId> out(static_cast<size_t>(n));
  for (auto& t : out) t = pick(rng);
  return out;
}

inline std::unique_ptr<engine::Engine> load_engine_or_exit(const std::string& path, int threads,
                                                           int64_t n_ctx) {
  auto src = engine::GgufSource::open(path);
  if (!src) {
    std::fprintf(stderr, "%s\n", src.error().message.c_str());
    std::exit(1);
  }
  auto model = engine::Model::load(src.value());
  if (!model) {
    std::fprintf(stderr, "%s\n", model.error().message.c_str());
    std::exit(1);
  }
  return std::make_unique<engine::Engine>(
      std::move(model).value(), engine::EngineOptions{threads, n_ctx, /*batch_invariant=*/true});
}

}  // namespace ferry::bench
