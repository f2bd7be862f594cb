#include "client/wire/shared_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <random>
#include <string_view>

#include "formats/file.h"

namespace sluice {

struct SharedSegment::Header {
  char magic[sizeof(shm_layout::kMagic)];
  uint32_t slots;
  uint32_t zero;
  uint64_t slot_bytes;
  uint64_t total_bytes;
  std::atomic<uint32_t> attached;
  std::atomic<uint32_t> state[kMaxSlots];
};

namespace {

using shm_layout::kMagic;
constexpr uint64_t kPage = shm_layout::kHeaderBytes;
constexpr char kPrefix[] = "sluice-";
static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free,
              "slot states must be lock-free to be shared between processes");

// Whether the table's field `index` is at offset and of size.
constexpr bool FieldIs(size_t index, size_t offset, size_t size) {
  return shm_layout::kHeaderFields[index].offset == offset &&
         shm_layout::kHeaderFields[index].size == size;
}

uint64_t RoundUp(uint64_t v) { return (v + kPage - 1) / kPage * kPage; }

// ErrnoStatus, except that running out of room (memory, /dev/shm, descriptors) is
// ResourceExhausted and EPERM a FailedPrecondition.
Status Errno(int error, std::string_view op, const std::string& name) {
  Status s = ErrnoStatus(error, op, name);
  switch (error) {
    case EPERM:
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

// When process `pid` started (clock ticks after boot: field 22 of /proc/PID/stat); 0 when there
// is no such process. With the pid it names a process uniquely, even across pid reuse.
uint64_t StartTime(pid_t pid) {
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return 0;
  char line[1024];
  const size_t n = std::fread(line, 1, sizeof(line) - 1, f);
  std::fclose(f);
  line[n] = '\0';
  const char* p = std::strrchr(line, ')');  // the command name may hold spaces and ')'
  if (p == nullptr) return 0;
  // Fields after the name start with the 3rd (state); the start time is the 22nd.
  for (int field = 2; field < 22 && p != nullptr; ++field) p = std::strchr(p + 1, ' ');
  return p == nullptr ? 0 : std::strtoull(p + 1, nullptr, 10);
}

// A name no other live process uses: pid and start time (which also tell RemoveStaleSegments
// whether the creator still runs), a per-process counter, and randomness (an attacker cannot
// pre-create it; O_EXCL refuses it anyway).
std::string NewName() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t start = StartTime(getpid());
  std::random_device rd;
  const uint64_t random = (uint64_t{rd()} << 32) ^ rd();
  char buffer[128];
  std::snprintf(buffer, sizeof(buffer), "/%s%d-%llu-%llu-%016llx", kPrefix,
                static_cast<int>(getpid()), static_cast<unsigned long long>(start),
                static_cast<unsigned long long>(counter.fetch_add(1)),
                static_cast<unsigned long long>(random));
  return buffer;
}

}  // namespace

SharedSegment::SharedSegment(std::string name, void* base, uint64_t total_bytes, int slots,
                             uint64_t slot_bytes, bool owner,
                             std::shared_ptr<BufferAllocator> adopter)
    : name_(std::move(name)),
      base_(base),
      total_bytes_(total_bytes),
      owner_(owner),
      adopter_(std::move(adopter)),
      slots_(slots),
      slot_bytes_(slot_bytes),
      linked_(owner) {
  if (adopter_ != nullptr) adopter_->Adopt(base_, total_bytes_);
}

SharedSegment::~SharedSegment() {
  if (owner_) Unlink();
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
  static_assert(FieldIs(5, offsetof(Header, attached), sizeof(Header::attached)));
  static_assert(FieldIs(6, offsetof(Header, state), sizeof(Header::state)));
  static_assert(std::size(shm_layout::kHeaderFields) == 7);
  if (slots < 1 || slots > kMaxSlots || slot_bytes == 0) {
    return InvalidArgument("shared segment of " + std::to_string(slots) + " slots of " +
                           std::to_string(slot_bytes) + " bytes");
  }
  const uint64_t slot = RoundUp(slot_bytes);
  const uint64_t total = BytesFor(slots, slot_bytes);
  const std::string name = NewName();
  const UniqueFd fd(shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) return Errno(errno, "create shared segment", name);
  auto fail = [&](const std::string& what, int error) {
    shm_unlink(name.c_str());
    return Errno(error, what + " of shared segment",
                 name + " (" + std::to_string(total) + " bytes)");
  };
  if (const int e = posix_fallocate(fd.get(), 0, static_cast<off_t>(total)); e != 0) {
    return fail("reserve space", e);
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return fail("map", errno);
  auto* h = new (base) Header();
  std::memcpy(h->magic, kMagic, sizeof(kMagic));
  h->slots = static_cast<uint32_t>(slots);
  h->zero = 0;
  h->slot_bytes = slot;
  h->total_bytes = total;
  h->attached.store(0, std::memory_order_relaxed);
  for (auto& s : h->state) s.store(shm_layout::kSlotFree, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  return std::shared_ptr<SharedSegment>(
      new SharedSegment(name, base, total, slots, slot, /*owner=*/true));
}

Result<std::shared_ptr<SharedSegment>> SharedSegment::Open(
    const std::string& name, std::shared_ptr<BufferAllocator> adopter) {
  if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos ||
      name.compare(1, sizeof(kPrefix) - 1, kPrefix) != 0) {
    return InvalidArgument("'" + name + "' is not a sluice shared segment name");
  }
  UniqueFd fd(shm_open(name.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0));
  if (!fd.valid()) return Errno(errno, "open shared segment", name);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return Errno(errno, "stat shared segment", name);
  // Only a segment of this user that no one else may write: another local user could otherwise
  // plant one (bound to a port this client was pointed at) and change it under the client.
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    return FailedPrecondition("shared segment " + name +
                              " is not this user's alone (owner or mode); not mapping it");
  }
  const uint64_t total = static_cast<uint64_t>(st.st_size);
  if (total < kPage) {
    return DataLoss("shared segment " + name + " is " + std::to_string(total) + " bytes");
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  const int map_error = errno;
  fd.Reset();  // the mapping stays
  if (base == MAP_FAILED) return Errno(map_error, "map shared segment", name);
  // The header read once: what is checked is what is used, whatever changes in it later.
  auto* h = static_cast<Header*>(base);
  char magic[sizeof(kMagic)];
  std::memcpy(magic, h->magic, sizeof(magic));
  const uint32_t slots = h->slots;
  const uint64_t slot_bytes = h->slot_bytes;
  const uint64_t header_total = h->total_bytes;
  const bool valid = std::memcmp(magic, kMagic, sizeof(kMagic)) == 0 && slots >= 1 &&
                     slots <= kMaxSlots && slot_bytes > 0 && slot_bytes % kPage == 0 &&
                     header_total == total && slot_bytes <= (total - kPage) / slots;
  if (!valid) {
    munmap(base, total);
    return DataLoss("shared segment " + name + " has a malformed header");
  }
  // Attached before adopting: page-locking a large mapping takes time the server is waiting.
  h->attached.store(1, std::memory_order_release);
  return std::shared_ptr<SharedSegment>(new SharedSegment(
      name, base, total, static_cast<int>(slots), slot_bytes, /*owner=*/false,
      std::move(adopter)));
}

bool SharedSegment::attached() const {
  return header()->attached.load(std::memory_order_acquire) != 0;
}

void SharedSegment::Unlink() {
  if (linked_.exchange(false)) shm_unlink(name_.c_str());
}

int SharedSegment::FindFree() const {
  for (int s = 0; s < slots_; ++s) {
    if (header()->state[s].load(std::memory_order_acquire) == shm_layout::kSlotFree) return s;
  }
  return -1;
}

uint8_t* SharedSegment::SlotData(int slot) const {
  return static_cast<uint8_t*>(base_) + kPage + slot_bytes_ * static_cast<uint64_t>(slot);
}

void SharedSegment::MarkFull(int slot) {
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

int RemoveStaleSegments() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(kPrefix, 0) != 0) continue;
    char* rest = nullptr;
    const long pid = std::strtol(name.c_str() + sizeof(kPrefix) - 1, &rest, 10);
    if (pid <= 0 || *rest != '-') continue;
    const uint64_t start = std::strtoull(rest + 1, nullptr, 10);
    // Its creator still runs when a process of that pid exists and started when it did (a
    // server restarted under the same pid, e.g. 1 in a container, has another start time).
    const bool exists = kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH;
    if (exists && StartTime(static_cast<pid_t>(pid)) == start) continue;
    if (shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
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
  return HasPrefix(target, {"unix:", "unix-abstract:", "127.", "localhost:", "[::1]:",
                            "ipv4:127.", "ipv6:[::1]:"});
}

}  // namespace sluice
