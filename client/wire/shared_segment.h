// A shared-memory segment through which `sluice serve` hands batches to a client on the same
// host: the server copies a batch's images into a free slot and sends only the slot number in
// the Batch message, so the bytes cross neither the socket nor the kernel's two copies, and the
// client reads them where they are.
//
// The layout (header fields, slot offsets, state values) is in shared_segment_layout.h.
// Slot hand-over: a slot is free (the server may fill it) or full (the client's to read until
// its consumer releases the batch). The client writes the stream's attach key into `attach` once
// it has mapped the segment, and clears it when it unmaps it.
//
// The segment is a memfd, not a name in /dev/shm: nothing outlives the processes that map it.
// Create sizes it and seals its size (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) first, then
// checks that the seals and size are exactly its own (another process of the server's user can
// open the memfd through /proc from its creation on, and could have resized or resealed it in
// between) and only then reserves its pages and maps it: no one can truncate it under the
// server's mapping (which would kill the server with SIGBUS).
// The server names it as /proc/<pid>/fd/<fd> (which only processes allowed to inspect the
// server, i.e. of its user, can open) with a random id that is also in the header, and closes
// that descriptor once the client attached or the attach deadline passed: a client that opens
// the path later gets ENOENT or another file, which the seals, header and id checks refuse.
// Any process that can open the segment can read and write it; only the client it was named to
// also gets the attach key (in the call's metadata), so only that client can make the server
// send batches through it. What other such processes can still do is scribble over the state
// words and slots of the streams they find, which ends or spoils those streams, never the server.
//
// Neither side trusts the other: the client checks the seals, the file system, the size against
// what it asked for, the header, and every slot and length it is named (DataLoss otherwise); the
// server reads only `attach` and the state words from the mapping and ends the stream
// (FailedPrecondition) when a state word holds what the protocol never puts there.
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

// The initial-metadata keys under which a server names a stream's segment and its attach key.
inline constexpr const char* kSharedSegmentKey = shm_layout::kSegmentKey;
inline constexpr const char* kSharedAttachKey = shm_layout::kAttachKeyKey;

class SharedSegment {
 public:
  static constexpr int kMaxSlots = shm_layout::kMaxSlots;

  // What a client asked for: the segment must have exactly `slots` slots of at most
  // max_slot_bytes (rounded up to pages) each.
  struct Expected {
    int slots = 0;
    uint64_t max_slot_bytes = shm_layout::kMaxSlotBytes;
  };
  // The most bytes a slot needs for a request's batch size and image size (height x width x 3
  // values of the largest dtype, float32: the request's transform set may choose any), or
  // kMaxSlotBytes when it leaves either to the server's defaults (zero) or asks for more.
  static uint64_t MaxSlotBytesFor(int batch_size, int image_height, int image_width);

  // The size of a segment of `slots` slots of at least slot_bytes: a header page and the slots,
  // each rounded up to whole pages.
  static uint64_t BytesFor(int slots, uint64_t slot_bytes);

  // Server: creates a sealed memfd with `slots` slots of at least slot_bytes, its space reserved
  // up front (fallocate: no memory fails here, not with SIGBUS on a later write), named
  // "/proc/<pid>/fd/<fd>#<id>" until Retract(), with a fresh attach_key(). ResourceExhausted or
  // IOError when it cannot; FailedPrecondition when another process resized or resealed the
  // memfd before it was sealed.
  static Result<std::shared_ptr<SharedSegment>> Create(int slots, uint64_t slot_bytes);
  // Client: maps the segment a server named and writes attach_key (as the server sent it) into
  // it. InvalidArgument when the name or key is not of its form; NotFound, FailedPrecondition
  // or IOError when it cannot be opened (a server on another host or in another pid namespace,
  // of another user, or a descriptor already retracted); DataLoss, naming the check, when what
  // it names is not that segment or not what `expected` allows (not a sealed memfd on tmpfs of
  // this user, too large, a header field out of bounds, another id). `adopter`, when given,
  // Adopt()s the mapping now and Unadopt()s it before unmapping.
  static Result<std::shared_ptr<SharedSegment>> Open(
      const std::string& name, const std::string& attach_key, const Expected& expected,
      std::shared_ptr<BufferAllocator> adopter = nullptr);
  // Unmaps; the creator also retracts the name, the opener clears the attach key first (it is
  // done with every slot: nothing refers to the segment any more).
  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  const std::string& name() const { return name_; }
  int slots() const { return slots_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t total_bytes() const { return total_bytes_; }

  // Server side. FindFree, MarkFull, Unfill and Drained are called by one thread at a time.
  const std::string& attach_key() const { return attach_key_; }  // hex; the creator's only
  bool attached() const;  // whether `attach` holds this segment's attach key now
  void Retract();         // closes the descriptor the name points at; idempotent, thread-safe
  // A free slot, or -1 when all are full. FailedPrecondition naming the slot and value when the
  // client broke the protocol: a state word that is neither free nor full, or one turned full
  // that the server never filled.
  Result<int> FindFree();
  uint8_t* SlotData(int slot) const;  // REQUIRES: 0 <= slot < slots()
  void MarkFull(int slot);            // after the slot's bytes are written
  // Takes back a slot marked full whose batch never reached the client (its write failed).
  void Unfill(int slot);
  // After the stream ended: whether the client is done with every slot, i.e. freed each slot the
  // server filled, or cleared the attach key (it unmapped the segment). A client that does
  // neither keeps it false for as long as it likes.
  bool Drained();
  // Frees the segment's pages (madvise MADV_REMOVE over the whole mapping): they are charged to
  // the server, and a client's mapping would otherwise keep them. Whoever maps it then reads
  // zeros. REQUIRES: no batch of it is in use (Drained(), or never attached).
  void Discard();

  // Client side. The bytes of `slot` as the server announced them: DataLoss when the slot or
  // length is out of bounds or the slot is not full.
  Result<std::span<const uint8_t>> Full(uint32_t slot, uint64_t length) const;
  void Free(int slot);  // REQUIRES: Full(slot, ...) succeeded

 private:
  struct Header;
  SharedSegment(std::string name, UniqueFd fd, void* base, uint64_t total_bytes, int slots,
                uint64_t slot_bytes, std::string attach_key, bool creator,
                std::shared_ptr<BufferAllocator> adopter = nullptr);
  Header* header() const;

  const std::string name_;
  void* const base_;
  const uint64_t total_bytes_;
  const std::shared_ptr<BufferAllocator> adopter_;
  const int slots_;  // as created or validated at Open: never re-read from the shared header
  const uint64_t slot_bytes_;
  // The attach key as 2 * kAttachKeyBytes hex digits (the creator's), and its bytes as the two
  // words `attach` holds once the client wrote it (both sides).
  const std::string attach_key_;
  uint64_t key_words_[2] = {};
  const bool creator_;
  std::mutex fd_mu_;
  UniqueFd fd_;  // the creator's, until Retract(); guarded by fd_mu_
  // Server: the slots it marked full and has not seen freed since, one bit each (its own
  // record, not the client's word).
  std::atomic<uint64_t> full_{0};
};

// `bytes` as lowercase hex digits, two per byte (how ids and attach keys are spelled).
std::string ToHex(std::span<const uint8_t> bytes);

// True when `peer` (grpc::ServerContext::peer()) is a unix: socket or a loopback address: a
// client that can share memory with this server, if it can also open its /proc entries.
bool IsSameHostPeer(const std::string& peer);
// The same rule from the client's side, for a target it connects to ("127.0.0.1:50051",
// "localhost:50051", "[::1]:50051", "unix:PATH", and their ipv4:/ipv6: forms).
bool IsSameHostTarget(const std::string& target);

}  // namespace sluice
