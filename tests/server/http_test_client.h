// Plain-socket HTTP for tests of a real `sluice serve`'s metrics address: one request per
// connection with a deadline on every read and write, and raw connections that send part of a
// request and stall.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>

namespace sluice::testing {

// A connected TCP socket to 127.0.0.1:port (from `source`, a loopback address, when given);
// closed by the destructor. fd() < 0 when the connection failed.
class RawConnection {
 public:
  explicit RawConnection(int port, const char* source = nullptr,
                         std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return;
    timeval tv{static_cast<time_t>(timeout.count() / 1000),
               static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (source != nullptr) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      ::inet_pton(AF_INET, source, &from.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) Reset();
    }
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0 &&
        !(errno == EINTR && AwaitConnect(static_cast<int>(timeout.count())))) {
      Reset();
    }
  }
  ~RawConnection() { Reset(); }
  RawConnection(RawConnection&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  int fd() const { return fd_; }
  // The server closed (or reset) the connection during the last ReadToClose.
  bool peer_closed() const { return peer_closed_; }

  bool Send(const std::string& data) {
    size_t sent = 0;
    while (fd_ >= 0 && sent < data.size()) {
      ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return fd_ >= 0;
  }

  // Everything the server sends until it closes the connection (or the timeout passes, see
  // peer_closed()); nullopt when nothing came.
  std::optional<std::string> ReadToClose() {
    std::string out;
    char buf[4096];
    for (;;) {
      ssize_t n = fd_ < 0 ? -1 : ::recv(fd_, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;  // a signal (libFuzzer's timer), not the peer
      if (n == 0 || (n < 0 && errno == ECONNRESET)) peer_closed_ = true;
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    if (out.empty()) return std::nullopt;
    return out;
  }

 private:
  // A connect interrupted by a signal goes on in the background: true once it succeeded.
  bool AwaitConnect(int timeout_ms) {
    pollfd p{fd_, POLLOUT, 0};
    int n;
    do {
      n = ::poll(&p, 1, timeout_ms);
    } while (n < 0 && errno == EINTR);
    int error = 0;
    socklen_t len = sizeof(error);
    return n == 1 && ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0;
  }

  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
  bool peer_closed_ = false;
};

// GET `target` on a connection of its own ("Connection: close"); the whole response, status line
// first, or nullopt when the connection failed or nothing came back.
inline std::optional<std::string> HttpGet(int port, const std::string& target,
                                          const char* source = nullptr) {
  RawConnection c(port, source);
  if (c.fd() < 0) return std::nullopt;
  if (!c.Send("GET " + target + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")) {
    return std::nullopt;
  }
  return c.ReadToClose();
}

// The port of the "metrics on http://HOST:PORT/metrics" line `sluice serve` prints; 0 if none.
inline int MetricsPort(const std::string& output) {
  const std::string key = "metrics on http://";
  size_t at = output.find(key);
  if (at == std::string::npos) return 0;
  at = output.find(':', at + key.size());
  return at == std::string::npos ? 0 : std::atoi(output.c_str() + at + 1);
}

}  // namespace sluice::testing
