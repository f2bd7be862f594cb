// A small HTTP/1.x server for `sluice serve`'s plain-HTTP endpoints (metrics, health): GET and HEAD
// only, bodies of at most a few KiB, no TLS. Built on Boost.Asio/Beast; nothing of Boost leaks into
// this header.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "formats/status.h"

namespace sluice {

struct HttpRequest {
  std::string method;  // "GET" or "HEAD"; other methods never reach the handler
  std::string target;  // path and query as sent, e.g. "/metrics?x=1"
};

struct HttpResponse {
  int status = 200;          // 200..599; anything else is answered as 500
  std::string content_type;  // empty: "text/plain; charset=utf-8"
  std::string body;          // dropped for HEAD; Content-Length still describes it
};

struct HttpServerLimits {
  // Requests with a larger body are answered 413 and the connection is closed.
  size_t max_body_bytes = 64 * 1024;
  // Request line plus headers; larger is answered 431 and the connection is closed.
  size_t max_header_bytes = 16 * 1024;
  // Time to receive a request line and headers, from the request's first byte (from the accept
  // for a connection's first request): a client that sends them slowly holds its slot no longer.
  std::chrono::milliseconds header_timeout{5'000};
  // Time to receive a request's body once its headers are in, and to write one response.
  std::chrono::milliseconds io_timeout{10'000};
  // How long an idle keep-alive connection waits for its next request's first byte.
  std::chrono::milliseconds keep_alive_timeout{10'000};
  // On expiry of any of these the connection is closed without a response.

  // Connections served at once, all client addresses together, and from one address.
  size_t max_connections = 64;
  size_t max_connections_per_address = 16;

  // Connections over those limits take one of `reserved_connections` slots. Their request (it gets
  // `reserved_timeout` to arrive) is served when it is a GET or HEAD of one of `priority_paths`
  // (health probes) and answered 503 otherwise, and the connection is then closed. When every
  // reserved slot is taken, a new connection takes the slot of the oldest connection among those
  // of the client that holds the most reserved slots plus "strikes" (its earlier reserved
  // connections that ended without a priority request); a connection whose whole priority request
  // is in keeps its slot until answered, and when all do, the new connection is closed. A client
  // is an IPv4 address (IPv4-mapped IPv6 included) or an IPv6 /64, for these limits and the
  // per-address one. So clients that open connections and leave them idle, from one address or
  // from many, cannot keep out a probe from an address that does not. Zero reserved slots:
  // connections over the limits are closed at once.
  std::vector<std::string> priority_paths;  // e.g. "/healthz"; compared without the query
  size_t reserved_connections = 16;
  std::chrono::milliseconds reserved_timeout{1'000};
};

// Serves connections until Stop(), within HttpServerLimits (connections over them are refused or
// served only for priority paths). Methods other than GET/HEAD get 405 with an Allow header;
// an exception thrown by the handler gets 500. Keep-alive follows HTTP/1.1 and 1.0 rules.
//
// Thread-safety: the handler runs on the server's own thread(s), one call per connection at a
// time; with threads > 1 it may run concurrently for different connections and must be
// thread-safe. port() and Stop() may be called from any thread except a handler's.
class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // Listens on `address`: "host:port" where host is a name ("localhost"), an IPv4 literal or a
  // bracketed IPv6 literal ("[::1]:9100"); port 0 picks an ephemeral port (see port()). When the
  // name resolves to several addresses, the first that can be bound is used.
  // Errors: INVALID_ARGUMENT for a malformed address or threads < 1; UNAVAILABLE when the host
  // does not resolve or no address can be bound ("cannot listen on 127.0.0.1:9 (...)").
  static Result<std::unique_ptr<HttpServer>> Start(const std::string& address, Handler handler,
                                                   int threads = 1,
                                                   const HttpServerLimits& limits = {});

  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound port (the ephemeral one when started with port 0).
  int port() const;

  // Closes the listening socket and every open connection (a response being written is cut
  // short), waits for a running handler call to return, and joins the server's threads.
  // Idempotent; concurrent callers all return once the server has stopped.
  void Stop();

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
