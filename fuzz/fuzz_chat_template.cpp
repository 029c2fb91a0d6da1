// Fuzzes the chat-template renderer: the template source (tokenizer/jinja, through
// tokenizer/chat_template's ChatFormatter, as a model's template is loaded) and the request it
// renders (messages, tools, chat_template_kwargs). Input: the template, then optionally a NUL
// byte and the request JSON; without one, a fixed two-message request. Rendering errors
// (raise_exception, type errors) are values; a crash, a hang or undefined behaviour is a
// finding.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

using namespace ferry;

namespace {

constexpr std::string_view kDefaultRequest =
    R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi!"}]})";

const std::shared_ptr<const tokenizer::Tokenizer>& cl100k() {
  static const std::shared_ptr<const tokenizer::Tokenizer> tok =
      *tokenizer::load_tokenizer("cl100k_base");
  return tok;
}

}  // namespace

// The tokenizer loads once, before the first input (its time is not an input's).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)cl100k();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view source = input;
  std::string_view request_text = kDefaultRequest;
  if (auto nul = input.find('\0'); nul != std::string_view::npos) {
    source = input.substr(0, nul);
    request_text = input.substr(nul + 1);
  }
  if (source.empty()) return 0;  // an empty source means "the tokenizer's own template"
  auto formatter = tokenizer::ChatFormatter::create(cl100k(), source);
  if (!formatter) return 0;
  auto request = nlohmann::ordered_json::parse(request_text, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) return 0;
  auto rendered = (*formatter)->render(request);
  auto counted = (*formatter)->count_json(request_text);
  // Counting renders the same prompt, so the two agree on whether it renders.
  if (static_cast<bool>(rendered) != static_cast<bool>(counted)) __builtin_trap();
  return 0;
}
