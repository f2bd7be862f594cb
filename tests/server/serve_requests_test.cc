// What `sluice serve` accepts: bad requests answered with a status that says what to change,
// tokens and TLS.
#include <catch2/catch.hpp>

#include <string>

#include <grpcpp/grpcpp.h>

#include "client/client.h"
#include "sluice/v1/service.grpc.pb.h"
#include "tests/server/serve_fixture.h"

namespace sluice {
namespace {

using serve_testing::Connect;
using serve_testing::EachLabelOnce;
using serve_testing::Fixture;
using serve_testing::Got;
using serve_testing::ReadAll;
using serve_testing::Request;
using testing::ServerProcess;
using testing::TempDir;
using testing::WriteTestShards;

grpc::Status CallStream(const std::string& address, const v1::StreamRequest& r,
                        const std::string& token = "") {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = v1::DataService::NewStub(channel);
  grpc::ClientContext context;
  if (!token.empty()) context.AddMetadata("authorization", token);
  auto reader = stub->StreamBatches(&context, r);
  v1::Batch b;
  while (reader->Read(&b)) {
  }
  return reader->Finish();
}

TEST_CASE("BadRequestsGetAStatusThatSaysWhatToChange") {
  Fixture f(2, 8, "max_streams: 3\nmemory_budget_bytes: 134217728\n");
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  struct Case {
    std::string name;
    v1::StreamRequest request;
    grpc::StatusCode code;
    std::string says;
  };
  std::vector<Case> cases;
  cases.push_back({"unknown dataset", Request("nope"), grpc::StatusCode::NOT_FOUND, "train"});
  cases.push_back(
      {"a path", Request("/etc/passwd"), grpc::StatusCode::INVALID_ARGUMENT, "not paths"});
  cases.push_back({"a glob", Request("train*"), grpc::StatusCode::INVALID_ARGUMENT, "not paths"});
  auto big = Request();
  big.set_batch_size(5000);
  cases.push_back({"batch too large", big, grpc::StatusCode::INVALID_ARGUMENT, "batch_size"});
  auto tiny = Request();
  tiny.set_image_height(4);
  cases.push_back({"image too small", tiny, grpc::StatusCode::INVALID_ARGUMENT, "image_height"});
  for (const Case& c : cases) {
    INFO(c.name);
    grpc::Status s = CallStream(server.address(), c.request);
    CHECK(s.error_code() == c.code);
    CHECK(s.error_message().find(c.says) != std::string::npos);
  }
  SECTION("over the memory budget") {
    // Each job reserves 64 MiB of the server's 128 MiB: the third is refused.
    auto client = Connect(server.address());
    auto forever = Request();
    forever.set_epochs(0);
    auto s1 = client->Stream(forever);
    REQUIRE(s1.ok());
    auto s2 = client->Stream(forever);
    REQUIRE(s2.ok());
    grpc::Status s = CallStream(server.address(), forever);
    CHECK(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK(s.error_message().find("memory_budget_bytes") != std::string::npos);
  }
  SECTION("over the stream limit") {
    auto client = Connect(server.address());
    auto r = Request();
    r.set_epochs(0);
    r.set_job_name("j");
    std::vector<std::unique_ptr<BatchStream>> open;
    for (int i = 0; i < 3; ++i) {
      auto s = client->Stream(r);
      REQUIRE(s.ok());
      open.push_back(std::move(*s));
    }
    grpc::Status s = CallStream(server.address(), r);
    CHECK(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK(s.error_message().find("max_streams") != std::string::npos);
  }
}

TEST_CASE("TokenIsRequiredWhenConfigured") {
  TempDir keys;
  testing::WriteAll(keys.file("token"), "s3cret-token\n");
  Fixture f(2, 8, "token_file: \"" + keys.file("token") + "\"\n");
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  grpc::Status none = CallStream(server.address(), Request());
  CHECK(none.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  grpc::Status wrong = CallStream(server.address(), Request(), "Bearer nope");
  CHECK(wrong.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  auto client = Connect(server.address(), "s3cret-token");
  auto s = client->Stream(Request());
  REQUIRE(s.ok());
  Got g = ReadAll(**s);
  CHECK(g.status.ok());
  CHECK(g.labels.size() == 16);
}

TEST_CASE("TlsServerRefusesPlaintextAndServesTrustingClients") {
  TempDir keys;
  const bool with_token = GENERATE(false, true);
  INFO("token: " << with_token);
  testing::WriteAll(keys.file("token"), "s3cret-token\n");
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost "
                          "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " +
                          keys.file("key.pem") + " -out " + keys.file("cert.pem") +
                          " >/dev/null 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  Fixture f(2, 8, "tls { cert_file: \"" + keys.file("cert.pem") + "\" key_file: \"" +
                      keys.file("key.pem") + "\" }\n" +
                      (with_token ? "token_file: \"" + keys.file("token") + "\"\n" : ""));
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  grpc::Status plain = CallStream(server.address(), Request());
  CHECK(plain.error_code() == grpc::StatusCode::UNAVAILABLE);
  ClientOptions o;
  o.targets = {server.address()};
  o.tls_root_certs = testing::ReadAll(keys.file("cert.pem"));
  if (with_token) {
    // The token is checked from the headers on TLS connections too.
    auto tokenless = Client::Create(o);
    REQUIRE(tokenless.ok());
    auto refused = (*tokenless)->Stream(Request());
    Status st = refused.ok() ? ReadAll(**refused).status : refused.status();
    CHECK(st.code() == StatusCode::kUnauthenticated);
    o.token = "s3cret-token";
  }
  auto client = Client::Create(o);
  REQUIRE(client.ok());
  auto s = (*client)->Stream(Request());
  REQUIRE(s.ok());
  Got g = ReadAll(**s);
  CHECK(g.status.ok());
  CHECK(g.labels.size() == 16);
}

}  // namespace
}  // namespace sluice
