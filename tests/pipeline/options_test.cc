#include "pipeline/options.h"

#include <google/protobuf/text_format.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <functional>

#include "pipeline/batch.h"
#include "tests/pipeline/pipeline_test_data.h"

namespace sluice {
namespace {

using testing::TempDir;

TEST_CASE("DefaultsAreAppliedAndGlobsExpanded") {
  TempDir dir;
  testing::WriteTestShards(dir, 3, 1);
  v1::PipelineOptions o;
  o.add_files(dir.file("shard-*.tfrecord"));
  o.add_files(dir.file("shard-1.tfrecord"));  // duplicates collapse
  auto r = ResolveOptions(o);
  REQUIRE(r.ok());
  CHECK(r->files.size() == 3);
  CHECK(r->height == 224);
  CHECK(r->width == 224);
  CHECK(r->batch_size == 256);
  CHECK(r->image_key == "image/encoded");
  CHECK(r->label_key == "image/class/label");
  CHECK(r->cycle_length == 3);
  CHECK(r->threads >= 1);
  CHECK(r->decoded_short_side == 256);
  CHECK(r->error_policy == ErrorPolicy::kSkip);
  CHECK(r->mode == PipelineMode::kTrain);
  CHECK(r->skip_warn_percent == 10);
  CHECK(r->num_classes == 0);
}

// What the budget leaves after the batch pool and read buffers: a quarter for decoding, the rest
// for records, of which the largest record held may take half (the other half is the in-flight
// window it waits on), so records and decoders together stay within the budget.
TEST_CASE("MemoryBudgetSplitsIntoRecordsTheLargestRecordAndDecoding") {
  TempDir dir;
  testing::WriteTestShards(dir, 2, 1);
  v1::PipelineOptions o;
  o.add_files(dir.file("shard-*.tfrecord"));
  o.set_batch_size(8);
  o.set_image_height(32);
  o.set_image_width(40);
  o.set_memory_budget_bytes(64 << 20);
  auto r = ResolveOptions(o);
  REQUIRE(r.ok());
  const int64_t rest = (64 << 20) - 8 * 32 * 40 * 3 * (2 + kBatchPoolExtra) -
                       2 * kReadBytesPerOpenFile;
  CHECK(r->decode_budget_bytes == rest / 4);
  CHECK(r->records_budget_bytes == rest - rest / 4);
  CHECK(r->max_held_record_bytes == r->records_budget_bytes / 2);
  CHECK(r->decode_budget_bytes + r->records_budget_bytes == rest);
  CHECK(r->shuffle_budget_bytes == 0);
  // With a shuffle buffer, a quarter is its byte share, as large as one record may be.
  o.mutable_shuffle()->set_buffer_size(16);
  r = ResolveOptions(o);
  REQUIRE(r.ok());
  CHECK(r->shuffle_budget_bytes == rest / 4);
  CHECK(r->records_budget_bytes == rest - 2 * (rest / 4));
  CHECK(r->max_held_record_bytes <= r->shuffle_budget_bytes);
}

// One 1024x1024 image per batch: with 32 MiB the batch pool and read buffers leave a decode share
// of ~3.3 MB, under the ~6.5 MB one decode of the output needs: every image would be refused.
TEST_CASE("DecodeShareUnderOneDecodeOfTheOutputIsRefusedNamingWhatToRaise") {
  TempDir dir;
  testing::WriteTestShards(dir, 1, 1);
  v1::PipelineOptions o;
  o.add_files(dir.file("shard-*.tfrecord"));
  o.set_batch_size(1);
  o.set_image_height(1024);
  o.set_prefetch(1);
  o.set_memory_budget_bytes(32 << 20);
  auto r = ResolveOptions(o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kResourceExhausted);
  CHECK_THAT(r.status().message(),
             Catch::Contains("memory_budget_bytes = 33554432 leaves ") &&
                 Catch::Contains(" bytes for decoding, under the 6553600 bytes one decode of a "
                                 "1024x1024 image needs; raise memory_budget_bytes by "));
  o.set_memory_budget_bytes(64 << 20);
  CHECK(ResolveOptions(o).ok());
}

TEST_CASE("BadValuesNameTheirField") {
  TempDir dir;
  testing::WriteTestShards(dir, 1, 1);
  struct Case {
    const char* field;
    std::function<void(v1::PipelineOptions&)> set;
  } cases[] = {
      {"batch_size", [](auto& o) { o.set_batch_size(100000); }},
      {"image_height", [](auto& o) { o.set_image_height(5000); }},
      {"shard.index", [](auto& o) { o.mutable_shard()->set_count(2), o.mutable_shard()->set_index(2); }},
      {"prefetch", [](auto& o) { o.set_prefetch(1000); }},
      {"interleave.cycle_length", [](auto& o) { o.mutable_interleave()->set_cycle_length(5000); }},
      {"skip_warn_percent", [](auto& o) { o.set_skip_warn_percent(101); }},
      {"num_classes", [](auto& o) { o.set_num_classes(-1); }},
  };
  for (const auto& c : cases) {
    v1::PipelineOptions o;
    o.add_files(dir.file("shard-*.tfrecord"));
    c.set(o);
    auto r = ResolveOptions(o);
    INFO(c.field);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK(r.status().message().find(c.field) == 0);
  }
}

TEST_CASE("GlobMatchingNothingIsNotFound") {
  TempDir dir;
  v1::PipelineOptions o;
  o.add_files(dir.file("nothing-*.tfrecord"));
  auto r = ResolveOptions(o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kNotFound);
  CHECK(r.status().message() == "no file matches '" + dir.file("nothing-*.tfrecord") + "'");
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Folder names in byte order (torchvision ImageFolder's sorted(): code points, which UTF-8 byte
// order keeps), upper case before lower, labelled 0..K-1.
TEST_CASE("ImageFilesAreLabelledByTheirFoldersNamesInByteOrder") {
  TempDir dir;
  for (const char* f : {"b", "B", "a b", "\xc3\xa9", "z"}) {
    std::filesystem::create_directories(dir.path() / f);
    testing::WriteAll((dir.path() / f / "x.JPG").string(), "x");
  }
  v1::PipelineOptions o;
  o.add_files(dir.file("*/*.JPG"));
  auto r = ResolveOptions(o);
  REQUIRE(r.ok());
  CHECK(r->classes == std::vector<std::string>{"B", "a b", "b", "z", "\xc3\xa9"});
  REQUIRE(r->files.size() == 5);
  for (size_t i = 0; i < r->files.size(); ++i) {
    CHECK(r->kinds[i] == SourceKind::kImage);
    const std::string folder = std::filesystem::path(r->files[i]).parent_path().filename();
    CHECK(r->classes[r->file_labels[i]] == folder);
  }
}

// .webp is an image file's extension in any case, beside .jpg, .jpeg and .png.
TEST_CASE("WebpFilesAreImageFilesInAnyCase") {
  TempDir dir;
  for (const char* f : {"a/x.webp", "b/y.WEBP", "b/z.WebP", "c.tfrecord"}) {
    std::filesystem::create_directories((dir.path() / f).parent_path());
    testing::WriteAll((dir.path() / f).string(), "x");
  }
  v1::PipelineOptions o;
  o.add_files(dir.file("*/*.*"));
  o.add_files(dir.file("c.tfrecord"));
  auto r = ResolveOptions(o);
  REQUIRE(r.ok());
  REQUIRE(r->files.size() == 4);
  CHECK(r->classes == std::vector<std::string>{"a", "b"});
  for (size_t i = 0; i < r->files.size(); ++i) {
    INFO(r->files[i]);
    CHECK(r->kinds[i] ==
          (r->files[i].ends_with(".tfrecord") ? SourceKind::kTFRecord : SourceKind::kImage));
  }
}

TEST_CASE("FileListGivesSortedFilesWithTheirListedLabels") {
  TempDir dir;
  testing::WriteAll(dir.file("b.jpg"), "x");
  testing::WriteAll(dir.file("a.png"), "x");
  testing::WriteAll(dir.file("list.csv"), "b.jpg,5\na.png,0\n");
  v1::PipelineOptions o;
  o.set_file_list(dir.file("list.csv"));
  auto r = ResolveOptions(o);
  REQUIRE(r.ok());
  CHECK(r->files == std::vector<std::string>{dir.file("a.png"), dir.file("b.jpg")});
  CHECK(r->file_labels == std::vector<int64_t>{0, 5});
  CHECK(r->kinds == std::vector<SourceKind>{SourceKind::kImage, SourceKind::kImage});
  CHECK(r->classes.empty());
  CHECK(r->cycle_length == 2);
}

TEST_CASE("FileListNamingAMissingOrDuplicateFileFailsTheStartNamingListAndLine") {
  TempDir dir;
  testing::WriteAll(dir.file("a.jpg"), "x");
  v1::PipelineOptions o;
  o.set_file_list(dir.file("list.jsonl"));
  testing::WriteAll(
      dir.file("list.jsonl"),
      "{\"path\": \"a.jpg\", \"label\": 1}\n{\"path\": \"gone.jpg\", \"label\": 1}\n");
  auto missing = ResolveOptions(o);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK_THAT(missing.status().message(), Catch::Contains(dir.file("list.jsonl") + ":2: path: ") &&
                                             Catch::Contains(dir.file("gone.jpg")));
  testing::WriteAll(dir.file("list.jsonl"),
                    "{\"path\": \"a.jpg\", \"label\": 1}\n{\"path\": \"./a.jpg\", \"label\": 1}\n"
                    "{\"path\": \"a.jpg\", \"label\": 2}\n");
  auto twice = ResolveOptions(o);
  REQUIRE_FALSE(twice.ok());
  CHECK_THAT(twice.status().message(), Catch::Contains("is listed twice"));
}

TEST_CASE("FileListWithFilePatternsOrANonImageFormatIsRefused") {
  TempDir dir;
  testing::WriteAll(dir.file("a.jpg"), "x");
  testing::WriteAll(dir.file("list.csv"), "a.jpg,0\n");
  v1::PipelineOptions both;
  both.set_file_list(dir.file("list.csv"));
  both.add_files(dir.file("*.jpg"));
  auto r = ResolveOptions(both);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::StartsWith("file_list: give files or file_list"));
  v1::PipelineOptions tar;
  tar.set_file_list(dir.file("list.csv"));
  tar.set_format(v1::SOURCE_FORMAT_WEBDATASET);
  CHECK_FALSE(ResolveOptions(tar).ok());
  v1::PipelineOptions neither;
  auto none = ResolveOptions(neither);
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.status().message(), Catch::StartsWith("files: no file pattern given"));
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// The server's start-up check turns each file a pattern matched into an escaped literal pattern;
// a file deleted since must not refuse the stream (the source reports it as a bad record).
TEST_CASE("EscapedLiteralPathIsThatPathWhetherOrNotItExists") {
  TempDir dir;
  v1::PipelineOptions o;
  const std::string odd = dir.file("gone [1] {a,b} *?.jpg");
  std::string escaped;
  for (char c : odd) {
    if (std::string_view("\\*?[]{}~").find(c) != std::string_view::npos) escaped += '\\';
    escaped += c;
  }
  o.add_files(escaped);
  o.add_files(dir.file("plain.tfrecord"));
  auto r = ResolveOptions(o);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK(r->files == std::vector<std::string>{odd, dir.file("plain.tfrecord")});
  CHECK(r->kinds == std::vector<SourceKind>{SourceKind::kImage, SourceKind::kTFRecord});
  // A pattern with a wildcard still has to match something.
  o.add_files(dir.file("gone-*.jpg"));
  CHECK(ResolveOptions(o).status().code() == StatusCode::kNotFound);
}

TEST_CASE("FilesLabelledByFolderHaveOneClassPerFolderUnlessNumClassesIsGiven") {
  TempDir dir;
  for (const char* f : {"cat", "dog", "fox"}) {
    std::filesystem::create_directories(dir.path() / f);
    testing::WriteAll((dir.path() / f / "x.jpg").string(), "x");
  }
  v1::PipelineOptions o;
  o.add_files(dir.file("*/*.jpg"));
  auto r = ResolveOptions(o);
  REQUIRE(r.ok());
  CHECK(r->num_classes == 3);
  o.set_num_classes(10);
  CHECK(ResolveOptions(o)->num_classes == 10);
  testing::WriteAll(dir.file("list.csv"), "cat/x.jpg,7\n");
  v1::PipelineOptions listed;
  listed.set_file_list(dir.file("list.csv"));
  CHECK(ResolveOptions(listed)->num_classes == 0);  // a list's labels say nothing of the classes
}

TEST_CASE("FrozenFileListIsServedAsFirstReadAfterAnEdit") {
  TempDir dir;
  testing::WriteAll(dir.file("a.jpg"), "x");
  testing::WriteAll(dir.file("b.jpg"), "x");
  const std::string list = dir.file("frozen.csv");
  testing::WriteAll(list, "a.jpg,1\nb.jpg,2\n");
  REQUIRE(FreezeFileList(list).ok());
  testing::WriteAll(list, "b.jpg,5\nnot a line\n");
  v1::PipelineOptions o;
  o.set_file_list(list);
  auto r = ResolveOptions(o);
  REQUIRE(r.ok());
  CHECK(r->files == std::vector<std::string>{dir.file("a.jpg"), dir.file("b.jpg")});
  CHECK(r->file_labels == std::vector<int64_t>{1, 2});
  // A listed file deleted since is the source's to report, not a refused start.
  std::filesystem::remove(dir.file("a.jpg"));
  CHECK(ResolveOptions(o)->files.size() == 2);
  // Freezing again reads the list as it is now.
  testing::WriteAll(list, "b.jpg,5\n");
  REQUIRE(FreezeFileList(list).ok());
  CHECK(ResolveOptions(o)->file_labels == std::vector<int64_t>{5});
  // A list that does not parse is refused when frozen, as at the start of a server.
  testing::WriteAll(list, "b.jpg,x\n");
  CHECK_THAT(FreezeFileList(list).message(), Catch::Contains(list + ":1: label"));
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// The schema reaches ResolvedOptions; its refusals come through unchanged.
TEST_CASE("FeaturesAndBoxesResolveIntoTheSchema") {
  TempDir dir;
  testing::WriteTestShards(dir, 1, 1);
  v1::PipelineOptions o;
  o.add_files(dir.file("shard-*.tfrecord"));
  auto* labels = o.add_features();
  labels->set_key("image/object/class/label");
  labels->set_name("labels");
  labels->set_type(v1::FEATURE_TYPE_INT64);
  labels->set_shape(v1::FEATURE_SHAPE_MULTI_HOT);
  labels->set_length(20);
  o.mutable_boxes()->set_enabled(true);
  auto r = ResolveOptions(o);
  REQUIRE(r.ok());
  CHECK(r->features.columns.size() == 1);
  CHECK(r->features.boxes.enabled);
  CHECK(r->features.max_feature_bytes == 16384 + 1000 * 24);
  CHECK(r->features.array_count() == 3);
  CHECK_FALSE(r->unlabeled);
  labels->set_length(0);
  r = ResolveOptions(o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        "features[0].length = 0: FEATURE_SHAPE_MULTI_HOT needs a length in [1, 65536] (its number "
        "of classes)");
}

// Each slot reserves slot_bytes() for its features, in every buffer of the pool the budget holds:
// what BatchBuffer::bytes() (and so the pool's accounting) counts.
TEST_CASE("MemoryBudgetCountsEachSlotsFeatureReserve") {
  TempDir dir;
  testing::WriteTestShards(dir, 2, 1);
  v1::PipelineOptions o;
  o.add_files(dir.file("shard-*.tfrecord"));
  o.set_batch_size(8);
  o.set_image_height(32);
  o.set_image_width(40);
  o.set_memory_budget_bytes(64 << 20);
  auto* f = o.add_features();
  f->set_key("rgb");
  f->set_type(v1::FEATURE_TYPE_FLOAT);
  f->set_shape(v1::FEATURE_SHAPE_FIXED);
  f->set_length(3);
  o.set_max_feature_bytes(100000);
  auto r = ResolveOptions(o);
  REQUIRE(r.ok());
  const int64_t slot = 100000 + 3 * 4;
  CHECK(r->features.slot_bytes() == slot);
  const int64_t buffers = 2 + kBatchPoolExtra;
  const int64_t rest = (64 << 20) - 8 * (32 * 40 * 3 + slot) * buffers - 2 * kReadBytesPerOpenFile;
  CHECK(r->decode_budget_bytes == rest / 4);
  CHECK(r->records_budget_bytes == rest - rest / 4);
  // The pool the pipeline makes accounts the same bytes per buffer.
  BatchBuffer buffer(r->batch_size, r->height, r->width, false, false, DType::kUint8, Layout::kNhwc,
                     false, r->features.array_count(), r->features.slot_bytes());
  CHECK(static_cast<int64_t>(buffer.bytes()) == 8 * (32 * 40 * 3 + slot));
  // A reserve the budget cannot hold is refused, naming it.
  o.set_max_feature_bytes(16 << 20);
  o.set_batch_size(64);
  r = ResolveOptions(o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kResourceExhausted);
  CHECK_THAT(r.status().message(),
             Catch::Contains("batches of 64x32x40x3 uint8 with 16777228 bytes of features a "
                             "sample (max_feature_bytes 16777216 and the fixed-size ones)") &&
                 Catch::Contains("lower batch_size, image size, prefetch, max_feature_bytes or "
                                 "the cache budget"));
}

TEST_CASE("UnlabeledImageFilesWriteNoLabelAndHaveNoClasses") {
  TempDir dir;
  for (const char* f : {"cat", "dog"}) {
    std::filesystem::create_directories(dir.path() / f);
    testing::WriteAll((dir.path() / f / "x.jpg").string(), "x");
  }
  v1::PipelineOptions o;
  o.add_files(dir.file("*/*.jpg"));
  o.set_unlabeled(true);
  auto r = ResolveOptions(o);
  REQUIRE(r.ok());
  CHECK(r->unlabeled);
  // FileReaderSource hands an image file's reader no label when file_labels is empty.
  CHECK(r->file_labels.empty());
  CHECK(r->classes.empty());
  CHECK(r->num_classes == 0);
  testing::WriteAll(dir.file("list.csv"), "cat/x.jpg,7\n");
  v1::PipelineOptions listed;
  listed.set_file_list(dir.file("list.csv"));
  listed.set_unlabeled(true);
  r = ResolveOptions(listed);
  REQUIRE(r.ok());
  CHECK(r->file_labels.empty());
}

TEST_CASE("UnlabeledOrBoxesWithWhatNeedsLabelsAreRefusedNamingBothFields") {
  TempDir dir;
  testing::WriteTestShards(dir, 1, 1);
  struct Case {
    const char* message;
    std::function<void(v1::PipelineOptions&)> set;
  } cases[] = {
      {"num_classes = 10 with unlabeled: true: an unlabeled dataset has no classes",
       [](auto& o) { o.set_unlabeled(true), o.set_num_classes(10); }},
      {"label_offset = -1 with unlabeled: true: an unlabeled dataset has no label to offset",
       [](auto& o) { o.set_unlabeled(true), o.set_label_offset(-1); }},
      {"transforms[1].mixup with unlabeled: true: it mixes labels, and an unlabeled dataset has "
       "none",
       [](auto& o) {
         o.set_unlabeled(true);
         o.add_transforms()->mutable_random_resized_crop();
         o.add_transforms()->mutable_mixup();
       }},
      {"transforms[0].cutmix with boxes.enabled: a mixed image has no one set of boxes",
       [](auto& o) {
         o.mutable_boxes()->set_enabled(true);
         o.set_num_classes(10);
         o.add_transforms()->mutable_cutmix();
         o.add_transforms()->mutable_random_resized_crop();
       }},
  };
  for (const auto& c : cases) {
    v1::PipelineOptions o;
    o.add_files(dir.file("shard-*.tfrecord"));
    c.set(o);
    auto r = ResolveOptions(o);
    INFO(c.message);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK(r.status().message() == c.message);
  }
}

TEST_CASE("BoxesWithOpsThatMovePixelsOtherThanCropsResizesAndFlipsAreRefused") {
  TempDir dir;
  testing::WriteTestShards(dir, 1, 1);
  struct Case {
    const char* message;
    std::function<void(v1::TransformOp*)> set;
  } cases[] = {
      {"transforms[1].rotate with boxes.enabled: it moves pixels (rotations, shears or "
       "translations) and boxes follow crops, resizes and flips only",
       [](v1::TransformOp* op) { op->mutable_rotate()->add_degrees(10); }},
      {"transforms[1].trivial_augment_wide with boxes.enabled: it moves pixels (rotations, shears "
       "or translations) and boxes follow crops, resizes and flips only",
       [](v1::TransformOp* op) { op->mutable_trivial_augment_wide(); }},
      {"transforms[1].rand_augment with boxes.enabled: it moves pixels (rotations, shears or "
       "translations) and boxes follow crops, resizes and flips only",
       [](v1::TransformOp* op) { op->mutable_rand_augment(); }},
  };
  for (const auto& c : cases) {
    v1::PipelineOptions o;
    o.add_files(dir.file("shard-*.tfrecord"));
    o.mutable_boxes()->set_enabled(true);
    o.add_transforms()->mutable_random_resized_crop();
    c.set(o.add_transforms());
    INFO(c.message);
    auto r = ResolveOptions(o);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK(r.status().message() == c.message);
    // Without boxes the same list resolves: only the boxes cannot follow these ops.
    o.mutable_boxes()->set_enabled(false);
    CHECK(ResolveOptions(o).ok());
  }
  // Every other op kind is a crop, resize, flip or per-pixel op that boxes follow or ignore.
  v1::PipelineOptions o;
  o.add_files(dir.file("shard-*.tfrecord"));
  o.mutable_boxes()->set_enabled(true);
  o.add_transforms()->mutable_random_resized_crop();
  o.add_transforms()->mutable_flip()->set_vertical_p(0.5);
  o.add_transforms()->mutable_color_jitter()->add_brightness(0.4);
  o.add_transforms()->mutable_grayscale()->set_p(0.1);
  o.add_transforms()->mutable_gaussian_blur()->set_kernel_size(3);
  o.add_transforms()->mutable_solarize()->set_threshold(128);
  o.add_transforms()->mutable_posterize()->set_bits(4);
  o.add_transforms()->mutable_normalize()->add_mean(0.5);
  o.mutable_transforms(o.transforms_size() - 1)->mutable_normalize()->add_std(0.5);
  o.add_transforms()->mutable_output()->set_dtype(v1::DTYPE_FLOAT32);
  auto r = ResolveOptions(o);
  INFO(r.status().ToString());
  CHECK(r.ok());
}

TEST_CASE("UnlabeledFileListOfBarePathsResolvesFrozenOrNot") {
  TempDir dir;
  testing::WriteAll(dir.file("a.jpg"), "x");
  testing::WriteAll(dir.file("b.jpg"), "x");
  const std::string list = dir.file("bare.csv");
  testing::WriteAll(list, "path\nb.jpg\na.jpg\n");
  v1::PipelineOptions o;
  o.set_file_list(list);
  auto r = ResolveOptions(o);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains(list + ":1: label"));
  o.set_unlabeled(true);
  r = ResolveOptions(o);
  REQUIRE(r.ok());
  CHECK(r->files == std::vector<std::string>{dir.file("a.jpg"), dir.file("b.jpg")});
  CHECK(r->file_labels.empty());
  // A server freezes the list as its dataset reads it; the labelled reading still refuses it.
  CHECK_THAT(FreezeFileList(list).message(), Catch::Contains(list + ":1: label"));
  REQUIRE(FreezeFileList(list, ListLabels::kIgnore).ok());
  testing::WriteAll(list, "a.jpg\n");
  r = ResolveOptions(o);
  REQUIRE(r.ok());
  CHECK(r->files.size() == 2);
}

// Image files' records hold their image, file name and label only: a feature every record must
// have would skip them all, so it is refused up front; one that may be missing is taken.
TEST_CASE("FeaturesImageFilesCannotCarryAreRefusedNamingFeatureAndSource") {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "cat");
  testing::WriteAll(dir.file("cat/x.jpg"), "x");
  testing::WriteAll(dir.file("list.csv"), "cat/x.jpg,0\n");
  struct Case {
    const char* feature;
    bool unlabeled;
    const char* refusal;  // nullptr: resolves
  } cases[] = {
      {"key: 'id' type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_SCALAR", false,
       "features[0] ('id') on SOURCE of image files only: image files carry no feature but their "
       "label; give a default or use a TFRecord/tar source"},
      {"key: 'rgb' type: FEATURE_TYPE_FLOAT shape: FEATURE_SHAPE_FIXED length: 3", false,
       "features[0] ('rgb') on SOURCE of image files only: image files carry no feature but "
       "their label; give a default or use a TFRecord/tar source"},
      {"key: 'tags' type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_MULTI_HOT length: 5", false,
       "features[0] ('tags') on SOURCE of image files only: image files carry no feature but "
       "their label; set allow_missing or use a TFRecord/tar source"},
      {"key: 'image/class/label' type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_SCALAR", true,
       "features[0] ('image/class/label') on SOURCE of image files only: image files carry no "
       "feature but their label; give a default or use a TFRecord/tar source"},
      {"key: 'image/class/label' type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_SCALAR", false,
       nullptr},
      {"key: 'image/filename' type: FEATURE_TYPE_BYTES shape: FEATURE_SHAPE_SCALAR", true, nullptr},
      {"key: 'id' type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_SCALAR default_value: -1", false,
       nullptr},
      {"key: 'id' type: FEATURE_TYPE_BYTES shape: FEATURE_SHAPE_FIXED length: 2 "
       "default_bytes: ''",
       false, nullptr},
      {"key: 'tags' type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_MULTI_HOT length: 5 "
       "allow_missing: true",
       false, nullptr},
      {"key: 'tags' type: FEATURE_TYPE_INT64", false, nullptr},
  };
  for (const Case& c : cases) {
    for (bool listed : {false, true}) {
      v1::PipelineOptions o;
      if (listed) {
        o.set_file_list(dir.file("list.csv"));
      } else {
        o.add_files(dir.file("*/*.jpg"));
      }
      o.set_unlabeled(c.unlabeled);
      o.mutable_boxes()->set_enabled(true);
      REQUIRE(google::protobuf::TextFormat::ParseFromString(c.feature, o.add_features()));
      INFO(c.feature << (listed ? " (file_list)" : " (files)"));
      auto r = ResolveOptions(o);
      if (c.refusal == nullptr) {
        CHECK(r.ok());
        continue;
      }
      REQUIRE_FALSE(r.ok());
      CHECK(r.status().code() == StatusCode::kInvalidArgument);
      std::string want = c.refusal;
      want.replace(want.find("SOURCE"), 6,
                   listed ? "file_list " + dir.file("list.csv") : std::string("files"));
      CHECK(r.status().message() == want);
    }
  }
  // With a TFRecord file among them, records may carry it.
  testing::WriteTestShards(dir, 1, 1);
  v1::PipelineOptions mixed;
  mixed.add_files(dir.file("*/*.jpg"));
  mixed.add_files(dir.file("shard-*.tfrecord"));
  REQUIRE(google::protobuf::TextFormat::ParseFromString(cases[0].feature, mixed.add_features()));
  CHECK(ResolveOptions(mixed).ok());
}

}  // namespace
}  // namespace sluice
