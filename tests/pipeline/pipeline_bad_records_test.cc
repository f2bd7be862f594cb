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
  CHECK(fail.status.message().find(
            "not a JPEG, PNG or WebP image (starts with 0x6E 0x6F 0x74 0x20)") !=
        std::string::npos);
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

TEST_CASE("SkipReasonsGroupByCodeAndMessageWithoutPathsAndNumbers") {
  // Three records of each: corrupted (their data checksums fail), too large for max_pixels (each
  // of another size), not a JPEG (each with other first bytes, which its header check names). Each
  // kind is one reason, whatever offsets, paths, sizes and bytes its messages name.
  TempDir dir;
  const std::string path = dir.file("shard-0.tfrecord");
  std::vector<uint64_t> offsets;
  {
    auto writer = TFRecordWriter::Create(path);
    REQUIRE(writer.ok());
    const std::string small = testing::IdJpeg(1);
    std::vector<std::string> jpegs = {small, small, small};
    for (int i = 0; i < 3; ++i) jpegs.push_back(testing::IdJpeg(2, 200 + 10 * i, 150 + 10 * i));
    for (const char* bytes : {"abcd", "wxyz", "1234"}) jpegs.push_back(bytes);
    uint64_t offset = 0;
    for (size_t i = 0; i < jpegs.size(); ++i) {
      const std::string ex =
          EncodeImageExample({jpegs[i], static_cast<int64_t>(i), "c", 48, 64, "x"});
      offsets.push_back(offset);
      offset += 16 + ex.size();
      REQUIRE((*writer)->Write(ex).ok());
    }
    REQUIRE((*writer)->Close().ok());
  }
  std::string data = testing::ReadAll(path);
  for (int i = 0; i < 3; ++i) data[offsets[i] + 12 + 3] ^= 0x20;
  testing::WriteAll(path, data);
  auto o = BaseOptions(dir);
  o.set_max_pixels(10000);
  o.set_epochs(1);
  auto c = RunToEnd(o);
  INFO(c.status.ToString());
  const std::string& m = c.status.message();
  REQUIRE(m.starts_with("no record of epoch 0 could be used (all 9 skipped): 3x "));
  const std::string reasons = m.substr(0, m.find("; the last: "));
  size_t groups = 0;
  for (size_t at = reasons.find("3x "); at != std::string::npos; at = reasons.find("3x ", at + 1)) {
    ++groups;
  }
  CHECK(groups == 3);
  CHECK(reasons.find("other reasons") == std::string::npos);
  CHECK(reasons.find("x corrupted record at " + path + ":") != std::string::npos);
  CHECK(reasons.find("x image of ") != std::string::npos);
  CHECK(reasons.find("x not a JPEG, PNG or WebP image (starts with 0x") != std::string::npos);
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
  // Finite or not, an epoch of nothing is the user's mistake to hear of, not an empty success.
  for (int64_t epochs : {1, 2, 0}) {
    CAPTURE(epochs);
    o.set_epochs(epochs);
    auto c = RunToEnd(o, nullptr, /*keep_images=*/false);
    CHECK(c.status.code() == StatusCode::kInvalidArgument);
    CHECK(c.status.message().find("no record of epoch 0 could be used (all 100 skipped): 100x ") ==
          0);
    CHECK(c.positions.empty());
  }
}

TEST_CASE("FilesWithoutRecordsFailTheStreamInsteadOfEndingEmpty") {
  TempDir dir;
  testing::WriteAll(dir.file("shard-0.tfrecord"), "");
  testing::WriteAll(dir.file("shard-1.tfrecord"), "");
  auto o = BaseOptions(dir);
  for (int64_t epochs : {1, 0}) {
    CAPTURE(epochs);
    o.set_epochs(epochs);
    auto c = RunToEnd(o);
    CHECK(c.status.code() == StatusCode::kFailedPrecondition);
    CHECK(c.status.message() == "epoch 0 has no records: the 2 files hold none");
  }
  // Resuming after an epoch's last record is no empty epoch.
  WriteTestShards(dir, 1, 8);
  o.set_epochs(1);
  auto rest = RunToEnd(o, nullptr, true, BatchPosition{0, 1, 8});
  CHECK(rest.status.ok());
  CHECK(rest.positions.empty());
}

TEST_CASE("AShardThatGetsNoRecordFailsNamingWhy") {
  TempDir dir;
  WriteTestShards(dir, 1, 4);  // records 0..3: shard 5 of 8 (records 5, 13, ...) gets none
  auto o = BaseOptions(dir);
  o.mutable_shard()->set_count(8);
  o.mutable_shard()->set_index(5);
  o.set_equal_shares(v1::EQUAL_SHARES_OFF);  // DROP would refuse it before it starts
  auto c = RunToEnd(o);
  CHECK(c.status.code() == StatusCode::kFailedPrecondition);
  CHECK(c.status.message() ==
        "epoch 0 has no records: shard 5 of 8 holds no records: the dataset has fewer files than "
        "shards, so each shard takes from every file the records r with r % 8 == 5, and none of "
        "the 1 file holds more than 5 records");
}

TEST_CASE("FewerUsableRecordsThanABatchWithDropRemainderFailInsteadOfYieldingNothing") {
  TempDir dir;
  WriteMixedShard(dir, 7, [](int i) { return i != 3; });  // 6 usable, 1 bad
  auto o = BaseOptions(dir);
  o.set_batch_size(8);
  o.set_drop_remainder(true);
  // epochs: 1 used to end OK with no batch; epochs: 0 decoded the same records forever.
  for (int64_t epochs : {1, 0}) {
    CAPTURE(epochs);
    o.set_epochs(epochs);
    auto c = RunToEnd(o);
    CHECK(c.status.code() == StatusCode::kFailedPrecondition);
    CHECK(c.status.message() ==
          "epoch 0 yields no batch: its 6 usable records < batch_size 8 with drop_remainder "
          "(1 more skipped)");
    CHECK(c.positions.empty());
  }
  // Without drop_remainder the same epoch is one short batch.
  o.set_drop_remainder(false);
  o.set_epochs(1);
  auto c = RunToEnd(o);
  REQUIRE(c.status.ok());
  CHECK(c.sizes == std::vector<int>{6});
}

// Skips that no batch follows: after the last full batch with drop_remainder, and at the end of
// a stream whose last records are bad. Every skip reaches a batch's skipped() or the end.
TEST_CASE("SkipsAfterTheLastBatchAreReportedAtTheEndOfTheStream") {
  TempDir dir;
  // 44 records, the last 4 bad: 40 good = 5 full batches of 8, then 4 skips.
  WriteMixedShard(dir, 44, [](int i) { return i < 40; });
  auto o = BaseOptions(dir);
  o.mutable_shuffle()->set_buffer_size(0);
  for (bool drop : {false, true}) {
    for (int64_t epochs : {1, 3}) {
      CAPTURE(drop, epochs);
      o.set_drop_remainder(drop);
      o.set_epochs(epochs);
      auto it = testing::StartIterator(o);
      uint64_t in_batches = 0;
      std::vector<uint64_t> per_batch;
      for (;;) {
        Batch b;
        bool end = false;
        REQUIRE(it->GetNext(&b, &end).ok());
        if (end) break;
        in_batches += b.skipped();
        per_batch.push_back(b.skipped());
      }
      CHECK(per_batch.size() == static_cast<size_t>(5 * epochs));
      // An epoch's tail skips ride on the next epoch's first batch; the last epoch's on the end.
      for (int64_t e = 1; e < epochs; ++e) CHECK(per_batch[5 * e] == 4);
      CHECK(it->SkippedAfterLastBatch() == 4);
      CHECK(in_batches + it->SkippedAfterLastBatch() == static_cast<uint64_t>(4 * epochs));
      CHECK(it->Stats().skipped == static_cast<uint64_t>(4 * epochs));
    }
  }
}

TEST_CASE("NegativeLabelsAndLabelsPastNumClassesAreSkippedNamingFileAndOffset") {
  TempDir dir;
  WriteTestShards(dir, 1, 30);  // labels 0..29
  auto o = BaseOptions(dir);
  o.set_label_offset(-1);  // record 0 gets -1
  o.set_num_classes(20);   // records 21..29 get 20..28
  StatsSnapshot stats;
  auto c = RunToEnd(o, &stats);
  REQUIRE(c.status.ok());
  std::vector<int32_t> expected = Iota(20);
  CHECK(Sorted(c.labels_by_epoch[0]) == expected);
  CHECK(stats.skipped == 10);
  bool negative = false, past = false;
  for (const std::string& e : stats.recent_errors) {
    negative |= e.find(
                    "shard-0.tfrecord:0: label is negative; -1 = feature "
                    "'image/class/label' + label_offset -1") != std::string::npos;
    past |= e.find(": label is not below num_classes 20; it is 28") != std::string::npos;
  }
  CHECK(negative);
  CHECK(past);

  o.set_error_policy(v1::ERROR_POLICY_FAIL);
  o.mutable_shuffle()->set_buffer_size(0);  // record 0 comes first
  auto fail = RunToEnd(o);
  CHECK(fail.status.code() == StatusCode::kInvalidArgument);
  CHECK(fail.status.message().find("shard-0.tfrecord:0: label is negative") != std::string::npos);
}

}  // namespace
}  // namespace sluice
