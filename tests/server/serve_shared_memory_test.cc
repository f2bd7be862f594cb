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
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "client/wire/shared_segment.h"
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

std::string Metadata(const grpc::ClientContext& context, const char* key) {
  const auto& metadata = context.GetServerInitialMetadata();
  auto it = metadata.find(key);
  return it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
}

// A stream asked for through the generated stub, as a hostile process or a test does by hand:
// shared memory with 4 slots, its initial metadata (the segment's name, the attach key) in hand.
struct RawSharedStream {
  explicit RawSharedStream(const std::string& address)
      : channel(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())),
        stub(v1::DataService::NewStub(channel)) {
    v1::StreamRequest request = Request();
    request.set_shared_memory(true);
    request.set_shared_memory_slots(4);
    reader = stub->StreamBatches(&context, request);
    reader->WaitForInitialMetadata();
  }
  std::string segment() const { return Metadata(context, shm_layout::kSegmentKey); }
  std::string attach_key() const { return Metadata(context, shm_layout::kAttachKeyKey); }

  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::DataService::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::Batch>> reader;
};

// The server's shared-memory gauges once `streams` streams use shared memory (the server's own
// count; its OnDone lowers it when a stream ends).
v1::Stats StatsOnceStreamsAre(Client& client, int streams) {
  for (;;) {
    Result<v1::Stats> stats = client.GetStats();
    INFO(stats.status().ToString());
    REQUIRE(stats.ok());
    if (stats->shared_memory_streams() == streams) return *stats;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
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
  const bool first_shared = (*honest)->shared_memory_batches() > 0;  // it reads ahead
  if (!first_shared) WARN("the honest stream did not attach in time: it gets ordinary batches");

  // The hostile client: asks for shared memory, opens the segment it is named as the protocol
  // allows, and then does everything the protocol does not.
  RawSharedStream raw(server.address());
  const std::string name = raw.segment();
  REQUIRE(!name.empty());
  const std::string path = PathOf(name);
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
  // Attached as the protocol says: the key the server sent, into the attach field.
  const std::string key = raw.attach_key();
  REQUIRE(key.size() == 2 * shm_layout::kAttachKeyBytes);
  for (size_t i = 0; i < shm_layout::kAttachKeyBytes; ++i) {
    base[shm_layout::kHeaderFields[6].offset + i] =
        static_cast<uint8_t>(std::stoi(key.substr(2 * i, 2), nullptr, 16));
  }
  v1::Batch batch;
  CHECK(raw.reader->Read(&batch));
  CHECK(batch.has_shared_memory());
  // Every byte of the header scribbled over: each state word now a value the server never
  // writes. The hostile stream ends, with an error that says why.
  std::memset(base, 0xa5, shm_layout::kHeaderBytes);
  int batches = 1;
  while (raw.reader->Read(&batch)) ++batches;
  const grpc::Status hostile = raw.reader->Finish();
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
  // However it started (on a loaded machine the client may miss the 2 s attach deadline and get
  // ordinary batches), the honest stream kept its way to its end.
  CHECK((*honest)->shared_memory_batches() == (first_shared ? 20 : 0));
  CHECK((*honest)->reconnects() == 0);
  CHECK(honest_client->GetStats().ok());
}

TEST_CASE("AnotherProcessSettingAttachCannotTakeAStreamFromTheClientItWasNamedTo") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  RawSharedStream raw(server.address());
  const std::string name = raw.segment();
  const std::string key = raw.attach_key();
  REQUIRE(!name.empty());
  {
    // Another process of the server's user finds the pending segment and marks it attached the
    // way layout 2 did (and with anything else but the key). Before attach keys, the server took
    // that for the client, retracted the name, and the client named could no longer open it.
    const UniqueFd fd(open(PathOf(name).c_str(), O_RDWR));
    REQUIRE(fd.valid());
    uint8_t marks[shm_layout::kAttachKeyBytes];
    std::memset(marks, 1, sizeof(marks));
    REQUIRE(pwrite(fd.get(), marks, sizeof(marks),
                   static_cast<off_t>(shm_layout::kHeaderFields[6].offset)) ==
            static_cast<ssize_t>(sizeof(marks)));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the watcher looks every 2 ms
  // The client named still opens it, attaches, and gets its batches through it.
  auto client = SharedSegment::Open(name, key, {4, shm_layout::kMaxSlotBytes});
  REQUIRE(client.ok());
  v1::Batch batch;
  REQUIRE(raw.reader->Read(&batch));
  CHECK(batch.has_shared_memory());
  raw.context.TryCancel();
  while (raw.reader->Read(&batch)) {
  }
  raw.reader->Finish();
}

TEST_CASE("ACancelledStreamsSegmentStaysAccountedUntilTheClientFreesItsSlots") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto stats_client = Connect(server.address());
  RawSharedStream raw(server.address());
  auto opened =
      SharedSegment::Open(raw.segment(), raw.attach_key(), {4, shm_layout::kMaxSlotBytes});
  REQUIRE(opened.ok());
  std::shared_ptr<SharedSegment> client = std::move(*opened);
  // Every slot filled and held: four batches read, none freed.
  std::vector<uint32_t> held;
  v1::Batch batch;
  for (int i = 0; i < 4; ++i) {
    REQUIRE(raw.reader->Read(&batch));
    REQUIRE(batch.has_shared_memory());
    REQUIRE(client->Full(batch.shared_memory().slot(), batch.shared_memory().length()).ok());
    held.push_back(batch.shared_memory().slot());
  }
  const int64_t bytes = StatsOnceStreamsAre(*stats_client, 1).shared_memory_bytes();
  CHECK(bytes == static_cast<int64_t>(client->total_bytes()));
  // Cancelled, the mapping kept: the stream is over, its segment's pages are not.
  raw.context.TryCancel();
  while (raw.reader->Read(&batch)) {
  }
  raw.reader->Finish();
  CHECK(StatsOnceStreamsAre(*stats_client, 0).shared_memory_bytes() == bytes);
  // Every slot freed: the pages are punched out and the reservation goes.
  for (uint32_t slot : held) client->Free(static_cast<int>(slot));
  for (;;) {
    Result<v1::Stats> stats = stats_client->GetStats();
    REQUIRE(stats.ok());
    if (stats->shared_memory_bytes() == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(client->SlotData(static_cast<int>(held[0]))[0] == 0);  // what stays mapped reads zeros
}

TEST_CASE("ASegmentTheClientUnmapsAfterCancelIsReleased") {
  Fixture f;
  ServerProcess server(f.Args());
  REQUIRE(server.running());
  auto stats_client = Connect(server.address());
  RawSharedStream raw(server.address());
  auto opened =
      SharedSegment::Open(raw.segment(), raw.attach_key(), {4, shm_layout::kMaxSlotBytes});
  REQUIRE(opened.ok());
  v1::Batch batch;
  REQUIRE(raw.reader->Read(&batch));
  REQUIRE(batch.has_shared_memory());
  CHECK(StatsOnceStreamsAre(*stats_client, 1).shared_memory_bytes() > 0);
  raw.context.TryCancel();
  while (raw.reader->Read(&batch)) {
  }
  raw.reader->Finish();
  CHECK(StatsOnceStreamsAre(*stats_client, 0).shared_memory_bytes() > 0);
  opened = Status::OK();  // unmapped: the attach key cleared, whatever slots were left full
  for (;;) {
    Result<v1::Stats> stats = stats_client->GetStats();
    REQUIRE(stats.ok());
    if (stats->shared_memory_bytes() == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace
}  // namespace sluice
