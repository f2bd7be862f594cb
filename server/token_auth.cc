#include "server/token_auth.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>

namespace sluice {
namespace {

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
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
  constexpr std::string_view kBearer = "Bearer ";
  const std::string_view value = authorization.front();
  if (!value.starts_with(kBearer) || !ConstantTimeEquals(value.substr(kBearer.size()), token)) {
    return Unauthenticated("the bearer token is not the one this server accepts");
  }
  return Status::OK();
}

std::shared_ptr<grpc::ServerCredentials> TokenCheckedCredentials(std::string token,
                                                                 const std::string& cert_pem,
                                                                 const std::string& key_pem) {
  grpc_server_credentials* core = nullptr;
  if (cert_pem.empty()) {
    core = grpc_insecure_server_credentials_create();
  } else {
    grpc_ssl_pem_key_cert_pair pair{key_pem.c_str(), cert_pem.c_str()};
    core = grpc_ssl_server_credentials_create_ex(nullptr, &pair, 1,
                                                 GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE, nullptr);
  }
  return std::make_shared<TokenCheckedServerCredentials>(core, std::move(token));
}

}  // namespace sluice
