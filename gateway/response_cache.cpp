#include "gateway/response_cache.h"

#include <chrono>
#include <cstring>
#include <utility>

#include "adapters/sse_parser.h"
#include "api/openai_chat_parse.h"
#include "common/sha256.h"

namespace ferry::gateway {

namespace {
constexpr int64_t kEntryOverheadBytes = 256;  // the list node, the map slot, the answer's fields
}  // namespace

int64_t response_cache_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t CachedAnswer::bytes() const {
  int64_t n =
      kEntryOverheadBytes + static_cast<int64_t>(answer.id.size() + answer.model.size() +
                                                 answer.stop_sequence.size() + target.size());
  for (const api::Block& b : answer.blocks) {
    n += static_cast<int64_t>(sizeof(api::Block) + b.text.size() + b.signature.size() +
                              b.call_id.size() + b.name.size() + b.arguments.size());
  }
  return n;
}

std::shared_ptr<const CachedAnswer> ResponseCache::get(const std::string& key, int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  if (it->second->expires_ms <= now_ms) {
    ++stats_.expired;
    erase(it->second);
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->value;
}

void ResponseCache::put(const std::string& key, std::shared_ptr<const CachedAnswer> value,
                        int64_t ttl_ms, int64_t now_ms) {
  const int64_t bytes = value->bytes() + static_cast<int64_t>(key.size());
  if (bytes > max_bytes_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = index_.find(key); it != index_.end()) erase(it->second);
  lru_.push_front(Entry{key, std::move(value), now_ms + ttl_ms, bytes});
  index_.emplace(std::string_view(lru_.front().key), lru_.begin());
  stats_.bytes += bytes;
  ++stats_.entries;
  while (stats_.bytes > max_bytes_ && !lru_.empty()) {
    ++stats_.evictions;
    erase(std::prev(lru_.end()));
  }
}

void ResponseCache::erase(List::iterator it) {
  stats_.bytes -= it->bytes;
  --stats_.entries;
  index_.erase(std::string_view(it->key));
  lru_.erase(it);
}

ResponseCache::Stats ResponseCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

namespace {

// Tagged, length-prefixed fields: a tag byte, then the value's bytes after their length.
class Canonical {
 public:
  explicit Canonical(std::string& out) : out_(out) {}
  void str(char tag, std::string_view v) {
    out_.push_back(tag);
    length(v.size());
    out_.append(v);
  }
  void opt(char tag, const std::optional<std::string>& v) {
    if (v) str(tag, std::string_view(*v));
  }
  void num(char tag, std::optional<int64_t> v) {
    if (!v) return;
    out_.push_back(tag);
    append_bytes(*v);
  }
  void num(char tag, std::optional<double> v) {
    if (!v) return;
    out_.push_back(tag);
    append_bytes(*v);
  }
  void flag(char tag, std::optional<bool> v) {
    if (!v) return;
    out_.push_back(tag);
    out_.push_back(*v ? '1' : '0');
  }
  void json(char tag, const api::Json& v) {
    if (v.is_null()) return;
    str(tag, v.dump(-1, ' ', false, api::Json::error_handler_t::replace));
  }
  void length(size_t n) { append_bytes(static_cast<uint64_t>(n)); }
  void tag(char t) { out_.push_back(t); }

 private:
  template <typename T>
  void append_bytes(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out_.append(b, sizeof(T));
  }
  std::string& out_;
};

void canonical_message(Canonical& c, const api::Message& m) {
  c.str('r', api::role_name(m.role));
  switch (m.content.form) {
    case api::Content::Form::kAbsent:
      break;
    case api::Content::Form::kText:
      c.str('c', m.content.text);
      break;
    case api::Content::Form::kParts:
      c.tag('P');
      c.length(m.content.parts.size());
      for (const api::ContentPart& part : m.content.parts) {
        c.str('t', part.type);
        c.str('x', part.text);
        c.json('e', part.extra);
      }
      break;
  }
  c.opt('n', m.name);
  if (m.tool_calls) {
    c.tag('C');
    c.length(m.tool_calls->size());
    for (const api::ToolCall& call : *m.tool_calls) {
      c.str('i', call.id);
      c.str('t', call.type);
      c.str('n', call.name);
      c.str('a', call.arguments);
      c.json('e', call.extra);
    }
  }
  c.opt('d', m.tool_call_id);
  c.json('e', m.extra);
}

void canonical_tools(Canonical& c, const api::ChatRequest& r) {
  if (r.tools) {
    c.tag('T');
    c.length(r.tools->size());
    for (const api::Tool& t : *r.tools) {
      c.str('n', t.name);
      c.opt('d', t.description);
      if (!t.parameters.empty()) c.str('p', t.parameters);  // as Canonical::json wrote its tree
      c.flag('s', t.strict);
      c.json('f', t.function_extra);
      c.json('e', t.extra);
    }
  }
  if (r.tool_choice) {
    c.num('h', std::optional<int64_t>(static_cast<int64_t>(r.tool_choice->mode)));
    c.str('H', r.tool_choice->name);
  }
  c.flag('l', r.parallel_tool_calls);
  c.json('F', r.functions);
  if (r.response_format) {
    c.str('R', r.response_format->type);
    c.json('S', r.response_format->json_schema);
    c.json('X', r.response_format->extra);
  }
}

void canonical_parameters(Canonical& c, const api::ChatRequest& r, const api::Overrides& o) {
  const api::Sampling& s = r.sampling;
  c.num('1', o.temperature ? o.temperature : s.temperature);
  c.num('2', o.top_p ? o.top_p : s.top_p);
  c.num('3', s.presence_penalty);
  c.num('4', s.frequency_penalty);
  c.num('5', s.seed);
  if (s.logit_bias) {
    c.tag('6');
    c.length(s.logit_bias->size());
    for (const auto& [id, bias] : *s.logit_bias) {
      c.num('i', std::optional<int64_t>(id));
      c.num('b', std::optional<double>(bias));
    }
  }
  if (s.stop) {
    c.tag(s.stop_is_array ? '7' : '8');
    c.length(s.stop->size());
    for (const std::string& stop : *s.stop) c.str('s', stop);
  }
  c.num('9', s.min_p);
  c.num('k', s.top_k);
  c.num('q', s.repetition_penalty);
  c.flag('E', s.ignore_eos);
  c.flag('L', r.logprobs.logprobs);
  c.num('O', r.logprobs.top_logprobs);
  // The limits as render_openai writes them with a rule's max_tokens.
  std::optional<int64_t> max_tokens = r.limits.max_tokens;
  std::optional<int64_t> max_completion = r.limits.max_completion_tokens;
  if (o.max_tokens) {
    if (max_completion) max_completion = o.max_tokens;
    if (max_tokens || !max_completion) max_tokens = o.max_tokens;
  }
  c.num('M', max_tokens);
  c.num('N', max_completion);
  c.num('#', r.limits.n);
  c.flag('=', r.limits.echo);
  c.num('B', r.limits.best_of);
  c.opt('u', r.metadata.user);
  c.json('m', r.metadata.metadata);
  c.json('x', r.extra);
}

}  // namespace

std::string canonical_request(const api::ChatRequest& request, std::string_view upstream_model,
                              const api::Overrides& overrides) {
  std::string out;
  size_t hint = 256 + upstream_model.size();
  for (const api::Message& m : request.messages) hint += m.content.text.size() + 32;
  out.reserve(hint);
  Canonical c(out);
  c.str('E', api::endpoint_name(request.endpoint));
  c.str('M', upstream_model);
  c.tag('m');
  c.length(request.messages.size());
  for (const api::Message& m : request.messages) canonical_message(c, m);
  canonical_tools(c, request);
  canonical_parameters(c, request, overrides);
  return out;
}

std::string response_cache_key(std::string_view scope, std::string_view target,
                               std::string_view canonical_request) {
  std::string text;
  text.reserve(scope.size() + target.size() + canonical_request.size() + 2);
  text.append(scope).append(1, '\n').append(target).append(1, '\n').append(canonical_request);
  return sha256_hex(text);
}

Result<api::Answer> answer_from_openai(std::string_view bytes, bool sse) {
  if (!sse) return api::parse_chat_completion(bytes);
  adapters::SseParser framing;
  api::ChatStreamParser parser;
  api::AnswerBuilder builder;
  Status status;
  const bool framed = framing.feed(bytes, [&](std::string_view, std::string_view data) {
    if (status) status = parser.feed(data, builder);
  });
  if (!framed) return Error::make(ErrorCode::kBackendError, framing.error());
  if (!status) return status.error();
  if (!parser.finished()) {
    if (Status end = parser.end(builder); !end) return end.error();
  }
  if (builder.violation()) return *builder.violation();
  if (!builder.done()) return Error::make(ErrorCode::kBackendError, "the stream did not finish");
  return builder.take();
}

}  // namespace ferry::gateway
