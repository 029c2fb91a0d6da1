// Microbenchmark of the bookkeeping ferry does per proxied request once the answer is out:
// the request id, the three metric updates and the access-log line with its hand-off to the
// writer thread (what ServerState::finish_record in gateway/server.cpp does, with the same
// access_log_line).
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
#include "gateway/request_record.h"

namespace {

using ferry::gateway::AccessLog;
using ferry::gateway::JsonLine;
using ferry::gateway::Metrics;

using ferry::gateway::RequestRecord;

// A typical proxied, streamed request.
RequestRecord typical_record() {
  RequestRecord r;
  r.method = "POST";
  r.path = "/v1/chat/completions";
  r.key_id = "key_team_alpha";
  r.model = "gpt-4o-mini";
  r.backend = "openai-primary";
  r.target = "gpt-4o-mini-2024-07-18";
  r.attempts = 1;
  r.status = 200;
  r.stream = true;
  r.usage.prompt_tokens = 312;
  r.usage.completion_tokens = 9;
  r.finish_reason = "stop";
  r.ttft_us = 4567;
  return r;
}

// Mirrors the metric updates of Server::Impl::finish_record.
void record_metrics(Metrics& metrics, const RequestRecord& rec, int64_t latency) {
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
        RequestRecord r = typical_record();
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
  RequestRecord rec = typical_record();
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
  RequestRecord rec = typical_record();
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
