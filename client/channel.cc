#include "client/channel.h"

namespace sluice {

Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return Status::OK();
  return Status(static_cast<StatusCode>(static_cast<int>(s.error_code())), s.error_message());
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target, const ClientOptions& o) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // batches are as large as the server allows
  // A private channel per server stream: streams to one server do not share a connection (and
  // its flow-control window), so each gets its own socket.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Large frames and windows: a batch is tens of MB.
  args.SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, 16 * 1024 * 1024 - 1);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 * 1024 * 1024);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (o.tls_root_certs.empty()) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = o.tls_root_certs;
    creds = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(target, creds, args);
}

void AddToken(grpc::ClientContext* context, const std::string& token) {
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
}

}  // namespace sluice
