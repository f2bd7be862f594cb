#include "server/http_server.h"

#include <algorithm>
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
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
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
// After a response that closes the connection, unread request bytes are drained (for at most this
// long and this many bytes) so that closing does not reset the connection before the client has
// read the response.
constexpr std::chrono::seconds kLingerTimeout{1};
constexpr size_t kMaxLingerBytes = 256 * 1024;
// Pause before accepting again after an accept error such as EMFILE, which would otherwise repeat
// at once and spin.
constexpr std::chrono::milliseconds kAcceptRetryDelay{50};
// Bound on ServerState::strikes.
constexpr size_t kMaxStrikeKeys = 4096;

class Session;

// A connection holding one of the reserved slots.
struct Reserved {
  std::weak_ptr<Session> session;
  std::string address;  // ClientKey
  // Its whole priority request is in and is being answered: its slot is not taken from it.
  bool answering = false;
};

// What connections share with the server. Outlives every Session (see HttpServer::Impl).
struct ServerState {
  HttpServer::Handler handler;
  HttpServerLimits limits;

  std::mutex mu;
  bool stopping = false;                                          // GUARDED_BY(mu)
  uint64_t next_id = 0;                                           // GUARDED_BY(mu)
  std::unordered_map<uint64_t, std::weak_ptr<Session>> sessions;  // GUARDED_BY(mu); all of them
  // Connections in the ordinary slots, all together and per client address.
  size_t serving = 0;                                  // GUARDED_BY(mu)
  std::unordered_map<std::string, size_t> by_address;  // GUARDED_BY(mu); by ClientKey, no zeros
  // Connections in the reserved slots, oldest first (ids grow).
  std::map<uint64_t, Reserved> reserved;  // GUARDED_BY(mu)
  // Per ClientKey, reserved connections that ended without a priority request: what tells many
  // addresses each churning a slot or two from a probe that comes from one of them now and then.
  // Cleared whole at kMaxStrikeKeys keys.
  std::unordered_map<std::string, uint64_t> strikes;  // GUARDED_BY(mu)
};

void Decrement(std::unordered_map<std::string, size_t>& counts, const std::string& key) {
  auto it = counts.find(key);
  if (it != counts.end() && --it->second == 0) counts.erase(it);
}

// What connections are counted per: an IPv4 address (IPv4-mapped IPv6 ones included), or an IPv6
// /64, which one host usually holds whole and can draw any number of addresses from.
std::string ClientKey(const net::ip::address& a) {
  if (a.is_v4()) return a.to_string();
  const net::ip::address_v6 v6 = a.to_v6();
  if (v6.is_v4_mapped()) return net::ip::make_address_v4(net::ip::v4_mapped, v6).to_string();
  net::ip::address_v6::bytes_type bytes = v6.to_bytes();
  std::fill(bytes.begin() + 8, bytes.end(), 0);
  return net::ip::address_v6(bytes).to_string() + "/64";
}

bool IsPriority(const HttpServerLimits& limits, std::string_view target) {
  const std::string_view path = target.substr(0, target.find('?'));
  return std::find(limits.priority_paths.begin(), limits.priority_paths.end(), path) !=
         limits.priority_paths.end();
}

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
  // reserved: the connection holds a reserved slot (see HttpServerLimits): one request, answered
  // only for a priority path.
  Session(tcp::socket socket, ServerState* state, uint64_t id, std::string address, bool reserved)
      : stream_(std::move(socket)),
        state_(state),
        id_(id),
        address_(std::move(address)),
        reserved_(reserved) {}

  ~Session() {
    std::lock_guard lock(state_->mu);
    state_->sessions.erase(id_);
    if (!reserved_) {
      --state_->serving;
      Decrement(state_->by_address, address_);
    } else {
      state_->reserved.erase(id_);  // unless already taken by a newer connection
      if (!answered_) {
        if (state_->strikes.size() >= kMaxStrikeKeys) state_->strikes.clear();
        ++state_->strikes[address_];
      }
    }
  }

  void Start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (self->reserved_) {
        // One deadline for the whole request.
        self->stream_.expires_after(self->limits().reserved_timeout);
        self->NewParser();
        http::async_read(self->stream_, self->buffer_, *self->parser_,
                         beast::bind_front_handler(&Session::OnRead, self));
      } else {
        self->ReadHeader();
      }
    });
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

  void NewParser() {
    parser_.emplace();
    parser_->body_limit(limits().max_body_bytes);
    parser_->header_limit(static_cast<uint32_t>(limits().max_header_bytes));
  }

  // Between keep-alive requests: waits (keep_alive_timeout) for the next request's first byte,
  // unless it came with the last one.
  void AwaitNextRequest() {
    if (buffer_.size() > 0) return ReadHeader();
    stream_.expires_after(limits().keep_alive_timeout);
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              if (ec) return self->Close();
                              self->buffer_.commit(n);
                              self->ReadHeader();
                            });
  }

  void ReadHeader() {
    NewParser();
    stream_.expires_after(limits().header_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&Session::OnHeader, shared_from_this()));
  }

  void OnHeader(beast::error_code ec, size_t bytes) {
    if (ec || parser_->is_done()) return OnRead(ec, bytes);
    stream_.expires_after(limits().io_timeout);
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
    // Answered as HTTP/1.0 or 1.1 whatever version the request line claims.
    unsigned version = req.version() == 10 ? 10 : 11;
    bool keep_alive = req.keep_alive() && !reserved_;
    bool head = req.method() == http::verb::head;
    if (req.method() != http::verb::get && !head) {
      if (reserved_) return Reply(503, "too many connections\n", version, false);
      return Respond({405, "", "method not allowed\n"}, version, keep_alive, false, "GET, HEAD");
    }
    if (reserved_ && !IsPriority(limits(), {req.target().data(), req.target().size()})) {
      return Reply(503, "too many connections\n", version, false);
    }
    if (reserved_) SetAnswering(true);
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
    if (reserved_) SetAnswering(false);
    if (ec) return Close();
    if (!keep_alive) return LingeringClose();
    AwaitNextRequest();
  }

  // A reserved connection's slot cannot be taken from it while it answers a priority request.
  // Only a priority request spares the connection a strike: any other complete request (answered
  // 503, 400, 413 or 431 on a reserved slot) does not.
  void SetAnswering(bool answering) {
    std::lock_guard lock(state_->mu);
    if (answering) answered_ = true;
    auto it = state_->reserved.find(id_);
    if (it != state_->reserved.end()) it->second.answering = answering;
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
  const std::string address_;  // the client's ClientKey
  const bool reserved_;
  bool answered_ = false;  // a reserved connection's priority request was read; GUARDED_BY(mu)
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
    beast::error_code ec;
    const tcp::endpoint peer = socket.remote_endpoint(ec);
    if (ec) return;  // reset before it was admitted
    std::string address = ClientKey(peer.address());
    std::shared_ptr<Session> session, evicted;
    {
      std::lock_guard lock(state.mu);
      if (state.stopping) return;
      const HttpServerLimits& limits = state.limits;
      auto count = state.by_address.find(address);
      const bool ordinary =
          state.serving < limits.max_connections &&
          (count == state.by_address.end() || count->second < limits.max_connections_per_address);
      if (!ordinary) {
        if (limits.reserved_connections == 0) return;
        if (state.reserved.size() >= limits.reserved_connections && !TakeReservedSlot(&evicted)) {
          return;
        }
      }
      const uint64_t id = state.next_id++;
      session = std::make_shared<Session>(std::move(socket), &state, id, address, !ordinary);
      state.sessions.emplace(id, session);
      if (ordinary) {
        ++state.serving;
        ++state.by_address[address];
      } else {
        state.reserved.emplace(id, Reserved{session, address});
      }
    }
    if (evicted) {
      net::any_io_executor ex = evicted->executor();
      net::post(ex, [evicted = std::move(evicted)] { evicted->Close(); });
    }
    session->Start();
  }

  // Frees a reserved slot for a new connection: that of the oldest connection, not answering a
  // priority request, among those of the addresses with the most such connections plus strikes;
  // *evicted gets that connection, to be closed (null if it is already going). False when every
  // reserved connection is answering one. REQUIRES: state.mu held.
  bool TakeReservedSlot(std::shared_ptr<Session>* evicted) {
    std::unordered_map<std::string, uint64_t> score;
    for (const auto& [id, r] : state.reserved) {
      if (r.answering) continue;
      auto [it, added] = score.try_emplace(r.address, 0);
      if (added) {
        auto strikes = state.strikes.find(r.address);
        if (strikes != state.strikes.end()) it->second = strikes->second;
      }
      ++it->second;
    }
    uint64_t most = 0;
    for (const auto& [address, n] : score) most = std::max(most, n);
    auto victim = std::find_if(state.reserved.begin(), state.reserved.end(), [&](const auto& r) {
      return !r.second.answering && score[r.second.address] == most;
    });
    if (victim == state.reserved.end()) return false;
    *evicted = victim->second.session.lock();
    state.reserved.erase(victim);
    return true;
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
  if (limits.max_connections < 1 || limits.max_connections_per_address < 1) {
    return InvalidArgument("HTTP server on " + address +
                           ": max_connections and max_connections_per_address must be at least 1");
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
