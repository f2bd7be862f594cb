#include "server/token_auth.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>

namespace sluice {
namespace {

// True when `sent` equals `token`, reading every byte of the token whatever was sent, so that
// neither where a guess goes wrong nor the token's length shows in the time taken.
bool ConstantTimeEquals(std::string_view sent, std::string_view token) {
  size_t diff = sent.size() ^ token.size();
  for (size_t i = 0; i < token.size(); ++i) {
    const char c = i < sent.size() ? sent[i] : '\0';
    diff |= static_cast<unsigned char>(c ^ token[i]);
  }
  return diff == 0;
}

// The authorization scheme, compared without regard to case (RFC 7235 section 2.1).
bool IsBearer(std::string_view value) {
  constexpr std::string_view kBearer = "bearer ";
  if (value.size() < kBearer.size()) return false;
  for (size_t i = 0; i < kBearer.size(); ++i) {
    const char c = value[i];
    if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) != kBearer[i]) return false;
  }
  return true;
}

std::string_view View(const grpc_slice& s) {
  return {reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(s)), GRPC_SLICE_LENGTH(s)};
}

// grpc_auth_metadata_processor.process: runs on the transport's thread as a call's headers
// arrive, before the call is matched to a method and its message read. `state` is the token.
void ProcessHeaders(void* state, grpc_auth_context* /*context*/, const grpc_metadata* md,
                    size_t num_md, grpc_process_auth_metadata_done_cb done, void* user_data) {
  std::vector<std::string_view> authorization;
  for (size_t i = 0; i < num_md; ++i) {
    if (View(md[i].key) == "authorization") authorization.push_back(View(md[i].value));
  }
  const Status s = CheckBearerToken(authorization, *static_cast<const std::string*>(state));
  done(user_data, nullptr, 0, nullptr, 0, s.ok() ? GRPC_STATUS_OK : GRPC_STATUS_UNAUTHENTICATED,
       s.ok() ? nullptr : s.message().c_str());
}

// grpc::ServerCredentials over core credentials that carry ProcessHeaders: the C++ API offers an
// AuthMetadataProcessor only on TLS credentials, and runs it after a thread hop.
class TokenCheckedServerCredentials final : public grpc::ServerCredentials {
 public:
  TokenCheckedServerCredentials(grpc_server_credentials* core, std::string token) : core_(core) {
    if (token.empty()) return;
    grpc_server_credentials_set_auth_metadata_processor(
        core_, {ProcessHeaders, [](void* t) { delete static_cast<std::string*>(t); },
                new std::string(std::move(token))});
  }
  ~TokenCheckedServerCredentials() override { grpc_server_credentials_release(core_); }
  TokenCheckedServerCredentials(const TokenCheckedServerCredentials&) = delete;
  TokenCheckedServerCredentials& operator=(const TokenCheckedServerCredentials&) = delete;

  // The processor is fixed at construction.
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {}

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), core_);
  }

  grpc_server_credentials* core_;  // owned
};

}  // namespace

Status CheckBearerToken(const std::vector<std::string_view>& authorization,
                        std::string_view token) {
  if (token.empty()) return Status::OK();
  if (authorization.empty()) {
    return Unauthenticated("this server needs a token: send \"authorization: Bearer <token>\"");
  }
  // Which of several the server would read is not something a client, or a proxy adding its own
  // header, should have to guess: refused rather than the first taken.
  if (authorization.size() > 1) {
    return Unauthenticated(
        "the call has more than one authorization header; send exactly one "
        "\"authorization: Bearer <token>\"");
  }
  const std::string_view value = authorization.front();
  if (!IsBearer(value) || !ConstantTimeEquals(value.substr(7), token)) {
    return Unauthenticated("the bearer token is not the one this server accepts");
  }
  return Status::OK();
}

Result<std::shared_ptr<grpc::ServerCredentials>> TokenCheckedCredentials(
    std::string token, const std::optional<TlsPem>& tls) {
  grpc_server_credentials* core = nullptr;
  if (!tls) {
    core = grpc_insecure_server_credentials_create();
  } else {
    grpc_ssl_pem_key_cert_pair pair{tls->key.c_str(), tls->cert.c_str()};
    core = grpc_ssl_server_credentials_create_ex(nullptr, &pair, 1,
                                                 GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE, nullptr);
    if (core == nullptr) {
      return InvalidArgument(
          "gRPC refused the TLS certificate or key (tls.cert_file, tls.key_file)");
    }
  }
  return std::shared_ptr<grpc::ServerCredentials>(
      std::make_shared<TokenCheckedServerCredentials>(core, std::move(token)));
}

}  // namespace sluice
