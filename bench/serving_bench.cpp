// Serving benchmark of the local engine's scheduler on a synthesized SmolLM2-360M-shaped model:
// aggregate generation tokens/s with 1, 4, 8 and 16 concurrent greedy streams (continuous
// batching), and time to first token of a ~1k-token prompt whose prefix is cached vs uncached
// (--ttft-prompt 0: not measured). One stream's decode is also given as a share of the
// memory-bandwidth bound (the bytes of the matrices a token reads / the machine's read
// bandwidth with the same threads), in --reps rounds of bandwidth, one stream, bandwidth: the
// bandwidth of a shared machine moves by a third within a minute, so each round's stream is
// set against the better of the two readings around it.
//   ferry_serving_bench [--model FILE | --save FILE] [--type Q8_0] [--threads 2] [--gen 64]
//                       [--prompt 32] [--streams 1,4,8,16] [--ttft-prompt 1024] [--reps 3]
//                       [--prefill 512] [--speculative 0]
// --speculative 1: prompt-lookup drafts as served by default (tokens counted are those kept);
// off by default here, since on random weights what is accepted says nothing (the speculative
// bench measures drafting on a trained model).
// --prefill N: prompt tokens/s of one N-token prompt from an empty cache through the scheduler
// (its own prefill chunks), best of the reps: the serving path's counterpart of llama-bench's
// ppN (0: not measured).
// Without --model, the model is synthesized (random weights, real shapes) into a temp file.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_engine.h"
#include "bench/read_bandwidth.h"
#include "local_engine/gguf_source.h"
#include "local_engine/scheduler.h"
#include "model_tools/model_tools.h"

namespace {

using namespace ferry;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string model;
  std::string save;
  std::string type = "Q8_0";
  int threads = 2;
  int64_t gen = 64;
  int64_t prompt = 32;
  std::vector<int64_t> streams = {1, 4, 8, 16};
  int64_t ttft_prompt = 1024;
  int64_t prefill = 512;
  bool speculative = false;
  int reps = 3;
};

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::unique_ptr<engine::Scheduler> make_scheduler(const Args& a, int64_t n_ctx,
                                                  engine::SchedulerOptions options) {
  options.speculative.enabled = a.speculative;
  auto eng = bench::load_engine_or_exit(a.model, a.threads, n_ctx);
  return std::make_unique<engine::Scheduler>(
      std::move(eng), std::move(options), engine::TokenPieceFn(), std::vector<engine::TokenId>());
}

// Waits for a set of requests to finish.
struct Latch {
  std::mutex mu;
  std::condition_variable cv;
  int64_t left = 0;
  std::vector<engine::Completion> done;
  void wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return left == 0; });
  }
};

engine::GenerationRequest request(std::vector<engine::TokenId> prompt, int64_t max_tokens,
                                  Latch& latch) {
  engine::GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.stop_at_eog = false;
  r.on_done = [&latch](const engine::Completion& c) {
    std::lock_guard lock(latch.mu);
    latch.done.push_back(c);
    if (--latch.left == 0) latch.cv.notify_all();
  };
  return r;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct StreamResult {
  double decode_tps = 0;  // tokens / second over decode-only steps (weights read once each)
  int64_t drafted = 0, accepted = 0;  // drafted tokens verified, and kept (--speculative 1)
  // Tokens per CPU-second of the process times the thread count: the decode rate the threads
  // would reach if they had the cores to themselves (robust to other load on the machine).
  double cpu_tps = 0;
  double end_to_end_tps = 0;  // generated tokens / wall time, prefill included
  double step_ms = 0;         // mean decode-only step
};

StreamResult run_streams(const Args& a, int64_t n_streams) {
  std::mutex mu;
  double decode_seconds = 0, decode_cpu = 0, last_cpu = -1;
  int64_t decode_tokens = 0, decode_steps = 0, drafted = 0, accepted = 0;
  engine::SchedulerOptions options;
  options.max_sequences = std::max<int64_t>(16, n_streams);
  options.prefix_cache = false;
  options.on_step = [&](const engine::StepStats& s) {
    const double cpu = process_cpu_seconds();
    std::lock_guard lock(mu);
    const double cpu_delta = last_cpu < 0 ? -1 : cpu - last_cpu;
    last_cpu = cpu;
    if (s.prefill_tokens > 0 || s.decode_tokens == 0 || cpu_delta < 0) return;
    decode_cpu += cpu_delta;
    decode_seconds += s.seconds;
    decode_tokens += s.decode_tokens + s.accepted_tokens;
    drafted += s.draft_tokens;
    accepted += s.accepted_tokens;
    ++decode_steps;
  };
  auto sched = make_scheduler(a, a.prompt + a.gen + 16, options);
  const int64_t n_vocab = sched->model_config().n_vocab;
  Latch latch;
  latch.left = n_streams;
  const auto start = Clock::now();
  for (int64_t i = 0; i < n_streams; ++i) {
    auto id = sched->submit(request(
        bench::random_tokens(a.prompt, n_vocab, 1000 + static_cast<uint32_t>(i)), a.gen, latch));
    if (!id) {
      std::fprintf(stderr, "submit: %s\n", id.error().message.c_str());
      std::exit(1);
    }
  }
  latch.wait();
  const double wall = seconds_since(start);
  StreamResult r;
  std::lock_guard lock(mu);
  r.decode_tps = decode_seconds > 0 ? static_cast<double>(decode_tokens) / decode_seconds : 0;
  r.end_to_end_tps = static_cast<double>(n_streams * a.gen) / wall;
  r.cpu_tps = decode_cpu > 0 ? static_cast<double>(decode_tokens) * a.threads / decode_cpu : 0;
  r.drafted = drafted;
  r.accepted = accepted;
  r.step_ms = decode_steps > 0 ? 1000.0 * decode_seconds / static_cast<double>(decode_steps) : 0;
  return r;
}

// Prompt tokens per second of the forward passes of one `n`-token prompt, empty cache.
double run_prefill(const Args& a, int64_t n, uint32_t seed) {
  std::mutex mu;
  double seconds = 0;
  int64_t tokens = 0;
  engine::SchedulerOptions options;
  options.prefix_cache = false;
  options.on_step = [&](const engine::StepStats& s) {
    std::lock_guard lock(mu);
    if (s.prefill_tokens == 0) return;
    seconds += s.seconds;
    tokens += s.prefill_tokens;
  };
  auto sched = make_scheduler(a, n + 16, options);
  Latch latch;
  latch.left = 1;
  if (!sched->submit(
          request(bench::random_tokens(n, sched->model_config().n_vocab, seed), 1, latch))) {
    std::exit(1);
  }
  latch.wait();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the last step's on_step
  std::lock_guard lock(mu);
  return seconds > 0 ? static_cast<double>(tokens) / seconds : 0;
}

constexpr int64_t kQuestion = 24;  // tokens of run_ttft's question after the shared prefix

// TTFT of a prompt of `ttft_prompt` tokens: a shared prefix plus a 24-token question, first with
// an empty cache, then (another question) with the prefix cached.
std::pair<double, double> run_ttft(const Args& a, uint32_t seed, int64_t* cached_tokens,
                                   double forward_ms[2]) {
  engine::SchedulerOptions options;
  // Forward passes (step end, ms). The requests run one at a time and end at their first
  // token, so the steps that end after a submit are that request's; the rest of its TTFT is
  // scheduling, KV allocation and copies.
  std::mutex mu;
  std::vector<std::pair<Clock::time_point, double>> forwards;
  options.on_step = [&](const engine::StepStats& s) {
    const auto ended = Clock::now();
    std::lock_guard lock(mu);
    forwards.emplace_back(ended, s.seconds * 1000.0);
  };
  auto sched = make_scheduler(a, a.ttft_prompt + 64, options);
  const int64_t n_vocab = sched->model_config().n_vocab;
  const int64_t question = kQuestion;
  const auto prefix = bench::random_tokens(a.ttft_prompt - question, n_vocab, seed);
  double ttft[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    auto prompt = prefix;
    const auto q = bench::random_tokens(question, n_vocab, seed * 7 + static_cast<uint32_t>(i) + 1);
    prompt.insert(prompt.end(), q.begin(), q.end());
    Latch latch;
    latch.left = 1;
    const auto submitted = Clock::now();
    if (!sched->submit(request(std::move(prompt), 1, latch))) std::exit(1);
    latch.wait();
    ttft[i] = static_cast<double>(latch.done[0].first_token_us) / 1000.0;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the last step's on_step
    std::lock_guard lock(mu);
    for (const auto& [ended, ms] : forwards) {
      if (ended >= submitted) forward_ms[i] += ms;
    }
    if (i == 1) *cached_tokens = latch.done[0].cached_tokens;
  }
  return {ttft[0], ttft[1]};
}

// Bytes a decode step reads from the model's tensors: all of them but the token embedding,
// which is read whole only when it is also the output matrix (no `output.weight`).
uint64_t bytes_read_per_token(const std::string& path) {
  auto src = engine::GgufSource::open(path);
  if (!src) {
    std::fprintf(stderr, "%s\n", src.error().message.c_str());
    std::exit(1);
  }
  uint64_t all = 0, embd = 0;
  bool tied = true;
  for (const auto& t : src.value()->file().tensors()) {
    all += t.n_bytes;
    if (t.name == "token_embd.weight") embd = t.n_bytes;
    if (t.name == "output.weight") tied = false;
  }
  return tied ? all : all - embd;
}

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> out;
  std::string item;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == '\0') {
      if (!item.empty()) out.push_back(std::stoll(item));
      item.clear();
      if (*p == '\0') break;
    } else {
      item += *p;
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--help" || k == "-h") {
      std::printf(
          "ferry_serving_bench [--model F.gguf | --save F.gguf] [--type Q8_0] [--threads N]\n"
          "  [--gen N] [--prompt N] [--streams 1,4,8,16] [--ttft-prompt N|0] [--speculative 0|1]\n"
          "  [--prefill N|0] [--reps N]\n"
          "Without --model, synthesizes the smollm2-360m shape (kept with --save).\n");
      return 0;
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "options come in pairs (--help lists them)\n");
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--model")
      a.model = v;
    else if (k == "--save")
      a.save = v;
    else if (k == "--type")
      a.type = v;
    else if (k == "--threads")
      a.threads = std::atoi(v);
    else if (k == "--gen")
      a.gen = std::atoll(v);
    else if (k == "--prompt")
      a.prompt = std::atoll(v);
    else if (k == "--streams")
      a.streams = parse_list(v);
    else if (k == "--ttft-prompt")
      a.ttft_prompt = std::atoll(v);
    else if (k == "--speculative")
      a.speculative = std::atoi(v) != 0;
    else if (k == "--prefill")
      a.prefill = std::atoll(v);
    else if (k == "--reps")
      a.reps = std::atoi(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  std::filesystem::path temp;
  if (a.model.empty()) {
    model_tools::SynthOptions o;
    o.type = a.type;
    model_tools::apply_synth_preset("smollm2-360m", o);
    o.seed = 1;
    a.model = a.save.empty()
                  ? (temp = std::filesystem::temp_directory_path() /
                            ("ferry-serving-bench-" + std::to_string(::getpid()) + ".gguf"))
                        .string()
                  : a.save;
    const auto t0 = Clock::now();
    if (auto s = model_tools::write_synth_model(o, a.model); !s) {
      std::fprintf(stderr, "synth: %s\n", s.error().message.c_str());
      return 1;
    }
    std::printf("synthesized smollm2-360m %s in %.1f s -> %s\n", a.type.c_str(), seconds_since(t0),
                a.model.c_str());
  }
  if (a.ttft_prompt != 0 && a.ttft_prompt <= kQuestion) {
    std::fprintf(stderr, "--ttft-prompt must be 0 (not measured) or more than %lld tokens\n",
                 static_cast<long long>(kQuestion));
    return 2;
  }
  if (a.threads < 1 || a.gen < 1 || a.prompt < 1 || a.streams.empty() || a.prefill < 0) {
    std::fprintf(stderr, "--threads, --gen and --prompt must be positive, --streams not empty\n");
    return 2;
  }
  const uint64_t token_bytes = bytes_read_per_token(a.model);
  std::printf("model %s, %d threads, prompts of %lld tokens, %lld generated per stream\n",
              a.model.c_str(), a.threads, static_cast<long long>(a.prompt),
              static_cast<long long>(a.gen));
  std::printf("%8s %14s %12s %16s %14s\n", "streams", "decode tok/s", "step ms", "end-to-end tok/s",
              "CPU-norm tok/s");
  double base = 0, eight = 0, cpu_base = 0, cpu_eight = 0;
  for (const int64_t n : a.streams) {
    const StreamResult r = run_streams(a, n);
    std::printf("%8lld %14.1f %12.1f %16.1f %14.1f", static_cast<long long>(n), r.decode_tps,
                r.step_ms, r.end_to_end_tps, r.cpu_tps);
    if (a.speculative) {
      std::printf("  drafted %lld, kept %lld", static_cast<long long>(r.drafted),
                  static_cast<long long>(r.accepted));
    }
    std::printf("\n");
    std::fflush(stdout);
    if (n == 1) base = r.decode_tps, cpu_base = r.cpu_tps;
    if (n == 8) eight = r.decode_tps, cpu_eight = r.cpu_tps;
  }
  if (base > 0 && eight > 0) {
    std::printf("ratio 8 streams / 1 stream: decode %.2fx, CPU-normalized %.2fx\n", eight / base,
                cpu_eight / cpu_base);
  }
  std::printf("one stream against the read bandwidth (%d threads; %.1f MB read a token):\n",
              a.threads, static_cast<double>(token_bytes) / 1e6);
  std::vector<double> shares;
  double bw = bench::read_bandwidth_gbs(a.threads);
  for (int rep = 0; rep < std::max(1, a.reps); ++rep) {
    const double tps = run_streams(a, 1).decode_tps;
    const double bw_next = bench::read_bandwidth_gbs(a.threads);
    const double bound = std::max(bw, bw_next) * 1e9 / static_cast<double>(token_bytes);
    shares.push_back(tps / bound);
    std::printf(
        "  bandwidth %.2f / %.2f GB/s -> bound %.1f tok/s; one stream %.1f tok/s = %.0f %%\n", bw,
        bw_next, bound, tps, 100.0 * tps / bound);
    std::fflush(stdout);
    bw = bw_next;
  }
  std::sort(shares.begin(), shares.end());
  std::printf("one stream / bound: median %.0f %% (min %.0f %%, max %.0f %%)\n",
              100.0 * shares[shares.size() / 2], 100.0 * shares.front(), 100.0 * shares.back());

  if (a.prefill > 0) {
    double best = 0;
    for (int rep = 0; rep < std::max(1, a.reps); ++rep)
      best = std::max(best, run_prefill(a, a.prefill, 500 + static_cast<uint32_t>(rep)));
    std::printf("prefill, one %lld-token prompt: %.1f tok/s (best of %d)\n",
                static_cast<long long>(a.prefill), best, std::max(1, a.reps));
    std::fflush(stdout);
  }

  std::vector<double> ratios;
  for (int rep = 0; a.ttft_prompt > 0 && rep < a.reps; ++rep) {
    int64_t cached = 0;
    double forward_ms[2] = {0, 0};
    const auto [uncached_ms, cached_ms] =
        run_ttft(a, 77 + static_cast<uint32_t>(rep), &cached, forward_ms);
    std::printf(
        "TTFT %lld-token prompt: uncached %.1f ms (forward %.1f), prefix cached (%lld tokens) "
        "%.1f ms (forward %.1f), ratio %.1fx\n",
        static_cast<long long>(a.ttft_prompt), uncached_ms, forward_ms[0],
        static_cast<long long>(cached), cached_ms, forward_ms[1], uncached_ms / cached_ms);
    std::fflush(stdout);
    ratios.push_back(uncached_ms / cached_ms);
  }
  if (!ratios.empty()) {
    std::sort(ratios.begin(), ratios.end());
    std::printf("TTFT ratio uncached / cached: median %.1fx (min %.1fx, max %.1fx)\n",
                ratios[ratios.size() / 2], ratios.front(), ratios.back());
  }
  if (!temp.empty()) std::filesystem::remove(temp);
  return 0;
}
