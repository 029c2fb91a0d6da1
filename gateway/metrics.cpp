#include "gateway/metrics.h"

#include <cstdio>

namespace ferry::gateway {

namespace {

// Label values escaped as Prometheus' text format requires.
void append_escaped(std::string& out, const std::string& v) {
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

void append_labels(std::string& out, const std::vector<std::string>& names,
                   const std::vector<std::string>& values, const char* extra_name = nullptr,
                   const std::string& extra_value = {}) {
  if (names.empty() && extra_name == nullptr) return;
  out += '{';
  bool first = true;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!first) out += ',';
    first = false;
    out += names[i];
    out += "=\"";
    append_escaped(out, i < values.size() ? values[i] : std::string());
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

std::string format_seconds(double s) {
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

}  // namespace

CounterFamily::CounterFamily(std::string name, std::string help, std::vector<std::string> labels)
    : name_(std::move(name)), help_(std::move(help)), labels_(std::move(labels)) {}

void CounterFamily::inc(const std::vector<std::string>& label_values, int64_t by) {
  std::atomic<int64_t>* counter = nullptr;
  {
    std::lock_guard lock(mu_);
    auto& slot = series_[label_values];
    if (!slot) slot = std::make_unique<std::atomic<int64_t>>(0);
    counter = slot.get();
  }
  counter->fetch_add(by, std::memory_order_relaxed);
}

int64_t CounterFamily::value(const std::vector<std::string>& label_values) const {
  std::lock_guard lock(mu_);
  auto it = series_.find(label_values);
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

void HistogramFamily::observe_micros(const std::vector<std::string>& label_values,
                                     int64_t micros) {
  Series* s = nullptr;
  {
    std::lock_guard lock(mu_);
    auto& slot = series_[label_values];
    if (!slot) slot = std::make_unique<Series>(bounds_micros_.size() + 1);
    s = slot.get();
  }
  size_t i = 0;
  while (i < bounds_micros_.size() && micros > bounds_micros_[i]) ++i;
  s->counts[i].fetch_add(1, std::memory_order_relaxed);
  s->sum_micros.fetch_add(micros, std::memory_order_relaxed);
  s->count.fetch_add(1, std::memory_order_relaxed);
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
                    i < bounds_seconds_.size() ? format_seconds(bounds_seconds_[i]) : "+Inf");
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
const std::vector<double> kLatencyBuckets = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                             0.5,   1,     2.5,  5,     10,   30,  60, 120};
}

Metrics::Metrics()
    : requests("ferry_requests_total", "Requests answered, by model, backend and HTTP status.",
               {"model", "backend", "status"}),
      backend_errors("ferry_backend_errors_total", "Backend failures by backend and kind.",
                     {"backend", "kind"}),
      rejected("ferry_rejected_requests_total",
               "Requests refused before routing, by reason.", {"reason"}),
      latency("ferry_request_duration_seconds", "Time from request read to last byte sent.",
              {"model"}, kLatencyBuckets),
      ttft("ferry_time_to_first_token_seconds",
           "Time from request read to the first streamed chunk sent.", {"model"},
           kLatencyBuckets) {}

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
  out += "# HELP ferry_in_flight_requests Requests being served now.\n"
         "# TYPE ferry_in_flight_requests gauge\nferry_in_flight_requests " +
         std::to_string(in_flight.load()) + "\n";
  out += "# HELP ferry_open_connections Client connections open now.\n"
         "# TYPE ferry_open_connections gauge\nferry_open_connections " +
         std::to_string(connections.load()) + "\n";
  std::lock_guard lock(collectors_mu_);
  for (const auto& c : collectors_) c(out);
  return out;
}

}  // namespace ferry::gateway
