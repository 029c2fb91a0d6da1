#include "api/json_writer.h"

#include <charconv>
#include <cstdint>

namespace ferry::api {

void append_json_int(std::string& out, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;  // 24 bytes hold any int64
  out.append(buf, static_cast<size_t>(end - buf));
}

}  // namespace ferry::api
