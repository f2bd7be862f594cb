// The shared-memory protocol with a hostile peer on either side, on real sealed memfds.
//
// A hostile server (mode byte even): the segment the client is named is either a real one whose
// header the input then overwrites, or a memfd the input makes itself (its size, bytes, seals and
// the id it is named with), and the client asks for some number of slots of some size. The
// client's Open either refuses it or yields the slots asked for, a geometry that fits the file
// and no larger than asked, and only when it is sealed against resizing (so the server can no
// longer shrink it: the fuzzer tries); every (slot, length) the input announces is then refused
// by Full() or is a span that lies in the mapping and is read to its end.
//
// A hostile client (mode byte odd): the input interleaves the server's FindFree, SlotData and
// MarkFull with the client's writes of any value to any header word, honest frees, holes punched
// into the file and attempts to truncate or reseal it. The server's view must never leave its
// own geometry, FindFree must report a broken protocol exactly when a state word holds what the
// protocol never puts there (checked against a model), `attached` must hold exactly when the
// attach field holds the key, and nothing may fault.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "client/wire/shared_segment.h"
#include "client/wire/shared_segment_layout.h"
#include "formats/file.h"
#include "tests/fuzz/fuzz_check.h"

namespace sluice {
namespace {

constexpr uint64_t kPage = shm_layout::kHeaderBytes;

// MFD_NOEXEC_SEAL where the headers know it (vm.memfd_noexec=2 refuses memfds without it).
unsigned NoexecSeal() {
#ifdef MFD_NOEXEC_SEAL
  return MFD_NOEXEC_SEAL;
#else
  return 0;
#endif
}

// Reads the input front to back; zeros once it runs out.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return at_ >= size_; }
  uint8_t Byte() { return at_ < size_ ? data_[at_++] : 0; }
  uint32_t U32() {
    return Byte() | Byte() << 8 | Byte() << 16 | static_cast<uint32_t>(Byte()) << 24;
  }
  uint64_t U64() { return U32() | uint64_t{U32()} << 32; }
  void Bytes(uint8_t* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = Byte();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

size_t StateOffset(int slot) {
  return shm_layout::kHeaderFields[7].offset + 4 * static_cast<size_t>(slot);
}
size_t AttachOffset() { return shm_layout::kHeaderFields[6].offset; }

std::string PathOf(const std::string& name) { return name.substr(0, name.find('#')); }

// The client's side of whatever the input made: Open's verdict, then the announced slots.
void ClientReads(Input& in, const std::string& name, const std::string& key, int server_fd) {
  SharedSegment::Expected expected;
  expected.slots = 1 + in.Byte() % 8;
  expected.max_slot_bytes = 1 + in.U32() % (4 * kPage);
  Result<std::shared_ptr<SharedSegment>> opened = SharedSegment::Open(name, key, expected);
  if (!opened.ok()) return;
  const std::shared_ptr<SharedSegment>& client = *opened;
  FUZZ_CHECK(client->slots() == expected.slots, "%d slots, %d asked for", client->slots(),
             expected.slots);
  FUZZ_CHECK(
      client->total_bytes() <= SharedSegment::BytesFor(expected.slots, expected.max_slot_bytes),
      "%llu bytes, more than asked for", static_cast<unsigned long long>(client->total_bytes()));
  // Accepted only when sealed: the size the client mapped can no longer change.
  const int seals = fcntl(server_fd, F_GET_SEALS);
  FUZZ_CHECK(seals >= 0 && (static_cast<unsigned>(seals) & shm_layout::kRequiredSeals) ==
                               shm_layout::kRequiredSeals,
             "opened a segment with seals %d", seals);
  struct stat st {};
  FUZZ_CHECK(fstat(server_fd, &st) == 0, "fstat");
  FUZZ_CHECK(client->total_bytes() == static_cast<uint64_t>(st.st_size), "total %llu, file %lld",
             static_cast<unsigned long long>(client->total_bytes()),
             static_cast<long long>(st.st_size));
  FUZZ_CHECK(client->slots() >= 1 && client->slots() <= shm_layout::kMaxSlots, "slots %d",
             client->slots());
  FUZZ_CHECK(client->slot_bytes() % kPage == 0 &&
                 kPage + client->slot_bytes() * static_cast<uint64_t>(client->slots()) <=
                     client->total_bytes(),
             "geometry %d x %llu past %llu bytes", client->slots(),
             static_cast<unsigned long long>(client->slot_bytes()),
             static_cast<unsigned long long>(client->total_bytes()));
  // The hostile server tries to shrink it under the client's mapping.
  FUZZ_CHECK(ftruncate(server_fd, 0) == -1 && errno == EPERM, "a sealed segment shrank");
  for (int i = 0; i < 16 && !in.empty(); ++i) {
    const uint8_t op = in.Byte();
    if (op % 3 == 0) {
      // The server changes a state word (or any word) before announcing.
      const uint32_t value = in.U32();
      const uint64_t offset = in.Byte() % 2 == 0 ? StateOffset(in.Byte() % client->slots())
                                                 : in.U32() % (client->total_bytes() / 4) * 4;
      FUZZ_CHECK(pwrite(server_fd, &value, 4, static_cast<off_t>(offset)) == 4, "pwrite");
      continue;
    }
    const uint32_t slot = op % 3 == 1 ? in.Byte() % (client->slots() + 1) : in.U32();
    const uint64_t length = op % 3 == 1 ? in.U32() % (client->slot_bytes() + 2) : in.U64();
    Result<std::span<const uint8_t>> bytes = client->Full(slot, length);
    if (!bytes.ok()) continue;
    FUZZ_CHECK(slot < static_cast<uint32_t>(client->slots()) && length <= client->slot_bytes(),
               "slot %u of %llu bytes accepted", slot, static_cast<unsigned long long>(length));
    uint8_t sum = 0;
    for (uint8_t b : *bytes) sum = static_cast<uint8_t>(sum + b);  // faults if outside
    (void)sum;
    client->Free(static_cast<int>(slot));
  }
}

void HostileServer(Input& in) {
  if (in.Byte() % 2 == 0) {
    // A real segment, its header then overwritten in places.
    const int slots = 1 + in.Byte() % 8;
    const uint64_t slot_bytes = 1 + in.U32() % (3 * kPage);
    Result<std::shared_ptr<SharedSegment>> created = SharedSegment::Create(slots, slot_bytes);
    FUZZ_CHECK(created.ok(), "Create: %s", created.status().ToString().c_str());
    const std::shared_ptr<SharedSegment>& server = *created;
    uint8_t* header = server->SlotData(0) - kPage;
    for (int patches = in.Byte() % 8; patches > 0; --patches) {
      const size_t offset = in.Byte() % 80;
      const size_t n = 1 + in.Byte() % 16;
      in.Bytes(header + offset, n);  // the header page is 4096 bytes: offset + n < 96
    }
    const UniqueFd fd(open(PathOf(server->name()).c_str(), O_RDWR));
    FUZZ_CHECK(fd.valid(), "open %s", server->name().c_str());
    ClientReads(in, server->name(), server->attach_key(), fd.get());
    return;
  }
  // A memfd the hostile server made itself.
  const bool right_name = in.Byte() % 4 != 0;
  UniqueFd fd(memfd_create(right_name ? shm_layout::kMemfdName : "other",
                           MFD_CLOEXEC | MFD_ALLOW_SEALING | NoexecSeal()));
  if (!fd.valid() && errno == EINVAL) {
    fd = UniqueFd(memfd_create(right_name ? shm_layout::kMemfdName : "other",
                               MFD_CLOEXEC | MFD_ALLOW_SEALING));
  }
  FUZZ_CHECK(fd.valid(), "memfd_create");
  uint64_t total = in.U32() % (8 * kPage + 1);
  uint8_t header[128] = {};
  in.Bytes(header, sizeof(header));
  if (in.Byte() % 2 == 0) {
    // A well-formed header, so that the seals and the id decide.
    std::memcpy(header, shm_layout::kMagic, sizeof(shm_layout::kMagic));
    const uint32_t slots = 1 + header[8] % 4;
    const uint64_t slot_bytes = kPage;
    total = kPage + slots * slot_bytes;
    std::memcpy(header + 8, &slots, 4);
    std::memcpy(header + 16, &slot_bytes, 8);
    std::memcpy(header + 24, &total, 8);
  }
  FUZZ_CHECK(ftruncate(fd.get(), static_cast<off_t>(total)) == 0, "ftruncate");
  const size_t written = static_cast<size_t>(std::min<uint64_t>(sizeof(header), total));
  if (written > 0) FUZZ_CHECK(pwrite(fd.get(), header, written, 0) >= 0, "pwrite");
  const int seals = in.Byte() & (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW);
  if (seals != 0) FUZZ_CHECK(fcntl(fd.get(), F_ADD_SEALS, seals) == 0, "seal");
  uint8_t id[shm_layout::kIdBytes];
  if (in.Byte() % 2 == 0) {
    std::memcpy(id, header + shm_layout::kHeaderFields[5].offset, sizeof(id));
  } else {
    in.Bytes(id, sizeof(id));
  }
  const std::string name =
      "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd.get()) + "#" + ToHex(id);
  uint8_t key[shm_layout::kAttachKeyBytes];
  in.Bytes(key, sizeof(key));
  ClientReads(in, name, ToHex(key), fd.get());
}

void HostileClient(Input& in) {
  const int slots = 1 + in.Byte() % 8;
  Result<std::shared_ptr<SharedSegment>> created = SharedSegment::Create(slots, kPage);
  FUZZ_CHECK(created.ok(), "Create: %s", created.status().ToString().c_str());
  const std::shared_ptr<SharedSegment>& server = *created;
  const uint64_t total = server->total_bytes();
  const UniqueFd fd(open(PathOf(server->name()).c_str(), O_RDWR));
  FUZZ_CHECK(fd.valid(), "open %s", server->name().c_str());
  auto* base =
      static_cast<uint8_t*>(mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0));
  FUZZ_CHECK(base != MAP_FAILED, "mmap");
  auto word = [&](size_t offset) {
    uint32_t v;
    std::memcpy(&v, base + offset, 4);
    return v;
  };
  uint64_t owned = 0;  // the model: slots the server filled and has not seen freed
  while (!in.empty()) {
    const uint8_t op = in.Byte();
    switch (op % 6) {
      case 0: {  // the server looks for a slot, and fills it when there is one
        bool broken = false;
        for (int s = 0; s < slots; ++s) {
          const uint32_t v = word(StateOffset(s));
          if (v == shm_layout::kSlotFree) continue;
          if (v != shm_layout::kSlotFull || (owned >> s & 1) == 0) broken = true;
        }
        Result<int> found = server->FindFree();
        FUZZ_CHECK(found.ok() != broken, "FindFree %s where the model says %s",
                   found.status().ToString().c_str(), broken ? "broken" : "sound");
        if (!found.ok()) {
          munmap(base, total);
          return;  // the server ends this stream
        }
        for (int s = 0; s < slots; ++s) {
          if (word(StateOffset(s)) == shm_layout::kSlotFree) owned &= ~(uint64_t{1} << s);
        }
        FUZZ_CHECK(*found >= -1 && *found < slots, "FindFree %d of %d slots", *found, slots);
        if (*found >= 0) {
          std::memset(server->SlotData(*found), op, server->slot_bytes());
          server->MarkFull(*found);
          owned |= uint64_t{1} << *found;
        }
        break;
      }
      case 1: {  // any value into any header word
        const uint32_t value = in.U32();
        const size_t offset = in.Byte() % (kPage / 4) * 4;
        std::memcpy(base + offset, &value, 4);
        break;
      }
      case 2: {  // a state word set to free or full, as an honest or careless client would
        const int s = in.Byte() % slots;
        const uint32_t value = in.Byte() % 2 == 0 ? shm_layout::kSlotFree : shm_layout::kSlotFull;
        std::memcpy(base + StateOffset(s), &value, 4);
        break;
      }
      case 3: {  // holes punched: pages read back as zeros (free states, not attached)
        const uint64_t page = in.Byte() % (total / kPage);
        const uint64_t pages = 1 + in.Byte() % 3;
        FUZZ_CHECK(
            fallocate(fd.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                      static_cast<off_t>(page * kPage), static_cast<off_t>(pages * kPage)) == 0,
            "punch hole");
        break;
      }
      case 4: {  // what the seals forbid: any change of size (its own size is no change)
        const uint64_t size = in.U32() % (2 * total);
        const int truncated = ftruncate(fd.get(), static_cast<off_t>(size));
        FUZZ_CHECK(size == total ? truncated == 0 : truncated == -1 && errno == EPERM,
                   "ftruncate from %llu to %llu: %d", static_cast<unsigned long long>(total),
                   static_cast<unsigned long long>(size), truncated);
        FUZZ_CHECK(fcntl(fd.get(), F_ADD_SEALS, F_SEAL_WRITE) == -1 && errno == EPERM,
                   "a seal added");
        break;
      }
      case 5: {  // the attach field: attached exactly when it holds the key, whatever else
        uint8_t key[shm_layout::kAttachKeyBytes];
        if (in.Byte() % 2 == 0) {
          for (size_t i = 0; i < sizeof(key); ++i) {
            key[i] =
                static_cast<uint8_t>(std::stoi(server->attach_key().substr(2 * i, 2), nullptr, 16));
          }
          key[in.Byte() % sizeof(key)] ^= in.Byte();  // the key, or one byte off it
        } else {
          in.Bytes(key, sizeof(key));
        }
        std::memcpy(base + AttachOffset(), key, sizeof(key));
        FUZZ_CHECK(server->attached() == (ToHex(key) == server->attach_key()), "attached %s",
                   ToHex(key).c_str());
        break;
      }
    }
    // The server's geometry is its own, never re-read from the header.
    FUZZ_CHECK(
        server->slots() == slots && server->slot_bytes() == kPage && server->total_bytes() == total,
        "the server's geometry changed");
  }
  munmap(base, total);
}

}  // namespace
}  // namespace sluice

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sluice::Input in(data, size);
  if (in.Byte() % 2 == 0) {
    sluice::HostileServer(in);
  } else {
    sluice::HostileClient(in);
  }
  return 0;
}
