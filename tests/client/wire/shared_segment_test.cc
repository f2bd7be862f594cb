// The shared-memory segment on its own: the slot hand-over, a client's checks of what a server
// names (or what a reused descriptor holds), and the server's checks of what a client writes.
#include "client/wire/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace sluice {
namespace {

// The path part of a name ("/proc/<pid>/fd/<fd>"), and the descriptor a client gets from it.
std::string PathOf(const std::string& name) { return name.substr(0, name.find('#')); }
int OpenAsClient(const std::string& name) { return open(PathOf(name).c_str(), O_RDWR); }

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
  auto opened = SharedSegment::Open(server->name());
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
  CHECK(SharedSegment::Open(name).status().code() == StatusCode::kNotFound);
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
  const Status s = SharedSegment::Open(name).status();
  CHECK(s.code() == StatusCode::kDataLoss);
  CHECK_THAT(s.message(), Catch::Contains("another id"));
  CHECK_FALSE((*second)->attached());
  CHECK(SharedSegment::Open((*second)->name()).ok());
}

TEST_CASE("OpenRefusesNamesAndDescriptorsThatAreNotSealedSegments") {
  const std::string zeros(32, '0');
  const std::vector<std::string> names = {
      "/dev/shm/sluice-1-0-0",           "/proc/self/fd/3#" + zeros,   "/proc/1/fd/03#" + zeros,
      "/proc/1/fd/3#" + zeros.substr(1), "/proc/1/fd/3/../4#" + zeros, "other"};
  for (const std::string& name : names) {
    INFO(name);
    CHECK(SharedSegment::Open(name).status().code() == StatusCode::kInvalidArgument);
  }
  const std::string pid = std::to_string(getpid());

  // A descriptor that is a plain file (what a reused descriptor may hold): not even opened.
  testing::TempDir dir;
  testing::WriteAll(dir.file("data"), std::string(8192, 'x'));
  const UniqueFd file(open(dir.file("data").c_str(), O_RDONLY));
  const std::string file_name = "/proc/" + pid + "/fd/" + std::to_string(file.get()) + "#" + zeros;
  const Status not_memfd = SharedSegment::Open(file_name).status();
  CHECK(not_memfd.code() == StatusCode::kDataLoss);
  CHECK_THAT(not_memfd.message(), Catch::Contains("not a sluice segment"));

  // A memfd of the right name and a well-formed header, but not sealed: refused before mapping.
  const UniqueFd memfd(memfd_create(shm_layout::kMemfdName, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  REQUIRE(memfd.valid());
  auto created = SharedSegment::Create(1, 4096);
  REQUIRE(created.ok());
  REQUIRE(ftruncate(memfd.get(), 8192) == 0);
  REQUIRE(pwrite(memfd.get(), (*created)->SlotData(0) - 4096, 4096, 0) == 4096);
  const std::string id = (*created)->name().substr((*created)->name().find('#'));
  const Status unsealed =
      SharedSegment::Open("/proc/" + pid + "/fd/" + std::to_string(memfd.get()) + id).status();
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
    Result<int> free = server->FindFree();
    if (c.broken) {
      CHECK(free.status().code() == StatusCode::kFailedPrecondition);
      CHECK_THAT(free.status().message(), Catch::Contains("slot " + std::to_string(c.slot)));
    } else {
      REQUIRE(free.ok());
      CHECK(*free == 0);
    }
    CHECK(server->slots() == 2);
    CHECK(server->slot_bytes() == 4096);
  }
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
