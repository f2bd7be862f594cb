// The bearer-token check, and gRPC server credentials that apply it to a call's headers before its
// request body is read: a call without the token is refused while the transport has buffered at
// most one flow-control window (64 KiB) of its body, whatever size the body claims.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/status.h"

namespace sluice {

// OK when `token` is empty (no token configured) or `authorization` holds exactly one value, and
// that value is "Bearer <token>" (the scheme in any case, RFC 7235); else UNAUTHENTICATED saying
// which. The comparison's time depends only on the token's length, not on what was sent.
Status CheckBearerToken(const std::vector<std::string_view>& authorization, std::string_view token);

// A TLS certificate chain and its private key, PEM-encoded.
struct TlsPem {
  std::string cert;
  std::string key;
};

// Server credentials (TLS when `tls` is given, else plaintext) whose every call, on every service
// (health and reflection included), must pass CheckBearerToken against `token` before gRPC reads
// its message. With an empty token every call passes. InvalidArgument when gRPC refuses the
// certificate or key.
Result<std::shared_ptr<grpc::ServerCredentials>> TokenCheckedCredentials(
    std::string token, const std::optional<TlsPem>& tls);

}  // namespace sluice
