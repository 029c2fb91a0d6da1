// The server's configuration: one YAML file validated into typed structs before anything
// starts. Immutable after loading; safe to share between threads by const reference.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace ferry::config {

struct TlsConfig {
  std::string cert_file;
  std::string key_file;
};

struct ServerConfig {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 8080;
  int io_threads = 2;
  std::optional<TlsConfig> tls;
  int64_t shutdown_grace_ms = 10000;
};

struct Limits {
  int64_t max_body_bytes = 8 << 20;
  int64_t max_header_bytes = 16 << 10;
  int64_t header_timeout_ms = 10000;  // time to receive a whole request header
  int64_t body_timeout_ms = 30000;    // time to receive a whole request body
  int64_t idle_timeout_ms = 60000;    // keep-alive idle time between requests
  int64_t write_timeout_ms = 60000;   // time for one write to the client to complete
  int64_t max_connections = 1024;
  // Pipelined requests are served one at a time: at most one request is read ahead of the
  // response being written, and reading is bounded by max_header_bytes + a small buffer.
};

enum class Role { kApp, kFinance, kAdmin };
std::string_view role_name(Role role);

struct ApiKey {
  std::string id;
  std::string sha256;  // lower-case hex of the key's bytes
  std::string team;
  std::string project;
  Role role = Role::kApp;
  std::vector<std::string> tags;  // trusted tags, from config
};

struct AuthConfig {
  // When no key is configured, auth is off and every request is the anonymous principal.
  std::vector<ApiKey> keys;
};

struct BackendTimeouts {
  int64_t connect_ms = 5000;
  int64_t first_byte_ms = 60000;  // request sent -> response headers
  int64_t idle_ms = 30000;        // longest gap between two body reads
  int64_t total_ms = 600000;      // whole exchange
};

struct BackendConfig {
  std::string name;
  std::string base_url;  // http(s)://host[:port][/prefix], e.g. http://127.0.0.1:8000/v1
  // Parsed parts of base_url.
  bool tls = false;
  std::string host;
  uint16_t port = 0;
  std::string path_prefix;  // "" or "/v1"
  std::optional<std::string> ca_file;  // when absent, the system roots are used
  bool verify_peer = true;
  std::optional<std::string> api_key;  // sent upstream as a bearer token
  BackendTimeouts timeouts;
  int64_t max_idle_connections = 32;
};

struct ModelConfig {
  std::string name;            // public name clients send
  std::string backend;         // a BackendConfig::name
  std::string upstream_model;  // name the backend knows it by
  std::string tokenizer;       // cl100k_base, o200k_base, a tokenizer.json or GGUF path; "" = none
  int64_t context_length = 0;  // 0 = unknown
};

struct LogConfig {
  std::string access_log = "stdout";  // stdout, stderr, off, or a file path
};

struct Config {
  std::string source;  // file path, or "<embedded default>"
  ServerConfig server;
  Limits limits;
  AuthConfig auth;
  std::vector<BackendConfig> backends;
  std::vector<ModelConfig> models;
  LogConfig log;

  const BackendConfig* find_backend(std::string_view name) const;
  const ModelConfig* find_model(std::string_view name) const;
};

// Loads and validates. Errors name file, line and column.
Result<Config> load_config_file(const std::string& path);
Result<Config> load_config_text(const std::string& text, const std::string& source_name);

// The embedded default config (ferry serve with no --config).
const std::string& default_config_text();

// Parses "HOST:PORT" ("[::1]:8080" for IPv6). Port 0 is allowed (pick any).
Result<std::pair<std::string, uint16_t>> parse_host_port(std::string_view text);

}  // namespace ferry::config
