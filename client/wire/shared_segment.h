// A POSIX shared-memory segment through which `sluice serve` hands batches to a client on the
// same host: the server copies a batch's images into a free slot and sends only the slot number
// in the Batch message, so the bytes cross neither the socket nor the kernel's two copies, and
// the client reads them where they are.
//
// The layout (header fields, slot offsets, state values) is in shared_segment_layout.h.
// Slot hand-over: a slot is free (the server may fill it) or full (the client's to read until
// its consumer releases the batch). The client sets `attached` once it has mapped the segment;
// the server then unlinks the name (the mappings stay), so nothing is left in /dev/shm after a
// crash of either side past that point. Segments of servers killed before it are removed by the
// next server's RemoveStaleSegments.
//
// The segment is created 0600: only processes of the server's user can map it. A client checks
// every slot, length and size it is given against the mapping (DataLoss otherwise).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "client/wire/buffer_allocator.h"
#include "client/wire/shared_segment_layout.h"
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

  // Server: creates "/sluice-<pid>-<start time>-<n>-<random>" with `slots` slots of at least
  // slot_bytes, its space reserved up front (posix_fallocate: a full /dev/shm fails here, not
  // with SIGBUS on a later write). ResourceExhausted or IOError naming the segment when it
  // cannot.
  static Result<std::shared_ptr<SharedSegment>> Create(int slots, uint64_t slot_bytes);
  // Client: maps the segment a server named and marks it attached. DataLoss when it is not a
  // well-formed segment; NotFound, FailedPrecondition (permissions) or IOError when it cannot
  // be opened — a server on another host or in another /dev/shm, or another user. `adopter`,
  // when given, Adopt()s the mapping now and Unadopt()s it before unmapping.
  static Result<std::shared_ptr<SharedSegment>> Open(
      const std::string& name, std::shared_ptr<BufferAllocator> adopter = nullptr);
  ~SharedSegment();  // unmaps; the creator also unlinks the name if it is still there
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  const std::string& name() const { return name_; }
  int slots() const { return slots_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t total_bytes() const { return total_bytes_; }

  // Server side.
  bool attached() const;
  void Unlink();                    // idempotent
  int FindFree() const;             // a free slot, or -1
  uint8_t* SlotData(int slot) const;
  void MarkFull(int slot);          // after the slot's bytes are written

  // Client side. The bytes of `slot` as the server announced them: DataLoss when the slot or
  // length is out of bounds or the slot is not full.
  Result<std::span<const uint8_t>> Full(uint32_t slot, uint64_t length) const;
  void Free(int slot);

 private:
  struct Header;
  SharedSegment(std::string name, void* base, uint64_t total_bytes, int slots, uint64_t slot_bytes,
                bool owner, std::shared_ptr<BufferAllocator> adopter = nullptr);
  Header* header() const;

  const std::string name_;
  void* const base_;
  const uint64_t total_bytes_;
  const bool owner_;
  const std::shared_ptr<BufferAllocator> adopter_;
  const int slots_;            // as validated at Open: never re-read from the shared header
  const uint64_t slot_bytes_;
  std::atomic<bool> linked_;
};

// Removes /dev/shm/sluice-<pid>-<start>-* segments whose creating process no longer runs (servers
// killed before their client attached): no process of that pid, or one that started at another
// time. Processes in another pid namespace sharing this /dev/shm look gone too: give such
// servers separate /dev/shm mounts. Returns how many it removed.
int RemoveStaleSegments();

// True when `peer` (grpc::ServerContext::peer()) is a unix: socket or a loopback address: a
// client that can share memory with this server, if it also shares /dev/shm.
bool IsSameHostPeer(const std::string& peer);
// The same rule from the client's side, for a target it connects to ("127.0.0.1:50051",
// "localhost:50051", "[::1]:50051", "unix:PATH", and their ipv4:/ipv6: forms).
bool IsSameHostTarget(const std::string& target);

}  // namespace sluice
