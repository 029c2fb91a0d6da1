#include "local_engine/text_stream.h"

#include <algorithm>

namespace ferry::engine {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Length of the UTF-8 sequence a lead byte starts; 0 for a byte that cannot lead.
size_t utf8_length(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

bool continuation_ok(unsigned char lead, size_t index, unsigned char c) {
  if ((c & 0xC0) != 0x80) return false;
  if (index != 1) return true;
  // Reject overlong forms, surrogates and code points above U+10FFFF.
  if (lead == 0xE0) return c >= 0xA0;
  if (lead == 0xED) return c <= 0x9F;
  if (lead == 0xF0) return c >= 0x90;
  if (lead == 0xF4) return c <= 0x8F;
  return true;
}

}  // namespace

size_t append_valid_utf8(std::string_view bytes, bool final, std::string& out) {
  size_t i = 0;
  while (i < bytes.size()) {
    const auto lead = static_cast<unsigned char>(bytes[i]);
    const size_t len = utf8_length(lead);
    if (len == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    size_t k = 1;
    while (k < len && i + k < bytes.size() &&
           continuation_ok(lead, k, static_cast<unsigned char>(bytes[i + k]))) {
      ++k;
    }
    if (k == len) {
      out.append(bytes.substr(i, len));
      i += len;
    } else if (i + k == bytes.size() && !final) {
      break;  // unfinished character: wait for more bytes
    } else {
      out += kReplacement;
      i += k;
    }
  }
  return i;
}

TextStream::TextStream(std::vector<std::string> stop_strings) {
  for (auto& s : stop_strings) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string TextStream::push(std::string_view piece) {
  if (stopped_) return {};
  pending_.append(piece);
  size_t match = std::string::npos;
  for (const std::string& stop : stops_) match = std::min(match, pending_.find(stop));
  if (match != std::string::npos) {
    stopped_ = true;
    return emit(match, true);
  }
  // Hold back the longest tail that could still grow into a stop string.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    const size_t max_len = std::min(stop.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, stop, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  return emit(pending_.size() - hold, false);
}

std::string TextStream::finish() {
  if (stopped_) return {};
  return emit(pending_.size(), true);
}

std::string TextStream::emit(size_t n_bytes, bool final) {
  std::string out;
  const size_t used = append_valid_utf8(std::string_view(pending_).substr(0, n_bytes), final, out);
  pending_.erase(0, final ? pending_.size() : used);
  text_ += out;
  return out;
}

}  // namespace ferry::engine
