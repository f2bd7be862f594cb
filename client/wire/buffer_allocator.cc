#include "client/wire/buffer_allocator.h"

#include <cstdlib>
#include <string>
#include <utility>

namespace sluice {
namespace {

// A page, so a heap buffer can also be page-locked in place (cudaHostRegister).
constexpr size_t kAlignment = 4096;

class Heap : public BufferAllocator {
 public:
  Result<void*> Allocate(size_t bytes) override {
    // aligned_alloc wants the size a multiple of the alignment.
    void* p = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
    if (p == nullptr) return ResourceExhausted("out of memory");
    return p;
  }
  void Free(void* p, size_t /*bytes*/) noexcept override { std::free(p); }
};

}  // namespace

std::shared_ptr<BufferAllocator> HeapAllocator() {
  static const std::shared_ptr<BufferAllocator> heap = std::make_shared<Heap>();
  return heap;
}

HostBuffer::HostBuffer(std::shared_ptr<BufferAllocator> allocator)
    : allocator_(std::move(allocator)) {}

HostBuffer::~HostBuffer() { Free(); }

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : allocator_(std::move(other.allocator_)),
      data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    Free();
    allocator_ = std::move(other.allocator_);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

Status HostBuffer::Reserve(size_t bytes) {
  if (bytes <= capacity_) return Status::OK();
  Free();
  Result<void*> p = allocator_->Allocate(bytes);
  if (!p.ok()) return p.status().WithContext("allocating " + std::to_string(bytes) + " bytes");
  data_ = static_cast<uint8_t*>(*p);
  capacity_ = bytes;
  return Status::OK();
}

void HostBuffer::Free() noexcept {
  if (data_ != nullptr) allocator_->Free(data_, capacity_);
  data_ = nullptr;
  capacity_ = 0;
}

}  // namespace sluice
