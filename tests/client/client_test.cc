// The C++ client's buffers against a real `sluice serve`: batches taken with Take() and held
// across later ones, the max_held bound, leases that outlive their stream, image buffers from a
// consumer's allocator, and same-host delivery through shared memory.
#include "client/client.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sluice/v1/service.grpc.pb.h"
#include "tests/pipeline/pipeline_test_data.h"
#include "tests/server/serve_test_support.h"

namespace sluice {
namespace {

using testing::ServerProcess;
using testing::TempDir;

// 160 records served as dataset "train": 20 batches of 8 images of 32 × 40.
constexpr int kBatches = 20;
constexpr size_t kImageBytes = size_t{8} * 32 * 40 * 3;

struct Served {
  TempDir dir;
  testing::TestShards shards = testing::WriteTestShards(dir, 4, 40);
  ServerProcess server{{"--files", dir.file("shard-*.tfrecord"), "--port", "0"}};
};

v1::StreamRequest Request() {
  v1::StreamRequest r;
  r.set_dataset("train");
  r.set_batch_size(8);
  r.set_image_height(32);
  r.set_image_width(40);
  r.set_seed(7);
  r.set_epochs(1);
  return r;
}

// With an allocator, the batches come inline (shared-memory images bypass the allocator).
std::unique_ptr<Client> Connect(const ServerProcess& server, int prefetch = 2, int max_held = 4,
                                std::shared_ptr<BufferAllocator> allocator = nullptr,
                                bool shared_memory = true) {
  REQUIRE(server.running());
  ClientOptions o;
  o.targets = {server.address()};
  o.prefetch = prefetch;
  o.max_held = max_held;
  o.shared_memory = shared_memory && allocator == nullptr;
  o.allocator = std::move(allocator);
  o.reconnect_deadline = std::chrono::milliseconds(3000);
  auto c = Client::Create(o);
  REQUIRE(c.ok());
  return std::move(*c);
}

std::unique_ptr<BatchStream> Open(Client& client) {
  auto s = client.Stream(Request());
  REQUIRE(s.ok());
  return std::move(*s);
}

// What a received batch holds, kept after its buffers go back.
struct Contents {
  int64_t epoch = 0, index = 0;
  std::vector<int32_t> labels;
  std::string images;

  explicit Contents(const ReceivedBatch& b)
      : epoch(b.meta.epoch),
        index(b.meta.index),
        labels(b.labels.begin(), b.labels.end()),
        images(reinterpret_cast<const char*>(b.images.data()), b.images.size()) {}
  bool operator==(const Contents&) const = default;
};

// Every batch through Next().
std::vector<Contents> NextAll(BatchStream& stream) {
  std::vector<Contents> out;
  for (;;) {
    ReceivedBatch b;
    bool end = false;
    REQUIRE(stream.Next(&b, &end).ok());
    if (end) return out;
    CHECK(b.lease.empty());
    out.emplace_back(b);
  }
}

// Every batch through Take(), holding up to `hold` at once and checking, as each is released,
// that its bytes are still what they were when it was taken.
std::vector<Contents> TakeAll(BatchStream& stream, size_t hold) {
  std::vector<Contents> out;
  std::deque<ReceivedBatch> held;
  auto release_oldest = [&] {
    const ReceivedBatch& oldest = held.front();
    CHECK(Contents(oldest) == out[out.size() - held.size()]);
    held.pop_front();
  };
  for (;;) {
    if (held.size() == hold) {
      // Give the reader time to fill the other buffers while all these are held.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      release_oldest();
    }
    ReceivedBatch b;
    bool end = false;
    REQUIRE(stream.Take(&b, &end).ok());
    if (end) break;
    REQUIRE_FALSE(b.lease.empty());
    out.emplace_back(b);
    held.push_back(std::move(b));
  }
  while (!held.empty()) release_oldest();
  return out;
}

// Heap memory, counting what it hands out and gets back.
class CountingAllocator : public BufferAllocator {
 public:
  Result<void*> Allocate(size_t bytes) override {
    ASSIGN_OR_RETURN(void* p, heap_->Allocate(bytes));
    std::lock_guard<std::mutex> lock(mu_);
    ++allocations_;
    live_[p] = bytes;
    return p;
  }
  void Free(void* p, size_t bytes) noexcept override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = live_.find(p);
      if (it == live_.end() || it->second != bytes) {
        ++bad_frees_;
        return;
      }
      live_.erase(it);
    }
    heap_->Free(p, bytes);
  }
  void Adopt(void* base, size_t bytes) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    adopted_[base] = bytes;
    ++adoptions_;
  }
  void Unadopt(void* base, size_t bytes) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = adopted_.find(base);
    if (it == adopted_.end() || it->second != bytes) {
      ++bad_frees_;
      return;
    }
    adopted_.erase(it);
  }
  int adoptions() {
    std::lock_guard<std::mutex> lock(mu_);
    return adoptions_;
  }
  size_t adopted() {
    std::lock_guard<std::mutex> lock(mu_);
    return adopted_.size();
  }
  // Whether [p, p + bytes) lies in memory adopted and not yet unadopted.
  bool InAdopted(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [base, size] : adopted_) {
      const auto* start = static_cast<const uint8_t*>(base);
      const auto* q = static_cast<const uint8_t*>(p);
      if (q >= start && q + bytes <= start + size) return true;
    }
    return false;
  }

  int allocations() {
    std::lock_guard<std::mutex> lock(mu_);
    return allocations_;
  }
  size_t live() {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.size();
  }
  // Frees of memory it did not hand out, or with another size (Catch2 cannot check off its thread).
  int bad_frees() {
    std::lock_guard<std::mutex> lock(mu_);
    return bad_frees_;
  }
  // Whether [p, p + bytes) lies in one buffer this allocator handed out and has not got back.
  bool Owns(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.upper_bound(const_cast<void*>(p));
    if (it == live_.begin()) return false;
    --it;
    const auto* start = static_cast<const uint8_t*>(it->first);
    return static_cast<const uint8_t*>(p) + bytes <= start + it->second;
  }

 private:
  const std::shared_ptr<BufferAllocator> heap_ = HeapAllocator();
  std::mutex mu_;
  int allocations_ = 0;           // guarded by mu_
  int bad_frees_ = 0;             // guarded by mu_
  std::map<void*, size_t> live_;  // guarded by mu_
  std::map<void*, size_t> adopted_;  // guarded by mu_
  int adoptions_ = 0;                // guarded by mu_
};

// Hands out `successes` buffers from the heap, then refuses.
class FailingAllocator : public BufferAllocator {
 public:
  explicit FailingAllocator(int successes) : left_(successes) {}
  Result<void*> Allocate(size_t bytes) override {
    if (left_.fetch_sub(1) <= 0) return ResourceExhausted("no pinned memory left");
    return heap_->Allocate(bytes);
  }
  void Free(void* p, size_t bytes) noexcept override { heap_->Free(p, bytes); }

 private:
  const std::shared_ptr<BufferAllocator> heap_ = HeapAllocator();
  std::atomic<int> left_;
};

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

// The names in /dev/shm of segments `pid` created.
std::vector<std::string> SegmentsOf(pid_t pid) {
  std::vector<std::string> out;
  const std::string prefix = "sluice-" + std::to_string(pid) + "-";
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  return out;
}

TEST_CASE("SameHostStreamGoesThroughSharedMemoryWithTheSameBytesAndLeavesNoSegment") {
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
    // Attached: the server has already unlinked the name; the mappings stay.
    CHECK(SegmentsOf(s.server.pid()).empty());
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
  CHECK(SegmentsOf(s.server.pid()).empty());  // unlinked when the wait ended
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

TEST_CASE("ServerStartUpRemovesSegmentsOfServersThatAreGone") {
  // A pid that existed and is gone: a child that has exited and been reaped.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  waitpid(child, nullptr, 0);
  const std::string stale = "/dev/shm/sluice-" + std::to_string(child) + "-0-0123456789abcdef";
  testing::WriteAll(stale, "left by a server killed before its client attached");
  REQUIRE(std::filesystem::exists(stale));
  Served s;
  REQUIRE(s.server.running());
  CHECK_FALSE(std::filesystem::exists(stale));
}

}  // namespace
}  // namespace sluice
