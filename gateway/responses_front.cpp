#include "gateway/responses_front.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>

#include "api/dom_value.h"
#include "api/json_read.h"
#include "api/responses_render.h"

namespace ferry::gateway {

namespace {

// The render options of one answer: the echo of the request, the client's model name.
api::ResponsesRenderOptions options_of(const RenderContext& context) {
  api::ResponsesRenderOptions options;
  options.identity.model = std::string(context.model);
  if (context.responses != nullptr) options.echo = context.responses->echo;
  return options;
}

// The Responses stream renderer; the final `response` object goes to the context's slot for
// the response store.
class ResponsesStream final : public StreamRenderer {
 public:
  explicit ResponsesStream(const RenderContext& context)
      : renderer_(options_of(context)), final_(context.final_response) {}
  void render(const api::Event& event, std::string& out) override {
    const size_t before = out.size();
    renderer_.render(event, out);
    const bool last = std::holds_alternative<api::FinishEvent>(event) ||
                      std::holds_alternative<api::ErrorEvent>(event);
    // The final object as the client got it (the last event's response, if it has one), and
    // what the store reads of it (its id, its output) as the renderer wrote them.
    if (last && final_ != nullptr) {
      std::string_view response =
          out.size() > before ? renderer_.last_response(out) : std::string_view();
      final_->assign(response);
      std::string_view output = renderer_.last_output(out);
      if (!response.empty() && !output.empty() && plain_id(renderer_.response_id())) {
        final_->id = renderer_.response_id();
        final_->output_at = static_cast<size_t>(output.data() - response.data());
        final_->output_size = output.size();
      }
    }
  }
  std::optional<Error> failure() const override { return renderer_.failure(); }
  bool fail_after_end(const Error& error, std::string& out) override {
    renderer_.fail_after_end(error, out);
    if (final_ != nullptr) final_->clear();  // a failed response is not stored
    return true;
  }

 private:
  // An id that reads as it is written (no escapes, valid UTF-8): ferry's own ids.
  static bool plain_id(std::string_view id) {
    return !id.empty() && std::all_of(id.begin(), id.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '_' || c == '-';
    });
  }

  api::ResponsesStreamRenderer renderer_;
  FinalResponse* final_;
};

// JSON array texts a and b joined into one array.
std::string join_arrays(std::string_view a, std::string_view b) {
  auto inner = [](std::string_view s) {
    s.remove_prefix(s.find('[') + 1);
    s.remove_suffix(s.size() - s.rfind(']'));
    while (!s.empty() && (s.front() == ' ' || s.front() == '\n')) s.remove_prefix(1);
    return s;
  };
  std::string_view x = inner(a), y = inner(b);
  std::string out = "[";
  out.append(x);
  if (!x.empty() && !y.empty()) out += ',';
  out.append(y);
  out += ']';
  return out;
}

}  // namespace

Result<ParsedRequest> parse_responses_request(std::string body, const FrontEndHeaders& /*headers*/,
                                              bool /*count_only*/) {
  api::ParseOptions options;
  options.readable_past_end = body.capacity() - body.size();  // the reader's slack: no copy
  auto parsed = api::parse_responses(body, options);
  if (!parsed) return parsed.error();
  ParsedRequest out;
  out.endpoint = adapters::Endpoint::kChatCompletions;  // the typed value is chat-shaped
  out.api = api::Endpoint::kResponses;
  out.raw = std::move(body);
  auto responses = std::make_shared<api::ResponsesRequest>(std::move(*parsed));
  const api::ChatRequest& chat = responses->chat;
  out.model = chat.model;
  out.stream = chat.streams();
  out.max_tokens = chat.limits.effective_max_tokens();
  out.temperature = chat.sampling.temperature;
  out.top_p = chat.sampling.top_p;
  out.tools = chat.has_tools();
  out.response_format = chat.has_response_format();
  out.task_id = chat.metadata.task_id;
  out.claimed_tags = chat.metadata.tags;
  out.model_keys = 1;
  out.native_only = responses->needs_native;
  out.typed = std::shared_ptr<const api::ChatRequest>(responses, &responses->chat);
  out.responses = std::move(responses);
  return out;
}

Result<api::WireBody> render_responses_answer(const api::Answer& answer,
                                              const RenderContext& context) {
  api::WireBody body = api::render_response(answer, options_of(context));
  if (context.final_response != nullptr && body.status == 200) {
    context.final_response->assign(body.body);
  }
  return body;
}

std::string responses_stream_error(const Error& error) {
  std::string out;
  api::ResponsesStreamRenderer renderer;
  renderer.render(api::ErrorEvent{&error}, out);
  return out;
}

std::unique_ptr<StreamRenderer> responses_stream_renderer(const RenderContext& context) {
  return std::make_unique<ResponsesStream>(context);
}

Error previous_response_not_found(std::string_view id) {
  return Error::make(ErrorCode::kNotFound,
                     "Previous response with id '" + std::string(id) + "' not found.",
                     "previous_response_id", "previous_response_not_found");
}

Status apply_previous_response(ParsedRequest& request, const ledger::StoredResponse& stored) {
  auto copy = std::make_shared<api::ResponsesRequest>(*request.responses);
  if (Status s = api::continue_from(*copy, join_arrays(stored.items, stored.output)); !s) return s;
  request.typed = std::shared_ptr<const api::ChatRequest>(copy, &copy->chat);
  request.responses = std::move(copy);
  return {};
}

namespace {

// The `id` (a string) and `output` (an array, as a kept tree dumps it: api::append_dom_json) of a
// response object, each its last occurrence as a tree keeps it; false when it is not an object
// with both. simdjson reads it; what simdjson does not (a number beyond 64 bits, deeper than its
// limit) nlohmann reads, with the same result.
bool stored_parts(std::string_view json, std::string& id, std::string& output) {
  thread_local api::JsonReader reader;
  simdjson::dom::element doc;
  if (reader.parse(json).get(doc) == simdjson::SUCCESS) {
    if (!doc.is_object()) return false;
    std::optional<simdjson::dom::element> id_value, output_value;
    for (auto [key, value] : api::object_of(doc)) {
      if (key == "id") id_value = value;
      if (key == "output") output_value = value;
    }
    if (!id_value || !id_value->is_string() || !output_value || !output_value->is_array()) {
      return false;
    }
    id = std::string(api::string_of(*id_value));
    api::append_dom_json(output, *output_value);
    return true;
  }
  auto response = nlohmann::ordered_json::parse(json, nullptr, false);
  if (!response.is_object() || !response.contains("id") || !response["id"].is_string() ||
      !response.contains("output") || !response["output"].is_array()) {
    return false;
  }
  id = response["id"].get<std::string>();
  output = response["output"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return true;
}

}  // namespace

std::optional<ledger::StoredResponse> response_to_store(const api::ResponsesRequest& request,
                                                        std::string_view response_json,
                                                        const std::string& key_id) {
  FinalResponse final;
  final.assign(response_json);
  return response_to_store(request, final, key_id);
}

std::optional<ledger::StoredResponse> response_to_store(const api::ResponsesRequest& request,
                                                        const FinalResponse& final,
                                                        const std::string& key_id) {
  std::string_view response_json = final.json;
  if (!request.store || response_json.empty()) return std::nullopt;
  ledger::StoredResponse out;
  if (final.output_size > 0 && final.output_at + final.output_size <= response_json.size()) {
    out.id = final.id;  // as the renderer wrote them: what stored_parts would read
    out.output = std::string(response_json.substr(final.output_at, final.output_size));
  } else if (!stored_parts(response_json, out.id, out.output)) {
    return std::nullopt;
  }
  out.key_id = key_id;
  out.model = request.chat.model;
  out.items = join_arrays(request.history, request.input_items);
  out.response = std::string(response_json);
  return out;
}

}  // namespace ferry::gateway
