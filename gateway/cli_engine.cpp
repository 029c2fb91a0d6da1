// ferry engine subcommands: `generate` (stream a completion from a local GGUF model) and
// `bench` (prompt-processing and generation tokens/s, like llama-bench).
// Single-threaded CLI glue; the engine uses its own compute pool.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "gateway/cli_commands.h"
#include "local_engine/engine.h"
#include "local_engine/generate.h"
#include "local_engine/gguf_source.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferry::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt;
  std::string prompt_ids;
  bool chat = false;
  int64_t max_tokens = 128;
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  uint64_t seed = 0;
  int threads = 0;
  int64_t n_ctx = 0;
  bool ids = false;
  bool ignore_eos = false;
  int logprobs = 0;
  std::vector<std::string> stop;
};

struct BenchArgs {
  std::string model;
  int threads = 0;
  int64_t n_prompt = 512;
  int64_t n_gen = 128;
  int64_t n_batch = 512;
  int reps = 1;
};

// Resident set size of this process in bytes (0 when /proc is unavailable).
int64_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

Result<std::unique_ptr<engine::Engine>> open_engine(const std::string& path, int threads,
                                                    int64_t n_ctx,
                                                    std::shared_ptr<engine::GgufSource>* source) {
  auto src = engine::GgufSource::open(path);
  if (!src) return std::move(src).error();
  *source = src.value();
  auto model = engine::Model::load(src.value());
  if (!model) return std::move(model).error();
  return std::make_unique<engine::Engine>(std::move(model).value(),
                                          engine::EngineOptions{threads, n_ctx});
}

Result<std::vector<engine::TokenId>> parse_ids(const std::string& text) {
  std::vector<engine::TokenId> ids;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) {
    std::istringstream words(item);
    std::string word;
    while (words >> word) {
      try {
        ids.push_back(static_cast<engine::TokenId>(std::stol(word)));
      } catch (const std::exception&) {
        return Error::make(ErrorCode::kInvalidRequest, "not a token id: '" + word + "'");
      }
    }
  }
  return ids;
}

// Prints the next-token log-probabilities after the prompt, the `logprobs` likeliest (for
// comparisons with other engines).
int print_logprobs(engine::Engine& e, const std::vector<engine::TokenId>& prompt, int logprobs) {
  if (auto s = e.kv().seq_add(0); !s) return 1;
  std::vector<engine::BatchEntry> batch;
  for (size_t i = 0; i < prompt.size(); ++i) {
    batch.push_back({0, static_cast<int64_t>(i), prompt[i], i + 1 == prompt.size()});
  }
  std::vector<float> logits;
  if (auto s = e.forward(batch, logits); !s) {
    std::cerr << "ferry engine generate: " << s.error().message << "\n";
    return 1;
  }
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max_logit));
  const double log_sum = std::log(sum) + max_logit;
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  const auto n = std::min<size_t>(static_cast<size_t>(logprobs), order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<ptrdiff_t>(n), order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  for (size_t i = 0; i < n; ++i) {
    std::printf("%d %.6f\n", order[i], static_cast<double>(logits[order[i]]) - log_sum);
  }
  return 0;
}

// Appends the tokens of the text prompt (--prompt, through the chat template with --chat) to
// `prompt`. Returns the exit code: 0, or 1 after printing why.
int encode_prompt(const GenerateArgs& args, const std::shared_ptr<const tokenizer::Tokenizer>& tok,
                  std::vector<engine::TokenId>& prompt) {
  std::string text = args.prompt;
  auto specials = tokenizer::Specials::kAsText;
  if (args.chat) {  // the model's own chat template, as the server renders it
    auto chat = tokenizer::ChatFormatter::create(tok);
    auto rendered = chat ? chat.value()->render(nlohmann::ordered_json{
                               {"messages", {{{"role", "user"}, {"content", args.prompt}}}}})
                         : Result<std::string>(chat.error());
    if (!rendered) {
      std::cerr << "ferry engine generate: --chat: " << rendered.error().message << "\n";
      return 1;
    }
    text = std::move(rendered).value();
    specials = tokenizer::Specials::kParse;
  }
  const std::vector<tokenizer::TokenId> ids = tok->encode(text, specials);
  const auto bos = tok->bos_id();
  if (tok->add_bos() && bos && (ids.empty() || ids.front() != *bos)) {
    prompt.push_back(static_cast<engine::TokenId>(*bos));
  }
  for (tokenizer::TokenId id : ids) prompt.push_back(static_cast<engine::TokenId>(id));
  return 0;
}

int run_generate(const GenerateArgs& args) {
  std::shared_ptr<engine::GgufSource> source;
  auto eng = open_engine(args.model, args.threads, args.n_ctx, &source);
  if (!eng) {
    std::cerr << "ferry engine generate: " << eng.error().message << "\n";
    return 1;
  }
  engine::Engine& e = *eng.value();
  std::shared_ptr<const tokenizer::Tokenizer> tok;
  std::vector<engine::TokenId> prompt;
  if (!args.prompt_ids.empty()) {
    auto ids = parse_ids(args.prompt_ids);
    if (!ids) {
      std::cerr << "ferry engine generate: " << ids.error().message << "\n";
      return 2;
    }
    prompt = std::move(ids).value();
  }
  const bool need_text = !args.ids && args.logprobs <= 0;
  if (args.prompt_ids.empty() || need_text) {
    auto loaded = tokenizer::load_tokenizer(args.model);
    if (!loaded) {
      std::cerr << "ferry engine generate: tokenizer: " << loaded.error().message << "\n";
      return 1;
    }
    tok = loaded.value();
  }
  if (args.prompt_ids.empty()) {
    if (int code = encode_prompt(args, tok, prompt); code != 0) return code;
  }

  if (args.logprobs > 0) return print_logprobs(e, prompt, args.logprobs);

  engine::GenerateOptions options;
  options.max_tokens = args.max_tokens;
  options.sampling.temperature = args.temperature;
  options.sampling.top_k = args.top_k;
  options.sampling.top_p = args.top_p;
  options.sampling.min_p = args.min_p;
  options.sampling.repetition_penalty = args.repeat_penalty;
  options.sampling.seed = args.seed;
  options.stop = args.stop;
  if (!args.ignore_eos) options.eog_tokens = engine::eog_tokens_from_source(*source);
  if (auto s = e.kv().seq_add(0); !s) return 1;

  engine::TokenPieceFn piece;
  if (tok) {
    piece = [&tok](engine::TokenId id) {
      return tok->token_bytes(static_cast<tokenizer::TokenId>(id));
    };
  }
  bool first = true;
  auto on_token = [&](engine::TokenId id, std::string_view text) {
    if (args.ids) {
      if (id >= 0) std::printf(first ? "%d" : " %d", id);
      first = false;
    } else {
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
    std::fflush(stdout);
    return true;
  };
  auto result = engine::generate(e, 0, prompt, options, piece, on_token);
  std::printf("\n");
  if (!result) {
    std::cerr << "ferry engine generate: " << result.error().message << "\n";
    return 1;
  }
  const auto& r = result.value();
  std::fprintf(stderr,
               "[%lld prompt tokens in %.3f s (%.1f t/s); %zu generated in %.3f s (%.1f t/s); "
               "finish: %s]\n",
               static_cast<long long>(r.n_prompt), r.prefill_seconds,
               static_cast<double>(r.n_prompt) / std::max(r.prefill_seconds, 1e-9), r.tokens.size(),
               r.decode_seconds,
               static_cast<double>(r.tokens.size()) / std::max(r.decode_seconds, 1e-9),
               std::string(engine::finish_reason_name(r.finish)).c_str());
  return 0;
}

int run_bench(const BenchArgs& args) {
  std::shared_ptr<engine::GgufSource> source;
  auto eng = open_engine(args.model, args.threads, args.n_prompt + args.n_gen + 1, &source);
  if (!eng) {
    std::cerr << "ferry engine bench: " << eng.error().message << "\n";
    return 1;
  }
  engine::Engine& e = *eng.value();
  const auto& c = e.config();
  std::mt19937 rng(1234);
  std::uniform_int_distribution<engine::TokenId> pick(0,
                                                      static_cast<engine::TokenId>(c.n_vocab - 1));
  std::vector<float> logits;
  std::vector<engine::BatchEntry> batch;
  double pp_best = 0, tg_best = 0;
  for (int rep = 0; rep < std::max(1, args.reps); ++rep) {
    e.kv().seq_remove(0);
    (void)e.kv().seq_add(0);
    if (args.n_prompt > 0) {
      const auto start = std::chrono::steady_clock::now();
      for (int64_t begin = 0; begin < args.n_prompt; begin += args.n_batch) {
        batch.clear();
        const int64_t end = std::min(args.n_prompt, begin + args.n_batch);
        for (int64_t i = begin; i < end; ++i) batch.push_back({0, i, pick(rng), i + 1 == end});
        if (auto s = e.forward(batch, logits); !s) {
          std::cerr << "ferry engine bench: " << s.error().message << "\n";
          return 1;
        }
      }
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      pp_best = std::max(pp_best, static_cast<double>(args.n_prompt) / secs);
    }
    e.kv().seq_remove(0);
    (void)e.kv().seq_add(0);
    if (args.n_gen > 0) {
      const auto start = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < args.n_gen; ++i) {
        const engine::BatchEntry entry{0, i, pick(rng), true};
        if (auto s = e.forward(std::span<const engine::BatchEntry>(&entry, 1), logits); !s) {
          std::cerr << "ferry engine bench: " << s.error().message << "\n";
          return 1;
        }
      }
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      tg_best = std::max(tg_best, static_cast<double>(args.n_gen) / secs);
    }
  }
  std::printf("model: %s (%s, %lld layers, embd %lld, vocab %lld), file %.1f MiB\n",
              args.model.c_str(), c.arch_name.c_str(), static_cast<long long>(c.n_layer),
              static_cast<long long>(c.n_embd), static_cast<long long>(c.n_vocab),
              static_cast<double>(source->file().file_size()) / 1048576.0);
  std::printf("threads: %d\n", e.n_threads());
  if (args.n_prompt > 0)
    std::printf("pp%lld: %.2f t/s\n", static_cast<long long>(args.n_prompt), pp_best);
  if (args.n_gen > 0)
    std::printf("tg%lld: %.2f t/s\n", static_cast<long long>(args.n_gen), tg_best);
  std::printf("rss: %.1f MiB (kv cache %.1f MiB)\n",
              static_cast<double>(resident_bytes()) / 1048576.0,
              static_cast<double>(e.kv().memory_bytes()) / 1048576.0);
  return 0;
}

}  // namespace

void add_engine_commands(CLI::App& app, int& exit_code) {
  auto* engine_cmd = app.add_subcommand("engine", "Run a local GGUF model on the CPU");
  engine_cmd->require_subcommand(1);

  auto gen_args = std::make_shared<GenerateArgs>();
  auto* gen = engine_cmd->add_subcommand("generate", "Generate text from a prompt");
  gen->add_option("--model", gen_args->model, "GGUF model file")->required();
  gen->add_option("--prompt", gen_args->prompt, "Prompt text");
  gen->add_option("--prompt-ids", gen_args->prompt_ids, "Prompt as token ids (\"1,2,3\")");
  gen->add_flag("--chat", gen_args->chat, "Wrap the prompt in the model's chat format");
  gen->add_option("--max-tokens,-n", gen_args->max_tokens, "Tokens to generate at most");
  gen->add_option("--temperature", gen_args->temperature, "0: greedy");
  gen->add_option("--top-k", gen_args->top_k);
  gen->add_option("--top-p", gen_args->top_p);
  gen->add_option("--min-p", gen_args->min_p);
  gen->add_option("--repeat-penalty", gen_args->repeat_penalty);
  gen->add_option("--seed", gen_args->seed);
  gen->add_option("--threads,-t", gen_args->threads, "Compute threads (0: all cores)");
  gen->add_option("--ctx", gen_args->n_ctx, "Context length (0: the model's, at most 8192)");
  gen->add_option("--stop", gen_args->stop, "Stop string (repeatable)");
  gen->add_flag("--ids", gen_args->ids, "Print generated token ids instead of text");
  gen->add_flag("--ignore-eos", gen_args->ignore_eos, "Do not stop at end-of-generation tokens");
  gen->add_option("--logprobs", gen_args->logprobs,
                  "Print the N most likely next tokens after the prompt with log-probabilities");
  gen->callback([gen_args, &exit_code] {
    if (gen_args->prompt.empty() && gen_args->prompt_ids.empty()) {
      std::cerr << "ferry engine generate: give --prompt or --prompt-ids\n";
      exit_code = 2;
      return;
    }
    exit_code = run_generate(*gen_args);
  });

  auto bench_args = std::make_shared<BenchArgs>();
  auto* bench = engine_cmd->add_subcommand("bench", "Prompt processing and generation speed");
  bench->add_option("--model", bench_args->model, "GGUF model file")->required();
  bench->add_option("--threads,-t", bench_args->threads, "Compute threads (0: all cores)");
  bench->add_option("-p", bench_args->n_prompt, "Prompt tokens");
  bench->add_option("-n", bench_args->n_gen, "Generated tokens");
  bench->add_option("-b", bench_args->n_batch, "Prompt tokens per forward");
  bench->add_option("-r", bench_args->reps, "Repetitions (best is reported)");
  bench->callback([bench_args, &exit_code] { exit_code = run_bench(*bench_args); });
}

}  // namespace ferry::cli
