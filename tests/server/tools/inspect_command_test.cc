// `sluice inspect` end to end: the binary on shards written here, its JSON and its exit status.
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/image_example.h"
#include "formats/jpeg_codec.h"
#include "formats/record_index.h"
#include "formats/tfrecord_writer.h"
#include "tests/png_test_images.h"
#include "tests/test_support.h"
#include "tests/webp_test_images.h"

namespace sluice {
namespace {

using testing::RunSluice;
using testing::TempDir;

std::string SmallJpeg(int w, int h) {
  Image img;
  img.Resize(w, h);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(i * 7);
  JpegEncoder enc;
  std::string out;
  REQUIRE(enc.Encode(img.view(), {}, &out).ok());
  return out;
}

// Writes n image Examples (label i % 3) and returns the offset of each record's frame.
std::vector<IndexEntry> WriteShard(const std::string& path, int n) {
  TFRecordWriterOptions wo;
  auto writer = TFRecordWriter::Create(path, wo);
  REQUIRE(writer.ok());
  std::string jpeg = SmallJpeg(40, 30);
  for (int i = 0; i < n; ++i) {
    ImageRecord r{jpeg, i % 3, "c", 30, 40, "f.jpg"};
    REQUIRE((*writer)->Write(EncodeImageExample(r)).ok());
  }
  std::vector<IndexEntry> index = (*writer)->index();
  REQUIRE((*writer)->Close().ok());
  return index;
}

TEST_CASE("InspectJsonDescribesACleanShard") {
  TempDir dir;
  std::string path = dir.file("a.tfrecord");
  WriteShard(path, 7);
  testing::CommandResult r = RunSluice("inspect --json " + path);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["records"] == 7);
  CHECK(j["corrupt"] == 0);
  CHECK(j["files"][0]["path"] == path);
  CHECK(j["files"][0]["records"] == 7);
  CHECK(j["files"][0]["bytes"] == testing::ReadAll(path).size());
  CHECK(j["features"]["image/encoded"] == "bytes_list");
  CHECK(j["features"]["image/class/label"] == "int64_list");
  CHECK(j["features"]["image/format"] == "bytes_list");
  CHECK(j["labels"] == nlohmann::json({{"0", 3}, {"1", 2}, {"2", 2}}));
  CHECK(j["jpeg"]["count"] == 7);
  CHECK(j["jpeg"]["width"]["max"] == 40);
  CHECK(j["jpeg"]["height"]["min"] == 30);
}

TEST_CASE("InspectReportsPngsBesideJpegsFromTheirHeaders") {
  TempDir dir;
  std::string path = dir.file("mixed.tfrecord");
  {
    auto writer = TFRecordWriter::Create(path, TFRecordWriterOptions{});
    REQUIRE(writer.ok());
    std::vector<std::string> images = {SmallJpeg(40, 30), SmallJpeg(40, 30), "GIF89a..."};
    for (int i = 0; i < 3; ++i) {
      testing::PngSpec s;
      s.width = 50 + 10 * i;
      s.height = 20;
      s.color_type = i == 0 ? PngColorType::kRgbAlpha : PngColorType::kPalette;
      s.bit_depth = i == 0 ? 16 : 4;
      s.interlaced = i == 0;
      testing::FillRandom(&s, i, false);
      images.push_back(testing::WritePngWithLibpng(s));
    }
    for (const std::string& image : images) {
      ImageRecord r{image, 0, "c", 0, 0, "f"};
      REQUIRE((*writer)->Write(EncodeImageExample(r)).ok());
    }
    REQUIRE((*writer)->Close().ok());
  }
  testing::CommandResult r = RunSluice("inspect --json " + path);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["jpeg"]["count"] == 2);
  CHECK(j["jpeg"]["not_jpeg"] == 1);
  CHECK(j["png"]["count"] == 3);
  CHECK(j["png"]["interlaced"] == 1);
  CHECK(j["png"]["width"]["min"] == 50);
  CHECK(j["png"]["width"]["max"] == 70);
  CHECK(j["png"]["height"]["max"] == 20);
  CHECK(j["png"]["layouts"] == nlohmann::json({{"RGBA 16-bit", 1}, {"palette 4-bit", 2}}));

  testing::CommandResult human = RunSluice("inspect " + path);
  REQUIRE(human.exit_code == 0);
  CHECK(human.out.find("PNG (image/encoded): 3 images, width 50..70") != std::string::npos);
  CHECK(human.out.find("layouts: RGBA 16-bit=1 palette 4-bit=2") != std::string::npos);
  CHECK(human.out.find("values that are neither JPEG, PNG nor WebP: 1") != std::string::npos);
}

// WebPs are counted from their headers (libwebp's WebPGetFeatures): sizes, lossless, alpha and
// animated; one whose header does not read, or whose chunks hold no image data, is not an image.
TEST_CASE("InspectReportsWebpsFromTheirHeaders") {
  TempDir dir;
  using testing::EncodeWebp;
  using testing::WebpCodec;
  const std::vector<uint8_t> rgba = testing::SmoothPixels(60, 40, 1);
  const std::map<std::string, std::string> files = {
      {"a/lossy.webp", EncodeWebp(rgba.data(), 50, 20, 3, WebpCodec::kLossy)},
      {"a/lossy-alpha.webp", EncodeWebp(rgba.data(), 60, 40, 4, WebpCodec::kLossy)},
      {"b/lossless.webp", EncodeWebp(rgba.data(), 30, 40, 4, WebpCodec::kLossless)},
      {"b/moving.webp", testing::AnimatedWebp(12, 10)},
      {"b/broken.webp", std::string("RIFF\x10\0\0\0WEBPVP8 \x04\0\0\0xxxx", 24)},
      // A canvas and no image data: libwebp's WebPGetFeatures says OK.
      {"b/no-image.webp", testing::Vp8xOnly(10000, 10000, 0x10)},
  };
  for (const auto& [name, data] : files) {
    std::filesystem::create_directories(std::filesystem::path(dir.file(name)).parent_path());
    testing::WriteAll(dir.file(name), data);
  }
  testing::CommandResult r = RunSluice("inspect --json '" + dir.file("*/*.webp") + "'");
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);  // the broken ones are not images
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["records"] == 6);
  CHECK(j["webp"]["count"] == 4);
  CHECK(j["webp"]["lossless"] == 1);
  CHECK(j["webp"]["alpha"] == 2);
  CHECK(j["webp"]["animated"] == 1);
  CHECK(j["webp"]["width"]["min"] == 12);
  CHECK(j["webp"]["width"]["max"] == 60);
  CHECK(j["webp"]["height"]["max"] == 40);
  CHECK(j["not_images"] ==
        nlohmann::json({dir.file("b/broken.webp"), dir.file("b/no-image.webp")}));
  CHECK(j["png"]["count"] == 0);

  testing::CommandResult human = RunSluice("inspect '" + dir.file("*/*.webp") + "'");
  CHECK(human.out.find("WebP (image/encoded): 4 images, width 12..60") != std::string::npos);
  CHECK(human.out.find("1 lossless, 2 with alpha, 1 animated (the pipeline refuses animations)") !=
        std::string::npos);
}

TEST_CASE("InspectJsonOnCorruptShardCountsAndNamesOffset") {
  TempDir dir;
  std::string path = dir.file("bad.tfrecord");
  std::vector<IndexEntry> index = WriteShard(path, 5);
  std::string data = testing::ReadAll(path);
  // Damage the data of record 2: its length is intact, so inspect goes on to records 3 and 4.
  data[index[2].offset + 12 + 5] ^= 0x40;
  testing::WriteAll(path, data);

  testing::CommandResult r = RunSluice("inspect --json " + path);
  CHECK(r.exit_code == 1);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["records"] == 4);
  CHECK(j["corrupt"] == 1);
  CHECK(j["files"][0]["corrupt"] == 1);
  std::string where = path + ":" + std::to_string(index[2].offset);
  CHECK(r.err.find("corrupted record at " + where) != std::string::npos);
}

TEST_CASE("InspectStopsAtDamagedLengthAndSaysWhere") {
  TempDir dir;
  std::string path = dir.file("len.tfrecord");
  std::vector<IndexEntry> index = WriteShard(path, 4);
  std::string data = testing::ReadAll(path);
  data[index[1].offset + 1] ^= 0x01;  // the length field of record 1
  testing::WriteAll(path, data);

  testing::CommandResult r = RunSluice("inspect --json " + path);
  CHECK(r.exit_code == 1);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["records"] == 1);
  CHECK(j["corrupt"] == 1);
  std::string where = path + ":" + std::to_string(index[1].offset);
  CHECK(j["files"][0]["stopped"].get<std::string>().find(where) != std::string::npos);
  CHECK(r.err.find("stopped reading " + path + " after 1 records") != std::string::npos);
}

TEST_CASE("InspectTruncatedShardReportsTruncation") {
  TempDir dir;
  std::string path = dir.file("cut.tfrecord");
  std::vector<IndexEntry> index = WriteShard(path, 3);
  std::string data = testing::ReadAll(path);
  testing::WriteAll(path, data.substr(0, index[2].offset + 20));
  testing::CommandResult r = RunSluice("inspect " + path);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("truncated record at " + path + ":" + std::to_string(index[2].offset)) !=
        std::string::npos);
  CHECK(r.out.find("total") != std::string::npos);
}

// A WebDataset shard written by GNU tar (ustar), plain and gzipped: its samples are the records.
TEST_CASE("InspectJsonCountsTarSamplesAndNamesADamagedHeader") {
  TempDir dir;
  const std::string jpeg = SmallJpeg(40, 30);
  testing::WriteAll(dir.file("s0.jpg"), jpeg);
  testing::WriteAll(dir.file("s0.cls"), "1\n");
  testing::WriteAll(dir.file("s1.jpg"), jpeg);
  testing::WriteAll(dir.file("s1.cls"), "2\n");
  testing::WriteAll(dir.file("s2.jpg"), jpeg);
  testing::WriteAll(dir.file("s2.cls"), "2\n");
  const std::string path = dir.file("shard.tar");
  REQUIRE(testing::RunCommand("tar", "-C " + dir.path().string() + " --format=ustar -cf " + path +
                                         " s0.jpg s0.cls s1.jpg s1.cls s2.jpg s2.cls")
              .exit_code == 0);
  REQUIRE(testing::RunCommand("gzip", "-k " + path).exit_code == 0);
  for (const std::string& shard : {path, path + ".gz"}) {
    testing::CommandResult r = RunSluice("inspect --json " + shard);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    auto j = nlohmann::json::parse(r.out);
    CHECK(j["records"] == 3);
    CHECK(j["files"][0]["kind"] == "tar");
    CHECK(j["files"][0]["compression"] == (shard == path ? "none" : "gzip"));
    CHECK(j["data_bytes"] == 3 * (jpeg.size() + 2));
    CHECK(j["features"]["image/encoded"] == "bytes_list");
    CHECK(j["features"]["__key__"] == "bytes_list");
    CHECK(j["labels"] == nlohmann::json({{"1", 1}, {"2", 2}}));
    CHECK(j["jpeg"]["count"] == 3);
  }
  // s2.jpg's header: after two samples of a jpg (a header, its data padded to blocks) and a cls
  // (two blocks). s1 is not counted either: it may have had more members.
  const size_t damaged = 2 * (512 + (jpeg.size() + 511) / 512 * 512 + 1024);
  std::string data = testing::ReadAll(path);
  data[damaged + 1] ^= 0x01;
  testing::WriteAll(path, data);
  testing::CommandResult r = RunSluice("inspect --json " + path);
  CHECK(r.exit_code == 1);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["records"] == 1);
  CHECK(j["corrupt"] == 1);
  CHECK(j["files"][0]["stopped"].get<std::string>().find(path + ":" + std::to_string(damaged) +
                                                         ": bad tar header checksum") == 0);
}

// `sluice index` writes each shard's index by its kind (a tar's in wds2idx's "v1.2" format, a
// TFRecord's as "<offset> <length>" lines); inspect says whether a tar shard's index is there and
// is its own, and fails on one that is stale (the shard rewritten) or not a tar index at all.
TEST_CASE("IndexWritesATarShardsIndexByItsKindAndInspectChecksIt") {
  TempDir dir;
  const std::string jpeg = SmallJpeg(40, 30);
  auto write_tar = [&](int samples) {
    std::string members;
    for (int i = 0; i < samples; ++i) {
      const std::string key = "s" + std::to_string(i);
      testing::WriteAll(dir.file(key + ".jpg"), jpeg);
      testing::WriteAll(dir.file(key + ".cls"), std::to_string(i));
      members += " " + key + ".jpg " + key + ".cls";
    }
    REQUIRE(testing::RunCommand(
                "tar", "-C " + dir.path().string() + " -cf " + dir.file("shard.tar") + members)
                .exit_code == 0);
  };
  write_tar(3);
  const std::string tar = dir.file("shard.tar");
  const std::string tfrecord = dir.file("shard.tfrecord");
  const std::vector<IndexEntry> frames = WriteShard(tfrecord, 4);
  auto index_state = [&] {
    testing::CommandResult r = RunSluice("inspect --json " + tar);
    INFO(r.err);
    return std::make_pair(r.exit_code,
                          nlohmann::json::parse(r.out)["files"][0]["index"].get<std::string>());
  };
  CHECK(index_state() == std::make_pair(0, std::string("none")));

  testing::CommandResult indexed = RunSluice("index " + tar + " " + tfrecord);
  INFO(indexed.err);
  REQUIRE(indexed.exit_code == 0);
  CHECK(indexed.out == tar + ".idx: 3 samples\n" + tfrecord + ".idx: 4 records\n");
  const size_t data = (jpeg.size() + 511) / 512 * 512;
  const size_t sample = 512 + data + 1024;
  std::string want = "v1.2 3\n";
  for (size_t i = 0; i < 3; ++i) {
    const std::string key = "s" + std::to_string(i);
    want += "jpg " + std::to_string(i * sample + 512) + " " + std::to_string(jpeg.size()) + " " +
            key + ".jpg cls " + std::to_string(i * sample + 512 + data + 512) + " 1 " + key +
            ".cls\n";
  }
  CHECK(testing::ReadAll(tar + ".idx") == want);
  CHECK(testing::ReadAll(tfrecord + ".idx") == FormatRecordIndex(frames));
  CHECK(index_state() == std::make_pair(0, std::string("matches")));

  write_tar(4);
  CHECK(index_state() == std::make_pair(1, std::string("stale")));
  testing::WriteAll(tar + ".idx", FormatRecordIndex(frames));
  CHECK(index_state() == std::make_pair(1, std::string("unusable")));
}

TEST_CASE("InspectMissingFileIsAnErrorNamingIt") {
  TempDir dir;
  std::string path = dir.file("nope.tfrecord");
  testing::CommandResult r = RunSluice("inspect " + path);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find(path) != std::string::npos);
}

TEST_CASE("InspectEmptyFileIsZeroRecords") {
  TempDir dir;
  std::string path = dir.file("empty.tfrecord");
  testing::WriteAll(path, "");
  testing::CommandResult r = RunSluice("inspect --json " + path);
  CHECK(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["records"] == 0);
  CHECK(j["corrupt"] == 0);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// An image folder: classes by folder name in byte order with their counts; a PNG (by signature)
// counted; a file that is neither JPEG, PNG nor WebP named, with exit status 1.
TEST_CASE("InspectImageFolderReportsClassesPngsAndFilesThatAreNotImages") {
  TempDir dir;
  const std::string jpeg = SmallJpeg(40, 30);
  testing::PngSpec spec;
  spec.width = 30;
  spec.height = 20;
  spec.color_type = PngColorType::kRgb;
  spec.bit_depth = 8;
  testing::FillRandom(&spec, 1, false);
  const std::string png = testing::WritePngWithLibpng(spec);
  for (const char* f : {"b/1.jpg", "b/2.jpg", "A/1.jpg", "A/2.png", "A/3.jpg"}) {
    std::filesystem::create_directories(std::filesystem::path(dir.file(f)).parent_path());
    testing::WriteAll(dir.file(f), std::string(f).ends_with(".png") ? png : jpeg);
  }
  testing::CommandResult clean =
      RunSluice("inspect --json " + dir.file("A/1.jpg") + " " + dir.file("A/2.png") + " " +
                dir.file("A/3.jpg") + " " + dir.file("b/1.jpg") + " " + dir.file("b/2.jpg"));
  INFO(clean.err);
  REQUIRE(clean.exit_code == 0);
  auto j = nlohmann::json::parse(clean.out);
  CHECK(j["records"] == 5);
  CHECK(j["classes"] == nlohmann::json::parse(R"([{"name": "A", "label": 0, "files": 3},
                                                  {"name": "b", "label": 1, "files": 2}])"));
  CHECK(j["png"]["count"] == 1);
  CHECK(j["jpeg"]["count"] == 4);
  CHECK(j["not_images"].empty());
  CHECK(j["files"].size() == 5);  // few images: a row each

  testing::WriteAll(dir.file("b/notes.jpg"), "notes, not an image");
  testing::WriteAll(dir.file("list.csv"), "path,label\nA/1.jpg,4\nb/notes.jpg,4\n");
  testing::CommandResult listed = RunSluice("inspect --json --file-list " + dir.file("list.csv"));
  REQUIRE(listed.exit_code == 1);
  auto l = nlohmann::json::parse(listed.out);
  CHECK(l["labels"] == nlohmann::json({{"4", 2}}));
  CHECK(l["not_images"] == nlohmann::json({dir.file("b/notes.jpg")}));
  testing::CommandResult human = RunSluice("inspect --file-list " + dir.file("list.csv"));
  CHECK(human.exit_code == 1);
  CHECK_THAT(human.out,
             Catch::Contains("files that are not images (neither JPEG, PNG nor WebP): 1\n  " +
                             dir.file("b/notes.jpg")));
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// A quoted pattern is expanded as the pipeline expands it (not taken for a file named '*'), and a
// folder of many images is merged as it is read: no row per image, only the damaged ones named.
TEST_CASE("InspectExpandsAQuotedGlobAndKeepsNoRowPerImageOfAManyImageFolder") {
  TempDir dir;
  const std::string jpeg = SmallJpeg(40, 30);
  const std::map<std::string, int> per_class = {{"cat", 10}, {"dog", 12}, {"fox", 8}};
  for (const auto& [folder, n] : per_class) {
    std::filesystem::create_directories(dir.file("train/" + folder));
    for (int i = 0; i < n; ++i) {
      testing::WriteAll(dir.file("train/" + folder + "/" + std::to_string(i) + ".jpg"), jpeg);
    }
  }
  const std::string broken = dir.file("train/dog/broken.jpg");  // a folder: cannot be read
  std::filesystem::create_directories(broken);
  testing::CommandResult r = RunSluice("inspect --json '" + dir.file("train/*/*.jpg") + "'");
  INFO(r.err);
  CHECK(r.exit_code == 1);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["records"] == 30);
  CHECK(j["corrupt"] == 1);
  CHECK(j["jpeg"]["count"] == 30);
  CHECK(j["classes"] == nlohmann::json::parse(R"([{"name": "cat", "label": 0, "files": 10},
                                                  {"name": "dog", "label": 1, "files": 12},
                                                  {"name": "fox", "label": 2, "files": 8}])"));
  REQUIRE(j["files"].size() == 1);
  CHECK(j["files"][0]["path"] == broken);
  CHECK_THAT(r.err, Catch::Contains(broken));

  testing::CommandResult human = RunSluice("inspect '" + dir.file("train/*/*.jpg") + "'");
  CHECK_THAT(human.out, Catch::Contains("total") && Catch::Contains("classes (folder names"));
  CHECK(human.out.find(dir.file("train/cat/0.jpg")) == std::string::npos);

  testing::CommandResult none = RunSluice("inspect '" + dir.file("none/*.jpg") + "'");
  CHECK(none.exit_code == 2);
  CHECK_THAT(none.err, Catch::Contains("no file matches '" + dir.file("none/*.jpg") + "'"));
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// --unlabeled reads as the pipeline reads an unlabeled dataset (PipelineOptions.unlabeled): a
// file list of bare paths (CSV "path", JSON lines without "label"), image folders without
// classes, tar shards whose cls is an ordinary member (here words, not class indices). Without
// it, the bare list is refused with the error `sluice serve` gives for it, and a hint.
TEST_CASE("InspectUnlabeledTakesBarePathListsAndWithoutItRefusesThemAsServeDoes") {
  TempDir dir;
  const std::string jpeg = SmallJpeg(40, 30);
  std::filesystem::create_directories(dir.file("A"));
  std::filesystem::create_directories(dir.file("b"));
  testing::WriteAll(dir.file("A/1.jpg"), jpeg);
  testing::WriteAll(dir.file("b/1.jpg"), jpeg);
  testing::WriteAll(dir.file("bare.csv"), "path\nA/1.jpg\nb/1.jpg\n");
  testing::WriteAll(dir.file("bare.jsonl"), "{\"path\": \"A/1.jpg\"}\n{\"path\": \"b/1.jpg\"}\n");
  for (const char* list : {"bare.csv", "bare.jsonl"}) {
    INFO(list);
    testing::CommandResult r =
        RunSluice("inspect --json --unlabeled --file-list " + dir.file(list));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    auto j = nlohmann::json::parse(r.out);
    CHECK(j["unlabeled"] == true);
    CHECK(j["records"] == 2);
    CHECK(j["jpeg"]["count"] == 2);
    CHECK(j["labels"].empty());
    CHECK(j["records_without_label"] == 0);
    CHECK(j["features"].count("image/class/label") == 0);
  }
  testing::CommandResult human =
      RunSluice("inspect --unlabeled --file-list " + dir.file("bare.csv"));
  CHECK(human.exit_code == 0);
  CHECK_THAT(human.out, Catch::Contains("labels: none read (--unlabeled)") &&
                            !Catch::Contains("records without"));

  const std::string refused =
      dir.file("bare.csv") + ":1: label: expected 2 fields \"path,label\", found 1";
  testing::CommandResult labelled = RunSluice("inspect --file-list " + dir.file("bare.csv"));
  CHECK(labelled.exit_code == 2);
  CHECK_THAT(labelled.err, Catch::Contains(refused) && Catch::Contains("give --unlabeled"));
  CHECK(labelled.out.empty());
  // The server refuses the same list in a dataset without unlabeled: true, at start-up.
  const std::string dataset = "datasets { name: \"train\" pipeline { file_list: \"" +
                              dir.file("bare.csv") + "\" image_height: 32 } }\n";
  testing::WriteAll(dir.file("sluice.textproto"), "listen: \"127.0.0.1:0\"\n" + dataset);
  testing::CommandResult serve =
      testing::RunCommand("timeout", "60 " + testing::SluiceBinary() + " serve --config " +
                                         dir.file("sluice.textproto"));
  CHECK(serve.exit_code != 0);
  CHECK(serve.exit_code != 124);  // refused, not left running
  CHECK_THAT(serve.err, Catch::Contains(refused));

  // An image folder: no classes from the folder names, as the pipeline labels none.
  testing::CommandResult folder =
      RunSluice("inspect --json --unlabeled '" + dir.file("*/1.jpg") + "'");
  INFO(folder.err);
  REQUIRE(folder.exit_code == 0);
  auto f = nlohmann::json::parse(folder.out);
  CHECK(f["records"] == 2);
  CHECK(f["classes"].empty());
  CHECK(f["labels"].empty());

  // A tar shard whose cls members are words: an ordinary member when unlabeled.
  std::filesystem::create_directories(dir.file("src"));
  testing::WriteAll(dir.file("src/s0.jpg"), jpeg);
  testing::WriteAll(dir.file("src/s0.cls"), "dog\n");
  testing::WriteAll(dir.file("src/s1.jpg"), jpeg);
  testing::WriteAll(dir.file("src/s1.cls"), "cat\n");
  REQUIRE(testing::RunCommand("tar", "-C " + dir.file("src") + " --format=ustar -cf " +
                                         dir.file("words.tar") + " s0.jpg s0.cls s1.jpg s1.cls")
              .exit_code == 0);
  testing::CommandResult tar = RunSluice("inspect --json --unlabeled " + dir.file("words.tar"));
  INFO(tar.err);
  REQUIRE(tar.exit_code == 0);
  auto t = nlohmann::json::parse(tar.out);
  CHECK(t["records"] == 2);
  CHECK(t["corrupt"] == 0);
  CHECK(t["malformed"] == 0);
  CHECK(t["features"]["cls"] == "bytes_list");
  CHECK(t["labels"].empty());

  // A label that is there but bad is the list's error alone: --unlabeled would not mend it.
  testing::WriteAll(dir.file("words.csv"), "A/1.jpg,dog\n");
  testing::CommandResult words = RunSluice("inspect --file-list " + dir.file("words.csv"));
  CHECK(words.exit_code == 2);
  CHECK_THAT(words.err,
             Catch::Contains(dir.file("words.csv") + ":1: label: 'dog' is not an integer") &&
                 !Catch::Contains("--unlabeled"));

  // A label key names what --unlabeled says is not there.
  testing::CommandResult both =
      RunSluice("inspect --unlabeled --label-key x --file-list " + dir.file("bare.csv"));
  CHECK(both.exit_code != 0);
  CHECK_THAT(both.err, Catch::Contains("--unlabeled") && Catch::Contains("--label-key"));
}

// A listed image file that cannot be opened is still an image file in the report (kind and
// compression "image"), its error in "stopped", and the run fails.
TEST_CASE("AListedImageThatCannotBeOpenedIsStillReportedAsAnImage") {
  TempDir dir;
  std::filesystem::create_directories(dir.file("A"));
  testing::WriteAll(dir.file("A/1.jpg"), SmallJpeg(40, 30));
  testing::WriteAll(dir.file("list.csv"), "A/1.jpg,0\nA/2.jpg,0\n");
  testing::CommandResult r = RunSluice("inspect --json --file-list " + dir.file("list.csv"));
  CHECK(r.exit_code == 1);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["files"].size() == 2);
  for (const auto& f : j["files"]) CHECK(f["compression"] == "image");
  CHECK_THAT(j["files"][1]["stopped"].get<std::string>(), Catch::Contains("A/2.jpg"));
}

}  // namespace
}  // namespace sluice
