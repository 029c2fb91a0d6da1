#include "gateway/targets.h"

#include <algorithm>

namespace ferry::gateway {

void RecentStats::add(bool ok, int64_t ttft_ms) {
  std::lock_guard lock(mu_);
  if (n_ == kWindow && failed_[next_]) --failures_;  // the outcome the new one replaces
  failed_[next_] = !ok;
  failures_ += ok ? 0 : 1;
  next_ = (next_ + 1) % kWindow;
  n_ = std::min(n_ + 1, kWindow);
  if (ok && ttft_ms >= 0) {
    int64_t* sorted_end = ttft_sorted_ + n_ttft_;
    if (n_ttft_ == kWindow) {  // the value the new one replaces leaves the sorted copy
      int64_t* old = std::lower_bound(ttft_sorted_, sorted_end, ttft_ring_[next_ttft_]);
      std::copy(old + 1, sorted_end, old);
      --sorted_end;
    }
    int64_t* at = std::upper_bound(ttft_sorted_, sorted_end, ttft_ms);
    std::copy_backward(at, sorted_end, sorted_end + 1);
    *at = ttft_ms;
    ttft_ring_[next_ttft_] = ttft_ms;
    next_ttft_ = (next_ttft_ + 1) % kWindow;
    n_ttft_ = std::min(n_ttft_ + 1, kWindow);
  }
}

std::optional<int64_t> RecentStats::p90_ttft_ms() const {
  std::lock_guard lock(mu_);
  if (n_ttft_ == 0) return std::nullopt;
  return ttft_sorted_[(n_ttft_ * 9 + 9) / 10 - 1];  // nearest-rank p90
}

std::optional<double> RecentStats::error_rate() const {
  std::lock_guard lock(mu_);
  if (n_ == 0) return std::nullopt;
  return static_cast<double>(failures_) / static_cast<double>(n_);
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
