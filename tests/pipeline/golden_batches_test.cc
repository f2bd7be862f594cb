// Golden hashes of whole streams: every batch's images, labels, positions and skip counts for a
// fixed data set and seed, pinned before the pipeline's restructuring (issue 13) and kept after
// it. A change that alters any byte of any batch, in any mode, cache or thread count, fails here.
// A deliberate change of output updates the table in the same commit and says why.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "tests/pipeline/pipeline_test_data.h"

namespace sluice {
namespace {

using testing::BaseOptions;
using testing::Collected;
using testing::RunToEnd;
using testing::TempDir;
using testing::WriteTestShards;

// FNV-1a, 64-bit: stable across compilers and standard libraries, unlike std::hash.
class Fnv64 {
 public:
  void Add(std::string_view bytes) {
    for (unsigned char c : bytes) {
      h_ ^= c;
      h_ *= 0x100000001b3ull;
    }
  }
  void Add(int64_t v) { Add(std::string_view(reinterpret_cast<const char*>(&v), sizeof v)); }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

uint64_t StreamHash(const Collected& c) {
  Fnv64 h;
  h.Add(c.image_bytes);
  for (const auto& labels : c.labels_by_epoch) {
    h.Add(static_cast<int64_t>(labels.size()));
    for (int32_t l : labels) h.Add(static_cast<int64_t>(l));
  }
  for (size_t i = 0; i < c.positions.size(); ++i) {
    h.Add(c.positions[i].epoch);
    h.Add(c.positions[i].index);
    h.Add(c.positions[i].end_record);
    h.Add(static_cast<int64_t>(c.sizes[i]));
    h.Add(static_cast<int64_t>(c.skipped_by_batch[i]));
  }
  h.Add(static_cast<int64_t>(c.skipped_after_last));
  return h.value();
}

struct GoldenCase {
  const char* name;
  void (*configure)(v1::PipelineOptions*);
  BatchPosition start;
  uint64_t expected;
};

// Shards of 5 files x 23 records, 72x56 noisy JPEGs, record 1:4 corrupted (a skip in every
// epoch, hashed with the batch that reports it, and the stream's trailing skips); the base options
// (32x40, batch 8, shuffle 20, seed 42) with two epochs.
const GoldenCase kCases[] = {
    {"train", [](v1::PipelineOptions*) {}, {}, 0x2ebb7149ac3b4e01ull},
    {"eval", [](v1::PipelineOptions* o) { o->set_mode(v1::MODE_EVAL); }, {}, 0x39ec52bdd53e3f61ull},
    {"record_cache",
     [](v1::PipelineOptions* o) { o->mutable_cache()->set_mode(v1::CACHE_RECORDS); },
     {},
     0x2ebb7149ac3b4e01ull},
    {"decoded_cache",
     [](v1::PipelineOptions* o) { o->mutable_cache()->set_mode(v1::CACHE_DECODED); },
     {},
     0x5a03f6cf9a093bbeull},
    {"interleave_blocks_no_file_shuffle",
     [](v1::PipelineOptions* o) {
       o->mutable_interleave()->set_cycle_length(2);
       o->mutable_interleave()->set_block_length(3);
       o->set_no_shuffle_files(true);
       o->set_drop_remainder(true);
     },
     {},
     0x83ffa0afe4bb367bull},
    {"file_shard_1_of_2",
     [](v1::PipelineOptions* o) {
       o->mutable_shard()->set_index(1);
       o->mutable_shard()->set_count(2);
       o->set_equal_shares(v1::EQUAL_SHARES_OFF);  // the shard as the sharding rule gives it
     },
     {},
     0x26f4e7012fb1c38eull},
    {"record_shard_2_of_7",
     [](v1::PipelineOptions* o) {
       o->mutable_shard()->set_index(2);
       o->mutable_shard()->set_count(7);
       o->set_equal_shares(v1::EQUAL_SHARES_OFF);  // the shard as the sharding rule gives it
     },
     {},
     0xd25e8983f04efee3ull},
    {"record_shard_2_of_7_pad",
     [](v1::PipelineOptions* o) {
       o->mutable_shard()->set_index(2);
       o->mutable_shard()->set_count(7);
       o->set_equal_shares(v1::EQUAL_SHARES_PAD);
     },
     {},
     0x9be62e6dcd266f45ull},
    {"file_shard_1_of_3_drop",
     [](v1::PipelineOptions* o) {
       o->mutable_shard()->set_index(1);
       o->mutable_shard()->set_count(3);
       o->set_equal_shares(v1::EQUAL_SHARES_DROP);
     },
     {},
     0x7c3f99cf2c977843ull},
    {"resumed_mid_epoch",
     [](v1::PipelineOptions* o) { o->set_accurate_idct(true); },
     {0, 5, 41},
     0xf82d92074e10cf46ull},
    // The presets written out are the defaults they stand for, byte for byte (issue 16).
    {"train_preset",
     [](v1::PipelineOptions* o) { o->add_transforms()->set_preset(v1::PRESET_IMAGENET_TRAIN); },
     {},
     0x2ebb7149ac3b4e01ull},
    {"eval_preset_in_train_mode",
     [](v1::PipelineOptions* o) { o->add_transforms()->set_preset(v1::PRESET_IMAGENET_EVAL); },
     {},
     0x39ec52bdd53e3f61ull},
    {"decoded_cache_train_preset",
     [](v1::PipelineOptions* o) {
       o->mutable_cache()->set_mode(v1::CACHE_DECODED);
       o->add_transforms()->set_preset(v1::PRESET_IMAGENET_TRAIN);
     },
     {},
     0x5a03f6cf9a093bbeull},
    {"decoded_cache_resumed_in_epoch_1",
     [](v1::PipelineOptions* o) { o->mutable_cache()->set_mode(v1::CACHE_DECODED); },
     {1, 2, 16},
     0x689440d677a4cf8aull},
};

void CorruptRecord(const testing::TestShards& s, int file, int record) {
  std::string data = testing::ReadAll(s.paths[file]);
  data[s.index[file][record].offset + 12 + 3] ^= 0x20;
  testing::WriteAll(s.paths[file], data);
}

TEST_CASE("SameSeedGivesTheGoldenStreamAtOneAndTwoThreads") {
  TempDir dir;
  auto shards = WriteTestShards(dir, 5, 23, 72, 56, /*noisy=*/true);
  CorruptRecord(shards, 1, 4);
  for (const GoldenCase& c : kCases) {
    for (int threads : {1, 2}) {
      auto o = BaseOptions(dir);
      o.set_epochs(2);
      o.set_threads(threads);
      c.configure(&o);
      const Collected got = RunToEnd(o, nullptr, true, c.start);
      INFO(c.name << " at " << threads << " threads");
      REQUIRE(got.status.ok());
      REQUIRE(!got.positions.empty());
      char hex[19];
      const uint64_t hash = StreamHash(got);
      std::snprintf(hex, sizeof hex, "0x%016llx", static_cast<unsigned long long>(hash));
      INFO("stream hash " << hex);
      CHECK(hash == c.expected);
    }
  }
}

// Shards of 5 files x 23 records, 72x56 noisy JPEGs each padded to ~48 KB (a long filename
// feature), through a budget small enough that the shuffle buffer's byte share (~490 KB) binds
// before its 20 records: the capped order, pinned (hashes taken when the cap was introduced).
// One interleaved file at a time keeps the read buffers within the small budget.
void WritePaddedShards(const TempDir& dir) {
  int id = 0;
  const std::string padding(48 << 10, 'p');
  for (int f = 0; f < 5; ++f) {
    auto writer = TFRecordWriter::Create(dir.file("shard-" + std::to_string(f) + ".tfrecord"));
    REQUIRE(writer.ok());
    for (int r = 0; r < 23; ++r, ++id) {
      const std::string jpeg = testing::IdJpeg(id, 72, 56, /*noisy=*/true);
      REQUIRE(
          (*writer)->Write(EncodeImageExample(ImageRecord{jpeg, id, "c", 56, 72, padding})).ok());
    }
    REQUIRE((*writer)->Close().ok());
  }
}

void SmallBudget(v1::PipelineOptions* o) {
  o->set_memory_budget_bytes(int64_t{5} << 20);
  o->mutable_interleave()->set_cycle_length(1);
}

const GoldenCase kCappedCases[] = {
    {"capped_train", SmallBudget, {}, 0x26dc77d34f9578a7ull},
    // The cache's 7 MiB come out of a 12 MiB budget, leaving the same share: capped_train's order,
    // epoch 1 served from the cache.
    {"capped_record_cache",
     [](v1::PipelineOptions* o) {
       SmallBudget(o);
       o->set_memory_budget_bytes(int64_t{12} << 20);
       o->mutable_cache()->set_mode(v1::CACHE_RECORDS);
       o->mutable_cache()->set_budget_bytes(int64_t{7} << 20);
     },
     {},
     0x26dc77d34f9578a7ull},
    {"capped_resumed_mid_epoch", SmallBudget, {0, 5, 41}, 0xccbe8a7ed5489556ull},
};

TEST_CASE("CappedShuffleGivesTheGoldenStreamAtOneAndTwoThreads") {
  TempDir dir;
  WritePaddedShards(dir);
  for (const GoldenCase& c : kCappedCases) {
    for (int threads : {1, 2}) {
      auto o = BaseOptions(dir);
      o.set_epochs(2);
      o.set_threads(threads);
      c.configure(&o);
      // A resumed start carries the share its batch did, as the clients pass it on.
      BatchPosition start = c.start;
      if (start.end_record > 0) {
        auto resolved = ResolveOptions(o);
        REQUIRE(resolved.ok());
        start.shuffle_bytes = resolved->shuffle_budget_bytes;
      }
      StatsSnapshot stats;
      const Collected got = RunToEnd(o, &stats, true, start);
      INFO(c.name << " at " << threads << " threads");
      REQUIRE(got.status.ok());
      REQUIRE(!got.positions.empty());
      CHECK(stats.shuffle_capped > 0);
      CHECK(got.positions.back().shuffle_bytes > 0);
      char hex[19];
      const uint64_t hash = StreamHash(got);
      std::snprintf(hex, sizeof hex, "0x%016llx", static_cast<unsigned long long>(hash));
      INFO("stream hash " << hex);
      CHECK(hash == c.expected);
    }
  }
}

}  // namespace
}  // namespace sluice
