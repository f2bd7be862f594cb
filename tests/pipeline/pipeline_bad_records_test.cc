// Bad data in the pipeline under SKIP and FAIL: corrupt records and undecodable images are
// skipped and counted or end the stream, never lose good records, never hang, and resume exactly.
#include "pipeline/pipeline.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "formats/tfrecord_writer.h"
#include "tests/pipeline/pipeline_test_data.h"

namespace sluice {
namespace {

using testing::BaseOptions;
using testing::Iota;
using testing::RunToEnd;
using testing::Sorted;
using testing::TempDir;
using testing::WriteTestShards;

// Flips a byte inside record r's data (its length stays intact).
void CorruptData(const testing::TestShards& s, int file, int record) {
  std::string data = testing::ReadAll(s.paths[file]);
  data[s.index[file][record].offset + 12 + 3] ^= 0x20;
  testing::WriteAll(s.paths[file], data);
}

TEST_CASE("CorruptRecordIsSkippedAndCountedUnderSkip") {
  TempDir dir;
  auto shards = WriteTestShards(dir, 3, 10);
  CorruptData(shards, 1, 4);  // record id 14
  StatsSnapshot stats;
  auto c = RunToEnd(BaseOptions(dir), &stats);
  REQUIRE(c.status.ok());
  std::vector<int32_t> expected = Iota(30);
  expected.erase(expected.begin() + 14);
  CHECK(Sorted(c.labels_by_epoch[0]) == expected);
  CHECK(c.skipped == 1);
  CHECK(stats.skipped == 1);
  // Batches stay full: 29 images = 3 batches of 8 and one of 5.
  CHECK(c.sizes == std::vector<int>{8, 8, 8, 5});
  REQUIRE(stats.recent_errors.size() == 1);
  CHECK(stats.recent_errors[0].find("shard-1.tfrecord:" +
                                    std::to_string(shards.index[1][4].offset)) !=
        std::string::npos);
}

TEST_CASE("CorruptRecordEndsTheStreamUnderFailNamingFileAndOffset") {
  TempDir dir;
  auto shards = WriteTestShards(dir, 2, 10);
  CorruptData(shards, 0, 6);
  auto o = BaseOptions(dir);
  o.set_error_policy(v1::ERROR_POLICY_FAIL);
  auto c = RunToEnd(o);
  CHECK(c.status.code() == StatusCode::kDataLoss);
  CHECK(c.status.message().find("corrupted record at " + shards.paths[0] + ":" +
                                std::to_string(shards.index[0][6].offset)) != std::string::npos);
}

TEST_CASE("UndecodableImageIsSkippedUnderSkipAndFailsUnderFail") {
  TempDir dir;
  auto shards = WriteTestShards(dir, 1, 12);
  const size_t bad_offset = testing::ReadAll(shards.paths[0]).size();
  {
    // Append a record whose image bytes are not a JPEG.
    std::string data = testing::ReadAll(shards.paths[0]);
    std::string frame;
    AppendTFRecordFrame(EncodeImageExample({"not a jpeg", 99, "c", 1, 1, "bad"}), &frame);
    testing::WriteAll(shards.paths[0], data + frame);
  }
  StatsSnapshot stats;
  auto skip = RunToEnd(BaseOptions(dir), &stats);
  REQUIRE(skip.status.ok());
  CHECK(Sorted(skip.labels_by_epoch[0]) == Iota(12));
  CHECK(stats.skipped == 1);

  auto o = BaseOptions(dir);
  o.set_error_policy(v1::ERROR_POLICY_FAIL);
  auto fail = RunToEnd(o);
  CHECK(fail.status.code() == StatusCode::kInvalidArgument);
  CHECK(fail.status.message().find(shards.paths[0] + ":" + std::to_string(bad_offset) + ": ") ==
        0);
  CHECK(fail.status.message().find("PNG") == std::string::npos);
}

TEST_CASE("MaxErrorsEndsASkippingStream") {
  TempDir dir;
  auto shards = WriteTestShards(dir, 2, 10);
  CorruptData(shards, 0, 1);
  CorruptData(shards, 0, 2);
  CorruptData(shards, 1, 3);
  auto o = BaseOptions(dir);
  o.set_max_errors(2);
  auto c = RunToEnd(o);
  CHECK(c.status.code() == StatusCode::kDataLoss);
  CHECK(c.status.message().find("more than max_errors = 2 bad records") == 0);
}

// One shard whose record i is a good image labelled i when good(i), else a record whose image
// does not decode. Returns the labels of the good ones.
template <typename GoodFn>
std::vector<int32_t> WriteMixedShard(const TempDir& dir, int n, GoodFn good) {
  auto writer = TFRecordWriter::Create(dir.file("shard-0.tfrecord"));
  REQUIRE(writer.ok());
  std::vector<int32_t> labels;
  std::string jpeg = testing::IdJpeg(1);
  for (int i = 0; i < n; ++i) {
    bool ok = good(i);
    ImageRecord r{ok ? std::string_view(jpeg) : std::string_view("not a jpeg"), i, "c", 48, 64,
                  "x"};
    REQUIRE((*writer)->Write(EncodeImageExample(r)).ok());
    if (ok) labels.push_back(i);
  }
  REQUIRE((*writer)->Close().ok());
  return labels;
}

TEST_CASE("AlternatingBadRecordsNeitherExhaustBuffersNorLoseRecords") {
  TempDir dir;
  auto good = WriteMixedShard(dir, 2000, [](int i) { return i % 2 == 0; });
  auto o = BaseOptions(dir);
  o.set_batch_size(16);
  o.set_prefetch(2);
  o.set_threads(4);
  o.set_epochs(2);
  StatsSnapshot stats;
  auto c = RunToEnd(o, &stats, /*keep_images=*/false);
  REQUIRE(c.status.ok());
  CHECK(Sorted(c.labels_by_epoch[0]) == good);
  CHECK(Sorted(c.labels_by_epoch[1]) == good);
  CHECK(stats.skipped == 2000);
  for (int size : std::vector<int>(c.sizes.begin(), c.sizes.end() - 1)) {
    if (size != 16) CHECK(size == 8);  // only the last batch of each epoch is partial
  }
}

TEST_CASE("ResumingAfterAnyBatchContinuesExactlyDespiteSkippedRecords") {
  TempDir dir;
  WriteMixedShard(dir, 300, [](int i) { return i % 7 != 3; });
  auto o = BaseOptions(dir);
  o.set_epochs(2);
  o.set_threads(3);
  const auto full = RunToEnd(o);
  REQUIRE(full.status.ok());
  const size_t image_bytes = 32 * 40 * 3;
  std::vector<size_t> offsets{0};  // image byte offset of each batch
  for (int size : full.sizes) offsets.push_back(offsets.back() + size * image_bytes);
  const size_t n = full.positions.size();
  // The first batch, one mid-epoch, the last of epoch 0 (resuming passes the whole epoch), the
  // first of epoch 1, and the very last (resuming yields nothing).
  size_t last_of_epoch0 = 0;
  while (full.positions[last_of_epoch0 + 1].epoch == 0) ++last_of_epoch0;
  for (size_t k : {size_t{0}, size_t{5}, last_of_epoch0, last_of_epoch0 + 1, n - 1}) {
    CAPTURE(k);
    BatchPosition p = full.positions[k];
    const auto rest = RunToEnd(o, nullptr, true, BatchPosition{p.epoch, p.index + 1, p.end_record});
    REQUIRE(rest.status.ok());
    CHECK(rest.positions == std::vector<BatchPosition>(full.positions.begin() + k + 1,
                                                       full.positions.end()));
    CHECK(rest.image_bytes == full.image_bytes.substr(offsets[k + 1]));
  }
}

TEST_CASE("RunOfBadRecordsLongerThanTheWindowDoesNotHang") {
  TempDir dir;
  auto good = WriteMixedShard(dir, 200, [](int i) { return i >= 150; });
  auto o = BaseOptions(dir);
  o.set_batch_size(8);
  o.set_prefetch(1);  // window of 24 records
  o.mutable_shuffle()->set_buffer_size(0);
  auto c = RunToEnd(o, nullptr, /*keep_images=*/false);
  REQUIRE(c.status.ok());
  CHECK(Sorted(c.labels_by_epoch[0]) == good);
}

TEST_CASE("EpochOfOnlyBadRecordsEndsOrFailsButNeverHangs") {
  TempDir dir;
  WriteMixedShard(dir, 100, [](int) { return false; });
  auto o = BaseOptions(dir);
  o.set_batch_size(8);
  o.set_prefetch(1);
  o.set_epochs(2);
  auto finite = RunToEnd(o, nullptr, /*keep_images=*/false);
  CHECK(finite.status.ok());  // two epochs of nothing: end of sequence
  CHECK(finite.positions.empty());
  o.set_epochs(0);
  auto forever = RunToEnd(o, nullptr, /*keep_images=*/false);
  CHECK(forever.status.code() == StatusCode::kInvalidArgument);
  CHECK(forever.status.message().find("no record of epoch 0 could be used") == 0);
}

}  // namespace
}  // namespace sluice
