// ferry_test_upstream: a small fault-injecting OpenAI-compatible HTTP/1.1 (+TLS) server used by
// the integration tests and the load benchmark. What it does is chosen per request by the
// request's `model` field. Single-threaded: one io_context, one coroutine per connection.
//
// Behaviours (combine with '+', e.g. "slow-200+chunky"; any other model name behaves as "echo"):
//   echo               normal answer; the content is "echo: " + the last user message (or prompt)
//   slow-<ms>          wait <ms> before sending the response headers
//   stream-slow-<ms>   wait <ms> between two streamed chunks
//   fail-<status>      answer with an OpenAI-shaped error and that status (fail-500, fail-429)
//   drop               close the connection without answering
//   reset-mid-stream   send the headers and a few chunks, then reset the connection (RST)
//   close-mid-stream   send the headers and a few chunks, then close cleanly (FIN), no end chunk
//   malformed-sse      a stream with an event whose data is not JSON, and a line without a field
//   garbage-body       a 200 "application/json" answer whose body is not JSON
//   no-choices         a 200 answer that is a JSON object without "choices"
//   bad-event-first    a stream whose first event is `data: {this is not json}`
//   bad-event-mid      a stream with `data: {this is not json}` after its first content chunk
//   hang               never answer (until the client goes away)
//   hang-after-first   stream the first chunk, then never send anything else
//   no-usage           never send usage, even when stream_options.include_usage is set
//   chunky             write the response in tiny pieces (1-5 bytes), each its own HTTP chunk;
//                      the head too, in 1-5 byte writes (so that it arrives in several reads)
//   cut-head           send the first part of a response head, then close cleanly (FIN)
//   json-type-after    a stream's head has a second Content-Type, application/json, after
//                      its text/event-stream one (the stream itself is normal)
//   json-type-before   the same two Content-Type lines the other way round
//   call-tool          with tools, unless the last message is a tool result: call the first
//                      tool with {"q": <the last user message>} (finish_reason tool_calls);
//                      after a tool result the content is "echo: " + that result
//   call-tool-<name>   as call-tool (and after any tool result), of the tool named <name>,
//                      with arguments that fill the schema's required properties: a string
//                      with the text after `tool-arg: ` in the last user message (to the end
//                      of its line; else that whole message), an array with that string, a
//                      number 1, a boolean false (an agent CLI runs the call, sends its result)
//   cut-tool-args      (with call-tool) the call's arguments cut inside the string value,
//                      finish_reason length: a call max_tokens ended
//   bad-tool-args      (with call-tool) the call's arguments are `not json`
// A request body member "x_test_usage" (a string holding JSON) is sent as the usage object
// instead of the counted one, e.g. "{\"prompt_tokens\":-5,\"completion_tokens\":1e300}".
// POST /v1/messages speaks Anthropic Messages natively (the same echo answer, fail-<status> as
// Anthropic's error shape, streams as Anthropic's events), for ferry's pass-through; POST
// /v1/responses speaks OpenAI Responses natively likewise (the echo of the input's last user
// text, max_output_tokens cuts it into an `incomplete` response, streams as response.* events).
// Introspection: GET /_last_request (method, target, headers, body of the last /v1 request),
// GET /_stats (connections, api_connections, requests, completed, cancelled, in_flight),
// POST /_reset (zero the counters).
#include <poll.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::itest {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using json = nlohmann::json;
using asio::awaitable;
using asio::use_awaitable;
constexpr auto kTuple = asio::as_tuple(use_awaitable);

constexpr int64_t kHangLimitMs = 15 * 60 * 1000;  // "never" answers, within reason
constexpr size_t kBodyLimit = size_t{256} << 20;
constexpr uint32_t kHeaderLimit = 4u << 20;

// ---------------------------------------------------------------- state (one thread only)

struct Stats {
  int64_t connections = 0;      // TCP connections accepted
  int64_t api_connections = 0;  // connections that carried at least one /v1 request
  int64_t requests = 0;         // /v1 requests received
  int64_t completed = 0;        // /v1 requests answered completely
  int64_t cancelled = 0;        // /v1 requests whose client went away before completion
  int64_t in_flight = 0;
};

Stats g_stats;
json g_last_request = json::object();

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// ---------------------------------------------------------------- behaviour

struct Behaviour {
  int64_t delay_before_headers_ms = 0;
  int64_t delay_between_chunks_ms = 0;
  unsigned fail_status = 0;
  bool drop = false;
  bool reset_mid_stream = false;
  bool close_mid_stream = false;
  bool malformed_sse = false;
  bool garbage_body = false;
  bool no_choices = false;
  bool bad_event_first = false;
  bool bad_event_mid = false;
  bool hang = false;
  bool hang_after_first = false;
  bool no_usage = false;
  bool chunky = false;
  bool cut_head = false;
  bool json_type_after = false;
  bool json_type_before = false;
  bool call_tool = false;
  bool cut_tool_args = false;
  bool bad_tool_args = false;
  std::string tool_name;  // call-tool-<name>: the tool to call
};

std::optional<int64_t> parse_int(std::string_view text) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || ptr != text.data() + text.size() || v < 0) return std::nullopt;
  return v;
}

Behaviour parse_behaviour(std::string_view model) {
  Behaviour b;
  while (!model.empty()) {
    auto plus = model.find('+');
    std::string_view part = model.substr(0, plus);
    model = plus == std::string_view::npos ? std::string_view{} : model.substr(plus + 1);
    if (part.starts_with("stream-slow-")) {
      b.delay_between_chunks_ms = parse_int(part.substr(12)).value_or(0);
    } else if (part.starts_with("slow-")) {
      b.delay_before_headers_ms = parse_int(part.substr(5)).value_or(0);
    } else if (part.starts_with("fail-")) {
      auto s = parse_int(part.substr(5)).value_or(500);
      b.fail_status = (s >= 400 && s <= 599) ? static_cast<unsigned>(s) : 500;
    } else if (part == "drop") {
      b.drop = true;
    } else if (part == "cut-head") {
      b.cut_head = true;
    } else if (part == "json-type-after") {
      b.json_type_after = true;
    } else if (part == "json-type-before") {
      b.json_type_before = true;
    } else if (part == "reset-mid-stream") {
      b.reset_mid_stream = true;
    } else if (part == "close-mid-stream") {
      b.close_mid_stream = true;
    } else if (part == "malformed-sse") {
      b.malformed_sse = true;
    } else if (part == "garbage-body") {
      b.garbage_body = true;
    } else if (part == "no-choices") {
      b.no_choices = true;
    } else if (part == "bad-event-first") {
      b.bad_event_first = true;
    } else if (part == "bad-event-mid") {
      b.bad_event_mid = true;
    } else if (part == "hang") {
      b.hang = true;
    } else if (part == "hang-after-first") {
      b.hang_after_first = true;
    } else if (part == "no-usage") {
      b.no_usage = true;
    } else if (part == "chunky") {
      b.chunky = true;
    } else if (part == "call-tool") {
      b.call_tool = true;
    } else if (part.starts_with("call-tool-")) {
      b.call_tool = true;
      b.tool_name = std::string(part.substr(10));
    } else if (part == "cut-tool-args") {
      b.cut_tool_args = true;
    } else if (part == "bad-tool-args") {
      b.bad_tool_args = true;
    }
  }
  return b;
}

// ---------------------------------------------------------------- the answer's content

struct Answer {
  std::vector<std::string> pieces;  // one streamed chunk each
  std::string finish_reason = "stop";
  int64_t prompt_tokens = 0;
  json tool_call;  // call-tool: {"id", "type", "function": {"name", "arguments"}}; null: none
};

int64_t count_words(std::string_view text) {
  int64_t n = 0;
  bool in_word = false;
  for (char c : text) {
    bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    if (!space && !in_word) ++n;
    in_word = !space;
  }
  return n;
}

std::string content_text(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array()) {
    for (const auto& part : content) {
      if (part.is_object() && part.contains("text") && part["text"].is_string()) {
        out += part["text"].get<std::string>();
      }
    }
  }
  return out;
}

Answer make_answer(const json& body, bool chat) {
  Answer a;
  std::string source;
  if (chat) {
    if (body.contains("messages") && body["messages"].is_array()) {
      for (const auto& m : body["messages"]) {
        if (!m.is_object() || !m.contains("content")) continue;
        std::string text = content_text(m["content"]);
        a.prompt_tokens += count_words(text) + 1;
        if (m.value("role", "") == "user") source = text;
      }
    }
  } else if (body.contains("prompt")) {
    const json& p = body["prompt"];
    source = p.is_string()                                      ? p.get<std::string>()
             : (p.is_array() && !p.empty() && p[0].is_string()) ? p[0].get<std::string>()
                                                                : std::string{};
    a.prompt_tokens = count_words(source) + 1;
  }
  std::string text = "echo: " + source;
  // Split after each space so that concatenating the pieces gives the text back exactly.
  size_t start = 0;
  while (start < text.size()) {
    size_t space = text.find(' ', start);
    size_t end = space == std::string::npos ? text.size() : space + 1;
    a.pieces.push_back(text.substr(start, end - start));
    start = end;
  }
  if (body.contains("max_tokens") && body["max_tokens"].is_number_integer()) {
    auto max = body["max_tokens"].get<int64_t>();
    if (max >= 0 && static_cast<size_t>(max) < a.pieces.size()) {
      a.pieces.resize(static_cast<size_t>(max));
      a.finish_reason = "length";
    }
  }
  return a;
}

// call-tool-<name>: the text after `tool-arg: ` in `message` (to its line's end), else all.
std::string tool_argument(const std::string& message) {
  size_t at = message.rfind("tool-arg: ");
  if (at == std::string::npos) return message;
  std::string rest = message.substr(at + 10);
  return rest.substr(0, rest.find('\n'));
}

// Arguments for `function` (OpenAI's {name, parameters}) that fill its required properties.
json required_arguments(const json& function, const std::string& text) {
  json args = json::object();
  json params = function.value("parameters", json::object());
  if (!params.is_object() || !params.contains("required") || !params["required"].is_array()) {
    return args;
  }
  json props = params.value("properties", json::object());
  for (const auto& k : params["required"]) {
    if (!k.is_string()) continue;
    const std::string key = k.get<std::string>();
    json type_of = props.is_object() && props.contains(key) ? props[key] : json::object();
    std::string type =
        type_of.is_object() && type_of.contains("type") && type_of["type"].is_string()
            ? type_of["type"].get<std::string>()
            : "string";
    if (type == "array") {
      args[key] = json::array({text});
    } else if (type == "integer" || type == "number") {
      args[key] = 1;
    } else if (type == "boolean") {
      args[key] = false;
    } else {
      args[key] = text;
    }
  }
  return args;
}

// call-tool: a call of the first tool, or after a tool result the echo of that result.
void add_tool_call(const json& body, const Behaviour& b, Answer& a) {
  const json* tools = body.contains("tools") && body["tools"].is_array() ? &body["tools"] : nullptr;
  if (tools == nullptr || tools->empty() || !body.contains("messages")) return;
  const json& messages = body["messages"];
  if (!messages.is_array() || messages.empty()) return;
  // After a tool result (the last message; for call-tool-<name> any: an agent may add text
  // after it), the echo of that result.
  const json* result = nullptr;
  for (const auto& m : messages) {
    if (m.is_object() && m.value("role", "") == "tool") result = &m;
  }
  if (result != nullptr && (result == &messages.back() || !b.tool_name.empty())) {
    a.pieces = {"echo: " + content_text(result->value("content", json("")))};
    return;
  }
  std::string source;
  for (const auto& m : messages) {
    if (m.is_object() && m.value("role", "") == "user") source = content_text(m["content"]);
  }
  json function = (*tools)[0].value("function", json::object());
  json arguments = {{"q", source}};
  if (!b.tool_name.empty()) {
    for (const auto& t : *tools) {
      json f = t.is_object() ? t.value("function", json::object()) : json::object();
      if (f.is_object() && f.value("name", "") == b.tool_name) function = f;
    }
    arguments = required_arguments(function, tool_argument(source));
  }
  std::string name = function.value("name", "tool");
  a.tool_call = {{"id", "call_up_" + std::to_string(g_stats.requests)},
                 {"type", "function"},
                 {"function", {{"name", name}, {"arguments", dump(arguments)}}}};
  a.pieces.clear();
  a.finish_reason = "tool_calls";
  json& sent = a.tool_call["function"]["arguments"];
  if (b.cut_tool_args) {  // `{"q":"` and half the text
    sent = sent.get<std::string>().substr(0, 6 + source.size() / 2);
    a.finish_reason = "length";
  } else if (b.bad_tool_args) {
    sent = "not json";
  }
}

json usage_json(const Answer& a, int64_t n) {
  auto completion = static_cast<int64_t>(a.pieces.size()) * n;
  return {{"prompt_tokens", a.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", a.prompt_tokens + completion}};
}

// The usage to send: the body's x_test_usage when it holds JSON, else the counted one.
json usage_for(const json& body, const Answer& a, int64_t n) {
  auto it = body.find("x_test_usage");
  if (it != body.end() && it->is_string()) {
    json chosen = json::parse(it->get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (!chosen.is_discarded()) return chosen;
  }
  return usage_json(a, n);
}

std::string join(const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += p;
  return out;
}

json error_json(const std::string& message, const std::string& type, const std::string& code) {
  return {{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code}}}};
}

// ---------------------------------------------------------------- I/O helpers

// True when the peer has closed or reset its side (seen without consuming any data).
bool client_gone(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

// Waits `ms`, watching the client. Returns false as soon as the client goes away.
awaitable<bool> wait_watching(int fd, int64_t ms) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    if (client_gone(fd)) co_return false;
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) co_return true;
    timer.expires_after(std::min<std::chrono::steady_clock::duration>(std::chrono::milliseconds(10),
                                                                      deadline - now));
    co_await timer.async_wait(kTuple);
  }
}

std::string http_chunk(std::string_view data) {
  char size[32];
  int len = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out(size, static_cast<size_t>(len));
  out.append(data);
  out.append("\r\n");
  return out;
}

template <class Stream>
int native_fd(Stream& stream) {
  return beast::get_lowest_layer(stream).native_handle();
}

template <class Stream>
awaitable<bool> write_raw(Stream& stream, std::string_view data) {
  auto [ec, n] = co_await asio::async_write(stream, asio::buffer(data.data(), data.size()), kTuple);
  (void)n;
  co_return !ec;
}

// Small deterministic generator for the "chunky" split points.
struct Lcg {
  uint64_t state;
  size_t next(size_t lo, size_t hi) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + static_cast<size_t>((state >> 33) % (hi - lo + 1));
  }
};

// Writes a response head: at once, or ("chunky") in writes of 1-5 bytes.
template <class Stream>
awaitable<bool> write_head(Stream& stream, std::string_view head, bool chunky, Lcg& rng) {
  if (!chunky) co_return co_await write_raw(stream, head);
  while (!head.empty()) {
    size_t n = std::min(head.size(), rng.next(1, 5));
    if (!co_await write_raw(stream, head.substr(0, n))) co_return false;
    head.remove_prefix(n);
  }
  co_return true;
}

// Writes one piece of a chunked body; "chunky" splits it into tiny HTTP chunks.
template <class Stream>
awaitable<bool> write_body_piece(Stream& stream, std::string_view data, bool chunky, Lcg& rng) {
  if (!chunky) co_return co_await write_raw(stream, http_chunk(data));
  while (!data.empty()) {
    size_t n = std::min(data.size(), rng.next(1, 5));
    if (!co_await write_raw(stream, http_chunk(data.substr(0, n)))) co_return false;
    data.remove_prefix(n);
  }
  co_return true;
}

template <class Stream>
void abort_connection(Stream& stream, bool reset) {
  auto& sock = beast::get_lowest_layer(stream);
  boost::system::error_code ec;
  if (reset) sock.set_option(asio::socket_base::linger(true, 0), ec);
  sock.close(ec);
}

// ---------------------------------------------------------------- responses

struct Reply {
  bool keep_alive = true;  // false: close the connection after this request
};

template <class Stream>
awaitable<bool> send_text(Stream& stream, unsigned status, std::string text, bool keep_alive,
                          bool chunky, Lcg& rng) {
  if (chunky) {
    std::string head = "HTTP/1.1 " + std::to_string(status) +
                       " X\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n" +
                       (keep_alive ? "" : "Connection: close\r\n") + "\r\n";
    if (!co_await write_head(stream, head, true, rng)) co_return false;
    if (!co_await write_body_piece(stream, text, true, rng)) co_return false;
    co_return co_await write_raw(stream, "0\r\n\r\n");
  }
  http::response<http::string_body> res{static_cast<http::status>(status), 11};
  res.set(http::field::server, "ferry_test_upstream");
  res.set(http::field::content_type, "application/json");
  res.keep_alive(keep_alive);
  res.body() = std::move(text);
  res.prepare_payload();
  auto [ec, n] = co_await http::async_write(stream, res, kTuple);
  (void)n;
  co_return !ec;
}

template <class Stream>
awaitable<bool> send_json(Stream& stream, unsigned status, const json& body, bool keep_alive,
                          bool chunky, Lcg& rng) {
  co_return co_await send_text(stream, status, dump(body), keep_alive, chunky, rng);
}

json chunk_json(bool chat, const std::string& id, const std::string& model, int64_t index,
                const json& delta_or_text, const json& finish, bool with_null_usage) {
  json choice = {{"index", index}, {"finish_reason", finish}};
  if (chat) {
    choice["delta"] = delta_or_text;
    choice["logprobs"] = nullptr;
  } else {
    choice["text"] = delta_or_text;
  }
  json c = {{"id", id},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", 1700000000},
            {"model", model},
            {"choices", json::array({choice})}};
  if (with_null_usage) c["usage"] = nullptr;
  return c;
}

std::string sse(const json& j) {
  return "data: " + dump(j) + "\n\n";
}

// Serves one /v1 completion request. Returns false when the connection must be closed.
// POST /v1/embeddings: per input a 4-float vector (its words, its bytes or ids, 1, its index;
// normalized), in OpenAI's shape; base64 (little-endian float32) when asked; usage counts words
// (ids for token inputs); `fail-<status>` as for completions, `no-usage` leaves usage out.
json embeddings_json(const json& body, const Behaviour& b) {
  std::vector<json> inputs;
  const json& in = body.contains("input") ? body["input"] : json();
  if (in.is_array() && !in.empty() && !in[0].is_number()) {
    for (const auto& x : in) inputs.push_back(x);
  } else {
    inputs.push_back(in);
  }
  json data = json::array();
  int64_t tokens = 0;
  const bool b64 = body.value("encoding_format", std::string("float")) == "base64";
  for (size_t i = 0; i < inputs.size(); ++i) {
    const json& x = inputs[i];
    const int64_t words =
        x.is_string() ? count_words(x.get<std::string>()) : static_cast<int64_t>(x.size());
    const double size = x.is_string() ? static_cast<double>(x.get<std::string>().size())
                                      : static_cast<double>(x.size());
    tokens += words;
    std::vector<float> v = {static_cast<float>(words), static_cast<float>(size), 1.0f,
                            static_cast<float>(i)};
    double norm = 0;
    for (float f : v) norm += static_cast<double>(f) * f;
    for (float& f : v) f = static_cast<float>(f / std::sqrt(norm));
    json e = {{"object", "embedding"}, {"index", i}};
    if (b64) {
      static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
      std::string bytes(reinterpret_cast<const char*>(v.data()), v.size() * 4);  // x86: LE
      std::string text;
      for (size_t j = 0; j < bytes.size(); j += 3) {
        uint32_t n = static_cast<uint32_t>(static_cast<unsigned char>(bytes[j])) << 16;
        if (j + 1 < bytes.size()) n |= static_cast<unsigned char>(bytes[j + 1]) << 8;
        if (j + 2 < bytes.size()) n |= static_cast<unsigned char>(bytes[j + 2]);
        text += k[(n >> 18) & 63];
        text += k[(n >> 12) & 63];
        text += j + 1 < bytes.size() ? k[(n >> 6) & 63] : '=';
        text += j + 2 < bytes.size() ? k[n & 63] : '=';
      }
      e["embedding"] = text;
    } else {
      e["embedding"] = v;
    }
    data.push_back(std::move(e));
  }
  json out = {{"object", "list"}, {"data", std::move(data)}, {"model", body.value("model", "")}};
  if (!b.no_usage) out["usage"] = {{"prompt_tokens", tokens}, {"total_tokens", tokens}};
  return out;
}

template <class Stream>
awaitable<Reply> serve_embeddings(Stream& stream, const http::request<http::string_body>& req) {
  Lcg rng{17};
  json body = json::parse(req.body(), nullptr, false);
  const std::string model =
      body.is_object() ? body.value("model", std::string("echo")) : std::string("echo");
  const Behaviour b = parse_behaviour(model);
  bool ok = false;
  if (!body.is_object()) {
    ok = co_await send_json(
        stream, 400,
        error_json("upstream: body is not a JSON object", "invalid_request_error", "invalid_json"),
        req.keep_alive(), false, rng);
  } else if (b.fail_status != 0) {
    ok =
        co_await send_json(stream, b.fail_status,
                           error_json("upstream: injected failure " + std::to_string(b.fail_status),
                                      "server_error", "injected"),
                           req.keep_alive(), false, rng);
  } else {
    ok = co_await send_json(stream, 200, embeddings_json(body, b), req.keep_alive(), false, rng);
  }
  ++g_stats.completed;
  co_return Reply{ok && req.keep_alive()};
}

template <class Stream>
awaitable<Reply> serve_completion(Stream& stream, const http::request<http::string_body>& req,
                                  bool chat) {
  int fd = native_fd(stream);
  bool keep_alive = req.keep_alive();
  Lcg rng{static_cast<uint64_t>(g_stats.requests) * 7919 + 17};
  json body = json::parse(req.body(), nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    co_await send_json(
        stream, 400,
        error_json("upstream: body is not a JSON object", "invalid_request_error", "invalid_json"),
        keep_alive, false, rng);
    ++g_stats.completed;
    co_return Reply{keep_alive};
  }
  std::string model = body.contains("model") && body["model"].is_string()
                          ? body["model"].get<std::string>()
                          : std::string("echo");
  Behaviour b = parse_behaviour(model);
  bool stream_mode =
      body.contains("stream") && body["stream"].is_boolean() && body["stream"].get<bool>();
  bool include_usage = body.contains("stream_options") && body["stream_options"].is_object() &&
                       body["stream_options"].value("include_usage", false);

  if (b.drop) {
    abort_connection(stream, false);
    co_return Reply{false};
  }
  if (b.cut_head) {
    co_await write_raw(stream, "HTTP/1.1 200 OK\r\nServer: ferry_test_upstream\r\nContent-Ty");
    abort_connection(stream, false);
    co_return Reply{false};
  }
  if (b.hang) {
    co_await wait_watching(fd, kHangLimitMs);
    ++g_stats.cancelled;
    abort_connection(stream, false);
    co_return Reply{false};
  }
  if (b.delay_before_headers_ms > 0 && !co_await wait_watching(fd, b.delay_before_headers_ms)) {
    ++g_stats.cancelled;
    abort_connection(stream, false);
    co_return Reply{false};
  }
  if (b.fail_status != 0) {
    std::string type = b.fail_status == 429 ? "rate_limit_error" : "server_error";
    co_await send_json(
        stream, b.fail_status,
        error_json("upstream: injected failure " + std::to_string(b.fail_status), type, "injected"),
        keep_alive, b.chunky, rng);
    ++g_stats.completed;
    co_return Reply{keep_alive};
  }

  Answer answer = make_answer(body, chat);
  if (b.call_tool && chat) add_tool_call(body, b, answer);
  int64_t n = 1;
  if (body.contains("n") && body["n"].is_number_integer()) {
    n = std::clamp<int64_t>(body["n"].get<int64_t>(), 1, 16);
  }
  std::string id = (chat ? "chatcmpl-up-" : "cmpl-up-") + std::to_string(g_stats.requests);

  if (!stream_mode && (b.garbage_body || b.no_choices)) {
    std::string text = b.garbage_body ? std::string("this is not json {")
                                      : dump(json{{"id", id}, {"object", "chat.completion"}});
    if (!co_await send_text(stream, 200, std::move(text), keep_alive, b.chunky, rng)) {
      ++g_stats.cancelled;
      co_return Reply{false};
    }
    ++g_stats.completed;
    co_return Reply{keep_alive};
  }
  if (!stream_mode) {
    json choices = json::array();
    for (int64_t i = 0; i < n; ++i) {
      json choice = {{"index", i}, {"finish_reason", answer.finish_reason}};
      if (chat) {
        choice["message"] = {{"role", "assistant"}, {"content", join(answer.pieces)}};
        if (!answer.tool_call.is_null()) {
          choice["message"]["content"] = nullptr;
          choice["message"]["tool_calls"] = json::array({answer.tool_call});
        }
        choice["logprobs"] = nullptr;
      } else {
        choice["text"] = join(answer.pieces);
      }
      choices.push_back(std::move(choice));
    }
    json out = {{"id", id},
                {"object", chat ? "chat.completion" : "text_completion"},
                {"created", 1700000000},
                {"model", model},
                {"choices", std::move(choices)}};
    if (!b.no_usage) out["usage"] = usage_for(body, answer, n);
    if (!co_await send_json(stream, 200, out, keep_alive, b.chunky, rng)) {
      ++g_stats.cancelled;
      co_return Reply{false};
    }
    ++g_stats.completed;
    co_return Reply{keep_alive};
  }

  // Streaming: hand-written chunked encoding, so that faults can be placed exactly.
  const char* json_type = "Content-Type: application/json\r\n";
  std::string head = "HTTP/1.1 200 OK\r\nServer: ferry_test_upstream\r\n";
  if (b.json_type_before) head += json_type;
  head += "Content-Type: text/event-stream\r\n";
  if (b.json_type_after) head += json_type;
  head += "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n";
  head += keep_alive ? "\r\n" : "Connection: close\r\n\r\n";
  bool null_usage = include_usage && !b.no_usage;
  std::vector<std::string> events;
  for (int64_t i = 0; i < n; ++i) {
    if (chat) {
      events.push_back(sse(chunk_json(chat, id, model, i, {{"role", "assistant"}, {"content", ""}},
                                      nullptr, null_usage)));
    }
  }
  size_t first_content = events.size();
  for (const auto& piece : answer.pieces) {
    for (int64_t i = 0; i < n; ++i) {
      json delta = chat ? json{{"content", piece}} : json(piece);
      events.push_back(sse(chunk_json(chat, id, model, i, delta, nullptr, null_usage)));
    }
  }
  if (!answer.tool_call.is_null() && chat) {
    json call = answer.tool_call;
    call["index"] = 0;
    events.push_back(sse(chunk_json(chat, id, model, 0, {{"tool_calls", json::array({call})}},
                                    nullptr, null_usage)));
  }
  if (b.malformed_sse) {
    events.insert(events.begin() + static_cast<std::ptrdiff_t>(first_content),
                  {"data: {\"id\": \"broken\", this is not json\n\n", "no-field-here\n\n"});
  }
  if (b.bad_event_mid) {
    events.insert(events.begin() + static_cast<std::ptrdiff_t>(first_content + 1),
                  "data: {this is not json}\n\n");
  }
  if (b.bad_event_first) events.insert(events.begin(), "data: {this is not json}\n\n");
  for (int64_t i = 0; i < n; ++i) {
    json delta = chat ? json::object() : json("");
    events.push_back(sse(chunk_json(chat, id, model, i, delta, answer.finish_reason, null_usage)));
  }
  if (include_usage && !b.no_usage) {
    json u = {{"id", id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", 1700000000},
              {"model", model},
              {"choices", json::array()},
              {"usage", usage_for(body, answer, n)}};
    events.push_back(sse(u));
  }
  events.push_back("data: [DONE]\n\n");

  if (!co_await write_head(stream, head, b.chunky, rng)) {
    ++g_stats.cancelled;
    co_return Reply{false};
  }
  size_t fault_after = std::min<size_t>(events.size() - 1, first_content + 2);
  for (size_t i = 0; i < events.size(); ++i) {
    if ((b.reset_mid_stream || b.close_mid_stream) && i == fault_after) {
      abort_connection(stream, b.reset_mid_stream);
      co_return Reply{false};
    }
    if (i > 0 && b.delay_between_chunks_ms > 0 &&
        !co_await wait_watching(fd, b.delay_between_chunks_ms)) {
      ++g_stats.cancelled;
      abort_connection(stream, false);
      co_return Reply{false};
    }
    if (!co_await write_body_piece(stream, events[i], b.chunky, rng)) {
      ++g_stats.cancelled;
      abort_connection(stream, false);
      co_return Reply{false};
    }
    if (b.hang_after_first && i == 0) {
      co_await wait_watching(fd, kHangLimitMs);
      ++g_stats.cancelled;
      abort_connection(stream, false);
      co_return Reply{false};
    }
  }
  if (!co_await write_raw(stream, "0\r\n\r\n")) {
    ++g_stats.cancelled;
    co_return Reply{false};
  }
  ++g_stats.completed;
  co_return Reply{keep_alive};
}

// What a native endpoint (Messages, Responses) reads first: the body, the model it names and
// that model's behaviour, and the status to fail with (injected, or 400: not a JSON object).
struct NativeCall {
  json body;
  std::string model;
  Behaviour behaviour;
  unsigned failure = 0;
};

NativeCall read_native_call(const http::request<http::string_body>& req) {
  NativeCall c;
  c.body = json::parse(req.body(), nullptr, false);
  c.model = c.body.is_object() && c.body.contains("model") && c.body["model"].is_string()
                ? c.body["model"].get<std::string>()
                : std::string("echo");
  c.behaviour = parse_behaviour(c.model);
  if (c.behaviour.fail_status != 0) {
    c.failure = static_cast<unsigned>(c.behaviour.fail_status);
  } else if (!c.body.is_object()) {
    c.failure = 400;
  }
  return c;
}

// A whole event stream as one response with a Content-Length.
template <typename Stream>
awaitable<Reply> send_event_stream(Stream& stream, const std::string& events, bool keep_alive) {
  std::string head =
      "HTTP/1.1 200 OK\r\nServer: ferry_test_upstream\r\nContent-Type: text/event-stream\r\n"
      "Content-Length: " +
      std::to_string(events.size()) + (keep_alive ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n");
  bool ok = co_await write_raw(stream, head + events);
  ++g_stats.completed;
  co_return Reply{ok && keep_alive};
}

// Anthropic Messages, natively: the echo answer as a `message`, or its event stream.
template <typename Stream>
awaitable<Reply> serve_messages(Stream& stream, const http::request<http::string_body>& req) {
  bool keep_alive = req.keep_alive();
  Lcg rng{static_cast<uint64_t>(g_stats.requests) * 7919 + 17};
  NativeCall call = read_native_call(req);
  const json& body = call.body;
  const std::string& model = call.model;
  if (call.failure != 0) {
    const unsigned status = call.failure;
    json err = {{"type", "error"},
                {"error",
                 {{"type", status == 429 ? "rate_limit_error" : "api_error"},
                  {"message", "upstream: injected failure " + std::to_string(status)}}}};
    co_await send_json(stream, status, err, keep_alive, false, rng);
    ++g_stats.completed;
    co_return Reply{keep_alive};
  }
  Answer answer = make_answer(body, true);
  std::string stop = answer.finish_reason == "length" ? "max_tokens" : "end_turn";
  std::string id = "msg_up_" + std::to_string(g_stats.requests);
  json usage = {{"input_tokens", answer.prompt_tokens},
                {"output_tokens", static_cast<int64_t>(answer.pieces.size())}};
  if (!body.value("stream", false)) {
    json out = {{"id", id},
                {"type", "message"},
                {"role", "assistant"},
                {"model", model},
                {"content", json::array({{{"type", "text"}, {"text", join(answer.pieces)}}})},
                {"stop_reason", stop},
                {"stop_sequence", nullptr},
                {"usage", usage}};
    bool ok = co_await send_json(stream, 200, out, keep_alive, false, rng);
    ++g_stats.completed;
    co_return Reply{ok && keep_alive};
  }
  auto event = [](const char* name, const json& data) {
    return std::string("event: ") + name + "\ndata: " + dump(data) + "\n\n";
  };
  std::string out =
      event("message_start",
            {{"type", "message_start"},
             {"message",
              {{"id", id},
               {"type", "message"},
               {"role", "assistant"},
               {"model", model},
               {"content", json::array()},
               {"stop_reason", nullptr},
               {"stop_sequence", nullptr},
               {"usage", {{"input_tokens", answer.prompt_tokens}, {"output_tokens", 1}}}}}});
  out += event("content_block_start", {{"type", "content_block_start"},
                                       {"index", 0},
                                       {"content_block", {{"type", "text"}, {"text", ""}}}});
  for (const auto& piece : answer.pieces) {
    out += event("content_block_delta", {{"type", "content_block_delta"},
                                         {"index", 0},
                                         {"delta", {{"type", "text_delta"}, {"text", piece}}}});
  }
  out += event("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}});
  out += event("message_delta", {{"type", "message_delta"},
                                 {"delta", {{"stop_reason", stop}, {"stop_sequence", nullptr}}},
                                 {"usage", {{"output_tokens", usage["output_tokens"]}}}});
  out += event("message_stop", {{"type", "message_stop"}});
  co_return co_await send_event_stream(stream, out, keep_alive);
}

// OpenAI Responses, natively: the echo answer as a `response` object, or its event stream.
template <typename Stream>
awaitable<Reply> serve_responses(Stream& stream, const http::request<http::string_body>& req) {
  bool keep_alive = req.keep_alive();
  Lcg rng{static_cast<uint64_t>(g_stats.requests) * 7919 + 29};
  NativeCall call = read_native_call(req);
  const json& body = call.body;
  const std::string& model = call.model;
  if (call.failure != 0) {
    const unsigned status = call.failure;
    json err = {{"error",
                 {{"type", status == 429 ? "rate_limit_exceeded" : "server_error"},
                  {"message", "upstream: injected failure " + std::to_string(status)}}}};
    co_await send_json(stream, status, err, keep_alive, false, rng);
    ++g_stats.completed;
    co_return Reply{keep_alive};
  }
  // The input as chat messages, for the echo answer.
  json chat = {{"messages", json::array()}};
  const json input = body.value("input", json());
  if (input.is_string()) {
    chat["messages"].push_back({{"role", "user"}, {"content", input}});
  } else if (input.is_array()) {
    for (const auto& item : input) {
      if (item.is_object() && item.contains("role") && item.contains("content"))
        chat["messages"].push_back({{"role", item["role"]}, {"content", item["content"]}});
    }
  }
  if (body.contains("max_output_tokens")) chat["max_tokens"] = body["max_output_tokens"];
  Answer answer = make_answer(chat, true);
  const bool cut = answer.finish_reason == "length";
  const std::string id = "resp_up_" + std::to_string(g_stats.requests);
  const std::string text = join(answer.pieces);
  const auto output_tokens = static_cast<int64_t>(answer.pieces.size());
  auto response = [&](const char* status, bool done) {
    json message = {{"type", "message"},
                    {"id", "msg_up_" + std::to_string(g_stats.requests)},
                    {"status", status},
                    {"role", "assistant"},
                    {"content", json::array({{{"type", "output_text"},
                                              {"text", done ? text : std::string()},
                                              {"annotations", json::array()}}})}};
    json r = {{"id", id},
              {"object", "response"},
              {"created_at", 1700000000},
              {"status", status},
              {"model", model},
              {"output", done ? json::array({message}) : json::array()},
              {"incomplete_details", cut && done ? json{{"reason", "max_output_tokens"}} : json()},
              {"usage", json()}};
    if (done) {
      r["usage"] = {{"input_tokens", answer.prompt_tokens},
                    {"input_tokens_details", {{"cached_tokens", 0}}},
                    {"output_tokens", output_tokens},
                    {"output_tokens_details", {{"reasoning_tokens", 0}}},
                    {"total_tokens", answer.prompt_tokens + output_tokens}};
    }
    return r;
  };
  const char* final_status = cut ? "incomplete" : "completed";
  if (!body.value("stream", false)) {
    bool ok = co_await send_json(stream, 200, response(final_status, true), keep_alive, false, rng);
    ++g_stats.completed;
    co_return Reply{ok && keep_alive};
  }
  int seq = 0;
  auto event = [&seq](const std::string& type, json data) {
    data["type"] = type;
    data["sequence_number"] = seq++;
    return "event: " + type + "\ndata: " + dump(data) + "\n\n";
  };
  std::string out = event("response.created", {{"response", response("in_progress", false)}});
  for (const auto& piece : answer.pieces) {
    out += event("response.output_text.delta",
                 {{"item_id", "msg_up_" + std::to_string(g_stats.requests)},
                  {"output_index", 0},
                  {"content_index", 0},
                  {"delta", piece}});
  }
  out += event(cut ? "response.incomplete" : "response.completed",
               {{"response", response(final_status, true)}});
  co_return co_await send_event_stream(stream, out, keep_alive);
}

json models_json() {
  json data = json::array();
  for (const char* name : {"echo",
                           "slow-1000",
                           "stream-slow-100",
                           "fail-500",
                           "fail-429",
                           "drop",
                           "cut-head",
                           "reset-mid-stream",
                           "close-mid-stream",
                           "malformed-sse",
                           "garbage-body",
                           "no-choices",
                           "bad-event-first",
                           "bad-event-mid",
                           "json-type-after",
                           "json-type-before",
                           "hang",
                           "hang-after-first",
                           "no-usage",
                           "chunky",
                           "call-tool",
                           "call-tool+cut-tool-args",
                           "call-tool+bad-tool-args"}) {
    data.push_back(
        {{"id", name}, {"object", "model"}, {"created", 1700000000}, {"owned_by", "test"}});
  }
  return {{"object", "list"}, {"data", std::move(data)}};
}

json stats_json() {
  return {{"connections", g_stats.connections}, {"api_connections", g_stats.api_connections},
          {"requests", g_stats.requests},       {"completed", g_stats.completed},
          {"cancelled", g_stats.cancelled},     {"in_flight", g_stats.in_flight}};
}

void record_request(const http::request<http::string_body>& req) {
  json headers = json::object();
  for (const auto& field : req) {
    std::string name(field.name_string());
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value(field.value());
    if (headers.contains(name)) {
      headers[name] = headers[name].get<std::string>() + ", " + value;
    } else {
      headers[name] = value;
    }
  }
  json body = json::parse(req.body(), nullptr, false);
  g_last_request = {{"method", std::string(req.method_string())},
                    {"target", std::string(req.target())},
                    {"headers", std::move(headers)},
                    {"body", body.is_discarded() ? json(nullptr) : body},
                    {"body_text", req.body()}};
}

template <class Stream>
awaitable<void> serve_http(Stream& stream) {
  beast::flat_buffer buffer;
  bool api_connection = false;
  Lcg rng{1};
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(kBodyLimit);
    parser.header_limit(kHeaderLimit);
    auto [ec, n] = co_await http::async_read(stream, buffer, parser, kTuple);
    (void)n;
    if (ec) co_return;
    http::request<http::string_body> req = parser.release();
    std::string_view target = req.target();
    std::string_view path = target.substr(0, target.find('?'));
    bool keep_alive = req.keep_alive();

    if (path.starts_with("/v1/")) {
      record_request(req);
      ++g_stats.requests;
      if (!api_connection) {
        api_connection = true;
        ++g_stats.api_connections;
      }
    }
    if (req.method() == http::verb::post &&
        (path == "/v1/chat/completions" || path == "/v1/completions")) {
      ++g_stats.in_flight;
      Reply r = co_await serve_completion(stream, req, path == "/v1/chat/completions");
      --g_stats.in_flight;
      if (!r.keep_alive) co_return;
      continue;
    }
    if (req.method() == http::verb::post && path == "/v1/embeddings") {
      Reply r = co_await serve_embeddings(stream, req);
      if (!r.keep_alive) co_return;
      continue;
    }
    if (req.method() == http::verb::post && path == "/v1/messages") {
      ++g_stats.in_flight;
      Reply r = co_await serve_messages(stream, req);
      --g_stats.in_flight;
      if (!r.keep_alive) co_return;
      continue;
    }
    if (req.method() == http::verb::post && path == "/v1/responses") {
      ++g_stats.in_flight;
      Reply r = co_await serve_responses(stream, req);
      --g_stats.in_flight;
      if (!r.keep_alive) co_return;
      continue;
    }
    bool ok = true;
    if (req.method() == http::verb::get && path == "/v1/models") {
      ok = co_await send_json(stream, 200, models_json(), keep_alive, false, rng);
      ++g_stats.completed;
    } else if (req.method() == http::verb::get && path == "/_last_request") {
      ok = co_await send_json(stream, 200, g_last_request, keep_alive, false, rng);
    } else if (req.method() == http::verb::get && path == "/_stats") {
      ok = co_await send_json(stream, 200, stats_json(), keep_alive, false, rng);
    } else if (req.method() == http::verb::post && path == "/_reset") {
      g_stats = Stats{};
      g_stats.in_flight = 0;
      ok = co_await send_json(stream, 200, stats_json(), keep_alive, false, rng);
    } else {
      if (path.starts_with("/v1/")) ++g_stats.completed;
      ok = co_await send_json(stream, 404,
                              error_json("upstream: no route " + std::string(path),
                                         "invalid_request_error", "not_found"),
                              keep_alive, false, rng);
    }
    if (!ok || !keep_alive) co_return;
  }
}

awaitable<void> serve_plain(tcp::socket socket) {
  co_await serve_http(socket);
  boost::system::error_code ec;
  socket.shutdown(tcp::socket::shutdown_send, ec);
  socket.close(ec);
}

awaitable<void> serve_tls(ssl::stream<tcp::socket> stream) {
  auto [ec] = co_await stream.async_handshake(ssl::stream_base::server, kTuple);
  if (!ec) {
    co_await serve_http(stream);
    if (stream.lowest_layer().is_open()) {
      auto [ec2] = co_await stream.async_shutdown(kTuple);
      (void)ec2;
    }
  }
  boost::system::error_code ignored;
  stream.lowest_layer().close(ignored);
}

awaitable<void> accept_loop(tcp::acceptor& acceptor, ssl::context* tls) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(kTuple);
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      continue;
    }
    ++g_stats.connections;
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto ex = acceptor.get_executor();
    if (tls != nullptr) {
      asio::co_spawn(ex, serve_tls(ssl::stream<tcp::socket>(std::move(socket), *tls)),
                     asio::detached);
    } else {
      asio::co_spawn(ex, serve_plain(std::move(socket)), asio::detached);
    }
  }
}

int usage_error(const std::string& message) {
  std::cerr << "ferry_test_upstream: " << message
            << "\nusage: ferry_test_upstream --listen HOST:PORT [--tls-cert FILE --tls-key FILE]\n";
  return 2;
}

int run(int argc, char** argv) {
  std::string listen = "127.0.0.1:0";
  std::string cert;
  std::string key;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (i + 1 >= argc) return usage_error("missing value after " + std::string(arg));
    if (arg == "--listen") {
      listen = argv[++i];
    } else if (arg == "--tls-cert") {
      cert = argv[++i];
    } else if (arg == "--tls-key") {
      key = argv[++i];
    } else {
      return usage_error("unknown argument " + std::string(arg));
    }
  }
  if (cert.empty() != key.empty()) return usage_error("--tls-cert and --tls-key go together");
  std::string host;
  std::string port_text;
  if (!listen.empty() && listen.front() == '[') {
    auto close = listen.find("]:");
    if (close == std::string::npos) return usage_error("bad --listen " + listen);
    host = listen.substr(1, close - 1);
    port_text = listen.substr(close + 2);
  } else {
    auto colon = listen.rfind(':');
    if (colon == std::string::npos) return usage_error("bad --listen " + listen);
    host = listen.substr(0, colon);
    port_text = listen.substr(colon + 1);
  }
  auto port = parse_int(port_text);
  if (!port || *port > 65535) return usage_error("bad port in --listen " + listen);

  asio::io_context io;
  std::optional<ssl::context> tls;
  if (!cert.empty()) {
    tls.emplace(ssl::context::tls_server);
    tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                     ssl::context::no_sslv3);
    tls->use_certificate_chain_file(cert);
    tls->use_private_key_file(key, ssl::context::pem);
  }
  tcp::endpoint endpoint(asio::ip::make_address(host), static_cast<uint16_t>(*port));
  tcp::acceptor acceptor(io);
  acceptor.open(endpoint.protocol());
  acceptor.set_option(asio::socket_base::reuse_address(true));
  acceptor.bind(endpoint);
  acceptor.listen(asio::socket_base::max_listen_connections);
  asio::co_spawn(io, accept_loop(acceptor, tls ? &*tls : nullptr), asio::detached);

  auto bound = acceptor.local_endpoint();
  std::string shown = bound.address().is_v6() ? "[" + bound.address().to_string() + "]"
                                              : bound.address().to_string();
  std::cout << "listening on " << (tls ? "https" : "http") << "://" << shown << ":" << bound.port()
            << std::endl;

  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&io](const boost::system::error_code&, int) { io.stop(); });
  io.run();
  return 0;
}

}  // namespace
}  // namespace ferry::itest

int main(int argc, char** argv) {
  try {
    return ferry::itest::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "ferry_test_upstream: " << e.what() << "\n";
    return 1;
  }
}
