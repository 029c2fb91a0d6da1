#include "config/config.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "common/sha256.h"
#include "common/tags.h"
#include "common/yaml_util.h"

namespace ferry::config {

using yaml::Map;
using yaml::YamlError;

std::string_view role_name(Role role) {
  switch (role) {
    case Role::kApp:
      return "app";
    case Role::kFinance:
      return "finance";
    case Role::kAdmin:
      return "admin";
  }
  return "app";
}

bool BackendConfig::speaks(std::string_view api) const {
  return std::find(apis.begin(), apis.end(), api) != apis.end();
}

const BackendConfig* Config::find_backend(std::string_view name) const {
  for (const auto& b : backends) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

const ModelConfig* Config::find_model(std::string_view name) const {
  for (const auto& m : models) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::string Config::resolve_path(const std::string& path) const {
  if (path.empty() || path.front() == '/' || base_dir.empty() || base_dir == ".") return path;
  return base_dir + "/" + path;
}

Result<std::pair<std::string, uint16_t>> parse_host_port(std::string_view text) {
  std::string host;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return Error::make(ErrorCode::kInvalidRequest,
                         "expected [IPV6]:PORT, got '" + std::string(text) + "'");
    }
    host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return Error::make(ErrorCode::kInvalidRequest,
                         "expected HOST:PORT, got '" + std::string(text) + "'");
    }
    host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  unsigned port = 0;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (host.empty() || ec != std::errc{} || ptr != port_text.data() + port_text.size() ||
      port > 65535) {
    return Error::make(
        ErrorCode::kInvalidRequest,
        "expected HOST:PORT with a port from 0 to 65535, got '" + std::string(text) + "'");
  }
  return std::pair<std::string, uint16_t>{host, static_cast<uint16_t>(port)};
}

namespace {

// Splits a base URL into scheme, host, port and path prefix. Throws YamlError via `map`.
void parse_base_url(const Map& map, BackendConfig& b) {
  std::string_view url = b.base_url;
  std::string_view rest;
  if (url.starts_with("http://")) {
    b.tls = false;
    rest = url.substr(7);
  } else if (url.starts_with("https://")) {
    b.tls = true;
    rest = url.substr(8);
  } else {
    map.fail("base_url", "must start with http:// or https://, found '" + b.base_url + "'");
  }
  auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  b.path_prefix = std::string(path);
  if (authority.empty()) map.fail("base_url", "has no host");
  bool has_port = false;
  if (authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos) map.fail("base_url", "has an unclosed IPv6 bracket");
    b.host = std::string(authority.substr(1, close - 1));
    has_port = close + 1 < authority.size();
    if (has_port) authority = authority.substr(close + 1);
  } else {
    auto colon = authority.rfind(':');
    b.host = std::string(authority.substr(0, colon));
    has_port = colon != std::string_view::npos;
    if (has_port) authority = authority.substr(colon);
  }
  if (has_port) {
    if (authority.size() < 2 || authority.front() != ':') map.fail("base_url", "has a bad port");
    unsigned port = 0;
    auto digits = authority.substr(1);
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
    if (ec != std::errc{} || ptr != digits.data() + digits.size() || port == 0 || port > 65535) {
      map.fail("base_url", "has a bad port");
    }
    b.port = static_cast<uint16_t>(port);
  } else {
    b.port = b.tls ? 443 : 80;
  }
  if (b.host.empty()) map.fail("base_url", "has no host");
}

Role parse_role(const Map& map) {
  std::string r = map.opt_str("role").value_or("app");
  if (r == "app") return Role::kApp;
  if (r == "finance") return Role::kFinance;
  if (r == "admin") return Role::kAdmin;
  map.fail("role", "must be one of app, finance, admin; found '" + r + "'");
}

bool is_lower_hex_sha256(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

void parse_server(const Map& server, Config& cfg) {
  server.allow_only({"listen", "io_threads", "tls", "shutdown_grace_ms", "console_session_minutes",
                     "console_session_seconds"});
  if (auto listen = server.opt_str("listen")) {
    auto hp = parse_host_port(*listen);
    if (!hp) server.fail("listen", hp.error().message);
    cfg.server.listen_host = hp->first;
    cfg.server.listen_port = hp->second;
  }
  cfg.server.io_threads = static_cast<int>(server.integer_or("io_threads", 2, 1, 256));
  cfg.server.shutdown_grace_ms =
      server.integer_or("shutdown_grace_ms", cfg.server.shutdown_grace_ms, 0, 3600000);
  cfg.server.console_session_minutes = server.integer_or(
      "console_session_minutes", cfg.server.console_session_minutes, 1, 7 * 24 * 60);
  cfg.server.console_session_seconds =
      server.integer_or("console_session_seconds", 0, 1, 7 * 24 * 3600);
  if (auto tls = server.opt_map("tls")) {
    tls->allow_only({"cert", "key"});
    cfg.server.tls = TlsConfig{tls->str("cert"), tls->str("key")};
  }
}

void parse_limits(const Map& limits, Limits& l) {
  limits.allow_only({"max_body_bytes", "max_header_bytes", "header_timeout_ms", "body_timeout_ms",
                     "idle_timeout_ms", "write_timeout_ms", "max_connections"});
  l.max_body_bytes = limits.integer_or("max_body_bytes", l.max_body_bytes, 1024, 1LL << 32);
  l.max_header_bytes = limits.integer_or("max_header_bytes", l.max_header_bytes, 1024, 1 << 20);
  l.header_timeout_ms = limits.integer_or("header_timeout_ms", l.header_timeout_ms, 1, 3600000);
  l.body_timeout_ms = limits.integer_or("body_timeout_ms", l.body_timeout_ms, 1, 3600000);
  l.idle_timeout_ms = limits.integer_or("idle_timeout_ms", l.idle_timeout_ms, 1, 3600000);
  l.write_timeout_ms = limits.integer_or("write_timeout_ms", l.write_timeout_ms, 1, 3600000);
  l.max_connections = limits.integer_or("max_connections", l.max_connections, 1, 1000000);
}

void parse_auth(const Map& auth, const std::string& file, Config& cfg) {
  auth.allow_only({"keys"});
  std::set<std::string> ids;
  for (const auto& node : auth.seq_or_empty("keys")) {
    Map k(node, file, "an API key");
    k.allow_only({"id", "sha256", "key", "team", "project", "role", "tags"});
    ApiKey key;
    key.id = k.str("id");
    if (!ids.insert(key.id).second) k.fail("id", "duplicate key id '" + key.id + "'");
    if (k.has("sha256") == k.has("key")) {
      k.fail_here(
          "an API key needs exactly one of 'sha256' (hex digest) or 'key' "
          "(plain text, for tests only)");
    }
    if (auto hash = k.opt_str("sha256")) {
      if (!is_lower_hex_sha256(*hash)) {
        k.fail("sha256", "must be 64 lower-case hex digits (sha256sum of the key)");
      }
      key.sha256 = *hash;
    } else {
      key.sha256 = sha256_hex(k.str("key"));
    }
    key.team = k.opt_str("team").value_or("");
    key.project = k.opt_str("project").value_or("");
    key.role = parse_role(k);
    key.tags = k.str_list_or_empty("tags");
    // Reserved: the ledger marks a shadow copy's row with it.
    if (std::find(key.tags.begin(), key.tags.end(), kShadowTag) != key.tags.end()) {
      k.fail("tags", "'shadow' is reserved for the rows of shadow copies");
    }
    cfg.auth.keys.push_back(std::move(key));
  }
}

LocalEngineConfig parse_local_backend(const Map& bm) {
  bm.allow_only({"name", "kind", "model", "threads", "context_length", "max_sequences", "max_queue",
                 "kv_budget_mb", "prefill_chunk", "prefix_cache", "max_unread_tokens",
                 "chat_template", "timeouts", "embeddings", "speculative"});
  LocalEngineConfig l;
  for (const char* key : {"context_length", "max_sequences", "kv_budget_mb", "prefill_chunk",
                          "prefix_cache", "max_unread_tokens", "chat_template", "speculative"}) {
    if (bm.has(key)) l.decoder_keys.emplace_back(key);
  }
  l.model_path = bm.str("model");
  l.threads = static_cast<int>(bm.integer_or("threads", 0, 0, 1024));
  l.context_length = bm.integer_or("context_length", 0, 0, 1 << 20);
  l.max_sequences = bm.integer_or("max_sequences", l.max_sequences, 1, 1024);
  l.max_queue = bm.integer_or("max_queue", l.max_queue, 0, 1 << 20);
  l.kv_budget_mb = bm.integer_or("kv_budget_mb", 0, 0, 1 << 24);
  l.prefill_chunk = bm.integer_or("prefill_chunk", l.prefill_chunk, 1, 1 << 16);
  l.prefix_cache = bm.boolean_or("prefix_cache", true);
  l.max_unread_tokens = bm.integer_or("max_unread_tokens", l.max_unread_tokens, 1, 1 << 16);
  l.chat_template = bm.opt_str("chat_template").value_or("");
  if (auto e = bm.opt_map("embeddings")) {
    e->allow_only({"long_input", "matryoshka"});
    const std::string long_input = e->opt_str("long_input").value_or("refuse");
    if (long_input != "refuse" && long_input != "chunk") {
      e->fail("long_input", "must be 'refuse' or 'chunk'");
    }
    l.embeddings.chunk_long_input = long_input == "chunk";
    l.embeddings.matryoshka = e->boolean_or("matryoshka", false);
  }
  if (auto sp = bm.opt_map("speculative")) {
    sp->allow_only({"mode", "max_draft", "min_match"});
    const std::string mode = sp->opt_str("mode").value_or("prompt_lookup");
    if (mode != "prompt_lookup" && mode != "off")
      sp->fail("mode", "must be 'prompt_lookup' or 'off'");
    l.speculative.prompt_lookup = mode == "prompt_lookup";
    l.speculative.max_draft = sp->integer_or("max_draft", l.speculative.max_draft, 1, 64);
    l.speculative.min_match = sp->integer_or("min_match", l.speculative.min_match, 1, 8);
  }
  return l;
}

// `base_url`, or `replicas` (a list of base URLs, at least two, each once) and `affinity`.
void parse_replicas(const Map& bm, BackendConfig& b) {
  if (bm.has("base_url") == bm.has("replicas")) {
    bm.fail(bm.has("base_url") ? "replicas" : "base_url",
            "give base_url (one server) or replicas (a list of base URLs), exactly one");
  }
  std::string affinity = bm.opt_str("affinity").value_or("none");
  if (affinity == "none") {
    b.affinity = Affinity::kNone;
  } else if (affinity == "task") {
    b.affinity = Affinity::kTask;
  } else if (affinity == "prefix") {
    b.affinity = Affinity::kPrefix;
  } else {
    bm.fail("affinity", "must be none, task or prefix, found '" + affinity + "'");
  }
  if (bm.has("base_url")) {
    if (bm.has("affinity")) bm.fail("affinity", "applies to replicas only");
    b.base_url = bm.str("base_url");
    parse_base_url(bm, b);
    return;
  }
  std::vector<std::string> urls = bm.str_list_or_empty("replicas");
  if (urls.size() < 2) bm.fail("replicas", "must list at least two base URLs (or give base_url)");
  std::set<std::string> seen;
  for (const auto& url : urls) {
    if (!seen.insert(url).second) bm.fail("replicas", "'" + url + "' is listed twice");
    b.base_url = url;
    parse_base_url(bm, b);
    b.replicas.push_back(ReplicaConfig{b.base_url, b.tls, b.host, b.port, b.path_prefix});
  }
  const ReplicaConfig& first = b.replicas.front();
  b.base_url = first.base_url;
  b.tls = first.tls;
  b.host = first.host;
  b.port = first.port;
  b.path_prefix = first.path_prefix;
}

void parse_http_backend(const Map& bm, BackendConfig& b) {
  bm.allow_only({"name", "kind", "base_url", "replicas", "affinity", "ca_file", "verify_peer",
                 "api_key", "api_key_env", "timeouts", "max_idle_connections", "apis"});
  parse_replicas(bm, b);
  if (bm.has("apis")) {
    b.apis = bm.str_list_or_empty("apis");
    std::set<std::string_view> seen;
    for (const auto& a : b.apis) {
      if (std::find(std::begin(kKnownApis), std::end(kKnownApis), a) == std::end(kKnownApis)) {
        bm.fail("apis", "unknown API '" + a + "'; known: chat, completions, messages, responses");
      }
      if (!seen.insert(a).second) bm.fail("apis", "'" + a + "' is listed twice");
    }
    if (b.apis.empty()) bm.fail("apis", "must list at least one API");
  }
  b.ca_file = bm.opt_str("ca_file");
  b.verify_peer = bm.boolean_or("verify_peer", true);
  if (bm.has("api_key") && bm.has("api_key_env")) {
    bm.fail("api_key_env", "give api_key or api_key_env, not both");
  }
  b.api_key = bm.opt_str("api_key");
  if (auto env = bm.opt_str("api_key_env")) {
    const char* v = std::getenv(env->c_str());
    if (v == nullptr) bm.fail("api_key_env", "environment variable '" + *env + "' is not set");
    b.api_key = std::string(v);
  }
  b.max_idle_connections = bm.integer_or("max_idle_connections", 32, 0, 100000);
}

void parse_backends(const Map& root, const std::string& file, Config& cfg) {
  std::set<std::string> backend_names;
  for (const auto& node : root.seq_or_empty("backends")) {
    Map bm(node, file, "a backend");
    BackendConfig b;
    b.name = bm.str("name");
    if (!backend_names.insert(b.name).second) bm.fail("name", "duplicate backend '" + b.name + "'");
    b.kind = bm.opt_str("kind").value_or("openai");
    if (b.kind == "local") {
      b.local = parse_local_backend(bm);
    } else if (b.kind == "openai") {
      parse_http_backend(bm, b);
    } else {
      bm.fail("kind",
              "must be 'openai' (an OpenAI-compatible HTTP server) or 'local' (the "
              "in-process engine); found '" +
                  b.kind + "'");
    }
    if (auto t = bm.opt_map("timeouts")) {
      t->allow_only({"connect_ms", "first_byte_ms", "idle_ms", "total_ms"});
      b.timeouts.connect_ms = t->integer_or("connect_ms", b.timeouts.connect_ms, 1, 3600000);
      b.timeouts.first_byte_ms =
          t->integer_or("first_byte_ms", b.timeouts.first_byte_ms, 1, 3600000);
      b.timeouts.idle_ms = t->integer_or("idle_ms", b.timeouts.idle_ms, 1, 3600000);
      b.timeouts.total_ms = t->integer_or("total_ms", b.timeouts.total_ms, 1, 86400000);
    }
    cfg.backends.push_back(std::move(b));
  }
}

void parse_models(const Map& root, const std::string& file, Config& cfg) {
  std::set<std::string> model_names;
  for (const auto& node : root.seq_or_empty("models")) {
    Map mm(node, file, "a model");
    mm.allow_only({"name", "backend", "upstream_model", "tokenizer", "context_length"});
    ModelConfig m;
    m.name = mm.str("name");
    if (!model_names.insert(m.name).second) mm.fail("name", "duplicate model '" + m.name + "'");
    m.backend = mm.str("backend");
    if (cfg.find_backend(m.backend) == nullptr) {
      mm.fail("backend", "no backend named '" + m.backend + "' is defined under 'backends'");
    }
    m.upstream_model = mm.opt_str("upstream_model").value_or(m.name);
    m.tokenizer = mm.opt_str("tokenizer").value_or("");
    m.context_length = mm.integer_or("context_length", 0, 0, 1 << 30);
    cfg.models.push_back(std::move(m));
  }
}

Config parse(const YAML::Node& root_node, const std::string& file) {
  Config cfg;
  cfg.source = file;
  if (!root_node || root_node.IsNull()) {
    throw YamlError(file, YAML::Mark::null_mark(), "the config is empty");
  }
  Map root(root_node, file, "the config");
  root.allow_only({"server", "limits", "cache", "auth", "backends", "models", "log", "policy",
                   "ledger", "prices", "budgets", "rate_limits"});
  if (auto slash = file.rfind('/'); slash != std::string::npos && file != "<embedded default>") {
    cfg.base_dir = file.substr(0, slash);
  } else if (file != "<embedded default>") {
    cfg.base_dir = ".";
  }
  if (auto server = root.opt_map("server")) parse_server(*server, cfg);
  if (auto limits = root.opt_map("limits")) parse_limits(*limits, cfg.limits);
  if (auto cache = root.opt_map("cache")) {
    cache->allow_only({"max_bytes", "per_policy_version", "per_price_version", "persist"});
    cfg.cache.max_bytes = cache->integer_or("max_bytes", cfg.cache.max_bytes, 0, 1LL << 40);
    cfg.cache.per_policy_version =
        cache->boolean_or("per_policy_version", cfg.cache.per_policy_version);
    cfg.cache.per_price_version =
        cache->boolean_or("per_price_version", cfg.cache.per_price_version);
    if (auto persist = cache->opt_map("persist")) {
      persist->allow_only({"path", "max_bytes"});
      cfg.cache.persist_path = cfg.resolve_path(persist->str("path"));
      cfg.cache.persist_max_bytes =
          persist->integer_or("max_bytes", cfg.cache.persist_max_bytes, 1 << 20, 1LL << 40);
    }
  }
  if (auto auth = root.opt_map("auth")) parse_auth(*auth, file, cfg);
  parse_backends(root, file, cfg);
  parse_models(root, file, cfg);
  if (auto log = root.opt_map("log")) {
    log->allow_only({"access_log"});
    cfg.log.access_log = log->opt_str("access_log").value_or("stdout");
  }
  if (auto policy = root.opt_map("policy")) {
    policy->allow_only({"file", "watch", "debounce_ms"});
    PolicyConfig p;
    p.file = cfg.resolve_path(policy->str("file"));
    p.watch = policy->boolean_or("watch", true);
    p.debounce_ms = policy->integer_or("debounce_ms", p.debounce_ms, 0, 600000);
    cfg.policy = std::move(p);
  }
  if (root.has("ledger")) cfg.ledger.node = root.raw("ledger");
  if (root.has("prices")) cfg.prices.node = root.raw("prices");
  if (root.has("budgets")) cfg.budgets.node = root.raw("budgets");
  if (root.has("rate_limits")) cfg.rate_limits.node = root.raw("rate_limits");
  for (auto& b : cfg.backends) {
    if (b.local) b.local->model_path = cfg.resolve_path(b.local->model_path);
  }
  return cfg;
}

}  // namespace

Result<Config> load_config_text(const std::string& text, const std::string& source_name) {
  try {
    return parse(yaml::parse(text, source_name), source_name);
  } catch (const YamlError& e) {
    return Error::make(ErrorCode::kInvalidRequest, e.what());
  } catch (const YAML::Exception& e) {
    return Error::make(ErrorCode::kInvalidRequest,
                       source_name + ":" + std::to_string(e.mark.line + 1) + ":" +
                           std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
}

Result<Config> load_config_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error::make(ErrorCode::kInvalidRequest, path + ": cannot read the config file");
  std::stringstream ss;
  ss << in.rdbuf();
  return load_config_text(ss.str(), path);
}

}  // namespace ferry::config
