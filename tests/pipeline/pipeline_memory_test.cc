// The pipeline's memory: record and decoded caches within their budgets, the batch pool's budget,
// and a process that stays small whatever the consumer does.
#include "pipeline/pipeline.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "formats/image_ops.h"
#include "tests/pipeline/pipeline_test_data.h"

namespace sluice {
namespace {

using testing::BaseOptions;
using testing::Iota;
using testing::RunToEnd;
using testing::Sorted;
using testing::TempDir;
using testing::WriteTestShards;

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

// A 3000x3000 JPEG for the DECODED cache, which decodes whole images: 27 MB of pixels, over the
// ~10 MB decode share of a 64 MiB budget, refused from its header; the small images decode within
// the share, their reservations never over the decode pool's limit together.
TEST_CASE("DecodePoolStaysWithinItsLimitWhenALargeImageIsRefused") {
  TempDir dir;
  WriteTestShards(dir, 2, 16);
  {
    std::vector<uint8_t> pixels(size_t{3000} * 3000 * 3, 128);
    std::string jpeg;
    JpegEncoder encoder;
    REQUIRE(encoder.Encode(ImageView{pixels.data(), 3000, 3000, 3000 * 3}, {}, &jpeg).ok());
    auto writer = TFRecordWriter::Create(dir.file("shard-large.tfrecord"));
    REQUIRE(writer.ok());
    REQUIRE((*writer)->Write(EncodeImageExample(ImageRecord{jpeg, 32, "c", 0, 0, "l.jpg"})).ok());
    REQUIRE((*writer)->Close().ok());
  }
  auto o = BaseOptions(dir);
  o.set_epochs(1);
  o.set_memory_budget_bytes(64 << 20);
  o.mutable_cache()->set_mode(v1::CACHE_DECODED);
  StatsSnapshot stats;
  auto c = RunToEnd(o, &stats, /*keep_images=*/false);
  REQUIRE(c.status.ok());
  CHECK(Sorted(c.labels_by_epoch[0]) == Iota(32));
  CHECK(c.skipped == 1);
  bool seen = false;
  for (const auto& p : stats.pools) {
    if (p.name != "decode") continue;
    seen = true;
    CHECK(p.limit_bytes > 0);
    CHECK(p.limit_bytes < int64_t{3000} * 3000 * 3);
    CHECK(p.peak_bytes > 0);
    CHECK(p.peak_bytes <= p.limit_bytes);
    CHECK(p.bytes == 0);
  }
  CHECK(seen);
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
