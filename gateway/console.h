// The console at /console: its embedded files (console/assets.h), sign-in with a finance or
// admin key into a server-side session (an HttpOnly, SameSite=Strict cookie holding a random
// id, never the key; a CSRF token for every state-changing call), and the mapping of
// /console/api/<path> onto the endpoint table's own /<path> rows, so that the console reads
// exactly the JSON endpoints scripts call with a key. No sockets, no Beast.
// Thread-safety: route() is called from every I/O thread at once; the sessions sit under one
// mutex (held for a map lookup or insert, never across I/O).
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "config/config.h"
#include "gateway/auth.h"
#include "gateway/endpoints.h"

namespace ferry::gateway {

inline constexpr std::string_view kConsolePath = "/console";
inline constexpr std::string_view kConsoleApi = "/console/api";
inline constexpr std::string_view kSessionCookie = "ferry_console";
inline constexpr std::string_view kCsrfHeader = "x-ferry-csrf";

// What dispatch does with a request under /console.
struct ConsoleRoute {
  std::optional<Reply> reply;          // answered here: a file, the session, a refusal
  std::string inner_path;              // else the endpoint row this API call names
  std::optional<Principal> principal;  // and who the session signed in
};

class Console {
 public:
  Console(const Authenticator& auth, const config::Config& config);

  // "/console" or under "/console/".
  static bool owns(std::string_view path);

  ConsoleRoute route(const HttpRequestView& request, std::string_view path, int64_t now_us);

  // Sessions held now (expired ones included until the next sign-in sweeps them).
  size_t session_count() const;

 private:
  struct Session {
    Principal principal;
    std::string csrf;
    int64_t expires_us = 0;
  };

  Reply asset(const HttpRequestView& request, std::string_view path) const;
  Reply session_call(const HttpRequestView& request, int64_t now_us);
  Reply sign_in(const HttpRequestView& request, int64_t now_us);
  // The live session the request's cookie names, or nullopt.
  std::optional<Session> find_session(const HttpRequestView& request, int64_t now_us) const;
  void drop_session(const HttpRequestView& request);
  std::string cookie(std::string_view id, int64_t max_age_s) const;
  // Seconds a sign-in must wait (0: none) after too many failed ones; and one more failure.
  int64_t sign_in_wait_s(int64_t now_us);
  void note_failed_sign_in(int64_t now_us);

  const Authenticator& auth_;
  const int64_t session_us_;
  const bool secure_;  // TLS listener: the cookie is Secure

  static constexpr size_t kMaxSessions = 10000;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Session> sessions_;  // by SHA-256 of the id; guarded by mu_
  static constexpr size_t kMaxFailedSignIns = 10;
  static constexpr int64_t kSignInWindowUs = 60 * 1000000;
  std::deque<int64_t> failed_sign_ins_;  // their times, oldest first; guarded by mu_
};

}  // namespace ferry::gateway
