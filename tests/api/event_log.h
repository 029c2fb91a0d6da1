// Test helpers: an EventSink that keeps owned copies of the events it is sent, and one that
// renders them through a renderer into a string. Not thread-safe.
#pragma once

#include <string>
#include <vector>

#include "api/events.h"

namespace ferry::api {

struct OwnedEvent {
  std::string type;  // start, block_start, delta, block_stop, finish, error
  uint32_t index = 0;
  BlockKind block = BlockKind::kText;
  DeltaKind delta = DeltaKind::kText;
  std::string text;  // delta fragment, error message, start model, block name
  std::string id;    // start id, block call id
  FinishReason reason = FinishReason::kStop;
  std::string stop_sequence;
  Usage usage;
};

class EventLog final : public EventSink {
 public:
  void on_event(const Event& event) override {
    OwnedEvent o;
    if (const auto* e = std::get_if<StartEvent>(&event)) {
      o = {"start", 0, {}, {}, std::string(e->model), std::string(e->id)};
      o.usage = e->usage;
    } else if (const auto* e = std::get_if<BlockStartEvent>(&event)) {
      o = {"block_start", e->index, e->kind, {}, std::string(e->name), std::string(e->call_id)};
    } else if (const auto* e = std::get_if<DeltaEvent>(&event)) {
      o = {"delta", e->index, {}, e->kind, std::string(e->fragment)};
    } else if (const auto* e = std::get_if<BlockStopEvent>(&event)) {
      o = {"block_stop", e->index};
    } else if (const auto* e = std::get_if<FinishEvent>(&event)) {
      o.type = "finish";
      o.reason = e->reason;
      o.stop_sequence = e->stop_sequence;
      o.usage = e->usage;
    } else if (const auto* e = std::get_if<ErrorEvent>(&event)) {
      o.type = "error";
      o.text = e->error->message;
    }
    events.push_back(std::move(o));
  }
  size_t count(const std::string& type) const {
    size_t n = 0;
    for (const auto& e : events) n += e.type == type;
    return n;
  }
  std::vector<OwnedEvent> events;
};

// Renders every event it is sent with `Renderer::render(event, out)`.
template <typename Renderer>
class RenderSink final : public EventSink {
 public:
  explicit RenderSink(Renderer& renderer) : renderer_(renderer) {}
  void on_event(const Event& event) override { renderer_.render(event, out); }
  std::string out;

 private:
  Renderer& renderer_;
};

}  // namespace ferry::api
