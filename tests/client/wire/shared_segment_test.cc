// The shared-memory segment on its own: the slot hand-over, and a client's checks of what a
// server (or anything else in /dev/shm) gives it.
#include "client/wire/shared_segment.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

namespace sluice {
namespace {

TEST_CASE("SlotsGoFreeFullFreeBetweenCreatorAndOpener") {
  auto created = SharedSegment::Create(3, 1000);
  REQUIRE(created.ok());
  std::shared_ptr<SharedSegment> server = *created;
  CHECK(server->slots() == 3);
  CHECK(server->slot_bytes() == 4096);  // rounded up to pages
  CHECK_FALSE(server->attached());
  auto opened = SharedSegment::Open(server->name());
  REQUIRE(opened.ok());
  std::shared_ptr<SharedSegment> client = *opened;
  CHECK(server->attached());

  CHECK(server->FindFree() == 0);
  std::memcpy(server->SlotData(0), "batch zero", 10);
  server->MarkFull(0);
  CHECK(server->FindFree() == 1);
  Result<std::span<const uint8_t>> bytes = client->Full(0, 10);
  REQUIRE(bytes.ok());
  CHECK(std::memcmp(bytes->data(), "batch zero", 10) == 0);
  // A slot the server did not fill, one past the end, a length past the slot: refused.
  CHECK(client->Full(1, 10).status().code() == StatusCode::kDataLoss);
  CHECK(client->Full(3, 10).status().code() == StatusCode::kDataLoss);
  CHECK(client->Full(0, 4097).status().code() == StatusCode::kDataLoss);
  client->Free(0);
  CHECK(server->FindFree() == 0);

  // Unlinked: new opens fail, both mappings still work.
  const std::string name = server->name();
  server->Unlink();
  CHECK(SharedSegment::Open(name).status().code() == StatusCode::kNotFound);
  server->MarkFull(2);
  CHECK(client->Full(2, 1).ok());
}

TEST_CASE("CreatorUnlinksItsSegmentWhenDestroyed") {
  std::string path;
  {
    auto created = SharedSegment::Create(2, 4096);
    REQUIRE(created.ok());
    path = "/dev/shm" + (*created)->name();
    CHECK(std::filesystem::exists(path));
  }
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("OpenRefusesNamesAndSegmentsThatAreNotSluices") {
  CHECK(SharedSegment::Open("/etc/passwd").status().code() == StatusCode::kInvalidArgument);
  CHECK(SharedSegment::Open("/sluice-../x").status().code() == StatusCode::kInvalidArgument);
  CHECK(SharedSegment::Open("other").status().code() == StatusCode::kInvalidArgument);
  CHECK(SharedSegment::Open("/sluice-1-0-none").status().code() == StatusCode::kNotFound);

  // Garbage where a header should be.
  const std::string name = "/sluice-" + std::to_string(getpid()) + "-test-garbage";
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, 8192) == 0);
  REQUIRE(write(fd, "not a segment", 13) == 13);
  close(fd);
  const Status garbage = SharedSegment::Open(name).status();
  shm_unlink(name.c_str());
  CHECK(garbage.code() == StatusCode::kDataLoss);
  CHECK(garbage.message().find(name) != std::string::npos);
}

TEST_CASE("OpenRefusesASegmentOthersMayWrite") {
  auto created = SharedSegment::Create(2, 4096);
  REQUIRE(created.ok());
  const std::string path = "/dev/shm" + (*created)->name();
  std::filesystem::permissions(path, std::filesystem::perms::others_write,
                               std::filesystem::perm_options::add);
  const Status s = SharedSegment::Open((*created)->name()).status();
  CHECK(s.code() == StatusCode::kFailedPrecondition);
  CHECK(s.message().find("not this user's alone") != std::string::npos);
}

TEST_CASE("StaleSegmentsAreThoseOfProcessesThatNoLongerRun") {
  auto mine = SharedSegment::Create(2, 4096);
  REQUIRE(mine.ok());
  // This pid with another start time: a predecessor that had the same pid (pid 1 in a
  // container), gone.
  const std::string stale =
      "/sluice-" + std::to_string(getpid()) + "-999999999999-0-00000000000000ff";
  const int fd = shm_open(stale.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  REQUIRE(fd >= 0);
  close(fd);
  CHECK(RemoveStaleSegments() >= 1);
  CHECK_FALSE(std::filesystem::exists("/dev/shm" + stale));
  CHECK(std::filesystem::exists("/dev/shm" + (*mine)->name()));  // its creator runs
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
