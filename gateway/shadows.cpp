#include "gateway/shadows.h"

#include <utility>
#include <vector>

namespace ferry::gateway {

std::optional<uint64_t> ShadowTracker::begin(std::function<void()> cancel) {
  std::lock_guard lock(mu_);
  if (closed_ || running_.size() >= limit_) return std::nullopt;
  uint64_t id = next_id_++;
  running_.emplace(id, std::move(cancel));
  return id;
}

void ShadowTracker::end(uint64_t id) {
  std::lock_guard lock(mu_);
  running_.erase(id);
}

size_t ShadowTracker::in_flight() const {
  std::lock_guard lock(mu_);
  return running_.size();
}

void ShadowTracker::cancel_all() {
  std::vector<std::function<void()>> cancels;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    for (auto& [id, cancel] : running_) {
      if (cancel) cancels.push_back(std::exchange(cancel, nullptr));
    }
  }
  // Outside the lock: a cancel may end its copy at once (end() takes the lock).
  for (auto& cancel : cancels) cancel();
}

}  // namespace ferry::gateway
