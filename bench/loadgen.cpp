// ferry_loadgen: an HTTP/1.1 load generator for the gateway benchmark. In one go it drives the
// test upstream directly and the same upstream through ferry, with keep-alive connections,
// closed-loop (N concurrent) and fixed-rate runs, non-streaming and streaming chat requests,
// and reports requests/s, latency percentiles, time to the first streamed byte, the latency
// ferry adds, and ferry's CPU time per request (from /proc/<pid>/stat).
// Single-threaded: one epoll loop owns every connection; nothing here is shared.
//
//   ferry_loadgen --direct http://127.0.0.1:P --ferry http://127.0.0.1:Q --ferry-pid PID
//                 [--upstream-pid PID] [--api-key KEY] [--concurrency 16] [--duration 5]
//                 [--rate 200] [--body-bytes 1500] [--max-tokens 16] [--slow-stream-ms 5]
//                 [--rounds 1] [--json FILE] [--only TEXT]
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::bench {
namespace {

// ============================================================================ time and CPU

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// CPU time of a process, all its threads: utime + stime from /proc/<pid>/stat (clock ticks,
// 10 ms each), and the sum of /proc/<pid>/task/*/schedstat run times (nanoseconds; threads
// that already exited are missing there, so it is the precise figure only for a server whose
// threads live as long as it does).
struct CpuTime {
  int64_t stat_ns = 0;
  int64_t user_ns = 0;  // utime alone (the same ticks): user space against the kernel
  int64_t sched_ns = 0;
};

std::optional<CpuTime> process_cpu(int pid) {
  if (pid <= 0) return std::nullopt;
  std::string dir = "/proc/" + std::to_string(pid);
  std::ifstream in(dir + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 2));
  std::string field;
  int64_t utime = 0;
  int64_t stime = 0;
  // After "pid (comm) ", field 3 (state) comes first; utime is field 14 and stime field 15.
  for (int index = 3; index <= 15 && fields >> field; ++index) {
    if (index == 14) utime = std::stoll(field);
    if (index == 15) stime = std::stoll(field);
  }
  CpuTime cpu;
  cpu.stat_ns = (utime + stime) * (1000000000 / sysconf(_SC_CLK_TCK));
  cpu.user_ns = utime * (1000000000 / sysconf(_SC_CLK_TCK));
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(dir + "/task", ec)) {
    std::ifstream sched(task.path() / "schedstat");
    int64_t run_ns = 0;
    if (sched >> run_ns) cpu.sched_ns += run_ns;
  }
  return cpu;
}

// The state letter of /proc/<pid>/stat's line (the field after "(comm) "): 'R', 'S', 'D', ...,
// 'T' stopped by a signal (SIGSTOP, SIGTSTP), 't' stopped by a tracer; 0 when unreadable.
char stat_state(std::string_view stat_line) {
  auto close = stat_line.rfind(')');
  if (close == std::string_view::npos || close + 2 >= stat_line.size()) return 0;
  return stat_line[close + 2];
}

// Whether the process is stopped now (a signal or a tracer): a server stopped during a run
// answers nothing meanwhile, and the run's figures measure the stop, not the server.
bool process_stopped(int pid) {
  if (pid <= 0) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  char state = stat_state(line);
  return state == 'T' || state == 't';
}

// ============================================================================ HTTP response

// Incremental HTTP/1.1 response parser: Content-Length and chunked bodies, one response at a
// time. Remembers when the first body byte arrived and the last few body bytes (to check that
// a stream ended with `data: [DONE]`).
class ResponseParser {
 public:
  enum class Result { kMore, kDone, kError };

  void reset() { *this = ResponseParser{}; }

  // Consumes bytes from data; stops after a complete response (the rest stays unconsumed).
  Result feed(const char* data, size_t size, size_t* consumed, int64_t now) {
    size_t pos = 0;
    Result r = Result::kMore;
    while (pos < size && r == Result::kMore) r = step(data, size, pos, now);
    if (r == Result::kMore && state_ == State::kDone) r = Result::kDone;
    *consumed = pos;
    return r;
  }

  int status() const { return status_; }
  bool keep_alive() const { return keep_alive_; }
  int64_t first_body_ns() const { return first_body_ns_; }
  bool ends_with(std::string_view suffix) const { return tail_.ends_with(suffix); }

 private:
  enum class State { kHeader, kBody, kChunkSize, kChunkData, kChunkDataEnd, kTrailer, kDone };

  Result step(const char* data, size_t size, size_t& pos, int64_t now) {
    switch (state_) {
      case State::kHeader: {
        while (pos < size && !line_.ends_with("\r\n\r\n")) line_.push_back(data[pos++]);
        if (line_.size() > 65536) return Result::kError;
        if (!line_.ends_with("\r\n\r\n")) return Result::kMore;
        if (!parse_header()) return Result::kError;
        line_.clear();
        if (chunked_) {
          state_ = State::kChunkSize;
        } else if (remaining_ > 0) {
          state_ = State::kBody;
        } else {
          state_ = State::kDone;
          return Result::kDone;
        }
        return Result::kMore;
      }
      case State::kBody: {
        size_t n = std::min<size_t>(size - pos, static_cast<size_t>(remaining_));
        take_body(data + pos, n, now);
        pos += n;
        remaining_ -= static_cast<int64_t>(n);
        if (remaining_ == 0) {
          state_ = State::kDone;
          return Result::kDone;
        }
        return Result::kMore;
      }
      case State::kChunkSize:
      case State::kTrailer: {
        while (pos < size && !line_.ends_with("\r\n")) line_.push_back(data[pos++]);
        if (line_.size() > 1024) return Result::kError;
        if (!line_.ends_with("\r\n")) return Result::kMore;
        if (state_ == State::kTrailer) {
          bool last = line_ == "\r\n";
          line_.clear();
          if (last) {
            state_ = State::kDone;
            return Result::kDone;
          }
          return Result::kMore;
        }
        uint64_t chunk = 0;
        auto [end, ec] = std::from_chars(line_.data(), line_.data() + line_.size(), chunk, 16);
        if (ec != std::errc{} || end == line_.data()) return Result::kError;
        line_.clear();
        remaining_ = static_cast<int64_t>(chunk);
        state_ = chunk == 0 ? State::kTrailer : State::kChunkData;
        return Result::kMore;
      }
      case State::kChunkData: {
        size_t n = std::min<size_t>(size - pos, static_cast<size_t>(remaining_));
        take_body(data + pos, n, now);
        pos += n;
        remaining_ -= static_cast<int64_t>(n);
        if (remaining_ == 0) state_ = State::kChunkDataEnd;
        return Result::kMore;
      }
      case State::kChunkDataEnd: {
        while (pos < size && line_.size() < 2) line_.push_back(data[pos++]);
        if (line_.size() < 2) return Result::kMore;
        if (line_ != "\r\n") return Result::kError;
        line_.clear();
        state_ = State::kChunkSize;
        return Result::kMore;
      }
      case State::kDone:
        return Result::kDone;
    }
    return Result::kError;
  }

  void take_body(const char* data, size_t n, int64_t now) {
    if (n == 0) return;
    if (first_body_ns_ == 0) first_body_ns_ = now;
    tail_.append(data, n);
    if (tail_.size() > 64) tail_.erase(0, tail_.size() - 32);
  }

  static std::string lower(std::string_view text) {
    std::string out(text);
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  }

  bool parse_header() {
    std::string_view head = line_;
    if (!head.starts_with("HTTP/1.") || head.size() < 12) return false;
    auto [end, ec] = std::from_chars(head.data() + 9, head.data() + 12, status_);
    if (ec != std::errc{} || end != head.data() + 12) return false;
    keep_alive_ = head.starts_with("HTTP/1.1");
    size_t start = head.find("\r\n") + 2;
    while (start < head.size()) {
      size_t eol = head.find("\r\n", start);
      if (eol == start || eol == std::string_view::npos) break;
      std::string_view field = head.substr(start, eol - start);
      start = eol + 2;
      size_t colon = field.find(':');
      if (colon == std::string_view::npos) continue;
      std::string name = lower(field.substr(0, colon));
      std::string_view value = field.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      if (name == "content-length") {
        std::from_chars(value.data(), value.data() + value.size(), remaining_);
      } else if (name == "transfer-encoding") {
        chunked_ = lower(value).find("chunked") != std::string::npos;
      } else if (name == "connection") {
        std::string v = lower(value);
        if (v.find("close") != std::string::npos) keep_alive_ = false;
        if (v.find("keep-alive") != std::string::npos) keep_alive_ = true;
      }
    }
    return true;
  }

  State state_ = State::kHeader;
  std::string line_;
  int status_ = 0;
  bool keep_alive_ = true;
  bool chunked_ = false;
  int64_t remaining_ = 0;
  int64_t first_body_ns_ = 0;
  std::string tail_;
};

// ============================================================================ targets

struct Target {
  std::string name;  // "direct" or "ferry"
  std::string host;
  std::string port;
  std::string api_key;
  int pid = 0;  // the server process whose CPU time is measured; 0 = none
};

std::optional<Target> parse_url(const std::string& name, std::string_view url) {
  if (!url.starts_with("http://")) return std::nullopt;
  url.remove_prefix(7);
  url = url.substr(0, url.find('/'));
  auto colon = url.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  Target t;
  t.name = name;
  t.host = std::string(url.substr(0, colon));
  if (t.host.size() > 2 && t.host.front() == '[') t.host = t.host.substr(1, t.host.size() - 2);
  t.port = std::string(url.substr(colon + 1));
  return t;
}

int connect_to(const Target& target) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(target.host.c_str(), target.port.c_str(), &hints, &found) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// ============================================================================ requests

// A chat request body of about `bytes` bytes: a system prompt and a user message of plain
// words (the test upstream echoes the user message, cut to max_tokens words).
std::string make_chat_body(const std::string& model, bool stream, int64_t bytes,
                           int64_t max_tokens) {
  static constexpr std::string_view kWords[] = {
      "gateway", "routes", "every", "request",   "to",      "the", "cheapest",
      "backend", "that",   "can",   "serve",     "it",      "and", "records",
      "what",    "each",   "token", "cost",      "in",      "a",   "ledger",
      "finance", "trusts", "while", "streaming", "answers", "at",  "once"};
  auto words = [](int64_t size, size_t seed) {
    std::string text;
    for (size_t i = seed; static_cast<int64_t>(text.size()) < size; ++i) {
      if (!text.empty()) text.push_back(' ');
      text.append(kWords[(i * 7) % std::size(kWords)]);
    }
    return text;
  };
  int64_t content = std::max<int64_t>(bytes - 220, 64);
  std::string body = "{\"model\":\"" + model +
                     "\",\"messages\":[{\"role\":\"system\",\"content\":\"" +
                     words(content * 55 / 100, 3) + "\"},{\"role\":\"user\",\"content\":\"" +
                     words(content * 45 / 100, 11) +
                     "\"}],\"max_tokens\":" + std::to_string(max_tokens) + ",\"temperature\":0.7";
  // Streams ask for usage: ferry always asks its upstream for it (the ledger needs it), so
  // with this the upstream sends the same events whether called directly or through ferry.
  if (stream) body += ",\"stream\":true,\"stream_options\":{\"include_usage\":true}";
  body += "}";
  return body;
}

std::string make_http_request(const Target& target, const std::string& body) {
  std::string req = "POST /v1/chat/completions HTTP/1.1\r\nHost: " + target.host + ":" +
                    target.port + "\r\nContent-Type: application/json\r\nAccept: */*\r\n";
  if (!target.api_key.empty()) req += "Authorization: Bearer " + target.api_key + "\r\n";
  req += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  return req;
}

// ============================================================================ one run

struct Scenario {
  std::string name;
  std::string model;
  bool stream = false;
  int concurrency = 16;
  double rate = 0;  // requests per second; 0 = closed loop (each connection back to back)
  int64_t warmup_ms = 1000;
  int64_t duration_ms = 5000;
};

struct RunStats {
  std::string scenario;
  std::string target;
  int64_t ok = 0;
  int64_t errors = 0;
  int64_t duration_ns = 0;
  std::vector<int64_t> latency_ns;      // request written (or due, at a fixed rate) -> last byte
  std::vector<int64_t> first_ns;        // request written (or due) -> first body byte
  std::optional<double> server_cpu_us;  // CPU of the target's server process per request
  std::optional<double> server_cpu_stat_us;  // the same from /proc/<pid>/stat (10 ms ticks)
  std::optional<double> server_cpu_user_us;  // its user-space part (the same ticks)
  std::optional<double> upstream_cpu_us;     // CPU of the upstream per request (ferry runs)
  // Something other than the target held the run up, so its figures are void: the server or
  // the upstream was seen stopped (SIGSTOP, e.g. another session's /tmp/quiet.sh), or this
  // process itself did not run for `stalled_ms` (a gap between two turns of its loop, whose
  // waits are at most 100 ms).
  bool server_stopped = false;
  bool upstream_stopped = false;
  int64_t stalled_ms = 0;

  double rps() const { return duration_ns > 0 ? ok * 1e9 / static_cast<double>(duration_ns) : 0; }
};

// Pools the samples of another round of the same scenario and target into `into`.
void merge_into(RunStats& into, const RunStats& from) {
  auto weighted = [&](std::optional<double>& a, const std::optional<double>& b) {
    double wa = static_cast<double>(into.ok + into.errors);
    double wb = static_cast<double>(from.ok + from.errors);
    if (a && b && wa + wb > 0) a = (*a * wa + *b * wb) / (wa + wb);
  };
  weighted(into.server_cpu_us, from.server_cpu_us);
  weighted(into.server_cpu_stat_us, from.server_cpu_stat_us);
  weighted(into.server_cpu_user_us, from.server_cpu_user_us);
  weighted(into.upstream_cpu_us, from.upstream_cpu_us);
  into.server_stopped = into.server_stopped || from.server_stopped;
  into.upstream_stopped = into.upstream_stopped || from.upstream_stopped;
  into.stalled_ms = std::max(into.stalled_ms, from.stalled_ms);
  into.ok += from.ok;
  into.errors += from.errors;
  into.duration_ns += from.duration_ns;
  into.latency_ns.insert(into.latency_ns.end(), from.latency_ns.begin(), from.latency_ns.end());
  into.first_ns.insert(into.first_ns.end(), from.first_ns.begin(), from.first_ns.end());
}

double percentile_ms(std::vector<int64_t> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  auto index = static_cast<size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return static_cast<double>(values[std::min(index, values.size() - 1)]) / 1e6;
}

class Runner {
 public:
  Runner(const Target& target, const Scenario& scenario, std::string request, int upstream_pid)
      : target_(target),
        scenario_(scenario),
        request_(std::move(request)),
        upstream_pid_(upstream_pid) {}
  ~Runner() {
    for (auto& c : conns_) {
      if (c.fd >= 0) ::close(c.fd);
    }
    if (timer_fd_ >= 0) ::close(timer_fd_);
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
  }
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  std::optional<RunStats> run();

 private:
  struct Conn {
    int fd = -1;
    bool busy = false;
    size_t written = 0;
    int64_t start_ns = 0;
    ResponseParser parser;
  };
  static constexpr uint64_t kTimerTag = ~uint64_t{0};

  bool open_conn(size_t index);
  void start_request(size_t index, int64_t start_ns);
  void flush(size_t index);
  void on_readable(size_t index);
  void finish(size_t index, bool ok, int64_t now);
  void on_timer(int64_t now);
  void arm_timer(int64_t at_ns);
  bool in_window(int64_t start_ns) const { return start_ns >= window_start_ && start_ns < end_; }

  const Target& target_;
  const Scenario& scenario_;
  const std::string request_;
  const int upstream_pid_;
  std::vector<Conn> conns_;
  std::deque<int64_t> pending_;  // due times of fixed-rate requests waiting for a connection
  int epoll_fd_ = -1;
  int timer_fd_ = -1;
  int64_t window_start_ = 0;
  int64_t end_ = 0;
  int64_t next_due_ = 0;
  int64_t interval_ns_ = 0;
  RunStats stats_;
};

bool Runner::open_conn(size_t index) {
  Conn& c = conns_[index];
  if (c.fd >= 0) ::close(c.fd);
  c = Conn{};
  c.fd = connect_to(target_);
  if (c.fd < 0) return false;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = index;
  return epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c.fd, &ev) == 0;
}

void Runner::start_request(size_t index, int64_t start_ns) {
  Conn& c = conns_[index];
  c.busy = true;
  c.written = 0;
  c.start_ns = start_ns;
  c.parser.reset();
  flush(index);
}

void Runner::flush(size_t index) {
  Conn& c = conns_[index];
  while (c.written < request_.size()) {
    ssize_t n =
        ::send(c.fd, request_.data() + c.written, request_.size() - c.written, MSG_NOSIGNAL);
    if (n > 0) {
      c.written += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
      ev.data.u64 = index;
      epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
      return;
    }
    finish(index, false, now_ns());
    return;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = index;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
}

void Runner::on_readable(size_t index) {
  char buffer[65536];
  for (;;) {
    Conn& c = conns_[index];
    ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    int64_t now = now_ns();
    if (n <= 0) {
      // The server closed (or reset): an error when a response was under way.
      if (c.busy) {
        finish(index, false, now);
      } else if (open_conn(index) && scenario_.rate <= 0 && now < end_) {
        start_request(index, now);
      }
      return;
    }
    if (!c.busy) continue;  // bytes nobody asked for: ignore
    size_t used = 0;
    auto r = c.parser.feed(buffer, static_cast<size_t>(n), &used, now);
    if (r == ResponseParser::Result::kError) {
      finish(index, false, now);
      return;
    }
    if (r == ResponseParser::Result::kDone) {
      bool ok =
          c.parser.status() == 200 && (!scenario_.stream || c.parser.ends_with("data: [DONE]\n\n"));
      finish(index, ok, now);
      return;
    }
  }
}

void Runner::finish(size_t index, bool ok, int64_t now) {
  Conn& c = conns_[index];
  if (in_window(c.start_ns)) {
    if (ok) {
      ++stats_.ok;
      stats_.latency_ns.push_back(now - c.start_ns);
      if (c.parser.first_body_ns() > 0) {
        stats_.first_ns.push_back(c.parser.first_body_ns() - c.start_ns);
      }
    } else {
      ++stats_.errors;
    }
  }
  bool reuse = ok && c.parser.keep_alive();
  c.busy = false;
  if (!reuse && !open_conn(index)) return;
  if (scenario_.rate <= 0) {
    if (now < end_) start_request(index, now);
  } else if (!pending_.empty()) {
    int64_t due = pending_.front();
    pending_.pop_front();
    start_request(index, due);
  }
}

void Runner::arm_timer(int64_t at_ns) {
  itimerspec spec{};
  spec.it_value.tv_sec = at_ns / 1000000000;
  spec.it_value.tv_nsec = at_ns % 1000000000;
  timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr);
}

void Runner::on_timer(int64_t now) {
  uint64_t expirations = 0;
  (void)!::read(timer_fd_, &expirations, sizeof expirations);
  while (next_due_ <= now && next_due_ < end_) {
    pending_.push_back(next_due_);
    next_due_ += interval_ns_;
  }
  for (size_t i = 0; i < conns_.size() && !pending_.empty(); ++i) {
    if (conns_[i].busy || conns_[i].fd < 0) continue;
    int64_t due = pending_.front();
    pending_.pop_front();
    start_request(i, due);
  }
  if (next_due_ < end_) arm_timer(next_due_);
}

std::optional<RunStats> Runner::run() {
  stats_.scenario = scenario_.name;
  stats_.target = target_.name;
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  conns_.resize(static_cast<size_t>(scenario_.concurrency));
  for (size_t i = 0; i < conns_.size(); ++i) {
    if (!open_conn(i)) {
      std::fprintf(stderr, "loadgen: cannot connect to %s:%s\n", target_.host.c_str(),
                   target_.port.c_str());
      return std::nullopt;
    }
  }
  int64_t start = now_ns();
  window_start_ = start + scenario_.warmup_ms * 1000000;
  end_ = window_start_ + scenario_.duration_ms * 1000000;
  if (scenario_.rate > 0) {
    timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kTimerTag;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, timer_fd_, &ev);
    interval_ns_ = static_cast<int64_t>(1e9 / scenario_.rate);
    next_due_ = start;
    arm_timer(next_due_);
  } else {
    for (size_t i = 0; i < conns_.size(); ++i) start_request(i, start);
  }

  std::optional<CpuTime> cpu_begin, cpu_end, up_begin, up_end;
  const int64_t drain_limit = end_ + 10000000000LL;  // in-flight requests get 10 s to finish
  epoll_event events[64];
  int64_t last_turn = start;
  int64_t next_state_check = start;
  for (;;) {
    int64_t now = now_ns();
    // Stops of the servers and of this process, checked every 20 ms (two small reads).
    int64_t gap_ms = (now - last_turn) / 1000000;
    if (gap_ms >= 500) stats_.stalled_ms = std::max(stats_.stalled_ms, gap_ms);
    last_turn = now;
    if (now >= next_state_check) {
      next_state_check = now + 20000000;
      if (process_stopped(target_.pid)) stats_.server_stopped = true;
      if (upstream_pid_ != target_.pid && process_stopped(upstream_pid_)) {
        stats_.upstream_stopped = true;
      }
    }
    if (!cpu_begin && now >= window_start_) {
      cpu_begin = process_cpu(target_.pid);
      up_begin = process_cpu(upstream_pid_);
    }
    if (!cpu_end && now >= end_) {
      cpu_end = process_cpu(target_.pid);
      up_end = process_cpu(upstream_pid_);
    }
    bool busy = std::any_of(conns_.begin(), conns_.end(), [](const Conn& c) { return c.busy; });
    if (now >= end_ && (!busy || now >= drain_limit)) {
      for (auto& c : conns_) {
        if (c.busy && in_window(c.start_ns)) ++stats_.errors;
      }
      break;
    }
    int64_t wake = now < window_start_ ? window_start_ : now < end_ ? end_ : drain_limit;
    int timeout_ms = static_cast<int>(std::clamp<int64_t>((wake - now) / 1000000 + 1, 1, 100));
    int count = epoll_wait(epoll_fd_, events, 64, timeout_ms);
    for (int i = 0; i < count; ++i) {
      uint64_t tag = events[i].data.u64;
      if (tag == kTimerTag) {
        on_timer(now_ns());
        continue;
      }
      auto index = static_cast<size_t>(tag);
      if ((events[i].events & EPOLLOUT) != 0 && conns_[index].busy) flush(index);
      if ((events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
        on_readable(index);
      }
    }
  }
  stats_.duration_ns = end_ - window_start_;
  int64_t counted = stats_.ok + stats_.errors;
  auto per_request_us = [counted](int64_t ns) { return static_cast<double>(ns) / 1e3 / counted; };
  if (cpu_begin && cpu_end && counted > 0) {
    stats_.server_cpu_us = per_request_us(cpu_end->sched_ns - cpu_begin->sched_ns);
    stats_.server_cpu_stat_us = per_request_us(cpu_end->stat_ns - cpu_begin->stat_ns);
    stats_.server_cpu_user_us = per_request_us(cpu_end->user_ns - cpu_begin->user_ns);
  }
  if (upstream_pid_ != target_.pid && up_begin && up_end && counted > 0) {
    stats_.upstream_cpu_us = per_request_us(up_end->sched_ns - up_begin->sched_ns);
  }
  return stats_;
}

// ============================================================================ report

struct Options {
  std::string direct_url;
  std::string ferry_url;
  std::string api_key;
  int ferry_pid = 0;
  int upstream_pid = 0;
  int concurrency = 16;
  double rate = 200;
  int64_t duration_ms = 5000;
  int64_t warmup_ms = 1000;
  int64_t body_bytes = 1500;
  int64_t max_tokens = 16;
  int64_t slow_stream_ms = 5;
  int rounds = 1;
  std::string json_file;
  std::string only;  // run only scenarios whose name contains this
  // Optional further targets: other proxies in front of the same upstream (e.g. nginx), each
  // given as --reference URL [--reference-pid PID] [--reference-name NAME], in that order.
  std::vector<std::string> reference_urls;
  std::vector<int> reference_pids;
  std::vector<std::string> reference_names;
};

std::string fmt(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

// "47.8 us/request (user 41%)": the CPU a request, and the share of user space in it (both
// /proc/<pid>/stat tick counts, so the share is free of the two sources' difference).
std::string cpu_words(const RunStats& s) {
  std::string words = fmt("%.1f", s.server_cpu_us.value_or(0)) + " us/request";
  if (s.server_cpu_user_us && s.server_cpu_stat_us && *s.server_cpu_stat_us > 0) {
    words += " (user " + fmt("%.0f", 100 * *s.server_cpu_user_us / *s.server_cpu_stat_us) + "%)";
  }
  return words;
}

void print_row(const RunStats& s) {
  std::printf("%-28s %-10s %8.0f %8.3f %8.3f %8.3f %9.3f %8s %8s %8s %6" PRId64 "\n",
              s.scenario.c_str(), s.target.c_str(), s.rps(), percentile_ms(s.latency_ns, 0.5),
              percentile_ms(s.latency_ns, 0.9), percentile_ms(s.latency_ns, 0.99),
              percentile_ms(s.first_ns, 0.5),
              s.server_cpu_us ? fmt("%.1f", *s.server_cpu_us).c_str() : "-",
              s.server_cpu_stat_us ? fmt("%.0f", *s.server_cpu_stat_us).c_str() : "-",
              s.upstream_cpu_us ? fmt("%.1f", *s.upstream_cpu_us).c_str() : "-", s.errors);
  if (s.server_stopped || s.upstream_stopped || s.stalled_ms > 0) {
    std::string why;
    if (s.server_stopped) why += " the server was stopped during the run;";
    if (s.upstream_stopped) why += " the upstream was stopped during the run;";
    if (s.stalled_ms > 0) {
      why += " the load generator did not run for " + std::to_string(s.stalled_ms) + " ms;";
    }
    std::printf("  ^ void:%s not the server's figures (another session's SIGSTOP?)\n", why.c_str());
  }
  std::fflush(stdout);
}

std::string json_row(const RunStats& s) {
  std::string out = "{\"scenario\":\"" + s.scenario + "\",\"target\":\"" + s.target + "\"";
  out += ",\"ok\":" + std::to_string(s.ok) + ",\"errors\":" + std::to_string(s.errors);
  out += ",\"rps\":" + fmt("%.1f", s.rps());
  out += ",\"p50_ms\":" + fmt("%.4f", percentile_ms(s.latency_ns, 0.5));
  out += ",\"p90_ms\":" + fmt("%.4f", percentile_ms(s.latency_ns, 0.9));
  out += ",\"p99_ms\":" + fmt("%.4f", percentile_ms(s.latency_ns, 0.99));
  out += ",\"first_byte_p50_ms\":" + fmt("%.4f", percentile_ms(s.first_ns, 0.5));
  out += ",\"first_byte_p90_ms\":" + fmt("%.4f", percentile_ms(s.first_ns, 0.9));
  if (s.server_cpu_us) out += ",\"server_cpu_us_per_req\":" + fmt("%.2f", *s.server_cpu_us);
  if (s.server_cpu_stat_us) {
    out += ",\"server_cpu_stat_us_per_req\":" + fmt("%.2f", *s.server_cpu_stat_us);
  }
  if (s.upstream_cpu_us) out += ",\"upstream_cpu_us_per_req\":" + fmt("%.2f", *s.upstream_cpu_us);
  if (s.server_stopped) out += ",\"server_stopped\":true";
  if (s.upstream_stopped) out += ",\"upstream_stopped\":true";
  if (s.stalled_ms > 0) out += ",\"loadgen_stalled_ms\":" + std::to_string(s.stalled_ms);
  return out + "}";
}

std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "loadgen: %s needs a value\n", argv[i]);
      return std::nullopt;
    }
    std::string value = argv[++i];
    if (arg == "--direct")
      o.direct_url = value;
    else if (arg == "--ferry")
      o.ferry_url = value;
    else if (arg == "--api-key")
      o.api_key = value;
    else if (arg == "--ferry-pid")
      o.ferry_pid = std::stoi(value);
    else if (arg == "--upstream-pid")
      o.upstream_pid = std::stoi(value);
    else if (arg == "--concurrency")
      o.concurrency = std::stoi(value);
    else if (arg == "--rate")
      o.rate = std::stod(value);
    else if (arg == "--duration")
      o.duration_ms = static_cast<int64_t>(std::stod(value) * 1000);
    else if (arg == "--warmup")
      o.warmup_ms = static_cast<int64_t>(std::stod(value) * 1000);
    else if (arg == "--body-bytes")
      o.body_bytes = std::stoll(value);
    else if (arg == "--max-tokens")
      o.max_tokens = std::stoll(value);
    else if (arg == "--slow-stream-ms")
      o.slow_stream_ms = std::stoll(value);
    else if (arg == "--rounds")
      o.rounds = std::max(1, std::stoi(value));
    else if (arg == "--json")
      o.json_file = value;
    else if (arg == "--only")
      o.only = value;
    else if (arg == "--reference") {
      o.reference_urls.push_back(value);
      o.reference_pids.resize(o.reference_urls.size(), 0);
      o.reference_names.resize(o.reference_urls.size(),
                               "ref" + std::to_string(o.reference_urls.size()));
    } else if (arg == "--reference-pid" && !o.reference_urls.empty())
      o.reference_pids.back() = std::stoi(value);
    else if (arg == "--reference-name" && !o.reference_urls.empty())
      o.reference_names.back() = value;
    else {
      std::fprintf(stderr, "loadgen: unknown option %s\n", argv[i - 1]);
      return std::nullopt;
    }
  }
  if (o.direct_url.empty() || o.ferry_url.empty()) {
    std::fprintf(stderr,
                 "usage: ferry_loadgen --direct URL --ferry URL [--ferry-pid PID] "
                 "[--upstream-pid PID] [--api-key KEY] [--concurrency N] [--rate R] "
                 "[--duration S] [--warmup S] [--body-bytes B] [--max-tokens T] "
                 "[--slow-stream-ms MS] [--rounds N] [--json FILE] [--only TEXT] "
                 "[--reference URL [--reference-pid PID] [--reference-name NAME]]...\n");
    return std::nullopt;
  }
  return o;
}

int run_all(int argc, char** argv) {
  auto options = parse_options(argc, argv);
  if (!options) return 2;
  const Options& o = *options;
  auto direct = parse_url("direct", o.direct_url);
  auto ferry = parse_url("ferry", o.ferry_url);
  if (!direct || !ferry) {
    std::fprintf(stderr, "loadgen: URLs must be http://HOST:PORT\n");
    return 2;
  }
  direct->pid = o.upstream_pid;
  ferry->pid = o.ferry_pid;
  ferry->api_key = o.api_key;
  // Optional further targets: other proxies in front of the same upstream (e.g. nginx),
  // measured in the same rounds so that ferry's figures have references from the same minute.
  std::vector<Target> references;
  for (size_t i = 0; i < o.reference_urls.size(); ++i) {
    auto reference = parse_url(o.reference_names[i], o.reference_urls[i]);
    if (!reference) {
      std::fprintf(stderr, "loadgen: URLs must be http://HOST:PORT\n");
      return 2;
    }
    reference->pid = o.reference_pids[i];
    reference->api_key = o.api_key;
    references.push_back(*reference);
  }

  std::string slow = "stream-slow-" + std::to_string(o.slow_stream_ms);
  std::string c = std::to_string(o.concurrency);
  std::string r = fmt("%.0f", o.rate);
  std::vector<Scenario> scenarios = {
      {"chat c=" + c, "echo", false, o.concurrency, 0, o.warmup_ms, o.duration_ms},
      {"chat stream c=" + c, "echo", true, o.concurrency, 0, o.warmup_ms, o.duration_ms},
      {"chat " + r + "/s", "echo", false, 8, o.rate, o.warmup_ms, o.duration_ms},
      {"chat stream " + r + "/s", "echo", true, 8, o.rate, o.warmup_ms, o.duration_ms},
      {"chat " + slow + " 50/s", slow, true, 16, 50, o.warmup_ms, o.duration_ms},
  };

  std::printf(
      "body %" PRId64 " bytes, max_tokens %" PRId64 ", warm-up %.1f s, %.1f s a run\n",
      static_cast<int64_t>(make_chat_body("echo", false, o.body_bytes, o.max_tokens).size()),
      o.max_tokens, o.warmup_ms / 1e3, o.duration_ms / 1e3);
  std::printf("%-28s %-10s %8s %8s %8s %8s %9s %8s %8s %8s %6s\n", "scenario", "target", "req/s",
              "p50 ms", "p90 ms", "p99 ms", "first p50", "cpu us/r", "stat us/r", "up us/r",
              "errors");
  std::vector<RunStats> all;
  std::vector<std::string> summary;
  for (const auto& scenario : scenarios) {
    if (!o.only.empty() && scenario.name.find(o.only) == std::string::npos) continue;
    std::string body = make_chat_body(scenario.model, scenario.stream, o.body_bytes, o.max_tokens);
    // Rounds alternate direct and ferry, so that a drift in the machine's load hits both; the
    // summary pools the samples of every round.
    std::vector<const Target*> targets = {&*direct, &*ferry};
    for (const auto& ref : references) targets.push_back(&ref);
    std::vector<std::optional<RunStats>> pair(targets.size());
    for (int round = 0; round < o.rounds; ++round) {
      for (size_t t = 0; t < targets.size(); ++t) {
        Runner runner(*targets[t], scenario, make_http_request(*targets[t], body), o.upstream_pid);
        auto stats = runner.run();
        if (!stats) return 1;
        if (o.rounds > 1) stats->target += " r" + std::to_string(round + 1);
        print_row(*stats);
        if (pair[t]) {
          merge_into(*pair[t], *stats);
        } else {
          pair[t] = stats;
          pair[t]->target = targets[t]->name;
        }
      }
    }
    if (o.rounds > 1) {
      for (auto& p : pair) {
        if (!p) continue;
        p->target += " all";
        print_row(*p);
      }
    }
    for (auto& p : pair) {
      if (p) all.push_back(*p);
    }
    const RunStats& d = *pair[0];
    const RunStats& f = *pair[1];
    std::string line =
        scenario.name + ": ferry adds p50 " +
        fmt("%.3f", percentile_ms(f.latency_ns, 0.5) - percentile_ms(d.latency_ns, 0.5)) +
        " ms, p90 " +
        fmt("%.3f", percentile_ms(f.latency_ns, 0.9) - percentile_ms(d.latency_ns, 0.9)) + " ms";
    if (scenario.stream) {
      line += ", first byte p50 " +
              fmt("%.3f", percentile_ms(f.first_ns, 0.5) - percentile_ms(d.first_ns, 0.5)) + " ms";
    }
    if (f.server_cpu_us) line += "; ferry CPU " + cpu_words(f);
    if (scenario.rate <= 0) line += "; throughput " + fmt("%.2f", f.rps() / d.rps()) + "x direct";
    summary.push_back(line);
    // The issue 17 ratios read directly: each other reference's CPU against nginx's.
    const RunStats* nginx = nullptr;
    for (size_t t = 2; t < pair.size(); ++t) {
      if (targets[t]->name == "nginx" && pair[t]->server_cpu_us) nginx = &*pair[t];
    }
    for (size_t t = 2; t < pair.size(); ++t) {
      const RunStats& n = *pair[t];
      const std::string& name = targets[t]->name;
      std::string ref =
          scenario.name + ": " + name + " adds p50 " +
          fmt("%.3f", percentile_ms(n.latency_ns, 0.5) - percentile_ms(d.latency_ns, 0.5)) +
          " ms, p90 " +
          fmt("%.3f", percentile_ms(n.latency_ns, 0.9) - percentile_ms(d.latency_ns, 0.9)) + " ms";
      if (scenario.stream) {
        ref += ", first byte p50 " +
               fmt("%.3f", percentile_ms(n.first_ns, 0.5) - percentile_ms(d.first_ns, 0.5)) + " ms";
      }
      if (n.server_cpu_us) {
        ref += "; " + name + " CPU " + cpu_words(n);
        if (f.server_cpu_us) {
          ref +=
              "; ferry/" + name + " CPU " + fmt("%.2f", *f.server_cpu_us / *n.server_cpu_us) + "x";
        }
        if (nginx != nullptr && nginx != &n) {
          ref += "; " + name + "/nginx CPU " +
                 fmt("%.2f", *n.server_cpu_us / *nginx->server_cpu_us) + "x";
        }
      }
      summary.push_back(ref);
    }
  }
  std::printf("\n");
  for (const auto& line : summary) std::printf("%s\n", line.c_str());
  if (!o.json_file.empty()) {
    std::ofstream out(o.json_file);
    out << "[\n";
    for (size_t i = 0; i < all.size(); ++i)
      out << "  " << json_row(all[i]) << (i + 1 < all.size() ? ",\n" : "\n");
    out << "]\n";
  }
  int64_t errors = 0;
  for (const auto& s : all) errors += s.errors;
  return errors == 0 ? 0 : 1;
}

}  // namespace
}  // namespace ferry::bench

int main(int argc, char** argv) {
  try {
    return ferry::bench::run_all(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loadgen: %s\n", e.what());
    return 2;
  }
}
