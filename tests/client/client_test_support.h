// Helpers shared by the C++ client tests: a real `sluice serve` on test shards, a client and
// stream on it, batch contents to compare, counting and failing allocators, shared-memory segments.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "client/client.h"
#include "client/wire/shared_segment_layout.h"
#include "tests/pipeline/pipeline_test_data.h"
#include "tests/server/serve_test_support.h"

namespace sluice::testing {

// 160 records served as dataset "train": 20 batches of 8 images of 32 × 40.
inline constexpr int kBatches = 20;
inline constexpr size_t kImageBytes = size_t{8} * 32 * 40 * 3;

struct Served {
  TempDir dir;
  testing::TestShards shards = testing::WriteTestShards(dir, 4, 40);
  ServerProcess server{{"--files", dir.file("shard-*.tfrecord"), "--port", "0"}};
};

inline v1::StreamRequest Request() {
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
inline std::unique_ptr<Client> Connect(const ServerProcess& server, int prefetch = 2,
                                       int max_held = 4,
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

inline std::unique_ptr<BatchStream> Open(Client& client) {
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
inline std::vector<Contents> NextAll(BatchStream& stream) {
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
inline std::vector<Contents> TakeAll(BatchStream& stream, size_t hold) {
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

// The descriptors of process `pid` that hold a shared-memory segment (their /proc links point
// at "/memfd:sluice-segment (deleted)"): a server holds one only while it waits for a client to
// attach.
inline std::vector<std::string> SegmentFdsOf(pid_t pid) {
  std::vector<std::string> out;
  const std::string prefix = std::string("/memfd:") + shm_layout::kMemfdName + " ";
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", error)) {
    const std::string target = std::filesystem::read_symlink(entry.path(), error).string();
    if (!error && target.rfind(prefix, 0) == 0) out.push_back(entry.path().string());
  }
  return out;
}

}  // namespace sluice::testing
