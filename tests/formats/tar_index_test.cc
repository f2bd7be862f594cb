// Tar indexes in DALI wds2idx's format: built from shards GNU tar wrote (a folder between samples,
// pax long names, gzip), parsed back, never confused with a TFRecord index, and checked against
// the shard sample by sample (a stale index fails at the first sample that differs) or at its end.
#include "formats/tar_index.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/record_index.h"
#include "tests/test_support.h"
#include "tests/zlib_test_util.h"

namespace sluice {
namespace {

using testing::TempDir;
using testing::WriteAll;

// dir/<name> written by GNU tar from members dir/src/<member> (data `contents[member]` each, a
// member ending in "/" a folder), in the order given.
std::string WriteTar(const TempDir& dir, const std::string& name,
                     const std::vector<std::pair<std::string, std::string>>& members,
                     const std::string& format = "gnu") {
  std::filesystem::remove_all(dir.file("src"));
  std::filesystem::create_directories(dir.file("src"));
  std::string names;
  for (const auto& [member, data] : members) {
    const std::string path = dir.file("src/" + member);
    if (member.back() == '/') {
      std::filesystem::create_directories(path);
    } else {
      std::filesystem::create_directories(std::filesystem::path(path).parent_path());
      WriteAll(path, data);
    }
    names += " '" + member + "'";
  }
  const std::string tar = dir.file(name);
  REQUIRE(testing::RunCommand("tar", "--no-recursion --format=" + format + " -C " +
                                         dir.file("src") + " -cf " + tar + names)
              .exit_code == 0);
  return tar;
}

std::vector<std::pair<std::string, std::string>> ThreeSamples() {
  return {{"s1.jpg", std::string(700, 'a')},
          {"s1.cls", "1\n"},
          {"d/", ""},
          {"s2.jpg", std::string(1400, 'b')},
          {"s2.cls", "2\n"},
          {"s3.seg.png", std::string(2100, 'c')},
          {"s3.cls", "3\n"}};
}

TEST_CASE("AnIndexListsEachSamplesMembersAtTheirDataOffsetsAsWds2idxWritesIt") {
  TempDir dir;
  const std::string tar = WriteTar(dir, "a.tar", ThreeSamples());
  auto index = BuildTarIndex(tar);
  REQUIRE(index.ok());
  // Each member's data follows its 512-byte header; the folder "d" takes a header between s1 and
  // s2 and is no sample's member. The extension is what follows the first dot.
  CHECK(FormatTarIndex(*index) ==
        "v1.2 3\n"
        "jpg 512 700 s1.jpg cls 2048 2 s1.cls\n"
        "jpg 3584 1400 s2.jpg cls 5632 2 s2.cls\n"
        "seg.png 6656 2100 s3.seg.png cls 9728 2 s3.cls\n");
  auto parsed = ParseTarIndex(FormatTarIndex(*index), "a.tar.idx");
  REQUIRE(parsed.ok());
  CHECK(*parsed == *index);
  CHECK(TarSampleStart(*index, 0) == 0);
  CHECK(TarSampleStart(*index, 1) == 2560);  // after s1.cls's data: the folder's header
  CHECK(TarSampleStart(*index, 2) == 5632 + 512);
}

TEST_CASE("PaxLongNamesAndGzipKeepDataOffsetsInTheUncompressedStream") {
  TempDir dir;
  const std::string long_key = std::string(120, 'x') + "/sample";
  const std::string tar =
      WriteTar(dir, "p.tar", {{long_key + ".jpg", "jpeg"}, {long_key + ".cls", "7"}}, "pax");
  auto index = BuildTarIndex(tar);
  REQUIRE(index.ok());
  REQUIRE(index->size() == 1);
  const std::vector<TarIndexMember>& m = (*index)[0].members;
  REQUIRE(m.size() == 2);
  CHECK(m[0].name == long_key + ".jpg");
  CHECK(m[0].ext == "jpg");
  // Its data is where the bytes are: after the pax header, its records and the member's header.
  const std::string bytes = testing::ReadAll(tar);
  CHECK(bytes.substr(m[0].offset, 4) == "jpeg");
  CHECK(bytes.substr(m[1].offset, 1) == "7");
  CHECK(m[0].offset > 1024);

  const std::string gz = dir.file("p.tar.gz");
  WriteAll(gz, testing::Gzip(bytes));
  auto from_gz = BuildTarIndex(gz);
  REQUIRE(from_gz.ok());
  CHECK(*from_gz == *index);
}

TEST_CASE("ATFRecordIndexIsNotATarIndexNorTheReverse") {
  const std::string tfrecord_index = FormatRecordIndex({{0, 100}, {100, 50}});
  auto as_tar = ParseTarIndex(tfrecord_index, "x.tar.idx");
  REQUIRE(!as_tar.ok());
  CHECK_THAT(as_tar.status().message(),
             Catch::Contains("x.tar.idx:1") && Catch::Contains("expected \"v1.2 <samples>\""));
  auto as_tfrecord = ParseRecordIndex("v1.2 1\njpg 512 10 a.jpg\n", "x.tfrecord.idx");
  CHECK(!as_tfrecord.ok());
}

TEST_CASE("AnIndexThatCannotDescribeATarIsRefusedNamingItsLine") {
  struct Case {
    std::string text;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"v1.1 1\njpg 512 10\n", ":1: expected"},
      {"v1.2 2\njpg 512 10 a.jpg\n", ":3: the index ends after 1 of its 2 samples"},
      {"v1.2 1\njpg 512 10 a.jpg\ncls 2048 1 b.cls\n", ":3: more samples than the 1"},
      {"v1.2 1\njpg 500 10 a.jpg\n", ":2: member 1: offset 500 is not a multiple of 512"},
      {"v1.2 1\njpg 0 10 a.jpg\n", ":2: member 1 at 0 overlaps"},
      {"v1.2 2\njpg 512 600 a.jpg\njpg 1536 1 b.jpg\n", ":3: member 1 at 1536 overlaps"},
      {"v1.2 1\njpg 512 10\n", ":2: member 1: expected \"<ext> <offset> <size> <name>\""},
      {"v1.2 1\n\n", ":2: a sample without members"},
      // Offsets near 2^64: the checks do not wrap.
      {"v1.2 1\njpg 18446744073709551104 0 a.jpg jpg 512 700 s0.jpg\n",
       ":2: member 1 extends past 2^64"},
      {"v1.2 1\njpg 18446744073709550592 0 a.jpg jpg 512 700 s0.jpg\n",
       ":2: member 2 at 512 overlaps"},
      {"v1.2 1\njpg 512 18446744073709550592 a.jpg\n", ":2: member 1 extends past 2^64"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    auto parsed = ParseTarIndex(c.text, "i.idx");
    REQUIRE(!parsed.ok());
    CHECK(parsed.status().code() == StatusCode::kDataLoss);
    CHECK_THAT(parsed.status().message(), Catch::Contains("i.idx" + c.error));
  }
  auto empty = ParseTarIndex("v1.2 0\n", "i.idx");
  REQUIRE(empty.ok());
  CHECK(empty->empty());
}

TEST_CASE("TheCheckerPassesTheShardsOwnIndexAndFailsAtTheFirstSampleOfARewrittenShard") {
  TempDir dir;
  const std::string tar = WriteTar(dir, "a.tar", ThreeSamples());
  auto index = BuildTarIndex(tar);
  REQUIRE(index.ok());
  {
    auto checker = TarIndexChecker::Open(tar, RecordReaderOptions{});
    REQUIRE(checker.ok());
    for (size_t i = 0; i < index->size(); ++i) {
      INFO(i);
      REQUIRE(checker->Check(*index, i).ok());
      CHECK(checker->record_offset() == (*index)[i].members[0].offset - kTarBlockBytes);
    }
  }
  REQUIRE(CheckTarIndexEnds(tar, *index, RecordReaderOptions{}).ok());

  // The same names, but s2's image grew: samples 0 and 1 stay where they were, sample 1's
  // members do not.
  std::vector<std::pair<std::string, std::string>> members = ThreeSamples();
  members[3].second += std::string(600, 'b');
  WriteTar(dir, "a.tar", members);
  auto checker = TarIndexChecker::Open(tar, RecordReaderOptions{});
  REQUIRE(checker.ok());
  REQUIRE(checker->Check(*index, 0).ok());
  Status s = checker->Check(*index, 1);
  CHECK(s.code() == StatusCode::kDataLoss);
  CHECK_THAT(s.message(), Catch::Contains(tar + ".idx:3 (sample at 2560)") &&
                              Catch::Contains("member 1 is \"s2.jpg\" at 3584, 2000 bytes, its "
                                              "entry says \"s2.jpg\" at 3584, 1400 bytes"));
  CHECK(!CheckTarIndexEnds(tar, *index, RecordReaderOptions{}).ok());
}

TEST_CASE("TheEndsCheckCatchesAShardWithMoreOrFewerSamplesThanItsIndex") {
  TempDir dir;
  std::vector<std::pair<std::string, std::string>> members = ThreeSamples();
  const std::string tar = WriteTar(dir, "a.tar", members);
  auto three = BuildTarIndex(tar);
  REQUIRE(three.ok());
  members.push_back({"s4.jpg", "x"});
  WriteTar(dir, "a.tar", members);
  Status more = CheckTarIndexEnds(tar, *three, RecordReaderOptions{});
  CHECK_THAT(more.message(), Catch::Contains("the shard has more than its 3 samples"));
  members.resize(4);  // s1, s2's image only
  WriteTar(dir, "a.tar", members);
  CHECK(!CheckTarIndexEnds(tar, *three, RecordReaderOptions{}).ok());
}

// wds2idx lists every regular member, so a leading "__meta__" (which webdataset, and so the
// reader, skips as metadata) is a sample of its index: one sample too many at the start, caught
// there.
TEST_CASE("TheEndsCheckCatchesAnIndexListingAMemberTheReaderSkipsAsASample") {
  TempDir dir;
  std::vector<std::pair<std::string, std::string>> members = ThreeSamples();
  members.insert(members.begin(), {"__meta__", "meta"});
  const std::string tar = WriteTar(dir, "a.tar", members);
  auto index = BuildTarIndex(tar);
  REQUIRE(index.ok());
  REQUIRE(index->size() == 3);
  CHECK(CheckTarIndexEnds(tar, *index, RecordReaderOptions{}).ok());
  std::vector<TarIndexSample> wds2idx = *index;
  wds2idx.insert(wds2idx.begin(), TarIndexSample{{{"__meta__", 512, 4, "__meta__"}}});
  Status s = CheckTarIndexEnds(tar, wds2idx, RecordReaderOptions{});
  CHECK(s.code() == StatusCode::kDataLoss);
  // Caught from its names, before any read.
  CHECK_THAT(s.message(), Catch::Contains(tar + ".idx:2: member 1 \"__meta__\" is no sample's "
                                                "member"));
}

// DALI's wds2idx makes samples of members the reader skips or joins, so a real wds2idx index of
// such a shard counts other samples than the reader reads, though its first and last samples may
// match the shard: the names of every entry are checked against the reader's grouping, with no
// read of the shard.
TEST_CASE("AnIndexGroupingMembersOtherwiseThanTheReaderIsCaughtFromItsNames") {
  auto sample = [](std::vector<std::pair<std::string, std::string>> members) {
    TarIndexSample out;
    uint64_t offset = 512;
    for (auto& [ext, name] : members) {
      out.members.push_back({ext, offset, 1, name});
      offset += 1024;
    }
    return out;
  };
  const TarIndexSample s0 = sample({{"jpg", "s0.jpg"}, {"cls", "s0.cls"}});
  const TarIndexSample s1 = sample({{"jpg", "s1.jpg"}, {"seg.png", "s1.seg.png"}});
  CHECK(CheckTarIndexGrouping({s0, s1}, "i.idx").ok());
  struct Case {
    TarIndexSample entry;
    std::string error;
  };
  const std::vector<Case> cases = {
      {sample({{"README", "README"}}), "member 1 \"README\" is no sample's member"},
      {sample({{"__meta__", "__meta__"}}), "\"__meta__\" is no sample's member"},
      {sample({{"jpg", "__x__/a.jpg"}}), "\"__x__/a.jpg\" is no sample's member"},
      {sample({{"png", "s2.seg.png"}}), "has the extension \"seg.png\", not \"png\""},
      {sample({{"jpg", "s2.jpg"}, {"cls", "s3.cls"}}), "member 2 \"s3.cls\" has another key"},
      {sample({{"txt", "s1.txt"}}), "member 1 \"s1.txt\" has the key of the sample before it"},
  };
  for (const Case& c : cases) {
    INFO(c.error);
    Status s = CheckTarIndexGrouping({s0, s1, c.entry}, "i.idx");
    CHECK(s.code() == StatusCode::kDataLoss);
    CHECK_THAT(s.message(), Catch::Contains("tar index i.idx:4: ") && Catch::Contains(c.error));
  }
}

// An index entry the checker would have to hold more member names for than the per-record limit
// allows is not checked (the lazy start reads the shard from there, and the reader refuses the
// sample as it would anyway).
TEST_CASE("TheCheckerDoesNotHoldMoreMemberNamesThanThePerRecordLimit") {
  TempDir dir;
  std::vector<std::pair<std::string, std::string>> members;
  for (int i = 0; i < 20; ++i) members.push_back({"a.e" + std::to_string(i), ""});
  members.push_back({"b.jpg", "b"});
  const std::string tar = WriteTar(dir, "a.tar", members);
  auto index = BuildTarIndex(tar);
  REQUIRE(index.ok());
  REQUIRE(index->size() == 2);
  RecordReaderOptions options;
  options.stream.max_held_record_bytes = 1000;  // the names and 128 bytes a member: 2.7 KB
  auto checker = TarIndexChecker::Open(tar, options);
  REQUIRE(checker.ok());
  Status s = checker->Check(*index, 0);
  CHECK(s.code() == StatusCode::kDataLoss);
  CHECK_THAT(s.message(), Catch::Contains(tar + ".idx:2 (sample at 0)") &&
                              Catch::Contains("more member names than the per-record limit"));
  options.stream.max_held_record_bytes = 4000;
  checker = TarIndexChecker::Open(tar, options);
  REQUIRE(checker.ok());
  CHECK(checker->Check(*index, 0).ok());
  CHECK(checker->Check(*index, 1).ok());
}

// An index is never larger than twice its shard (plus its version line), and lists no member past
// the shard's end: a larger one is refused before it is read, one that runs past while it is
// parsed, naming its line.
TEST_CASE("AnIndexLargerThanItsShardCouldHaveIsRefused") {
  TempDir dir;
  const std::string tar = WriteTar(dir, "a.tar", ThreeSamples());
  const uint64_t shard_bytes = std::filesystem::file_size(tar);
  auto index = BuildTarIndex(tar);
  REQUIRE(index.ok());
  const std::string text = FormatTarIndex(*index);
  const std::string idx = IndexPathFor(tar);
  WriteAll(idx, text);
  auto read = ReadTarIndex(idx, shard_bytes);
  REQUIRE(read.ok());
  CHECK(*read == *index);
  CHECK(MaxTarIndexBytes(shard_bytes) == 2 * shard_bytes + 64);
  // Trailing blank lines parse, but no index of this shard is that long.
  WriteAll(idx, text + std::string(MaxTarIndexBytes(shard_bytes) + 1 - text.size(), '\n'));
  read = ReadTarIndex(idx, shard_bytes);
  REQUIRE(!read.ok());
  CHECK(read.status().code() == StatusCode::kDataLoss);
  CHECK_THAT(read.status().message(),
             Catch::Contains("tar index " + idx + " is " +
                             std::to_string(MaxTarIndexBytes(shard_bytes) + 1) + " bytes"));
  // The last sample's member past the end of a shard cut short.
  WriteAll(idx, text);
  read = ReadTarIndex(idx, 9728);
  REQUIRE(!read.ok());
  CHECK_THAT(read.status().message(),
             Catch::Contains(idx + ":4: member 2 ends at 10240, past the end of the 9728-byte "
                                   "shard"));
  // Many members that each claim a block: no more fit than the shard has blocks.
  std::string many = "v1.2 100000\n";
  for (int i = 0; i < 100000; ++i) {
    many += "jpg " + std::to_string(512 + 1024 * i) + " 0 s" + std::to_string(i) + ".jpg\n";
  }
  auto parsed = ParseTarIndex(many, "m.idx", shard_bytes);
  REQUIRE(!parsed.ok());
  CHECK_THAT(
      parsed.status().message(),
      Catch::Contains("m.idx:" + std::to_string(shard_bytes / 1024 + 2) + ": member 1 ends"));
}

TEST_CASE("AMemberNameWithWhitespaceGetsNoIndex") {
  TempDir dir;
  const std::string tar = WriteTar(dir, "a.tar", {{"a b.jpg", "x"}});
  auto index = BuildTarIndex(tar);
  REQUIRE(!index.ok());
  CHECK_THAT(index.status().message(),
             Catch::Contains(tar + ":512: tar member \"a b.jpg\" has whitespace in its name"));
}

TEST_CASE("ADamagedShardGetsNoIndex") {
  TempDir dir;
  const std::string tar = WriteTar(dir, "a.tar", ThreeSamples());
  std::string bytes = testing::ReadAll(tar);
  bytes[3072 + 10] ^= 1;  // s2.jpg's header: its checksum fails
  WriteAll(tar, bytes);
  auto index = BuildTarIndex(tar);
  REQUIRE(!index.ok());
  CHECK(index.status().code() == StatusCode::kDataLoss);
  CHECK_THAT(index.status().message(), Catch::Contains(tar + ":3072"));
}

// The scan behind an index built on open: the samples before the damage, and the damage naming
// the shard and offset; names with whitespace kept (nothing is written).
TEST_CASE("AScanOfADamagedShardKeepsTheSamplesBeforeTheDamage") {
  TempDir dir;
  const std::string tar = WriteTar(dir, "a.tar", ThreeSamples());
  auto whole = BuildTarIndex(tar);
  REQUIRE(whole.ok());
  const TarSamplesScan clean = ScanTarSamples(tar);
  CHECK(clean.damage.ok());
  CHECK(clean.samples == *whole);

  std::string bytes = testing::ReadAll(tar);
  // s3.seg.png's header: its checksum fails. s2 is not known to have ended before it, so, as the
  // reader has it, only s1 comes before the damage.
  bytes[6144 + 10] ^= 1;
  WriteAll(tar, bytes);
  const TarSamplesScan damaged = ScanTarSamples(tar);
  CHECK(damaged.damage.code() == StatusCode::kDataLoss);
  CHECK_THAT(damaged.damage.message(), Catch::Contains(tar + ":6144"));
  REQUIRE(damaged.samples.size() == 1);
  CHECK(damaged.samples[0] == (*whole)[0]);

  const std::string spaced = WriteTar(dir, "b.tar", {{"a b.jpg", "x"}});
  const TarSamplesScan named = ScanTarSamples(spaced);
  CHECK(named.damage.ok());
  REQUIRE(named.samples.size() == 1);
  CHECK(named.samples[0].members[0].name == "a b.jpg");

  const TarSamplesScan missing = ScanTarSamples(dir.file("missing.tar"));
  CHECK(missing.damage.code() == StatusCode::kNotFound);
  CHECK(missing.samples.empty());
}

}  // namespace
}  // namespace sluice
