// What a same-host client of the server's own user can do to `sluice serve` through its
// shared-memory segment: not resize or reseal it, and, whatever it writes there, end no stream
// but its own.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <string>

#include "client/wire/shared_segment_layout.h"
#include "formats/file.h"
#include "tests/server/serve_fixture.h"

namespace sluice {
namespace {

using serve_testing::Connect;
using serve_testing::EachLabelOnce;
using serve_testing::Fixture;
using serve_testing::Got;
using serve_testing::ReadAll;
using serve_testing::Request;
using testing::ServerProcess;

// The file a segment name designates. Layout 1 named a /dev/shm object ("/sluice-…"); that form
// is kept here only so that this test, run against such a server (SLUICE_BIN), shows what it
// pins: the truncation there succeeds and the server dies of SIGBUS.
std::string PathOf(const std::string& name) {
  if (name.starts_with("/proc/")) return name.substr(0, name.find('#'));
  return "/dev/shm" + name;
}

TEST_CASE("HostileSharedMemoryClientCannotResizeTheSegmentAndEndsOnlyItsOwnStream") {
  Fixture f;  // 4 files x 40 records, batches of 8
  ServerProcess server(f.Args());
  REQUIRE(server.running());

  // An honest stream, through shared memory, started before the attack and finished after it.
  auto honest_client = Connect(server.address());
  auto honest = honest_client->Stream(Request());
  REQUIRE(honest.ok());
  Got first = ReadAll(**honest, 1);
  REQUIRE(first.status.ok());
  REQUIRE(first.metas.size() == 1);

  // The hostile client: asks for shared memory, opens the segment it is named as the protocol
  // allows, and then does everything the protocol does not.
  auto channel = grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials());
  auto stub = v1::DataService::NewStub(channel);
  grpc::ClientContext context;
  v1::StreamRequest request = Request();
  request.set_shared_memory(true);
  request.set_shared_memory_slots(4);
  auto reader = stub->StreamBatches(&context, request);
  reader->WaitForInitialMetadata();
  const auto& metadata = context.GetServerInitialMetadata();
  auto it = metadata.find(shm_layout::kSegmentKey);
  REQUIRE(it != metadata.end());
  const std::string path = PathOf(std::string(it->second.data(), it->second.size()));
  const UniqueFd fd(open(path.c_str(), O_RDWR));
  REQUIRE(fd.valid());
  struct stat st {};
  REQUIRE(fstat(fd.get(), &st) == 0);
  const auto total = static_cast<size_t>(st.st_size);

  // Resizing and resealing are refused by the kernel. (Truncated to its header page, the
  // segment would kill the server with SIGBUS at its next copy into a slot.)
  errno = 0;
  CHECK(ftruncate(fd.get(), static_cast<off_t>(total) * 2) == -1);
  CHECK(errno == EPERM);
  errno = 0;
  CHECK(ftruncate(fd.get(), 4096) == -1);
  CHECK(errno == EPERM);
  errno = 0;
  CHECK(fcntl(fd.get(), F_ADD_SEALS, F_SEAL_WRITE) == -1);
  CHECK(errno == EPERM);
  // Holes punched in every page, then attached: the server goes on through the segment.
  CHECK(fallocate(fd.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                  static_cast<off_t>(total)) == 0);
  auto* base =
      static_cast<uint8_t*>(mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0));
  REQUIRE(base != MAP_FAILED);
  const uint32_t attached = 1;
  std::memcpy(base + shm_layout::kHeaderFields[6].offset, &attached, sizeof(attached));
  v1::Batch batch;
  CHECK(reader->Read(&batch));
  CHECK(batch.has_shared_memory());
  // Every byte of the header scribbled over: each state word now a value the server never
  // writes. The hostile stream ends, with an error that says why.
  std::memset(base, 0xa5, shm_layout::kHeaderBytes);
  int batches = 1;
  while (reader->Read(&batch)) ++batches;
  const grpc::Status hostile = reader->Finish();
  INFO("hostile stream: " << hostile.error_message() << " after " << batches << " batches");
  CHECK(hostile.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(hostile.error_message(), Catch::Contains("slot"));
  munmap(base, total);

  // The server lives on, and the honest stream gets the rest of its epoch, each label once.
  Got rest = ReadAll(**honest);
  INFO("honest stream: " << rest.status.ToString());
  REQUIRE(rest.status.ok());
  std::vector<int32_t> labels = first.labels;
  labels.insert(labels.end(), rest.labels.begin(), rest.labels.end());
  CHECK(EachLabelOnce(labels, 160));
  CHECK((*honest)->shared_memory_batches() == 20);
  CHECK((*honest)->reconnects() == 0);
  CHECK(honest_client->GetStats().ok());
}

}  // namespace
}  // namespace sluice
