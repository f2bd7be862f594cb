// `sluice synth` end to end: sizes and quality of what it writes, determinism, photo classes.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "tests/jpeg_test_images.h"
#include "tests/test_support.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using testing::RunSluice;
using testing::TempDir;

std::string ShardsOf(const fs::path& dir) { return (dir / "*.tfrecord").string(); }

TEST_CASE("SynthImagesAreImageNetSized") {
  TempDir dir;
  testing::CommandResult r = RunSluice("synth --out " + dir.file("s") +
                                       " --images 30 --classes 3 --shards 2 --seed 9");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(RunSluice("inspect --json " + ShardsOf(dir.file("s"))).out);
  CHECK(j["records"] == 30);
  CHECK(j["labels"] == nlohmann::json({{"0", 10}, {"1", 10}, {"2", 10}}));
  // Short side 300–500 and aspect within 3:4…4:3: no side outside [300, 667].
  CHECK(j["jpeg"]["count"] == 30);
  CHECK(j["jpeg"]["width"]["min"] >= 300);
  CHECK(j["jpeg"]["height"]["min"] >= 300);
  CHECK(j["jpeg"]["width"]["max"] <= 667);
  CHECK(j["jpeg"]["height"]["max"] <= 667);
  // Noise keeps q90–95 JPEGs of photo-like size: well over 0.5 bits per pixel.
  double bytes_per_image = j["data_bytes"].get<double>() / 30;
  double pixels = j["jpeg"]["mean_pixels"].get<double>();
  CHECK(bytes_per_image * 8 / pixels > 0.5);
}

TEST_CASE("SynthIsDeterministicForASeedWhateverTheThreads") {
  TempDir dir;
  std::string common = " --images 12 --classes 4 --shards 3 --val-fraction 0.25 --seed 77";
  REQUIRE(RunSluice("synth --out " + dir.file("one") + common + " --threads 1").exit_code == 0);
  REQUIRE(RunSluice("synth --out " + dir.file("two") + common + " --threads 2").exit_code == 0);
  REQUIRE(RunSluice("synth --out " + dir.file("other") + " --images 12 --classes 4 --shards 3 "
                    "--val-fraction 0.25 --seed 78").exit_code == 0);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.file("one"))) {
    std::string name = e.path().filename().string();
    CHECK(testing::ReadAll(e.path().string()) == testing::ReadAll(dir.file("two/" + name)));
    if (e.path().extension() == ".tfrecord") {
      ++files;
      CHECK(testing::ReadAll(e.path().string()) != testing::ReadAll(dir.file("other/" + name)));
    }
  }
  CHECK(files == 4);  // 3 train shards + 1 validation shard
}

TEST_CASE("SynthWithPhotosNamesClassesAfterThem") {
  TempDir dir;
  fs::create_directories(dir.file("photos"));
  const char* names[] = {"b_sky", "a_grass", "c_sand"};
  for (int i = 0; i < 3; ++i) {
    testing::WriteAll(dir.file(std::string("photos/") + names[i] + ".jpg"),
                      testing::MakeTestJpeg(testing::TestJpegKind::kYCbCr, 900, 700,
                                            [i](int x, int y, int ch) -> uint8_t {
                                              return static_cast<uint8_t>((x + y * ch) * (i + 1));
                                            }));
  }
  testing::WriteAll(dir.file("photos/readme.txt"), "not a photo");
  testing::CommandResult r = RunSluice("synth --out " + dir.file("s") + " --photos " +
                                       dir.file("photos") + " --images 9 --classes 3 --shards 1");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(testing::ReadAll(dir.file("s/labels.txt")) == "a_grass\nb_sky\nc_sand\n");

  testing::CommandResult too_many = RunSluice("synth --out " + dir.file("t") + " --photos " +
                                              dir.file("photos") + " --images 9 --classes 5");
  CHECK(too_many.exit_code == 1);
  CHECK(too_many.err.find("--classes 5 needs 5 JPEG photos in " + dir.file("photos") +
                          ", found 3") != std::string::npos);
  CHECK_FALSE(fs::exists(dir.file("t/train-00000-of-00016.tfrecord")));
}

}  // namespace
}  // namespace sluice
