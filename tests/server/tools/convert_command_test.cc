// `sluice convert` end to end on a small ImageFolder tree holding every kind of awkward file.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "formats/example_scanner.h"
#include "formats/image_example.h"
#include "formats/jpeg_codec.h"
#include "formats/jpeg_header.h"
#include "formats/png_codec.h"
#include "formats/record_index.h"
#include "formats/tfrecord_reader.h"
#include "formats/webp_codec.h"
#include "tests/jpeg_test_images.h"
#include "tests/png_test_images.h"
#include "tests/test_support.h"
#include "tests/webp_test_images.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using testing::RunSluice;
using testing::TempDir;
using testing::TestJpegKind;

// Mean absolute difference between two images of the same size, per byte.
double MeanAbsoluteError(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  REQUIRE(got.size() == want.size());
  double sum = 0;
  for (size_t i = 0; i < want.size(); ++i) sum += std::abs(got[i] - want[i]);
  return sum / static_cast<double>(want.size());
}

struct Converted {
  int64_t label = -1;
  std::string class_text;
  JpegHeader header;  // when format is JPEG
  std::string format;
  std::string encoded;
  int64_t height = 0, width = 0;
};

// Reads every record of the shards in dir with prefix, keyed by image/filename.
std::map<std::string, Converted> ReadBack(const fs::path& dir, const std::string& prefix) {
  std::map<std::string, Converted> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (name.rfind(prefix + "-", 0) != 0 || e.path().extension() != ".tfrecord") continue;
    auto reader = TFRecordReader::Open(e.path().string());
    REQUIRE(reader.ok());
    for (;;) {
      std::string_view record;
      bool eof = false;
      REQUIRE((*reader)->ReadRecord(&record, &eof).ok());
      if (eof) break;
      Converted c;
      std::string filename;
      std::string_view jpeg;
      REQUIRE(ForEachFeature(record, [&](std::string_view key, const FeatureView& v) {
                if (key == kImageFilenameKey) filename = std::string(*v.FirstBytes(key));
                if (key == kImageClassTextKey) c.class_text = std::string(*v.FirstBytes(key));
                if (key == kImageEncodedKey) jpeg = *v.FirstBytes(key);
                if (key == kImageLabelKey) c.label = *v.FirstInt64(key);
                if (key == kImageHeightKey) c.height = *v.FirstInt64(key);
                if (key == kImageWidthKey) c.width = *v.FirstInt64(key);
                if (key == kImageFormatKey) c.format = std::string(*v.FirstBytes(key));
              }).ok());
      c.encoded = std::string(jpeg);
      if (c.format == "JPEG") {
        auto header = ReadJpegHeader(jpeg);
        REQUIRE(header.ok());
        c.header = *header;
      }
      out[filename] = c;
    }
    // Each shard has an index that matches it.
    auto index = ReadRecordIndex(IndexPathFor(e.path().string()));
    REQUIRE(index.ok());
    CHECK(*index == *BuildRecordIndex(e.path().string()));
  }
  return out;
}

TEST_CASE("ConvertKeepsPngsAndHandlesCmykGrayBrokenAndEmptyFiles") {
  TempDir dir;
  fs::path src = dir.path() / "images";
  fs::create_directories(src / "apple");
  fs::create_directories(src / "banana");
  fs::create_directories(src / ".hidden");
  auto rgb = testing::MakeGradientJpeg(64, 48);
  testing::WriteAll((src / "apple/rgb.jpg").string(), rgb);
  // Pure cyan ink (inverted CMYK: C = 0 means full ink).
  testing::WriteAll(
      (src / "apple/cmyk.jpg").string(),
      testing::MakeTestJpeg(TestJpegKind::kCmyk, 32, 32,
                            [](int, int, int ch) -> uint8_t { return ch == 0 ? 0 : 255; }));
  testing::WriteAll((src / "banana/gray.jpg").string(),
                    testing::MakeTestJpeg(TestJpegKind::kGray, 20, 30,
                                          [](int x, int, int) -> uint8_t { return x * 10; }));
  testing::WriteAll((src / "banana/photo.png").string(), "\x89PNG\r\n\x1a\n0000IHDR");
  testing::PngSpec icon;
  icon.width = 21;
  icon.height = 17;
  icon.color_type = PngColorType::kGrayAlpha;
  icon.interlaced = true;
  testing::FillRandom(&icon, 11, false);
  const std::string icon_png = testing::WritePngWithLibpng(icon);
  testing::WriteAll((src / "banana/icon.png").string(), icon_png);
  testing::WriteAll((src / "banana/zero.jpg").string(), "");
  testing::WriteAll((src / "banana/cut.jpg").string(), rgb.substr(0, 200));
  testing::WriteAll((src / ".hidden/x.jpg").string(), rgb);

  fs::path out = dir.path() / "out";
  testing::CommandResult r =
      RunSluice("convert --from " + src.string() + " --out " + out.string() + " --shards 2");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("skipped 3 files") != std::string::npos);
  CHECK(r.err.find("banana/photo.png: does not decode: PNG header cut short") != std::string::npos);
  CHECK(r.err.find("banana/zero.jpg: empty file") != std::string::npos);
  CHECK(r.err.find("banana/cut.jpg: does not decode") != std::string::npos);
  CHECK(testing::ReadAll((out / "labels.txt").string()) == "apple\nbanana\n");
  CHECK(fs::exists(out / "train-00000-of-00002.tfrecord"));
  CHECK(fs::exists(out / "train-00001-of-00002.tfrecord.idx"));

  auto records = ReadBack(out, "train");
  REQUIRE(records.size() == 4);
  CHECK(records["apple/rgb.jpg"].label == 0);
  CHECK(records["apple/rgb.jpg"].class_text == "apple");
  CHECK(records["apple/rgb.jpg"].width == 64);
  CHECK(records["apple/rgb.jpg"].height == 48);
  // CMYK and gray came out as 3-component YCbCr JPEGs.
  CHECK(records["apple/cmyk.jpg"].header.color_space == JpegColorSpace::kYCbCr);
  CHECK(records["apple/cmyk.jpg"].header.components == 3);
  CHECK(records["banana/gray.jpg"].header.color_space == JpegColorSpace::kYCbCr);
  CHECK(records["banana/gray.jpg"].label == 1);
  CHECK(records["banana/gray.jpg"].width == 20);
  // A PNG is kept byte for byte, its size from its header.
  const Converted& png = records["banana/icon.png"];
  CHECK(png.format == "PNG");
  CHECK(png.encoded == icon_png);
  CHECK(png.label == 1);
  CHECK(png.width == 21);
  CHECK(png.height == 17);
  CHECK(records["apple/rgb.jpg"].format == "JPEG");
  // Nothing temporary is left in the output directory.
  for (const auto& e : fs::directory_iterator(out)) {
    CHECK(e.path().filename().string().find(".tmp") == std::string::npos);
  }
}

// A smooth RGBA image whose alpha varies: the colours are what survives once alpha is dropped.
testing::PngSpec GradientRgbaPng(int width, int height) {
  testing::PngSpec s;
  s.width = width;
  s.height = height;
  s.color_type = PngColorType::kRgbAlpha;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      s.samples.insert(s.samples.end(), {static_cast<uint16_t>(x * 255 / width),
                                         static_cast<uint16_t>(y * 255 / height), 128,
                                         static_cast<uint16_t>((x + y) % 256)});
    }
  }
  return s;
}

TEST_CASE("ConvertWithPngJpegReencodesPngsAsRgbJpegWithAlphaDropped") {
  TempDir dir;
  fs::path src = dir.path() / "images";
  fs::create_directories(src / "a");
  const testing::PngSpec rgba = GradientRgbaPng(40, 30);
  testing::WriteAll((src / "a/rgba.png").string(), testing::WritePngWithLibpng(rgba));
  testing::PngSpec palette;
  palette.width = 16;
  palette.height = 8;
  palette.color_type = PngColorType::kPalette;
  palette.bit_depth = 4;
  palette.interlaced = true;
  testing::FillRandom(&palette, 3, /*with_trns=*/true);
  for (size_t i = 0; i < palette.palette.size(); ++i) {
    palette.palette[i] = static_cast<uint8_t>(i / 3 * 16 + i % 3 * 5);  // entry i about 16 i
  }
  for (size_t i = 0; i < palette.samples.size(); ++i) palette.samples[i] = i % 16;  // i = x
  testing::WriteAll((src / "a/palette.png").string(), testing::WritePngWithLibpng(palette));
  const std::string rgb_jpeg = testing::MakeGradientJpeg(24, 24);
  testing::WriteAll((src / "a/rgb.jpg").string(), rgb_jpeg);

  fs::path out = dir.path() / "out";
  testing::CommandResult r = RunSluice("convert --from " + src.string() + " --out " + out.string() +
                                       " --shards 1 --png jpeg");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto records = ReadBack(out, "train");
  REQUIRE(records.size() == 3);
  CHECK(records["a/rgb.jpg"].encoded == rgb_jpeg);  // a YCbCr JPEG is still kept as it is
  for (const auto& [name, spec] :
       {std::pair<std::string, const testing::PngSpec*>{"a/rgba.png", &rgba},
        {"a/palette.png", &palette}}) {
    INFO(name);
    const Converted& c = records[name];
    CHECK(c.format == "JPEG");
    CHECK(c.header.color_space == JpegColorSpace::kYCbCr);
    CHECK(c.header.components == 3);
    CHECK(c.width == spec->width);
    CHECK(c.height == spec->height);
    JpegDecoder decoder;
    Image image;
    REQUIRE(decoder.Decode(c.encoded, &image).ok());
    REQUIRE(image.width == spec->width);
    const std::vector<uint8_t> dropped = testing::ExpectedRgb(*spec, Alpha::kDrop);
    const std::vector<uint8_t> white = testing::ExpectedRgb(*spec, Alpha::kCompositeWhite);
    const double drop_error = MeanAbsoluteError(image.pixels, dropped);
    const double white_error = MeanAbsoluteError(image.pixels, white);
    INFO("mean error against alpha dropped " << drop_error << ", composited on white "
                                             << white_error);
    CHECK(drop_error < 2.0);  // quality 95
    CHECK(white_error > 2 * drop_error);
  }

  testing::CommandResult bad =
      RunSluice("convert --from " + src.string() + " --out " + dir.file("out2") + " --png gif");
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("--png") != std::string::npos);
}

// WebPs are kept byte for byte (image/format WEBP) or, with --webp jpeg, re-encoded as RGB JPEG
// with the alpha dropped; an animated or cut one is skipped with the decoder's reason.
TEST_CASE("ConvertKeepsWebpsOrReencodesThemWithWebpJpegAndSkipsAnimatedOnes") {
  TempDir dir;
  fs::path src = dir.path() / "images";
  fs::create_directories(src / "a");
  const std::vector<uint8_t> rgba = testing::SmoothPixels(40, 30, 5);
  const std::string lossless =
      testing::EncodeWebp(rgba.data(), 40, 30, 4, testing::WebpCodec::kLosslessExact);
  testing::WriteAll((src / "a/alpha.webp").string(), lossless);
  testing::WriteAll((src / "a/moving.webp").string(), testing::AnimatedWebp(12, 10));
  testing::WriteAll((src / "a/cut.webp").string(), lossless.substr(0, lossless.size() / 2));

  for (const char* webp : {"keep", "jpeg"}) {
    INFO("--webp " << webp);
    const fs::path out = dir.path() / (std::string("out-") + webp);
    testing::CommandResult r = RunSluice("convert --from " + src.string() + " --out " +
                                         out.string() + " --shards 1 --webp " + webp);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.find("skipped 2 files") != std::string::npos);
    CHECK(r.err.find("a/moving.webp: does not decode: animated WebP (12x10 canvas) is not "
                     "decoded") != std::string::npos);
    CHECK(r.err.find("a/cut.webp: does not decode: WebP data ends at byte") != std::string::npos);
    auto records = ReadBack(out, "train");
    REQUIRE(records.size() == 1);
    const Converted& c = records["a/alpha.webp"];
    CHECK(c.width == 40);
    CHECK(c.height == 30);
    if (std::string(webp) == "keep") {
      CHECK(c.format == "WEBP");
      CHECK(c.encoded == lossless);
      continue;
    }
    CHECK(c.format == "JPEG");
    CHECK(c.header.color_space == JpegColorSpace::kYCbCr);
    JpegDecoder decoder;
    Image image;
    REQUIRE(decoder.Decode(c.encoded, &image).ok());
    std::vector<uint8_t> dropped(size_t{40} * 30 * 3), white(dropped.size());
    FlattenRgba(rgba.data(), size_t{40} * 30, Alpha::kDrop, dropped.data());
    FlattenRgba(rgba.data(), size_t{40} * 30, Alpha::kCompositeWhite, white.data());
    const double drop_error = MeanAbsoluteError(image.pixels, dropped);
    const double white_error = MeanAbsoluteError(image.pixels, white);
    INFO("mean error against alpha dropped " << drop_error << ", composited on white "
                                             << white_error);
    CHECK(drop_error < 6.0);  // quality 95 of small noisy pixels, chroma subsampled
    CHECK(white_error > 4 * drop_error);
  }
}

TEST_CASE("ConvertSplitsEachClassIntoValidation") {
  TempDir dir;
  fs::path src = dir.path() / "images";
  auto jpeg = testing::MakeGradientJpeg(16, 16);
  for (const char* cls : {"a", "b"}) {
    fs::create_directories(src / cls);
    for (int i = 0; i < 10; ++i) {
      testing::WriteAll((src / cls / (std::to_string(i) + ".jpg")).string(), jpeg);
    }
  }
  fs::path out = dir.path() / "out";
  testing::CommandResult r = RunSluice("convert --from " + src.string() + " --out " + out.string() +
                                       " --shards 3 --val-fraction 0.2");
  REQUIRE(r.exit_code == 0);
  auto train = ReadBack(out, "train");
  auto val = ReadBack(out, "validation");
  CHECK(train.size() == 16);
  REQUIRE(val.size() == 4);
  int val_a = 0;
  for (const auto& [name, c] : val) {
    CHECK(train.count(name) == 0);
    if (c.label == 0) ++val_a;
  }
  CHECK(val_a == 2);
}

TEST_CASE("ConvertRefusesToReplaceExistingShardsWithoutOverwrite") {
  TempDir dir;
  fs::path src = dir.path() / "images";
  fs::create_directories(src / "a");
  testing::WriteAll((src / "a/1.jpg").string(), testing::MakeGradientJpeg(8, 8));
  fs::path out = dir.path() / "out";
  std::string args = "convert --from " + src.string() + " --out " + out.string() + " --shards 1";
  REQUIRE(RunSluice(args).exit_code == 0);
  testing::CommandResult again = RunSluice(args);
  CHECK(again.exit_code == 1);
  CHECK(again.err.find("already exists (pass --overwrite") != std::string::npos);
  CHECK(RunSluice(args + " --overwrite").exit_code == 0);
}

TEST_CASE("ConvertOfMissingFolderSaysSo") {
  TempDir dir;
  testing::CommandResult r =
      RunSluice("convert --from " + dir.file("nope") + " --out " + dir.file("out"));
  CHECK(r.exit_code == 1);
  CHECK(r.err.find(dir.file("nope")) != std::string::npos);
  CHECK_FALSE(fs::exists(dir.file("out/train-00000-of-00016.tfrecord")));
}

}  // namespace
}  // namespace sluice
