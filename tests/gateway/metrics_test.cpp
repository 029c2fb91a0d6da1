#include "gateway/metrics.h"

#include "local_engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace ferry::gateway {
namespace {

TEST(Metrics, CountersAndHistogramsRender) {
  Metrics m;
  m.requests.inc({"gpt", "gpu", "200"});
  m.requests.inc({"gpt", "gpu", "200"});
  m.requests.inc({"we\"ird", "gpu", "502"});
  m.latency.observe_micros({"gpt"}, 3000);     // 3 ms: in the 5 ms bucket
  m.latency.observe_micros({"gpt"}, 2000000);  // 2 s
  std::string text = m.render();
  EXPECT_NE(text.find("ferry_requests_total{model=\"gpt\",backend=\"gpu\",status=\"200\"} 2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("model=\"we\\\"ird\""), std::string::npos);
  EXPECT_NE(text.find("ferry_request_duration_seconds_bucket{model=\"gpt\",le=\"0.001\"} 0"),
            std::string::npos);
  EXPECT_NE(text.find("ferry_request_duration_seconds_bucket{model=\"gpt\",le=\"0.005\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("ferry_request_duration_seconds_bucket{model=\"gpt\",le=\"+Inf\"} 2"),
            std::string::npos);
  EXPECT_NE(text.find("ferry_request_duration_seconds_sum{model=\"gpt\"} 2.003000"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ferry_in_flight_requests 0"), std::string::npos);
}

TEST(Metrics, ConcurrentIncrementsAreNotLost) {
  Metrics m;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) m.requests.inc({"a", "b", "200"});
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(m.requests.value({"a", "b", "200"}), 40000);
}

// observe_request must leave exactly what the three family calls it replaces leave.
TEST(Metrics, ObserveRequestRendersLikeTheFamilyCalls) {
  struct Req {
    const char* model;
    const char* backend;
    int status;
    int64_t latency;
    int64_t ttft;
  };
  const std::vector<Req> reqs = {
      {"gpt", "gpu", 200, 3000, 1500},        {"gpt", "gpu", 200, 9000, -1},
      {"gpt", "cpu", 502, 200, -1},           {"", "gpu", 404, 100, 50},
      {"we\"ird\n", "b\\k", 200, 2000000, 7}, {"gpt", "gpu", 429, 10, 0},
      {"claude", "", 200, 150000000, 1000},   {"gpt", "gpu", 200, 4000, 2000},
      {"bare", "gpu", 200, 100, -1},
  };
  Metrics by_family;
  Metrics by_request;
  for (const auto& r : reqs) {
    std::string_view model = r.model[0] != '\0' ? std::string_view(r.model) : Metrics::kNoModel;
    by_family.requests.inc({model, r.backend, std::to_string(r.status)});
    by_family.latency.observe_micros({model}, r.latency);
    if (r.ttft >= 0) by_family.ttft.observe_micros({model}, r.ttft);
    by_request.observe_request(r.model, r.backend, r.status, r.latency, r.ttft);
  }
  EXPECT_EQ(by_request.render(), by_family.render());
  // A request without a model is counted and timed under model="(none)", never model="".
  std::string text = by_request.render();
  EXPECT_EQ(text.find("model=\"\""), std::string::npos) << text;
  EXPECT_NE(text.find("ferry_request_duration_seconds_count{model=\"(none)\"} 1"),
            std::string::npos)
      << text;
  // No ttft series for a model that never had one.
  EXPECT_EQ(text.find("ferry_time_to_first_token_seconds_count{model=\"bare\"}"),
            std::string::npos);
}

// observe_api remembers its series per (api, status) and must leave exactly what the family
// calls leave: no token or error series for a request that had none.
TEST(Metrics, ObserveApiRendersLikeTheFamilyCalls) {
  struct Call {
    const char* api;
    int status;
    int64_t input;
    int64_t output;
    bool failed;
  };
  const std::vector<Call> calls = {
      {"chat", 200, 12, 7, false},  {"chat", 200, 3, -1, false}, {"messages", 429, -1, -1, true},
      {"chat", 502, 0, 0, true},    {"chat", 200, 1, 2, false},  {"responses", 200, -1, 5, false},
      {"messages", 429, 4, 0, true}};
  Metrics by_family;
  Metrics by_api;
  for (const Call& c : calls) {
    by_family.api_requests.inc({c.api, std::to_string(c.status)});
    if (c.input > 0) by_family.api_tokens.inc({c.api, "input"}, c.input);
    if (c.output > 0) by_family.api_tokens.inc({c.api, "output"}, c.output);
    if (c.failed) by_family.api_errors.inc({c.api});
    by_api.observe_api(c.api, c.status, c.input, c.output, c.failed);
  }
  EXPECT_EQ(by_api.render(), by_family.render());
  EXPECT_EQ(by_api.api_tokens.value({"chat", "input"}), 16);
  EXPECT_EQ(by_api.api_errors.value({"messages"}), 2);
  std::string text = by_api.render();
  EXPECT_EQ(text.find("ferry_api_errors_total{api=\"responses\"}"), std::string::npos) << text;
  EXPECT_EQ(text.find("ferry_api_tokens_total{api=\"responses\",kind=\"input\"}"),
            std::string::npos)
      << text;
}

// Threads that meet a new (model, backend, status) at the same moment must share one series.
TEST(Metrics, ObserveRequestCreatesEachSeriesOnceUnderRaces) {
  Metrics m;
  constexpr int kThreads = 4;
  constexpr int kKeys = 40;
  constexpr int kRounds = 50;
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) {
      }
      for (int round = 0; round < kRounds; ++round) {
        for (int k = 0; k < kKeys; ++k) {
          m.observe_request("model-" + std::to_string(k), "b", 200 + k % 3, 1000, 500);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  std::string text = m.render();
  for (int k = 0; k < kKeys; ++k) {
    std::string model = "model-" + std::to_string(k);
    std::string status = std::to_string(200 + k % 3);
    EXPECT_EQ(m.requests.value({model, "b", status}), kThreads * kRounds) << model;
    std::string series =
        "ferry_requests_total{model=\"" + model + "\",backend=\"b\",status=\"" + status + "\"} ";
    size_t at = text.find(series);
    ASSERT_NE(at, std::string::npos) << series;
    EXPECT_EQ(text.find(series, at + 1), std::string::npos) << "twice: " << series;
    std::string count = "ferry_request_duration_seconds_count{model=\"" + model + "\"} " +
                        std::to_string(kThreads * kRounds) + "\n";
    EXPECT_NE(text.find(count), std::string::npos) << count;
    count = "ferry_time_to_first_token_seconds_count{model=\"" + model + "\"} " +
            std::to_string(kThreads * kRounds) + "\n";
    EXPECT_NE(text.find(count), std::string::npos) << count;
  }
}

// Series are found by views without building a vector: the lookup must tell apart label lists
// that concatenate alike, and render in the order of the label lists as vectors of strings.
TEST(Metrics, SeriesLookupByViewsKeepsLabelsApartAndOrdered) {
  CounterFamily f("f_total", "help", {"a", "b"});
  f.inc({"ab", ""});
  f.inc({"a", "b"}, 2);
  f.inc({"a", "zz"}, 3);
  f.inc({"", "ab"}, 4);
  f.inc({"a", "b"}, 5);
  EXPECT_EQ(f.value({"a", "b"}), 7);
  EXPECT_EQ(f.value({"ab", ""}), 1);
  EXPECT_EQ(f.value({"a", "zz"}), 3);
  EXPECT_EQ(f.value({"", "ab"}), 4);
  EXPECT_EQ(f.value({"a", "bb"}), 0);
  EXPECT_EQ(f.value({"a"}), 0);
  EXPECT_EQ(f.series({"a", "b"}), f.series({"a", "b"}));
  f.series({"a", "b"})->fetch_add(1);
  EXPECT_EQ(f.value({"a", "b"}), 8);
  std::string out;
  f.render(out);
  EXPECT_EQ(out,
            "# HELP f_total help\n# TYPE f_total counter\n"
            "f_total{a=\"\",b=\"ab\"} 4\n"
            "f_total{a=\"a\",b=\"b\"} 8\n"
            "f_total{a=\"a\",b=\"zz\"} 3\n"
            "f_total{a=\"ab\",b=\"\"} 1\n");
}

// Many more series than the family's index has slots, looked up in a scrambled order: every
// lookup finds its own series (slots shared by several series are checked by their labels).
TEST(Metrics, SeriesIndexFindsEachSeriesAmongMany) {
  CounterFamily f("f_total", "help", {"a", "b"});
  HistogramFamily h("h_seconds", "help", {"a"}, {0.1});
  const int kSeries = 300;
  auto label = [](int i) { return std::to_string(i % 17) + "-" + std::to_string(i); };
  std::vector<int64_t> expected(kSeries, 0);
  for (int round = 0; round < 5; ++round) {
    for (int k = 0; k < kSeries; ++k) {
      const int i = (k * 7919 + round * 31) % kSeries;
      const std::string a = label(i);
      const std::string b = i % 3 == 0 ? "" : a;
      f.inc({a, b}, i + 1);
      expected[i] += i + 1;
      h.observe_micros({a}, 1);
      EXPECT_EQ(f.series({a, b}), f.series({a, b}));
      EXPECT_EQ(h.series({a}), h.series({a}));
    }
  }
  for (int i = 0; i < kSeries; ++i) {
    const std::string a = label(i);
    EXPECT_EQ(f.value({a, i % 3 == 0 ? "" : a}), expected[i]) << a;
    EXPECT_EQ(f.value({a, "x"}), 0);
    EXPECT_EQ(h.series({a})->count.load(), 5) << a;
  }
  std::string out;
  f.render(out);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), kSeries + 2);
}

// The one table of series: names unique and well-formed, each family made from it renders the
// declared head, and a sample written through it carries the declared label names, escaped.
TEST(Metrics, EverySeriesIsDeclaredOnceAndRendersFromTheTable) {
  std::set<std::string_view> names;
  for (size_t i = 0; i < std::size(kMetricTable); ++i) {
    const MetricSpec& spec = kMetricTable[i];
    EXPECT_EQ(static_cast<size_t>(spec.id), i);
    EXPECT_TRUE(names.insert(spec.name).second) << spec.name;
    EXPECT_EQ(spec.name.rfind("ferry_", 0), 0u) << spec.name;
    for (char c : spec.name) EXPECT_TRUE((c >= 'a' && c <= 'z') || c == '_') << spec.name;
    EXPECT_EQ(spec.type == MetricType::kCounter, spec.name.ends_with("_total")) << spec.name;
    EXPECT_FALSE(spec.help.empty()) << spec.name;
  }
  std::string head;
  append_family_head(head, MetricSeries::kBackendHealthy);
  EXPECT_EQ(head,
            "# HELP ferry_backend_healthy 1 when the target's circuit breaker lets requests "
            "through.\n# TYPE ferry_backend_healthy gauge\n");
  std::string sample;
  append_sample(sample, MetricSeries::kBackendConnections, {"b\"1", "opened"}, int64_t{7});
  append_sample(sample, MetricSeries::kLedgerPending, {}, "3");
  EXPECT_EQ(sample,
            "ferry_backend_connections_total{backend=\"b\\\"1\",how=\"opened\"} 7\n"
            "ferry_ledger_pending 3\n");
  Metrics m;
  std::string text = m.render();
  for (MetricSeries id : {MetricSeries::kRequests, MetricSeries::kRequestDuration,
                          MetricSeries::kInFlightRequests, MetricSeries::kOpenConnections}) {
    std::string expected;
    append_family_head(expected, id);
    EXPECT_NE(text.find(expected), std::string::npos) << expected << " in:\n" << text;
  }
}

TEST(Metrics, LocalBackendLoadsRenderEachFamilyOnceWithOneSamplePerBackend) {
  engine::LoadSnapshot a;
  a.queue_depth = 3;
  a.paused_sequences = 1;
  a.tokens_per_second = 12.5;
  a.spec_drafted_total = 40;
  a.spec_accepted_total = 31;
  a.kv_bytes_embeddings = 4096;
  a.kv_bytes_peak = 65536;
  engine::LoadSnapshot b;
  b.kv_budget_bytes = 1 << 20;
  b.prefix_cache_hit_ratio = 0.25;
  std::vector<std::string_view> names = {"local", "lo\"cal2"};
  std::vector<engine::LoadSnapshot> loads = {a, b};
  std::string out;
  append_local_backend_metrics(out, names, loads);
  for (MetricSeries id :
       {MetricSeries::kLocalQueueDepth, MetricSeries::kLocalActiveSequences,
        MetricSeries::kLocalPausedSequences, MetricSeries::kLocalKvBytes,
        MetricSeries::kLocalKvEmbeddingsBytes, MetricSeries::kLocalKvPeakBytes,
        MetricSeries::kLocalKvBudgetBytes, MetricSeries::kLocalEstWaitMs,
        MetricSeries::kLocalTokensPerSecond, MetricSeries::kLocalPrefixCacheHitRatio,
        MetricSeries::kLocalSequencesCancelled, MetricSeries::kLocalSpecDrafted,
        MetricSeries::kLocalSpecAccepted}) {
    std::string head;
    append_family_head(head, id);
    size_t at = out.find(head);
    ASSERT_NE(at, std::string::npos) << head;
    EXPECT_EQ(out.find(head, at + 1), std::string::npos) << head;
    std::string name(metric_spec(id).name);
    EXPECT_NE(out.find(name + "{backend=\"local\"} "), std::string::npos) << name;
    EXPECT_NE(out.find(name + "{backend=\"lo\\\"cal2\"} "), std::string::npos) << name;
  }
  EXPECT_NE(out.find("ferry_local_queue_depth{backend=\"local\"} 3\n"), std::string::npos);
  EXPECT_NE(out.find("ferry_local_paused_sequences{backend=\"local\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("ferry_local_tokens_per_second{backend=\"local\"} 12.5\n"), std::string::npos);
  EXPECT_NE(out.find("ferry_local_spec_drafted_total{backend=\"local\"} 40\n"), std::string::npos);
  EXPECT_NE(out.find("ferry_local_spec_accepted_total{backend=\"local\"} 31\n"), std::string::npos);
  EXPECT_NE(out.find("ferry_local_kv_embeddings_bytes{backend=\"local\"} 4096\n"),
            std::string::npos);
  EXPECT_NE(out.find("ferry_local_kv_peak_bytes{backend=\"local\"} 65536\n"), std::string::npos);
  EXPECT_NE(out.find("ferry_local_kv_budget_bytes{backend=\"lo\\\"cal2\"} 1048576\n"),
            std::string::npos);
  EXPECT_NE(out.find("ferry_local_prefix_cache_hit_ratio{backend=\"lo\\\"cal2\"} 0.25\n"),
            std::string::npos);
}

}  // namespace
}  // namespace ferry::gateway
