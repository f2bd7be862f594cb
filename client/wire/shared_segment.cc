#include "client/wire/shared_segment.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <random>
#include <string_view>

#include "formats/dtype.h"

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
  std::atomic<uint64_t> attach[2];
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
static_assert(sizeof(std::atomic<uint64_t>) == 8 && std::atomic<uint64_t>::is_always_lock_free,
              "the attach words must be lock-free to be shared between processes");

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

// `s`, 2 * n lowercase hex digits, as n bytes.
bool ParseHex(std::string_view s, uint8_t* out, size_t n) {
  if (s.size() != 2 * n) return false;
  for (size_t i = 0; i < n; ++i) {
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
    out[i] = byte;
  }
  return true;
}

void RandomBytes(uint8_t* out, size_t n) {
  std::random_device rd;
  for (size_t i = 0; i < n; i += 4) {
    const uint32_t r = rd();
    std::memcpy(out + i, &r, std::min<size_t>(4, n - i));
  }
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
  return ParseHex(s, out->id, kIdBytes);
}

// A memfd that may be sealed; MFD_NOEXEC_SEAL where the kernel knows it (vm.memfd_noexec=2
// refuses memfds without it), plain otherwise.
int NewMemfd() {
  const unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
  const int fd = memfd_create(shm_layout::kMemfdName, flags | MFD_NOEXEC_SEAL);
  if (fd >= 0 || errno != EINVAL) return fd;
  return memfd_create(shm_layout::kMemfdName, flags);
}

// The seals on fd are exactly those Create adds (and F_SEAL_EXEC, which MFD_NOEXEC_SEAL sets).
bool SealedAsCreated(int fd) {
  const int seals = fcntl(fd, F_GET_SEALS);
  return seals >= 0 && (static_cast<unsigned>(seals) & ~shm_layout::kHarmlessSeals) == kSeals;
}

}  // namespace

std::string ToHex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

SharedSegment::SharedSegment(std::string name, UniqueFd fd, void* base, uint64_t total_bytes,
                             int slots, uint64_t slot_bytes, std::string attach_key, bool creator,
                             std::shared_ptr<BufferAllocator> adopter)
    : name_(std::move(name)),
      base_(base),
      total_bytes_(total_bytes),
      adopter_(std::move(adopter)),
      slots_(slots),
      slot_bytes_(slot_bytes),
      attach_key_(std::move(attach_key)),
      creator_(creator),
      fd_(std::move(fd)) {
  uint8_t key[shm_layout::kAttachKeyBytes] = {};
  ParseHex(attach_key_, key, sizeof(key));  // checked by Create and Open
  std::memcpy(key_words_, key, sizeof(key));
  if (adopter_ != nullptr) adopter_->Adopt(base_, total_bytes_);
}

SharedSegment::~SharedSegment() {
  Retract();
  if (!creator_) {
    for (auto& word : header()->attach) word.store(0, std::memory_order_release);
  }
  if (adopter_ != nullptr) adopter_->Unadopt(base_, total_bytes_);
  munmap(base_, total_bytes_);
}

SharedSegment::Header* SharedSegment::header() const { return static_cast<Header*>(base_); }

uint64_t SharedSegment::BytesFor(int slots, uint64_t slot_bytes) {
  return kPage + RoundUp(slot_bytes) * static_cast<uint64_t>(slots);
}

uint64_t SharedSegment::MaxSlotBytesFor(int batch_size, int image_height, int image_width) {
  if (image_width == 0) image_width = image_height;
  if (batch_size <= 0 || image_height <= 0 || image_width <= 0) return shm_layout::kMaxSlotBytes;
  const uint64_t bytes = uint64_t{3} * DTypeSize(DType::kFloat32) *
                         static_cast<uint64_t>(batch_size) * static_cast<uint64_t>(image_height) *
                         static_cast<uint64_t>(image_width);
  return std::min(bytes, shm_layout::kMaxSlotBytes);
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
  static_assert(FieldIs(6, offsetof(Header, attach), sizeof(Header::attach)));
  static_assert(FieldIs(7, offsetof(Header, state), sizeof(Header::state)));
  static_assert(std::size(shm_layout::kHeaderFields) == 8);
  if (slots < 1 || slots > kMaxSlots || slot_bytes == 0) {
    return InvalidArgument("shared segment of " + std::to_string(slots) + " slots of " +
                           std::to_string(slot_bytes) + " bytes");
  }
  const uint64_t slot = RoundUp(slot_bytes);
  const uint64_t total = BytesFor(slots, slot_bytes);
  const std::string what = "shared segment (" + std::to_string(total) + " bytes)";
  // Any process of this user can open the memfd through /proc from here on: it is sized and
  // sealed first, and what it is checked, before anything relies on its size.
  UniqueFd fd(NewMemfd());
  if (!fd.valid()) return Errno(errno, "create", what);
  if (ftruncate(fd.get(), static_cast<off_t>(total)) != 0) return Errno(errno, "size", what);
  if (fcntl(fd.get(), F_ADD_SEALS, kSeals) != 0) return Errno(errno, "seal", what);
  if (!SealedAsCreated(fd.get())) {
    return FailedPrecondition(what + ": resealed by another process before it was sealed");
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return Errno(errno, "stat", what);
  if (static_cast<uint64_t>(st.st_size) != total) {
    return FailedPrecondition(what + ": resized to " + std::to_string(st.st_size) +
                              " bytes by another process before it was sealed");
  }
  // Pages reserved within the sealed size: no memory fails here, not with SIGBUS on a write.
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
  RandomBytes(h->id, kIdBytes);
  for (auto& word : h->attach) word.store(0, std::memory_order_relaxed);
  for (auto& s : h->state) s.store(shm_layout::kSlotFree, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  uint8_t key[shm_layout::kAttachKeyBytes];
  RandomBytes(key, sizeof(key));
  const std::string name = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd.get()) +
                           "#" + ToHex({h->id, kIdBytes});
  return std::shared_ptr<SharedSegment>(new SharedSegment(name, std::move(fd), base, total, slots,
                                                          slot, ToHex(key), /*creator=*/true));
}

Result<std::shared_ptr<SharedSegment>> SharedSegment::Open(
    const std::string& name, const std::string& attach_key, const Expected& expected,
    std::shared_ptr<BufferAllocator> adopter) {
  ParsedName parsed;
  if (!ParseName(name, &parsed)) {
    return InvalidArgument("'" + name + "' is not a sluice shared segment name");
  }
  uint8_t key[shm_layout::kAttachKeyBytes];
  if (!ParseHex(attach_key, key, sizeof(key))) {
    return InvalidArgument("shared segment " + name + ": the attach key is not " +
                           std::to_string(2 * sizeof(key)) + " lowercase hex digits");
  }
  if (expected.slots < 1 || expected.slots > kMaxSlots || expected.max_slot_bytes == 0) {
    return InvalidArgument("shared segment " + name + ": asked for " +
                           std::to_string(expected.slots) + " slots of " +
                           std::to_string(expected.max_slot_bytes) + " bytes");
  }
  // The path is built here from the numbers, never taken from the server as given.
  const std::string path =
      "/proc/" + std::to_string(parsed.pid) + "/fd/" + std::to_string(parsed.fd);
  // Resolved once (O_PATH opens nothing yet): what the link points at is checked, and then that
  // same file reopened through this process's own descriptor, so a descriptor the server reuses
  // meanwhile for a file, socket or device is never opened.
  const UniqueFd link_fd(open(path.c_str(), O_PATH | O_CLOEXEC));
  if (!link_fd.valid()) return Errno(errno, "look up shared segment", path);
  const std::string own = "/proc/self/fd/" + std::to_string(link_fd.get());
  char target[256];
  const ssize_t n = readlink(own.c_str(), target, sizeof(target) - 1);
  if (n < 0) return Errno(errno, "look up shared segment", path);
  const std::string_view link(target, static_cast<size_t>(n));
  if (!link.starts_with(std::string("/memfd:") + shm_layout::kMemfdName + " ")) {
    return DataLoss("shared segment " + name + " names '" + std::string(link) +
                    "', not a sluice segment");
  }
  UniqueFd fd(open(own.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd.valid()) return Errno(errno, "open shared segment", path);
  const std::string what = "shared segment " + name;
  // Sealed against resizing before anything is mapped: the server can then never shrink it
  // under this mapping (SIGBUS here), nor anyone else.
  const int seals = fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (static_cast<unsigned>(seals) & kSeals) != kSeals) {
    return DataLoss(what + " is not a memfd sealed against resizing");
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return Errno(errno, "stat shared segment", path);
  if (!S_ISREG(st.st_mode)) return DataLoss(what + " is not a regular file");
  if (st.st_uid != geteuid()) {
    return DataLoss(what + " belongs to uid " + std::to_string(st.st_uid) + ", not this user's " +
                    std::to_string(geteuid()));
  }
  // A hugetlbfs memfd (MFD_HUGETLB) would be mapped in huge pages, page-locked whole by an
  // adopter, and fail to fault on a pool running dry: only tmpfs pages.
  struct statfs fs {};
  if (fstatfs(fd.get(), &fs) != 0) return Errno(errno, "statfs shared segment", path);
  if (static_cast<uint64_t>(fs.f_type) != TMPFS_MAGIC) {
    char type[17];
    const auto end = std::to_chars(type, type + sizeof(type), static_cast<uint64_t>(fs.f_type), 16);
    return DataLoss(what + " is not on tmpfs (file system type 0x" + std::string(type, end.ptr) +
                    ")");
  }
  const uint64_t total = static_cast<uint64_t>(st.st_size);
  // Never more than the slots asked for need: a sparse terabyte is not mapped (nor page-locked).
  const uint64_t most = BytesFor(expected.slots, expected.max_slot_bytes);
  if (total < kPage || total > most) {
    return DataLoss(what + " is " + std::to_string(total) +
                    " bytes, not between one page and the " + std::to_string(most) + " that " +
                    std::to_string(expected.slots) + " slots of at most " +
                    std::to_string(expected.max_slot_bytes) + " bytes need");
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
  const uint32_t zero = h->zero;
  const uint64_t slot_bytes = h->slot_bytes;
  const uint64_t header_total = h->total_bytes;
  std::string malformed;
  if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    malformed = "magic is not " + std::string(kMagic, sizeof(kMagic));
  } else if (slots != static_cast<uint32_t>(expected.slots)) {
    malformed = "slots is " + std::to_string(slots) + ", not the " +
                std::to_string(expected.slots) + " asked for";
  } else if (zero != 0) {
    malformed = "zero is " + std::to_string(zero);
  } else if (slot_bytes == 0 || slot_bytes % kPage != 0 ||
             slot_bytes > RoundUp(expected.max_slot_bytes)) {
    malformed = "slot_bytes is " + std::to_string(slot_bytes) + ", not a multiple of " +
                std::to_string(kPage) + " between " + std::to_string(kPage) + " and " +
                std::to_string(RoundUp(expected.max_slot_bytes));
  } else if (header_total != total || header_total != BytesFor(expected.slots, slot_bytes)) {
    malformed = "total_bytes is " + std::to_string(header_total) + ", but the file is " +
                std::to_string(total) + " bytes and a header and " + std::to_string(slots) +
                " slots of " + std::to_string(slot_bytes) + " bytes are " +
                std::to_string(BytesFor(expected.slots, slot_bytes));
  }
  if (!malformed.empty() || std::memcmp(id, parsed.id, kIdBytes) != 0) {
    munmap(base, total);
    return DataLoss(what + (malformed.empty()
                                ? " has another id: a later segment in a reused descriptor"
                                : ": header field " + malformed));
  }
  // Attached before adopting: page-locking a large mapping takes time the server is waiting.
  uint64_t words[2];
  std::memcpy(words, key, sizeof(words));
  h->attach[0].store(words[0], std::memory_order_release);
  h->attach[1].store(words[1], std::memory_order_release);
  return std::shared_ptr<SharedSegment>(
      new SharedSegment(name, UniqueFd(), base, total, static_cast<int>(slots), slot_bytes,
                        attach_key, /*creator=*/false, std::move(adopter)));
}

bool SharedSegment::attached() const {
  // Each word read once, as whatever anyone wrote there: only the key counts.
  const uint64_t first = header()->attach[0].load(std::memory_order_acquire);
  const uint64_t second = header()->attach[1].load(std::memory_order_acquire);
  return first == key_words_[0] && second == key_words_[1];
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

void SharedSegment::Unfill(int slot) {
  header()->state[slot].store(shm_layout::kSlotFree, std::memory_order_relaxed);
  full_.fetch_and(~(uint64_t{1} << slot), std::memory_order_relaxed);
}

bool SharedSegment::Drained() {
  if (!attached()) return true;
  uint64_t full = full_.load(std::memory_order_relaxed);
  for (int s = 0; s < slots_; ++s) {
    const uint64_t bit = uint64_t{1} << s;
    if ((full & bit) != 0 &&
        header()->state[s].load(std::memory_order_acquire) == shm_layout::kSlotFree) {
      full &= ~bit;
    }
  }
  full_.store(full, std::memory_order_relaxed);
  return full == 0;
}

void SharedSegment::Discard() { madvise(base_, total_bytes_, MADV_REMOVE); }

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
