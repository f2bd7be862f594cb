// `sluice serve --files 'shards/*.tar'`: WebDataset tar shards (written here by GNU tar, an
// independent writer) served by their names alone, batch for batch the same images and labels as
// the same samples in TFRecord shards.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/image_example.h"
#include "formats/tfrecord_writer.h"
#include "tests/server/serve_fixture.h"

namespace sluice {
namespace {

using serve_testing::Connect;
using serve_testing::Got;
using serve_testing::ReadAll;
using serve_testing::Request;
using testing::ServerProcess;
using testing::TempDir;

TEST_CASE("TarShardsServeTheSameBatchesAsTheSameSamplesInTFRecordShards") {
  TempDir dir;
  for (const char* sub : {"src", "tar", "tfrecord"})
    std::filesystem::create_directory(dir.file(sub));
  const std::vector<int> sizes = {7, 5, 6};
  int id = 0;
  for (size_t f = 0; f < sizes.size(); ++f) {
    auto writer =
        TFRecordWriter::Create(dir.file("tfrecord/shard-" + std::to_string(f) + ".tfrecord"));
    REQUIRE(writer.ok());
    std::string members;
    for (int r = 0; r < sizes[f]; ++r, ++id) {
      const std::string jpeg = testing::IdJpeg(id);
      const std::string key = "sample" + std::to_string(100 + id);
      testing::WriteAll(dir.file("src/" + key + ".jpg"), jpeg);
      testing::WriteAll(dir.file("src/" + key + ".cls"), std::to_string(id) + "\n");
      members += " " + key + ".jpg " + key + ".cls";
      REQUIRE((*writer)->Write(EncodeImageExample(ImageRecord{jpeg, id, "c", 48, 64, "x"})).ok());
    }
    REQUIRE((*writer)->Close().ok());
    const std::string tar = dir.file("tar/shard-" + std::to_string(f) + ".tar");
    REQUIRE(
        testing::RunCommand("tar", "-C " + dir.file("src") + " -cf " + tar + members).exit_code ==
        0);
  }
  ServerProcess tar({"--files", dir.file("tar/*.tar"), "--port", "0"});
  ServerProcess tfrecord({"--files", dir.file("tfrecord/*.tfrecord"), "--port", "0"});
  REQUIRE(tar.running());
  REQUIRE(tfrecord.running());
  v1::StreamRequest r = Request();
  r.set_batch_size(4);
  r.set_image_height(32);
  r.set_seed(11);
  r.set_epochs(2);
  auto from_tar = Connect(tar.address())->Stream(r);
  auto from_tfrecord = Connect(tfrecord.address())->Stream(r);
  REQUIRE(from_tar.ok());
  REQUIRE(from_tfrecord.ok());
  const Got a = ReadAll(**from_tar);
  const Got b = ReadAll(**from_tfrecord);
  INFO(a.status.ToString() << "\n" << tar.output());
  REQUIRE(a.status.ok());
  REQUIRE(b.status.ok());
  CHECK(a.labels.size() >= 2 * 16);  // two epochs of 18, less what drop_remainder drops
  CHECK(a.labels == b.labels);
  CHECK(a.images == b.images);
  CHECK((*from_tar)->skipped_after_last_batch() == 0);
}

}  // namespace
}  // namespace sluice
