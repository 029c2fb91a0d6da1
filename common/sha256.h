// SHA-256 helpers over OpenSSL. Stateless; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace ferry {

// Lower-case hex SHA-256 of the bytes.
std::string sha256_hex(std::string_view data);

}  // namespace ferry
