// A shared-memory segment through which `sluice serve` hands batches to a client on the same
// host: the server copies a batch's images into a free slot and sends only the slot number in
// the Batch message, so the bytes cross neither the socket nor the kernel's two copies, and the
// client reads them where they are.
//
// The layout (header fields, slot offsets, state values) is in shared_segment_layout.h.
// Slot hand-over: a slot is free (the server may fill it) or full (the client's to read until
// its consumer releases the batch). The client sets `attached` once it has mapped the segment.
//
// The segment is a memfd, not a name in /dev/shm: nothing outlives the processes that map it.
// Its size is sealed (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) before it is named, so no one
// can truncate it under the other side's mapping (which would kill that process with SIGBUS).
// The server names it as /proc/<pid>/fd/<fd> (which only processes allowed to inspect the
// server, i.e. of its user, can open) with a random id that is also in the header, and closes
// that descriptor once the client attached or the attach deadline passed: a client that opens
// the path later gets ENOENT or another file, which the seals, header and id checks refuse.
//
// Neither side trusts the other: the client checks the seals, the header, and every slot and
// length it is named (DataLoss otherwise); the server reads only `attached` and the state words
// from the mapping and ends the stream (FailedPrecondition) when a state word holds what the
// protocol never puts there.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "client/wire/buffer_allocator.h"
#include "client/wire/shared_segment_layout.h"
#include "formats/file.h"
#include "formats/status.h"

namespace sluice {

// The initial-metadata key under which a server names a stream's segment.
inline constexpr const char* kSharedSegmentKey = shm_layout::kSegmentKey;

class SharedSegment {
 public:
  static constexpr int kMaxSlots = shm_layout::kMaxSlots;

  // The size of a segment of `slots` slots of at least slot_bytes: a header page and the slots,
  // each rounded up to whole pages.
  static uint64_t BytesFor(int slots, uint64_t slot_bytes);

  // Server: creates a sealed memfd with `slots` slots of at least slot_bytes, its space reserved
  // up front (fallocate: no memory fails here, not with SIGBUS on a later write), named
  // "/proc/<pid>/fd/<fd>#<id>" until Retract(). ResourceExhausted or IOError when it cannot.
  static Result<std::shared_ptr<SharedSegment>> Create(int slots, uint64_t slot_bytes);
  // Client: maps the segment a server named and marks it attached. InvalidArgument when the
  // name is not of that form; NotFound, FailedPrecondition or IOError when it cannot be opened
  // (a server on another host or in another pid namespace, of another user, or a descriptor
  // already retracted); DataLoss when what it names is not that segment (not a sealed memfd,
  // malformed header, another id). `adopter`, when given, Adopt()s the mapping now and
  // Unadopt()s it before unmapping.
  static Result<std::shared_ptr<SharedSegment>> Open(
      const std::string& name, std::shared_ptr<BufferAllocator> adopter = nullptr);
  ~SharedSegment();  // unmaps; the creator also retracts the name
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  const std::string& name() const { return name_; }
  int slots() const { return slots_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t total_bytes() const { return total_bytes_; }

  // Server side. FindFree and MarkFull are called by one thread at a time.
  bool attached() const;  // whatever the client wrote there: nonzero is attached
  void Retract();         // closes the descriptor the name points at; idempotent, thread-safe
  // A free slot, or -1 when all are full. FailedPrecondition naming the slot and value when the
  // client broke the protocol: a state word that is neither free nor full, or one turned full
  // that the server never filled.
  Result<int> FindFree();
  uint8_t* SlotData(int slot) const;  // REQUIRES: 0 <= slot < slots()
  void MarkFull(int slot);            // after the slot's bytes are written

  // Client side. The bytes of `slot` as the server announced them: DataLoss when the slot or
  // length is out of bounds or the slot is not full.
  Result<std::span<const uint8_t>> Full(uint32_t slot, uint64_t length) const;
  void Free(int slot);  // REQUIRES: Full(slot, ...) succeeded

 private:
  struct Header;
  SharedSegment(std::string name, UniqueFd fd, void* base, uint64_t total_bytes, int slots,
                uint64_t slot_bytes, std::shared_ptr<BufferAllocator> adopter = nullptr);
  Header* header() const;

  const std::string name_;
  void* const base_;
  const uint64_t total_bytes_;
  const std::shared_ptr<BufferAllocator> adopter_;
  const int slots_;  // as created or validated at Open: never re-read from the shared header
  const uint64_t slot_bytes_;
  std::mutex fd_mu_;
  UniqueFd fd_;  // the creator's, until Retract(); guarded by fd_mu_
  // Server: the slots it marked full and has not seen freed since, one bit each (its own
  // record, not the client's word).
  std::atomic<uint64_t> full_{0};
};

// True when `peer` (grpc::ServerContext::peer()) is a unix: socket or a loopback address: a
// client that can share memory with this server, if it can also open its /proc entries.
bool IsSameHostPeer(const std::string& peer);
// The same rule from the client's side, for a target it connects to ("127.0.0.1:50051",
// "localhost:50051", "[::1]:50051", "unix:PATH", and their ipv4:/ipv6: forms).
bool IsSameHostTarget(const std::string& target);

}  // namespace sluice
