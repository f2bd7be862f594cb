#include "server/http_server.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

constexpr char kDefaultContentType[] = "text/plain; charset=utf-8";
// A connection over the cap only gets this long to send the request it is answered 503 for.
constexpr std::chrono::seconds kRejectTimeout{1};
// After a response that closes the connection, unread request bytes are drained (for at most this
// long and this many bytes) so that closing does not reset the connection before the client has
// read the response.
constexpr std::chrono::seconds kLingerTimeout{1};
constexpr size_t kMaxLingerBytes = 256 * 1024;
// Pause before accepting again after an accept error such as EMFILE, which would otherwise repeat
// at once and spin.
constexpr std::chrono::milliseconds kAcceptRetryDelay{50};

class Session;

// What connections share with the server. Outlives every Session (see HttpServer::Impl).
struct ServerState {
  HttpServer::Handler handler;
  HttpServerLimits limits;

  std::mutex mu;
  bool stopping = false;  // GUARDED_BY(mu)
  uint64_t next_id = 0;   // GUARDED_BY(mu)
  size_t serving = 0;     // GUARDED_BY(mu); sessions not being rejected
  std::unordered_map<uint64_t, std::weak_ptr<Session>> sessions;  // GUARDED_BY(mu)
};

Status ParseAddress(const std::string& address, std::string* host, std::string* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgument("address " + address + " has no port (want host:port)");
  }
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  } else if (host->find_first_of("[]:") != std::string::npos) {
    return InvalidArgument("address " + address +
                           ": an IPv6 host needs brackets, as in [::1]:9100");
  }
  if (host->empty()) {
    return InvalidArgument("address " + address +
                           " has no host (0.0.0.0 or [::] listens on all interfaces)");
  }
  bool digits = !port->empty() && port->size() <= 5 &&
                port->find_first_not_of("0123456789") == std::string::npos;
  if (!digits || std::stoi(*port) > 65535) {
    return InvalidArgument("address " + address + " has no valid port (0 to 65535)");
  }
  return Status::OK();
}

// One connection: reads a request, answers it, repeats while keep-alive. All its work runs on its
// own strand; the server reaches it only through Close(), posted to that strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, ServerState* state, uint64_t id, bool reject)
      : stream_(std::move(socket)), state_(state), id_(id), reject_(reject) {}

  ~Session() {
    std::lock_guard lock(state_->mu);
    state_->sessions.erase(id_);
    if (!reject_) --state_->serving;
  }

  void Start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->Read(); });
  }

  // REQUIRES: on this session's strand.
  void Close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  net::any_io_executor executor() { return stream_.get_executor(); }

 private:
  const HttpServerLimits& limits() const { return state_->limits; }

  void Read() {
    parser_.emplace();
    parser_->body_limit(limits().max_body_bytes);
    parser_->header_limit(static_cast<uint32_t>(limits().max_header_bytes));
    stream_.expires_after(reject_ ? std::chrono::milliseconds(kRejectTimeout)
                                  : limits().io_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::OnRead, shared_from_this()));
  }

  void OnRead(beast::error_code ec, size_t /*bytes*/) {
    if (ec == http::error::body_limit) return Reply(413, "request body too large\n", 11, false);
    if (ec == http::error::header_limit) return Reply(431, "request header too large\n", 11, false);
    if (ec == http::error::end_of_stream || ec == http::error::partial_message) return Close();
    if (ec && ec.category() == http::make_error_code(http::error::bad_method).category()) {
      return Reply(400, "malformed request\n", 11, false);
    }
    if (ec) return Close();  // timeout, reset, or closed by Stop()

    const auto& req = parser_->get();
    unsigned version = req.version();
    bool keep_alive = req.keep_alive();
    bool head = req.method() == http::verb::head;
    if (reject_) return Reply(503, "too many connections\n", version, false);
    if (req.method() != http::verb::get && !head) {
      return Respond({405, "", "method not allowed\n"}, version, keep_alive, false, "GET, HEAD");
    }
    HttpResponse res;
    try {
      res =
          state_->handler(HttpRequest{std::string(req.method_string()), std::string(req.target())});
    } catch (...) {
      res = {500, "", "internal server error\n"};
    }
    Respond(std::move(res), version, keep_alive, head, {});
  }

  void Reply(int status, std::string body, unsigned version, bool keep_alive) {
    Respond({status, "", std::move(body)}, version, keep_alive, false, {});
  }

  void Respond(HttpResponse r, unsigned version, bool keep_alive, bool head,
               beast::string_view allow) {
    if (r.status < 200 || r.status > 599) r = {500, "", "internal server error\n"};
    res_ = {};
    res_.version(version);
    res_.result(static_cast<unsigned>(r.status));
    res_.set(http::field::server, "sluice");
    res_.set(http::field::content_type,
             r.content_type.empty() ? kDefaultContentType : r.content_type);
    if (!allow.empty()) res_.set(http::field::allow, allow);
    res_.content_length(r.body.size());
    if (!head) res_.body() = std::move(r.body);
    res_.keep_alive(keep_alive);
    stream_.expires_after(limits().io_timeout);
    http::async_write(stream_, res_,
                      beast::bind_front_handler(&Session::OnWrite, shared_from_this(), keep_alive));
  }

  void OnWrite(bool keep_alive, beast::error_code ec, size_t /*bytes*/) {
    res_ = {};
    if (ec) return Close();
    if (!keep_alive) return LingeringClose();
    Read();
  }

  void LingeringClose() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return Close();
    buffer_.consume(buffer_.size());
    stream_.expires_after(kLingerTimeout);
    Drain(0);
  }

  void Drain(size_t drained) {
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this(), drained](beast::error_code ec, size_t n) {
                              if (ec || drained + n > kMaxLingerBytes) return self->Close();
                              self->Drain(drained + n);
                            });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;  // the one write in flight
  ServerState* const state_;
  const uint64_t id_;
  const bool reject_;  // over the cap: answer 503 and close
};

std::string EndpointString(const tcp::endpoint& ep) {
  std::string ip = ep.address().to_string();
  if (ep.address().is_v6()) ip = "[" + ip + "]";
  return ip + ":" + std::to_string(ep.port());
}

}  // namespace

struct HttpServer::Impl {
  Impl(Handler handler, const HttpServerLimits& limits, int threads) : ioc(threads) {
    state.handler = std::move(handler);
    state.limits = limits;
  }

  void Accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (!acceptor.is_open()) return;  // closed by Stop()
      if (ec) {
        retry_timer.expires_after(kAcceptRetryDelay);
        retry_timer.async_wait([this](beast::error_code wait_ec) {
          if (!wait_ec && acceptor.is_open()) Accept();
        });
        return;
      }
      Admit(std::move(socket));
      Accept();
    });
  }

  // Runs on the acceptor's strand. A socket that is not admitted is closed by its destructor.
  void Admit(tcp::socket socket) {
    std::shared_ptr<Session> session;
    {
      std::lock_guard lock(state.mu);
      if (state.stopping) return;
      size_t max = state.limits.max_connections;
      bool reject = state.serving >= max;
      if (reject && state.sessions.size() - state.serving >= max) return;
      if (!reject) ++state.serving;
      uint64_t id = state.next_id++;
      session = std::make_shared<Session>(std::move(socket), &state, id, reject);
      state.sessions.emplace(id, session);
    }
    session->Start();
  }

  // Declared first so that it outlives the sessions that ioc's handlers own.
  ServerState state;
  net::io_context ioc;
  tcp::acceptor acceptor{net::make_strand(ioc)};
  net::steady_timer retry_timer{acceptor.get_executor()};  // on the acceptor's strand
  int port = 0;

  std::mutex stop_mu;                // serializes Stop()
  bool stopped = false;              // GUARDED_BY(stop_mu)
  std::vector<std::thread> threads;  // GUARDED_BY(stop_mu) once started
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

int HttpServer::port() const { return impl_->port; }

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address, Handler handler,
                                                      int threads, const HttpServerLimits& limits) {
  if (threads < 1) {
    return InvalidArgument("HTTP server on " + address + ": threads must be at least 1");
  }
  if (limits.max_connections < 1) {
    return InvalidArgument("HTTP server on " + address + ": max_connections must be at least 1");
  }
  std::string host, port;
  RETURN_IF_ERROR(ParseAddress(address, &host, &port));

  auto impl = std::make_unique<Impl>(std::move(handler), limits, threads);
  tcp::resolver resolver(impl->ioc);
  beast::error_code ec;
  auto endpoints =
      resolver.resolve(host, port, tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec) {
    return Status(StatusCode::kUnavailable, "cannot listen on " + address + " (resolving " + host +
                                                ": " + ec.message() + ")");
  }
  tcp::acceptor& acceptor = impl->acceptor;
  std::string error = "no address";
  for (const auto& entry : endpoints) {
    const tcp::endpoint ep = entry.endpoint();
    if (!acceptor.open(ep.protocol(), ec) &&
        !acceptor.set_option(net::socket_base::reuse_address(true), ec) && !acceptor.bind(ep, ec) &&
        !acceptor.listen(net::socket_base::max_listen_connections, ec)) {
      break;
    }
    std::string where = EndpointString(ep);
    error = (where == address ? "" : where + ": ") + ec.message();
    beast::error_code ignored;
    acceptor.close(ignored);
  }
  if (!acceptor.is_open()) {
    return Status(StatusCode::kUnavailable, "cannot listen on " + address + " (" + error + ")");
  }
  impl->port = acceptor.local_endpoint().port();

  Impl* raw = impl.get();
  net::post(acceptor.get_executor(), [raw] { raw->Accept(); });
  for (int i = 0; i < threads; ++i) raw->threads.emplace_back([raw] { raw->ioc.run(); });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

void HttpServer::Stop() {
  std::lock_guard stop_lock(impl_->stop_mu);
  if (impl_->stopped) return;
  impl_->stopped = true;

  std::vector<std::shared_ptr<Session>> open;
  {
    std::lock_guard lock(impl_->state.mu);
    impl_->state.stopping = true;
    for (auto& [id, weak] : impl_->state.sessions) {
      if (auto session = weak.lock()) open.push_back(std::move(session));
    }
  }
  Impl* raw = impl_.get();
  net::post(raw->acceptor.get_executor(), [raw] {
    beast::error_code ignored;
    raw->acceptor.close(ignored);
    raw->retry_timer.cancel();
  });
  for (auto& session : open) {
    net::any_io_executor ex = session->executor();
    net::post(ex, [session = std::move(session)] { session->Close(); });
  }
  open.clear();
  // The io_context runs out of work once the acceptor and every connection are closed.
  for (std::thread& t : impl_->threads) t.join();
}

}  // namespace sluice
