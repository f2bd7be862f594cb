// `sluice serve` over an unlabeled dataset's sources as users have them: WebDataset tar shards
// whose `cls` members are not class indices ("dog"), and a file list of bare paths (a CSV of one
// field, a JSON-lines list without "label"). Every sample is served; none is refused for want of
// a label.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "tests/server/serve_fixture.h"

namespace sluice {
namespace {

using serve_testing::Connect;
using serve_testing::Got;
using serve_testing::ReadAll;
using serve_testing::Request;
using testing::ServerProcess;
using testing::TempDir;

constexpr int kSamples = 6;
constexpr size_t kImageBytes = 32 * 32 * 3;

// A config serving `source` (a files pattern or a file_list line) as the unlabeled dataset
// "train": batches of 3 at 32 x 32, one epoch.
std::string WriteConfig(const TempDir& dir, const std::string& source) {
  const std::string path = dir.file("sluice.textproto");
  testing::WriteAll(
      path, "listen: \"127.0.0.1:0\"\ndatasets {\n  name: \"train\"\n  pipeline {\n    " + source +
                "\n    unlabeled: true\n    batch_size: 3\n    image_height: 32\n"
                "    threads: 2\n    epochs: 1\n  }\n}\n");
  return path;
}

// Every sample of one epoch, read from a server on `config`, whose ListDatasets must count
// `files` files and say the dataset is unlabeled.
Got ServeAll(const std::string& config, int64_t files) {
  ServerProcess server({"--config", config});
  INFO(server.output());
  REQUIRE(server.running());
  auto client = Connect(server.address());
  auto datasets = client->ListDatasets();
  REQUIRE(datasets.ok());
  REQUIRE(datasets->size() == 1);
  CHECK((*datasets)[0].files() == files);
  CHECK((*datasets)[0].unlabeled());
  auto stream = client->Stream(Request());
  REQUIRE(stream.ok());
  Got got = ReadAll(**stream);
  INFO(got.status.ToString() << "\n" << server.output());
  CHECK(got.status.ok());
  CHECK((*stream)->skipped_after_last_batch() == 0);
  return got;
}

TEST_CASE("UnlabeledTarShardsWithWordsForClsServeEverySample") {
  TempDir dir;
  std::filesystem::create_directory(dir.file("src"));
  std::string members;
  for (int id = 0; id < kSamples; ++id) {
    const std::string key = "sample" + std::to_string(100 + id);
    testing::WriteAll(dir.file("src/" + key + ".jpg"), testing::IdJpeg(id));
    testing::WriteAll(dir.file("src/" + key + ".cls"), id % 2 ? "dog\n" : "cat\n");
    members += " " + key + ".jpg " + key + ".cls";
  }
  REQUIRE(testing::RunCommand("tar",
                              "-C " + dir.file("src") + " -cf " + dir.file("shard-0.tar") + members)
              .exit_code == 0);
  const Got got = ServeAll(WriteConfig(dir, "files: \"" + dir.file("*.tar") + "\""), 1);
  CHECK(got.images.size() == kSamples * kImageBytes);
}

TEST_CASE("UnlabeledFileListsOfBarePathsServeEverySample") {
  TempDir dir;
  std::string csv = "path\n", jsonl;
  for (int id = 0; id < kSamples; ++id) {
    const std::string name = "img" + std::to_string(id) + ".jpg";
    testing::WriteAll(dir.file(name), testing::IdJpeg(id));
    csv += name + "\n";
    jsonl += "{\"path\": \"" + name + "\"}\n";
  }
  testing::WriteAll(dir.file("list.csv"), csv);
  testing::WriteAll(dir.file("list.jsonl"), jsonl);
  for (const char* list : {"list.csv", "list.jsonl"}) {
    INFO(list);
    const Got got = ServeAll(WriteConfig(dir, "file_list: \"" + dir.file(list) + "\""), kSamples);
    CHECK(got.images.size() == kSamples * kImageBytes);
  }
}

}  // namespace
}  // namespace sluice
