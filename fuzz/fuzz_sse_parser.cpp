// Fuzzes the SSE parser (adapters/sse_parser) and what the HTTP backend does with each event
// (adapters/openai_wire: inspect_stream_chunk, find_finish_reason). The stream is parsed whole
// and again in pieces (the first input byte picks their size): the events, the outcome and the
// unfinished-event flag must not depend on where the bytes were split. A chunk that was JSON
// must still be JSON after the usage is stripped from it.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "adapters/openai_wire.h"
#include "adapters/sse_parser.h"

using namespace ferry;

namespace {

struct Outcome {
  std::vector<std::pair<std::string, std::string>> events;
  bool ok = true;
  bool partial = false;
};

// A small limit, so that the size checks are reached too.
constexpr size_t kMaxEventBytes = 4096;

Outcome parse(std::string_view stream, size_t piece) {
  adapters::SseParser parser(kMaxEventBytes);
  Outcome out;
  auto on_event = [&](std::string_view event, std::string_view data) {
    out.events.emplace_back(event, data);
  };
  for (size_t at = 0; at < stream.size() && out.ok; at += piece) {
    out.ok = parser.feed(stream.substr(at, piece), on_event);
  }
  out.partial = parser.has_partial_event();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = static_cast<size_t>(data[0] & 0x3f) + 1;
  const bool wants_usage = (data[0] & 0x40) != 0;
  std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);

  Outcome whole = parse(stream, stream.size() + 1);
  Outcome pieces = parse(stream, piece);
  if (whole.ok != pieces.ok || whole.events != pieces.events) __builtin_trap();
  if (whole.ok && whole.partial != pieces.partial) __builtin_trap();

  for (const auto& [event, chunk] : whole.events) {
    if (chunk == "[DONE]") continue;
    adapters::ChunkAction action = adapters::inspect_stream_chunk(chunk, wants_usage);
    (void)adapters::find_finish_reason(action.rewritten ? *action.rewritten : chunk);
    if (action.rewritten && nlohmann::json::accept(chunk) &&
        !nlohmann::json::accept(*action.rewritten)) {
      __builtin_trap();  // stripping the usage broke a chunk that was JSON
    }
  }
  return 0;
}
