// Fuzzes the OpenAI request parser (gateway/openai_request: parse_request) and, for a body it
// accepts, the upstream rewrite (upstream_body), which splices the client's text instead of
// re-serialising it: the rewritten body must still be JSON, with the backend's model name,
// include_usage forced on for streams, and a rule's overrides in place. The typed value rendered
// back (api::render_openai) must parse again into the same value. The first input byte picks
// the endpoint and the overrides; the rest is the body.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "api/openai_parse.h"
#include "api/openai_render.h"
#include "gateway/openai_request.h"

using namespace ferry;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto endpoint =
      (mode & 1) != 0 ? adapters::Endpoint::kCompletions : adapters::Endpoint::kChatCompletions;
  auto parsed = gateway::parse_request(endpoint, std::move(body));
  if (!parsed) return 0;

  gateway::BodyOverrides overrides;
  if ((mode & 2) != 0) overrides.max_tokens = 77;
  if ((mode & 4) != 0) overrides.temperature = 0.25;
  if ((mode & 8) != 0) overrides.top_p = 0.5;
  const std::string upstream = gateway::upstream_body(*parsed, "fuzz-upstream", overrides);
  auto out = nlohmann::json::parse(upstream, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded() || !out.is_object()) __builtin_trap();  // the splice broke the JSON
  if (out.value("model", std::string()) != "fuzz-upstream") __builtin_trap();
  if (parsed->stream) {
    auto options = out.find("stream_options");
    if (options == out.end() || !options->is_object() ||
        options->value("include_usage", false) != true) {
      __builtin_trap();
    }
  }
  if (overrides.temperature && out.value("temperature", -1.0) != 0.25) __builtin_trap();
  if (overrides.top_p && out.value("top_p", -1.0) != 0.5) __builtin_trap();

  // Compared as JSON values, where member order does not count: a part kept as sent (say, one
  // naming `type` twice) and the same part typed on the second parse are written in different
  // orders, and mean the same thing.
  const api::Json typed = api::to_openai_json(*parsed->typed);
  auto again = api::parse_openai(endpoint, typed.dump());
  if (!again) __builtin_trap();  // the rendering does not parse
  const auto unordered = [](const api::Json& j) { return nlohmann::json::parse(j.dump()); };
  if (unordered(api::to_openai_json(*again)) != unordered(typed)) __builtin_trap();  // lost
  return 0;
}
