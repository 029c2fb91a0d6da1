// The floor of a proxy on this machine: a byte relay that does nothing but the system calls
// any proxy must make. For each client connection it opens one upstream connection and, on
// each readiness event, moves what arrived to the other side: one recv and one send per
// message and direction, plus a shared epoll_wait. No HTTP parsing, no logging, no
// allocation per message. gateway_bench.sh runs it beside ferry and nginx so that the kernel's
// share of a proxied request is measured in the same run (see bench/README.md).
//
// Usage: ferry_bench_relay --listen HOST:PORT --upstream HOST:PORT
// Prints "listening on http://HOST:PORT" once it accepts connections. Level-triggered epoll,
// blocking sends (messages here are small), single thread.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
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

}  // namespace

int main(int argc, char** argv) {
  std::string listen_at = "127.0.0.1:0";
  std::string upstream_at;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string arg = argv[i];
    if (arg == "--listen")
      listen_at = argv[i + 1];
    else if (arg == "--upstream")
      upstream_at = argv[i + 1];
  }
  sockaddr_in listen_addr{};
  sockaddr_in upstream_addr{};
  if (!parse_hostport(listen_at, listen_addr) || !parse_hostport(upstream_at, upstream_addr)) {
    std::fprintf(stderr, "usage: ferry_bench_relay --listen HOST:PORT --upstream HOST:PORT\n");
    return 2;
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
        if (peer.size() < need) peer.resize(need * 2, -1);
        peer[static_cast<size_t>(c)] = u;
        peer[static_cast<size_t>(u)] = c;
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
      if (r > 0 && send_all(other, buf.data(), static_cast<size_t>(r))) continue;
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      // End of stream or an error on either side: close the pair.
      for (int s : {fd, other}) {
        epoll_ctl(ep, EPOLL_CTL_DEL, s, nullptr);
        close(s);
        peer[static_cast<size_t>(s)] = -1;
      }
    }
  }
}
