// Prometheus metrics: every series ferry exports is declared here, in one place.
// Thread-safe: counters are atomics; the label maps are guarded by a mutex taken only to find
// (or create) a series; Metrics::observe_request finds a request's three series with one lookup.
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

namespace ferry::gateway {

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

// A counter family with a fixed list of label names.
class CounterFamily {
 public:
  CounterFamily(std::string name, std::string help, std::vector<std::string> labels);
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
                  std::vector<double> bucket_bounds_seconds);
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
  std::atomic<int64_t> in_flight{0};
  std::atomic<int64_t> connections{0};

  // One answered request: counts it in `requests`, observes `latency_micros` in `latency`
  // and, when `ttft_micros` >= 0, `ttft_micros` in `ttft`. A request refused before its model
  // was known (bad JSON, no `model`) is labelled model="(none)" (kNoModel) in all three.
  // The same as those three calls, but the series are found once per (model, backend, status)
  // and remembered, so a request costs one hash lookup.
  void observe_request(std::string_view model, std::string_view backend, int status,
                       int64_t latency_micros, int64_t ttft_micros);

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

  std::mutex request_series_mu_;
  std::unordered_map<RequestKey, RequestSeries, RequestKeyHash, RequestKeyEq> request_series_;
  mutable std::mutex collectors_mu_;
  std::vector<std::function<void(std::string&)>> collectors_;
};

}  // namespace ferry::gateway
