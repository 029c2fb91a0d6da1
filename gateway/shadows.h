// The shadow copies in flight (a policy's `shadow:`): at most a fixed number at once, each
// cancellable, so that shutdown waits for them within its grace and cancels the rest instead
// of dropping their ledger rows. Only the bookkeeping: proxy.cpp runs the copies.
// Thread-safe: shadows start and end on any I/O thread; cancel_all() runs on the first loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>

namespace ferry::gateway {

class ShadowTracker {
 public:
  // The most shadow copies in flight at once; a copy beyond it is not sent (and counted as
  // skipped in ferry_shadow_requests_total).
  static constexpr size_t kDefaultLimit = 64;

  explicit ShadowTracker(size_t limit = kDefaultLimit) : limit_(limit) {}

  // Registers a copy about to start. Returns its id, or nullopt when `limit` copies are in
  // flight or cancel_all() has run (the copy must not start). `cancel` asks the copy to stop;
  // it is called at most once, from cancel_all(), while the copy is registered, on the
  // thread that calls cancel_all(): it must hand the cancel to the copy's own loop.
  std::optional<uint64_t> begin(std::function<void()> cancel);
  // The copy has finished (its outcome is recorded).
  void end(uint64_t id);

  size_t in_flight() const;
  // Cancels every copy in flight and refuses new ones from now on (shutdown).
  void cancel_all();

 private:
  const size_t limit_;
  mutable std::mutex mu_;
  std::map<uint64_t, std::function<void()>> running_;  // guarded by mu_
  uint64_t next_id_ = 0;                               // guarded by mu_
  bool closed_ = false;                                // guarded by mu_
};

}  // namespace ferry::gateway
