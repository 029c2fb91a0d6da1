#include "api/embeddings_parse.h"

#include <simdjson.h>

#include <bit>
#include <cstring>
#include <memory>
#include <set>

#include "api/dom_value.h"

namespace ferry::api {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

Error invalid(std::string message, std::string param) {
  return Error::make(ErrorCode::kInvalidRequest, std::move(message), std::move(param),
                     "invalid_value");
}

// A token id as a JSON integer: 0..kMaxTokenId.
std::optional<int32_t> token_id(const element& v) {
  int64_t id = 0;
  if (v.type() == element_type::DOUBLE || v.get_int64().get(id) != simdjson::SUCCESS) return {};
  if (id < 0 || id > INT32_MAX) return {};
  return static_cast<int32_t>(id);
}

Status token_array(const simdjson::dom::array& a, const std::string& where,
                   std::vector<int32_t>& out) {
  for (const element v : a) {
    auto id = token_id(v);
    if (!id) {
      return invalid("'" + where + "' token ids must be integers between 0 and " +
                         std::to_string(INT32_MAX) + ", got " + simdjson::to_string(v),
                     "input");
    }
    out.push_back(*id);
  }
  if (out.empty()) return invalid("'" + where + "' must not be an empty array", "input");
  return {};
}

// `input`: a string, strings, token ids, or token-id arrays (one form per request).
Status parse_input(const element& v, std::vector<EmbeddingInput>& out) {
  if (v.type() == element_type::STRING) {
    std::string_view s = v.get_string().value_unsafe();
    if (s.empty()) return invalid("'input' must not be an empty string", "input");
    out.push_back({false, std::string(s), {}});
    return {};
  }
  if (v.type() != element_type::ARRAY) {
    return invalid(std::string("'input' must be a string, an array of strings, an array of token "
                               "ids or an array of token-id arrays, got ") +
                       kind_of(v),
                   "input");
  }
  simdjson::dom::array a;
  if (v.get_array().get(a) != simdjson::SUCCESS || a.size() == 0)
    return invalid("'input' must not be an empty array", "input");
  element first;
  if (a.at(0).get(first) != simdjson::SUCCESS) return invalid("'input' is invalid", "input");
  if (first.type() == element_type::INT64 || first.type() == element_type::UINT64 ||
      first.type() == element_type::DOUBLE) {
    EmbeddingInput in{true, {}, {}};
    if (Status s = token_array(a, "input", in.ids); !s) return s;
    out.push_back(std::move(in));
    return {};
  }
  if (a.size() > kMaxEmbeddingInputs) {
    return invalid("'input' holds " + std::to_string(a.size()) + " inputs; at most " +
                       std::to_string(kMaxEmbeddingInputs) + " are allowed",
                   "input");
  }
  const element_type form = first.type();
  size_t i = 0;
  for (const element item : a) {
    const std::string where = "input[" + std::to_string(i++) + "]";
    if (item.type() != form || (form != element_type::STRING && form != element_type::ARRAY)) {
      return invalid("'" + where +
                         "' must be a string or a token-id array like the first input, got " +
                         kind_of(item),
                     "input");
    }
    if (form == element_type::STRING) {
      std::string_view s = item.get_string().value_unsafe();
      if (s.empty()) return invalid("'" + where + "' must not be an empty string", "input");
      out.push_back({false, std::string(s), {}});
    } else {
      EmbeddingInput in{true, {}, {}};
      simdjson::dom::array ids;
      if (item.get_array().get(ids) != simdjson::SUCCESS) return invalid("bad input", "input");
      if (Status s = token_array(ids, where, in.ids); !s) return s;
      out.push_back(std::move(in));
    }
  }
  return {};
}

Status parse_member(std::string_view key, const element& v, EmbeddingsRequest& r) {
  if (key == "model") {
    if (v.type() != element_type::STRING) {
      return invalid(std::string("'model' must be a string, got ") + kind_of(v), "model");
    }
    r.model = std::string(v.get_string().value_unsafe());
    return {};
  }
  if (key == "input") return parse_input(v, r.inputs);
  if (v.is_null()) return {};  // null: not given
  if (key == "encoding_format") {
    std::string_view f = v.type() == element_type::STRING ? v.get_string().value_unsafe() : "";
    if (f == "float") {
      r.encoding = EmbeddingEncoding::kFloat;
    } else if (f == "base64") {
      r.encoding = EmbeddingEncoding::kBase64;
    } else {
      return invalid("'encoding_format' must be 'float' or 'base64', got " + simdjson::to_string(v),
                     "encoding_format");
    }
    return {};
  }
  if (key == "dimensions") {
    int64_t n = 0;
    if (v.type() == element_type::DOUBLE || v.get_int64().get(n) != simdjson::SUCCESS || n < 1 ||
        n > INT32_MAX) {
      return invalid("'dimensions' must be an integer of at least 1, got " + simdjson::to_string(v),
                     "dimensions");
    }
    r.dimensions = n;
    return {};
  }
  if (key == "user") {
    if (v.type() != element_type::STRING) {
      return invalid(std::string("'user' must be a string, got ") + kind_of(v), "user");
    }
    r.user = std::string(v.get_string().value_unsafe());
    return {};
  }
  if (r.extra.is_null()) r.extra = Json::object();
  r.extra[std::string(key)] = Json::parse(simdjson::to_string(v), nullptr, false);
  return {};
}

Status parse_body(std::string_view body, EmbeddingsRequest& r, int* model_keys) {
  thread_local simdjson::dom::parser parser;
  simdjson::padded_string padded(body);
  element doc;
  if (parser.parse(padded).get(doc) != simdjson::SUCCESS) {
    return invalid("the request body is not valid JSON (UTF-8)", "");
  }
  if (doc.type() != element_type::OBJECT) {
    return invalid(std::string("the request body must be a JSON object, got ") + kind_of(doc), "");
  }
  std::set<std::string, std::less<>> seen;
  int models = 0;
  simdjson::dom::object obj;
  if (doc.get_object().get(obj) != simdjson::SUCCESS) return invalid("bad body", "");
  for (const auto field : obj) {
    const std::string_view key = field.key;
    if (key == "model") ++models;
    if (!seen.insert(std::string(key)).second &&
        (key == "model" || key == "input" || key == "encoding_format" || key == "dimensions" ||
         key == "user")) {
      return invalid("'" + std::string(key) + "' appears more than once", std::string(key));
    }
    if (Status s = parse_member(key, field.value, r); !s) return s;
  }
  if (model_keys != nullptr) *model_keys = models;
  if (!seen.contains("model")) return invalid("'model' is required", "model");
  if (r.inputs.empty()) return invalid("'input' is required", "input");
  return {};
}

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

}  // namespace

Result<EmbeddingsRequest> parse_embeddings(std::string_view body) {
  EmbeddingsRequest r;
  if (Status s = parse_body(body, r, nullptr); !s) return s.error();
  return r;
}

Status parse_embeddings_into(std::string_view body, ChatRequest& out, int* model_keys) {
  auto r = std::make_shared<EmbeddingsRequest>();
  if (Status s = parse_body(body, *r, model_keys); !s) return s;
  out.endpoint = Endpoint::kEmbeddings;
  out.model = r->model;
  out.metadata.user = r->user;
  out.embeddings = std::move(r);
  return {};
}

std::string encode_embedding_base64(const std::vector<float>& v) {
  std::string bytes(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    const auto u = std::bit_cast<uint32_t>(v[i]);
    for (size_t b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<char>((u >> (8 * b)) & 0xff);
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size())
      n |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) n |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 2]));
    out += kBase64[(n >> 18) & 63];
    out += kBase64[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kBase64[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kBase64[n & 63] : '=';
  }
  return out;
}

std::optional<std::vector<float>> decode_embedding_base64(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string bytes;
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t n = 0;
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      const char* at = c == '=' ? nullptr : std::strchr(kBase64, c);
      if (c == '=') {
        ++pad;
      } else if (at == nullptr || c == '\0' || pad > 0) {
        return std::nullopt;
      }
      n = (n << 6) | (at != nullptr ? static_cast<uint32_t>(at - kBase64) : 0);
    }
    if (pad > 2 || (pad > 0 && i + 4 != text.size())) return std::nullopt;
    bytes += static_cast<char>((n >> 16) & 0xff);
    if (pad < 2) bytes += static_cast<char>((n >> 8) & 0xff);
    if (pad < 1) bytes += static_cast<char>(n & 0xff);
  }
  if (bytes.size() % 4 != 0) return std::nullopt;
  std::vector<float> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t u = 0;
    for (size_t b = 0; b < 4; ++b) {
      u |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i * 4 + b])) << (8 * b);
    }
    out[i] = std::bit_cast<float>(u);
  }
  return out;
}

}  // namespace ferry::api
