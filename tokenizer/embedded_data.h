// The rank files of cl100k_base and o200k_base, compiled into the binary (see
// embedded_data.cpp and fetch_encodings.cmake). Immutable; thread-safe.
#pragma once

#include <string_view>

namespace ferry::tokenizer {

std::string_view embedded_cl100k_base();
std::string_view embedded_o200k_base();

}  // namespace ferry::tokenizer
