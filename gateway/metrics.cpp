#include "gateway/metrics.h"

#include "adapters/replica_pool.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>

#include "local_engine/scheduler.h"

namespace ferry::gateway {

namespace {

// `values` in the order of `names` (a vector of strings, or a span of views).
template <typename Values>
void append_labels(std::string& out, const std::vector<std::string>& names, const Values& values,
                   const char* extra_name = nullptr, const std::string& extra_value = {}) {
  if (names.empty() && extra_name == nullptr) return;
  out += '{';
  bool first = true;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!first) out += ',';
    first = false;
    out += names[i];
    out += "=\"";
    append_label_value(out, i < values.size() ? std::string_view(values[i]) : std::string_view());
    out += '"';
  }
  if (extra_name != nullptr) {
    if (!first) out += ',';
    out += extra_name;
    out += "=\"";
    out += extra_value;
    out += '"';
  }
  out += '}';
}

// "%g": six significant digits (bucket bounds, and the ferry_local_* ratios and rates).
std::string format_double(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

std::string micros_as_seconds(int64_t micros) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%lld.%06lld", static_cast<long long>(micros / 1000000),
                static_cast<long long>(micros % 1000000));
  return buf;
}

// Label lists compared as std::vector<std::string>'s operator< compares them.
template <typename A, typename B>
bool labels_less(const A& a, const B& b) {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                      [](std::string_view x, std::string_view y) { return x < y; });
}

// A quick hash for short label values: 8 bytes a step, multiply and fold.
uint64_t hash_mix(uint64_t h, std::string_view s) {
  constexpr uint64_t kMul = 0x9e3779b97f4a7c15ULL;
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * kMul;
    h ^= h >> 29;
  }
  uint64_t tail = s.size();
  for (; i < s.size(); ++i) tail = (tail << 8) | static_cast<unsigned char>(s[i]);
  h = (h ^ tail) * kMul;
  return h ^ (h >> 29);
}

// The label names of a table entry ("a,b" -> {"a", "b"}).
std::vector<std::string> label_names(std::string_view labels) {
  std::vector<std::string> names;
  while (!labels.empty()) {
    size_t comma = labels.find(',');
    names.emplace_back(labels.substr(0, comma));
    labels = comma == std::string_view::npos ? std::string_view() : labels.substr(comma + 1);
  }
  return names;
}

}  // namespace

void append_label_value(std::string& out, std::string_view v) {
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

void append_family_head(std::string& out, MetricSeries id) {
  const MetricSpec& spec = metric_spec(id);
  out.append("# HELP ").append(spec.name).append(" ").append(spec.help);
  out.append("\n# TYPE ").append(spec.name).append(" ").append(metric_type_name(spec.type));
  out += '\n';
}

void append_sample(std::string& out, MetricSeries id,
                   std::initializer_list<std::string_view> label_values, std::string_view value) {
  const MetricSpec& spec = metric_spec(id);
  out.append(spec.name);
  append_labels(out, label_names(spec.labels),
                std::span<const std::string_view>(label_values.begin(), label_values.size()));
  out += ' ';
  out.append(value);
  out += '\n';
}

void append_sample(std::string& out, MetricSeries id,
                   std::initializer_list<std::string_view> label_values, int64_t value) {
  append_sample(out, id, label_values, std::to_string(value));
}

bool LabelsLess::operator()(const std::vector<std::string>& a,
                            std::span<const std::string_view> b) const {
  return labels_less(a, b);
}

bool LabelsLess::operator()(std::span<const std::string_view> a,
                            const std::vector<std::string>& b) const {
  return labels_less(a, b);
}

namespace {

// The series of `label_values` in a family's map (its mutex held), made by `make` when new;
// looked up in the family's index first.
template <typename Map, typename Make>
auto* find_or_add(Map& series, SeriesIndex& index, LabelValues label_values, const Make& make) {
  using Series = typename Map::mapped_type::element_type;
  std::span<const std::string_view> key(label_values.begin(), label_values.size());
  uint64_t hash = key.size();
  for (std::string_view v : key) hash = hash_mix(hash, v);
  SeriesIndex::Slot& slot = index.slots[hash % SeriesIndex::kSlots];
  if (slot.labels != nullptr && slot.hash == hash &&
      std::equal(key.begin(), key.end(), slot.labels->begin(), slot.labels->end())) {
    return static_cast<Series*>(slot.series);
  }
  auto it = series.find(key);
  if (it == series.end()) {
    it = series.emplace(std::vector<std::string>(key.begin(), key.end()), make()).first;
  }
  slot = {hash, &it->first, it->second.get()};
  return it->second.get();
}

}  // namespace

CounterFamily::CounterFamily(std::string name, std::string help, std::vector<std::string> labels)
    : name_(std::move(name)), help_(std::move(help)), labels_(std::move(labels)) {}

CounterFamily::CounterFamily(MetricSeries id)
    : CounterFamily(std::string(metric_spec(id).name), std::string(metric_spec(id).help),
                    label_names(metric_spec(id).labels)) {}

std::atomic<int64_t>* CounterFamily::series(LabelValues label_values) {
  std::lock_guard lock(mu_);
  return find_or_add(series_, index_, label_values,
                     [] { return std::make_unique<std::atomic<int64_t>>(0); });
}

void CounterFamily::inc(LabelValues label_values, int64_t by) {
  series(label_values)->fetch_add(by, std::memory_order_relaxed);
}

int64_t CounterFamily::value(LabelValues label_values) const {
  std::span<const std::string_view> key(label_values.begin(), label_values.size());
  std::lock_guard lock(mu_);
  auto it = series_.find(key);
  return it == series_.end() ? 0 : it->second->load(std::memory_order_relaxed);
}

void CounterFamily::render(std::string& out) const {
  out += "# HELP " + name_ + " " + help_ + "\n# TYPE " + name_ + " counter\n";
  std::lock_guard lock(mu_);
  for (const auto& [values, counter] : series_) {
    out += name_;
    append_labels(out, labels_, values);
    out += ' ';
    out += std::to_string(counter->load(std::memory_order_relaxed));
    out += '\n';
  }
}

HistogramFamily::HistogramFamily(std::string name, std::string help,
                                 std::vector<std::string> labels, std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      labels_(std::move(labels)),
      bounds_seconds_(std::move(bounds)) {
  for (double b : bounds_seconds_) bounds_micros_.push_back(static_cast<int64_t>(b * 1e6));
}

HistogramFamily::HistogramFamily(MetricSeries id, std::vector<double> bounds)
    : HistogramFamily(std::string(metric_spec(id).name), std::string(metric_spec(id).help),
                      label_names(metric_spec(id).labels), std::move(bounds)) {}

HistogramFamily::Series* HistogramFamily::series(LabelValues label_values) {
  std::lock_guard lock(mu_);
  return find_or_add(series_, index_, label_values,
                     [this] { return std::make_unique<Series>(bounds_micros_.size() + 1); });
}

void HistogramFamily::observe_micros(LabelValues label_values, int64_t micros) {
  observe_micros(*series(label_values), micros);
}

void HistogramFamily::observe_micros(Series& s, int64_t micros) {
  size_t i = 0;
  while (i < bounds_micros_.size() && micros > bounds_micros_[i]) ++i;
  s.counts[i].fetch_add(1, std::memory_order_relaxed);
  s.sum_micros.fetch_add(micros, std::memory_order_relaxed);
  s.count.fetch_add(1, std::memory_order_relaxed);
}

void HistogramFamily::render(std::string& out) const {
  out += "# HELP " + name_ + " " + help_ + "\n# TYPE " + name_ + " histogram\n";
  std::lock_guard lock(mu_);
  for (const auto& [values, s] : series_) {
    int64_t cumulative = 0;
    for (size_t i = 0; i <= bounds_micros_.size(); ++i) {
      cumulative += s->counts[i].load(std::memory_order_relaxed);
      out += name_ + "_bucket";
      append_labels(out, labels_, values, "le",
                    i < bounds_seconds_.size() ? format_double(bounds_seconds_[i]) : "+Inf");
      out += ' ' + std::to_string(cumulative) + '\n';
    }
    out += name_ + "_sum";
    append_labels(out, labels_, values);
    out += ' ' + micros_as_seconds(s->sum_micros.load(std::memory_order_relaxed)) + '\n';
    out += name_ + "_count";
    append_labels(out, labels_, values);
    out += ' ' + std::to_string(s->count.load(std::memory_order_relaxed)) + '\n';
  }
}

namespace {
const std::vector<double> kLatencyBuckets = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                             1,     2.5,   5,    10,    30,   60,  120};
}

Metrics::Metrics()
    : requests(MetricSeries::kRequests),
      backend_errors(MetricSeries::kBackendErrors),
      rejected(MetricSeries::kRejectedRequests),
      latency(MetricSeries::kRequestDuration, kLatencyBuckets),
      ttft(MetricSeries::kTimeToFirstToken, kLatencyBuckets),
      api_requests(MetricSeries::kApiRequests),
      api_tokens(MetricSeries::kApiTokens),
      api_errors(MetricSeries::kApiErrors),
      request_series_(
          16, RequestKeyHash{(uint64_t{std::random_device{}()} << 32) ^ std::random_device{}()}),
      api_series_(16, request_series_.hash_function()) {}

size_t Metrics::RequestKeyHash::operator()(const RequestKeyView& k) const {
  return hash_mix(hash_mix(seed ^ static_cast<uint64_t>(k.status), k.model), k.backend);
}

void Metrics::observe_request(std::string_view model, std::string_view backend, int status,
                              int64_t latency_micros, int64_t ttft_micros) {
  if (model.empty()) model = kNoModel;
  bool want_ttft = ttft_micros >= 0;
  RequestSeries s;
  {
    std::lock_guard lock(request_series_mu_);
    auto it = request_series_.find(RequestKeyView{model, backend, status});
    if (it == request_series_.end()) {
      RequestSeries created;
      std::string status_text = std::to_string(status);
      created.requests = requests.series({model, backend, status_text});
      created.latency = latency.series({model});
      RequestKey key{std::string(model), std::string(backend), status};
      it = request_series_.emplace(std::move(key), created).first;
    }
    // Like the ttft family itself, the series exists only once something was observed in it.
    if (want_ttft && it->second.ttft == nullptr) it->second.ttft = ttft.series({model});
    s = it->second;
  }
  s.requests->fetch_add(1, std::memory_order_relaxed);
  latency.observe_micros(*s.latency, latency_micros);
  if (want_ttft) ttft.observe_micros(*s.ttft, ttft_micros);
}

void Metrics::observe_api(std::string_view api, int status, int64_t input_tokens,
                          int64_t output_tokens, bool failed) {
  ApiSeries s;
  {
    std::lock_guard lock(request_series_mu_);
    auto it = api_series_.find(RequestKeyView{api, {}, status});
    if (it == api_series_.end()) {
      ApiSeries created;
      created.requests = api_requests.series({api, std::to_string(status)});
      it = api_series_.emplace(RequestKey{std::string(api), {}, status}, created).first;
    }
    // Like the families themselves, a series exists only once something was counted in it.
    ApiSeries& known = it->second;
    if (input_tokens > 0 && known.input_tokens == nullptr) {
      known.input_tokens = api_tokens.series({api, "input"});
    }
    if (output_tokens > 0 && known.output_tokens == nullptr) {
      known.output_tokens = api_tokens.series({api, "output"});
    }
    if (failed && known.errors == nullptr) known.errors = api_errors.series({api});
    s = known;
  }
  s.requests->fetch_add(1, std::memory_order_relaxed);
  if (input_tokens > 0) s.input_tokens->fetch_add(input_tokens, std::memory_order_relaxed);
  if (output_tokens > 0) s.output_tokens->fetch_add(output_tokens, std::memory_order_relaxed);
  if (failed) s.errors->fetch_add(1, std::memory_order_relaxed);
}

void Metrics::add_collector(std::function<void(std::string&)> collector) {
  std::lock_guard lock(collectors_mu_);
  collectors_.push_back(std::move(collector));
}

std::string Metrics::render() const {
  std::string out;
  out.reserve(8192);
  requests.render(out);
  backend_errors.render(out);
  rejected.render(out);
  latency.render(out);
  ttft.render(out);
  api_requests.render(out);
  api_tokens.render(out);
  api_errors.render(out);
  append_family_head(out, MetricSeries::kInFlightRequests);
  append_sample(out, MetricSeries::kInFlightRequests, {}, in_flight.load());
  append_family_head(out, MetricSeries::kOpenConnections);
  append_sample(out, MetricSeries::kOpenConnections, {}, connections.load());
  std::lock_guard lock(collectors_mu_);
  for (const auto& c : collectors_) c(out);
  return out;
}

void append_local_backend_metrics(std::string& out, std::span<const std::string_view> backends,
                                  std::span<const engine::LoadSnapshot> loads) {
  using Snapshot = engine::LoadSnapshot;
  struct Family {
    MetricSeries id;
    std::string (*value)(const Snapshot&);
  };
  static const Family kFamilies[] = {
      {MetricSeries::kLocalQueueDepth,
       [](const Snapshot& s) { return std::to_string(s.queue_depth); }},
      {MetricSeries::kLocalActiveSequences,
       [](const Snapshot& s) { return std::to_string(s.active_sequences); }},
      {MetricSeries::kLocalPausedSequences,
       [](const Snapshot& s) { return std::to_string(s.paused_sequences); }},
      {MetricSeries::kLocalKvBytes,
       [](const Snapshot& s) { return std::to_string(s.kv_bytes_used); }},
      {MetricSeries::kLocalKvEmbeddingsBytes,
       [](const Snapshot& s) { return std::to_string(s.kv_bytes_embeddings); }},
      {MetricSeries::kLocalKvPeakBytes,
       [](const Snapshot& s) { return std::to_string(s.kv_bytes_peak); }},
      {MetricSeries::kLocalKvBudgetBytes,
       [](const Snapshot& s) { return std::to_string(s.kv_budget_bytes); }},
      {MetricSeries::kLocalEstWaitMs,
       [](const Snapshot& s) { return std::to_string(s.est_wait_ms); }},
      {MetricSeries::kLocalTokensPerSecond,
       [](const Snapshot& s) { return format_double(s.tokens_per_second); }},
      {MetricSeries::kLocalPrefixCacheHitRatio,
       [](const Snapshot& s) { return format_double(s.prefix_cache_hit_ratio); }},
      {MetricSeries::kLocalSequencesCancelled,
       [](const Snapshot& s) { return std::to_string(s.sequences_cancelled); }},
      {MetricSeries::kLocalSpecDrafted,
       [](const Snapshot& s) { return std::to_string(s.spec_drafted_total); }},
      {MetricSeries::kLocalSpecAccepted,
       [](const Snapshot& s) { return std::to_string(s.spec_accepted_total); }},
  };
  for (const Family& f : kFamilies) {
    append_family_head(out, f.id);
    for (size_t i = 0; i < backends.size() && i < loads.size(); ++i) {
      append_sample(out, f.id, {backends[i]}, f.value(loads[i]));
    }
  }
}

void append_replica_metrics(std::string& out, std::span<const adapters::ReplicaPool* const> pools) {
  if (pools.empty()) return;
  std::vector<std::vector<adapters::ReplicaSnapshot>> snaps;
  for (const auto* p : pools) snaps.push_back(p->snapshot());
  using Snap = adapters::ReplicaSnapshot;
  struct Family {
    MetricSeries id;
    int64_t (*value)(const Snap&);
  };
  static const Family kFamilies[] = {
      {MetricSeries::kReplicaOutstanding, [](const Snap& s) { return s.outstanding; }},
      {MetricSeries::kReplicaRequests, [](const Snap& s) { return s.requests; }},
      {MetricSeries::kReplicaFailures, [](const Snap& s) { return s.failures; }},
      {MetricSeries::kReplicaHealthy, [](const Snap& s) { return int64_t{s.healthy ? 1 : 0}; }},
      {MetricSeries::kReplicaLatencyEwmaUs, [](const Snap& s) { return s.latency_ewma_us; }},
  };
  for (const Family& f : kFamilies) {
    append_family_head(out, f.id);
    for (size_t p = 0; p < pools.size(); ++p) {
      for (const Snap& s : snaps[p])
        append_sample(out, f.id, {pools[p]->name(), s.url}, f.value(s));
    }
  }
}

}  // namespace ferry::gateway
