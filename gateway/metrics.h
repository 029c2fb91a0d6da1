// Prometheus metrics: every series ferry exports is declared here, in one place.
// Thread-safe: counters are atomics; the label maps are guarded by a mutex taken only to find
// (or create) a series.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ferry::gateway {

// A counter family with a fixed list of label names.
class CounterFamily {
 public:
  CounterFamily(std::string name, std::string help, std::vector<std::string> labels);
  void inc(const std::vector<std::string>& label_values, int64_t by = 1);
  int64_t value(const std::vector<std::string>& label_values) const;
  void render(std::string& out) const;

 private:
  std::string name_;
  std::string help_;
  std::vector<std::string> labels_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<std::atomic<int64_t>>> series_;
};

// A histogram family over seconds with fixed buckets; one label list.
class HistogramFamily {
 public:
  HistogramFamily(std::string name, std::string help, std::vector<std::string> labels,
                  std::vector<double> bucket_bounds_seconds);
  void observe_micros(const std::vector<std::string>& label_values, int64_t micros);
  void render(std::string& out) const;

 private:
  struct Series {
    explicit Series(size_t buckets) : counts(buckets) {}
    std::vector<std::atomic<int64_t>> counts;  // non-cumulative per bucket, last is +Inf
    std::atomic<int64_t> sum_micros{0};
    std::atomic<int64_t> count{0};
  };
  std::string name_;
  std::string help_;
  std::vector<std::string> labels_;
  std::vector<int64_t> bounds_micros_;
  std::vector<double> bounds_seconds_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Series>> series_;
};

class Metrics {
 public:
  Metrics();

  CounterFamily requests;          // ferry_requests_total{model,backend,status}
  CounterFamily backend_errors;    // ferry_backend_errors_total{backend,kind}
  CounterFamily rejected;          // ferry_rejected_requests_total{reason}
  HistogramFamily latency;         // ferry_request_duration_seconds{model}
  HistogramFamily ttft;            // ferry_time_to_first_token_seconds{model}
  std::atomic<int64_t> in_flight{0};
  std::atomic<int64_t> connections{0};

  // Extra text appended by other modules (engine, ledger) at render time.
  void add_collector(std::function<void(std::string&)> collector);

  std::string render() const;

 private:
  mutable std::mutex collectors_mu_;
  std::vector<std::function<void(std::string&)>> collectors_;
};

}  // namespace ferry::gateway
