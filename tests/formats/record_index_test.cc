#include "formats/record_index.h"

#include <catch2/catch.hpp>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/test_support.h"
#include "tests/tfrecord_test_file.h"

namespace sluice {
namespace {

using testing::TempDir;

TEST_CASE("IndexLivesBesideItsShard") {
  CHECK(IndexPathFor("/data/train-00001.tfrecord") == "/data/train-00001.tfrecord.idx");
  CHECK(IndexPathFor("a.gz") == "a.gz.idx");
}

TEST_CASE("FormatWritesDaliTfrecord2idxLines") {
  CHECK(FormatRecordIndex({}).empty());
  CHECK(FormatRecordIndex({{0, 21}, {21, 16}, {37, 18446744073709551578u}}) ==
        "0 21\n21 16\n37 18446744073709551578\n");
}

TEST_CASE("ParseAcceptsWhatFormatWritesAndToleratedVariants") {
  const std::vector<IndexEntry> entries = {{0, 100}, {100, 16}, {116, 5000}};
  struct Case {
    const char* what;
    std::string text;
    std::vector<IndexEntry> expected;
  };
  const std::vector<Case> cases = {
      {"formatted", FormatRecordIndex(entries), entries},
      {"empty", "", {}},
      {"no final newline", "0 100\n100 16\n116 5000", entries},
      {"CRLF", "0 100\r\n100 16\r\n116 5000\r\n", entries},
      {"tabs and extra spaces", "0\t100\n100  16 \n 116 5000\n", entries},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    auto parsed = ParseRecordIndex(c.text, "x.idx");
    REQUIRE(parsed.ok());
    CHECK(*parsed == c.expected);
  }
}

TEST_CASE("ParseRejectsGapsOverlapsAndGarbageNamingTheLine") {
  struct Case {
    const char* what;
    std::string text;
    std::string message;  // expected to appear in the error
  };
  const std::vector<Case> cases = {
      {"first record not at 0", "5 20\n", "x.idx:1: gap"},
      {"gap", "0 20\n20 16\n40 16\n",
       "x.idx:3: gap: record at 40, but the previous one ends at 36"},
      {"overlap", "0 20\n19 16\n", "x.idx:2: overlap"},
      {"repeated line", "0 20\n0 20\n", "x.idx:2: overlap"},
      {"frame below 16 bytes", "0 20\n20 15\n", "x.idx:2: length 15"},
      {"zero length", "0 0\n", "x.idx:1: length 0"},
      {"one field", "0 20\n20\n", "x.idx:2: expected"},
      {"three fields", "0 20 7\n", "x.idx:1: expected"},
      {"negative", "0 20\n-20 16\n", "x.idx:2: expected"},
      {"words", "offset length\n", "x.idx:1: expected"},
      {"empty line", "0 20\n\n20 16\n", "x.idx:2: expected"},
      {"hex", "0 0x20\n", "x.idx:1: expected"},
      {"overflowing number", "0 99999999999999999999\n", "x.idx:1: expected"},
      {"past 2^64", "0 18446744073709551615\n18446744073709551615 16\n", "x.idx:2: record extends"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    auto parsed = ParseRecordIndex(c.text, "x.idx");
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().code() == StatusCode::kDataLoss);
    CHECK_THAT(parsed.status().message(), Catch::Contains(c.message));
  }
}

TEST_CASE("WriteAndReadRoundTripThroughAFile") {
  TempDir dir;
  const std::vector<IndexEntry> entries = {{0, 16}, {16, 1 << 20}, {16 + (1 << 20), 17}};
  REQUIRE(WriteRecordIndex(dir.file("s.idx"), entries).ok());
  auto read = ReadRecordIndex(dir.file("s.idx"));
  REQUIRE(read.ok());
  CHECK(*read == entries);
  auto missing = ReadRecordIndex(dir.file("missing.idx"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == StatusCode::kNotFound);
}

TEST_CASE("ReadRecordIndexNamesTheFileOfABadLine") {
  TempDir dir;
  testing::WriteAll(dir.file("s.idx"), "0 16\n17 16\n");
  auto read = ReadRecordIndex(dir.file("s.idx"));
  REQUIRE_FALSE(read.ok());
  CHECK_THAT(read.status().message(), Catch::Contains(dir.file("s.idx") + ":2"));
}

TEST_CASE("BuildRecordIndexRefusesAShardWithACorruptRecord") {
  TempDir dir;
  std::string shard;
  AppendTFRecordFrame("first", &shard);
  AppendTFRecordFrame("second", &shard);
  AppendTFRecordFrame("third", &shard);
  testing::WriteAll(dir.file("good"), shard);
  auto good = BuildRecordIndex(dir.file("good"));
  REQUIRE(good.ok());
  CHECK(*good == std::vector<IndexEntry>{{0, 21}, {21, 22}, {43, 21}});

  shard[21 + 12] ^= 1;  // data of the second record
  testing::WriteAll(dir.file("bad"), shard);
  auto bad = BuildRecordIndex(dir.file("bad"));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == StatusCode::kDataLoss);
  CHECK_THAT(bad.status().message(), Catch::Contains(dir.file("bad") + ":21"));

  auto missing = BuildRecordIndex(dir.file("missing"));
  CHECK(missing.status().code() == StatusCode::kNotFound);
}

// The frames found from the headers alone are the index the writer gives, small frames or large;
// damage the reader cannot step past ends the walk, named by path:offset, with the frames before
// it found; damaged data is no damage to a walk of headers.
TEST_CASE("TheHeaderWalkFindsTheFramesBeforeAnyDamageItCannotStepPast") {
  TempDir dir;
  const std::string path = dir.file("s");
  std::vector<std::string> records;
  for (size_t bytes : {size_t{10}, size_t{3000}, size_t{100} << 10, size_t{20}, size_t{5}}) {
    records.push_back(std::string(bytes, 'x'));
  }
  const std::vector<IndexEntry> written = testing::WriteTFRecordFile(path, records);
  const std::string intact = testing::ReadAll(path);
  auto walk = [&](const std::string& bytes) {
    testing::WriteAll(path, bytes);
    auto fd = OpenForPositionalReads(path);
    REQUIRE(fd.ok());
    FrameHeaderWalker walker(fd->get(), path, bytes.size());
    std::vector<IndexEntry> found;
    IndexEntry frame;
    while (walker.Next(&frame)) found.push_back(frame);
    CHECK_FALSE(walker.Next(&frame));
    return std::make_pair(found, walker.status());
  };
  auto [found, status] = walk(intact);
  CHECK(status.ok());
  CHECK(found == written);
  const std::vector<IndexEntry> first3(written.begin(), written.begin() + 3);
  std::string bytes = intact;
  bytes[written[3].offset + 8] ^= 1;  // the fourth frame's length CRC
  std::tie(found, status) = walk(bytes);
  CHECK(found == first3);
  CHECK(status.code() == StatusCode::kDataLoss);
  CHECK_THAT(status.message(), Catch::StartsWith(path + ":" + std::to_string(written[3].offset) +
                                                 ": corrupted record length"));
  std::tie(found, status) = walk(intact.substr(0, written[3].offset + 20));
  CHECK(found == first3);
  CHECK_THAT(status.message(), Catch::Contains("runs past the end of the file"));
  std::tie(found, status) = walk(intact.substr(0, written[3].offset + 5));
  CHECK(found == first3);
  CHECK_THAT(status.message(), Catch::Contains("ends inside a record header"));
  bytes = intact;
  bytes[written[2].offset + 12 + 7] ^= 1;  // the third frame's data
  std::tie(found, status) = walk(bytes);
  CHECK(status.ok());
  CHECK(found == written);
}

// Entries that tile the file and still lie: each is caught at the entry it touches, by the frame
// header found at its offset, and named by the index's path and line.
TEST_CASE("FrameCheckerCatchesMergedSplitAndDamagedEntriesNamingTheLine") {
  TempDir dir;
  std::string shard;
  AppendTFRecordFrame("first", &shard);   // {0, 21}
  AppendTFRecordFrame("second", &shard);  // {21, 22}
  AppendTFRecordFrame("third", &shard);   // {43, 21}
  testing::WriteAll(dir.file("s"), shard);
  auto checker = IndexedFrameChecker::Open(dir.file("s"));
  REQUIRE(checker.ok());
  const std::string idx = dir.file("s") + ".idx";
  struct Case {
    const char* what;
    IndexEntry entry;
    std::string message;  // empty: the entry is right
  } cases[] = {
      {"true", {21, 22}, ""},
      {"merged", {21, 43}, idx + ":2 (record at 21, 43 bytes): the frame there is 22 bytes"},
      {"split", {0, 16}, idx + ":2 (record at 0, 16 bytes): the frame there is 21 bytes"},
      {"not at a frame", {5, 16}, idx + ":2 (record at 5, 16 bytes): no intact frame header there"},
      {"past the end", {64, 16}, idx + ":2 (record at 64, 16 bytes): "},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    Status s = checker->Check(c.entry, 2);
    if (c.message.empty()) {
      CHECK(s.ok());
    } else {
      CHECK(s.code() == StatusCode::kDataLoss);
      CHECK_THAT(s.message(), Catch::StartsWith("record index " + c.message));
    }
  }
  shard[21 + 8] ^= 1;  // the second frame's length CRC
  testing::WriteAll(dir.file("s"), shard);
  CHECK_THAT(checker->Check({21, 22}, 2).message(), Catch::Contains("no intact frame header"));
}

}  // namespace
}  // namespace sluice
