// The C++ client's buffers against a real `sluice serve`: batches taken with Take() and held
// across later ones, the max_held bound, leases that outlive their stream, and image buffers
// from a consumer's allocator.
#include "client/client.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/client/client_test_support.h"

namespace sluice {
namespace {

using testing::Connect;
using testing::Contents;
using testing::CountingAllocator;
using testing::FailingAllocator;
using testing::kBatches;
using testing::kImageBytes;
using testing::NextAll;
using testing::Open;
using testing::Request;
using testing::Served;
using testing::TakeAll;

TEST_CASE("HeldBatchesKeepTheirBytesWhileLaterOnesArriveAndMatchTheNextStream") {
  Served s;
  auto client = Connect(s.server, /*prefetch=*/2, /*max_held=*/4);
  auto next_stream = Open(*client);
  const std::vector<Contents> expected = NextAll(*next_stream);
  REQUIRE(expected.size() == kBatches);
  auto take_stream = Open(*client);
  CHECK(TakeAll(*take_stream, 4) == expected);
}

TEST_CASE("TakeBeyondMaxHeldFailsAtOnceAndWorksAgainAfterARelease") {
  Served s;
  auto client = Connect(s.server, /*prefetch=*/2, /*max_held=*/2);
  auto stream = Open(*client);
  bool end = false;
  ReceivedBatch a, b, c;
  REQUIRE(stream->Take(&a, &end).ok());
  REQUIRE(stream->Take(&b, &end).ok());
  const auto start = std::chrono::steady_clock::now();
  Status refused = stream->Take(&c, &end);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
  CHECK(refused.code() == StatusCode::kFailedPrecondition);
  CHECK(refused.message().find("holding 2 batches") != std::string::npos);
  CHECK(refused.message().find("ClientOptions::max_held") != std::string::npos);

  // Next() still works while max_held are taken: its batch is not one of them.
  ReceivedBatch n;
  REQUIRE(stream->Next(&n, &end).ok());
  CHECK(n.meta.index == 2);
  CHECK(stream->Take(&c, &end).code() == StatusCode::kFailedPrecondition);

  a.lease.Release();
  REQUIRE(stream->Take(&c, &end).ok());
  CHECK_FALSE(end);
  CHECK(c.meta.index == 3);
  CHECK(b.meta.index == 1);
}

TEST_CASE("MaxHeldBelowOneIsRejected") {
  ClientOptions o;
  o.targets = {"127.0.0.1:1"};
  o.max_held = 0;
  auto c = Client::Create(o);
  CHECK(c.status().code() == StatusCode::kInvalidArgument);
  CHECK(c.status().message().find("max_held") != std::string::npos);
}

TEST_CASE("LeaseReleasedAfterTheStreamAndClientAreGoneKeepsItsBytesUntilThen") {
  Served s;
  auto allocator = std::make_shared<CountingAllocator>();
  auto client = Connect(s.server, 2, 4, allocator);
  auto stream = Open(*client);
  bool end = false;
  ReceivedBatch first, second;
  REQUIRE(stream->Take(&first, &end).ok());
  REQUIRE(stream->Take(&second, &end).ok());
  const Contents first_copy(first), second_copy(second);
  stream.reset();
  client.reset();
  CHECK(allocator->live() > 0);
  CHECK(Contents(first) == first_copy);
  first.lease.Release();
  CHECK(allocator->live() > 0);
  CHECK(Contents(second) == second_copy);
  BatchLease last = std::move(second.lease);
  CHECK(second.lease.empty());
  CHECK(allocator->live() > 0);
  last.Release();
  CHECK(allocator->live() == 0);
  CHECK(allocator->bad_frees() == 0);
}

TEST_CASE("CustomAllocatorBacksEveryImageBufferAndGetsThemAllBack") {
  Served s;
  std::vector<Contents> expected;
  {
    auto client = Connect(s.server);
    auto stream = Open(*client);
    expected = NextAll(*stream);
  }
  REQUIRE(expected.size() == kBatches);

  auto allocator = std::make_shared<CountingAllocator>();
  {
    auto client = Connect(s.server, /*prefetch=*/2, /*max_held=*/4, allocator);
    auto next_stream = Open(*client);
    std::vector<Contents> got;
    for (;;) {
      ReceivedBatch b;
      bool end = false;
      REQUIRE(next_stream->Next(&b, &end).ok());
      if (end) break;
      CHECK(allocator->Owns(b.images.data(), b.images.size()));
      got.emplace_back(b);
    }
    CHECK(got == expected);
    // Next() holds one batch at a time: prefetch read ahead plus the one handed out.
    CHECK(allocator->allocations() <= 3);
    next_stream.reset();
    CHECK(allocator->live() == 0);

    auto take_stream = Open(*client);
    CHECK(TakeAll(*take_stream, 4) == expected);
    CHECK(allocator->allocations() <= 3 + 2 + 4);
  }
  CHECK(allocator->live() == 0);
  CHECK(allocator->bad_frees() == 0);
}

TEST_CASE("AllocatorThatFailsEndsTheStreamWithAnErrorNamingTheByteCount") {
  Served s;
  const std::string bytes = std::to_string(kImageBytes) + " bytes";
  SECTION("after two buffers, through Take") {
    // Both buffers stay taken, so the third batch needs a third buffer.
    auto client = Connect(s.server, 2, 4, std::make_shared<FailingAllocator>(2));
    auto stream = Open(*client);
    bool end = false;
    ReceivedBatch a, b, c;
    REQUIRE(stream->Take(&a, &end).ok());
    REQUIRE(stream->Take(&b, &end).ok());
    Status failed = stream->Take(&c, &end);
    CHECK(failed.code() == StatusCode::kResourceExhausted);
    CHECK(failed.message().find(bytes) != std::string::npos);
    CHECK(failed.message().find("no pinned memory left") != std::string::npos);
    CHECK(stream->Next(&c, &end).code() == StatusCode::kResourceExhausted);
    CHECK(Contents(a).images.size() == kImageBytes);
  }
  SECTION("from the first buffer, at Stream()") {
    auto client = Connect(s.server, 2, 4, std::make_shared<FailingAllocator>(0));
    auto stream = client->Stream(Request());
    REQUIRE_FALSE(stream.ok());
    CHECK(stream.status().code() == StatusCode::kResourceExhausted);
    CHECK(stream.status().message().find(bytes) != std::string::npos);
  }
}

}  // namespace
}  // namespace sluice
