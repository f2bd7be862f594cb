// The server's encoding of a batch's per-sample extras (BatchExtras): valid, record_files and
// record_indexes reach any protobuf parser as Batch fields 5, 6 and 7, on the socket and the
// shared-memory encodings; valid only when some sample is padding, nothing for empty spans.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "client/wire/batch_wire.h"
#include "sluice/v1/service.pb.h"

namespace sluice {
namespace {

BatchMeta Meta() {
  BatchMeta m;
  m.epoch = 1;
  m.index = 4;
  m.end_record = 40;
  m.n = 3;
  m.height = 2;
  m.width = 2;
  return m;
}

// The socket encoding completed with its images, parsed as protobuf parses it.
v1::Batch ParsePrefixed(const BatchMeta& m, const std::vector<int32_t>& labels,
                        const BatchExtras& extras) {
  std::string bytes = EncodeBatchPrefix(m, labels, extras);
  bytes.append(m.image_bytes(), '\x5a');
  v1::Batch b;
  REQUIRE(b.ParseFromString(bytes));
  CHECK(b.images().size() == m.image_bytes());
  return b;
}

TEST_CASE("ExtrasAreWrittenAsBatchFieldsOnBothEncodings") {
  const BatchMeta m = Meta();
  const std::vector<int32_t> labels = {7, 8, 7};
  const std::vector<uint8_t> valid = {1, 1, 0};
  const std::vector<int32_t> files = {2, 0, 2};
  const std::vector<int64_t> records = {5, int64_t{1} << 40, 5};
  const BatchExtras extras{valid, files, records};
  v1::Batch shared;
  REQUIRE(shared.ParseFromString(EncodeSharedBatch(m, labels, 3, extras)));
  for (const v1::Batch& b : {ParsePrefixed(m, labels, extras), shared}) {
    REQUIRE(b.valid_size() == 3);
    CHECK(b.valid(0));
    CHECK(b.valid(1));
    CHECK_FALSE(b.valid(2));
    CHECK(std::vector<int32_t>(b.record_files().begin(), b.record_files().end()) == files);
    CHECK(std::vector<int64_t>(b.record_indexes().begin(), b.record_indexes().end()) ==
          records);
    CHECK(std::vector<int32_t>(b.labels().begin(), b.labels().end()) == labels);
  }
  CHECK(shared.shared_memory().slot() == 3);
}

TEST_CASE("AnAllValidMaskAndEmptySpansAreNotWritten") {
  const BatchMeta m = Meta();
  const std::vector<int32_t> labels = {1, 2, 3};
  const std::vector<uint8_t> all_valid = {1, 1, 1};
  const std::string plain = EncodeBatchPrefix(m, labels);
  CHECK(EncodeBatchPrefix(m, labels, BatchExtras{all_valid, {}, {}}) == plain);
  CHECK(EncodeSharedBatch(m, labels, 1, BatchExtras{all_valid, {}, {}}) ==
        EncodeSharedBatch(m, labels, 1));
  const v1::Batch b = ParsePrefixed(m, labels, {});
  CHECK(b.valid_size() == 0);
  CHECK(b.record_files_size() == 0);
  CHECK(b.record_indexes_size() == 0);
}

}  // namespace
}  // namespace sluice
