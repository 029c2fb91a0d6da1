#include "gateway/targets.h"

#include <algorithm>

namespace ferry::gateway {

void RecentStats::add(bool ok, int64_t ttft_ms) {
  std::lock_guard lock(mu_);
  failed_[next_] = !ok;
  next_ = (next_ + 1) % kWindow;
  n_ = std::min(n_ + 1, kWindow);
  if (ok && ttft_ms >= 0) {
    ttft_ring_[next_ttft_] = ttft_ms;
    next_ttft_ = (next_ttft_ + 1) % kWindow;
    n_ttft_ = std::min(n_ttft_ + 1, kWindow);
  }
}

std::optional<int64_t> RecentStats::p90_ttft_ms() const {
  int64_t copy[kWindow];
  size_t n = 0;
  {
    std::lock_guard lock(mu_);
    n = n_ttft_;
    std::copy(ttft_ring_, ttft_ring_ + n, copy);
  }
  if (n == 0) return std::nullopt;
  size_t k = (n * 9 + 9) / 10 - 1;  // nearest-rank p90
  std::nth_element(copy, copy + k, copy + n);
  return copy[k];
}

std::optional<double> RecentStats::error_rate() const {
  std::lock_guard lock(mu_);
  if (n_ == 0) return std::nullopt;
  size_t failed = 0;
  for (size_t i = 0; i < n_; ++i) failed += failed_[i] ? 1 : 0;
  return static_cast<double>(failed) / static_cast<double>(n_);
}

int64_t Target::context_length() const {
  if (model->context_length > 0) return model->context_length;
  return backend->load_facts().context_length;
}

Target* find_target(const TargetMap& targets, std::string_view model_name) {
  auto it = targets.find(model_name);
  return it == targets.end() ? nullptr : it->second.get();
}

}  // namespace ferry::gateway
