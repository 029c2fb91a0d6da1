// Fuzzes the Anthropic Messages parser (api/anthropic_parse) and, for a body it accepts, the
// translation a chat backend gets (api::render_openai): it must be one JSON object naming the
// backend's model, and parse back as an OpenAI chat request. The first input byte picks
// count_tokens (no max_tokens) or an answer; the rest is the body.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "api/anthropic_parse.h"
#include "api/openai_parse.h"
#include "api/openai_render.h"

using namespace ferry;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool count_tokens = (data[0] & 1) != 0;
  std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  api::ChatRequest request;
  api::AnthropicParseInfo info;
  if (!api::parse_anthropic_into(body, request, info, {.count_tokens = count_tokens})) return 0;
  if (request.messages.empty() && !info.native_only) __builtin_trap();  // accepted nothing
  // Content only a native Messages backend takes (images, server tools) is never translated.
  if (info.native_only) return 0;
  const std::string upstream = api::render_openai(request, "fuzz-upstream");
  auto out = nlohmann::json::parse(upstream, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded() || !out.is_object()) __builtin_trap();  // not JSON
  if (out.value("model", std::string()) != "fuzz-upstream") __builtin_trap();
  if (!api::parse_openai(api::Endpoint::kChatCompletions, upstream,
                         {.max_tokens_limit = INT64_MAX})) {
    __builtin_trap();  // the translation is not a chat request
  }
  return 0;
}
