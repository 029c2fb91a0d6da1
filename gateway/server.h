// The HTTP(S) server: accepts connections, reads bounded requests, serves the OpenAI API,
// health, metrics, and proxies to backends. Thread-safe: run() drives one io_context per I/O
// thread (server.io_threads; each connection stays on one loop, docs/ARCHITECTURE.md);
// request_shutdown() may be called from any thread.
#pragma once

#include <memory>
#include <string>

#include "common/error.h"
#include "config/config.h"

namespace ferry::gateway {

class Server {
 public:
  // Builds backends, auth, logs. Throws std::runtime_error on start-up errors (TLS files, ...).
  explicit Server(config::Config config);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and listens. Returns the URL clients use, e.g. "http://127.0.0.1:41234".
  Result<std::string> listen(const std::string& host, uint16_t port);

  // Serves until a graceful shutdown (SIGTERM/SIGINT or request_shutdown()) completes.
  void run();

  // Stops accepting; in-flight requests finish up to server.shutdown_grace_ms.
  void request_shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::gateway
