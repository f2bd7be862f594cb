// The shared-memory segment on its own: the slot hand-over, a client's checks of what a server
// names (or what a reused descriptor holds), and the server's checks of what a client writes.
#include "client/wire/shared_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace sluice {
namespace {

// The path part of a name ("/proc/<pid>/fd/<fd>"), and the descriptor a client gets from it.
std::string PathOf(const std::string& name) { return name.substr(0, name.find('#')); }
int OpenAsClient(const std::string& name) { return open(PathOf(name).c_str(), O_RDWR); }

// The client's Open of what `server` created, as the server named it and with what was asked.
Result<std::shared_ptr<SharedSegment>> OpenAs(const SharedSegment& server) {
  return SharedSegment::Open(server.name(), server.attach_key(),
                             {server.slots(), server.slot_bytes()});
}
Result<std::shared_ptr<SharedSegment>> OpenName(const std::string& name, int slots = 2) {
  return SharedSegment::Open(name, std::string(32, '0'), {slots, 4096});
}

// A memfd as tests make them: MFD_NOEXEC_SEAL where the kernel knows it (vm.memfd_noexec=2
// refuses memfds without it), plain where it does not (EINVAL).
int TestMemfd(unsigned flags) {
#ifdef MFD_NOEXEC_SEAL
  const int fd = memfd_create(shm_layout::kMemfdName, flags | MFD_NOEXEC_SEAL);
  if (fd >= 0 || errno != EINVAL) return fd;
#endif
  return memfd_create(shm_layout::kMemfdName, flags);
}

// A client's mapping of the whole segment.
struct ClientMapping {
  ClientMapping(int fd, uint64_t total) : total(total) {
    base = static_cast<uint8_t*>(mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    REQUIRE(base != MAP_FAILED);
  }
  ~ClientMapping() { munmap(base, total); }
  ClientMapping(const ClientMapping&) = delete;
  ClientMapping& operator=(const ClientMapping&) = delete;
  uint32_t* word(size_t offset) const { return reinterpret_cast<uint32_t*>(base + offset); }
  uint8_t* base;
  uint64_t total;
};

size_t StateOffset(int slot) {
  return shm_layout::kHeaderFields[7].offset + sizeof(uint32_t) * static_cast<size_t>(slot);
}

TEST_CASE("SlotsGoFreeFullFreeBetweenCreatorAndOpener") {
  auto created = SharedSegment::Create(3, 1000);
  REQUIRE(created.ok());
  std::shared_ptr<SharedSegment> server = *created;
  CHECK(server->slots() == 3);
  CHECK(server->slot_bytes() == 4096);  // rounded up to pages
  CHECK_FALSE(server->attached());
  CHECK(server->name().starts_with("/proc/" + std::to_string(getpid()) + "/fd/"));
  auto opened = OpenAs(*server);
  REQUIRE(opened.ok());
  std::shared_ptr<SharedSegment> client = *opened;
  CHECK(server->attached());

  CHECK(*server->FindFree() == 0);
  std::memcpy(server->SlotData(0), "batch zero", 10);
  server->MarkFull(0);
  CHECK(*server->FindFree() == 1);
  Result<std::span<const uint8_t>> bytes = client->Full(0, 10);
  REQUIRE(bytes.ok());
  CHECK(std::memcmp(bytes->data(), "batch zero", 10) == 0);
  // A slot the server did not fill, one past the end, a length past the slot: refused.
  CHECK(client->Full(1, 10).status().code() == StatusCode::kDataLoss);
  CHECK(client->Full(3, 10).status().code() == StatusCode::kDataLoss);
  CHECK(client->Full(0, 4097).status().code() == StatusCode::kDataLoss);
  client->Free(0);
  CHECK(*server->FindFree() == 0);

  // Retracted: new opens fail, both mappings still work.
  const std::string name = server->name();
  server->Retract();
  CHECK(SharedSegment::Open(name, server->attach_key(), {3, 4096}).status().code() ==
        StatusCode::kNotFound);
  server->MarkFull(2);
  CHECK(client->Full(2, 1).ok());
}

TEST_CASE("ALateClientIsRefusedTheLaterSegmentInTheSameDescriptor") {
  auto first = SharedSegment::Create(2, 4096);
  REQUIRE(first.ok());
  const std::string name = (*first)->name();
  (*first)->Retract();
  auto second = SharedSegment::Create(2, 4096);  // the lowest free descriptor: the same number
  REQUIRE(second.ok());
  REQUIRE(PathOf((*second)->name()) == PathOf(name));
  const Status s = OpenName(name).status();
  CHECK(s.code() == StatusCode::kDataLoss);
  CHECK_THAT(s.message(), Catch::Contains("another id"));
  CHECK_FALSE((*second)->attached());
  CHECK(OpenAs(**second).ok());
}

TEST_CASE("OpenRefusesNamesAndDescriptorsThatAreNotSealedSegments") {
  const std::string zeros(32, '0');
  const std::vector<std::string> names = {
      "/dev/shm/sluice-1-0-0",           "/proc/self/fd/3#" + zeros,   "/proc/1/fd/03#" + zeros,
      "/proc/1/fd/3#" + zeros.substr(1), "/proc/1/fd/3/../4#" + zeros, "other"};
  for (const std::string& name : names) {
    INFO(name);
    CHECK(OpenName(name).status().code() == StatusCode::kInvalidArgument);
  }
  const std::string pid = std::to_string(getpid());

  // A descriptor that is a plain file (what a reused descriptor may hold): not even opened.
  testing::TempDir dir;
  testing::WriteAll(dir.file("data"), std::string(8192, 'x'));
  const UniqueFd file(open(dir.file("data").c_str(), O_RDONLY));
  const std::string file_name = "/proc/" + pid + "/fd/" + std::to_string(file.get()) + "#" + zeros;
  const Status not_memfd = OpenName(file_name).status();
  CHECK(not_memfd.code() == StatusCode::kDataLoss);
  CHECK_THAT(not_memfd.message(), Catch::Contains("not a sluice segment"));

  // A memfd of the right name and a well-formed header, but not sealed: refused before mapping.
  const UniqueFd memfd(TestMemfd(MFD_CLOEXEC | MFD_ALLOW_SEALING));
  REQUIRE(memfd.valid());
  auto created = SharedSegment::Create(1, 4096);
  REQUIRE(created.ok());
  REQUIRE(ftruncate(memfd.get(), 8192) == 0);
  REQUIRE(pwrite(memfd.get(), (*created)->SlotData(0) - 4096, 4096, 0) == 4096);
  const std::string id = (*created)->name().substr((*created)->name().find('#'));
  const Status unsealed =
      OpenName("/proc/" + pid + "/fd/" + std::to_string(memfd.get()) + id, 1).status();
  CHECK(unsealed.code() == StatusCode::kDataLoss);
  CHECK_THAT(unsealed.message(), Catch::Contains("sealed"));
}

TEST_CASE("AClientCanNeitherResizeNorResealTheSegmentAndHolesDoNotHurtTheServer") {
  auto created = SharedSegment::Create(2, 4096);
  REQUIRE(created.ok());
  std::shared_ptr<SharedSegment> server = *created;
  const UniqueFd fd(OpenAsClient(server->name()));
  REQUIRE(fd.valid());
  errno = 0;
  CHECK(ftruncate(fd.get(), 4096) == -1);
  CHECK(errno == EPERM);
  CHECK(ftruncate(fd.get(), static_cast<off_t>(server->total_bytes()) * 2) == -1);
  CHECK(errno == EPERM);
  CHECK(fcntl(fd.get(), F_ADD_SEALS, F_SEAL_WRITE) == -1);
  CHECK(errno == EPERM);
  // Punching out every page (header and slots) is allowed; the server's next writes just
  // fault in fresh pages.
  REQUIRE(fallocate(fd.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                    static_cast<off_t>(server->total_bytes())) == 0);
  Result<int> slot = server->FindFree();
  REQUIRE(slot.ok());
  std::memset(server->SlotData(*slot), 7, server->slot_bytes());
  server->MarkFull(*slot);
  CHECK(server->SlotData(*slot)[server->slot_bytes() - 1] == 7);
}

TEST_CASE("ServerEndsOnStateWordsTheProtocolNeverWritesAndIgnoresTheRestOfTheHeader") {
  struct Case {
    const char* what;
    int slot;
    uint32_t value;
    bool broken;
  };
  const Case cases[] = {
      {"a value that is neither free nor full", 1, 0xdeadbeef, true},
      {"full on a slot the server never filled", 1, shm_layout::kSlotFull, true},
      {"free on the slot the server filled: the client gave it back", 0, shm_layout::kSlotFree,
       false},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    auto created = SharedSegment::Create(2, 4096);
    REQUIRE(created.ok());
    std::shared_ptr<SharedSegment> server = *created;
    server->MarkFull(0);
    const UniqueFd fd(OpenAsClient(server->name()));
    REQUIRE(fd.valid());
    const ClientMapping client(fd.get(), server->total_bytes());
    // The header fields before the words scribbled over, too: the server never reads them.
    std::memset(client.base, 0xff, shm_layout::kHeaderFields[6].offset);
    *client.word(StateOffset(c.slot)) = c.value;
    Result<int> found = server->FindFree();
    if (c.broken) {
      CHECK(found.status().code() == StatusCode::kFailedPrecondition);
      CHECK_THAT(found.status().message(), Catch::Contains("slot " + std::to_string(c.slot)));
    } else {
      REQUIRE(found.ok());
      CHECK(*found == 0);
    }
    CHECK(server->slots() == 2);
    CHECK(server->slot_bytes() == 4096);
  }
}

TEST_CASE("ASegmentTruncatedWhileBeingCreatedIsRefusedNeverASigbus") {
  // Another process of this user opens every sluice memfd this one has, as soon as it appears in
  // /proc, and shrinks it to a page. Each Create either refuses the segment or seals it first:
  // the kernel then refuses the truncation (EPERM), and a write to the last slot cannot fault.
  const pid_t parent = getpid();
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const std::string dir = "/proc/" + std::to_string(parent) + "/fd";
    const std::string prefix = std::string("/memfd:") + shm_layout::kMemfdName;
    for (;;) {
      DIR* d = opendir(dir.c_str());
      if (d == nullptr) _exit(0);
      while (dirent* e = readdir(d)) {
        const std::string path = dir + "/" + e->d_name;
        char target[256];
        const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
        if (n <= 0 || std::string_view(target, static_cast<size_t>(n)).rfind(prefix, 0) != 0) {
          continue;
        }
        const int fd = open(path.c_str(), O_RDWR);
        if (fd < 0) continue;
        (void)!ftruncate(fd, 4096);
        close(fd);
      }
      closedir(d);
    }
  }
  int created = 0;
  int refused = 0;
  for (int i = 0; i < 40; ++i) {
    auto segment = SharedSegment::Create(4, 4 << 20);
    if (!segment.ok()) {
      CHECK(segment.status().code() == StatusCode::kFailedPrecondition);
      ++refused;
      continue;
    }
    ++created;
    std::memset((*segment)->SlotData(3), 1, (*segment)->slot_bytes());
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  INFO(created << " created, " << refused << " refused");
  CHECK(created + refused == 40);
}

TEST_CASE("OnlyTheClientSentTheAttachKeyAttaches") {
  auto created = SharedSegment::Create(2, 4096);
  REQUIRE(created.ok());
  std::shared_ptr<SharedSegment> server = *created;
  CHECK(server->attach_key().size() == 2 * shm_layout::kAttachKeyBytes);
  CHECK(server->name().find(server->attach_key()) == std::string::npos);
  {
    // Nowhere in the segment either: a process that opens it cannot learn it there.
    const UniqueFd fd(OpenAsClient(server->name()));
    REQUIRE(fd.valid());
    const ClientMapping other(fd.get(), server->total_bytes());
    const std::string bytes(reinterpret_cast<const char*>(other.base), shm_layout::kHeaderBytes);
    CHECK(bytes.find(server->attach_key()) == std::string::npos);
    // What another process writes into `attach` (the old protocol's 1, anything) is not attached.
    const size_t attach = shm_layout::kHeaderFields[6].offset;
    *other.word(attach) = 1;
    CHECK_FALSE(server->attached());
    std::memset(other.base + attach, 0xa5, shm_layout::kAttachKeyBytes);
    CHECK_FALSE(server->attached());
  }
  // A client with another key maps it but does not attach; the one sent the key does.
  std::string wrong = server->attach_key();
  wrong[0] = wrong[0] == '0' ? '1' : '0';
  auto stranger =
      SharedSegment::Open(server->name(), wrong, {server->slots(), server->slot_bytes()});
  REQUIRE(stranger.ok());
  CHECK_FALSE(server->attached());
  CHECK(SharedSegment::Open(server->name(), "not hex", {2, 4096}).status().code() ==
        StatusCode::kInvalidArgument);
  auto client = OpenAs(*server);
  REQUIRE(client.ok());
  CHECK(server->attached());
}

TEST_CASE("ASegmentDrainsWhenEveryFilledSlotIsFreedOrTheClientUnmapsIt") {
  auto created = SharedSegment::Create(3, 4096);
  REQUIRE(created.ok());
  std::shared_ptr<SharedSegment> server = *created;
  auto opened = OpenAs(*server);
  REQUIRE(opened.ok());
  std::shared_ptr<SharedSegment> client = std::move(*opened);
  server->MarkFull(0);
  server->MarkFull(1);
  std::memset(server->SlotData(1), 9, 4096);
  CHECK_FALSE(server->Drained());
  client->Free(0);
  CHECK_FALSE(server->Drained());
  // A slot whose batch was never sent is the server's to take back.
  server->Unfill(1);
  CHECK(server->Drained());

  // A client that holds a slot until it unmaps the segment: drained once it has.
  server->MarkFull(2);
  CHECK_FALSE(server->Drained());
  const UniqueFd fd(OpenAsClient(server->name()));
  REQUIRE(fd.valid());
  const ClientMapping other(fd.get(), server->total_bytes());
  client.reset();
  CHECK(server->Drained());
  // Discarded: the pages are gone, a mapping that stays reads zeros.
  CHECK(other.base[shm_layout::kHeaderBytes + 4096] == 9);
  server->Discard();
  CHECK(other.base[shm_layout::kHeaderBytes + 4096] == 0);
  CHECK(other.base[0] == 0);
}

// A sealed memfd of `size` bytes whose header says what the fields hold; its name.
struct ForgedSegment {
  ForgedSegment(uint64_t size, uint32_t slots, uint64_t slot_bytes, uint64_t total,
                const char* magic = "SLSHM003", uint32_t zero = 0, unsigned flags = 0)
      : fd(TestMemfd(MFD_CLOEXEC | MFD_ALLOW_SEALING | flags)) {
    if (!fd.valid()) return;
    REQUIRE(ftruncate(fd.get(), static_cast<off_t>(size)) == 0);
    uint8_t header[64] = {};
    std::memcpy(header, magic, 8);
    std::memcpy(header + 8, &slots, 4);
    std::memcpy(header + 12, &zero, 4);
    std::memcpy(header + 16, &slot_bytes, 8);
    std::memcpy(header + 24, &total, 8);
    std::memset(header + 32, 0xab, shm_layout::kIdBytes);
    // (hugetlbfs has no write(): its header stays zeros, never read.)
    if ((flags & MFD_HUGETLB) == 0) {
      REQUIRE(pwrite(fd.get(), header, sizeof(header), 0) == static_cast<ssize_t>(sizeof(header)));
    }
    REQUIRE(fcntl(fd.get(), F_ADD_SEALS, shm_layout::kRequiredSeals) == 0);
    name = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd.get()) + "#" +
           ToHex(std::span<const uint8_t>(header + 32, shm_layout::kIdBytes));
  }
  UniqueFd fd;
  std::string name;
};

TEST_CASE("OpenRefusesGeometryTheClientDidNotAskForNamingTheField") {
  constexpr uint64_t kPage = shm_layout::kHeaderBytes;
  const uint64_t two = SharedSegment::BytesFor(2, kPage);
  struct Case {
    const char* what;
    uint64_t size;
    uint32_t slots;
    uint64_t slot_bytes;
    uint64_t total;
    const char* magic;
    uint32_t zero;
    const char* message;
  };
  const Case cases[] = {
      {"a sparse terabyte", uint64_t{1} << 40, 2, kPage, uint64_t{1} << 40, "SLSHM003", 0,
       "bytes, not between one page and the"},
      {"less than a page", 100, 2, kPage, 100, "SLSHM003", 0, "not between one page"},
      {"another magic", two, 2, kPage, two, "SLSHM002", 0, "header field magic"},
      {"more slots than asked for", SharedSegment::BytesFor(1, kPage) + kPage, 1, 2 * kPage,
       SharedSegment::BytesFor(1, kPage) + kPage, "SLSHM003", 0, "header field slots is 1"},
      {"zero that is not", two, 2, kPage, two, "SLSHM003", 7, "header field zero is 7"},
      {"slots larger than asked for", SharedSegment::BytesFor(1, 3 * kPage) - kPage, 2,
       kPage * 3 / 2, SharedSegment::BytesFor(1, 3 * kPage) - kPage, "SLSHM003", 0,
       "header field slot_bytes is 6144"},
      {"total_bytes that is not the file's size", two, 2, kPage, two - kPage, "SLSHM003", 0,
       "header field total_bytes is"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    ForgedSegment forged(c.size, c.slots, c.slot_bytes, c.total, c.magic, c.zero);
    REQUIRE(forged.fd.valid());
    const Status s =
        SharedSegment::Open(forged.name, std::string(32, '0'), {2, 2 * kPage}).status();
    CHECK(s.code() == StatusCode::kDataLoss);
    CHECK_THAT(s.message(), Catch::Contains(c.message));
  }
  // A hugetlbfs memfd, where this host has huge pages to give one: not tmpfs, not mapped.
  ForgedSegment huge(2 << 20, 2, kPage, 2 << 20, "SLSHM003", 0, MFD_HUGETLB);
  if (huge.fd.valid()) {
    const Status s = SharedSegment::Open(huge.name, std::string(32, '0'), {2, 1 << 20}).status();
    CHECK(s.code() == StatusCode::kDataLoss);
    CHECK_THAT(s.message(), Catch::Contains("not on tmpfs"));
  } else {
    WARN("no hugetlbfs memfd on this host (" << std::strerror(errno) << "): not checked");
  }
  // Room for the largest dtype (float32): the request's transform set may choose any.
  CHECK(SharedSegment::MaxSlotBytesFor(8, 32, 0) == 8 * 32 * 32 * 3 * 4);
  CHECK(SharedSegment::MaxSlotBytesFor(0, 32, 32) == shm_layout::kMaxSlotBytes);
}

TEST_CASE("SameHostPeersAndTargetsAreUnixSocketsAndLoopback") {
  CHECK(IsSameHostPeer("unix:/tmp/sluice.sock"));
  CHECK(IsSameHostPeer("ipv4:127.0.0.1:52344"));
  CHECK(IsSameHostPeer("ipv6:[::1]:52344"));
  CHECK(IsSameHostPeer("unix-abstract:sluice"));
  CHECK(IsSameHostPeer("ipv6:[::ffff:127.0.0.1]:52344"));
  CHECK_FALSE(IsSameHostPeer("ipv4:10.0.0.7:52344"));
  CHECK_FALSE(IsSameHostPeer("ipv6:[fe80::1]:52344"));
  CHECK(IsSameHostTarget("127.0.0.1:50051"));
  CHECK(IsSameHostTarget("localhost:50051"));
  CHECK(IsSameHostTarget("unix:/run/sluice.sock"));
  CHECK(IsSameHostTarget("ipv6:[::1]:50051"));
  CHECK_FALSE(IsSameHostTarget("sluice.example.com:50051"));
  CHECK_FALSE(IsSameHostTarget("dns:///sluice:50051"));
}

}  // namespace
}  // namespace sluice
