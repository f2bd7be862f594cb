// Features through a real Pipeline: every sample's features are its own record's (an "id" column
// equal to its label), through the TRAIN preset and an EVAL list, with and without the DECODED
// cache (the same features and boxes every epoch, boxes moved with that epoch's crop), after a
// skipped record (compaction), in equal-shares padding (the repeated sample's features) and in an
// unlabeled dataset.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "formats/example_builder.h"
#include "formats/image_example.h"
#include "tests/pipeline/pipeline_test_data.h"
#include "tests/png_test_images.h"

namespace sluice {
namespace {

using testing::TempDir;

// Arrays of the options below, in FeatureSchema::arrays() order.
enum Array { kId, kTags, kName, kBoxes, kBoxLabels, kArrays };

// Record r's boxes: r % 4 of them; box k at a fixed place, with class r * 10 + k.
std::vector<float> BoxesOf(int r) {
  std::vector<float> coords;
  for (int k = 0; k < r % 4; ++k) {
    const float x = 0.1f * k + 0.01f * (r % 7), y = 0.05f * k;
    coords.insert(coords.end(), {x, y, x + 0.5f, y + 0.6f});
  }
  return coords;
}

// What a record holds instead of record r's JPEG and boxes.
enum class Variant { kJpeg, kPng, kNotAnImage, kInvertedBox };

// One record: a JPEG, its label r (unless unlabeled), "id" r, "tags" r % 3 values, "name", and
// its boxes.
std::string Record(int r, bool labeled = true, Variant variant = Variant::kJpeg) {
  std::string jpeg = testing::IdJpeg(r);
  if (variant == Variant::kNotAnImage) jpeg = "not a jpeg";
  if (variant == Variant::kPng) {
    testing::PngSpec png;
    png.width = 64;
    png.height = 48;
    testing::FillRandom(&png, static_cast<uint32_t>(r), false);
    jpeg = testing::WritePngWithLibpng(png);
  }
  ExampleBuilder b;
  b.AddBytes(kImageEncodedKey, jpeg);
  if (labeled) b.AddInt64(kImageLabelKey, r);
  b.AddInt64("id", r);
  std::vector<int64_t> tags;
  for (int k = 0; k < r % 3; ++k) tags.push_back(r + k);
  b.AddInt64s("tags", tags);
  const std::string name = "rec-" + std::to_string(r);
  b.AddBytes("name", name);
  std::vector<float> coords = BoxesOf(r);
  if (variant == Variant::kInvertedBox) std::swap(coords[0], coords[2]);
  std::vector<float> xmin, ymin, xmax, ymax;
  std::vector<int64_t> classes;
  for (size_t k = 0; k < coords.size() / 4; ++k) {
    xmin.push_back(coords[k * 4]);
    ymin.push_back(coords[k * 4 + 1]);
    xmax.push_back(coords[k * 4 + 2]);
    ymax.push_back(coords[k * 4 + 3]);
    classes.push_back(r * 10 + static_cast<int64_t>(k));
  }
  b.AddFloats("image/object/bbox/xmin", xmin);
  b.AddFloats("image/object/bbox/ymin", ymin);
  b.AddFloats("image/object/bbox/xmax", xmax);
  b.AddFloats("image/object/bbox/ymax", ymax);
  b.AddInt64s("image/object/class/label", classes);
  std::string out;
  b.Finish(&out);
  return out;
}

// Files of the given record counts, records numbered across them; records whose number is in
// `other` are written as `variant`. Returns each record's offset.
std::vector<uint64_t> WriteShards(const TempDir& dir, const std::vector<int>& sizes,
                                  bool labeled = true, const std::vector<int>& other = {},
                                  Variant variant = Variant::kJpeg) {
  std::vector<uint64_t> offsets;
  int r = 0;
  for (size_t f = 0; f < sizes.size(); ++f) {
    auto writer = TFRecordWriter::Create(dir.file("shard-" + std::to_string(f) + ".tfrecord"));
    REQUIRE(writer.ok());
    for (int i = 0; i < sizes[f]; ++i, ++r) {
      const bool is_other = std::find(other.begin(), other.end(), r) != other.end();
      REQUIRE((*writer)->Write(Record(r, labeled, is_other ? variant : Variant::kJpeg)).ok());
      offsets.push_back((*writer)->index().back().offset);
    }
    REQUIRE((*writer)->Close().ok());
  }
  return offsets;
}

v1::PipelineOptions Options(const TempDir& dir) {
  v1::PipelineOptions o = testing::BaseOptions(dir);
  auto* id = o.add_features();
  id->set_key("id");
  id->set_type(v1::FEATURE_TYPE_INT64);
  id->set_shape(v1::FEATURE_SHAPE_SCALAR);
  auto* tags = o.add_features();
  tags->set_key("tags");
  tags->set_type(v1::FEATURE_TYPE_INT64);
  auto* name = o.add_features();
  name->set_key("name");
  name->set_type(v1::FEATURE_TYPE_BYTES);
  name->set_shape(v1::FEATURE_SHAPE_SCALAR);
  o.mutable_boxes()->set_enabled(true);
  return o;
}

struct Sample {
  int32_t label = 0;
  bool valid = true;
  int64_t id = -1;
  std::vector<int64_t> tags;
  std::string name;
  std::vector<float> boxes;
  std::vector<int64_t> box_labels;
  std::string image;
  bool operator==(const Sample&) const = default;
};

template <typename T>
std::vector<T> Values(const FeatureValues& a) {
  std::vector<T> v(a.data.size() / sizeof(T));
  std::memcpy(v.data(), a.data.data(), a.data.size());
  return v;
}

struct Run {
  std::vector<std::vector<Sample>> epochs;
  StatsSnapshot stats;
  Status status;
};

Run RunAll(const v1::PipelineOptions& o, BatchPosition start = {},
           std::vector<BatchPosition>* positions = nullptr) {
  Run run;
  auto pipeline = Pipeline::Create(o);
  REQUIRE(pipeline.ok());
  auto it = (*pipeline)->MakeIterator(start);
  REQUIRE(it.ok());
  for (;;) {
    Batch b;
    bool end = false;
    run.status = (*it)->GetNext(&b, &end);
    if (!run.status.ok() || end) break;
    if (positions != nullptr) positions->push_back(b.position());
    const auto features = b.features();
    if (o.features_size() == 0 && !o.boxes().enabled()) continue;  // only the stats are wanted
    REQUIRE(features.size() == static_cast<size_t>(b.size()));
    const size_t image_bytes = b.images().size() / static_cast<size_t>(b.size());
    if (run.epochs.size() <= static_cast<size_t>(b.position().epoch)) {
      run.epochs.resize(b.position().epoch + 1);
    }
    for (int i = 0; i < b.size(); ++i) {
      const SampleFeatures& f = features[i];
      REQUIRE(f.arrays.size() == kArrays);
      Sample s;
      s.label = b.labels()[i];
      s.valid = b.valid_mask().empty() || b.valid_mask()[i] != 0;
      const std::vector<int64_t> id = Values<int64_t>(f.arrays[kId]);
      REQUIRE(id.size() == 1);
      s.id = id[0];
      s.tags = Values<int64_t>(f.arrays[kTags]);
      CHECK(f.arrays[kTags].rows == s.tags.size());
      s.name = f.arrays[kName].data;
      s.boxes = Values<float>(f.arrays[kBoxes]);
      s.box_labels = Values<int64_t>(f.arrays[kBoxLabels]);
      CHECK(f.arrays[kBoxes].rows * 4 == s.boxes.size());
      CHECK(f.arrays[kBoxLabels].rows == s.box_labels.size());
      s.image.assign(reinterpret_cast<const char*>(b.images().data()) + i * image_bytes,
                     image_bytes);
      run.epochs[b.position().epoch].push_back(std::move(s));
    }
  }
  run.stats = (*it)->Stats();
  return run;
}

// A sample's features are those of the record with its id, whatever became of its boxes: each
// kept box is one of the record's, in order, its class along with it, inside the output.
void CheckOwnFeatures(const Sample& s) {
  INFO("id " << s.id);
  const int r = static_cast<int>(s.id);
  std::vector<int64_t> tags;
  for (int k = 0; k < r % 3; ++k) tags.push_back(r + k);
  CHECK(s.tags == tags);
  CHECK(s.name == "rec-" + std::to_string(r));
  CHECK(s.box_labels.size() <= static_cast<size_t>(r % 4));
  int64_t last = -1;
  for (size_t k = 0; k < s.box_labels.size(); ++k) {
    CHECK(s.box_labels[k] / 10 == r);
    CHECK(s.box_labels[k] > last);
    last = s.box_labels[k];
    const float* b = &s.boxes[k * 4];
    CHECK(0 <= b[0]);
    CHECK(b[0] <= b[2]);
    CHECK(b[2] <= 1);
    CHECK(0 <= b[1]);
    CHECK(b[1] <= b[3]);
    CHECK(b[3] <= 1);
  }
}

std::map<int64_t, Sample> ById(const std::vector<Sample>& epoch) {
  std::map<int64_t, Sample> out;
  for (const Sample& s : epoch) out[s.id] = s;
  return out;
}

TEST_CASE("EverySampleCarriesItsOwnRecordsFeaturesThroughTheTrainPreset") {
  TempDir dir;
  WriteShards(dir, {13, 11});
  v1::PipelineOptions o = Options(dir);
  o.set_epochs(2);
  const Run run = RunAll(o);
  REQUIRE(run.status.ok());
  REQUIRE(run.epochs.size() == 2);
  uint64_t boxes_kept = 0;
  for (const auto& epoch : run.epochs) {
    REQUIRE(epoch.size() == 24);
    for (const Sample& s : epoch) {
      CHECK(s.id == s.label);
      CheckOwnFeatures(s);
      boxes_kept += s.box_labels.size();
    }
  }
  // Records r hold r % 4 boxes: 36 an epoch. The random crops drop some.
  CHECK(boxes_kept + run.stats.boxes_dropped == 72);
  CHECK(boxes_kept > 0);
}

TEST_CASE("AnEvalListMovesBoxesExactlyWithItsResizeAndFlipForJpegAndPng") {
  TempDir dir;
  WriteShards(dir, {10}, true, {1, 4, 5, 8}, Variant::kPng);
  v1::PipelineOptions o = Options(dir);
  o.set_mode(v1::MODE_EVAL);
  auto* resize = o.add_transforms()->mutable_resize();
  resize->add_size(32);
  resize->add_size(40);
  o.add_transforms()->mutable_flip()->set_horizontal_p(1);
  o.mutable_boxes()->set_min_size(0);
  const Run run = RunAll(o);
  REQUIRE(run.status.ok());
  REQUIRE(run.epochs.size() == 1);
  REQUIRE(run.epochs[0].size() == 10);
  for (const Sample& s : run.epochs[0]) {
    CheckOwnFeatures(s);
    const std::vector<float> in = BoxesOf(static_cast<int>(s.id));
    REQUIRE(s.boxes.size() == in.size());
    for (size_t k = 0; k < in.size() / 4; ++k) {
      CHECK(s.boxes[k * 4] == Approx(1 - in[k * 4 + 2]).margin(1e-6));
      CHECK(s.boxes[k * 4 + 1] == Approx(in[k * 4 + 1]).margin(1e-6));
      CHECK(s.boxes[k * 4 + 2] == Approx(1 - in[k * 4]).margin(1e-6));
      CHECK(s.boxes[k * 4 + 3] == Approx(in[k * 4 + 3]).margin(1e-6));
      CHECK(s.box_labels[k] == s.id * 10 + static_cast<int64_t>(k));
    }
  }
  CHECK(run.stats.boxes_dropped == 0);
  CHECK(run.stats.png_decodes == 4);
}

TEST_CASE("TheDecodedCacheGivesEveryEpochTheFeaturesAndTheBoxesOfItsOwnCrop") {
  TempDir dir;
  WriteShards(dir, {12, 12});
  v1::PipelineOptions o = Options(dir);
  o.set_epochs(3);
  // Cached at the images' own size (48 rows), so cached and fresh decodes crop alike.
  o.mutable_cache()->set_decoded_short_side(48);
  o.mutable_boxes()->set_min_size(0);
  const Run fresh = RunAll(o);
  o.mutable_cache()->set_mode(v1::CACHE_DECODED);
  const Run cached = RunAll(o);
  REQUIRE(fresh.status.ok());
  REQUIRE(cached.status.ok());
  REQUIRE(cached.epochs.size() == 3);
  CHECK(cached.stats.jpeg_decodes == 24);  // later epochs came from the cache
  int moved = 0;
  for (size_t e = 0; e < 3; ++e) {
    const auto want = ById(fresh.epochs[e]);
    const auto got = ById(cached.epochs[e]);
    REQUIRE(got.size() == 24);
    for (const auto& [id, s] : got) {
      INFO("epoch " << e << " id " << id);
      CheckOwnFeatures(s);
      CHECK(s.boxes == want.at(id).boxes);
      CHECK(s.box_labels == want.at(id).box_labels);
      CHECK(s.tags == want.at(id).tags);
      if (e > 0 && s.boxes != ById(cached.epochs[0]).at(id).boxes) ++moved;
    }
  }
  // Each epoch draws its own crop: the boxes of a cache hit are not epoch 0's.
  CHECK(moved > 10);
  CHECK(cached.stats.boxes_dropped == fresh.stats.boxes_dropped);

  // The cache's budget counts the features it keeps: at least their values' bytes.
  int64_t feature_bytes = 0;
  for (int r = 0; r < 24; ++r) {
    feature_bytes += 8 + 8 * (r % 3) + static_cast<int64_t>(("rec-" + std::to_string(r)).size()) +
                     4 + 24 * (r % 4);
  }
  v1::PipelineOptions plain = o;
  plain.clear_features();
  plain.clear_boxes();
  const Run images_only = RunAll(plain);
  REQUIRE(images_only.status.ok());
  auto cache_bytes = [](const StatsSnapshot& s) {
    for (const PoolSnapshot& p : s.pools) {
      if (p.name == "decoded_cache") return p.bytes;
    }
    FAIL("no decoded_cache pool");
    return int64_t{0};
  };
  // Each file's table of entries is charged as it grows, by how much depends on the order the
  // decode threads insert in (12 records: capacity 12 to 16 and more), so the two runs' tables may
  // differ by up to 2 files x 24 pointers, besides the features.
  const int64_t table_slack = 2 * 24 * static_cast<int64_t>(sizeof(void*));
  CHECK(cache_bytes(cached.stats) - cache_bytes(images_only.stats) >= feature_bytes - table_slack);
  CHECK(feature_bytes > 3 * table_slack);
}

TEST_CASE("FeaturesStayWithTheirImagesWhenASkippedRecordCompactsTheBatch") {
  TempDir dir;
  WriteShards(dir, {20}, true, {3, 9}, Variant::kNotAnImage);
  v1::PipelineOptions o = Options(dir);
  o.clear_shuffle();
  o.set_threads(3);
  const Run run = RunAll(o);
  REQUIRE(run.status.ok());
  CHECK(run.stats.skipped == 2);
  REQUIRE(run.epochs.size() == 1);
  REQUIRE(run.epochs[0].size() == 18);
  for (const Sample& s : run.epochs[0]) {
    CHECK(s.id == s.label);
    CHECK(s.id != 3);
    CHECK(s.id != 9);
    CheckOwnFeatures(s);
  }
}

TEST_CASE("EqualSharesPaddingRepeatsSamplesWithTheirFeatures") {
  TempDir dir;
  WriteShards(dir, {10, 13, 9, 11, 9});
  v1::PipelineOptions o = Options(dir);
  o.set_batch_size(4);
  o.mutable_shard()->set_index(2);
  o.mutable_shard()->set_count(3);
  o.set_equal_shares(v1::EQUAL_SHARES_PAD);
  const Run run = RunAll(o);
  REQUIRE(run.status.ok());
  REQUIRE(run.epochs.size() == 1);
  int padded = 0;
  for (const Sample& s : run.epochs[0]) {
    CHECK(s.id == s.label);
    CheckOwnFeatures(s);
    if (s.valid) continue;
    ++padded;
    // A repeat is the same sample: image, label and every feature.
    Sample real = s;
    real.valid = true;
    CHECK(std::find(run.epochs[0].begin(), run.epochs[0].end(), real) != run.epochs[0].end());
  }
  CHECK(padded > 0);
  CHECK(run.stats.padded_samples == static_cast<uint64_t>(padded));
}

TEST_CASE("ARecordWithBadBoxesIsSkippedNamingFileOffsetAndKey") {
  TempDir dir;
  const std::vector<uint64_t> offsets = WriteShards(dir, {12}, true, {6}, Variant::kInvertedBox);
  v1::PipelineOptions o = Options(dir);
  const Run run = RunAll(o);
  REQUIRE(run.status.ok());
  CHECK(run.stats.skipped == 1);
  REQUIRE(run.epochs.size() == 1);
  CHECK(run.epochs[0].size() == 11);
  for (const Sample& s : run.epochs[0]) {
    CHECK(s.id != 6);
    CHECK(s.id == s.label);
  }
  REQUIRE(run.stats.recent_errors.size() == 1);
  const std::string& error = run.stats.recent_errors[0];
  CHECK_THAT(error, Catch::Contains("shard-0.tfrecord:" + std::to_string(offsets[6])));
  CHECK_THAT(error, Catch::Contains("image/object/bbox/x"));
}

TEST_CASE("APaddingSampleWithNoSampleToRepeatHasEmptyFeatures") {
  TempDir dir;
  WriteShards(dir, {10, 13, 9, 11, 9});
  v1::PipelineOptions o = Options(dir);
  o.set_batch_size(4);
  o.mutable_shard()->set_index(2);
  o.mutable_shard()->set_count(3);
  o.set_equal_shares(v1::EQUAL_SHARES_PAD);
  std::vector<BatchPosition> positions;
  const Run all = RunAll(o, {}, &positions);
  REQUIRE(all.status.ok());
  REQUIRE(positions.size() == 6);
  // Batches 3 to 5 are padding only: resumed after batch 2, no sample of the epoch was seen.
  BatchPosition after = positions[2];
  ++after.index;
  const Run rest = RunAll(o, after);
  REQUIRE(rest.status.ok());
  REQUIRE(rest.epochs.size() == 1);
  REQUIRE(rest.epochs[0].size() == 12);
  for (const Sample& s : rest.epochs[0]) {
    CHECK_FALSE(s.valid);
    CHECK(s.id == 0);  // the SCALAR column zero, the ragged ones without rows
    CHECK(s.tags.empty());
    CHECK(s.name.empty());
    CHECK(s.boxes.empty());
    CHECK(s.box_labels.empty());
  }
}

TEST_CASE("AnUnlabeledDatasetDeliversFeaturesWithLabelZero") {
  TempDir dir;
  WriteShards(dir, {9, 7}, /*labeled=*/false);
  v1::PipelineOptions o = Options(dir);
  o.set_unlabeled(true);
  const Run run = RunAll(o);
  REQUIRE(run.status.ok());
  REQUIRE(run.epochs.size() == 1);
  std::vector<int32_t> ids;
  for (const Sample& s : run.epochs[0]) {
    CHECK(s.label == 0);
    CheckOwnFeatures(s);
    ids.push_back(static_cast<int32_t>(s.id));
  }
  CHECK(testing::Sorted(ids) == testing::Iota(16));
}

// Records that fill "tags" or "name" near max_feature_bytes by turns, shuffled over two epochs:
// each batch slot, reused record after record and copied into when a batch is compacted, holds
// no more than the reserve the batch pool accounts it at (FeatureSchema::slot_bytes(), plus a
// short string's inline capacity per array), not both arrays' largest.
TEST_CASE("ReusedSlotsHoldNoMoreFeatureMemoryThanTheirReserve") {
  TempDir dir;
  constexpr int kRecords = 40;
  auto writer = TFRecordWriter::Create(dir.file("shard-0.tfrecord"));
  REQUIRE(writer.ok());
  for (int r = 0; r < kRecords; ++r) {
    // The builder views what it is given until Finish.
    const std::string jpeg = testing::IdJpeg(r);
    const std::vector<int64_t> tags(r % 2 ? 1 : 450, r);
    const std::string name(r % 2 ? 3600 : 1, 'n');
    ExampleBuilder b;
    b.AddBytes(kImageEncodedKey, jpeg);
    b.AddInt64(kImageLabelKey, r);
    b.AddInt64("id", r);
    b.AddInt64s("tags", tags);
    b.AddBytes("name", name);
    std::string out;
    b.Finish(&out);
    REQUIRE((*writer)->Write(out).ok());
  }
  REQUIRE((*writer)->Close().ok());
  v1::PipelineOptions o = Options(dir);
  o.clear_boxes();
  o.set_max_feature_bytes(4096);
  o.set_epochs(2);
  o.set_batch_size(3);
  auto resolved = ResolveOptions(o);
  REQUIRE(resolved.ok());
  const int64_t reserve = resolved->features.slot_bytes();
  const int64_t slack = 3 * static_cast<int64_t>(std::string().capacity());
  auto it = testing::StartIterator(o);
  int samples = 0;
  int64_t most = 0;
  for (;;) {
    Batch b;
    bool end = false;
    REQUIRE(it->GetNext(&b, &end).ok());
    if (end) break;
    for (const SampleFeatures& f : b.features()) {
      ++samples;
      most = std::max(most, f.capacity_bytes());
      CHECK(f.capacity_bytes() <= reserve + slack);
    }
  }
  CHECK(samples >= 2 * (kRecords - 2));
  INFO("largest slot " << most << " bytes, reserve " << reserve);
  CHECK(most > 3600);
}

}  // namespace
}  // namespace sluice
