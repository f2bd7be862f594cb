// The layout of a shared-memory segment (SharedSegment), described once. The C++ side
// (shared_segment.cc) checks its header struct against this table at compile time; the Python
// client (client/python/sluice/_shm.py) keeps its own copy of the numbers, which
// tests/python/test_shm_layout.py checks against this table (printed by a helper built from it)
// and against a segment the C++ code wrote.
//
// A segment is a sealed memfd: a header of kHeaderBytes, then `slots` slots of slot_bytes each (a
// multiple of kHeaderBytes): slot s starts at kHeaderBytes + s * slot_bytes. Integers are
// little-endian (shared memory is only used on x86-64). The header's fields are in kHeaderFields.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::shm_layout {

// The first bytes of every segment; the "003" is the layout's version (002: memfd named by
// /proc path, with an id; 003: the client proves it was named the segment with an attach key).
inline constexpr char kMagic[8] = {'S', 'L', 'S', 'H', 'M', '0', '0', '3'};
// The header's size, which is also the page size slot_bytes is a multiple of.
inline constexpr uint64_t kHeaderBytes = 4096;
inline constexpr int kMaxSlots = 64;
// The segment's random id: in the header and in the name the server sends.
inline constexpr size_t kIdBytes = 16;
// The stream's random attach key: sent only in the call's initial metadata (kAttachKeyKey), never
// written into the segment by the server; the client writes it into `attach` once it mapped it.
inline constexpr size_t kAttachKeyBytes = 16;

// A header field: its byte offset and size.
struct Field {
  const char* name;
  size_t offset;
  size_t size;
};

// In order. magic: kMagic. slots: u32, 1..kMaxSlots. zero: u32 0. slot_bytes: u64. total_bytes:
// u64, the segment's size. id: kIdBytes random bytes, as named. attach: kAttachKeyBytes (two
// atomic u64), zero until the client that was sent the attach key writes it there once it has
// mapped the segment; zero again when that client unmaps it. state: kMaxSlots atomic u32, one per
// slot, kSlotFree or kSlotFull. The server writes everything but attach before the segment is
// named and then only state words; the client writes only attach and state words; each side
// treats what the other may write as untrusted.
inline constexpr Field kHeaderFields[] = {
    {"magic", 0, 8},
    {"slots", 8, 4},
    {"zero", 12, 4},
    {"slot_bytes", 16, 8},
    {"total_bytes", 24, 8},
    {"id", 32, kIdBytes},
    {"attach", 48, kAttachKeyBytes},
    {"state", 64, 4 * kMaxSlots},
};

// A slot's state word. Each has one writer at a time: the server fills a slot it loads as free
// (acquire), stores kSlotFull (release) and then names the slot in a Batch; the client reads it
// while the consumer holds the batch, then stores kSlotFree (release).
inline constexpr uint32_t kSlotFree = 0;
inline constexpr uint32_t kSlotFull = 1;

// The initial-metadata key under which a server names a stream's segment, as
// "/proc/<server pid>/fd/<fd>#<id as 2 * kIdBytes lowercase hex digits>".
inline constexpr char kSegmentKey[] = "sluice-shm-segment";
// The initial-metadata key under which it sends the stream's attach key, as 2 * kAttachKeyBytes
// lowercase hex digits.
inline constexpr char kAttachKeyKey[] = "sluice-shm-attach";
// The name memfd_create is given: the target of the /proc link is "/memfd:" kMemfdName
// " (deleted)".
inline constexpr char kMemfdName[] = "sluice-segment";
// The seals a segment must carry before the client maps it: its size can never change (no
// SIGBUS on either side) and no one can add seals (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL).
inline constexpr unsigned kRequiredSeals = 0x0002 | 0x0004 | 0x0001;
// The only other seal the server accepts on its own segment: F_SEAL_EXEC, which MFD_NOEXEC_SEAL
// sets (any other, e.g. F_SEAL_WRITE, was added by someone else before it sealed it).
inline constexpr unsigned kHarmlessSeals = 0x0020;
// The largest slot a client maps when its request does not say how large batches are (the
// server's default batch size or image size): 1 GiB, a batch of 1024 images of 576x576.
inline constexpr uint64_t kMaxSlotBytes = uint64_t{1} << 30;

}  // namespace sluice::shm_layout
