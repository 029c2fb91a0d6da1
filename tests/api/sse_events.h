// Test helper: the `event:` / `data:` pairs of what a renderer wrote, the data parsed as JSON
// (a failure of the calling test when it is not). Stateless.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace ferry::api {

struct SseEvent {
  std::string name;
  nlohmann::json data;
};

inline std::vector<SseEvent> parse_named_sse(const std::string& sse) {
  std::vector<SseEvent> out;
  size_t pos = 0;
  while (pos < sse.size()) {
    size_t end = sse.find("\n\n", pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "an unterminated event";
      break;
    }
    std::string ev = sse.substr(pos, end - pos);
    pos = end + 2;
    EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
    size_t nl = ev.find('\n');
    EXPECT_EQ(ev.compare(nl + 1, 6, "data: "), 0) << ev;
    out.push_back({ev.substr(7, nl - 7), nlohmann::json::parse(ev.substr(nl + 7))});
  }
  return out;
}

}  // namespace ferry::api
