// Where a stream's batch image buffers come from: page-aligned heap memory by default, or memory
// the consumer allocates (page-locked memory from cudaHostAlloc, so a batch goes host→device
// with no staging copy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "formats/status.h"

namespace sluice {

// Thread-safe: a stream allocates on its reader thread and frees on whichever thread drops the
// last reference to a buffer (a consumer releasing a lease, possibly after the stream is gone).
class BufferAllocator {
 public:
  virtual ~BufferAllocator() = default;
  // REQUIRES: bytes > 0. ResourceExhausted (or the allocator's own status) when it cannot.
  virtual Result<void*> Allocate(size_t bytes) = 0;
  // REQUIRES: p came from Allocate(bytes) with the same bytes.
  virtual void Free(void* p, size_t bytes) noexcept = 0;
  // Memory the client did not allocate but hands batches out of (a same-host stream's
  // shared-memory segment): told after it is mapped and before it is unmapped, so an allocator
  // of page-locked memory can page-lock it too (cudaHostRegister). Default: nothing.
  virtual void Adopt(void* base, size_t bytes) noexcept {
    (void)base;
    (void)bytes;
  }
  virtual void Unadopt(void* base, size_t bytes) noexcept {
    (void)base;
    (void)bytes;
  }
};

// Page-aligned (4096-byte) heap memory; the default.
std::shared_ptr<BufferAllocator> HeapAllocator();

// A move-only buffer from an allocator, given back to it on destruction; it keeps the allocator
// alive. A moved-from buffer is empty: destroy it or assign to it.
class HostBuffer {
 public:
  explicit HostBuffer(std::shared_ptr<BufferAllocator> allocator = HeapAllocator());
  ~HostBuffer();
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t capacity() const { return capacity_; }

  // Makes capacity() at least `bytes`. Growing frees the old memory first: the contents are NOT
  // kept. The allocator's status, naming the byte count, when it fails (the buffer is then empty).
  Status Reserve(size_t bytes);

 private:
  void Free() noexcept;

  std::shared_ptr<BufferAllocator> allocator_;
  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace sluice
