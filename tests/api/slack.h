// A request body as the gateway's request reader leaves it: at least kJsonReadSlack bytes of
// spare capacity past its end (api's ParseOptions::readable_past_end), here filled with `junk`,
// so that a test shows a body parsed in place is read to its last byte and no further.
#pragma once

#include <string>

#include "common/json_text.h"

namespace ferry::api::testing {

// The junk bodies end with in the slack, and bodies cut where the junk would complete them.
inline const char* const kSlackJunk[] = {"}", "\"}]}", "\xa9\"}]}", "0}", "\n"};

inline std::string with_slack(const std::string& body, const std::string& junk) {
  std::string out;
  out.reserve(body.size() + kJsonReadSlack + junk.size());
  out = body;
  while (out.size() + junk.size() <= out.capacity()) out += junk;
  out.resize(body.size());  // the junk stays in the slack
  return out;
}

inline size_t slack_of(const std::string& s) {
  return s.capacity() - s.size();
}

}  // namespace ferry::api::testing
