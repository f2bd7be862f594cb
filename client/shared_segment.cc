#include "client/shared_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

namespace sluice {

struct SharedSegment::Header {
  char magic[8];
  uint32_t slots;
  uint32_t zero;
  uint64_t slot_bytes;
  uint64_t total_bytes;
  std::atomic<uint32_t> attached;
  std::atomic<uint32_t> state[kMaxSlots];
};

namespace {

constexpr char kMagic[8] = {'S', 'L', 'S', 'H', 'M', '0', '0', '1'};
constexpr uint64_t kPage = 4096;
constexpr char kPrefix[] = "sluice-";
static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free,
              "slot states must be lock-free to be shared between processes");

uint64_t RoundUp(uint64_t v) { return (v + kPage - 1) / kPage * kPage; }

Status Errno(const std::string& what, int error) {
  const std::string message = what + ": " + std::strerror(error);
  switch (error) {
    case ENOENT:
      return NotFound(message);
    case EACCES:
    case EPERM:
      return FailedPrecondition(message);
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return ResourceExhausted(message);
    default:
      return IOError(message);
  }
}

// A name no other live process uses: pid, a per-process counter, and randomness (an attacker
// cannot pre-create it; O_EXCL refuses it anyway).
std::string NewName() {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  const uint64_t random = (uint64_t{rd()} << 32) ^ rd();
  char buffer[96];
  std::snprintf(buffer, sizeof(buffer), "/%s%d-%llu-%016llx", kPrefix, static_cast<int>(getpid()),
                static_cast<unsigned long long>(counter.fetch_add(1)),
                static_cast<unsigned long long>(random));
  return buffer;
}

}  // namespace

SharedSegment::SharedSegment(std::string name, void* base, uint64_t total_bytes, bool owner,
                             std::shared_ptr<BufferAllocator> adopter)
    : name_(std::move(name)),
      base_(base),
      total_bytes_(total_bytes),
      owner_(owner),
      adopter_(std::move(adopter)),
      linked_(owner) {
  slots_ = static_cast<int>(header()->slots);
  slot_bytes_ = header()->slot_bytes;
  if (adopter_ != nullptr) adopter_->Adopt(base_, total_bytes_);
}

SharedSegment::~SharedSegment() {
  if (owner_) Unlink();
  if (adopter_ != nullptr) adopter_->Unadopt(base_, total_bytes_);
  munmap(base_, total_bytes_);
}

SharedSegment::Header* SharedSegment::header() const { return static_cast<Header*>(base_); }

Result<std::shared_ptr<SharedSegment>> SharedSegment::Create(int slots, uint64_t slot_bytes) {
  static_assert(sizeof(Header) <= kPage);
  if (slots < 1 || slots > kMaxSlots || slot_bytes == 0) {
    return InvalidArgument("shared segment of " + std::to_string(slots) + " slots of " +
                           std::to_string(slot_bytes) + " bytes");
  }
  const uint64_t slot = RoundUp(slot_bytes);
  const uint64_t total = kPage + slot * static_cast<uint64_t>(slots);
  const std::string name = NewName();
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("create shared segment " + name, errno);
  auto fail = [&](const std::string& what, int error) {
    close(fd);
    shm_unlink(name.c_str());
    return Errno(what + " of shared segment " + name + " (" + std::to_string(total) + " bytes)",
                 error);
  };
  if (const int e = posix_fallocate(fd, 0, static_cast<off_t>(total)); e != 0) {
    return fail("reserve space", e);
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return fail("map", errno);
  close(fd);
  auto* h = new (base) Header();
  std::memcpy(h->magic, kMagic, sizeof(kMagic));
  h->slots = static_cast<uint32_t>(slots);
  h->zero = 0;
  h->slot_bytes = slot;
  h->total_bytes = total;
  h->attached.store(0, std::memory_order_relaxed);
  for (auto& s : h->state) s.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  return std::shared_ptr<SharedSegment>(new SharedSegment(name, base, total, /*owner=*/true));
}

Result<std::shared_ptr<SharedSegment>> SharedSegment::Open(
    const std::string& name, std::shared_ptr<BufferAllocator> adopter) {
  if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos ||
      name.compare(1, sizeof(kPrefix) - 1, kPrefix) != 0) {
    return InvalidArgument("'" + name + "' is not a sluice shared segment name");
  }
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0) return Errno("open shared segment " + name, errno);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return Errno("stat shared segment " + name, e);
  }
  const uint64_t total = static_cast<uint64_t>(st.st_size);
  if (total < kPage) {
    close(fd);
    return DataLoss("shared segment " + name + " is " + std::to_string(total) + " bytes");
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_error = errno;
  close(fd);
  if (base == MAP_FAILED) return Errno("map shared segment " + name, map_error);
  const auto* h = static_cast<const Header*>(base);
  const bool valid = std::memcmp(h->magic, kMagic, sizeof(kMagic)) == 0 && h->slots >= 1 &&
                     h->slots <= kMaxSlots && h->slot_bytes > 0 && h->slot_bytes % kPage == 0 &&
                     h->total_bytes == total &&
                     h->slot_bytes <= (total - kPage) / h->slots;
  if (!valid) {
    munmap(base, total);
    return DataLoss("shared segment " + name + " has a malformed header");
  }
  std::shared_ptr<SharedSegment> segment(
      new SharedSegment(name, base, total, /*owner=*/false, std::move(adopter)));
  segment->header()->attached.store(1, std::memory_order_release);
  return segment;
}

bool SharedSegment::attached() const {
  return header()->attached.load(std::memory_order_acquire) != 0;
}

void SharedSegment::Unlink() {
  if (linked_.exchange(false)) shm_unlink(name_.c_str());
}

int SharedSegment::FindFree() const {
  for (int s = 0; s < slots_; ++s) {
    if (header()->state[s].load(std::memory_order_acquire) == 0) return s;
  }
  return -1;
}

uint8_t* SharedSegment::SlotData(int slot) const {
  return static_cast<uint8_t*>(base_) + kPage + slot_bytes_ * static_cast<uint64_t>(slot);
}

void SharedSegment::MarkFull(int slot) {
  header()->state[slot].store(1, std::memory_order_release);
}

Result<std::span<const uint8_t>> SharedSegment::Full(uint32_t slot, uint64_t length) const {
  if (slot >= static_cast<uint32_t>(slots_) || length > slot_bytes_) {
    return DataLoss("shared segment " + name_ + ": slot " + std::to_string(slot) + " of " +
                    std::to_string(length) + " bytes is outside its " + std::to_string(slots_) +
                    " slots of " + std::to_string(slot_bytes_) + " bytes");
  }
  if (header()->state[slot].load(std::memory_order_acquire) != 1) {
    return DataLoss("shared segment " + name_ + ": slot " + std::to_string(slot) +
                    " was named in a batch but is not full");
  }
  return std::span<const uint8_t>(SlotData(static_cast<int>(slot)), length);
}

void SharedSegment::Free(int slot) { header()->state[slot].store(0, std::memory_order_release); }

int RemoveStaleSegments() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(kPrefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + sizeof(kPrefix) - 1, nullptr, 10);
    if (pid <= 0 || pid == getpid()) continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours
    if (shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

bool IsSameHostPeer(const std::string& peer) {
  return peer.rfind("unix:", 0) == 0 || peer.rfind("ipv4:127.", 0) == 0 ||
         peer.rfind("ipv6:[::1]", 0) == 0 || peer.rfind("ipv6:%5B::1%5D", 0) == 0;
}

}  // namespace sluice
