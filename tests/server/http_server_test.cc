// HttpServer over real loopback sockets, driven by a small Beast client with a deadline on every
// operation (so a server bug fails a test instead of hanging it).
#include "server/http_server.h"

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sluice {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using Response = http::response<http::string_body>;

class TestClient {
 public:
  explicit TestClient(int port, const std::string& host = "127.0.0.1") : socket_(ioc_) {
    tcp::resolver resolver(ioc_);
    net::connect(socket_, resolver.resolve(host, std::to_string(port)));
  }
  // Connects to 127.0.0.1:port from the loopback address `source` (e.g. "127.0.0.2"): another
  // client address, as the server sees it.
  TestClient(int port, const char* source) : socket_(ioc_) {
    socket_.open(tcp::v4());
    socket_.bind({net::ip::make_address(source), 0});
    socket_.connect({net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  }

  beast::error_code WriteRaw(const std::string& data) {
    return Await([&](auto done) { net::async_write(socket_, net::buffer(data), done); });
  }

  beast::error_code Read(Response* res, bool head = false) {
    http::response_parser<http::string_body> parser;
    parser.skip(head);
    beast::error_code ec =
        Await([&](auto done) { http::async_read(socket_, buffer_, parser, done); });
    if (!ec) *res = parser.release();
    return ec;
  }

  // Sends one request; nullopt when no response came. Safe on any thread (no Catch2 macros).
  std::optional<Response> TrySend(http::verb method, const std::string& target,
                                  unsigned version = 11, const std::string& body = "") {
    http::request<http::string_body> req{method, target, version};
    req.set(http::field::host, "localhost");
    req.body() = body;
    req.prepare_payload();
    if (version == 10) req.keep_alive(false);
    if (Await([&](auto done) { http::async_write(socket_, req, done); })) return std::nullopt;
    Response res;
    if (Read(&res, method == http::verb::head)) return std::nullopt;
    return res;
  }

  // Sends one request and REQUIREs a response.
  Response Send(http::verb method, const std::string& target, unsigned version = 11,
                const std::string& body = "") {
    std::optional<Response> res = TrySend(method, target, version, body);
    REQUIRE(res);
    return std::move(*res);
  }

  Response Get(const std::string& target) { return Send(http::verb::get, target); }

  // True when the server closes the connection within `limit` without sending anything.
  bool PeerCloses(std::chrono::milliseconds limit = 30s) {
    char byte;
    beast::error_code ec =
        Await([&](auto done) { socket_.async_read_some(net::buffer(&byte, 1), done); }, limit);
    return ec == net::error::eof || ec == net::error::connection_reset;
  }

 private:
  // Runs one async operation to completion or until `limit`, then cancels it.
  template <typename Op>
  beast::error_code Await(Op op, std::chrono::milliseconds limit = 30s) {
    std::optional<beast::error_code> result;
    op([&](beast::error_code ec, size_t) { result = ec; });
    ioc_.restart();
    ioc_.run_for(limit);
    if (result) return *result;
    socket_.cancel();
    ioc_.restart();
    ioc_.run();
    return net::error::timed_out;
  }

  net::io_context ioc_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

HttpResponse Route(const HttpRequest& req) {
  if (req.target == "/metrics") return {200, "text/plain; version=0.0.4", "up 1\n"};
  if (req.target.rfind("/echo", 0) == 0)
    return {200, "application/json", req.method + " " + req.target};
  if (req.target == "/throw") throw std::runtime_error("handler failed");
  return {404, "", "not found\n"};
}

std::unique_ptr<HttpServer> StartOrDie(HttpServer::Handler handler = Route,
                                       const HttpServerLimits& limits = {}, int threads = 1) {
  auto server = HttpServer::Start("127.0.0.1:0", std::move(handler), threads, limits);
  INFO(server.status().ToString());
  REQUIRE(server.ok());
  return std::move(server).value();
}

TEST_CASE("GetReturnsHandlerStatusBodyAndContentType") {
  auto server = StartOrDie();
  TestClient client(server->port());
  Response res = client.Get("/metrics");
  CHECK(res.result_int() == 200);
  CHECK(res.body() == "up 1\n");
  CHECK(res[http::field::content_type] == "text/plain; version=0.0.4");
  CHECK(res[http::field::content_length] == "5");
}

TEST_CASE("KeepAliveServesTwoRequestsOnOneConnection") {
  auto server = StartOrDie();
  TestClient client(server->port());
  Response first = client.Get("/echo?a=1");
  CHECK(first.keep_alive());
  CHECK(first.body() == "GET /echo?a=1");
  CHECK(client.Get("/echo?b=2").body() == "GET /echo?b=2");
}

TEST_CASE("HeadHasHeadersButNoBody") {
  auto server = StartOrDie();
  TestClient client(server->port());
  Response head = client.Send(http::verb::head, "/metrics");
  CHECK(head.result_int() == 200);
  CHECK(head[http::field::content_length] == "5");
  CHECK(head.body().empty());
  // Had a body been sent, it would be read as the start of this response.
  CHECK(client.Get("/echo").body() == "GET /echo");
}

TEST_CASE("PostIsMethodNotAllowedWithAllowHeader") {
  std::atomic<int> calls{0};
  auto server = StartOrDie([&](const HttpRequest& req) {
    ++calls;
    return Route(req);
  });
  TestClient client(server->port());
  Response res = client.Send(http::verb::post, "/metrics", 11, "x=1");
  CHECK(res.result_int() == 405);
  CHECK(res[http::field::allow] == "GET, HEAD");
  CHECK(calls == 0);
  CHECK(client.Get("/metrics").result_int() == 200);
}

TEST_CASE("HandlerDecidesUnknownPathIs404") {
  auto server = StartOrDie();
  TestClient client(server->port());
  Response res = client.Get("/nope");
  CHECK(res.result_int() == 404);
  CHECK(res.body() == "not found\n");
  CHECK(res[http::field::content_type] == "text/plain; charset=utf-8");
}

TEST_CASE("HandlerExceptionIs500AndServerKeepsServing") {
  auto server = StartOrDie();
  TestClient client(server->port());
  CHECK(client.Get("/throw").result_int() == 500);
  CHECK(client.Get("/metrics").result_int() == 200);
  TestClient other(server->port());
  CHECK(other.Get("/metrics").result_int() == 200);
}

TEST_CASE("StatusOutOfRangeIs500") {
  auto server = StartOrDie([](const HttpRequest&) { return HttpResponse{1000, "", "x"}; });
  TestClient client(server->port());
  CHECK(client.Get("/").result_int() == 500);
}

TEST_CASE("Http10ConnectionClosesAfterResponse") {
  auto server = StartOrDie();
  TestClient client(server->port());
  Response res = client.Send(http::verb::get, "/metrics", 10);
  CHECK(res.version() == 10);
  CHECK(res.body() == "up 1\n");
  CHECK(client.PeerCloses());
}

TEST_CASE("BodyOverLimitIs413") {
  HttpServerLimits limits;
  limits.max_body_bytes = 1024;
  auto server = StartOrDie(Route, limits);
  TestClient client(server->port());
  Response res = client.Send(http::verb::get, "/metrics", 11, std::string(4096, 'x'));
  CHECK(res.result_int() == 413);
  CHECK_FALSE(res.keep_alive());
}

TEST_CASE("StopWithIdleClientConnectionReturnsPromptly") {
  auto server = StartOrDie();
  TestClient client(server->port());
  CHECK(client.Get("/metrics").result_int() == 200);
  auto start = Clock::now();
  server->Stop();
  CHECK(Clock::now() - start < 2s);
  CHECK(client.PeerCloses(2s));
  server->Stop();  // idempotent
}

TEST_CASE("PortZeroPicksAnEphemeralPort") {
  auto server = StartOrDie();
  CHECK(server->port() > 0);
  TestClient client(server->port());
  CHECK(client.Get("/metrics").result_int() == 200);
}

TEST_CASE("PortInUseFailsNamingTheAddress") {
  auto first = StartOrDie();
  std::string address = "127.0.0.1:" + std::to_string(first->port());
  auto second = HttpServer::Start(address, Route);
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == StatusCode::kUnavailable);
  CHECK(second.status().message() == "cannot listen on " + address + " (Address already in use)");
}

TEST_CASE("MalformedAddressesAreInvalidArguments") {
  auto address = GENERATE(as<std::string>{}, "", "9100", "localhost:", "localhost:http",
                          "localhost:65536", ":9100", "::1:9100", "[::1:9100", "host:-1");
  auto server = HttpServer::Start(address, Route);
  INFO(address);
  REQUIRE_FALSE(server.ok());
  CHECK(server.status().code() == StatusCode::kInvalidArgument);
  CHECK(server.status().message().find(address) != std::string::npos);
}

TEST_CASE("ListensOnIpv6LiteralAndHostName") {
  auto address = GENERATE(as<std::string>{}, "[::1]:0", "localhost:0");
  auto server = HttpServer::Start(address, Route);
  INFO(address << ": " << server.status().ToString());
  REQUIRE(server.ok());
  std::string host = address == "[::1]:0" ? "::1" : "localhost";
  TestClient client((*server)->port(), host);
  CHECK(client.Get("/metrics").result_int() == 200);
}

TEST_CASE("StalledPartialRequestDoesNotBlockOtherClients") {
  HttpServerLimits limits;
  limits.header_timeout = 60s;
  auto server = StartOrDie(Route, limits);
  TestClient stalled(server->port());
  REQUIRE_FALSE(stalled.WriteRaw("GET /metrics HTTP/1.1\r\nHo"));
  TestClient other(server->port());
  auto start = Clock::now();
  CHECK(other.Get("/metrics").result_int() == 200);
  CHECK(Clock::now() - start < 30s);  // answered, not after the stalled client's timeout
}

TEST_CASE("StalledRequestIsClosedAfterHeaderTimeout") {
  HttpServerLimits limits;
  limits.header_timeout = 1s;
  auto server = StartOrDie(Route, limits);
  TestClient stalled(server->port());
  REQUIRE_FALSE(stalled.WriteRaw("GET /metrics HTTP/1.1\r\nHo"));
  CHECK(stalled.PeerCloses(30s));
  TestClient silent(server->port());  // connected, never sends a byte
  CHECK(silent.PeerCloses(30s));
}

TEST_CASE("IdleKeepAliveWaitsLongerThanTheHeaderTimeout") {
  HttpServerLimits limits;
  limits.header_timeout = 1s;
  limits.keep_alive_timeout = 60s;
  auto server = StartOrDie(Route, limits);
  TestClient client(server->port());
  CHECK(client.Get("/metrics").result_int() == 200);
  std::this_thread::sleep_for(2s);  // idle between requests: the keep-alive timeout applies
  CHECK(client.Get("/metrics").result_int() == 200);
}

TEST_CASE("SlowBodyGetsTheIoTimeoutOnceHeadersAreIn") {
  HttpServerLimits limits;
  limits.header_timeout = 1s;
  limits.io_timeout = 60s;
  auto server = StartOrDie(Route, limits);
  TestClient client(server->port());
  REQUIRE_FALSE(client.WriteRaw("GET /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab"));
  std::this_thread::sleep_for(2s);  // past the header timeout: the io timeout applies
  REQUIRE_FALSE(client.WriteRaw("cd"));
  Response res;
  REQUIRE_FALSE(client.Read(&res));
  CHECK(res.result_int() == 200);
}

TEST_CASE("OneAddressCannotTakeEveryConnection") {
  HttpServerLimits limits;
  limits.max_connections = 8;
  limits.max_connections_per_address = 2;
  limits.reserved_connections = 0;
  auto server = StartOrDie(Route, limits);
  TestClient a(server->port()), b(server->port());
  CHECK(a.Get("/metrics").result_int() == 200);
  CHECK(b.Get("/metrics").result_int() == 200);
  TestClient third(server->port());  // over 127.0.0.1's share, no reserved slot: closed
  CHECK(third.PeerCloses());
  TestClient other(server->port(), "127.0.0.2");
  CHECK(other.Get("/metrics").result_int() == 200);
}

TEST_CASE("HealthProbeIsServedWhileStalledConnectionsHoldEverySlot") {
  HttpServerLimits limits;
  limits.max_connections = 4;
  limits.max_connections_per_address = 2;
  limits.reserved_connections = 4;
  limits.priority_paths = {"/healthz"};
  auto server = StartOrDie(
      [](const HttpRequest& r) -> HttpResponse {
        if (r.target.rfind("/healthz", 0) == 0) return {200, "", "ok\n"};
        return Route(r);
      },
      limits);
  // 130 connections from two addresses, each with half a request line, left hanging.
  std::vector<std::unique_ptr<TestClient>> stalled;
  for (int i = 0; i < 130; ++i) {
    stalled.push_back(
        std::make_unique<TestClient>(server->port(), i % 2 == 0 ? "127.0.0.1" : "127.0.0.3"));
    REQUIRE_FALSE(stalled.back()->WriteRaw("GET /metr"));
  }
  for (const char* source : {"127.0.0.1", "127.0.0.2", "127.0.0.3"}) {
    INFO(source);
    TestClient probe(server->port(), source);
    Response res = probe.Get("/healthz?verbose=1");
    CHECK(res.result_int() == 200);
    CHECK(res.body() == "ok\n");
    CHECK_FALSE(res.keep_alive());
  }
  // Anything else over the limits is refused.
  TestClient scrape(server->port(), "127.0.0.1");
  CHECK(scrape.Get("/metrics").result_int() == 503);
}

TEST_CASE("ConnectionsOverTheCapGet503") {
  HttpServerLimits limits;
  limits.max_connections = 2;
  auto server = StartOrDie(Route, limits);
  auto a = std::make_unique<TestClient>(server->port());
  TestClient b(server->port());
  CHECK(a->Get("/metrics").result_int() == 200);
  CHECK(b.Get("/metrics").result_int() == 200);

  TestClient over(server->port());
  Response res = over.Get("/metrics");
  CHECK(res.result_int() == 503);
  CHECK_FALSE(res.keep_alive());
  CHECK(over.PeerCloses());

  // A freed slot is usable again once the server has seen the close.
  a.reset();
  int status = 0;
  for (auto deadline = Clock::now() + 30s; status != 200 && Clock::now() < deadline;) {
    TestClient next(server->port());
    status = next.Get("/metrics").result_int();
    if (status != 200) std::this_thread::sleep_for(20ms);
  }
  CHECK(status == 200);
}

TEST_CASE("SeveralThreadsServeConcurrentClients") {
  auto server = StartOrDie(Route, {}, /*threads=*/4);
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      TestClient client(server->port());
      for (int i = 0; i < 20; ++i) {
        std::string target = "/echo/" + std::to_string(c) + "/" + std::to_string(i);
        std::optional<Response> res = client.TrySend(http::verb::get, target);
        if (res && res->body() == "GET " + target) ++ok;
      }
    });
  }
  for (auto& t : clients) t.join();
  CHECK(ok == 8 * 20);
}

TEST_CASE("ZeroThreadsIsInvalidArgument") {
  auto server = HttpServer::Start("127.0.0.1:0", Route, 0);
  REQUIRE_FALSE(server.ok());
  CHECK(server.status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
