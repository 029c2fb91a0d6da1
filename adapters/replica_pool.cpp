#include "adapters/replica_pool.h"

#include <algorithm>
#include <chrono>

namespace ferry::adapters {

struct ReplicaPool::Replica {
  std::string url;
  std::unique_ptr<HttpBackend> http;
  CircuitBreaker breaker;
  uint64_t seed = 0;  // the replica's own hash, for rendezvous hashing
  std::atomic<int64_t> outstanding{0};
  std::atomic<int64_t> requests{0};
  std::atomic<int64_t> failures{0};
  std::atomic<int64_t> latency_ewma_us{0};     // of successful answers only
  std::atomic<int64_t> penalised_until_us{0};  // steady clock: loses ties until then

  Replica(std::string u, std::unique_ptr<HttpBackend> h, BreakerOptions options, uint64_t s)
      : url(std::move(u)), http(std::move(h)), breaker(options), seed(s) {}
};

namespace {

// FNV-1a, 64 bits: the affinity key and each replica's seed (not security, only spread).
uint64_t fnv1a(std::string_view bytes, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// A 64-bit mix (splitmix64's finaliser): rendezvous scores from key ^ seed.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr size_t kPrefixBytes = 4096;
// A failed replica loses ties on outstanding requests for this long, then competes on its
// latency again: a penalty that lasted until it served again would starve it for good under
// sequential traffic (it would never be picked to serve).
constexpr int64_t kFailurePenaltyUs = 2'000'000;

int64_t steady_micros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Counts what reached the client: a failure after that cannot be tried on another replica.
class WatchedSink final : public StreamSink {
 public:
  explicit WatchedSink(StreamSink* inner) : inner_(inner) {}
  boost::asio::awaitable<bool> write(std::string_view sse_bytes) override {
    wrote_ = true;
    co_return co_await inner_->write(sse_bytes);
  }
  void add_header(std::string_view name, std::string_view value) override {
    inner_->add_header(name, value);
  }
  // A taken chunk reaches the client only with the write that follows it.
  ChunkTake take_chunk(std::string_view data, ChunkKeys& keys) override {
    return inner_->take_chunk(data, keys);
  }
  bool wrote() const { return wrote_; }

 private:
  StreamSink* inner_;
  bool wrote_ = false;
};

// A failure of the replica (its breaker counts it): unreachable, timed out, 5xx, or a reply
// ferry could not read. A 4xx is the request's own problem.
bool replica_failed(const Error& e) {
  if (e.code == ErrorCode::kCancelled) return false;
  if (e.upstream_status >= 500) return true;
  if (e.upstream_status != 0) return false;
  return e.code == ErrorCode::kUnavailable || e.code == ErrorCode::kTimeout ||
         e.code == ErrorCode::kBackendError;
}

// Worth trying on the next replica (nothing reached the client): refused or unreachable,
// overloaded (429), or a 5xx. A timeout is not retried: the request's time is spent.
bool try_next(const Error& e) {
  return e.code == ErrorCode::kUnavailable || e.upstream_status == 429 || e.upstream_status >= 500;
}

}  // namespace

uint64_t affinity_key(const BackendRequest& request, config::Affinity affinity) {
  if (affinity == config::Affinity::kTask) {
    return request.task_id.empty() ? 0 : fnv1a(request.task_id) | 1;
  }
  if (affinity != config::Affinity::kPrefix) return 0;
  std::string prefix;
  if (request.typed && !request.typed->messages.empty()) {
    for (const auto& m : request.typed->messages) {
      prefix += static_cast<char>('0' + static_cast<int>(m.role));
      if (m.content.form == api::Content::Form::kText) {
        prefix += m.content.text;
      } else {
        for (const auto& part : m.content.parts) prefix += part.text;
      }
      prefix += '\n';
      if (prefix.size() >= kPrefixBytes) break;
    }
  } else {
    prefix = request.body;  // untyped: the body's opening bytes
  }
  if (prefix.size() > kPrefixBytes) prefix.resize(kPrefixBytes);
  return prefix.empty() ? 0 : fnv1a(prefix) | 1;
}

ReplicaPool::ReplicaPool(config::BackendConfig config, BreakerOptions breaker)
    : name_(config.name), affinity_(config.affinity) {
  for (size_t i = 0; i < config.replicas.size(); ++i) {
    const config::ReplicaConfig& r = config.replicas[i];
    config::BackendConfig one = config;
    one.name = config.name + "[" + std::to_string(i) + "]";  // errors name the replica
    one.base_url = r.base_url;
    one.tls = r.tls;
    one.host = r.host;
    one.port = r.port;
    one.path_prefix = r.path_prefix;
    one.replicas.clear();
    replicas_.push_back(std::make_unique<Replica>(r.base_url,
                                                  std::make_unique<HttpBackend>(std::move(one)),
                                                  breaker, mix(fnv1a(r.base_url))));
  }
}

ReplicaPool::~ReplicaPool() = default;

int ReplicaPool::pick(const BackendRequest& request, const std::vector<bool>& tried) const {
  const uint64_t key = affinity_key(request, affinity_);
  const int64_t now = steady_micros();
  auto penalised = [now](const Replica& r) {
    return now < r.penalised_until_us.load(std::memory_order_relaxed);
  };
  int best = -1;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    const Replica& r = *replicas_[i];
    if (tried[i] || !r.breaker.healthy()) continue;
    if (best < 0) {
      best = static_cast<int>(i);
      continue;
    }
    const Replica& b = *replicas_[static_cast<size_t>(best)];
    bool better = false;
    if (key != 0) {
      better = mix(key ^ r.seed) > mix(key ^ b.seed);
    } else {
      int64_t ro = r.outstanding.load(std::memory_order_relaxed);
      int64_t bo = b.outstanding.load(std::memory_order_relaxed);
      const bool rp = penalised(r);
      const bool bp = penalised(b);
      better = ro < bo ||
               (ro == bo && (rp != bp ? bp
                                      : r.latency_ewma_us.load(std::memory_order_relaxed) <
                                            b.latency_ewma_us.load(std::memory_order_relaxed)));
    }
    if (better) best = static_cast<int>(i);
  }
  return best;
}

// g++ 12 reports a false -Wmismatched-new-delete on coroutine frames (see http_backend.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
boost::asio::awaitable<Result<BackendReply>> ReplicaPool::send(const BackendRequest& request,
                                                               StreamSink* sink,
                                                               CancelSignal& cancel) {
  std::vector<bool> tried(replicas_.size(), false);
  std::optional<Error> last;
  for (;;) {
    int index = pick(request, tried);
    if (index < 0) break;
    Replica& r = *replicas_[static_cast<size_t>(index)];
    tried[static_cast<size_t>(index)] = true;
    if (!r.breaker.allow_request()) continue;  // another request took the half-open probe
    r.outstanding.fetch_add(1, std::memory_order_relaxed);
    r.requests.fetch_add(1, std::memory_order_relaxed);
    auto started = std::chrono::steady_clock::now();
    std::optional<WatchedSink> watched;
    if (sink != nullptr) watched.emplace(sink);
    Result<BackendReply> result =
        co_await r.http->send(request, watched ? &*watched : nullptr, cancel);
    r.outstanding.fetch_sub(1, std::memory_order_relaxed);
    if (result) {
      r.breaker.record_success();
      int64_t took = std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::steady_clock::now() - started)
                         .count();
      int64_t ewma = r.latency_ewma_us.load(std::memory_order_relaxed);
      r.latency_ewma_us.store(ewma == 0 ? took : ewma + (took - ewma) / 8,
                              std::memory_order_relaxed);
      r.penalised_until_us.store(0, std::memory_order_relaxed);
      co_return result;
    }
    const Error& e = result.error();
    if (replica_failed(e)) {
      r.breaker.record_failure();
      r.failures.fetch_add(1, std::memory_order_relaxed);
      // Ties on outstanding requests go to the others for a while.
      r.penalised_until_us.store(steady_micros() + kFailurePenaltyUs, std::memory_order_relaxed);
    } else {
      r.breaker.record_success();  // it answered; the request was the problem
    }
    if (cancel.cancelled() || (watched && watched->wrote()) || !try_next(e)) co_return result;
    last = e;
  }
  if (last) co_return *last;
  Error none = Error::make(ErrorCode::kUnavailable,
                           "backend '" + name_ +
                               "': every replica's circuit breaker is open (each failed "
                               "repeatedly); retry shortly",
                           "", "backend_unavailable");
  none.retry_after_s = 1;
  co_return none;
}
#pragma GCC diagnostic pop

std::vector<ReplicaSnapshot> ReplicaPool::snapshot() const {
  std::vector<ReplicaSnapshot> out;
  for (const auto& r : replicas_) {
    out.push_back(ReplicaSnapshot{r->url, r->outstanding.load(), r->requests.load(),
                                  r->failures.load(), r->latency_ewma_us.load(),
                                  r->breaker.healthy()});
  }
  return out;
}

std::vector<HttpBackend*> ReplicaPool::http_backends() const {
  std::vector<HttpBackend*> out;
  for (const auto& r : replicas_) out.push_back(r->http.get());
  return out;
}

}  // namespace ferry::adapters
