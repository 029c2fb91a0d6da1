// Policy evaluation and reload speed. Targets: decide against a 50-rule policy (facts already
// computed) <= 5 us; reload a 1,000-rule policy <= 50 ms, with readers running meanwhile.
// The policies are flow-style YAML, which the loader's own parser reads (policies/yaml_tree.h);
// BM_Load1000RulesViaYamlCpp shows a file that has to go through yaml-cpp instead.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <yaml-cpp/yaml.h>

#include "policies/loader.h"
#include "policies/store.h"

namespace {

using namespace ferry::policies;

// A policy of `rules` rules mixing every kind of clause; none matches the bench facts, so
// decide() walks all of them and falls to the default (the worst case).
std::string make_policy(int rules, const std::string& salt) {
  std::string t = "# " + salt +
                  "\ntimezone: '+01:00'\n"
                  "targets: { small: qwen, large: llama, mid: mistral }\n"
                  "models: [auto, chat, chat-large]\nrules:\n";
  for (int i = 0; i < rules; ++i) {
    std::string id = "rule-" + std::to_string(i);
    std::string n = std::to_string(i);
    switch (i % 5) {
      case 0:
        t += "  - id: " + id + "\n    when: { prompt_tokens: { lte: " + n +
             " }, max_tokens: { lte: 512 }, tools: absent, fits: small }\n"
             "    route: [small, large]\n";
        break;
      case 1:
        t += "  - id: " + id + "\n    when: { team: team-" + n +
             ", model: [chat, chat-large] }\n"
             "    set: { max_tokens: { at_most: 4096 } }\n    route: [large, small]\n";
        break;
      case 2:
        t += "  - id: " + id + "\n    when: { any: [ { tags: t" + n + " }, { claimed_tags: c" + n +
             " } ], not: { stream: true } }\n    route: [mid]\n    tag: x\n";
        break;
      case 3:
        t += "  - id: " + id + "\n    when: { project: { matches: 'proj-" + n +
             "-.*' }, hour: { gte: 9, lt: 18 } }\n    route: [{ target: large, weight: 9 }, "
             "{ target: small, weight: 1 }]\n";
        break;
      default:
        t += "  - id: " + id +
             "\n    when: { state: { large: { queue_depth: { gt: " + std::to_string(1000 + i) +
             " } } }, budget_left_pct: { lt: 1 } }\n"
             "    route: [small]\n";
        break;
    }
  }
  t += "default: { route: [large, small] }\n";
  return t;
}

Facts bench_facts() {
  Facts f;
  f.model = "auto";
  f.prompt_tokens = 3000;
  f.max_tokens = 1024;
  f.stream = true;
  f.key = "key-1";
  f.team = "research";
  f.project = "web";
  f.role = "app";
  f.tags = {"premium", "eu"};
  f.claimed_tags = {"urgent"};
  f.unix_seconds = 1764446400;
  f.budget_left_pct = 50;
  f.split = 12345;
  f.targets.push_back({.ref = "qwen", .prompt_tokens = 3100, .context_length = 32768});
  f.targets.push_back({.ref = "llama",
                       .prompt_tokens = 2990,
                       .context_length = 131072,
                       .queue_depth = 4,
                       .est_wait_ms = 200,
                       .p90_ttft_ms = 350,
                       .error_rate = 0.01});
  f.targets.push_back({.ref = "mistral", .context_length = 32768});
  return f;
}

void BM_Decide50Rules(benchmark::State& state) {
  LoadResult r = load_policy_text(make_policy(50, "a"), "bench.yaml");
  if (!r.ok()) {
    state.SkipWithError(r.errors_text().c_str());
    return;
  }
  Facts f = bench_facts();
  for (auto _ : state) {
    Decision d = r.policy->decide(f);
    benchmark::DoNotOptimize(d);
  }
}
BENCHMARK(BM_Decide50Rules);

void BM_DecideFirstRuleMatches(benchmark::State& state) {
  LoadResult r = load_policy_text(make_policy(50, "a"), "bench.yaml");
  Facts f = bench_facts();
  f.prompt_tokens = 0;
  f.max_tokens = 100;
  f.stream = false;
  for (auto _ : state) {
    Decision d = r.policy->decide(f);
    benchmark::DoNotOptimize(d);
  }
}
BENCHMARK(BM_DecideFirstRuleMatches);

void BM_Explain50Rules(benchmark::State& state) {
  LoadResult r = load_policy_text(make_policy(50, "a"), "bench.yaml");
  Facts f = bench_facts();
  for (auto _ : state) {
    Explanation ex = r.policy->explain(f);
    benchmark::DoNotOptimize(ex);
  }
}
BENCHMARK(BM_Explain50Rules)->Unit(benchmark::kMicrosecond);

void BM_Load1000Rules(benchmark::State& state) {
  std::string text = make_policy(1000, "a");
  for (auto _ : state) {
    LoadResult r = load_policy_text(text, "bench.yaml");
    if (!r.ok()) state.SkipWithError("invalid");
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_Load1000Rules)->Unit(benchmark::kMillisecond);

// The same policy through yaml-cpp: a directive line keeps the loader's fast YAML parser out
// (as would anchors, tags or block scalars), so this is the cost of such files.
void BM_Load1000RulesViaYamlCpp(benchmark::State& state) {
  std::string text = "%YAML 1.2\n---\n" + make_policy(1000, "a");
  for (auto _ : state) {
    LoadResult r = load_policy_text(text, "bench.yaml");
    if (!r.ok()) state.SkipWithError("invalid");
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_Load1000RulesViaYamlCpp)->Unit(benchmark::kMillisecond);

// Reference for the loads above: yaml-cpp parsing the same text, with no validation.
void BM_YamlParseOnly1000Rules(benchmark::State& state) {
  std::string text = make_policy(1000, "a");
  for (auto _ : state) {
    YAML::Node root = YAML::Load(text);
    benchmark::DoNotOptimize(root);
  }
}
BENCHMARK(BM_YamlParseOnly1000Rules)->Unit(benchmark::kMillisecond);

// Reload through the store (read, validate, compile, swap) while a thread keeps deciding.
void BM_Reload1000RulesUnderTraffic(benchmark::State& state) {
  namespace fs = std::filesystem;
  fs::path path =
      fs::temp_directory_path() / ("ferry-policy-bench-" + std::to_string(::getpid()) + ".yaml");
  std::string texts[2] = {make_policy(1000, "a"), make_policy(1000, "b")};
  {
    std::ofstream out(path);
    out << texts[0];
  }
  auto store = PolicyStore::open(path.string());
  if (!store) {
    state.SkipWithError(store.error().message.c_str());
    return;
  }
  std::atomic<bool> stop{false};
  std::atomic<int64_t> decisions{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 1; ++t) {
    readers.emplace_back([&] {
      Facts f = bench_facts();
      while (!stop.load(std::memory_order_relaxed)) {
        auto p = (*store)->current();
        benchmark::DoNotOptimize(p->decide(f));
        decisions.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  int i = 0;
  for (auto _ : state) {
    {
      state.PauseTiming();
      std::ofstream out(path, std::ios::trunc);
      out << texts[++i % 2];
      out.close();
      state.ResumeTiming();
    }
    ReloadOutcome o = (*store)->reload("bench");
    if (!o.applied) state.SkipWithError("reload not applied");
  }
  stop = true;
  for (auto& r : readers) r.join();
  state.counters["reader_decisions"] = static_cast<double>(decisions.load());
  fs::remove(path);
}
BENCHMARK(BM_Reload1000RulesUnderTraffic)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
