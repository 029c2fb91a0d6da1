// An OpenAI-compatible HTTP/1.1 backend (vLLM, SGLang, TGI, llama.cpp server, ...) over plain
// TCP or TLS, with a keep-alive connection pool per event loop. Thread-safe: one instance
// serves every I/O thread; each call runs on, and connects from, the caller's executor.
// Boost.Beast stays inside the .cpp.
#pragma once

#include <atomic>
#include <memory>

#include "adapters/backend.h"
#include "config/config.h"

namespace ferry::adapters {

struct HttpBackendStats {
  std::atomic<int64_t> connections_opened{0};
  std::atomic<int64_t> connections_reused{0};
};

class HttpBackend final : public Backend {
 public:
  // Throws std::runtime_error when the TLS context cannot be set up (start-up only).
  explicit HttpBackend(config::BackendConfig config);
  ~HttpBackend() override;

  const std::string& name() const override;
  boost::asio::awaitable<Result<BackendReply>> send(const BackendRequest& request, StreamSink* sink,
                                                    CancelSignal& cancel) override;

  // Closes idle pooled connections (at shutdown).
  void close_idle();
  const HttpBackendStats& stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::adapters
