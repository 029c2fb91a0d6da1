#include "gateway/openai_request.h"

#include <algorithm>
#include <vector>

#include "adapters/openai_wire.h"

namespace ferry::gateway {

namespace {

using nlohmann::json;

Error invalid(std::string message, std::string param) {
  return Error::make(ErrorCode::kInvalidRequest, std::move(message), std::move(param),
                     "invalid_value");
}

const char* kind_of(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    default: return "an unsupported value";
  }
}

// Checks an optional number field against a range. Returns an error message or "".
std::optional<Error> check_number(const json& body, const char* key, double min, double max) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) {
    return invalid(std::string("'") + key + "' must be a number, got " + kind_of(*it), key);
  }
  double v = it->get<double>();
  if (v < min || v > max) {
    return invalid(std::string("'") + key + "' must be between " + json(min).dump() + " and " +
                       json(max).dump() + ", got " + it->dump(),
                   key);
  }
  return std::nullopt;
}

std::optional<Error> check_integer(const json& body, const char* key, int64_t min, int64_t* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) {
    return invalid(std::string("'") + key + "' must be an integer, got " + kind_of(*it), key);
  }
  auto v = it->get<int64_t>();
  if (v < min) {
    return invalid(std::string("'") + key + "' must be at least " + std::to_string(min) +
                       ", got " + std::to_string(v),
                   key);
  }
  if (out != nullptr) *out = v;
  return std::nullopt;
}

std::optional<Error> check_type(const json& body, const char* key, json::value_t type,
                                const char* expected) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->type() != type && !(type == json::value_t::number_integer && it->is_number_integer())) {
    return invalid(std::string("'") + key + "' must be " + expected + ", got " + kind_of(*it),
                   key);
  }
  return std::nullopt;
}

std::optional<Error> check_messages(const json& body) {
  auto it = body.find("messages");
  if (it == body.end()) return invalid("'messages' is required", "messages");
  if (!it->is_array()) return invalid(std::string("'messages' must be an array, got ") + kind_of(*it), "messages");
  if (it->empty()) return invalid("'messages' must contain at least one message", "messages");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return invalid("'" + where + "' must be an object, got " + kind_of(m), where);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return invalid("'" + where + ".role' is required and must be a string", where + ".role");
    }
    const std::string& r = role->get_ref<const std::string&>();
    if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer" &&
        r != "function") {
      return invalid("'" + where + ".role' must be one of system, developer, user, assistant, "
                     "tool, function; got '" + r + "'",
                     where + ".role");
    }
    auto content = m.find("content");
    if (content != m.end() && !content->is_null() && !content->is_string() &&
        !content->is_array()) {
      return invalid("'" + where + ".content' must be a string or an array of parts, got " +
                         kind_of(*content),
                     where + ".content");
    }
  }
  return std::nullopt;
}

std::optional<Error> check_prompt(const json& body) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return invalid("'prompt' is required", "prompt");
  if (it->is_string()) return std::nullopt;
  if (it->is_array()) {
    bool ok = std::all_of(it->begin(), it->end(), [](const json& p) {
      if (p.is_string() || p.is_number_integer()) return true;
      return p.is_array() &&
             std::all_of(p.begin(), p.end(), [](const json& t) { return t.is_number_integer(); });
    });
    if (ok) return std::nullopt;
  }
  return invalid("'prompt' must be a string, an array of strings, or token arrays", "prompt");
}

}  // namespace

Result<ParsedRequest> parse_request(adapters::Endpoint endpoint, std::string_view body_text) {
  ParsedRequest out;
  out.endpoint = endpoint;
  out.raw = std::string(body_text);
  try {
    out.body = json::parse(body_text);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    bool utf8 = what.find("UTF-8") != std::string::npos;
    return Error::make(ErrorCode::kInvalidRequest,
                       utf8 ? "the request body is not valid UTF-8 (byte " +
                                  std::to_string(e.byte) + ")"
                            : "the request body is not valid JSON: " + what,
                       "", "invalid_json");
  }
  const json& b = out.body;
  if (!b.is_object()) {
    return invalid(std::string("the request body must be a JSON object, got ") + kind_of(b), "");
  }
  auto model = b.find("model");
  if (model == b.end() || model->is_null()) return invalid("'model' is required", "model");
  if (!model->is_string()) {
    return invalid(std::string("'model' must be a string, got ") + kind_of(*model), "model");
  }
  out.model = model->get<std::string>();

  if (auto e = endpoint == adapters::Endpoint::kChatCompletions ? check_messages(b)
                                                                : check_prompt(b)) {
    return *e;
  }
  if (auto e = check_type(b, "stream", json::value_t::boolean, "a boolean")) return *e;
  out.stream = b.value("stream", false) == true && b["stream"].is_boolean();
  if (auto so = b.find("stream_options"); so != b.end() && !so->is_null()) {
    if (!so->is_object()) {
      return invalid(std::string("'stream_options' must be an object, got ") + kind_of(*so),
                     "stream_options");
    }
    auto iu = so->find("include_usage");
    if (iu != so->end() && !iu->is_null()) {
      if (!iu->is_boolean()) {
        return invalid("'stream_options.include_usage' must be a boolean",
                       "stream_options.include_usage");
      }
      out.include_usage = iu->get<bool>();
    }
  }
  int64_t max_tokens = -1;
  if (auto e = check_integer(b, "max_tokens", 1, &max_tokens)) return *e;
  if (auto e = check_integer(b, "max_completion_tokens", 1, &max_tokens)) return *e;
  out.max_tokens = max_tokens;
  if (auto e = check_integer(b, "n", 1, nullptr)) return *e;
  if (auto e = check_integer(b, "seed", INT64_MIN, nullptr)) return *e;
  if (auto e = check_number(b, "temperature", 0, 2)) return *e;
  if (auto e = check_number(b, "top_p", 0, 1)) return *e;
  if (auto e = check_number(b, "presence_penalty", -2, 2)) return *e;
  if (auto e = check_number(b, "frequency_penalty", -2, 2)) return *e;
  if (auto e = check_type(b, "tools", json::value_t::array, "an array")) return *e;
  if (auto e = check_type(b, "response_format", json::value_t::object, "an object")) return *e;
  if (auto e = check_type(b, "logit_bias", json::value_t::object, "an object")) return *e;
  if (auto e = check_type(b, "metadata", json::value_t::object, "an object")) return *e;
  if (auto stop = b.find("stop"); stop != b.end() && !stop->is_null()) {
    bool ok = stop->is_string() ||
              (stop->is_array() && std::all_of(stop->begin(), stop->end(),
                                               [](const json& s) { return s.is_string(); }));
    if (!ok) return invalid("'stop' must be a string or an array of strings", "stop");
  }
  return out;
}

namespace {

size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return i;
}

// One past the end of the JSON value starting at `i` (the text is known to be valid JSON).
size_t value_end(std::string_view s, size_t i) {
  if (s[i] == '{' || s[i] == '[') return adapters::json_value_end(s, i);
  if (s[i] == '"') {
    for (size_t j = i + 1; j < s.size(); ++j) {
      if (s[j] == '\\') {
        ++j;
      } else if (s[j] == '"') {
        return j + 1;
      }
    }
    return s.size();
  }
  size_t j = i;
  while (j < s.size() && s[j] != ',' && s[j] != '}' && s[j] != ']' && s[j] != ' ' &&
         s[j] != '\n' && s[j] != '\r' && s[j] != '\t') {
    ++j;
  }
  return j;
}

struct Span {
  size_t begin = std::string_view::npos;
  size_t end = 0;
};

// Finds the value spans of the top-level keys `model` and `stream_options`, and the index of
// the object's closing brace. Returns false on anything unexpected (then the caller falls back
// to re-serialising). The last occurrence of a duplicated key wins, as in the parsed DOM.
bool top_level_spans(std::string_view s, Span& model, Span& stream_options, size_t& close) {
  size_t i = skip_ws(s, 0);
  if (i >= s.size() || s[i] != '{') return false;
  i = skip_ws(s, i + 1);
  while (i < s.size() && s[i] != '}') {
    if (s[i] != '"') return false;
    size_t key_end = value_end(s, i);
    std::string_view key = s.substr(i + 1, key_end - i - 2);
    i = skip_ws(s, key_end);
    if (i >= s.size() || s[i] != ':') return false;
    i = skip_ws(s, i + 1);
    if (i >= s.size()) return false;
    size_t end = value_end(s, i);
    if (end == std::string_view::npos || end > s.size()) return false;
    if (key == "model") model = {i, end};
    if (key == "stream_options") stream_options = {i, end};
    i = skip_ws(s, end);
    if (i < s.size() && s[i] == ',') i = skip_ws(s, i + 1);
  }
  if (i >= s.size()) return false;
  close = i;
  return model.begin != std::string_view::npos;
}

}  // namespace

std::string upstream_body(const ParsedRequest& request, const std::string& upstream_model) {
  std::string_view raw = request.raw;
  Span model;
  Span options;
  size_t close = 0;
  if (top_level_spans(raw, model, options, close)) {
    std::string quoted_model = json(upstream_model).dump();
    std::string out;
    out.reserve(raw.size() + quoted_model.size() + 48);
    // Edits in text order: the model value, the stream_options value, the closing brace.
    struct Edit {
      size_t begin;
      size_t end;
      std::string text;
    };
    std::vector<Edit> edits;
    edits.push_back({model.begin, model.end, quoted_model});
    if (request.stream) {
      if (options.begin != std::string_view::npos) {
        json opts = request.body["stream_options"].is_object() ? request.body["stream_options"]
                                                               : json::object();
        opts["include_usage"] = true;
        edits.push_back({options.begin, options.end, opts.dump()});
      } else {
        edits.push_back({close, close, ",\"stream_options\":{\"include_usage\":true}"});
      }
    }
    std::sort(edits.begin(), edits.end(), [](const Edit& a, const Edit& b) { return a.begin < b.begin; });
    size_t at = 0;
    for (const Edit& e : edits) {
      out.append(raw.substr(at, e.begin - at));
      out.append(e.text);
      at = e.end;
    }
    out.append(raw.substr(at));
    return out;
  }
  json body = request.body;
  body["model"] = upstream_model;
  if (request.stream) body["stream_options"]["include_usage"] = true;
  return body.dump(-1, ' ', false, json::error_handler_t::strict);
}

}  // namespace ferry::gateway
