// Prometheus metrics: every series ferry exports is declared here, in one place (the table
// FERRY_METRIC_SERIES: name, type, help, labels), and rendered through it. Thread-safe: counters
// are atomics; the label maps are guarded by a mutex taken only to find (or create) a series;
// Metrics::observe_request finds a request's three series with one lookup.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ferry::engine {
struct LoadSnapshot;
}

namespace ferry::adapters {
class ReplicaPool;
}

namespace ferry::gateway {

// ---------------------------------------------------------------------------------------
// Every series /metrics shows: X(Id, "name", type, "help", "label,names"). A family is made
// from its Id (CounterFamily, HistogramFamily), and series read from elsewhere at render time
// (gauges of a snapshot, counters kept by another module) are written with append_family_head
// and append_sample, so a name, its type and its help exist only here. Rendered in the order of
// Metrics::render and its collectors, not of this table.
#define FERRY_METRIC_SERIES(X)                                                                     \
  X(Requests, "ferry_requests_total", kCounter,                                                    \
    "Requests answered, by model, backend and HTTP status.", "model,backend,status")               \
  X(ApiRequests, "ferry_api_requests_total", kCounter,                                             \
    "Requests answered, by front-end API (chat, completions, messages, responses, embeddings) "    \
    "and HTTP status.",                                                                            \
    "api,status")                                                                                  \
  X(ApiTokens, "ferry_api_tokens_total", kCounter,                                                 \
    "Tokens of answered requests as the backend reported them, by front-end API and kind "         \
    "(input, output).",                                                                            \
    "api,kind")                                                                                    \
  X(ApiErrors, "ferry_api_errors_total", kCounter,                                                 \
    "Requests that ended in an error (a 4xx/5xx, or an error after the stream began), by "         \
    "front-end API.",                                                                              \
    "api")                                                                                         \
  X(BackendErrors, "ferry_backend_errors_total", kCounter,                                         \
    "Backend failures by backend and kind.", "backend,kind")                                       \
  X(RejectedRequests, "ferry_rejected_requests_total", kCounter,                                   \
    "Requests refused before routing, by reason.", "reason")                                       \
  X(RequestDuration, "ferry_request_duration_seconds", kHistogram,                                 \
    "Time from request read to last byte sent.", "model")                                          \
  X(TimeToFirstToken, "ferry_time_to_first_token_seconds", kHistogram,                             \
    "Time from request read to the first streamed chunk sent.", "model")                           \
  X(InFlightRequests, "ferry_in_flight_requests", kGauge, "Requests being served now.", "")        \
  X(OpenConnections, "ferry_open_connections", kGauge, "Client connections open now.", "")         \
  X(RouteDecisions, "ferry_route_decisions_total", kCounter,                                       \
    "Requests routed, by the rule that matched and the first target.", "rule,target")              \
  X(RouteFallbacks, "ferry_route_fallbacks_total", kCounter,                                       \
    "Hops that failed before anything was sent, so the next one was tried.", "from,to")            \
  X(RouteRejected, "ferry_route_rejected_total", kCounter,                                         \
    "Requests answered by routing without a backend, by reason.", "reason")                        \
  X(PromptTokensChecked, "ferry_prompt_tokens_checked_total", kCounter,                            \
    "Requests whose prompt count could be compared with the backend's.", "model")                  \
  X(PromptTokensMismatch, "ferry_prompt_tokens_mismatch_total", kCounter,                          \
    "Requests whose backend-reported prompt_tokens differ from ferry's own count.", "model")       \
  X(UsageRejected, "ferry_usage_rejected_total", kCounter,                                         \
    "Attempts whose backend usage was implausible or malformed, so ferry billed its own count.",   \
    "model")                                                                                       \
  X(BudgetSoftExceeded, "ferry_budget_soft_exceeded_total", kCounter,                              \
    "Requests admitted past a soft budget.", "budget")                                             \
  X(ShadowRequests, "ferry_shadow_requests_total", kCounter,                                       \
    "Shadow copies sent, by target and outcome.", "target,outcome")                                \
  X(BackendHealthy, "ferry_backend_healthy", kGauge,                                               \
    "1 when the target's circuit breaker lets requests through.", "target")                        \
  X(BreakerOpened, "ferry_breaker_opened_total", kCounter,                                         \
    "Times a target's circuit breaker opened.", "target")                                          \
  X(PolicyReloads, "ferry_policy_reloads_total", kCounter, "Policy reload attempts by outcome.",   \
    "outcome")                                                                                     \
  X(PolicyInfo, "ferry_policy_info", kGauge, "The active policy version.", "version")              \
  X(LedgerRowsCommitted, "ferry_ledger_rows_committed_total", kCounter,                            \
    "Ledger rows made durable.", "")                                                               \
  X(LedgerBatches, "ferry_ledger_batches_total", kCounter,                                         \
    "Group commits written (rows per commit = rows committed / batches).", "")                     \
  X(LedgerPending, "ferry_ledger_pending", kGauge, "Rows admitted or queued, not yet durable.",    \
    "")                                                                                            \
  X(LedgerWriteFailures, "ferry_ledger_write_failures_total", kCounter,                            \
    "Group commits that failed (then retried).", "")                                               \
  X(LedgerHealthy, "ferry_ledger_healthy", kGauge, "1 when the ledger can write.", "")             \
  X(LedgerStoreDown, "ferry_ledger_store_down", kGauge,                                            \
    "1 while the PostgreSQL store cannot be reached (rows go to the journal).", "")                \
  X(LedgerJournalRows, "ferry_ledger_journal_rows", kGauge,                                        \
    "Rows kept in the local journal, not yet shipped to the store.", "")                           \
  X(LedgerLogRows, "ferry_ledger_log_rows", kGauge,                                                \
    "Rows durable in the SQLite ledger's row log, not yet committed to the file.", "")             \
  X(BudgetHardRefusals, "ferry_budget_hard_refusals_total", kCounter,                              \
    "Requests refused by a hard budget.", "")                                                      \
  X(RateLimitRefusals, "ferry_rate_limit_refusals_total", kCounter,                                \
    "Requests refused by a rate limit.", "")                                                       \
  X(BudgetSpentMicros, "ferry_budget_spent_micros", kGauge,                                        \
    "Settled cost in the budget's current period, micro-units.", "budget")                         \
  X(ReplicaOutstanding, "ferry_replica_outstanding", kGauge,                                       \
    "Requests in flight on one replica of a pooled backend.", "backend,replica")                   \
  X(ReplicaRequests, "ferry_replica_requests_total", kCounter,                                     \
    "Requests sent to one replica of a pooled backend.", "backend,replica")                        \
  X(ReplicaFailures, "ferry_replica_failures_total", kCounter,                                     \
    "Requests that failed on one replica (connection, 5xx, timeout).", "backend,replica")          \
  X(ReplicaHealthy, "ferry_replica_healthy", kGauge,                                               \
    "1 when the replica's circuit breaker lets requests through.", "backend,replica")              \
  X(ReplicaLatencyEwmaUs, "ferry_replica_latency_ewma_us", kGauge,                                 \
    "Moving average of the replica's answer time, microseconds.", "backend,replica")               \
  X(BackendConnections, "ferry_backend_connections_total", kCounter,                               \
    "Upstream connections by backend, opened or reused from the keep-alive pool.", "backend,how")  \
  X(AccessLogDropped, "ferry_access_log_dropped_total", kCounter,                                  \
    "Access-log lines dropped because the writer fell behind.", "")                                \
  X(LocalQueueDepth, "ferry_local_queue_depth", kGauge, "Requests waiting for a sequence slot.",   \
    "backend")                                                                                     \
  X(LocalActiveSequences, "ferry_local_active_sequences", kGauge,                                  \
    "Sequences being prefilled or decoded.", "backend")                                            \
  X(LocalPausedSequences, "ferry_local_paused_sequences", kGauge,                                  \
    "Sequences paused: their client reads slowly.", "backend")                                     \
  X(LocalKvBytes, "ferry_local_kv_bytes", kGauge,                                                  \
    "KV cache bytes allocated (running and cached prefixes).", "backend")                          \
  X(LocalKvEmbeddingsBytes, "ferry_local_kv_embeddings_bytes", kGauge,                             \
    "Of the KV cache bytes allocated, those held by embeddings inputs being computed.", "backend") \
  X(LocalKvPeakBytes, "ferry_local_kv_peak_bytes", kGauge,                                         \
    "The most KV cache bytes allocated at any forward pass since start.", "backend")               \
  X(LocalKvBudgetBytes, "ferry_local_kv_budget_bytes", kGauge, "KV cache memory budget in bytes.", \
    "backend")                                                                                     \
  X(LocalEstWaitMs, "ferry_local_est_wait_ms", kGauge,                                             \
    "Estimated wait for a sequence slot, in ms.", "backend")                                       \
  X(LocalTokensPerSecond, "ferry_local_tokens_per_second", kGauge,                                 \
    "Generated tokens per second (last 10 s).", "backend")                                         \
  X(LocalPrefixCacheHitRatio, "ferry_local_prefix_cache_hit_ratio", kGauge,                        \
    "Prompt tokens reused from the prefix cache / prompt tokens.", "backend")                      \
  X(LocalSequencesCancelled, "ferry_local_sequences_cancelled_total", kCounter,                    \
    "Sequences cancelled by the client or stopped at their deadline.", "backend")                  \
  X(LocalSpecDrafted, "ferry_local_spec_drafted_total", kCounter,                                  \
    "Tokens drafted by prompt lookup and verified (speculative decoding).", "backend")             \
  X(LocalSpecAccepted, "ferry_local_spec_accepted_total", kCounter,                                \
    "Drafted tokens the model agreed with and kept (each one saved a decode step).", "backend")

enum class MetricType : uint8_t { kCounter, kGauge, kHistogram };

enum class MetricSeries : uint8_t {
#define FERRY_METRIC_ID(id, name, type, help, labels) k##id,
  FERRY_METRIC_SERIES(FERRY_METRIC_ID)
#undef FERRY_METRIC_ID
};

struct MetricSpec {
  MetricSeries id;
  std::string_view name;
  MetricType type;
  std::string_view help;
  std::string_view labels;  // label names, comma-separated; "" for none
};

inline constexpr MetricSpec kMetricTable[] = {
#define FERRY_METRIC_SPEC(id, name, type, help, labels) \
  {MetricSeries::k##id, name, MetricType::type, help, labels},
    FERRY_METRIC_SERIES(FERRY_METRIC_SPEC)
#undef FERRY_METRIC_SPEC
};

constexpr const MetricSpec& metric_spec(MetricSeries id) {
  return kMetricTable[static_cast<size_t>(id)];
}
// "counter", "gauge", "histogram": the word of a family's TYPE line.
constexpr std::string_view metric_type_name(MetricType type) {
  return type == MetricType::kCounter ? "counter"
         : type == MetricType::kGauge ? "gauge"
                                      : "histogram";
}

// "# HELP name help\n# TYPE name type\n" of a family.
void append_family_head(std::string& out, MetricSeries id);
// One sample line of a counter or gauge: name{label="value",...} value. `label_values` are in
// the order of the family's labels and escaped as the text format requires.
void append_sample(std::string& out, MetricSeries id,
                   std::initializer_list<std::string_view> label_values, std::string_view value);
void append_sample(std::string& out, MetricSeries id,
                   std::initializer_list<std::string_view> label_values, int64_t value);
// A label value escaped as Prometheus' text format requires (\\, \", \n).
void append_label_value(std::string& out, std::string_view value);
// The ferry_local_* families: for each, one sample per in-process backend, `loads[i]` being
// the scheduler snapshot of the backend named `backends[i]` (LocalBackend::load()).
void append_local_backend_metrics(std::string& out, std::span<const std::string_view> backends,
                                  std::span<const engine::LoadSnapshot> loads);
// The ferry_replica_* families: one sample per replica of each pooled backend.
void append_replica_metrics(std::string& out, std::span<const adapters::ReplicaPool* const> pools);

// Label values of one series, in the order of the family's label names. Views: finding a series
// that exists allocates nothing.
using LabelValues = std::initializer_list<std::string_view>;

// Orders label lists as std::vector<std::string>'s operator< does, also against views, so a
// family can find a series without building a vector.
struct LabelsLess {
  using is_transparent = void;
  bool operator()(const std::vector<std::string>& a, const std::vector<std::string>& b) const {
    return a < b;
  }
  bool operator()(const std::vector<std::string>& a, std::span<const std::string_view> b) const;
  bool operator()(std::span<const std::string_view> a, const std::vector<std::string>& b) const;
};

// A family's recently found series by the hash of their label values (direct-mapped, a slot a
// hash): a request's lookups of series that exist compare their labels once, not down the
// map's tree. Entries point into the family's map, whose series are never removed. Guarded by
// the family's mutex.
struct SeriesIndex {
  struct Slot {
    uint64_t hash = 0;
    const std::vector<std::string>* labels = nullptr;  // null: empty
    void* series = nullptr;
  };
  static constexpr size_t kSlots = 32;
  std::array<Slot, kSlots> slots{};
};

// A counter family with a fixed list of label names.
class CounterFamily {
 public:
  CounterFamily(std::string name, std::string help, std::vector<std::string> labels);
  explicit CounterFamily(MetricSeries id);  // name, help and labels from the table
  void inc(LabelValues label_values, int64_t by = 1);
  int64_t value(LabelValues label_values) const;
  // The series' counter, created at zero on first use; valid as long as the family.
  std::atomic<int64_t>* series(LabelValues label_values);
  void render(std::string& out) const;

 private:
  std::string name_;
  std::string help_;
  std::vector<std::string> labels_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<std::atomic<int64_t>>, LabelsLess> series_;
  SeriesIndex index_;
};

// A histogram family over seconds with fixed buckets; one label list.
class HistogramFamily {
 public:
  // One label set's buckets.
  struct Series {
    explicit Series(size_t buckets) : counts(buckets) {}
    std::vector<std::atomic<int64_t>> counts;  // non-cumulative per bucket, last is +Inf
    std::atomic<int64_t> sum_micros{0};
    std::atomic<int64_t> count{0};
  };

  HistogramFamily(std::string name, std::string help, std::vector<std::string> labels,
                  std::vector<double> bounds);
  HistogramFamily(MetricSeries id, std::vector<double> bounds);
  void observe_micros(LabelValues label_values, int64_t micros);
  // The series, created empty on first use; valid as long as the family.
  Series* series(LabelValues label_values);
  void observe_micros(Series& series, int64_t micros);
  void render(std::string& out) const;

 private:
  std::string name_;
  std::string help_;
  std::vector<std::string> labels_;
  std::vector<int64_t> bounds_micros_;
  std::vector<double> bounds_seconds_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Series>, LabelsLess> series_;
  SeriesIndex index_;
};

class Metrics {
 public:
  Metrics();

  static constexpr std::string_view kNoModel = "(none)";

  CounterFamily requests;        // ferry_requests_total{model,backend,status}
  CounterFamily backend_errors;  // ferry_backend_errors_total{backend,kind}
  CounterFamily rejected;        // ferry_rejected_requests_total{reason}
  HistogramFamily latency;       // ferry_request_duration_seconds{model}
  HistogramFamily ttft;          // ferry_time_to_first_token_seconds{model}
  CounterFamily api_requests;    // ferry_api_requests_total{api,status}
  CounterFamily api_tokens;      // ferry_api_tokens_total{api,kind}
  CounterFamily api_errors;      // ferry_api_errors_total{api}
  std::atomic<int64_t> in_flight{0};
  std::atomic<int64_t> connections{0};

  // One answered request: counts it in `requests`, observes `latency_micros` in `latency`
  // and, when `ttft_micros` >= 0, `ttft_micros` in `ttft`. A request refused before its model
  // was known (bad JSON, no `model`) is labelled model="(none)" (kNoModel) in all three.
  // The same as those three calls, but the series are found once per (model, backend, status)
  // and remembered, so a request costs one hash lookup.
  void observe_request(std::string_view model, std::string_view backend, int status,
                       int64_t latency_micros, int64_t ttft_micros);

  // One answered request of front-end `api` (api::endpoint_name): its status, the tokens its
  // backend reported (negative: none), and whether it ended in an error. Its series are found
  // once per (api, status) and remembered, as observe_request's.
  void observe_api(std::string_view api, int status, int64_t input_tokens, int64_t output_tokens,
                   bool failed);

  // Extra text appended by other modules (engine, ledger) at render time.
  void add_collector(std::function<void(std::string&)> collector);

  std::string render() const;

 private:
  struct RequestKey {
    std::string model;
    std::string backend;
    int status = 0;
  };
  struct RequestKeyView {
    std::string_view model;
    std::string_view backend;
    int status = 0;
  };
  // Seeded per Metrics object: model names come from clients.
  struct RequestKeyHash {
    using is_transparent = void;
    uint64_t seed = 0;
    size_t operator()(const RequestKeyView& k) const;
    size_t operator()(const RequestKey& k) const {
      return (*this)(RequestKeyView{k.model, k.backend, k.status});
    }
  };
  struct RequestKeyEq {
    using is_transparent = void;
    static RequestKeyView view(const RequestKey& k) { return {k.model, k.backend, k.status}; }
    static RequestKeyView view(const RequestKeyView& k) { return k; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      RequestKeyView x = view(a);
      RequestKeyView y = view(b);
      return x.status == y.status && x.model == y.model && x.backend == y.backend;
    }
  };
  struct RequestSeries {
    std::atomic<int64_t>* requests = nullptr;
    HistogramFamily::Series* latency = nullptr;  // null when the model is empty
    HistogramFamily::Series* ttft = nullptr;     // created at the first time to first token
  };

  // observe_api's series of one (api, status); each created when first counted in.
  struct ApiSeries {
    std::atomic<int64_t>* requests = nullptr;
    std::atomic<int64_t>* input_tokens = nullptr;
    std::atomic<int64_t>* output_tokens = nullptr;
    std::atomic<int64_t>* errors = nullptr;
  };

  std::mutex request_series_mu_;  // guards request_series_ and api_series_
  std::unordered_map<RequestKey, RequestSeries, RequestKeyHash, RequestKeyEq> request_series_;
  // Keyed by RequestKey{api, "", status}: the api name in `model`, no backend.
  std::unordered_map<RequestKey, ApiSeries, RequestKeyHash, RequestKeyEq> api_series_;
  mutable std::mutex collectors_mu_;
  std::vector<std::function<void(std::string&)>> collectors_;
};

}  // namespace ferry::gateway
