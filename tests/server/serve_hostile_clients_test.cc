// What a client that does not play by the rules can do to a real `sluice serve`: flood it with
// large requests without a token, send two tokens, hold the metrics port with half-sent requests.
// None of it may take the server's memory past its budget or make /healthz fail.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "sluice/v1/service.grpc.pb.h"
#include "tests/server/http_test_client.h"
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

constexpr char kToken[] = "s3cret-token";

// "token_file: ..." for a Fixture, the file written into keys.
std::string TokenConfig(const TempDir& keys) {
  testing::WriteAll(keys.file("token"), std::string(kToken) + "\n");
  return "token_file: \"" + keys.file("token") + "\"\n";
}

// Peak resident set size of a process (VmHWM), in bytes.
int64_t PeakRssBytes(pid_t pid) {
  const std::string status = testing::ReadAll("/proc/" + std::to_string(pid) + "/status");
  const size_t at = status.find("VmHWM:");
  long kib = -1;
  if (at != std::string::npos) std::sscanf(status.c_str() + at, "VmHWM: %ld", &kib);
  return int64_t{kib} * 1024;
}

// One StreamBatches call with `request` as its raw message, on its own connection, without a
// token; reads the stream to its end. The ByteBuffer's slices are shared, not copied, so many
// calls can send one large request.
grpc::Status RawStreamCall(const std::string& address, const grpc::ByteBuffer& request, int id,
                           const std::string& method = "/sluice.v1.DataService/StreamBatches") {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection per call
  args.SetInt("sluice.test.flood_id", id);
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  // A connect that fails on the client's side (seen under load: connect() itself failing) never
  // reached the server and would say nothing about it: such calls wait for a connection.
  context.set_wait_for_ready(true);
  auto call = stub.PrepareCall(&context, method, &cq);
  void* tag = nullptr;
  bool ok = false;
  call->StartCall(reinterpret_cast<void*>(1));
  cq.Next(&tag, &ok);
  if (ok) {
    call->WriteLast(request, grpc::WriteOptions(), reinterpret_cast<void*>(2));
    cq.Next(&tag, &ok);
  }
  grpc::ByteBuffer response;
  while (ok) {
    call->Read(&response, reinterpret_cast<void*>(3));
    cq.Next(&tag, &ok);
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

// A well-formed StreamRequest of 64 MiB (its job name), as one shared slice.
grpc::ByteBuffer HugeRequest() {
  v1::StreamRequest big = Request();
  big.set_job_name(std::string(size_t{64} << 20, 'j'));
  std::string bytes = big.SerializeAsString();
  big.Clear();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// 16 clients at once each sending HugeRequest() without a token (1 GiB in flight); their statuses.
std::vector<grpc::Status> Flood(const std::string& address) {
  const grpc::ByteBuffer request = HugeRequest();
  constexpr int kClients = 16;
  std::vector<grpc::Status> results(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back(
        [&, i] { results[static_cast<size_t>(i)] = RawStreamCall(address, request, i); });
  }
  for (std::thread& t : clients) t.join();
  return results;
}

// An endless authenticated stream, read on its own thread from before a flood until two epochs
// after it, then cancelled; what it read.
class HonestReader {
 public:
  HonestReader(const std::string& address, const std::string& token)
      : stub_(v1::DataService::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {
    context_.AddMetadata("authorization", "Bearer " + token);
    v1::StreamRequest r = Request();
    r.set_epochs(0);  // forever
    reader_ = stub_->StreamBatches(&context_, r);
    thread_ = std::thread([this] { Run(); });
  }
  // Waits until the stream has started.
  void WaitStarted() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return started_; });
  }
  // Tells it the flood is over, and waits for it to finish.
  void FloodOver() {
    {
      std::lock_guard lock(mu_);
      flood_over_ = true;
    }
    cv_.notify_all();
    thread_.join();
    status_ = reader_->Finish();
  }

  std::map<int64_t, std::vector<int32_t>> labels_by_epoch;  // after FloodOver
  int64_t first_epoch_after_flood = -1;
  bool read_to_the_end = false;  // cancelled by us, not cut by the server
  grpc::Status status_;

 private:
  void Run() {
    v1::Batch b;
    while (reader_->Read(&b)) {
      const int64_t epoch = b.position().epoch();
      auto& labels = labels_by_epoch[epoch];
      labels.insert(labels.end(), b.labels().begin(), b.labels().end());
      std::unique_lock lock(mu_);
      if (!started_) {
        started_ = true;
        cv_.notify_all();
      }
      if (flood_over_ && first_epoch_after_flood < 0) first_epoch_after_flood = epoch + 1;
      if (first_epoch_after_flood >= 0 && epoch > first_epoch_after_flood + 1) {
        read_to_the_end = true;
        context_.TryCancel();
        break;
      }
      // Reads at a trickle while the flood lasts, so the stream stays open through all of it.
      cv_.wait_for(lock, std::chrono::milliseconds(20), [&] { return flood_over_; });
    }
    std::lock_guard lock(mu_);
    started_ = true;
    cv_.notify_all();
  }

  std::unique_ptr<v1::DataService::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::Batch>> reader_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;     // guarded by mu_
  bool flood_over_ = false;  // guarded by mu_
};

TEST_CASE("UnauthenticatedFloodIsRefusedFromItsHeadersWhileAnOpenStreamReadsThroughIt") {
  TempDir keys;
  constexpr int64_t kBudget = int64_t{128} << 20;
  Fixture f(2, 8, TokenConfig(keys) + "memory_budget_bytes: " + std::to_string(kBudget) + "\n");
  ServerProcess server(f.Args());
  REQUIRE(server.running());

  HonestReader honest(server.address(), kToken);
  honest.WaitStarted();
  const std::vector<grpc::Status> results = Flood(server.address());
  honest.FloodOver();

  // Refused before their bodies were read, so gRPC never had to take memory back from anyone.
  for (const grpc::Status& s : results) {
    INFO(s.error_code() << " " << s.error_message());
    CHECK(s.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  }
  INFO("honest stream: " << honest.status_.error_code() << " " << honest.status_.error_message());
  REQUIRE(honest.read_to_the_end);
  for (const auto& [epoch, labels] : honest.labels_by_epoch) {
    if (epoch > honest.first_epoch_after_flood + 1) continue;  // cancelled within it
    INFO("epoch " << epoch);
    CHECK(EachLabelOnce(labels, 16));
  }
  const int64_t peak = PeakRssBytes(server.pid());
  INFO("peak RSS " << (peak >> 20) << " MiB, budget " << (kBudget >> 20) << " MiB");
  CHECK(peak > 0);
  CHECK(peak <= kBudget + kBudget / 10);
}

TEST_CASE("WithATokenEveryServiceRefusesCallsWithoutIt") {
  TempDir keys;
  Fixture f(2, 8, TokenConfig(keys));
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  const grpc::ByteBuffer request = HugeRequest();
  for (const char* method : {"/grpc.health.v1.Health/Check", "/sluice.v1.DataService/GetStats",
                             "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"}) {
    INFO(method);
    const grpc::Status s = RawStreamCall(server.address(), request, 0, method);
    CHECK(s.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  }
}

TEST_CASE("FloodOfLargeRequestsWithoutATokenConfiguredStaysWithinTheBudget") {
  constexpr int64_t kBudget = int64_t{128} << 20;
  Fixture f(2, 8, "memory_budget_bytes: " + std::to_string(kBudget) + "\n");
  ServerProcess server(f.Args());
  REQUIRE(server.running());

  // Read to their end, the requests are over the request limit; gRPC's quota cuts them (and may
  // cut other streams: without a token nothing tells a flood from a trainer) before that.
  for (const grpc::Status& s : Flood(server.address())) {
    INFO(s.error_code() << " " << s.error_message());
    CHECK((s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
           s.error_code() == grpc::StatusCode::UNAVAILABLE));
  }
  const int64_t peak = PeakRssBytes(server.pid());
  INFO("peak RSS " << (peak >> 20) << " MiB, budget " << (kBudget >> 20) << " MiB");
  CHECK(peak > 0);
  CHECK(peak <= kBudget + kBudget / 10);

  auto client = Connect(server.address());
  auto stream = client->Stream(Request());
  REQUIRE(stream.ok());
  Got g = ReadAll(**stream);
  CHECK(g.status.ok());
  CHECK(g.labels.size() == 16);
}

TEST_CASE("LargestLegitimateRequestIsServed") {
  Fixture f(2, 8);
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  v1::StreamRequest r = Request();
  r.set_job_name(std::string(128, 'j'));  // request_policy's longest job name
  r.set_batch_size(8);
  r.set_image_height(32);
  r.set_image_width(40);
  r.set_seed(~uint64_t{0});
  r.set_epochs(1);
  r.mutable_shard()->set_index(0);
  r.mutable_shard()->set_count(1);
  r.set_drop_remainder(false);
  auto client = Connect(server.address());
  auto stream = client->Stream(r);
  REQUIRE(stream.ok());
  Got g = ReadAll(**stream);
  CHECK(g.status.ok());
  CHECK(g.labels.size() == 16);
}

grpc::Status CallWithHeaders(const std::string& address, const std::vector<std::string>& auth) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = v1::DataService::NewStub(channel);
  grpc::ClientContext context;
  for (const std::string& a : auth) context.AddMetadata("authorization", a);
  auto reader = stub->StreamBatches(&context, Request());
  v1::Batch b;
  while (reader->Read(&b)) {
  }
  return reader->Finish();
}

TEST_CASE("TwoAuthorizationHeadersAreRefusedWhicheverComesFirst") {
  TempDir keys;
  Fixture f(2, 8, TokenConfig(keys));
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  const std::string good = std::string("Bearer ") + kToken;
  for (const auto& headers : std::vector<std::vector<std::string>>{
           {good, "Bearer nope"}, {"Bearer nope", good}, {good, good}}) {
    grpc::Status s = CallWithHeaders(server.address(), headers);
    CHECK(s.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK(s.error_message().find("more than one authorization header") != std::string::npos);
  }
  CHECK(CallWithHeaders(server.address(), {good}).ok());
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

using testing::HttpGet;
using testing::MetricsPort;
using testing::RawConnection;

TEST_CASE("HealthzAnswersWhileSlowClientsHoldEveryMetricsConnection") {
  Fixture f(2, 8, "metrics_address: \"127.0.0.1:0\"\n");
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  const int port = MetricsPort(server.output());
  REQUIRE(port > 0);
  // 130 connections that send half a request line and stall: more than every ordinary and
  // reserved slot together, from the address the probes come from and from another.
  std::vector<RawConnection> stalled;
  for (int i = 0; i < 130; ++i) {
    stalled.emplace_back(port, i % 2 == 0 ? "127.0.0.1" : "127.0.0.3");
    REQUIRE(stalled.back().fd() >= 0);
    REQUIRE(stalled.back().Send("GET /metr"));
  }
  // Probes for longer than the header timeout (5 s): the stalled clients' slots expire and they do
  // not get them back, and probes never wait behind them. A fixed number of probes, each paced,
  // so that a slow machine only makes the loop longer.
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 24; ++i) {
    for (const char* source : {"127.0.0.1", "127.0.0.2"}) {
      INFO("probe " << i << " from " << source);
      std::optional<std::string> res = HttpGet(port, "/healthz", source);
      REQUIRE(res);
      CHECK(res->starts_with("HTTP/1.1 200"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  CHECK(std::chrono::steady_clock::now() - start > std::chrono::seconds(5));
}

TEST_CASE("HealthzAnswersWhileClientsFromManyAddressesChurnTheReservedSlots") {
  Fixture f(2, 8, "metrics_address: \"127.0.0.1:0\"\n");
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  const int port = MetricsPort(server.output());
  REQUIRE(port > 0);
  // Every ordinary slot held with half a request line, 16 from each of four addresses.
  std::vector<RawConnection> stalled;
  for (int i = 0; i < 64; ++i) {
    const std::string source = "127.0.1." + std::to_string(i % 4 + 1);
    stalled.emplace_back(port, source.c_str());
    REQUIRE(stalled.back().fd() >= 0);
    REQUIRE(stalled.back().Send("GET /metr"));
  }
  // Two clients open connections from 64 addresses, as fast as they can, each sending half a
  // request line; each keeps its last 100 open. One address's slots are never the most, so only
  // what became of earlier connections tells them from the probes.
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv;
  int opened = 0;  // guarded by mu
  // Stops and joins the churners however the test ends.
  struct Churners {
    std::atomic<bool>* stop;
    std::vector<std::thread> threads;
    ~Churners() {
      *stop = true;
      for (std::thread& t : threads) t.join();
    }
  } churners{&stop, {}};
  for (int t = 0; t < 2; ++t) {
    churners.threads.emplace_back([&, t] {
      std::deque<RawConnection> open;
      for (int i = t; !stop; i += 2) {
        const std::string source = "127.0.2." + std::to_string(i % 64 + 1);
        RawConnection c(port, source.c_str());
        if (c.fd() >= 0 && c.Send("GET /me")) open.push_back(std::move(c));
        if (open.size() > 100) open.pop_front();
        std::lock_guard lock(mu);
        ++opened;
        cv.notify_all();
      }
    });
  }
  {
    std::unique_lock lock(mu);
    // Until a client's reserved connections have ended without asking for /healthz, nothing tells
    // it from a probe (a probe that has not sent its request yet looks the same): the oldest of
    // equals goes first, which may be the probe. Let every churning address strike a few times.
    cv.wait(lock, [&] { return opened >= 4 * 64; });
  }
  // Each probe sends its request 50 ms after connecting, as one across a slow network would,
  // while the churners' connections pass it by.
  for (int i = 0; i < 40; ++i) {
    INFO("probe " << i);
    RawConnection probe(port, "127.0.0.2");
    REQUIRE(probe.fd() >= 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE(probe.Send("GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"));
    std::optional<std::string> res = probe.ReadToClose();
    REQUIRE(res);
    CHECK(res->starts_with("HTTP/1.1 200"));
  }
}

}  // namespace
}  // namespace sluice
