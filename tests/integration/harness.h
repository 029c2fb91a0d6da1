// Integration-test harness: child processes with captured output, temporary directories, and a
// small blocking HTTP/1.1 client (plain or TLS) over POSIX sockets that can send arbitrary bytes
// and read SSE incrementally. Each object is used by one test thread; Process is internally
// synchronised (its output is collected by reader threads).
#pragma once

#include <openssl/ssl.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ferry::itest {

using Ms = std::chrono::milliseconds;
using json = nlohmann::json;

// Reads an environment variable; empty when unset.
std::string env_or_empty(const char* name);

// A temporary directory, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Writes `content` to path()/name and returns the full path.
  std::string write(const std::string& name, std::string_view content) const;

 private:
  std::filesystem::path path_;
};

// A child process whose stdout and stderr are collected line by line.
class Process {
 public:
  // Starts argv[0] with the given arguments. Throws std::runtime_error when it cannot.
  explicit Process(std::vector<std::string> argv);
  ~Process();  // SIGKILL if still running
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // Waits for a stdout line starting with `prefix`; nullopt on timeout or when stdout closes.
  std::optional<std::string> wait_for_line(std::string_view prefix, Ms timeout);
  // Waits for any stdout line that contains `needle`.
  std::optional<std::string> wait_for_line_containing(std::string_view needle, Ms timeout);
  std::vector<std::string> stdout_lines() const;
  std::string stderr_text() const;
  void send_signal(int sig) const;
  // Waits for the process to exit; returns its exit code, 128+signal when killed, or nullopt.
  std::optional<int> wait_exit(Ms timeout);
  // SIGTERM, then SIGKILL after `grace`. Returns the exit status as wait_exit does.
  int stop(Ms grace = Ms(5000));

 private:
  void read_loop(int fd, bool is_stdout);

  pid_t pid_ = -1;
  std::optional<int> exit_status_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::string> out_lines_;
  std::string err_text_;
  bool out_closed_ = false;
  bool err_closed_ = false;
  std::thread out_thread_;
  std::thread err_thread_;
};

// Where a server said it listens: "listening on http://127.0.0.1:4321".
struct ListenAddress {
  std::string scheme;
  std::string host;
  uint16_t port = 0;
  std::string url() const { return scheme + "://" + host + ":" + std::to_string(port); }
};
std::optional<ListenAddress> parse_listening_line(std::string_view line);

// Starts a server binary and waits for its "listening on" line (15 s). Throws on failure,
// with the process's stderr in the message.
struct Server {
  std::unique_ptr<Process> process;
  ListenAddress address;
};
Server start_server(std::vector<std::string> argv);

// Runs a shell command; returns its exit code.
int run_command(const std::string& command);

// Client-side TLS settings.
struct TlsClientOptions {
  std::string ca_file;                    // empty: no verification
  std::string server_name = "localhost";  // SNI and the name verified
};

struct Response {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  std::optional<std::string> header(std::string_view name) const;
  json body_json() const;  // discarded value when the body is not JSON
};

// One server-sent event.
struct SseEvent {
  std::string event;  // the `event:` field, usually empty
  std::string data;   // `data:` lines joined with '\n'
};

enum class ReadStatus { kData, kEnd, kClosed, kTimeout, kError };
const char* read_status_name(ReadStatus s);

// A blocking HTTP/1.1 client connection (plain or TLS). Every read has a timeout.
class Connection {
 public:
  // nullptr when the connection (or the TLS handshake) fails.
  static std::unique_ptr<Connection> open(const std::string& host, uint16_t port,
                                          const TlsClientOptions* tls = nullptr,
                                          Ms timeout = Ms(5000));
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends everything; false on an error (peer closed or reset, or TLS failure).
  bool send(std::string_view bytes);
  // Reads the status line and headers of the next response.
  std::optional<Response> read_head(Ms timeout);
  // After read_head: appends the next decoded body bytes to `out`.
  ReadStatus read_body_some(std::string& out, Ms timeout);
  // After read_head: reads the next server-sent event of the body.
  ReadStatus read_event(SseEvent& event, Ms timeout);
  // read_head plus the whole body.
  std::optional<Response> read_response(Ms timeout);
  // Waits until the peer closes the connection (EOF or reset): true, or false on timeout/data.
  bool wait_closed(Ms timeout);
  // True when something can be read now (data, EOF or an error).
  bool readable(Ms timeout);
  void close();
  int fd() const { return fd_; }

 private:
  Connection() = default;
  // Receives more bytes into in_: >0 bytes, 0 EOF, -1 error, -2 timeout.
  long recv_more(Ms timeout);
  ReadStatus decode_body(std::string& out);

  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  std::string in_;
  // Body framing of the current response.
  enum class Framing { kNone, kLength, kChunked, kUntilClose } framing_ = Framing::kNone;
  int64_t remaining_ = 0;  // kLength: bytes left; kChunked: bytes left in the current chunk
  bool chunk_crlf_pending_ = false;
  bool body_done_ = true;
  std::string sse_buffer_;
};

// Builds the bytes of an HTTP/1.1 request. `headers` are extra "Name: value" lines.
std::string make_request(std::string_view method, std::string_view target, std::string_view body,
                         const std::vector<std::string>& headers = {},
                         std::string_view host = "127.0.0.1");

// One request on a fresh connection; nullopt when it fails or times out.
std::optional<Response> http_request(const ListenAddress& to, std::string_view method,
                                     std::string_view target, std::string_view body = {},
                                     const std::vector<std::string>& headers = {},
                                     const TlsClientOptions* tls = nullptr, Ms timeout = Ms(20000));

// A test that reads the SQLite ledger file itself while `ferry` runs: waits until the rows of its
// row log (ledger/row_log.h) are committed to the file (`ferry_ledger_log_rows` is 0), as a reader
// in another process sees them within `apply_ms`. Returns at once when the server is not running
// or has no row log.
void wait_ledger_committed(const ListenAddress& ferry);

}  // namespace ferry::itest
