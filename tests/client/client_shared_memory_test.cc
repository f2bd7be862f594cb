// Same-host delivery through shared memory from a real `sluice serve`: the same bytes as inline
// batches, held slots, the fallback to ordinary batches, allocators adopting the segment, and
// no descriptor of a segment kept by the server past the attach.
#include "client/client.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include "sluice/v1/service.grpc.pb.h"
#include "tests/client/client_test_support.h"

namespace sluice {
namespace {

using testing::Connect;
using testing::Contents;
using testing::CountingAllocator;
using testing::kBatches;
using testing::kImageBytes;
using testing::NextAll;
using testing::Open;
using testing::Request;
using testing::SegmentFdsOf;
using testing::Served;
using testing::ServerProcess;
using testing::TakeAll;
using testing::TempDir;

TEST_CASE("SameHostStreamGoesThroughSharedMemoryWithTheSameBytesAndLeavesNoDescriptor") {
  Served s;
  std::vector<Contents> inline_batches, shared_batches;
  {
    auto client = Connect(s.server, 2, 4, nullptr, /*shared_memory=*/false);
    auto stream = Open(*client);
    inline_batches = NextAll(*stream);
    CHECK(stream->shared_memory_batches() == 0);
  }
  {
    auto client = Connect(s.server);
    auto stream = Open(*client);
    ReceivedBatch first;
    bool end = false;
    REQUIRE(stream->Next(&first, &end).ok());
    // Attached: the server has already closed the descriptor that named it; the mappings stay.
    CHECK(SegmentFdsOf(s.server.pid()).empty());
    Result<v1::Stats> stats = client->GetStats();
    REQUIRE(stats.ok());
    CHECK(stats->shared_memory_streams() == 1);
    // prefetch 2 + max_held 4 + 1 slots of one batch, and the header page.
    CHECK(stats->shared_memory_bytes() == 4096 + 7 * ((kImageBytes + 4095) / 4096 * 4096));
    shared_batches.emplace_back(first);
    for (const Contents& c : NextAll(*stream)) shared_batches.push_back(c);
    CHECK(stream->shared_memory_batches() == kBatches);
  }
  REQUIRE(inline_batches.size() == kBatches);
  CHECK(shared_batches == inline_batches);
  // Stream and batches gone: the client unmapped the segment (clearing its attach key), so the
  // server punched its pages out and released its reservation.
  auto client = Connect(s.server, 2, 4, nullptr, /*shared_memory=*/false);
  int64_t left = -1;
  for (int i = 0; i < 1000 && left != 0; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    Result<v1::Stats> stats = client->GetStats();
    REQUIRE(stats.ok());
    left = stats->shared_memory_bytes();
  }
  CHECK(left == 0);
}

TEST_CASE("HeldSharedMemoryBatchesAreNotOverwrittenWhileTheServerWaitsForASlot") {
  Served s;
  std::vector<Contents> expected;
  {
    auto client = Connect(s.server, 2, 4, nullptr, /*shared_memory=*/false);
    auto stream = Open(*client);
    expected = NextAll(*stream);
  }
  // prefetch 1 + max_held 2 + 1 = 4 slots: with two held and one read ahead, the server has one
  // slot left and then must wait for the consumer.
  auto client = Connect(s.server, /*prefetch=*/1, /*max_held=*/2);
  auto stream = Open(*client);
  ReceivedBatch a, b;
  bool end = false;
  REQUIRE(stream->Take(&a, &end).ok());
  REQUIRE(stream->Take(&b, &end).ok());
  const Contents a_copy(a), b_copy(b);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(Contents(a) == a_copy);
  CHECK(Contents(b) == b_copy);
  CHECK(a_copy == expected[0]);
  CHECK(b_copy == expected[1]);
  a.lease.Release();
  b.lease.Release();
  std::vector<Contents> rest = TakeAll(*stream, 2);
  REQUIRE(rest.size() == kBatches - 2);
  CHECK(std::equal(rest.begin(), rest.end(), expected.begin() + 2));
  CHECK(stream->shared_memory_batches() == kBatches);
}

TEST_CASE("ClientThatNeverMapsTheSegmentGetsOrdinaryBatchesAfterTwoSeconds") {
  Served s;
  // A plain gRPC client asking for shared memory and ignoring the segment it is offered.
  auto channel = grpc::CreateChannel(s.server.address(), grpc::InsecureChannelCredentials());
  auto stub = v1::DataService::NewStub(channel);
  grpc::ClientContext context;
  v1::StreamRequest request = Request();
  request.set_shared_memory(true);
  request.set_shared_memory_slots(4);
  const auto start = std::chrono::steady_clock::now();
  auto reader = stub->StreamBatches(&context, request);
  v1::Batch batch;
  REQUIRE(reader->Read(&batch));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(waited >= 1.5);
  CHECK_FALSE(batch.has_shared_memory());
  CHECK(batch.images().size() == kImageBytes);
  const auto& metadata = context.GetServerInitialMetadata();
  auto it = metadata.find("sluice-shm-segment");
  REQUIRE(it != metadata.end());
  CHECK(SegmentFdsOf(s.server.pid()).empty());  // closed when the wait ended
  {
    // ... and its memory given back: no segment is held for a stream that does not use one.
    grpc::ClientContext stats_context;
    v1::Stats stats;
    REQUIRE(stub->GetStats(&stats_context, v1::GetStatsRequest(), &stats).ok());
    CHECK(stats.shared_memory_bytes() == 0);
    CHECK(stats.shared_memory_streams() == 0);
  }
  int batches = 1;
  while (reader->Read(&batch)) ++batches;
  CHECK(reader->Finish().ok());
  CHECK(batches == kBatches);
}

TEST_CASE("StreamsPastTheServersSharedMemoryLimitGetOrdinaryBatches") {
  TempDir dir;
  testing::WriteTestShards(dir, 4, 40);
  testing::WriteAll(dir.file("sluice.textproto"),
                    "listen: \"127.0.0.1:0\"\nmax_shared_memory_bytes: 100000\n"
                    "datasets { name: \"train\" pipeline { files: \"" +
                        dir.file("shard-*.tfrecord") + "\" } }\n");
  ServerProcess server({"--config", dir.file("sluice.textproto")});
  auto client = Connect(server);  // 7 slots of 30 KiB: more than 100,000 bytes
  auto stream = Open(*client);
  const std::vector<Contents> got = NextAll(*stream);
  CHECK(got.size() == kBatches);
  CHECK(stream->shared_memory_batches() == 0);
}

TEST_CASE("AllocatorAdoptsTheSharedSegmentItsBatchesAreReadFrom") {
  // What lets a CUDA consumer page-lock the segment (PinnedAllocator: cudaHostRegister).
  Served s;
  auto allocator = std::make_shared<CountingAllocator>();
  ClientOptions o;
  o.targets = {s.server.address()};
  o.allocator = allocator;
  auto client = Client::Create(o);
  REQUIRE(client.ok());
  {
    auto stream = Open(**client);
    int batches = 0;
    for (;;) {
      ReceivedBatch b;
      bool end = false;
      REQUIRE(stream->Next(&b, &end).ok());
      if (end) break;
      CHECK(allocator->InAdopted(b.images.data(), b.images.size()));
      ++batches;
    }
    CHECK(batches == kBatches);
    CHECK(stream->shared_memory_batches() == kBatches);
    CHECK(allocator->adoptions() == 1);
    CHECK(allocator->allocations() == 0);  // no image buffer was needed
  }
  CHECK(allocator->adopted() == 0);  // unadopted before the segment was unmapped
  CHECK(allocator->bad_frees() == 0);
}

}  // namespace
}  // namespace sluice
