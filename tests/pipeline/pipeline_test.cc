// Pipeline semantics, each pinned on real shards of real JPEGs: exactly-once, sharding,
// determinism, epochs, remainders, bad data under SKIP and FAIL, caches and memory.
#include "pipeline/pipeline.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <thread>

#include "formats/record_index.h"
#include "formats/tfrecord_reader.h"
#include "tests/pipeline/pipeline_test_data.h"

namespace sluice {
namespace {

using testing::BaseOptions;
using testing::RunToEnd;
using testing::TempDir;
using testing::WriteTestShards;

std::vector<int32_t> Sorted(std::vector<int32_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<int32_t> Iota(int n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST_CASE("EveryRecordExactlyOncePerEpoch") {
  TempDir dir;
  auto shards = WriteTestShards(dir, 5, 37);
  auto o = BaseOptions(dir);
  o.set_epochs(3);
  auto c = RunToEnd(o);
  REQUIRE(c.status.ok());
  REQUIRE(c.labels_by_epoch.size() == 3);
  for (const auto& labels : c.labels_by_epoch) CHECK(Sorted(labels) == Iota(shards.records));
  // 185 records in batches of 8: 23 full and one of 1, per epoch, indexed from 0; end_record
  // counts the epoch's records up to each batch's last image.
  CHECK(c.positions.size() == 3 * 24);
  CHECK(c.positions[0] == BatchPosition{0, 0, 8});
  CHECK(c.positions[23] == BatchPosition{0, 23, 185});
  CHECK(c.sizes[23] == 1);
  CHECK(c.positions[24] == BatchPosition{1, 0, 8});
}

TEST_CASE("NewEpochHasNewOrder") {
  TempDir dir;
  WriteTestShards(dir, 3, 30);
  auto o = BaseOptions(dir);
  o.set_epochs(2);
  auto c = RunToEnd(o);
  REQUIRE(c.status.ok());
  CHECK(c.labels_by_epoch[0] != c.labels_by_epoch[1]);
  CHECK(Sorted(c.labels_by_epoch[0]) == Sorted(c.labels_by_epoch[1]));
}

TEST_CASE("SameSeedGivesIdenticalBytesAcrossThreadCounts") {
  TempDir dir;
  WriteTestShards(dir, 4, 25);
  auto o = BaseOptions(dir);
  o.set_epochs(2);
  o.set_threads(1);
  auto one = RunToEnd(o);
  o.set_threads(3);
  auto three = RunToEnd(o);
  REQUIRE(one.status.ok());
  REQUIRE(three.status.ok());
  CHECK(one.labels_by_epoch == three.labels_by_epoch);
  CHECK(one.image_bytes == three.image_bytes);
  o.set_seed(43);
  auto other = RunToEnd(o);
  CHECK(other.image_bytes != one.image_bytes);
}

TEST_CASE("ShardsPartitionTheData") {
  // 5 files over 3 shards: whole files per shard; 2 files over 3 shards: every 3rd record.
  for (int files : {5, 2}) {
    TempDir dir;
    auto shards = WriteTestShards(dir, files, 20);
    std::vector<int32_t> all;
    for (int index = 0; index < 3; ++index) {
      auto o = BaseOptions(dir);
      o.mutable_shard()->set_index(index);
      o.mutable_shard()->set_count(3);
      auto c = RunToEnd(o);
      REQUIRE(c.status.ok());
      REQUIRE(c.labels_by_epoch.size() == 1);
      CHECK_FALSE(c.labels_by_epoch[0].empty());
      all.insert(all.end(), c.labels_by_epoch[0].begin(), c.labels_by_epoch[0].end());
    }
    INFO(files << " files");
    CHECK(Sorted(all) == Iota(shards.records));  // disjoint and complete
  }
}

TEST_CASE("DropRemainderDropsThePartialBatch") {
  TempDir dir;
  WriteTestShards(dir, 2, 21);
  auto o = BaseOptions(dir);
  o.set_drop_remainder(true);
  o.set_epochs(2);
  auto c = RunToEnd(o);
  REQUIRE(c.status.ok());
  CHECK(c.positions.size() == 2 * 5);
  for (int size : c.sizes) CHECK(size == 8);
}

TEST_CASE("FiniteEpochsEndWithEndOfSequenceEveryTime") {
  TempDir dir;
  WriteTestShards(dir, 1, 5);
  auto it = testing::StartIterator(BaseOptions(dir));
  Batch b;
  bool end = false;
  REQUIRE(it->GetNext(&b, &end).ok());
  CHECK_FALSE(end);
  CHECK(b.size() == 5);
  for (int i = 0; i < 3; ++i) {
    Batch again;
    REQUIRE(it->GetNext(&again, &end).ok());
    CHECK(end);
    CHECK_FALSE(again.valid());
  }
}

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

TEST_CASE("RecordCacheServesLaterEpochsWithoutFileIO") {
  TempDir dir;
  auto shards = WriteTestShards(dir, 3, 10);
  auto o = BaseOptions(dir);
  o.set_epochs(3);
  o.mutable_cache()->set_mode(v1::CACHE_RECORDS);
  auto it = testing::StartIterator(o);
  std::vector<std::vector<int32_t>> labels(3);
  bool removed = false;
  for (;;) {
    Batch b;
    bool end = false;
    REQUIRE(it->GetNext(&b, &end).ok());
    if (end) break;
    if (!removed) {
      // The source reads ahead, but files are committed to the cache as it finishes each; once
      // the first batch is out, make any later file access fail loudly.
      for (const auto& p : shards.paths) std::filesystem::remove(p);
      removed = true;
    }
    for (int32_t l : b.labels()) labels[b.position().epoch].push_back(l);
  }
  // Epoch 0 may have read its files before removal; epochs 1 and 2 must be whole regardless.
  CHECK(Sorted(labels[1]) == Iota(30));
  CHECK(Sorted(labels[2]) == Iota(30));
  StatsSnapshot s = it->Stats();
  CHECK(s.cache_entries == 30);
  CHECK_FALSE(s.cache_full);
}

TEST_CASE("DecodedCacheSkipsDecodeButCropsDifferEachEpoch") {
  TempDir dir;
  WriteTestShards(dir, 2, 12, 120, 90);
  auto o = BaseOptions(dir);
  o.set_epochs(3);
  o.mutable_shuffle()->set_buffer_size(0);
  o.set_no_shuffle_files(true);
  o.mutable_cache()->set_mode(v1::CACHE_DECODED);
  StatsSnapshot stats;
  auto c = RunToEnd(o, &stats);
  REQUIRE(c.status.ok());
  REQUIRE(c.labels_by_epoch.size() == 3);
  // Same records in the same order each epoch (no shuffle), but new random crops.
  CHECK(c.labels_by_epoch[0] == c.labels_by_epoch[1]);
  size_t per_epoch = c.image_bytes.size() / 3;
  CHECK(c.image_bytes.substr(0, per_epoch) != c.image_bytes.substr(per_epoch, per_epoch));
  CHECK(stats.cache_entries == 24);
  // Only the first epoch decoded JPEGs; later ones cropped from the cache.
  CHECK(stats.jpeg_decodes == 24);
  for (const auto& p : stats.pools) {
    if (p.name == "decoded_cache") CHECK(p.bytes > 0);
  }
}

TEST_CASE("DecodedCacheOverBudgetStopsGrowingAndSaysSo") {
  TempDir dir;
  WriteTestShards(dir, 2, 20, 120, 90);
  auto o = BaseOptions(dir);
  o.set_epochs(2);
  o.mutable_cache()->set_mode(v1::CACHE_DECODED);
  o.mutable_cache()->set_budget_bytes(200'000);  // a few cached images (~37 x 50 x 3 = 5.5 KB)
  o.mutable_cache()->set_decoded_short_side(160);
  StatsSnapshot stats;
  auto c = RunToEnd(o, &stats);
  REQUIRE(c.status.ok());
  CHECK(Sorted(c.labels_by_epoch[1]) == Iota(40));
  CHECK(stats.cache_full);
  for (const auto& p : stats.pools) {
    if (p.name == "decoded_cache") CHECK(p.peak_bytes <= 200'000);
  }
}

TEST_CASE("EvalModeIsTheSameEveryEpoch") {
  TempDir dir;
  WriteTestShards(dir, 2, 9);
  auto o = BaseOptions(dir);
  o.set_mode(v1::MODE_EVAL);
  o.set_epochs(2);
  o.mutable_shuffle()->set_buffer_size(0);
  o.set_no_shuffle_files(true);
  o.mutable_interleave()->set_cycle_length(1);
  auto c = RunToEnd(o);
  REQUIRE(c.status.ok());
  CHECK(c.labels_by_epoch[0] == Iota(18));
  size_t half = c.image_bytes.size() / 2;
  CHECK(c.image_bytes.substr(0, half) == c.image_bytes.substr(half));
}

TEST_CASE("BudgetTooSmallForTheBatchPoolIsRefused") {
  TempDir dir;
  WriteTestShards(dir, 1, 2);
  auto o = BaseOptions(dir);
  o.set_batch_size(256);
  o.set_image_height(224);
  o.set_image_width(224);
  o.set_memory_budget_bytes(64 << 20);
  auto p = Pipeline::Create(o);
  REQUIRE_FALSE(p.ok());
  CHECK(p.status().code() == StatusCode::kResourceExhausted);
  CHECK(p.status().message().find("memory_budget_bytes") == 0);
}

int64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * 4096;
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

uint64_t ReadBytes(const StatsSnapshot& s) {
  for (const auto& st : s.stages) {
    if (st.name == "read") return st.bytes;
  }
  return 0;
}

TEST_CASE("ResumingWithRecordIndexesReadsOnlyTheRecordsItUses") {
  TempDir dir;
  auto shards = WriteTestShards(dir, 4, 100);
  // A record whose data is damaged (its frame and the index stay intact): skipped alike by the
  // whole run and by every resumed one, whether it was read or materialized from the index.
  {
    std::string bytes = testing::ReadAll(shards.paths[1]);
    const IndexEntry e = shards.index[1][60];
    bytes[e.offset + kTFRecordHeaderBytes + 20] ^= 0x10;
    testing::WriteAll(shards.paths[1], bytes);
  }
  auto o = BaseOptions(dir);
  StatsSnapshot full_stats;
  const auto full = RunToEnd(o, &full_stats);
  REQUIRE(full.status.ok());
  CHECK(full.skipped == 1);
  const size_t image_bytes = 32 * 40 * 3;
  std::vector<size_t> offsets{0};
  for (int size : full.sizes) offsets.push_back(offsets.back() + size * image_bytes);
  auto resume_after = [&](size_t k, StatsSnapshot* stats) {
    const BatchPosition p = full.positions[k];
    return RunToEnd(o, stats, true, BatchPosition{p.epoch, p.index + 1, p.end_record});
  };
  for (size_t k : {size_t{3}, size_t{20}, size_t{40}, full.positions.size() - 2}) {
    CAPTURE(k);
    StatsSnapshot stats;
    const auto rest = resume_after(k, &stats);
    REQUIRE(rest.status.ok());
    CHECK(rest.positions == std::vector<BatchPosition>(full.positions.begin() + k + 1,
                                                       full.positions.end()));
    CHECK(rest.image_bytes == full.image_bytes.substr(offsets[k + 1]));
    if (k == 40) {
      // 328 of 400 records passed over: only the rest (and the shuffle buffer's) are read.
      CHECK(ReadBytes(stats) < ReadBytes(full_stats) / 3);
    }
  }
  SECTION("an index that does not match its file is not trusted") {
    testing::WriteAll(IndexPathFor(shards.paths[2]), "0 16\n");
    StatsSnapshot stats;
    const auto rest = resume_after(40, &stats);
    REQUIRE(rest.status.ok());
    CHECK(rest.image_bytes == full.image_bytes.substr(offsets[41]));
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

TEST_CASE("ConsumerHoldingEveryBatchGetsResourceExhaustedNotAHang") {
  TempDir dir;
  WriteTestShards(dir, 1, 3);
  auto o = BaseOptions(dir);
  o.set_prefetch(1);
  o.set_epochs(0);
  auto it = testing::StartIterator(o);
  std::vector<Batch> held;
  Status s;
  for (int i = 0; i < 20 && s.ok(); ++i) {
    Batch b;
    bool end = false;
    s = it->GetNext(&b, &end);
    if (s.ok()) held.push_back(std::move(b));
  }
  CHECK(s.code() == StatusCode::kResourceExhausted);
  CHECK(s.message().find("the consumer holds") == 0);
  CHECK(held.size() >= 3);  // prefetch + 2 may be held
}

int64_t StatusField(const std::string& name) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(name + ":", 0) == 0) return std::stoll(line.substr(name.size() + 1)) * 1024;
  }
  return -1;
}

TEST_CASE("ProcessRssStaysUnderASmallBudget") {
  TempDir dir;
  // ~60 MB of records (noisy 600x450 JPEGs), more than the whole budget.
  auto shards = WriteTestShards(dir, 4, 40, 600, 450, /*noisy=*/true);
  int64_t data_bytes = 0;
  for (const auto& p : shards.paths) data_bytes += static_cast<int64_t>(testing::ReadAll(p).size());
  auto o = BaseOptions(dir);
  o.set_epochs(3);
  o.set_batch_size(16);
  o.set_image_height(96);
  o.set_image_width(96);
  o.mutable_cache()->set_mode(v1::CACHE_RECORDS);
  const int64_t budget = 24 << 20;
  o.set_memory_budget_bytes(budget);
  const int64_t baseline = StatusField("VmRSS");
  StatsSnapshot stats;
  auto c = RunToEnd(o, &stats, /*keep_images=*/false);
  REQUIRE(c.status.ok());
  CHECK(Sorted(c.labels_by_epoch[2]) == Iota(160));
  CHECK(stats.cache_full);  // the data does not fit: the cache stopped at its budget
  for (const auto& p : stats.pools) {
    if (p.limit_bytes > 0) CHECK(p.peak_bytes <= p.limit_bytes);
  }
  INFO("data " << data_bytes << " peak RSS " << StatusField("VmHWM") << " baseline " << baseline);
  // Decoder scratch and thread stacks come on top of the accounted pools.
  CHECK(StatusField("VmHWM") - baseline < budget + (16 << 20));
}

TEST_CASE("SlowConsumerDoesNotGrowMemory") {
  TempDir dir;
  WriteTestShards(dir, 4, 60, 200, 150);
  auto o = BaseOptions(dir);
  o.set_epochs(0);  // forever
  o.set_batch_size(16);
  o.set_prefetch(2);
  auto it = testing::StartIterator(o);
  Batch b;
  bool end = false;
  REQUIRE(it->GetNext(&b, &end).ok());
  // Stop consuming for a while: the pipeline must stall at its window, not run on.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  StatsSnapshot s1 = it->Stats();
  int64_t rss1 = RssBytes();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  StatsSnapshot s2 = it->Stats();
  CHECK(s2.batches == s1.batches);
  CHECK(s2.batches <= static_cast<uint64_t>(o.prefetch()) + kBatchPoolExtra);
  CHECK(RssBytes() - rss1 < (4 << 20));
  for (int i = 0; i < 50; ++i) REQUIRE(it->GetNext(&b, &end).ok());
  CHECK(b.size() == 16);
}


}  // namespace
}  // namespace sluice
