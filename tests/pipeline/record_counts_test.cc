// Record counts as the source counts records (end_record terms): from the frames of plain, GZIP
// and ZLIB shards, from a record index that tiles the file, and for damaged files the same number
// of items RecordSource yields before it gives up on the file. The cache rescans a changed file
// only, and callers asking at once for the same files scan each once.
#include "pipeline/record_counts.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "formats/crc32c.h"
#include "formats/file.h"
#include "formats/record_index.h"
#include "formats/tar_index.h"
#include "formats/tfrecord_writer.h"
#include "pipeline/record_source.h"
#include "tests/test_proc_io.h"
#include "tests/test_support.h"

namespace sluice {
namespace {

std::vector<SourceKind> TFRecordKinds(const std::vector<std::string>& files) {
  return std::vector<SourceKind>(files.size(), SourceKind::kTFRecord);
}

using testing::RandomBytes;
using testing::TempDir;

struct Stream {
  std::string bytes;
  std::vector<size_t> starts;  // each frame's offset
};

Stream Frames(int n, size_t size = 300) {
  Stream s;
  for (int r = 0; r < n; ++r) {
    s.starts.push_back(s.bytes.size());
    AppendTFRecordFrame(RandomBytes(size + 37 * r, 7 + r), &s.bytes);
  }
  return s;
}

void Write(const std::string& path, const std::string& stream, Compression c) {
  auto base = NewAtomicFile(path);
  REQUIRE(base.ok());
  auto file = c == Compression::kNone ? std::move(*base) : NewDeflatingFile(std::move(*base), c);
  REQUIRE(file->Append(stream).ok());
  REQUIRE(file->Commit().ok());
}

// What the pipeline's source yields for the file: records and bad records, in end_record terms.
uint64_t SourceItems(const std::string& path) {
  v1::PipelineOptions o;
  o.add_files(path);
  auto options = ResolveOptions(o);
  REQUIRE(options.ok());
  PipelineStats stats;
  RecordSource source(*options, &stats, nullptr, nullptr);
  source.StartEpoch(0);
  uint64_t items = 0;
  for (;;) {
    WorkItem w;
    bool end = false;
    source.Next(&w, &end);
    if (end) break;
    ++items;
  }
  return items;
}

TEST_CASE("PlainAndCompressedShardsAreCountedByTheirFrames") {
  for (Compression c : {Compression::kNone, Compression::kGzip, Compression::kZlib}) {
    INFO(CompressionName(c));
    TempDir dir;
    const std::string path = dir.file("a.tfrecord");
    Write(path, Frames(57).bytes, c);
    CHECK(CountFileRecords(path, std::nullopt) == FileRecords{57, false});
    CHECK(CountFileRecords(path, c) == FileRecords{57, false});
  }
}

TEST_CASE("LargeRecordsInAGzipShardAreStreamedNotHeld") {
  TempDir dir;
  const std::string path = dir.file("a.tfrecord.gz");
  Write(path, Frames(5, 3 << 20).bytes, Compression::kGzip);
  CHECK(CountFileRecords(path, std::nullopt).records == 5);
}

TEST_CASE("EmptyFileHasNoRecordsAndAMissingOneIsOneUnreadableRecord") {
  TempDir dir;
  testing::WriteAll(dir.file("empty.tfrecord"), "");
  CHECK(CountFileRecords(dir.file("empty.tfrecord"), std::nullopt) == FileRecords{0, false});
  CHECK(CountFileRecords(dir.file("missing.tfrecord"), std::nullopt) == FileRecords{1, true});
}

using testing::ReadChars;

// WebDataset shards written by GNU tar: a plain one counted from its headers alone (its payloads
// seeked over, never read), a gzipped one streamed, a cut one as the source reads it (the
// samples before the cut, and the cut one as one more).
TEST_CASE("TarShardsAreCountedBySamplesReadingAPlainOnesHeadersOnly") {
  TempDir dir;
  std::string members;
  for (int i = 0; i < 4; ++i) {
    const std::string key = "s" + std::to_string(i);
    testing::WriteAll(dir.file(key + ".jpg"), RandomBytes(4 << 20, i));
    testing::WriteAll(dir.file(key + ".cls"), std::to_string(i));
    members += " " + key + ".jpg " + key + ".cls";
  }
  const std::string tar = dir.file("shard.tar");
  REQUIRE(
      testing::RunCommand("tar", "-C " + dir.path().string() + " -cf " + tar + members).exit_code ==
      0);
  REQUIRE(testing::RunCommand("gzip", "-k " + tar).exit_code == 0);
  const std::string data = testing::ReadAll(tar);
  testing::WriteAll(dir.file("cut.tar"), data.substr(0, 2 * (512 + (4 << 20) + 1024) + 1000));

  const uint64_t before = ReadChars();
  CHECK(CountFileRecords(tar, std::nullopt, SourceKind::kTar) == FileRecords{4, false});
  CHECK(ReadChars() - before < (64 << 10));  // of 16 MiB
  CHECK(CountFileRecords(tar + ".gz", std::nullopt, SourceKind::kTar) == FileRecords{4, false});
  CHECK(CountFileRecords(dir.file("cut.tar"), std::nullopt, SourceKind::kTar) ==
        FileRecords{3, false});
}

// A tar shard's index is trusted for its count when the shard still begins and ends as it says
// (its first and last samples where their entries put them, then the end of the archive) and
// nothing it does not list lies between its members: a few reads, not one per member. One that
// does not (samples appended since, an entry deleted) is not used.
TEST_CASE("ATarIndexThatEndsWhereTheShardDoesIsTrustedWithoutReadingEveryHeader") {
  TempDir dir;
  std::vector<std::string> members;
  auto write = [&](int n) {
    std::string names;
    for (int i = 0; i < n; ++i) {
      const std::string key = "s" + std::to_string(i);
      testing::WriteAll(dir.file(key + ".jpg"), RandomBytes(100 + i, i));
      testing::WriteAll(dir.file(key + ".cls"), std::to_string(i));
      names += " " + key + ".jpg " + key + ".cls";
    }
    REQUIRE(testing::RunCommand(
                "tar", "-C " + dir.path().string() + " -cf " + dir.file("shard.tar") + names)
                .exit_code == 0);
  };
  const std::string tar = dir.file("shard.tar");
  write(64);
  auto index = BuildTarIndex(tar);
  REQUIRE(index.ok());
  REQUIRE(index->size() == 64);
  REQUIRE(WriteTarIndex(IndexPathFor(tar), *index).ok());
  uint64_t before = testing::ReadChars();
  CHECK(CountFileRecords(tar, std::nullopt, SourceKind::kTar) == FileRecords{64, false});
  // The index file and the first and last samples' headers, not the 128 headers (64 KiB) of a
  // scan.
  CHECK(testing::ReadChars() - before < 20 * 1024);
  // Without an inner entry the index still begins and ends where the shard does, but the deleted
  // sample's headers lie between two entries: that sample is read, and the shard counted.
  index->erase(index->begin() + 10);
  REQUIRE(WriteTarIndex(IndexPathFor(tar), *index).ok());
  CHECK(CountFileRecords(tar, std::nullopt, SourceKind::kTar) == FileRecords{64, false});
  write(65);
  CHECK(CountFileRecords(tar, std::nullopt, SourceKind::kTar) == FileRecords{65, false});
}

// DALI's wds2idx groups members otherwise than webdataset and the reader: a member without an
// extension ("README") is a sample of its index, and a hidden file ("dir/.hidden") is none. Its
// index of such a shard (as wds2idx writes it: same first and last samples) does not give the
// count; the shard's samples are counted.
TEST_CASE("AWds2idxIndexThatGroupsMembersOtherwiseIsNotTrustedForTheCount") {
  TempDir dir;
  std::filesystem::create_directories(dir.file("src/dir"));
  testing::WriteAll(dir.file("src/README"), "hello");
  testing::WriteAll(dir.file("src/dir/.hidden"), "h");
  const std::string tar = dir.file("shard.tar");
  // s0..s3 with `extra` after s1 (in /tmp/rv17/b.tar, README).
  auto write = [&](const std::string& extra) {
    std::string names;
    for (int i = 0; i < 4; ++i) {
      const std::string key = "s" + std::to_string(i);
      testing::WriteAll(dir.file("src/" + key + ".jpg"), std::string(700 + i, 'x'));
      testing::WriteAll(dir.file("src/" + key + ".cls"), std::to_string(i));
      names += " " + key + ".jpg " + key + ".cls";
      if (i == 1) names += " " + extra;
    }
    REQUIRE(testing::RunCommand("tar", "--format=gnu -C " + dir.file("src") + " -cf " + tar + names)
                .exit_code == 0);
    auto ours = BuildTarIndex(tar);
    REQUIRE(ours.ok());
    return *ours;
  };
  // README: the reader skips it (4 samples), wds2idx lists it as a sample (5).
  std::vector<TarIndexSample> ours = write("README");
  REQUIRE(ours.size() == 4);
  std::vector<TarIndexSample> wds2idx = ours;
  const uint64_t readme = ours[1].padded_end() + kTarBlockBytes;
  wds2idx.insert(wds2idx.begin() + 2, TarIndexSample{{{"README", readme, 5, "README"}}});
  REQUIRE(WriteTarIndex(IndexPathFor(tar), wds2idx).ok());
  CHECK(CountFileRecords(tar, std::nullopt, SourceKind::kTar) == FileRecords{4, false});
  REQUIRE(WriteTarIndex(IndexPathFor(tar), ours).ok());
  CHECK(CountFileRecords(tar, std::nullopt, SourceKind::kTar) == FileRecords{4, false});

  // dir/.hidden: the reader makes a sample of it (key "dir/", 5 samples), wds2idx skips it (4).
  ours = write("dir/.hidden");
  REQUIRE(ours.size() == 5);
  REQUIRE(ours[2].members[0].name == "dir/.hidden");
  wds2idx = ours;
  wds2idx.erase(wds2idx.begin() + 2);
  REQUIRE(WriteTarIndex(IndexPathFor(tar), wds2idx).ok());
  CHECK(CountFileRecords(tar, std::nullopt, SourceKind::kTar) == FileRecords{5, false});
  REQUIRE(WriteTarIndex(IndexPathFor(tar), ours).ok());
  CHECK(CountFileRecords(tar, std::nullopt, SourceKind::kTar) == FileRecords{5, false});
}

TEST_CASE("AnIndexThatTilesTheFileIsTrustedWithoutScanningTheFrames") {
  TempDir dir;
  const std::string path = dir.file("a.tfrecord");
  Stream s = Frames(6);
  Write(path, s.bytes, Compression::kNone);
  // Entries that tile the file but merge frames pairwise: only the index can give 3.
  std::vector<IndexEntry> merged;
  for (int i = 0; i < 6; i += 2) {
    const size_t end = i + 2 < 6 ? s.starts[i + 2] : s.bytes.size();
    merged.push_back({s.starts[i], end - s.starts[i]});
  }
  REQUIRE(WriteRecordIndex(IndexPathFor(path), merged).ok());
  CHECK(CountFileRecords(path, std::nullopt).records == 3);
  // An index of another version of the file (it does not end where the file does) is not used.
  merged.pop_back();
  REQUIRE(WriteRecordIndex(IndexPathFor(path), merged).ok());
  CHECK(CountFileRecords(path, std::nullopt).records == 6);
}

TEST_CASE("DamagedFilesCountWhatTheSourceYieldsBeforeItGivesUp") {
  struct Case {
    const char* name;
    std::function<void(Stream*)> damage;
  };
  const Case cases[] = {
      {"data checksum mismatch", [](Stream* s) { s->bytes[s->starts[3] + 20] ^= 1; }},
      {"length checksum mismatch", [](Stream* s) { s->bytes[s->starts[4] + 9] ^= 1; }},
      {"length over the limit",
       [](Stream* s) {
         std::string huge;
         AppendTFRecordFrame("x", &huge);
         huge[7] = 0x7f;  // length ~2^63 with its checksum recomputed below
         const uint32_t crc = crc32c::Mask(crc32c::Value(huge.data(), 8));
         for (int i = 0; i < 4; ++i) huge[8 + i] = static_cast<char>(crc >> (8 * i));
         s->bytes.replace(s->starts[2], huge.size(), huge);
       }},
      {"header cut short", [](Stream* s) { s->bytes.resize(s->starts[5] + 7); }},
      {"payload cut short", [](Stream* s) { s->bytes.resize(s->starts[5] + 40); }},
      {"footer cut short", [](Stream* s) { s->bytes.resize(s->starts[6] - 2); }},
      {"garbage at the start", [](Stream* s) { s->bytes.replace(0, 12, std::string(12, 'z')); }},
  };
  for (const Case& c : cases) {
    for (Compression comp : {Compression::kNone, Compression::kGzip}) {
      INFO(c.name << ", " << CompressionName(comp));
      TempDir dir;
      const std::string path = dir.file("a.tfrecord");
      Stream s = Frames(8);
      c.damage(&s);
      Write(path, s.bytes, comp);
      const uint64_t items = SourceItems(path);
      CHECK(items < 9);
      CHECK(CountFileRecords(path, std::nullopt).records == items);
    }
  }
}

TEST_CASE("CacheCountsAFileOnceAndAgainWhenItChanges") {
  TempDir dir;
  const std::string path = dir.file("cached.tfrecord");
  Write(path, Frames(4).bytes, Compression::kNone);
  const std::vector<std::string> files{path};
  const uint64_t before = RecordCountScans();
  CHECK(CountRecords(files, TFRecordKinds(files), std::nullopt)[0].records == 4);
  CHECK(CountRecords(files, TFRecordKinds(files), std::nullopt)[0].records == 4);
  CHECK(RecordCountScans() == before + 1);
  Write(path, Frames(9).bytes, Compression::kNone);  // another size
  CHECK(CountRecords(files, TFRecordKinds(files), std::nullopt)[0].records == 9);
  CHECK(RecordCountScans() == before + 2);
}

// Streams that start together (DDP ranks times workers) count the same files at the same time:
// the first caller of a file counts it, the others wait for its count.
TEST_CASE("ConcurrentCountsOfTheSameFilesScanEachOnce") {
  TempDir dir;
  std::vector<std::string> files;
  for (int f = 0; f < 8; ++f) {
    files.push_back(dir.file("c" + std::to_string(f) + ".tfrecord"));
    Write(files.back(), Frames(300, 100).bytes, Compression::kGzip);
  }
  const uint64_t before = RecordCountScans();
  std::vector<std::vector<FileRecords>> got(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back(
        [&, t] { got[t] = CountRecords(files, TFRecordKinds(files), std::nullopt); });
  }
  for (auto& t : threads) t.join();
  CHECK(RecordCountScans() - before == files.size());
  for (const auto& counts : got) {
    REQUIRE(counts.size() == files.size());
    for (const FileRecords& c : counts) CHECK(c == FileRecords{300, false});
  }
}

}  // namespace
}  // namespace sluice
