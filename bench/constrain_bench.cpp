// constrain_bench: per-step token-mask computation of the constraint engine, and schema
// compilation, on real vocabularies: llama-2 SentencePiece (32,000), cl100k_base (100,277),
// o200k_base (200,019). Each schema is walked (uniform random choices among the allowed
// tokens, seeded) until the end of generation; every fill_mask is timed on one thread. The first
// walk of a schema (its state masks still empty) is reported apart from the later ones.
// Prints p50 / p99 / max microseconds per step per vocabulary and schema. See bench/README.md.
// With --cpu 1 a step is timed by this thread's CPU clock (robust to a loaded machine), else by
// the wall clock. --slow US prints the text before each later-walk step slower than US.
// --prepare 1 (default) computes every state mask of a grammar before its first walk, as the
// served path does on its compile thread (timed apart: "prepared N in MS"); 0 leaves them lazy.
//   constrain_bench [--walks N] [--vocab NAME]... [--cpu 0|1] [--slow US] [--prepare 0|1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "constrain/matcher.h"
#include "constrain/schema.h"
#include "constrain/tools.h"
#include "tests/constrain/test_vocab.h"

namespace ferry::constrain {
namespace {

using Clock = std::chrono::steady_clock;

struct Case {
  const char* name;
  const char* schema;  // null: json_object; "tools": the tool grammar below
};

const Case kCases[] = {
    {"person",
     R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},"email":{"type":"string","format":"email"},"tags":{"type":"array","items":{"type":"string"},"maxItems":5}},"required":["name","age","email","tags"],"additionalProperties":false})"},
    {"steps",
     R"({"type":"object","properties":{"steps":{"type":"array","items":{"type":"object","properties":{"explanation":{"type":"string"},"output":{"type":"string"}},"required":["explanation","output"],"additionalProperties":false}},"final_answer":{"type":"string"}},"required":["steps","final_answer"],"additionalProperties":false})"},
    {"enum+anyOf",
     R"({"type":"object","properties":{"kind":{"enum":["circle","square","triangle"]},"size":{"anyOf":[{"type":"number"},{"type":"null"}]},"at":{"type":"string","format":"date-time"}},"required":["kind","size","at"]})"},
    {"json_object", nullptr},
    {"tools", "tools"},
};

Result<Grammar> compile_case(const Case& c, const CompileOptions& o) {
  if (!c.schema) return compile_json_object(o);
  if (std::string(c.schema) == "tools") {
    ToolSpec spec;
    spec.choice = ToolChoice::kRequired;
    spec.functions.push_back(ToolFunction{
        "get_weather",
        R"({"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]}},"required":["city","unit"]})"});
    spec.functions.push_back(ToolFunction{
        "search",
        R"({"type":"object","properties":{"query":{"type":"string"}},"required":["query"]})"});
    return compile_tools(spec, o);
  }
  return compile_json_schema(c.schema, o);
}

// This thread's CPU time: a step's own work, whatever else the machine runs (--cpu).
bool cpu_time = false;
// Every state mask computed before the first walk (--prepare 1, the default), as served.
bool prepare = true;
double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

// The last bytes of a walk's text on one line (control bytes escaped), for --slow.
std::string shown_tail(const std::string& text) {
  constexpr std::size_t kShown = 80;
  std::string out;
  for (std::size_t i = text.size() > kShown ? text.size() - kShown : 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1));
  return v[i];
}

void run_vocab(const testing::TestVocab& tv, int walks, double slow_us) {
  CompileOptions o;
  o.max_string_chars = 64;
  o.max_array_items = 6;
  std::vector<std::uint64_t> mask;
  std::vector<double> all;
  for (const Case& c : kCases) {
    std::vector<double> compile_us;
    std::vector<double> step_us;
    std::vector<double> first_walk_us;
    std::shared_ptr<const Grammar> grammar;
    std::size_t prepared = 0;
    double prepare_ms = 0;
    double prepared_mb = 0;
    for (int w = 0; w < walks; ++w) {
      // Compiled each time (timed), but walked on the first grammar: the way a cached
      // schema is served (its state masks fill up on the first walks).
      const auto t0 = Clock::now();
      auto g = compile_case(c, o);
      compile_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      if (!g) {
        std::printf("%s: %s\n", c.name, g.error().message.c_str());
        return;
      }
      if (!grammar) {
        grammar = std::make_shared<const Grammar>(std::move(g).value());
        if (prepare) {
          // As the served path does on its compile thread once per grammar and vocabulary.
          const double p0 = thread_cpu_us();
          prepared = Matcher(grammar, tv.vocab).prepare_state_masks();
          prepare_ms = (thread_cpu_us() - p0) / 1000;
          prepared_mb = static_cast<double>(grammar->masks->bytes()) / (1 << 20);
        }
      }
      Matcher m(grammar, tv.vocab);
      std::mt19937_64 rng(static_cast<std::uint64_t>(w) + 1);
      std::vector<TokenId> allowed;
      std::string text;
      for (int step = 0; step < 2000 && !m.ended(); ++step) {
        const double c0 = thread_cpu_us();
        const auto s0 = Clock::now();
        m.fill_mask(mask);
        const double wall = std::chrono::duration<double, std::micro>(Clock::now() - s0).count();
        const double us = cpu_time ? thread_cpu_us() - c0 : wall;
        (w == 0 ? first_walk_us : step_us).push_back(us);
        if (slow_us > 0 && us > slow_us && w > 0)
          std::printf("  slow %s %.0f us after: %s\n", c.name, us, shown_tail(text).c_str());
        allowed.clear();
        for (std::size_t i = 0; i < mask.size(); ++i)
          for (std::uint64_t bits = mask[i]; bits; bits &= bits - 1)
            allowed.push_back(static_cast<TokenId>(i * 64 + __builtin_ctzll(bits)));
        if (allowed.empty()) break;
        const TokenId pick = allowed[rng() % allowed.size()];
        if (!m.accept_token(pick)) break;
        text += tv.vocab->bytes(pick);
      }
    }
    all.insert(all.end(), step_us.begin(), step_us.end());
    const std::size_t steps = step_us.size();
    const double p50 = percentile(step_us, 0.5);
    const double p99 = percentile(step_us, 0.99);
    const double cold_p99 = percentile(first_walk_us, 0.99);
    std::printf(
        "%-8s %7zu  %-12s steps %6zu  mask p50 %8.1f us  p99 %8.1f us  max %8.1f us  "
        "first walk p99 %8.1f us  compile p50 %7.1f us p99 %7.1f us  prepared %4zu in %6.1f ms, "
        "%5.1f MB\n",
        tv.name.c_str(), tv.vocab->size(), c.name, steps, p50, p99, step_us.back(), cold_p99,
        percentile(compile_us, 0.5), percentile(compile_us, 0.99), prepared, prepare_ms,
        prepared_mb);
  }
  const double p50 = percentile(all, 0.5);
  const double p99 = percentile(all, 0.99);
  std::printf("%-8s %7zu  %-12s steps %6zu  mask p50 %8.1f us  p99 %8.1f us  max %8.1f us\n",
              tv.name.c_str(), tv.vocab->size(), "ALL", all.size(), p50, p99, all.back());
}

}  // namespace
}  // namespace ferry::constrain

int main(int argc, char** argv) {
  int walks = 5;
  double slow_us = 0;  // print the text before every later-walk step slower than this
  std::vector<std::string> vocabs;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--walks") walks = std::stoi(argv[i + 1]);
    if (a == "--vocab") vocabs.emplace_back(argv[i + 1]);
    if (a == "--slow") slow_us = std::stod(argv[i + 1]);
    if (a == "--cpu") ferry::constrain::cpu_time = std::string(argv[i + 1]) == "1";
    if (a == "--prepare") ferry::constrain::prepare = std::string(argv[i + 1]) == "1";
  }
  if (vocabs.empty()) vocabs = {"llama2", "cl100k", "qwen152k", "o200k"};
  for (const std::string& name : vocabs) {
    const auto t0 = ferry::constrain::Clock::now();
    const auto* tv = ferry::constrain::testing::test_vocab(name);
    if (!tv) {
      std::printf("%s: absent\n", name.c_str());
      continue;
    }
    std::printf(
        "%s: vocabulary tables built in %.0f ms\n", name.c_str(),
        std::chrono::duration<double, std::milli>(ferry::constrain::Clock::now() - t0).count());
    ferry::constrain::run_vocab(*tv, walks, slow_us);
  }
  return 0;
}
