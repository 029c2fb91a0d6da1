// PolicyStore: the active policy behind a shared pointer swapped under a mutex, reloads that
// build a new policy completely or reject it while the old one keeps serving, and an optional
// inotify watcher thread. Thread-safe: current() copies a pointer; reloads are serialised.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"
#include "policies/loader.h"

namespace ferry::policies {

struct ReloadOutcome {
  bool applied = false;    // a new policy is active
  bool unchanged = false;  // same content hash as the active one: nothing to do
  std::string version;     // short content hash of what was offered
  std::string trigger;     // "file change", "SIGHUP", "PUT /admin/policy", ...
  std::vector<Diagnostic> errors;
  std::vector<Diagnostic> warnings;
  bool ok() const { return errors.empty(); }
};

struct RejectedAttempt {
  int64_t at_unix_micros = 0;
  std::string version;
  std::string trigger;
  std::vector<Diagnostic> errors;
};

struct StoreStatus {
  std::shared_ptr<const Policy> policy;
  int64_t loaded_at_unix_micros = 0;
  std::string loaded_by;  // trigger of the load that made it active
  std::vector<Diagnostic> warnings;
  std::optional<RejectedAttempt> last_rejected;
  uint64_t reloads_applied = 0;
  uint64_t reloads_rejected = 0;
};

class PolicyStore {
 public:
  // Loads `path`; an invalid policy is an error carrying every diagnostic (one a line), so
  // the server refuses to start.
  static Result<std::unique_ptr<PolicyStore>> open(const std::string& path,
                                                   LoadOptions options = {});
  ~PolicyStore();
  PolicyStore(const PolicyStore&) = delete;
  PolicyStore& operator=(const PolicyStore&) = delete;

  // The active policy. A request takes it once and keeps it to the end.
  std::shared_ptr<const Policy> current() const {
    std::lock_guard lock(current_mu_);
    return current_;
  }

  // Re-reads the file (SIGHUP, file change).
  ReloadOutcome reload(std::string_view trigger = "reload");
  // Offers new text (PUT /admin/policy). When `persist` and it is valid, it is also written
  // to the file (temporary file + rename) so that the next file reload keeps it.
  ReloadOutcome apply_text(const std::string& text, std::string_view trigger, bool persist);

  StoreStatus status() const;
  nlohmann::json status_json() const;  // what GET /admin/policy returns
  const std::string& path() const { return path_; }

  // Called after every reload attempt (applied, unchanged or rejected), on the thread that
  // reloaded. Set it before watch(); used for logs and metrics.
  void set_listener(std::function<void(const ReloadOutcome&)> listener);

  // Starts a thread that watches the file's directory with inotify and reloads once the
  // file has been quiet for `debounce`. Idempotent.
  Status watch(std::chrono::milliseconds debounce = std::chrono::milliseconds(300));
  void stop_watching();

 private:
  PolicyStore(std::string path, LoadOptions options);
  ReloadOutcome offer(const std::string& text, std::string_view trigger, bool persist);
  void watch_loop(int inotify_fd, int stop_fd, std::chrono::milliseconds debounce);

  std::string path_;
  LoadOptions options_;
  // A mutex rather than std::atomic<std::shared_ptr>: libstdc++ 12 implements the latter with
  // a lock bit that ThreadSanitizer cannot see. The critical section is one pointer copy.
  mutable std::mutex current_mu_;
  std::shared_ptr<const Policy> current_;

  std::mutex reload_mu_;  // serialises reloads
  mutable std::mutex status_mu_;
  StoreStatus status_;  // its `policy` field is filled by status()
  std::function<void(const ReloadOutcome&)> listener_;

  std::thread watcher_;
  int stop_fd_ = -1;
};

}  // namespace ferry::policies
