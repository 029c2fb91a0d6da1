// The server's configuration: one YAML file validated into typed structs before anything
// starts. Immutable after loading; safe to share between threads by const reference.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

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
  int64_t console_session_minutes = 480;  // a console sign-in lasts this long (8 h)
  int64_t console_session_seconds = 0;    // when set: the same in seconds (wins over minutes)
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

// `cache:` the response cache's server-wide settings (policy rules turn caching on with
// `cache: { ttl }`): its memory bound (answers, keys, bookkeeping; least recently used out),
// whether an entry is only found again under the policy version, or the target's price version,
// that made it, and an optional persistent tier (a SQLite file: the entries survive a restart).
struct ResponseCacheConfig {
  int64_t max_bytes = 64LL << 20;
  bool per_policy_version = false;
  bool per_price_version = false;
  // `persist: { path, max_bytes }`: entries written behind to this file (its own writer thread)
  // and read back at start-up; expired ones dropped, the file bounded by max_bytes (least
  // recently stored out). "" = off (the default).
  std::string persist_path;
  int64_t persist_max_bytes = 256LL << 20;
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

// How a local backend answers /v1/embeddings (`embeddings:` of a local backend).
struct LocalEmbeddingsConfig {
  bool chunk_long_input = false;  // long_input: refuse (false) | chunk (true: chunks averaged)
  bool matryoshka = false;        // the model is Matryoshka-trained: `dimensions` truncates
};

// Speculative decoding of a local backend (`speculative:`): drafts by prompt lookup from the
// sequence's own prompt and output, verified in the decode step's forward pass.
struct LocalSpeculativeConfig {
  bool prompt_lookup = true;  // mode: prompt_lookup (true) | off (false)
  int64_t max_draft = 8;      // drafted tokens verified per step, at most
  int64_t min_match = 2;      // the shortest suffix (tokens) whose earlier occurrence drafts
};

// The in-process engine as a backend (`kind: local`).
struct LocalEngineConfig {
  std::string model_path;       // the GGUF file (relative paths: to the config file's folder)
  int threads = 0;              // compute threads; 0 = all cores
  int64_t context_length = 0;   // per sequence; 0 = the model's own (capped at 8192)
  int64_t max_sequences = 16;   // sequences decoded together (continuous batching)
  int64_t max_queue = 64;       // requests waiting for a sequence slot; beyond: 503
  int64_t kv_budget_mb = 0;     // KV cache memory for running + cached prefixes; 0 = auto
  int64_t prefill_chunk = 256;  // prompt tokens per step, interleaved with decode steps
  bool prefix_cache = true;     // reuse KV of shared prompt prefixes across requests
  // Tokens a sequence may have waiting for its client; at the bound it is paused (a slow reader
  // cannot make ferry buffer its output without limit; the other sequences run on).
  int64_t max_unread_tokens = 64;
  std::string chat_template;  // "" = the model's own template; else a Jinja template
  LocalEmbeddingsConfig embeddings;
  LocalSpeculativeConfig speculative;
  // The keys above that only a decoder model uses, as far as the config sets them: an encoder
  // model (bert) refuses them at load by name rather than ignoring them.
  std::vector<std::string> decoder_keys;
};

// One replica of a pooled HTTP backend: its base URL, parsed as BackendConfig's own.
struct ReplicaConfig {
  std::string base_url;
  bool tls = false;
  std::string host;
  uint16_t port = 0;
  std::string path_prefix;
};

// How a replica pool keeps related requests on one replica (its KV/prefix cache reused).
enum class Affinity : uint8_t { kNone, kTask, kPrefix };

struct BackendConfig {
  std::string name;
  std::string kind = "openai";  // openai (an HTTP server) | local (the in-process engine)
  std::optional<LocalEngineConfig> local;  // kind == local
  std::string base_url;  // http(s)://host[:port][/prefix], e.g. http://127.0.0.1:8000/v1
  // Parsed parts of base_url.
  bool tls = false;
  std::string host;
  uint16_t port = 0;
  std::string path_prefix;             // "" or "/v1"
  std::optional<std::string> ca_file;  // when absent, the system roots are used
  bool verify_peer = true;
  std::optional<std::string> api_key;  // sent upstream as a bearer token
  BackendTimeouts timeouts;
  int64_t max_idle_connections = 32;
  // The APIs the backend speaks natively (`apis:`; kKnownApis' names). A request in one of them
  // is passed through unchanged; any other is translated to chat. The in-process engine: chat
  // and completions.
  std::vector<std::string> apis = {"chat", "completions"};
  bool speaks(std::string_view api) const;
  // A replica pool (`replicas:` instead of base_url): the same server several times; each
  // request goes to the replica with the fewest outstanding requests (adapters/replica_pool.h).
  // base_url and its parts are then the first replica's.
  std::vector<ReplicaConfig> replicas;
  Affinity affinity = Affinity::kNone;  // `affinity: none | task | prefix`
};

// The API names a backend's `apis` may list (api::endpoint_name's words; config/ does not see
// api/). Embeddings join when they are served.
inline constexpr std::string_view kKnownApis[] = {"chat", "completions", "messages", "responses"};

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

struct PolicyConfig {
  std::string file;   // policies YAML (relative paths: to the config file's folder)
  bool watch = true;  // reload on file change (inotify, debounced)
  int64_t debounce_ms = 300;
};

// Sections owned by other modules, kept as located YAML and validated by their module when
// the server starts (ledger: parse_ledger_config, PriceCatalog::from_yaml, parse_budgets).
struct RawSection {
  YAML::Node node;  // undefined when the section is absent
  bool present() const { return node.IsDefined() && !node.IsNull(); }
};

struct Config {
  std::string source;  // file path, or "<embedded default>"
  ServerConfig server;
  Limits limits;
  ResponseCacheConfig cache;
  AuthConfig auth;
  std::vector<BackendConfig> backends;
  std::vector<ModelConfig> models;
  LogConfig log;
  std::optional<PolicyConfig> policy;
  RawSection ledger;       // `ledger:`
  RawSection prices;       // `prices:`
  RawSection budgets;      // `budgets:`
  RawSection rate_limits;  // `rate_limits:` (ledger/rate_limits.h)
  std::string base_dir;    // folder of the config file ("" for the embedded default)

  // A path from the config, made absolute against base_dir when relative.
  std::string resolve_path(const std::string& path) const;

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
