// The bearer-token check, and gRPC server credentials that apply it to a call's headers before its
// request body is read: a call without the token is refused while the transport has buffered at
// most one flow-control window (64 KiB) of its body, whatever size the body claims.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/status.h"

namespace sluice {

// OK when `token` is empty (no token configured) or `authorization` holds exactly one value, and
// that value is "Bearer <token>"; else UNAUTHENTICATED saying which. Compares in constant time.
Status CheckBearerToken(const std::vector<std::string_view>& authorization, std::string_view token);

// Server credentials (TLS when cert_pem is set, else plaintext) whose every call, on every
// service (health and reflection included), must pass CheckBearerToken against `token` before
// gRPC reads its message. With an empty token every call passes.
std::shared_ptr<grpc::ServerCredentials> TokenCheckedCredentials(std::string token,
                                                                 const std::string& cert_pem,
                                                                 const std::string& key_pem);

}  // namespace sluice
