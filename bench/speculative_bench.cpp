// Speculative decoding by prompt lookup (local_engine/speculative.h) against plain decoding,
// through the serving scheduler on the same model in the same run: two schedulers (drafts on,
// drafts off) take the same requests one at a time, in alternating order (on/off, then
// off/on), and the decode rate of each (tokens after the first / time after the first) is
// compared per workload. Outputs are checked to be identical. Then the cost of verifying
// drafts: one forward pass of a sequence's next token with k drafted tokens against one token.
//   ferry_speculative_bench [--model models/ferry-demo-1m.gguf] [--text tests/data/kjv_heldout.txt]
//                           [--threads 2] [--reps 5] [--gen 96] [--max-draft 8] [--min-match 2]
//                           [--workloads edit,quote,fresh,fresh-sampled,random-sampled]
//                           [--dump FILE]
// --dump appends each run's prompt and output (the tokens of decoding without drafts) to FILE,
// what bench/speculative_sim.py replays drafting policies over.
// A model without a tokenizer the bench can load (e.g. `ferry model synth`) runs the token
// workloads only (random-repeat, random-sampled) and the verify cost.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_engine.h"
#include "local_engine/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace ferry;
using Clock = std::chrono::steady_clock;
using engine::TokenId;

struct Args {
  std::string model = "models/ferry-demo-1m.gguf";
  std::string text = "tests/data/kjv_heldout.txt";
  int threads = 2;
  int reps = 5;
  int64_t gen = 96;
  int64_t max_draft = 8;
  int64_t min_match = 2;
  std::string workloads = "edit,quote,fresh,fresh-sampled,random-sampled";
  std::string
      dump;  // appends "workload P prompt... O output..." a run, for bench/speculative_sim.py
};

struct Workload {
  std::string name;
  std::vector<std::vector<TokenId>> prompts;
  float temperature = 0;  // 0: greedy
};

struct Run {
  std::vector<TokenId> tokens;
  engine::Completion done;
};

Run run_one(engine::Scheduler& s, const std::vector<TokenId>& prompt, int64_t max_tokens,
            float temperature, uint64_t seed) {
  std::mutex mu;
  std::condition_variable cv;
  Run out;
  bool finished = false;
  engine::GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.on_token = [&](const engine::TokenEvent& ev) {
    if (ev.token >= 0) out.tokens.push_back(ev.token);
  };
  r.on_done = [&](const engine::Completion& c) {
    std::lock_guard lock(mu);
    out.done = c;
    finished = true;
    cv.notify_all();
  };
  if (auto id = s.submit(std::move(r)); !id) {
    std::fprintf(stderr, "submit: %s\n", id.error().message.c_str());
    std::exit(1);
  }
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return finished; });
  return out;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// CPU time of the scheduler thread spent on decode steps (from the end of one step to the end
// of the next: building the batch, the forward pass, sampling, the loop's bookkeeping), and the
// tokens those steps produced. Written on the scheduler thread, read between requests.
struct CpuMeter {
  std::mutex mu;
  double last = -1;
  double seconds = 0;
  int64_t tokens = 0;
};

std::unique_ptr<engine::Scheduler> make(const Args& a, bool speculate, int64_t n_ctx,
                                        std::vector<TokenId> eog, CpuMeter& meter) {
  engine::SchedulerOptions o;
  o.on_step = [&meter](const engine::StepStats& st) {
    const double now = thread_cpu_seconds();
    std::lock_guard lock(meter.mu);
    if (meter.last >= 0 && st.prefill_tokens == 0) {
      meter.seconds += now - meter.last;
      meter.tokens += st.decode_tokens + st.accepted_tokens;
    }
    meter.last = now;
  };
  o.max_sequences = 4;
  o.prefix_cache = false;  // every run computes its prompt: the two schedulers do the same work
  o.speculative.enabled = speculate;
  o.speculative.max_draft = a.max_draft;
  o.speculative.min_match = a.min_match;
  return std::make_unique<engine::Scheduler>(bench::load_engine_or_exit(a.model, a.threads, n_ctx),
                                             o, engine::TokenPieceFn(), std::move(eog));
}

// `count` passages of about `chars` bytes spread over the text, each cut at sentence ends.
std::vector<std::string> passages(const std::string& text, int count, size_t chars) {
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) {
    const size_t begin = text.find(". ", text.size() * static_cast<size_t>(i) / count);
    if (begin == std::string::npos) break;
    const size_t end = text.find(". ", begin + 2 + chars);
    if (end == std::string::npos) break;
    out.push_back(text.substr(begin + 2, end + 1 - (begin + 2)));
  }
  return out;
}

// "Rewrite this passage with one change" (a code edit's shape): the passage, the change asked
// for, and the answer begun with the change made; the model continues the rewrite.
std::string edit_prompt(const std::string& p) {
  const size_t sp = p.find(' ');
  return "<|im_start|>user\nRewrite this with its first word changed to Then: " + p +
         "<|im_end|>\n<|im_start|>assistant\nThen" +
         p.substr(sp, std::min<size_t>(20, p.size() - sp));
}

// Extraction/quoting: a chat turn asking for the passage back, the answer begun with its words.
std::string quote_prompt(const std::string& p) {
  return "<|im_start|>user\n" + p + "\nQuote the passage above word for word.<|im_end|>\n" +
         "<|im_start|>assistant\n" + p.substr(0, std::min<size_t>(24, p.size()));
}

std::vector<Workload> text_workloads(const Args& a, const tokenizer::Tokenizer& tok) {
  std::ifstream in(a.text);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const auto ps = passages(text, 6, 260);
  const auto fresh = passages(text, 6, 400);
  auto encode = [&](const std::string& s) {
    auto ids = tok.encode(s, tokenizer::Specials::kParse);
    return std::vector<TokenId>(ids.begin(), ids.end());
  };
  std::vector<Workload> out;
  Workload edit{"edit"}, quote{"quote"}, plain{"fresh"}, sampled{"fresh-sampled"};
  for (const auto& p : ps) {
    edit.prompts.push_back(encode(edit_prompt(p)));
    quote.prompts.push_back(encode(quote_prompt(p)));
  }
  // No repetition asked for: a chat turn of verses, answered (as the model was trained) with
  // the verses that follow.
  for (const auto& p : fresh) {
    plain.prompts.push_back(
        encode("<|im_start|>user\n" + p + "<|im_end|>\n<|im_start|>assistant\n"));
  }
  sampled.prompts = plain.prompts;
  sampled.temperature = 1.0f;
  out = {edit, quote, plain, sampled};
  return out;
}

std::vector<Workload> token_workloads(int64_t n_vocab) {
  Workload repeat{"random-repeat"}, sampled{"random-sampled"};
  for (uint32_t i = 0; i < 4; ++i) {
    auto span = bench::random_tokens(40, n_vocab, 10 + i);
    auto p = span;
    p.insert(p.end(), span.begin(), span.end());
    p.insert(p.end(), span.begin(), span.begin() + 8);
    repeat.prompts.push_back(p);
    sampled.prompts.push_back(bench::random_tokens(88, n_vocab, 20 + i));
  }
  sampled.temperature = 1.0f;
  return {repeat, sampled};
}

// One line a run: the workload, its prompt and what decoding without drafts gave.
void dump_run(const std::string& path, const std::string& workload,
              const std::vector<TokenId>& prompt, const std::vector<TokenId>& output) {
  FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::fprintf(f, "%s P", workload.c_str());
  for (const TokenId t : prompt) std::fprintf(f, " %d", t);
  std::fprintf(f, " O");
  for (const TokenId t : output) std::fprintf(f, " %d", t);
  std::fprintf(f, "\n");
  std::fclose(f);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Decode rate of one run: tokens after the first over the time after the first.
void add_rate(const Run& r, double& tokens, double& seconds) {
  const int64_t n = r.done.completion_tokens;
  if (n < 2 || r.done.first_token_us < 0) return;
  tokens += static_cast<double>(n - 1);
  seconds += static_cast<double>(r.done.total_us - r.done.first_token_us) * 1e-6;
}

struct Side {
  std::unique_ptr<engine::Scheduler> s;
  CpuMeter cpu;
  double cpu_rate() {
    std::lock_guard lock(cpu.mu);
    return cpu.seconds > 0 ? static_cast<double>(cpu.tokens) / cpu.seconds : 0;
  }
  void reset_cpu() {
    std::lock_guard lock(cpu.mu);
    cpu.seconds = 0;
    cpu.tokens = 0;
  }
};

void run_workload(const Args& a, const Workload& w, Side& on_side, Side& off_side, int64_t n_ctx) {
  engine::Scheduler& on = *on_side.s;
  engine::Scheduler& off = *off_side.s;
  std::vector<double> cpu_ratios;
  std::vector<double> ratios;
  double tok_on = 0, s_on = 0, tok_off = 0, s_off = 0;
  bool identical = true;
  const auto before = on.load();
  for (int rep = 0; rep < a.reps; ++rep) {
    double t1 = 0, s1 = 0, t0 = 0, s0 = 0;
    on_side.reset_cpu();
    off_side.reset_cpu();
    for (size_t i = 0; i < w.prompts.size(); ++i) {
      const auto& p = w.prompts[i];
      const int64_t max_tokens = std::min<int64_t>(a.gen, n_ctx - static_cast<int64_t>(p.size()));
      const uint64_t seed = 1000 + static_cast<uint64_t>(rep) * 31 + i;
      Run r_on, r_off;
      if ((rep + i) % 2 == 0) {
        r_on = run_one(on, p, max_tokens, w.temperature, seed);
        r_off = run_one(off, p, max_tokens, w.temperature, seed);
      } else {
        r_off = run_one(off, p, max_tokens, w.temperature, seed);
        r_on = run_one(on, p, max_tokens, w.temperature, seed);
      }
      identical = identical && r_on.tokens == r_off.tokens;
      if (!a.dump.empty()) dump_run(a.dump, w.name, p, r_off.tokens);
      add_rate(r_on, t1, s1);
      add_rate(r_off, t0, s0);
    }
    if (s1 > 0 && s0 > 0) ratios.push_back((t1 / s1) / (t0 / s0));
    if (off_side.cpu_rate() > 0) cpu_ratios.push_back(on_side.cpu_rate() / off_side.cpu_rate());
    tok_on += t1, s_on += s1, tok_off += t0, s_off += s0;
  }
  const auto after = on.load();
  const double drafted = static_cast<double>(after.spec_drafted_total - before.spec_drafted_total);
  const double accepted =
      static_cast<double>(after.spec_accepted_total - before.spec_accepted_total);
  const double mean_tokens = tok_on / static_cast<double>(a.reps * w.prompts.size());
  std::printf(
      "%-15s %6.0f %10.1f %10.1f %7.3fx %6.3f-%5.3fx %7.3fx %9.0f %8.2f %s\n", w.name.c_str(),
      mean_tokens, s_off > 0 ? tok_off / s_off : 0, s_on > 0 ? tok_on / s_on : 0, median(ratios),
      ratios.empty() ? 0 : *std::min_element(ratios.begin(), ratios.end()),
      ratios.empty() ? 0 : *std::max_element(ratios.begin(), ratios.end()), median(cpu_ratios),
      drafted, drafted > 0 ? accepted / drafted : 0, identical ? "yes" : "NO");
  std::fflush(stdout);
}

// One forward pass of a sequence's next token plus k drafted ones, against the next token alone
// (alternating, median of reps): what verifying a draft costs on this model.
void verify_cost(const Args& a) {
  auto eng = bench::load_engine_or_exit(a.model, a.threads, 0);
  const int64_t n_vocab = eng->config().n_vocab;
  const int64_t prompt = std::min<int64_t>(64, eng->n_ctx() / 2);
  (void)eng->kv().seq_add(0);
  std::vector<engine::BatchEntry> batch;
  std::vector<float> logits;
  const auto toks = bench::random_tokens(prompt + 16, n_vocab, 5);
  for (int64_t i = 0; i < prompt; ++i) batch.push_back({0, i, toks[static_cast<size_t>(i)], false});
  batch.back().logits = true;
  if (!eng->forward(batch, logits)) std::exit(1);
  const std::vector<int64_t> ks = {0, 1, 2, 4, 8};
  std::vector<std::vector<double>> ms(ks.size());
  for (int rep = 0; rep < 20 * a.reps; ++rep) {
    for (size_t j = 0; j < ks.size(); ++j) {
      batch.clear();
      for (int64_t i = 0; i <= ks[j]; ++i) {
        batch.push_back({0, prompt + i, toks[static_cast<size_t>(prompt + i)], true});
      }
      const auto t0 = Clock::now();
      if (!eng->forward(batch, logits)) std::exit(1);
      ms[j].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      eng->kv().seq_truncate(0, prompt);
    }
  }
  const double base = median(ms[0]);
  std::printf("verify cost: one forward of the next token + k drafted (median ms, ratio to k=0)\n");
  for (size_t j = 0; j < ks.size(); ++j) {
    std::printf("  k=%lld  %8.3f ms  %5.2fx\n", static_cast<long long>(ks[j]), median(ms[j]),
                median(ms[j]) / base);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--model")
      a.model = v;
    else if (k == "--text")
      a.text = v;
    else if (k == "--threads")
      a.threads = std::atoi(v);
    else if (k == "--reps")
      a.reps = std::atoi(v);
    else if (k == "--gen")
      a.gen = std::atoll(v);
    else if (k == "--max-draft")
      a.max_draft = std::atoll(v);
    else if (k == "--min-match")
      a.min_match = std::atoll(v);
    else if (k == "--workloads")
      a.workloads = v;
    else if (k == "--dump")
      a.dump = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  auto src = engine::GgufSource::open(a.model);
  if (!src) {
    std::fprintf(stderr, "%s\n", src.error().message.c_str());
    return 1;
  }
  const std::vector<TokenId> eog = engine::eog_tokens_from_source(*src.value());
  auto probe = bench::load_engine_or_exit(a.model, 1, 0);
  const int64_t n_ctx = std::min<int64_t>(probe->n_ctx(), 512);
  const int64_t n_vocab = probe->config().n_vocab;
  probe.reset();
  std::vector<Workload> all = token_workloads(n_vocab);
  if (auto tok = tokenizer::load_tokenizer(a.model)) {
    auto text = text_workloads(a, *tok.value());
    all.insert(all.begin(), text.begin(), text.end());
  }
  Side on, off;
  on.s = make(a, true, n_ctx, eog, on.cpu);
  off.s = make(a, false, n_ctx, eog, off.cpu);
  std::printf("model %s, %d threads, context %lld, max_draft %lld, min_match %lld, %d reps\n",
              a.model.c_str(), a.threads, static_cast<long long>(n_ctx),
              static_cast<long long>(a.max_draft), static_cast<long long>(a.min_match), a.reps);
  std::printf("%-15s %6s %10s %10s %8s %13s %8s %9s %8s %s\n", "workload", "tokens", "off tok/s",
              "on tok/s", "on/off", "per-rep range", "CPU o/o", "drafted", "accepted", "identical");
  for (const Workload& w : all) {
    if (("," + a.workloads + ",").find("," + w.name + ",") == std::string::npos) continue;
    run_workload(a, w, on, off, n_ctx);
  }
  on.s.reset();
  off.s.reset();
  verify_cost(a);
  return 0;
}
