// `sluice inspect` end to end: the binary on shards written here, its JSON and its exit status.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "formats/image_example.h"
#include "formats/jpeg_codec.h"
#include "formats/tfrecord_writer.h"
#include "tests/png_test_images.h"
#include "tests/test_support.h"

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
  CHECK(human.out.find("values that are neither JPEG nor PNG: 1") != std::string::npos);
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
