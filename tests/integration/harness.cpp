#include "tests/integration/harness.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

namespace ferry::itest {

namespace {

using Clock = std::chrono::steady_clock;

// Writes to a closed socket must fail with EPIPE, not kill the test.
const bool kIgnoreSigpipe = [] {
  ::signal(SIGPIPE, SIG_IGN);
  return true;
}();

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<Ms>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, left));
}

void set_socket_timeouts(int fd, Ms timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1000;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

}  // namespace

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string{} : std::string(v);
}

// ---------------------------------------------------------------- TempDir

TempDir::TempDir() {
  std::string base = env_or_empty("TMPDIR");
  if (base.empty()) base = "/tmp";
  std::string templ = base + "/ferry-itest-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) {
    throw std::runtime_error("mkdtemp failed: " + std::string(std::strerror(errno)));
  }
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::write(const std::string& name, std::string_view content) const {
  auto file = path_ / name;
  std::ofstream out(file, std::ios::binary);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  if (!out) throw std::runtime_error("cannot write " + file.string());
  return file.string();
}

// ---------------------------------------------------------------- Process

Process::Process(std::vector<std::string> argv) {
  if (argv.empty() || argv[0].empty()) throw std::runtime_error("Process: no program given");
  int out[2];
  int err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe2 failed");
  }
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    // Child: only async-signal-safe calls from here to exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  pid_ = pid;
  ::close(out[1]);
  ::close(err[1]);
  out_thread_ = std::thread([this, fd = out[0]] { read_loop(fd, true); });
  err_thread_ = std::thread([this, fd = err[0]] { read_loop(fd, false); });
}

Process::~Process() {
  if (!exit_status_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  if (out_thread_.joinable()) out_thread_.join();
  if (err_thread_.joinable()) err_thread_.join();
}

void Process::read_loop(int fd, bool is_stdout) {
  std::string partial;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    std::lock_guard lock(mutex_);
    if (!is_stdout) {
      err_text_.append(buf, static_cast<size_t>(n));
      continue;
    }
    partial.append(buf, static_cast<size_t>(n));
    size_t pos = 0;
    for (size_t nl; (nl = partial.find('\n', pos)) != std::string::npos; pos = nl + 1) {
      out_lines_.push_back(partial.substr(pos, nl - pos));
    }
    partial.erase(0, pos);
    cv_.notify_all();
  }
  ::close(fd);
  std::lock_guard lock(mutex_);
  if (is_stdout) {
    if (!partial.empty()) out_lines_.push_back(partial);
    out_closed_ = true;
  } else {
    err_closed_ = true;
  }
  cv_.notify_all();
}

std::optional<std::string> Process::wait_for_line(std::string_view prefix, Ms timeout) {
  std::unique_lock lock(mutex_);
  size_t seen = 0;
  auto deadline = Clock::now() + timeout;
  for (;;) {
    for (; seen < out_lines_.size(); ++seen) {
      if (out_lines_[seen].starts_with(prefix)) return out_lines_[seen];
    }
    if (out_closed_) return std::nullopt;
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
      for (; seen < out_lines_.size(); ++seen) {
        if (out_lines_[seen].starts_with(prefix)) return out_lines_[seen];
      }
      return std::nullopt;
    }
  }
}

std::optional<std::string> Process::wait_for_line_containing(std::string_view needle, Ms timeout) {
  std::unique_lock lock(mutex_);
  size_t seen = 0;
  auto deadline = Clock::now() + timeout;
  for (;;) {
    for (; seen < out_lines_.size(); ++seen) {
      if (out_lines_[seen].find(needle) != std::string::npos) return out_lines_[seen];
    }
    if (out_closed_) return std::nullopt;
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) return std::nullopt;
  }
}

std::vector<std::string> Process::stdout_lines() const {
  std::lock_guard lock(mutex_);
  return out_lines_;
}

std::string Process::stderr_text() const {
  std::lock_guard lock(mutex_);
  return err_text_;
}

void Process::send_signal(int sig) const {
  if (!exit_status_) ::kill(pid_, sig);
}

std::optional<int> Process::wait_exit(Ms timeout) {
  if (exit_status_) return exit_status_;
  auto deadline = Clock::now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      // The reader threads may still hold the last bytes it wrote: a caller reads its output
      // next, so wait (briefly: a grandchild could keep a pipe open) until both pipes closed.
      std::unique_lock lock(mutex_);
      cv_.wait_for(lock, Ms(5000), [&] { return out_closed_ && err_closed_; });
      return exit_status_;
    }
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(Ms(10));
  }
}

int Process::stop(Ms grace) {
  send_signal(SIGTERM);
  if (auto s = wait_exit(grace)) return *s;
  send_signal(SIGKILL);
  return wait_exit(Ms(10000)).value_or(-1);
}

std::optional<ListenAddress> parse_listening_line(std::string_view line) {
  constexpr std::string_view kPrefix = "listening on ";
  if (!line.starts_with(kPrefix)) return std::nullopt;
  line.remove_prefix(kPrefix.size());
  line = trim(line);
  auto scheme_end = line.find("://");
  if (scheme_end == std::string_view::npos) return std::nullopt;
  ListenAddress a;
  a.scheme = std::string(line.substr(0, scheme_end));
  std::string_view rest = line.substr(scheme_end + 3);
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  auto colon = rest.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view host = rest.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  a.host = std::string(host);
  std::string_view port = rest.substr(colon + 1);
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc{} || ptr != port.data() + port.size() || value == 0 || value > 65535) {
    return std::nullopt;
  }
  a.port = static_cast<uint16_t>(value);
  return a;
}

Server start_server(std::vector<std::string> argv) {
  std::string shown;
  for (const auto& a : argv) shown += a + " ";
  Server s;
  s.process = std::make_unique<Process>(std::move(argv));
  auto line = s.process->wait_for_line("listening on ", Ms(15000));
  std::optional<ListenAddress> address;
  if (line) address = parse_listening_line(*line);
  if (!address) {
    s.process->stop(Ms(1000));
    throw std::runtime_error("server did not print 'listening on URL': " + shown +
                             "\nstdout line: " + line.value_or("<none>") + "\nstderr:\n" +
                             s.process->stderr_text());
  }
  s.address = *address;
  return s;
}

int run_command(const std::string& command) {
  int status = std::system(command.c_str());
  if (status == -1) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// ---------------------------------------------------------------- Response

std::optional<std::string> Response::header(std::string_view name) const {
  std::string key = lower(name);
  for (const auto& [k, v] : headers) {
    if (k == key) return v;
  }
  return std::nullopt;
}

json Response::body_json() const {
  return json::parse(body, nullptr, false);
}

const char* read_status_name(ReadStatus s) {
  switch (s) {
    case ReadStatus::kData:
      return "data";
    case ReadStatus::kEnd:
      return "end";
    case ReadStatus::kClosed:
      return "closed";
    case ReadStatus::kTimeout:
      return "timeout";
    case ReadStatus::kError:
      return "error";
  }
  return "?";
}

// ---------------------------------------------------------------- Connection

std::unique_ptr<Connection> Connection::open(const std::string& host, uint16_t port,
                                             const TlsClientOptions* tls, Ms timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list) != 0) {
    return nullptr;
  }
  std::unique_ptr<Connection> c(new Connection());
  auto deadline = Clock::now() + timeout;
  for (addrinfo* ai = list; ai != nullptr && c->fd_ < 0; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, remaining_ms(deadline)) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
      }
    }
    if (rc != 0) {
      ::close(fd);
      continue;
    }
    int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    timeval send_timeout{30, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
    c->fd_ = fd;
  }
  ::freeaddrinfo(list);
  if (c->fd_ < 0) return nullptr;
  if (tls != nullptr) {
    c->ctx_ = SSL_CTX_new(TLS_client_method());
    if (c->ctx_ == nullptr) return nullptr;
    if (!tls->ca_file.empty()) {
      if (SSL_CTX_load_verify_locations(c->ctx_, tls->ca_file.c_str(), nullptr) != 1) {
        return nullptr;
      }
      SSL_CTX_set_verify(c->ctx_, SSL_VERIFY_PEER, nullptr);
    }
    c->ssl_ = SSL_new(c->ctx_);
    SSL_set_fd(c->ssl_, c->fd_);
    SSL_set_tlsext_host_name(c->ssl_, tls->server_name.c_str());
    if (!tls->ca_file.empty()) SSL_set1_host(c->ssl_, tls->server_name.c_str());
    set_socket_timeouts(c->fd_, Ms(std::max(1, remaining_ms(deadline))));
    if (SSL_connect(c->ssl_) != 1) {
      ERR_clear_error();
      return nullptr;
    }
  }
  return c;
}

Connection::~Connection() {
  close();
}

void Connection::close() {
  if (ssl_ != nullptr) {
    SSL_free(ssl_);
    ssl_ = nullptr;
  }
  if (ctx_ != nullptr) {
    SSL_CTX_free(ctx_);
    ctx_ = nullptr;
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

bool Connection::send(std::string_view bytes) {
  if (fd_ < 0) return false;
  while (!bytes.empty()) {
    long n = 0;
    if (ssl_ != nullptr) {
      n = SSL_write(ssl_, bytes.data(), static_cast<int>(std::min<size_t>(bytes.size(), 1 << 20)));
      if (n <= 0) {
        ERR_clear_error();
        return false;
      }
    } else {
      n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool Connection::readable(Ms timeout) {
  if (!in_.empty() || (ssl_ != nullptr && SSL_pending(ssl_) > 0)) return true;
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1;
}

long Connection::recv_more(Ms timeout) {
  if (fd_ < 0) return -1;
  char buf[65536];
  if (ssl_ == nullptr || SSL_pending(ssl_) == 0) {
    pollfd p{fd_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, timeout.count())));
    if (r == 0) return -2;
    if (r < 0) return -1;
  }
  if (ssl_ != nullptr) {
    set_socket_timeouts(fd_, std::max(timeout, Ms(1)));
    int n = SSL_read(ssl_, buf, sizeof buf);
    if (n > 0) {
      in_.append(buf, static_cast<size_t>(n));
      return n;
    }
    int err = SSL_get_error(ssl_, n);
    ERR_clear_error();
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) return -2;
    if (err == SSL_ERROR_ZERO_RETURN) return 0;
    if (err == SSL_ERROR_SYSCALL && errno == ECONNRESET) return -1;
    return err == SSL_ERROR_SYSCALL || err == SSL_ERROR_SSL ? 0 : -1;
  }
  for (;;) {
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) in_.append(buf, static_cast<size_t>(n));
    return n < 0 ? -1 : static_cast<long>(n);
  }
}

std::optional<Response> Connection::read_head(Ms timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    size_t end = in_.find("\r\n\r\n");
    while (end == std::string::npos) {
      long r = recv_more(Ms(remaining_ms(deadline)));
      if (r <= 0) return std::nullopt;
      end = in_.find("\r\n\r\n");
    }
    std::string_view head(in_.data(), end);
    Response res;
    size_t line_end = head.find("\r\n");
    std::string_view status_line = head.substr(0, line_end);
    if (!status_line.starts_with("HTTP/1.")) return std::nullopt;
    auto sp = status_line.find(' ');
    if (sp == std::string_view::npos || status_line.size() < sp + 4) return std::nullopt;
    std::string_view code = status_line.substr(sp + 1, 3);
    std::from_chars(code.data(), code.data() + 3, res.status);
    std::string_view rest =
        line_end == std::string_view::npos ? std::string_view{} : head.substr(line_end + 2);
    while (!rest.empty()) {
      size_t nl = rest.find("\r\n");
      std::string_view line = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 2);
      auto colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      res.headers.emplace_back(lower(trim(line.substr(0, colon))),
                               std::string(trim(line.substr(colon + 1))));
    }
    in_.erase(0, end + 4);
    if (res.status >= 100 && res.status < 200 && res.status != 101) continue;  // 100 Continue
    framing_ = Framing::kUntilClose;
    remaining_ = 0;
    chunk_crlf_pending_ = false;
    body_done_ = false;
    sse_buffer_.clear();
    auto te = res.header("transfer-encoding");
    auto cl = res.header("content-length");
    if (res.status == 204 || res.status == 304) {
      framing_ = Framing::kNone;
      body_done_ = true;
    } else if (te && lower(*te).find("chunked") != std::string::npos) {
      framing_ = Framing::kChunked;
    } else if (cl) {
      framing_ = Framing::kLength;
      std::from_chars(cl->data(), cl->data() + cl->size(), remaining_);
    }
    return res;
  }
}

// Decodes what in_ holds. kData when bytes were produced, kEnd at the end of the body,
// kTimeout when more input is needed, kError on a framing error.
ReadStatus Connection::decode_body(std::string& out) {
  if (body_done_) return ReadStatus::kEnd;
  switch (framing_) {
    case Framing::kNone:
      body_done_ = true;
      return ReadStatus::kEnd;
    case Framing::kLength: {
      if (remaining_ == 0) {
        body_done_ = true;
        return ReadStatus::kEnd;
      }
      size_t n = std::min<size_t>(in_.size(), static_cast<size_t>(remaining_));
      if (n == 0) return ReadStatus::kTimeout;
      out.append(in_, 0, n);
      in_.erase(0, n);
      remaining_ -= static_cast<int64_t>(n);
      return ReadStatus::kData;
    }
    case Framing::kUntilClose: {
      if (in_.empty()) return ReadStatus::kTimeout;
      out += in_;
      in_.clear();
      return ReadStatus::kData;
    }
    case Framing::kChunked: {
      bool produced = false;
      for (;;) {
        if (chunk_crlf_pending_) {
          if (in_.size() < 2) break;
          if (in_.compare(0, 2, "\r\n") != 0) return ReadStatus::kError;
          in_.erase(0, 2);
          chunk_crlf_pending_ = false;
        }
        if (remaining_ > 0) {
          size_t n = std::min<size_t>(in_.size(), static_cast<size_t>(remaining_));
          if (n == 0) break;
          out.append(in_, 0, n);
          in_.erase(0, n);
          remaining_ -= static_cast<int64_t>(n);
          produced = true;
          if (remaining_ == 0) chunk_crlf_pending_ = true;
          continue;
        }
        size_t nl = in_.find("\r\n");
        if (nl == std::string::npos) break;
        int64_t size = 0;
        auto [ptr, ec] = std::from_chars(in_.data(), in_.data() + nl, size, 16);
        if (ec != std::errc{} || size < 0) return ReadStatus::kError;
        (void)ptr;
        if (size == 0) {
          // Last chunk: optional trailers, then an empty line.
          if (in_.compare(nl + 2, 2, "\r\n") == 0) {
            in_.erase(0, nl + 4);
          } else {
            size_t trailers_end = in_.find("\r\n\r\n", nl + 2);
            if (trailers_end == std::string::npos) break;
            in_.erase(0, trailers_end + 4);
          }
          body_done_ = true;
          return produced ? ReadStatus::kData : ReadStatus::kEnd;
        }
        in_.erase(0, nl + 2);
        remaining_ = size;
      }
      return produced ? ReadStatus::kData : ReadStatus::kTimeout;
    }
  }
  return ReadStatus::kError;
}

ReadStatus Connection::read_body_some(std::string& out, Ms timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    ReadStatus st = decode_body(out);
    if (st != ReadStatus::kTimeout) return st;
    long r = recv_more(Ms(remaining_ms(deadline)));
    if (r > 0) continue;
    if (r == 0) {
      if (framing_ == Framing::kUntilClose) {
        body_done_ = true;
        return ReadStatus::kEnd;
      }
      return ReadStatus::kClosed;
    }
    return r == -2 ? ReadStatus::kTimeout : ReadStatus::kError;
  }
}

ReadStatus Connection::read_event(SseEvent& event, Ms timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    size_t end = sse_buffer_.find("\n\n");
    while (end != std::string::npos) {
      std::string block = sse_buffer_.substr(0, end);
      sse_buffer_.erase(0, end + 2);
      SseEvent e;
      bool has_field = false;
      bool has_data = false;
      size_t pos = 0;
      while (pos <= block.size()) {
        size_t nl = block.find('\n', pos);
        std::string_view line(block.data() + pos,
                              (nl == std::string::npos ? block.size() : nl) - pos);
        pos = nl == std::string::npos ? block.size() + 1 : nl + 1;
        if (line.empty() || line.front() == ':') continue;
        auto colon = line.find(':');
        std::string_view name = line.substr(0, colon);
        std::string_view value =
            colon == std::string_view::npos ? std::string_view{} : line.substr(colon + 1);
        if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
        if (name == "data") {
          if (has_data) e.data += '\n';
          e.data += value;
          has_data = true;
          has_field = true;
        } else if (name == "event") {
          e.event = std::string(value);
          has_field = true;
        }
      }
      if (has_field) {
        event = std::move(e);
        return ReadStatus::kData;
      }
      end = sse_buffer_.find("\n\n");
    }
    std::string more;
    ReadStatus st = read_body_some(more, Ms(remaining_ms(deadline)));
    more.erase(std::remove(more.begin(), more.end(), '\r'), more.end());
    sse_buffer_ += more;
    if (st != ReadStatus::kData) return st;
  }
}

std::optional<Response> Connection::read_response(Ms timeout) {
  auto deadline = Clock::now() + timeout;
  auto res = read_head(timeout);
  if (!res) return std::nullopt;
  for (;;) {
    ReadStatus st = read_body_some(res->body, Ms(remaining_ms(deadline)));
    if (st == ReadStatus::kEnd) return res;
    if (st != ReadStatus::kData) return std::nullopt;
  }
}

bool Connection::wait_closed(Ms timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    long r = recv_more(Ms(remaining_ms(deadline)));
    if (r == 0 || r == -1) return true;
    if (r == -2) return false;
  }
}

// ---------------------------------------------------------------- helpers

std::string make_request(std::string_view method, std::string_view target, std::string_view body,
                         const std::vector<std::string>& headers, std::string_view host) {
  std::string out;
  out.reserve(body.size() + 256);
  out.append(method).append(" ").append(target).append(" HTTP/1.1\r\nHost: ").append(host);
  out.append("\r\n");
  bool has_type = false;
  for (const auto& h : headers) {
    out.append(h).append("\r\n");
    if (lower(h).starts_with("content-type:")) has_type = true;
  }
  if (!body.empty() || method == "POST") {
    if (!has_type) out.append("Content-Type: application/json\r\n");
    out.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
  }
  out.append("\r\n");
  out.append(body);
  return out;
}

std::optional<Response> http_request(const ListenAddress& to, std::string_view method,
                                     std::string_view target, std::string_view body,
                                     const std::vector<std::string>& headers,
                                     const TlsClientOptions* tls, Ms timeout) {
  auto c = Connection::open(to.host, to.port, tls, timeout);
  if (!c) return std::nullopt;
  if (!c->send(make_request(method, target, body, headers, to.host))) return std::nullopt;
  return c->read_response(timeout);
}

void wait_ledger_committed(const ListenAddress& ferry) {
  const std::string series = "\nferry_ledger_log_rows ";
  for (int i = 0; i < 6000; ++i) {  // a condition, not a timing: 60 s is only the give-up bound
    auto r = http_request(ferry, "GET", "/metrics", {}, {}, nullptr, Ms(2000));
    if (!r || r->status != 200) return;
    auto at = r->body.find(series);
    if (at == std::string::npos || r->body.compare(at + series.size(), 2, "0\n") == 0) return;
    std::this_thread::sleep_for(Ms(10));
  }
}

}  // namespace ferry::itest
