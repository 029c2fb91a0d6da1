// Microbenchmark of the bookkeeping ferry does per proxied request once the answer is out:
// the request id, the three metric updates and the access-log line with its hand-off to the
// writer thread (what Server::Impl::finish_record and access_log_line in gateway/server.cpp do).
// Run: build/bench/ferry_record_bench                  (Google Benchmark, wall time)
//      build/bench/ferry_record_bench --loop N         (N requests, for callgrind: divide the
//                                                       inclusive cost of one_request by N)
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/clock.h"
#include "common/ids.h"
#include "gateway/access_log.h"
#include "gateway/metrics.h"

namespace {

using ferry::gateway::AccessLog;
using ferry::gateway::JsonLine;
using ferry::gateway::Metrics;

// The fields of server.cpp's RequestRecord that the access log and metrics read.
struct Record {
  std::string request_id;
  std::string method = "POST";
  std::string path = "/v1/chat/completions";
  std::string key_id = "key_team_alpha";
  std::string model = "gpt-4o-mini";
  std::string backend = "openai-primary";
  std::string target = "gpt-4o-mini-2024-07-18";
  std::string rule;
  std::string ledger_id;
  int attempts = 1;
  int64_t prompt_tokens_counted = -1;
  int status = 200;
  bool stream = true;
  int64_t prompt_tokens = 312;
  int64_t completion_tokens = 9;
  int64_t cached_tokens = 0;
  std::string finish_reason = "stop";
  std::string error;
  int64_t ttft_us = 4567;
  int64_t backend_ttft_us = -1;
};

// Mirrors access_log_line() in gateway/server.cpp field for field.
JsonLine access_log_line(const Record& r, int64_t latency_us) {
  JsonLine j;
  j.utc_micros("ts", ferry::unix_micros_now())
      .str("request_id", r.request_id)
      .str("method", r.method)
      .str("path", r.path)
      .integer("status", r.status)
      .millis("latency_ms", latency_us);
  if (!r.key_id.empty()) j.str("key_id", r.key_id);
  if (!r.model.empty()) j.str("model", r.model);
  if (!r.backend.empty()) j.str("backend", r.backend);
  if (!r.target.empty()) j.str("target", r.target);
  if (!r.rule.empty()) j.str("rule", r.rule);
  if (r.attempts > 1) j.integer("attempts", r.attempts);
  if (!r.ledger_id.empty()) j.str("ledger_id", r.ledger_id);
  if (!r.path.starts_with("/v1/")) return j;
  j.boolean("stream", r.stream);
  if (r.prompt_tokens >= 0) j.integer("prompt_tokens", r.prompt_tokens);
  if (r.completion_tokens >= 0) j.integer("completion_tokens", r.completion_tokens);
  if (r.cached_tokens > 0) j.integer("cached_tokens", r.cached_tokens);
  if (r.prompt_tokens_counted >= 0) j.integer("prompt_tokens_counted", r.prompt_tokens_counted);
  if (r.ttft_us >= 0) j.millis("ttft_ms", r.ttft_us);
  if (r.backend_ttft_us >= 0) j.millis("backend_ttft_ms", r.backend_ttft_us);
  if (!r.finish_reason.empty()) j.str("finish_reason", r.finish_reason);
  if (!r.error.empty()) j.str("error", r.error);
  return j;
}

// Mirrors the metric updates of Server::Impl::finish_record.
void record_metrics(Metrics& metrics, const Record& rec, int64_t latency) {
  if (rec.path.starts_with("/v1/")) {
    metrics.observe_request(rec.model, rec.backend, rec.status, latency,
                            rec.stream ? rec.ttft_us : -1);
  }
}

// A gateway that has served a few models through a few backends already.
void warm_metrics(Metrics& m) {
  const char* models[] = {"claude-3-5-sonnet", "gpt-4o", "gpt-4o-mini", "llama-3.1-8b"};
  const char* backends[] = {"anthropic", "openai-primary", "local"};
  for (const char* model : models) {
    for (const char* backend : backends) {
      for (int status : {200, 429, 502}) {
        Record r;
        r.model = model;
        r.backend = backend;
        r.status = status;
        record_metrics(m, r, 1000);
      }
    }
  }
}

struct Gateway {
  Metrics metrics;
  AccessLog log{"/dev/null"};
  Record rec;
  Gateway() { warm_metrics(metrics); }
};

// One request's bookkeeping: id at the start, metrics and access log at the end.
__attribute__((noinline)) void one_request(Gateway& g, int64_t latency) {
  g.rec.request_id = ferry::make_request_id();
  record_metrics(g.metrics, g.rec, latency);
  if (g.log.enabled()) g.log.write(access_log_line(g.rec, latency).close());
}

void BM_Request(benchmark::State& state) {
  Gateway g;
  int64_t latency = 12345;
  for (auto _ : state) one_request(g, latency++ % 200000);
  g.log.flush();
}
BENCHMARK(BM_Request);

void BM_RequestId(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(ferry::make_request_id());
}
BENCHMARK(BM_RequestId);

void BM_Metrics(benchmark::State& state) {
  Gateway g;
  for (auto _ : state) record_metrics(g.metrics, g.rec, 12345);
}
BENCHMARK(BM_Metrics);

void BM_AccessLogLine(benchmark::State& state) {
  Record rec;
  rec.request_id = ferry::make_request_id();
  for (auto _ : state) benchmark::DoNotOptimize(access_log_line(rec, 12345).close());
}
BENCHMARK(BM_AccessLogLine);

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--loop") == 0) {
    long n = std::atol(argv[2]);
    Gateway g;
    for (long i = 0; i < n; ++i) {
      one_request(g, 12345 + i % 200000);
      // As the writer thread would at this rate (callgrind runs one thread at a time).
      if (i % 256 == 255) g.log.flush();
    }
    g.log.flush();
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
