#include "client/wire/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <random>
#include <string_view>

#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U  // Linux 6.3; older headers lack it
#endif

namespace sluice {

struct SharedSegment::Header {
  char magic[sizeof(shm_layout::kMagic)];
  uint32_t slots;
  uint32_t zero;
  uint64_t slot_bytes;
  uint64_t total_bytes;
  uint8_t id[shm_layout::kIdBytes];
  std::atomic<uint32_t> attached;
  std::atomic<uint32_t> state[kMaxSlots];
};

namespace {

using shm_layout::kIdBytes;
using shm_layout::kMagic;
constexpr uint64_t kPage = shm_layout::kHeaderBytes;
constexpr unsigned kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
static_assert(kSeals == shm_layout::kRequiredSeals);
static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free,
              "slot states must be lock-free to be shared between processes");

// Whether the table's field `index` is at offset and of size.
constexpr bool FieldIs(size_t index, size_t offset, size_t size) {
  return shm_layout::kHeaderFields[index].offset == offset &&
         shm_layout::kHeaderFields[index].size == size;
}

uint64_t RoundUp(uint64_t v) { return (v + kPage - 1) / kPage * kPage; }

// ErrnoStatus, except that running out of room (memory, descriptors) is ResourceExhausted and
// EPERM/EACCES (not allowed to inspect the server) a FailedPrecondition.
Status Errno(int error, std::string_view op, const std::string& name) {
  Status s = ErrnoStatus(error, op, name);
  switch (error) {
    case EPERM:
    case EACCES:
      return FailedPrecondition(s.message());
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return ResourceExhausted(s.message());
    default:
      return s;
  }
}

std::string Hex(const uint8_t* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

// A name's parts: "/proc/<pid>/fd/<fd>#<id>", every part in canonical form.
struct ParsedName {
  int pid = 0;
  int fd = 0;
  uint8_t id[kIdBytes] = {};
};

bool ParseNumber(std::string_view* s, int* out) {
  const char* end = s->data() + s->size();
  auto [p, ec] = std::from_chars(s->data(), end, *out);
  // No sign, no leading zero: one spelling per number.
  if (ec != std::errc() || p == s->data() || *out < 0 || ((*s)[0] == '0' && p - s->data() > 1)) {
    return false;
  }
  s->remove_prefix(static_cast<size_t>(p - s->data()));
  return true;
}

bool ParseName(std::string_view s, ParsedName* out) {
  constexpr std::string_view kProc = "/proc/", kFd = "/fd/";
  if (!s.starts_with(kProc)) return false;
  s.remove_prefix(kProc.size());
  if (!ParseNumber(&s, &out->pid) || out->pid == 0 || !s.starts_with(kFd)) return false;
  s.remove_prefix(kFd.size());
  if (!ParseNumber(&s, &out->fd) || !s.starts_with('#')) return false;
  s.remove_prefix(1);
  if (s.size() != 2 * kIdBytes) return false;
  for (size_t i = 0; i < kIdBytes; ++i) {
    uint8_t byte = 0;
    for (char c : s.substr(2 * i, 2)) {
      byte = static_cast<uint8_t>(byte << 4);
      if (c >= '0' && c <= '9') {
        byte |= static_cast<uint8_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        byte |= static_cast<uint8_t>(c - 'a' + 10);
      } else {
        return false;
      }
    }
    out->id[i] = byte;
  }
  return true;
}

// A memfd that may be sealed; MFD_NOEXEC_SEAL where the kernel knows it (vm.memfd_noexec=2
// refuses memfds without it), plain otherwise.
int NewMemfd() {
  const unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
  const int fd = memfd_create(shm_layout::kMemfdName, flags | MFD_NOEXEC_SEAL);
  if (fd >= 0 || errno != EINVAL) return fd;
  return memfd_create(shm_layout::kMemfdName, flags);
}

}  // namespace

SharedSegment::SharedSegment(std::string name, UniqueFd fd, void* base, uint64_t total_bytes,
                             int slots, uint64_t slot_bytes,
                             std::shared_ptr<BufferAllocator> adopter)
    : name_(std::move(name)),
      base_(base),
      total_bytes_(total_bytes),
      adopter_(std::move(adopter)),
      slots_(slots),
      slot_bytes_(slot_bytes),
      fd_(std::move(fd)) {
  if (adopter_ != nullptr) adopter_->Adopt(base_, total_bytes_);
}

SharedSegment::~SharedSegment() {
  Retract();
  if (adopter_ != nullptr) adopter_->Unadopt(base_, total_bytes_);
  munmap(base_, total_bytes_);
}

SharedSegment::Header* SharedSegment::header() const { return static_cast<Header*>(base_); }

uint64_t SharedSegment::BytesFor(int slots, uint64_t slot_bytes) {
  return kPage + RoundUp(slot_bytes) * static_cast<uint64_t>(slots);
}

Result<std::shared_ptr<SharedSegment>> SharedSegment::Create(int slots, uint64_t slot_bytes) {
  static_assert(sizeof(Header) <= kPage);
  // The header struct is the layout the table describes, field by field.
  static_assert(FieldIs(0, offsetof(Header, magic), sizeof(Header::magic)));
  static_assert(FieldIs(1, offsetof(Header, slots), sizeof(Header::slots)));
  static_assert(FieldIs(2, offsetof(Header, zero), sizeof(Header::zero)));
  static_assert(FieldIs(3, offsetof(Header, slot_bytes), sizeof(Header::slot_bytes)));
  static_assert(FieldIs(4, offsetof(Header, total_bytes), sizeof(Header::total_bytes)));
  static_assert(FieldIs(5, offsetof(Header, id), sizeof(Header::id)));
  static_assert(FieldIs(6, offsetof(Header, attached), sizeof(Header::attached)));
  static_assert(FieldIs(7, offsetof(Header, state), sizeof(Header::state)));
  static_assert(std::size(shm_layout::kHeaderFields) == 8);
  if (slots < 1 || slots > kMaxSlots || slot_bytes == 0) {
    return InvalidArgument("shared segment of " + std::to_string(slots) + " slots of " +
                           std::to_string(slot_bytes) + " bytes");
  }
  const uint64_t slot = RoundUp(slot_bytes);
  const uint64_t total = BytesFor(slots, slot_bytes);
  const std::string what = "shared segment (" + std::to_string(total) + " bytes)";
  UniqueFd fd(NewMemfd());
  if (!fd.valid()) return Errno(errno, "create", what);
  if (const int e = posix_fallocate(fd.get(), 0, static_cast<off_t>(total)); e != 0) {
    return Errno(e, "reserve space of", what);
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return Errno(errno, "map", what);
  auto* h = new (base) Header();
  std::memcpy(h->magic, kMagic, sizeof(kMagic));
  h->slots = static_cast<uint32_t>(slots);
  h->zero = 0;
  h->slot_bytes = slot;
  h->total_bytes = total;
  std::random_device rd;
  for (size_t i = 0; i < kIdBytes; i += 4) {
    const uint32_t r = rd();
    std::memcpy(h->id + i, &r, 4);
  }
  h->attached.store(0, std::memory_order_relaxed);
  for (auto& s : h->state) s.store(shm_layout::kSlotFree, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  if (fcntl(fd.get(), F_ADD_SEALS, kSeals) != 0) {
    const int e = errno;
    munmap(base, total);
    return Errno(e, "seal", what);
  }
  const std::string name = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd.get()) +
                           "#" + Hex(h->id, kIdBytes);
  return std::shared_ptr<SharedSegment>(
      new SharedSegment(name, std::move(fd), base, total, slots, slot));
}

Result<std::shared_ptr<SharedSegment>> SharedSegment::Open(
    const std::string& name, std::shared_ptr<BufferAllocator> adopter) {
  ParsedName parsed;
  if (!ParseName(name, &parsed)) {
    return InvalidArgument("'" + name + "' is not a sluice shared segment name");
  }
  // The path is built here from the numbers, never taken from the server as given.
  const std::string path =
      "/proc/" + std::to_string(parsed.pid) + "/fd/" + std::to_string(parsed.fd);
  // What the link points at, before opening it: a descriptor the server has since reused for
  // a file, socket or device is not opened at all.
  char target[256];
  const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
  if (n < 0) return Errno(errno, "look up shared segment", path);
  const std::string_view link(target, static_cast<size_t>(n));
  if (!link.starts_with(std::string("/memfd:") + shm_layout::kMemfdName + " ")) {
    return DataLoss("shared segment " + name + " names '" + std::string(link) +
                    "', not a sluice segment");
  }
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd.valid()) return Errno(errno, "open shared segment", path);
  // Sealed against resizing before anything is mapped: the server can then never shrink it
  // under this mapping (SIGBUS here), nor anyone else.
  const int seals = fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (static_cast<unsigned>(seals) & kSeals) != kSeals) {
    return DataLoss("shared segment " + name + " is not a memfd sealed against resizing");
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return Errno(errno, "stat shared segment", path);
  const uint64_t total = static_cast<uint64_t>(st.st_size);
  if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || total < kPage) {
    return DataLoss("shared segment " + name + " is " + std::to_string(total) +
                    " bytes, or not this user's");
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return Errno(errno, "map shared segment", path);
  // The header read once: what is checked is what is used, whatever changes in it later.
  auto* h = static_cast<Header*>(base);
  char magic[sizeof(kMagic)];
  uint8_t id[kIdBytes];
  std::memcpy(magic, h->magic, sizeof(magic));
  std::memcpy(id, h->id, sizeof(id));
  const uint32_t slots = h->slots;
  const uint64_t slot_bytes = h->slot_bytes;
  const uint64_t header_total = h->total_bytes;
  const bool valid = std::memcmp(magic, kMagic, sizeof(kMagic)) == 0 && slots >= 1 &&
                     slots <= kMaxSlots && slot_bytes > 0 && slot_bytes % kPage == 0 &&
                     header_total == total && slot_bytes <= (total - kPage) / slots;
  if (!valid || std::memcmp(id, parsed.id, kIdBytes) != 0) {
    munmap(base, total);
    return DataLoss("shared segment " + name +
                    (valid ? " has another id: a later segment in a reused descriptor"
                           : " has a malformed header"));
  }
  // Attached before adopting: page-locking a large mapping takes time the server is waiting.
  h->attached.store(1, std::memory_order_release);
  return std::shared_ptr<SharedSegment>(new SharedSegment(
      name, UniqueFd(), base, total, static_cast<int>(slots), slot_bytes, std::move(adopter)));
}

bool SharedSegment::attached() const {
  return header()->attached.load(std::memory_order_acquire) != 0;
}

void SharedSegment::Retract() {
  std::lock_guard<std::mutex> lock(fd_mu_);
  fd_.Reset();
}

Result<int> SharedSegment::FindFree() {
  uint64_t full = full_.load(std::memory_order_relaxed);
  int found = -1;
  for (int s = 0; s < slots_; ++s) {
    const uint64_t bit = uint64_t{1} << s;
    const uint32_t state = header()->state[s].load(std::memory_order_acquire);
    if (state == shm_layout::kSlotFree) {
      full &= ~bit;
      if (found < 0) found = s;
    } else if (state != shm_layout::kSlotFull || (full & bit) == 0) {
      full_.store(full, std::memory_order_relaxed);
      return FailedPrecondition("shared-memory client broke the slot protocol: slot " +
                                std::to_string(s) + "'s state word holds " + std::to_string(state) +
                                ((state == shm_layout::kSlotFull)
                                     ? ", a slot the server never filled"
                                     : ", neither free nor full"));
    }
  }
  full_.store(full, std::memory_order_relaxed);
  return found;
}

uint8_t* SharedSegment::SlotData(int slot) const {
  return static_cast<uint8_t*>(base_) + kPage + slot_bytes_ * static_cast<uint64_t>(slot);
}

void SharedSegment::MarkFull(int slot) {
  full_.fetch_or(uint64_t{1} << slot, std::memory_order_relaxed);
  header()->state[slot].store(shm_layout::kSlotFull, std::memory_order_release);
}

Result<std::span<const uint8_t>> SharedSegment::Full(uint32_t slot, uint64_t length) const {
  if (slot >= static_cast<uint32_t>(slots_) || length > slot_bytes_) {
    return DataLoss("shared segment " + name_ + ": slot " + std::to_string(slot) + " of " +
                    std::to_string(length) + " bytes is outside its " + std::to_string(slots_) +
                    " slots of " + std::to_string(slot_bytes_) + " bytes");
  }
  if (header()->state[slot].load(std::memory_order_acquire) != shm_layout::kSlotFull) {
    return DataLoss("shared segment " + name_ + ": slot " + std::to_string(slot) +
                    " was named in a batch but is not full");
  }
  return std::span<const uint8_t>(SlotData(static_cast<int>(slot)), length);
}

void SharedSegment::Free(int slot) {
  header()->state[slot].store(shm_layout::kSlotFree, std::memory_order_release);
}

namespace {

bool HasPrefix(const std::string& s, std::initializer_list<const char*> prefixes) {
  for (const char* prefix : prefixes) {
    if (s.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

}  // namespace

bool IsSameHostPeer(const std::string& peer) {
  return HasPrefix(peer, {"unix:", "unix-abstract:", "ipv4:127.", "ipv6:[::1]", "ipv6:%5B::1%5D",
                          "ipv6:[::ffff:127."});
}

bool IsSameHostTarget(const std::string& target) {
  return HasPrefix(target, {"unix:", "unix-abstract:", "127.", "localhost:", "[::1]:", "ipv4:127.",
                            "ipv6:[::1]:"});
}

}  // namespace sluice
