#include "gateway/console.h"

#include <algorithm>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <nlohmann/json.hpp>

#include "common/sha256.h"
#include "console/assets.h"

namespace ferry::gateway {

namespace {

// No inline script or style, nothing from elsewhere, never framed.
constexpr const char* kCsp =
    "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'";

void add_security_headers(Reply& r, bool cacheable) {
  r.headers.emplace_back("content-security-policy", kCsp);
  r.headers.emplace_back("x-content-type-options", "nosniff");
  r.headers.emplace_back("x-frame-options", "DENY");
  r.headers.emplace_back("referrer-policy", "no-referrer");
  r.headers.emplace_back("cache-control", cacheable ? "no-cache" : "no-store");
}

Reply console_error(int status, ErrorCode code, const std::string& message,
                    const std::string& type_code) {
  Reply r = error_reply(Error::make(code, message, "", type_code));
  r.status = status;
  add_security_headers(r, false);
  return r;
}

std::string random_hex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(bytes)) != 1) {
    return "";  // the caller refuses to sign in without randomness
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

// The value of cookie `name` in a Cookie header ("a=1; ferry_console=abc"), or "".
std::string_view cookie_value(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    size_t semi = header.find(';');
    std::string_view part = header.substr(0, semi);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    if (part.size() > name.size() && part.starts_with(name) && part[name.size()] == '=') {
      return part.substr(name.size() + 1);
    }
    if (semi == std::string_view::npos) break;
    header.remove_prefix(semi + 1);
  }
  return {};
}

bool same_secret(std::string_view a, std::string_view b) {
  return a.size() == b.size() && !a.empty() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool is_safe_method(std::string_view method) {
  return method == "GET" || method == "HEAD";
}

}  // namespace

Console::Console(const Authenticator& auth, const config::Config& config)
    : auth_(auth),
      session_us_((config.server.console_session_seconds > 0
                       ? config.server.console_session_seconds
                       : config.server.console_session_minutes * 60) *
                  1000000),
      secure_(config.server.tls.has_value()) {}

bool Console::owns(std::string_view path) {
  return path == kConsolePath ||
         (path.starts_with(kConsolePath) && path.size() > kConsolePath.size() &&
          path[kConsolePath.size()] == '/');
}

size_t Console::session_count() const {
  std::lock_guard lock(mu_);
  return sessions_.size();
}

ConsoleRoute Console::route(const HttpRequestView& req, std::string_view path, int64_t now_us) {
  ConsoleRoute out;
  const bool api = path == kConsoleApi || path.starts_with(std::string(kConsoleApi) + "/");
  if (!api) {
    out.reply = asset(req, path);
    return out;
  }
  std::string_view inner = path.substr(kConsoleApi.size());
  if (inner == "/session") {
    out.reply = session_call(req, now_us);
    return out;
  }
  auto session = find_session(req, now_us);
  if (!session) {
    out.reply = console_error(401, ErrorCode::kUnauthorized,
                              "sign in to the console first (POST /console/api/session with a "
                              "finance or admin key)",
                              "no_session");
    return out;
  }
  if (!is_safe_method(req.method) && !same_secret(req.csrf_header, session->csrf)) {
    out.reply = console_error(403, ErrorCode::kForbidden,
                              "a state-changing console call needs the session's CSRF token in "
                              "the " +
                                  std::string(kCsrfHeader) + " header",
                              "csrf_token_missing");
    return out;
  }
  std::string allow;
  const Endpoint* e = find_endpoint(req.method, inner, allow);
  if (e != nullptr && (e->access == Access::kOpen || e->access == Access::kApp)) {
    out.reply = console_error(404, ErrorCode::kNotFound,
                              "the console offers the finance and admin endpoints only", "");
    return out;
  }
  out.inner_path = std::string(inner);
  out.principal = std::move(session->principal);
  return out;
}

Reply Console::asset(const HttpRequestView& req, std::string_view path) const {
  std::string_view file = path.substr(kConsolePath.size());
  if (file.empty() || file == "/") file = "/index.html";
  const console::Asset* a = console::find_asset(file);
  if (a == nullptr) {
    return console_error(404, ErrorCode::kNotFound, "no console file " + std::string(path),
                         "unknown_url");
  }
  if (!is_safe_method(req.method)) {
    Reply r = console_error(
        405, ErrorCode::kInvalidRequest,
        "Method " + std::string(req.method) + " is not allowed on " + std::string(path),
        "method_not_allowed");
    r.headers.emplace_back("allow", "GET, HEAD");
    return r;
  }
  Reply r;
  r.content_type = std::string(a->content_type);
  add_security_headers(r, true);
  r.headers.emplace_back("etag", std::string(a->etag));
  if (req.if_none_match == a->etag) {
    r.status = 304;
    return r;
  }
  r.body = std::string(a->bytes);
  return r;
}

Reply Console::session_call(const HttpRequestView& req, int64_t now_us) {
  if (req.method == "POST") return sign_in(req, now_us);
  auto session = find_session(req, now_us);
  if (req.method != "GET" && req.method != "DELETE") {
    Reply r = console_error(405, ErrorCode::kInvalidRequest,
                            "Method " + std::string(req.method) + " is not allowed on " +
                                std::string(kConsoleApi) + "/session",
                            "method_not_allowed");
    r.headers.emplace_back("allow", "GET, POST, DELETE");
    return r;
  }
  if (!session) {
    return console_error(401, ErrorCode::kUnauthorized, "not signed in (or the session expired)",
                         "no_session");
  }
  if (req.method == "DELETE") {
    if (!same_secret(req.csrf_header, session->csrf)) {
      return console_error(403, ErrorCode::kForbidden,
                           "signing out needs the session's CSRF token in the " +
                               std::string(kCsrfHeader) + " header",
                           "csrf_token_missing");
    }
    drop_session(req);
    Reply r;
    r.body = "{\"signed_out\":true}";
    add_security_headers(r, false);
    r.headers.emplace_back("set-cookie", cookie("", 0));
    return r;
  }
  // GET: who is signed in, and the CSRF token again (a reloaded page lost it; the answer is
  // readable only from this origin).
  nlohmann::json j = {{"key_id", session->principal.key_id},
                      {"role", config::role_name(session->principal.role)},
                      {"team", session->principal.team},
                      {"csrf_token", session->csrf},
                      {"expires_at_us", session->expires_us}};
  Reply r;
  r.body = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  add_security_headers(r, false);
  return r;
}

Reply Console::sign_in(const HttpRequestView& req, int64_t now_us) {
  auto body = nlohmann::json::parse(req.body, nullptr, false);
  if (!body.is_object() || !body.contains("key") || !body["key"].is_string()) {
    return console_error(400, ErrorCode::kInvalidRequest,
                         "the body must be a JSON object {\"key\": \"<a finance or admin key>\"}",
                         "invalid_value");
  }
  if (!auth_.enabled()) {
    return console_error(403, ErrorCode::kForbidden,
                         "authentication is off (no keys in the config): the console needs "
                         "configured finance or admin keys",
                         "auth_off");
  }
  if (int64_t wait_s = sign_in_wait_s(now_us); wait_s > 0) {
    Reply r =
        console_error(429, ErrorCode::kRateLimited,
                      "too many failed sign-ins: wait " + std::to_string(wait_s) + " s (at most " +
                          std::to_string(kMaxFailedSignIns) + " a minute are allowed)",
                      "sign_in_rate_limited");
    r.headers.emplace_back("retry-after", std::to_string(wait_s));
    return r;
  }
  auto principal = auth_.authenticate_key(body["key"].get<std::string>());
  if (!principal) {
    note_failed_sign_in(now_us);
    return console_error(401, ErrorCode::kUnauthorized, principal.error().message, "");
  }
  if (principal->role == config::Role::kApp) {
    return console_error(403, ErrorCode::kForbidden,
                         "the console is for finance and admin keys; key '" + principal->key_id +
                             "' has the role 'app'",
                         "insufficient_role");
  }
  std::string id = random_hex(32);
  std::string csrf = random_hex(32);
  if (id.empty() || csrf.empty()) {
    return console_error(500, ErrorCode::kInternal, "no randomness for a session id", "");
  }
  Session s{*principal, csrf, now_us + session_us_};
  {
    std::lock_guard lock(mu_);
    if (sessions_.size() >= kMaxSessions) {
      std::erase_if(sessions_, [now_us](const auto& kv) { return kv.second.expires_us <= now_us; });
    }
    if (sessions_.size() >= kMaxSessions) {
      return console_error(503, ErrorCode::kUnavailable, "too many console sessions", "");
    }
    sessions_[sha256_hex(id)] = s;
  }
  nlohmann::json j = {{"key_id", s.principal.key_id},
                      {"role", config::role_name(s.principal.role)},
                      {"team", s.principal.team},
                      {"csrf_token", s.csrf},
                      {"expires_at_us", s.expires_us}};
  Reply r;
  r.body = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  add_security_headers(r, false);
  r.headers.emplace_back("set-cookie", cookie(id, session_us_ / 1000000));
  return r;
}

// Failed sign-ins over the last minute, counted for the whole server (the console sees no
// client address): past kMaxFailedSignIns the next attempt waits until the oldest leaves.
int64_t Console::sign_in_wait_s(int64_t now_us) {
  std::lock_guard lock(mu_);
  while (!failed_sign_ins_.empty() && failed_sign_ins_.front() <= now_us - kSignInWindowUs) {
    failed_sign_ins_.pop_front();
  }
  if (failed_sign_ins_.size() < kMaxFailedSignIns) return 0;
  int64_t wait_us = failed_sign_ins_.front() + kSignInWindowUs - now_us;
  return std::max<int64_t>(1, (wait_us + 999999) / 1000000);
}

void Console::note_failed_sign_in(int64_t now_us) {
  std::lock_guard lock(mu_);
  failed_sign_ins_.push_back(now_us);
  if (failed_sign_ins_.size() > kMaxFailedSignIns) failed_sign_ins_.pop_front();
}

std::optional<Console::Session> Console::find_session(const HttpRequestView& req,
                                                      int64_t now_us) const {
  std::string_view id = cookie_value(req.cookie, kSessionCookie);
  if (id.empty()) return std::nullopt;
  std::string hash = sha256_hex(id);
  std::lock_guard lock(mu_);
  auto it = sessions_.find(hash);
  if (it == sessions_.end() || it->second.expires_us <= now_us) return std::nullopt;
  // A session ends with its key: a stored key revoked (on any instance) signs it out.
  if (!auth_.key_active(it->second.principal.key_id)) return std::nullopt;
  return it->second;
}

void Console::drop_session(const HttpRequestView& req) {
  std::string hash = sha256_hex(cookie_value(req.cookie, kSessionCookie));
  std::lock_guard lock(mu_);
  sessions_.erase(hash);
}

std::string Console::cookie(std::string_view id, int64_t max_age_s) const {
  return std::string(kSessionCookie) + "=" + std::string(id) +
         "; Path=/console; HttpOnly; SameSite=Strict; Max-Age=" + std::to_string(max_age_s) +
         (secure_ ? "; Secure" : "");
}

}  // namespace ferry::gateway
