// What one HTTP request leaves behind for the access log and metrics, and its access-log line.
// Kept out of the socket files (Beast) so that bench/record_bench.cpp measures this very code.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "adapters/backend.h"
#include "gateway/access_log.h"

namespace ferry::gateway {

struct RequestRecord {
  std::string request_id;
  std::string method;
  std::string path;
  std::string_view api;  // the front-end (api::endpoint_name) of an API request; "" otherwise
  std::string key_id;
  std::string model;
  std::string backend;
  std::string target;
  std::string rule;
  std::string ledger_id;
  int attempts = 0;
  int64_t prompt_tokens_counted = -1;
  int status = 0;
  bool stream = false;
  adapters::Usage usage;
  std::string finish_reason;
  std::string error;
  std::chrono::steady_clock::time_point started;
  int64_t started_unix_us = 0;
  int64_t ttft_us = -1;
  int64_t backend_ttft_us = -1;  // the backend's own time to its first byte (or token)
};

// The request's access-log line (one JSON object; call close() for its text).
JsonLine access_log_line(const RequestRecord& r, int64_t latency_us);

}  // namespace ferry::gateway
