// What `sluice serve`'s metrics port does with any bytes a client sends: the input is written on
// one loopback connection to a real HttpServer (Beast's parser, the server's limits, routing and
// responses, keep-alive and pipelining), then the connection is half-closed and everything the
// server answers is read until it closes. The server must answer only with well-formed responses
// of the statuses it documents, close the connection once the client is done (never hang), and
// keep serving: a health probe on a fresh connection after each input gets 200.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "server/http_server.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/server/http_test_client.h"

namespace {

using sluice::HttpRequest;
using sluice::HttpResponse;

// Routes the way StatusPages does (a priority health path, text pages, 404) plus the failure
// modes a handler has: an exception and an out-of-range status.
HttpResponse Route(const HttpRequest& r) {
  const std::string_view path = std::string_view(r.target).substr(0, r.target.find('?'));
  if (path == "/healthz") return {200, "", "ok\n"};
  if (path == "/metrics") return {200, "text/plain; version=0.0.4", "sluice_up 1\n"};
  if (path == "/echo") return {200, "", r.method + " " + r.target};
  if (path == "/big") return {200, "", std::string(256 * 1024, 'b')};
  if (path == "/throw") throw std::runtime_error("handler failed");
  if (path == "/status99") return {99, "", ""};
  return {404, "", "not found\n"};
}

sluice::HttpServer& Server() {
  static const std::unique_ptr<sluice::HttpServer> server = [] {
    sluice::HttpServerLimits limits;
    // Small enough for inputs of a few KiB to reach them.
    limits.max_body_bytes = 1024;
    limits.max_header_bytes = 2048;
    limits.priority_paths = {"/healthz"};
    auto started = sluice::HttpServer::Start("127.0.0.1:0", Route, 1, limits);
    if (!started.ok()) {
      std::fprintf(stderr, "%s\n", started.status().ToString().c_str());
      std::abort();
    }
    return std::move(*started);
  }();
  return *server;
}

bool IsDocumentedStatus(int status) {
  for (int s : {200, 400, 404, 405, 413, 431, 500, 503}) {
    if (status == s) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int port = Server().port();
  {
    sluice::testing::RawConnection c(port);
    FUZZ_CHECK(c.fd() >= 0, "cannot connect to the server");
    // The server may answer (and close) before it has read everything: a failed send is fine.
    c.Send(std::string(reinterpret_cast<const char*>(data), size));
    ::shutdown(c.fd(), SHUT_WR);
    std::optional<std::string> out = c.ReadToClose();
    FUZZ_CHECK(c.peer_closed(), "the server kept the connection open after the client was done");
    if (out) {
      FUZZ_CHECK(out->starts_with("HTTP/1.1 ") || out->starts_with("HTTP/1.0 "),
                 "the answer does not start with a status line: %.40s", out->c_str());
      const int status = std::atoi(out->c_str() + 9);
      FUZZ_CHECK(IsDocumentedStatus(status), "undocumented status %d", status);
    }
  }
  std::optional<std::string> probe = sluice::testing::HttpGet(port, "/healthz");
  FUZZ_CHECK(probe && probe->starts_with("HTTP/1.1 200"), "the server stopped answering");
  return 0;
}
