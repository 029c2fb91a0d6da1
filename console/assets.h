// The console's static files (console/web), embedded in the binary at build time by
// console/embed_assets.cmake: path, content type, ETag and bytes of each.
// Thread-safety: immutable data; safe from any thread.
#pragma once

#include <span>
#include <string_view>

namespace ferry::console {

struct Asset {
  std::string_view path;          // "/index.html", relative to /console
  std::string_view content_type;  // "text/html; charset=utf-8"
  std::string_view etag;          // quoted: "\"0123456789abcdef\""
  std::string_view bytes;
};

// Every embedded file.
std::span<const Asset> assets();

// The asset at `path` ("/app.js"), or nullptr.
inline const Asset* find_asset(std::string_view path) {
  for (const auto& a : assets()) {
    if (a.path == path) return &a;
  }
  return nullptr;
}

}  // namespace ferry::console
