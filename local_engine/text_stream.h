// Incremental detokenized text: token pieces (bytes) in, valid UTF-8 out, never splitting a
// character across chunks, holding back text that may begin a stop string, and cutting the
// output where a stop string appears. One per generation; not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ferry::engine {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stop_strings = {});

  // Adds a token's bytes; returns the text that is now safe to emit (maybe empty).
  std::string push(std::string_view piece);
  // Ends the stream: returns what was held back (an unfinished character becomes U+FFFD).
  std::string finish();
  // True once a stop string matched; later pushes return "".
  bool stopped() const { return stopped_; }
  // Everything emitted so far.
  const std::string& text() const { return text_; }

 private:
  std::string emit(size_t n_bytes, bool final);

  std::vector<std::string> stops_;
  std::string pending_;
  std::string text_;
  bool stopped_ = false;
};

// Appends `bytes` as valid UTF-8 to `out`, each invalid byte replaced by U+FFFD. When `final`
// is false an unfinished character at the end is left out; returns the bytes consumed.
size_t append_valid_utf8(std::string_view bytes, bool final, std::string& out);

}  // namespace ferry::engine
