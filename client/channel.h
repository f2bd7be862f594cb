// The gRPC plumbing every call of the client shares (internal to client/): channels, the bearer
// token, status conversion.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "client/client.h"
#include "formats/status.h"

namespace sluice {

// A private channel to one server, sized for batches of tens of MB, with TLS when the options
// hold root certificates.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target, const ClientOptions& o);

// The bearer token, when there is one, on every call.
void AddToken(grpc::ClientContext* context, const std::string& token);

// grpc::Status → Status, code and message unchanged.
Status FromGrpc(const grpc::Status& s);

}  // namespace sluice
