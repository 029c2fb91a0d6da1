// constrain_decode_bench: decode throughput of the local engine's scheduler with and without a
// JSON Schema constraint, same model, same threads, 1 and 8 streams (issue 15: constrained >= 95%
// of unconstrained). Tokens per CPU-second of the process over decode-only steps (sampling and
// mask computation included, robust to other load on the machine), times the thread count;
// the ratio constrained / unconstrained is taken within one run, per pair of back-to-back runs
// (their order alternating from pair to pair) and of the bests. The grammar's state masks are
// prepared before the runs, as the served path does. Then the mask per step: each constrained
// stream's tokens are replayed through a fresh Matcher over a freshly compiled and prepared
// grammar with every fill_mask timed on one thread, p50/p99 set beside the unconstrained run's
// wall time per decode step (forward + sampling). Speculative decoding is off unless
// --speculative 1.
//   constrain_decode_bench [--model FILE] [--preset smollm2-360m|qwen2.5-0.5b] [--threads 2]
//                          [--gen 64] [--reps 3] [--speculative 0|1]
// Without --model, the model is synthesized (random weights, real shapes, its real vocabulary);
// preset qwen2.5-0.5b is Qwen2.5-0.5B's shape with the 151,936-token Qwen-sized vocabulary of
// the constraint tests (tests/constrain/test_vocab.h).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "constrain/cache.h"
#include "constrain/matcher.h"
#include "constrain/vocabulary.h"
#include "local_engine/gguf_source.h"
#include "local_engine/scheduler.h"
#include "model_tools/model_tools.h"
#include "tests/constrain/test_vocab.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace ferry;

// Long enough that every stream runs its whole --gen under the constraint, with the schema
// states of a realistic answer (objects, bounded integers, enums, short strings).
constexpr const char* kSchema =
    R"({"type":"array","minItems":30,"maxItems":40,"items":{"type":"object","properties":{)"
    R"("name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":150},)"
    R"("kind":{"enum":["alpha","beta","gamma"]}},"required":["name","age","kind"],)"
    R"("additionalProperties":false}})";

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Run {
  double cpu_tps = 0;       // tokens per CPU-second x threads
  int64_t tokens = 0;       // decode tokens counted
  double step_wall_us = 0;  // wall time per decode step (the forward pass and sampling)
  std::vector<std::vector<engine::TokenId>> outputs;  // per stream
};

// --speculative 1: prompt-lookup drafts as served. Off by default: a constrained output of
// random weights repeats its structure (keys, punctuation), so drafts are taken far more often
// than in the unconstrained noise, and the ratio would measure that, not the mask's cost.
bool speculative = false;

Run run(const std::string& path, int threads, int64_t gen, int streams,
        const std::shared_ptr<const constrain::Grammar>& grammar,
        const std::shared_ptr<const constrain::Vocabulary>& vocab) {
  auto src = engine::GgufSource::open(path);
  auto model = engine::Model::load(src.value());
  auto eng = std::make_unique<engine::Engine>(std::move(model).value(),
                                              engine::EngineOptions{threads, 256, true});
  std::mutex mu;
  double cpu = 0, last = -1;
  int64_t tokens = 0, steps = 0;
  std::vector<std::vector<engine::TokenId>> outputs(static_cast<size_t>(streams));
  auto wall_last = std::chrono::steady_clock::now();
  double wall = 0;
  engine::SchedulerOptions options;
  options.max_sequences = 16;
  options.prefix_cache = false;
  options.speculative.enabled = speculative;
  options.on_step = [&](const engine::StepStats& s) {
    const double now = process_cpu_seconds();
    const auto wall_now = std::chrono::steady_clock::now();
    std::lock_guard lock(mu);
    const double delta = last < 0 ? -1 : now - last;
    const double wall_delta = std::chrono::duration<double>(wall_now - wall_last).count();
    last = now;
    wall_last = wall_now;
    if (s.prefill_tokens > 0 || s.decode_tokens == 0 || delta < 0) return;
    cpu += delta;
    tokens += s.decode_tokens;
    wall += wall_delta;
    ++steps;
  };
  engine::Scheduler sched(std::move(eng), options, engine::TokenPieceFn(), {});
  std::condition_variable cv;
  int left = streams;
  for (int k = 0; k < streams; ++k) {
    engine::GenerationRequest r;
    r.prompt = {1, 2, 3, 4, 5, 6, 7, 8};
    r.max_tokens = gen;
    r.stop_at_eog = grammar != nullptr;  // the constraint allows an end only when complete
    r.sampling.temperature = 1.0f;
    r.sampling.seed = static_cast<uint64_t>(k + 1);
    if (grammar) r.sampling.constraint = std::make_shared<constrain::Matcher>(grammar, vocab);
    r.on_token = [&outputs, k](const engine::TokenEvent& ev) {
      outputs[static_cast<size_t>(k)].push_back(ev.token);  // the scheduler thread only
    };
    r.on_done = [&](const engine::Completion&) {
      std::lock_guard lock(mu);
      if (--left == 0) cv.notify_all();
    };
    if (!sched.submit(std::move(r))) std::exit(1);
  }
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return left == 0; });
  return Run{cpu > 0 ? static_cast<double>(tokens) / cpu * threads : 0, tokens,
             steps > 0 ? wall / static_cast<double>(steps) * 1e6 : 0, std::move(outputs)};
}

// Every fill_mask of the replayed outputs, in µs, sorted.
std::vector<double> replay_masks(const std::vector<std::vector<engine::TokenId>>& outputs,
                                 const std::shared_ptr<const constrain::Vocabulary>& vocab) {
  constrain::GrammarCache fresh;
  auto grammar = fresh.json_schema(kSchema);
  constrain::Matcher(grammar->grammar, vocab).prepare_state_masks();  // as the run's
  std::vector<double> us;
  std::vector<uint64_t> mask;
  for (const auto& tokens : outputs) {
    constrain::Matcher m(grammar->grammar, vocab);
    for (const engine::TokenId t : tokens) {
      const auto a = std::chrono::steady_clock::now();
      m.fill_mask(mask);
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
      if (!m.accept_token(static_cast<constrain::TokenId>(t))) break;
    }
  }
  std::sort(us.begin(), us.end());
  return us;
}

double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1,
                         static_cast<size_t>(q * static_cast<double>(sorted.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, preset = "smollm2-360m";
  int threads = 2, reps = 3;
  int64_t gen = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model") path = argv[i + 1];
    if (a == "--preset") preset = argv[i + 1];
    if (a == "--threads") threads = std::stoi(argv[i + 1]);
    if (a == "--gen") gen = std::stoll(argv[i + 1]);
    if (a == "--reps") reps = std::stoi(argv[i + 1]);
    if (a == "--speculative") speculative = std::string(argv[i + 1]) == "1";
  }
  std::filesystem::path tmp;
  if (path.empty()) {
    tmp = std::filesystem::temp_directory_path() /
          ("ferry-constrain-decode-" + std::to_string(::getpid()) + ".gguf");
    model_tools::SynthOptions o;
    if (preset == "qwen2.5-0.5b") {
      o.arch = "qwen2";
      o.n_embd = 896;
      o.n_layer = 24;
      o.n_head = 14;
      o.n_head_kv = 2;
      o.head_dim = 64;
      o.n_ff = 4864;
      o.n_ctx = 4096;
      o.tied_output = true;
      o.vocab_from = constrain::testing::qwen152k_vocab_path();
    } else {
      model_tools::apply_synth_preset(preset, o);
    }
    o.type = "Q8_0";
    if (auto st = model_tools::write_synth_model(o, tmp.string()); !st) return 1;
    path = tmp.string();
  }
  auto tok = tokenizer::load_tokenizer(path);
  if (!tok) return 1;
  auto src = engine::GgufSource::open(path);
  const auto eog = engine::eog_tokens_from_source(*src.value());
  auto vocab = constrain::Vocabulary::build(
      *tok.value(), std::vector<constrain::TokenId>(eog.begin(), eog.end()));
  constrain::GrammarCache cache;
  auto grammar = cache.json_schema(kSchema);
  if (!grammar) {
    std::fprintf(stderr, "%s\n", grammar.error().message.c_str());
    return 1;
  }
  // Every state mask computed up front, as the served path does once per grammar.
  constrain::Matcher(grammar->grammar, vocab).prepare_state_masks();
  std::printf("model %s, vocabulary %zu, threads %d, gen %lld, best of %d, speculative %s\n",
              path.c_str(), vocab->size(), threads, static_cast<long long>(gen), reps,
              speculative ? "on" : "off");
  for (int streams : {1, 8}) {
    double best_free = 0, best_constrained = 0, step_us = 0;
    std::vector<std::vector<engine::TokenId>> outputs;
    std::vector<double> ratios;  // per pair: the two runs back to back, in alternating order
    for (int r = 0; r < reps; ++r) {
      Run free, constrained;
      for (int k = 0; k < 2; ++k) {
        if ((k == 0) == (r % 2 == 0)) {
          free = run(path, threads, gen, streams, nullptr, vocab);
        } else {
          constrained = run(path, threads, gen, streams, grammar->grammar, vocab);
        }
      }
      if (free.cpu_tps > best_free) step_us = free.step_wall_us;
      best_free = std::max(best_free, free.cpu_tps);
      best_constrained = std::max(best_constrained, constrained.cpu_tps);
      ratios.push_back(free.cpu_tps > 0 ? constrained.cpu_tps / free.cpu_tps : 0);
      std::printf(
          "  %d stream(s) pair %d: unconstrained %.1f tok/s, constrained %.1f tok/s, "
          "ratio %.1f%%\n",
          streams, r + 1, free.cpu_tps, constrained.cpu_tps, 100.0 * ratios.back());
      std::fflush(stdout);
      outputs = std::move(constrained.outputs);
    }
    std::sort(ratios.begin(), ratios.end());
    std::printf(
        "%d stream(s): unconstrained %.1f tok/s, constrained %.1f tok/s (best of %d), "
        "ratio of bests %.1f%%, median pair ratio %.1f%% (min %.1f%%, max %.1f%%)\n",
        streams, best_free, best_constrained, reps, 100.0 * best_constrained / best_free,
        100.0 * ratios[ratios.size() / 2], 100.0 * ratios.front(), 100.0 * ratios.back());
    const std::vector<double> masks = replay_masks(outputs, vocab);
    std::printf(
        "  mask per step (%zu steps): p50 %.1f us, p99 %.1f us, max %.1f us; "
        "unconstrained decode step %.0f us (p99 / step %.2f%%)\n",
        masks.size(), quantile(masks, 0.5), quantile(masks, 0.99),
        masks.empty() ? 0.0 : masks.back(), step_us,
        step_us > 0 ? 100.0 * quantile(masks, 0.99) / step_us : 0.0);
  }
  if (!tmp.empty()) std::filesystem::remove(tmp);
  return 0;
}
