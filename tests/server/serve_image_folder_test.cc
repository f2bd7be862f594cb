// `sluice serve` of image files: an ImageFolder tree by glob (labels from the folder names in
// byte order, torchvision's class_to_idx) and a CSV file list (its labels), with and without the
// caches; every file arrives once per epoch with its label, named back by record_ids; a file that
// is not an image is a counted skip, or the stream's error naming its path.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/server/serve_fixture.h"

namespace sluice {
namespace {

using serve_testing::Raw;
using serve_testing::ReadRaw;
using serve_testing::Request;
using testing::ServerProcess;
using testing::TempDir;

// Class folders with awkward names: a space, upper case, non-ASCII (UTF-8 "é" sorts after "z"
// by bytes as by code points), an upper-case extension; a nested folder the glob leaves out.
const std::vector<std::pair<std::string, std::vector<std::string>>> kTree = {
    {"b", {"1.jpg", "2.jpg", "3.jpg"}},
    {"A cat", {"x y.jpg", "UPPER.JPG"}},
    {"\xc3\xa9", {"a.jpg", "b.jpg", "c.jpg", "d.jpg"}},
    {"z", {"only.jpg"}},
};
const std::vector<std::string> kClasses = {"A cat", "b", "z", "\xc3\xa9"};  // byte order

// Writes the tree under dir/train (each image a distinct JPEG); returns path -> folder label.
std::map<std::string, int> WriteTree(const TempDir& dir) {
  std::map<std::string, int> labels;
  int id = 0;
  for (const auto& [folder, files] : kTree) {
    std::filesystem::create_directories(dir.path() / "train" / folder);
    const int label =
        static_cast<int>(std::find(kClasses.begin(), kClasses.end(), folder) - kClasses.begin());
    for (const std::string& f : files) {
      const std::string path = (dir.path() / "train" / folder / f).string();
      testing::WriteAll(path, testing::IdJpeg(id++));
      labels[path] = label;
    }
  }
  std::filesystem::create_directories(dir.path() / "train" / "b" / "sub");
  testing::WriteAll((dir.path() / "train" / "b" / "sub" / "deep.jpg").string(),
                    testing::IdJpeg(99));
  return labels;
}

std::string Dataset(const std::string& name, const std::string& source,
                    const std::string& extra = "") {
  return "datasets {\n  name: \"" + name + "\"\n  pipeline {\n    " + source +
         "\n    batch_size: 4\n    image_height: 32\n    threads: 2\n    epochs: 3\n"
         "    memory_budget_bytes: 67108864\n" +
         extra + "  }\n}\n";
}

// Every sample of a 3-epoch stream of `dataset`, checked against `want` (path -> label): each
// file once in each epoch, as record 0 of its file, with its label.
void ExpectEachFileOncePerEpochWithItsLabel(const std::string& address, const std::string& dataset,
                                            const std::map<std::string, int>& want) {
  INFO(dataset);
  v1::StreamRequest r = Request(dataset);
  r.set_record_ids(true);
  r.set_equal_shares(v1::EQUAL_SHARES_OFF);
  const Raw raw = ReadRaw(address, r);
  REQUIRE(raw.status.ok());
  std::vector<std::string> files;  // the dataset's sorted file list, as record_files index it
  for (const auto& [path, label] : want) files.push_back(path);
  std::map<int64_t, std::map<std::string, int>> seen;  // epoch -> path -> times
  for (const v1::Batch& b : raw.batches) {
    CHECK(b.skipped_records() == 0);
    REQUIRE(b.record_files_size() == b.labels_size());
    for (int i = 0; i < b.labels_size(); ++i) {
      REQUIRE(b.record_files(i) < static_cast<int>(files.size()));
      const std::string& path = files[static_cast<size_t>(b.record_files(i))];
      CHECK(b.record_indexes(i) == 0);
      CHECK(b.labels(i) == want.at(path));
      ++seen[b.position().epoch()][path];
    }
  }
  REQUIRE(seen.size() == 3);
  for (const auto& [epoch, paths] : seen) {
    INFO("epoch " << epoch);
    CHECK(paths.size() == want.size());
    for (const auto& [path, n] : paths) {
      INFO(path);
      CHECK(n == 1);
    }
  }
}

TEST_CASE("ImageFolderAndFileListServeEveryFileOncePerEpochWithItsLabelCachedOrNot") {
  TempDir dir;
  const std::map<std::string, int> folder = WriteTree(dir);
  // The list labels in reverse file order, relative to its own folder.
  std::map<std::string, int> listed;
  std::string csv = "path,label\n";
  int label = static_cast<int>(folder.size());
  for (const auto& [path, unused] : folder) {
    const std::string relative = std::filesystem::relative(path, dir.path()).string();
    csv += "\"" + relative + "\"," + std::to_string(--label) + "\n";
    listed[path] = label;
  }
  testing::WriteAll(dir.file("list.csv"), csv);
  const std::string glob = "files: \"" + dir.file("train/*/*.{jpg,JPG}") + "\"";
  const std::string list = "file_list: \"" + dir.file("list.csv") + "\"";
  testing::WriteAll(dir.file("sluice.textproto"),
                    "listen: \"127.0.0.1:0\"\n" + Dataset("folder", glob) +
                        Dataset("folder_decoded", glob, "    cache { mode: CACHE_DECODED }\n") +
                        Dataset("list", list) +
                        Dataset("list_records", list, "    cache { mode: CACHE_RECORDS }\n"));
  ServerProcess server({"--config", dir.file("sluice.textproto")});
  REQUIRE(server.running());
  CHECK_THAT(server.output(), Catch::Contains("list (files of " + dir.file("list.csv") + ")"));

  ExpectEachFileOncePerEpochWithItsLabel(server.address(), "folder", folder);
  ExpectEachFileOncePerEpochWithItsLabel(server.address(), "folder_decoded", folder);
  ExpectEachFileOncePerEpochWithItsLabel(server.address(), "list", listed);
  ExpectEachFileOncePerEpochWithItsLabel(server.address(), "list_records", listed);

  // One record per file: the plan counts the files.
  auto stub = serve_testing::Stub(server.address());
  v1::StreamPlan plan;
  grpc::ClientContext plan_context;
  REQUIRE(stub->DescribeStream(&plan_context, Request("list"), &plan).ok());
  CHECK(plan.records_per_epoch() == static_cast<int64_t>(listed.size()));
  grpc::ClientContext list_context;
  v1::ListDatasetsResponse datasets;
  REQUIRE(stub->ListDatasets(&list_context, v1::ListDatasetsRequest(), &datasets).ok());
  REQUIRE(datasets.datasets_size() == 4);
  for (const v1::DatasetInfo& d : datasets.datasets()) {
    INFO(d.name());
    CHECK(d.files() == static_cast<int64_t>(folder.size()));
    // Labelled by folder: as many classes as folders; a list's labels are its own.
    CHECK(d.num_classes() ==
          (d.name().rfind("folder", 0) == 0 ? static_cast<int>(kClasses.size()) : 0));
  }
}

TEST_CASE("FileInAnImageFolderThatIsNotAnImageIsACountedSkipOrAnErrorNamingItsPath") {
  TempDir dir;
  std::map<std::string, int> want = WriteTree(dir);
  const std::string bad = dir.file("train/z/notes.jpg");
  testing::WriteAll(bad, "these are notes, not an image\n");
  const std::string glob = "files: \"" + dir.file("train/*/*.{jpg,JPG}") + "\"";
  testing::WriteAll(dir.file("sluice.textproto"),
                    "listen: \"127.0.0.1:0\"\n" + Dataset("folder", glob) +
                        Dataset("strict", glob, "    error_policy: ERROR_POLICY_FAIL\n"));
  ServerProcess server({"--config", dir.file("sluice.textproto")});
  REQUIRE(server.running());
  v1::StreamRequest r = Request("folder");
  r.set_equal_shares(v1::EQUAL_SHARES_OFF);
  r.set_epochs(1);
  const Raw raw = ReadRaw(server.address(), r);
  REQUIRE(raw.status.ok());
  int64_t samples = 0;
  for (const v1::Batch& b : raw.batches) samples += b.labels_size();
  CHECK(samples == static_cast<int64_t>(want.size()));
  auto stats = serve_testing::Connect(server.address())->GetStats("folder");
  REQUIRE(stats.ok());
  REQUIRE(stats->datasets_size() == 1);
  CHECK(stats->datasets(0).skipped_records() == 1);
  // Under ERROR_POLICY_FAIL the stream ends with the decoder's error, naming the file.
  v1::StreamRequest strict = Request("strict");
  strict.set_equal_shares(v1::EQUAL_SHARES_OFF);
  const Raw failed = ReadRaw(server.address(), strict);
  CHECK_FALSE(failed.status.ok());
  CHECK_THAT(failed.status.error_message(),
             Catch::Contains(bad + ":0: not a JPEG, PNG or WebP image"));
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

TEST_CASE("QuickServeOfAFileListServesItsFilesWithTheirLabels") {
  TempDir dir;
  const std::map<std::string, int> folder = WriteTree(dir);
  std::string jsonl;
  std::map<std::string, int> listed;
  int label = 100;
  for (const auto& [path, unused] : folder) {
    jsonl += "{\"path\": \"" + path + "\", \"label\": " + std::to_string(label) + "}\n";
    listed[path] = label++;
  }
  testing::WriteAll(dir.file("train.jsonl"), jsonl);
  ServerProcess server({"--file-list", dir.file("train.jsonl"), "--port", "0"});
  REQUIRE(server.running());
  v1::StreamRequest r = Request("train");
  r.set_record_ids(true);
  r.set_equal_shares(v1::EQUAL_SHARES_OFF);
  r.set_epochs(1);
  r.set_image_height(32);
  const Raw raw = ReadRaw(server.address(), r);
  REQUIRE(raw.status.ok());
  std::vector<std::string> files;
  for (const auto& [path, unused] : listed) files.push_back(path);
  std::map<std::string, int> got;
  for (const v1::Batch& b : raw.batches) {
    for (int i = 0; i < b.labels_size(); ++i) {
      got[files.at(static_cast<size_t>(b.record_files(i)))] = b.labels(i);
    }
  }
  CHECK(got == listed);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// One epoch of `dataset` with record ids: how many times each file (index into the dataset's
// sorted files) arrived, and its labels.
struct Epoch {
  grpc::Status status;
  std::map<int64_t, int> times;
  std::map<int64_t, int64_t> labels;
};

Epoch StreamOneEpoch(const std::string& address, const std::string& dataset) {
  v1::StreamRequest r = Request(dataset);
  r.set_record_ids(true);
  r.set_equal_shares(v1::EQUAL_SHARES_OFF);
  r.set_epochs(1);
  const Raw raw = ReadRaw(address, r);
  Epoch e;
  e.status = raw.status;
  for (const v1::Batch& b : raw.batches) {
    for (int i = 0; i < b.labels_size(); ++i) {
      ++e.times[b.record_files(i)];
      e.labels[b.record_files(i)] = b.labels(i);
    }
  }
  return e;
}

int64_t Skipped(const std::string& address, const std::string& dataset) {
  auto stats = serve_testing::Connect(address)->GetStats(dataset);
  REQUIRE(stats.ok());
  REQUIRE(stats->datasets_size() == 1);
  return stats->datasets(0).skipped_records();
}

// The server expands patterns (and reads lists) once, at start-up; a file deleted after that is
// what any unreadable file is: one bad record naming it, counted as a skip (or the stream's error
// under ERROR_POLICY_FAIL), never a refused stream. Image folders, file lists and TFRecord shards.
TEST_CASE("FileDeletedAfterStartIsOneCountedSkipOrAnErrorNamingItNotARefusedStream") {
  TempDir dir;
  const std::map<std::string, int> folder = WriteTree(dir);
  std::string csv;
  for (const auto& [path, label] : folder) csv += path + "," + std::to_string(label) + "\n";
  testing::WriteAll(dir.file("list.csv"), csv);
  serve_testing::WriteIdShards(dir, {5, 6, 7});  // labels 0-4, 5-10, 11-17
  const std::string glob = "files: \"" + dir.file("train/*/*.{jpg,JPG}") + "\"";
  const std::string shards = "files: \"" + dir.file("shard-*.tfrecord") + "\"";
  const std::string fail = "    error_policy: ERROR_POLICY_FAIL\n";
  testing::WriteAll(dir.file("sluice.textproto"),
                    "listen: \"127.0.0.1:0\"\n" + Dataset("folder", glob) +
                        Dataset("folder_strict", glob, fail) +
                        Dataset("list", "file_list: \"" + dir.file("list.csv") + "\"") +
                        Dataset("shards", shards) + Dataset("shards_strict", shards, fail));
  ServerProcess server({"--config", dir.file("sluice.textproto")});
  REQUIRE(server.running());
  for (const char* dataset : {"folder", "list", "shards"}) {
    INFO(dataset);
    const Epoch before = StreamOneEpoch(server.address(), dataset);
    REQUIRE(before.status.ok());
    CHECK(before.times.size() == (std::string(dataset) == "shards" ? 3 : folder.size()));
  }

  const std::string gone = dir.file("train/b/2.jpg");
  REQUIRE(std::filesystem::remove(gone));
  REQUIRE(std::filesystem::remove(dir.file("shard-1.tfrecord")));
  const int64_t gone_index = std::distance(folder.begin(), folder.find(gone));
  for (const char* dataset : {"folder", "list"}) {
    INFO(dataset);
    const Epoch after = StreamOneEpoch(server.address(), dataset);
    REQUIRE(after.status.ok());
    CHECK(after.times.size() == folder.size() - 1);
    CHECK(after.times.count(gone_index) == 0);
    for (const auto& [file, n] : after.times) CHECK(n == 1);
    CHECK(Skipped(server.address(), dataset) == 1);
  }
  const Epoch strict = StreamOneEpoch(server.address(), "folder_strict");
  REQUIRE_FALSE(strict.status.ok());
  CHECK_THAT(strict.status.error_message(), Catch::Contains(gone));

  // Shard 1 (labels 5-10) is gone: every other record once, the shard one counted skip.
  v1::StreamRequest r = Request("shards");
  r.set_equal_shares(v1::EQUAL_SHARES_OFF);
  r.set_epochs(1);
  const Raw raw = ReadRaw(server.address(), r);
  REQUIRE(raw.status.ok());
  std::map<int, int> labels;
  for (const v1::Batch& b : raw.batches) {
    for (int i = 0; i < b.labels_size(); ++i) ++labels[b.labels(i)];
  }
  std::map<int, int> want;
  for (int label = 0; label < 18; ++label) {
    if (label < 5 || label > 10) want[label] = 1;
  }
  CHECK(labels == want);
  CHECK(Skipped(server.address(), "shards") == 1);
  const Raw failed = ReadRaw(server.address(), Request("shards_strict"));
  REQUIRE_FALSE(failed.status.ok());
  CHECK_THAT(failed.status.error_message(), Catch::Contains(dir.file("shard-1.tfrecord")));
}

// A file list is read once, at start-up: edited mid-run (lines dropped, labels changed, a line
// that does not parse) it is served as first read, so a resuming client sees the same files and
// labels; the server warns once, naming the list.
TEST_CASE("FileListEditedAfterStartIsServedAsFirstReadWithOneWarningNamingIt") {
  TempDir dir;
  const std::map<std::string, int> folder = WriteTree(dir);
  std::map<std::string, int> listed;
  std::string csv = "path,label\n";
  int label = 0;
  for (const auto& [path, unused] : folder) {
    csv += path + "," + std::to_string(label) + "\n";
    listed[path] = label++;
  }
  const std::string list = dir.file("list.csv");
  testing::WriteAll(list, csv);
  testing::WriteAll(dir.file("sluice.textproto"),
                    "listen: \"127.0.0.1:0\"\n" + Dataset("list", "file_list: \"" + list + "\""));
  ServerProcess server({"--config", dir.file("sluice.textproto")});
  REQUIRE(server.running());
  ExpectEachFileOncePerEpochWithItsLabel(server.address(), "list", listed);

  testing::WriteAll(list, "path,label\n" + folder.begin()->first + ",7\nnot a line\n");
  ExpectEachFileOncePerEpochWithItsLabel(server.address(), "list", listed);
  ExpectEachFileOncePerEpochWithItsLabel(server.address(), "list", listed);
  const std::string out = server.output();
  const std::string warning = "file_list " + list + " changed since the server read it";
  const size_t at = out.find(warning);
  CHECK(at != std::string::npos);
  CHECK(out.find(warning, at + 1) == std::string::npos);
}

}  // namespace
}  // namespace sluice
