// The floor of a proxy on this machine: a byte relay that does nothing but the system calls
// any proxy must make. For each client connection it opens one upstream connection and, on
// each readiness event, moves what arrived to the other side: one recv and one send per
// message and direction, plus a shared epoll_wait. No HTTP parsing, no logging, no
// allocation per message. gateway_bench.sh runs it beside ferry and nginx so that the kernel's
// share of a proxied request is measured in the same run (see bench/README.md).
//
// With --commit-dir DIR it is also the floor of a proxy that keeps ferry's ledger promise (a
// durable record of each answer, committed before the answer's last byte reaches the client):
// it follows each upstream answer's framing (Content-Length or chunked; no other parsing),
// and the bytes that end an answer wait until one durable commit - a 4 KiB block written with
// O_DIRECT to a pre-sized, synced file in DIR, then fdatasync, as ferry's row log writes its
// segments - covers every answer that ended in the same epoll_wait batch (a group commit with
// no thread hand-off). gateway_bench.sh runs it as "relay-commit": no gateway that records a
// durable row per request can add less latency or CPU than it on this disk.
//
// Usage: ferry_bench_relay --listen HOST:PORT --upstream HOST:PORT [--commit-dir DIR]
// Prints "listening on http://HOST:PORT" once it accepts connections. Level-triggered epoll,
// blocking sends (messages here are small), single thread.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

bool parse_hostport(const std::string& text, sockaddr_in& out) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  std::memset(&out, 0, sizeof out);
  out.sin_family = AF_INET;
  out.sin_port = htons(static_cast<uint16_t>(std::atoi(text.c_str() + colon + 1)));
  return inet_pton(AF_INET, text.substr(0, colon).c_str(), &out.sin_addr) == 1;
}

void no_delay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

bool send_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Where an upstream answer ends, from its framing alone: the head up to its blank line, then
// Content-Length bytes or chunks up to the last one's blank line (no trailers: the stub upstream
// sends none). An answer with neither header ends with its head (the stub sends no such answer
// with a body).
class AnswerFraming {
 public:
  // Takes the next `n` bytes from the upstream; returns how many answers ended in them.
  int take(const char* p, size_t n) {
    int ended = 0;
    for (size_t i = 0; i < n;) {
      switch (state_) {
        case State::kHead: {
          const size_t had = head_.size();
          head_.append(p + i, n - i);
          const size_t end = head_.find("\r\n\r\n", had < 3 ? 0 : had - 3);
          if (end == std::string::npos) {
            i = n;
            break;
          }
          i += end + 4 - had;  // the rest is the body's
          head_.resize(end + 4);
          start_body();
          if (state_ == State::kHead) ++ended;
          break;
        }
        case State::kBody: {
          const size_t k = static_cast<size_t>(std::min<uint64_t>(left_, n - i));
          i += k;
          left_ -= k;
          if (left_ == 0) {
            state_ = State::kHead;
            ++ended;
          }
          break;
        }
        case State::kChunkSize:
          if (p[i] == '\n') {
            state_ = size_ == 0 ? State::kLastLine : State::kChunkData;
            left_ = size_ + 2;  // the data and its CRLF
            size_ = 0;
          } else if (std::isxdigit(static_cast<unsigned char>(p[i])) && !in_extension_) {
            size_ =
                size_ * 16 + static_cast<uint64_t>(std::isdigit(static_cast<unsigned char>(p[i]))
                                                       ? p[i] - '0'
                                                       : (p[i] | 0x20) - 'a' + 10);
          } else if (p[i] == ';') {
            in_extension_ = true;
          }
          if (p[i++] == '\n') in_extension_ = false;
          break;
        case State::kChunkData: {
          const size_t k = static_cast<size_t>(std::min<uint64_t>(left_, n - i));
          i += k;
          left_ -= k;
          if (left_ == 0) state_ = State::kChunkSize;
          break;
        }
        case State::kLastLine:  // the blank line after the last chunk
          if (p[i++] == '\n') {
            state_ = State::kHead;
            ++ended;
          }
          break;
      }
    }
    return ended;
  }

 private:
  enum class State { kHead, kBody, kChunkSize, kChunkData, kLastLine };

  void start_body() {
    std::string lower(head_.size(), '\0');
    std::transform(head_.begin(), head_.end(), lower.begin(), [](char c) {
      return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    });
    head_.clear();
    state_ = State::kHead;
    if (lower.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
      state_ = State::kChunkSize;
    } else if (auto at = lower.find("\r\ncontent-length:"); at != std::string::npos) {
      left_ = std::strtoull(lower.c_str() + at + 17, nullptr, 10);
      if (left_ > 0) state_ = State::kBody;
    }
  }

  State state_ = State::kHead;
  std::string head_;
  uint64_t left_ = 0;
  uint64_t size_ = 0;
  bool in_extension_ = false;
};

// The durable commit: one 4 KiB block, O_DIRECT, into a file of 8 MiB of zeros made and synced
// when the relay starts (the blocks are written in turn), then fdatasync.
class Committer {
 public:
  bool open(const std::string& dir) {
    const std::string path = dir + "/relay-commit.log";
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return false;
    const std::vector<char> zeros(kFileBytes, 0);
    bool ok = ::write(fd, zeros.data(), zeros.size()) == static_cast<ssize_t>(zeros.size()) &&
              fsync(fd) == 0;
    ::close(fd);
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
      ok = ok && fsync(dfd) == 0;
      ::close(dfd);
    }
    fd_ = ok ? ::open(path.c_str(), O_RDWR | O_DIRECT) : -1;
    void* memory = nullptr;
    if (fd_ < 0 || posix_memalign(&memory, kBlock, kBlock) != 0) return false;
    block_ = static_cast<char*>(memory);
    std::memset(block_, 'r', kBlock);
    return true;
  }

  bool commit() {
    const off_t at = static_cast<off_t>(next_ % (kFileBytes / kBlock) * kBlock);
    ++next_;
    return pwrite(fd_, block_, kBlock, at) == static_cast<ssize_t>(kBlock) && fdatasync(fd_) == 0;
  }

 private:
  static constexpr size_t kBlock = 4096;
  static constexpr size_t kFileBytes = 8u << 20;
  int fd_ = -1;
  char* block_ = nullptr;
  uint64_t next_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string listen_at = "127.0.0.1:0";
  std::string upstream_at;
  std::string commit_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string arg = argv[i];
    if (arg == "--listen")
      listen_at = argv[i + 1];
    else if (arg == "--upstream")
      upstream_at = argv[i + 1];
    else if (arg == "--commit-dir")
      commit_dir = argv[i + 1];
  }
  sockaddr_in listen_addr{};
  sockaddr_in upstream_addr{};
  if (!parse_hostport(listen_at, listen_addr) || !parse_hostport(upstream_at, upstream_addr)) {
    std::fprintf(stderr,
                 "usage: ferry_bench_relay --listen HOST:PORT --upstream HOST:PORT "
                 "[--commit-dir DIR]\n");
    return 2;
  }
  const bool committing = !commit_dir.empty();
  Committer committer;
  if (committing && !committer.open(commit_dir)) {
    std::perror("relay: the commit file");
    return 1;
  }
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&listen_addr), sizeof listen_addr) != 0 ||
      listen(lfd, 512) != 0) {
    std::perror("relay: listen");
    return 1;
  }
  socklen_t len = sizeof listen_addr;
  getsockname(lfd, reinterpret_cast<sockaddr*>(&listen_addr), &len);
  char host[64];
  inet_ntop(AF_INET, &listen_addr.sin_addr, host, sizeof host);
  std::printf("listening on http://%s:%d\n", host, ntohs(listen_addr.sin_port));
  std::fflush(stdout);

  int ep = epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = lfd;
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  std::vector<int> peer(1024, -1);  // fd -> the other side's fd
  // With --commit-dir: by upstream fd, its answers' framing; the bytes that end an answer,
  // held for the batch's commit ({client fd, bytes}).
  std::vector<AnswerFraming> framing(committing ? 1024 : 0);
  std::vector<bool> upstream_side(1024, false);
  std::vector<std::pair<int, std::string>> held;
  std::vector<char> buf(256 * 1024);
  epoll_event events[64];
  for (;;) {
    int n = epoll_wait(ep, events, 64, -1);
    if (n < 0 && errno == EINTR) continue;
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == lfd) {
        int c = accept(lfd, nullptr, nullptr);
        if (c < 0) continue;
        int u = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(u, reinterpret_cast<sockaddr*>(&upstream_addr), sizeof upstream_addr) != 0) {
          close(c);
          close(u);
          continue;
        }
        no_delay(c);
        no_delay(u);
        size_t need = static_cast<size_t>(std::max(c, u)) + 1;
        if (peer.size() < need) {
          peer.resize(need * 2, -1);
          upstream_side.resize(need * 2, false);
          if (committing) framing.resize(need * 2);
        }
        peer[static_cast<size_t>(c)] = u;
        peer[static_cast<size_t>(u)] = c;
        upstream_side[static_cast<size_t>(c)] = false;
        upstream_side[static_cast<size_t>(u)] = true;
        if (committing) framing[static_cast<size_t>(u)] = AnswerFraming();
        for (int s : {c, u}) {
          epoll_event e{};
          e.events = EPOLLIN;
          e.data.fd = s;
          epoll_ctl(ep, EPOLL_CTL_ADD, s, &e);
        }
        continue;
      }
      int other = peer[static_cast<size_t>(fd)];
      ssize_t r = recv(fd, buf.data(), buf.size(), 0);
      if (r > 0 && committing && upstream_side[static_cast<size_t>(fd)] &&
          framing[static_cast<size_t>(fd)].take(buf.data(), static_cast<size_t>(r)) > 0) {
        held.emplace_back(other, std::string(buf.data(), static_cast<size_t>(r)));
        continue;
      }
      if (r > 0 && send_all(other, buf.data(), static_cast<size_t>(r))) continue;
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      // End of stream or an error on either side: close the pair.
      for (int s : {fd, other}) {
        epoll_ctl(ep, EPOLL_CTL_DEL, s, nullptr);
        close(s);
        peer[static_cast<size_t>(s)] = -1;
        for (auto& h : held) {
          if (h.first == s) h.first = -1;  // its client is gone
        }
      }
    }
    if (!held.empty()) {
      if (!committer.commit()) {
        std::perror("relay: commit");
        return 1;
      }
      for (const auto& [client, bytes] : held) {
        if (client >= 0) (void)send_all(client, bytes.data(), bytes.size());
      }
      held.clear();
    }
  }
}
