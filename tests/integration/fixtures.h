// Shared pieces of the integration tests: where the binaries are, starting the test upstream
// and ferry with a generated config, request bodies, and reading a whole SSE stream.
// Used from one test thread at a time.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tests/integration/harness.h"

namespace ferry::itest {

// $FERRY_BINARY and $FERRY_TEST_UPSTREAM when set, else the paths CMake compiled in.
std::string ferry_binary();
std::string upstream_binary();

// Starts ferry_test_upstream on 127.0.0.1:0 (TLS when cert and key are given).
Server start_upstream(const std::string& cert = {}, const std::string& key = {});

// Writes `config_yaml` into `dir` and starts `ferry serve --config F --listen 127.0.0.1:0`.
Server start_ferry(const TempDir& dir, const std::string& config_yaml,
                   const std::string& name = "ferry.yaml");

// A port on 127.0.0.1 where nothing listens (bound, then closed).
uint16_t closed_port();

// A self-signed certificate for "localhost" and 127.0.0.1, written into `dir` with the openssl
// command-line tool. Returns false when openssl fails.
bool make_self_signed_cert(const TempDir& dir, const std::string& stem, std::string& cert,
                           std::string& key);

// Request bodies.
json chat_body(const std::string& model, const std::string& user_text, bool stream = false);
json completion_body(const std::string& model, const std::string& prompt, bool stream = false);

// The API keys of the standard test config.
inline constexpr const char* kAppKey = "sk-test-app-0123456789";
inline constexpr const char* kHashedKey = "sk-test-hashed-9876543210";
inline constexpr const char* kAdminKey = "sk-test-admin-5555";
inline constexpr const char* kUpstreamKey = "upstream-secret-42";
std::vector<std::string> auth_headers(const char* key = kAppKey);

// The standard config: one upstream backend ("up") reached at `upstream`, one dead backend,
// a model per upstream behaviour. `extra_limits` is appended under `limits:`.
std::string standard_config(const ListenAddress& upstream,
                            const std::string& upstream_scheme = "http",
                            const std::string& ca_file = {});

// Everything one streamed response gave, read until its body ended (or a timeout).
struct StreamResult {
  std::optional<Response> head;
  std::vector<SseEvent> events;
  std::vector<json> chunks;             // events whose data parsed as JSON
  bool saw_done = false;                // a `data: [DONE]` event
  ReadStatus end = ReadStatus::kError;  // how the body ended (kEnd: cleanly)
  std::string content() const;          // concatenated choices[0] delta content / text
  bool has_error_event() const;         // an event whose JSON has an "error" member
};
StreamResult read_stream(Connection& c, Ms timeout = Ms(20000));
// Sends `body` as a streaming POST to `target` on a fresh connection and reads it all.
StreamResult stream_request(const ListenAddress& to, const std::string& target, const json& body,
                            const std::vector<std::string>& headers = auth_headers(),
                            const TlsClientOptions* tls = nullptr);

// POSTs JSON with the app key; nullopt on a transport failure.
std::optional<Response> post_json(const ListenAddress& to, const std::string& target,
                                  const json& body,
                                  const std::vector<std::string>& headers = auth_headers(),
                                  const TlsClientOptions* tls = nullptr);

// GET /_stats of the test upstream.
json upstream_stats(const ListenAddress& upstream, const TlsClientOptions* tls = nullptr);
json upstream_last_request(const ListenAddress& upstream, const TlsClientOptions* tls = nullptr);

// Asks `done` every 20 ms until it says true or `timeout` has passed; its last answer. For what
// ferry finishes after it has answered: the ledger rows of refusals and shadow copies are queued,
// not awaited (README, "Routing, counting and the ledger in the request path").
bool eventually(const std::function<bool()>& done, Ms timeout = Ms(10000));

// The "totals" of GET /v1/ledger/report?by=team&format=json on `at` with the admin key; null,
// with a test failure added, when the report does not answer 200.
json report_totals(const ListenAddress& at);

// True when `value` appears anywhere (as a string or number) inside `j`.
bool json_contains_value(const json& j, const json& value);

}  // namespace ferry::itest
