// Each kind of Source serves a file's records the same way: the file reader (which fills the
// record cache), the record cache, and the record index (lazy frames while the window is open,
// then the rest of the file read from the next frame). Sources not read to the end give back
// their buffers and cache reservations.
#include "pipeline/source.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/tar_index.h"
#include "pipeline/cache_sources.h"
#include "pipeline/file_reader_source.h"
#include "pipeline/io_pool.h"
#include "pipeline/record_index_source.h"
#include "pipeline/record_source.h"
#include "tests/pipeline/pipeline_test_data.h"
#include "tests/tfrecord_test_file.h"

namespace sluice {
namespace {

using testing::BaseOptions;
using testing::TempDir;
using testing::WriteTestShards;

struct Item {
  uint64_t record;
  uint64_t offset;
  uint64_t lazy_length;
  std::string bytes;
  bool operator==(const Item&) const = default;
};

std::vector<Item> ReadAll(Source& source, uint32_t file) {
  std::vector<Item> items;
  for (;;) {
    WorkItem w;
    w.file = file;
    if (!source.Read(&w)) break;
    REQUIRE(w.kind == WorkKind::kRecord);
    items.push_back({w.record, w.offset, w.lazy_length, std::string(w.bytes)});
  }
  return items;
}

ResolvedOptions Resolved(const TempDir& dir) {
  auto options = ResolveOptions(BaseOptions(dir));
  REQUIRE(options.ok());
  return *options;
}

TEST_CASE("TheRecordCacheServesWhatTheFileReaderReadAndKept") {
  TempDir dir;
  auto shards = WriteTestShards(dir, 1, 30);
  const ResolvedOptions options = Resolved(dir);
  PipelineStats stats;
  RecordCache cache(1, 1 << 30, &stats);
  SourceContext ctx{&options, &stats, nullptr, &cache, nullptr, RecordShard{}};
  std::vector<Item> read;
  {
    FileReaderSource reader(ctx, 0, /*fill_cache=*/true);
    read = ReadAll(reader, 0);
  }
  REQUIRE(read.size() == 30);
  for (size_t i = 0; i < read.size(); ++i) {
    CHECK(read[i].record == i);
    CHECK(read[i].offset == shards.index[0][i].offset);
  }
  REQUIRE(cache.Find(0) != nullptr);
  RecordCacheSource cached(ctx, cache.Find(0));
  CHECK(ReadAll(cached, 0) == read);
  CHECK(stats.pool(Pool::kReadBuffers).bytes == 0);
}

TEST_CASE("ASourceLeftBeforeTheEndGivesBackItsBufferAndReservation") {
  TempDir dir;
  WriteTestShards(dir, 1, 30);
  const ResolvedOptions options = Resolved(dir);
  PipelineStats stats;
  RecordCache cache(1, 1 << 30, &stats);
  SourceContext ctx{&options, &stats, nullptr, &cache, nullptr, RecordShard{}};
  {
    FileReaderSource reader(ctx, 0, /*fill_cache=*/true);
    WorkItem w;
    REQUIRE(reader.Read(&w));
    CHECK(stats.pool(Pool::kReadBuffers).bytes == kReadBufferBytes);
    CHECK(stats.pool(Pool::kRecordCache).bytes > 0);
  }
  CHECK(stats.pool(Pool::kReadBuffers).bytes == 0);
  CHECK(stats.pool(Pool::kRecordCache).bytes == 0);
  CHECK(cache.Find(0) == nullptr);
}

TEST_CASE("TheRecordIndexGivesLazyFramesUntilTheWindowClosesThenReadsTheRest") {
  TempDir dir;
  auto shards = WriteTestShards(dir, 1, 30);
  const ResolvedOptions options = Resolved(dir);
  PipelineStats stats;
  // Every other record is this shard's, as with record-level sharding.
  SourceContext ctx{&options, &stats, nullptr, nullptr, nullptr, RecordShard{1, 2}};
  FileReaderSource reader(ctx, 0, /*fill_cache=*/false);
  const std::vector<Item> want = ReadAll(reader, 0);
  REQUIRE(want.size() == 15);

  LazyWindow window{0, 6};
  auto index = RecordIndexSource::Open(ctx, 0, &window);
  REQUIRE(index != nullptr);
  std::vector<Item> got;
  for (;;) {
    WorkItem w;
    w.file = 0;
    if (!index->Read(&w)) break;
    ++window.produced;
    if (w.lazy_length > 0) {
      CHECK(w.lazy_length == shards.index[0][w.record].length);
      MaterializeLazyRecord(options.files[0], UINT64_MAX, &stats, &w);
      CHECK(w.lazy_length == 0);
    } else {
      CHECK(got.size() >= 6);
    }
    REQUIRE(w.kind == WorkKind::kRecord);
    got.push_back({w.record, w.offset, w.lazy_length, std::string(w.bytes)});
  }
  CHECK(got == want);
}

// A record over max_held_record_bytes is a bad record naming file, offset and both sizes, whether
// the file's reader meets it or a lazy frame from the record index is read, and the reader goes on
// with the next record.
TEST_CASE("RecordOverTheLimitIsABadRecordFromTheReaderAndTheIndexAlike") {
  TempDir dir;
  const std::string path = dir.file("shard-0.tfrecord");
  const std::vector<IndexEntry> entries =
      testing::WriteTFRecordFile(path, {"a", std::string(5000, 'b'), "c"});
  ResolvedOptions options = Resolved(dir);
  options.max_held_record_bytes = 1000;
  PipelineStats stats;
  SourceContext ctx{&options, &stats, nullptr, nullptr, nullptr, RecordShard{}};
  const std::string refused = path + ":" + std::to_string(entries[1].offset) +
                              " of 5000 bytes is over the limit of 1000 bytes";

  FileReaderSource reader(ctx, 0, /*fill_cache=*/false);
  std::vector<std::string> got;
  for (;;) {
    WorkItem w;
    if (!reader.Read(&w)) break;
    if (w.kind == WorkKind::kBadRecord) {
      CHECK(w.status.code() == StatusCode::kResourceExhausted);
      CHECK_THAT(w.status.message(), Catch::Contains(refused));
      CHECK(w.offset == entries[1].offset);
      CHECK(w.held_bytes() == 0);
      got.push_back("refused");
    } else {
      got.emplace_back(w.bytes);
    }
  }
  CHECK(got == std::vector<std::string>{"a", "refused", "c"});

  WorkItem lazy;
  lazy.offset = entries[1].offset;
  lazy.lazy_length = entries[1].length;
  MaterializeLazyRecord(path, 1000, &stats, &lazy);
  CHECK(lazy.kind == WorkKind::kBadRecord);
  CHECK(lazy.status.code() == StatusCode::kResourceExhausted);
  CHECK_THAT(lazy.status.message(), Catch::Contains(refused));
  CHECK(lazy.held_bytes() == 0);
}

// What a source gives for one record, bad or not.
struct Given {
  WorkKind kind;
  StatusCode code;
  std::string message;
  uint64_t record;
  uint64_t offset;
  uint64_t length;
  std::string bytes;
  bool operator==(const Given&) const = default;
};

// What a source gave in w.
Given GivenOf(const WorkItem& w) {
  return {w.kind,   w.status.code(), w.status.message(),  w.record,
          w.offset, w.length,        std::string(w.bytes)};
}

std::vector<Given> ReadGiven(Source& source) {
  std::vector<Given> given;
  for (;;) {
    WorkItem w;
    if (!source.Read(&w)) break;
    given.push_back(GivenOf(w));
  }
  return given;
}

// Before, one refused record made its file "damaged": never cached, read again every epoch. A
// refusal is deterministic: the file stays clean, both caches replay the same bad record (code,
// message, offset) at the same place without reading it, and every path measures it by the
// length its frame declares.
TEST_CASE("ARefusedRecordLeavesItsFileCachedAndTheCachesReplayTheRefusal") {
  TempDir dir;
  const std::string path = dir.file("shard-0.tfrecord");
  REQUIRE(WriteRecordIndex(IndexPathFor(path),
                           testing::WriteTFRecordFile(path, {"a", std::string(5000, 'b'), "c"}))
              .ok());
  ResolvedOptions options = Resolved(dir);
  options.max_held_record_bytes = 1000;
  PipelineStats stats;
  RecordCache records(1, 1 << 30, &stats);
  DecodedCache decoded(1, 0, 1, 1 << 30, &stats);
  SourceContext ctx{&options, &stats, nullptr, &records, &decoded, RecordShard{}};
  std::vector<Given> read;
  {
    FileReaderSource reader(ctx, 0, /*fill_cache=*/true);
    read = ReadGiven(reader);
  }
  REQUIRE(read.size() == 3);
  CHECK(read[1].kind == WorkKind::kBadRecord);
  CHECK(read[1].code == StatusCode::kResourceExhausted);
  CHECK(read[1].length == 5000);
  CHECK(read[2].length == 1);

  REQUIRE(records.Find(0) != nullptr);
  RecordCacheSource cached(ctx, records.Find(0));
  CHECK(ReadGiven(cached) == read);

  // The decoders fill the other entries (Augmenter: with the item's length); the source left the
  // tombstone.
  for (uint64_t r : {0, 2}) {
    CachedImage entry;
    entry.length = read[r].length;
    decoded.Insert(0, r, std::move(entry));
  }
  REQUIRE(decoded.Complete(0));
  DecodedCacheSource from_decoded(ctx, 0);
  const std::vector<Given> replayed = ReadGiven(from_decoded);
  REQUIRE(replayed.size() == 3);
  CHECK(replayed[1] == read[1]);
  CHECK(replayed[0].length == read[0].length);

  LazyWindow window{0, 3};
  auto index = RecordIndexSource::Open(ctx, 0, &window);
  REQUIRE(index != nullptr);
  std::vector<uint64_t> lengths;
  for (;;) {
    WorkItem w;
    if (!index->Read(&w)) break;
    ++window.produced;
    lengths.push_back(w.length);
  }
  CHECK(lengths == std::vector<uint64_t>{1, 5000, 1});
}

// An index of another version of the file (here of one 16-byte frame) is not used: an index built
// from the file's headers stands in for it, item for item what reading the file gives.
TEST_CASE("AnIndexOfAnotherVersionOfTheFileGivesWayToOneBuiltFromItsHeaders") {
  TempDir dir;
  WriteTestShards(dir, 1, 10);
  testing::WriteAll(IndexPathFor(dir.file("shard-0.tfrecord")), "0 16\n");
  const ResolvedOptions options = Resolved(dir);
  PipelineStats stats;
  SourceContext ctx{&options, &stats, nullptr, nullptr, nullptr, RecordShard{}};
  FileReaderSource reader(ctx, 0, /*fill_cache=*/false);
  const std::vector<Item> want = ReadAll(reader, 0);
  REQUIRE(want.size() == 10);
  LazyWindow window{0, 5};
  auto index = RecordIndexSource::Open(ctx, 0, &window);
  REQUIRE(index != nullptr);
  std::vector<Item> got;
  for (;;) {
    WorkItem w;
    w.file = 0;
    if (!index->Read(&w)) break;
    ++window.produced;
    CHECK((w.lazy_length > 0) == (got.size() < 5));
    if (w.lazy_length > 0) MaterializeLazyRecord(options.files[0], UINT64_MAX, &stats, &w);
    got.push_back({w.record, w.offset, w.lazy_length, std::string(w.bytes)});
  }
  CHECK(got == want);
  CHECK(stats.index_fallbacks == 0);
}

// dir/shard.tar, written by GNU tar: n samples <key>.jpg (i + image_bytes bytes, so every sample is
// a different size) and <key>.cls; grow_sample's image 700 bytes larger.
std::string WriteTarShard(const TempDir& dir, int n, int grow_sample = -1,
                          size_t image_bytes = 1024) {
  std::filesystem::remove_all(dir.file("src"));
  std::filesystem::create_directories(dir.file("src"));
  std::string members;
  for (int i = 0; i < n; ++i) {
    const std::string key = "s" + std::to_string(100 + i);
    testing::WriteAll(
        dir.file("src/" + key + ".jpg"),
        std::string(image_bytes + i + (i == grow_sample ? 700 : 0), static_cast<char>(i)));
    testing::WriteAll(dir.file("src/" + key + ".cls"), std::to_string(i));
    members += " " + key + ".jpg " + key + ".cls";
  }
  const std::string tar = dir.file("shard.tar");
  REQUIRE(testing::RunCommand("tar", "-C " + dir.file("src") + " -cf " + tar + members).exit_code ==
          0);
  return tar;
}

// Writes tar's index (`sluice index` would write the same).
void IndexTarShard(const std::string& tar) {
  auto built = BuildTarIndex(tar);
  REQUIRE(built.ok());
  REQUIRE(WriteTarIndex(IndexPathFor(tar), *built).ok());
}

ResolvedOptions TarOptions(const TempDir& dir) {
  v1::PipelineOptions o = BaseOptions(dir);
  o.clear_files();
  o.add_files(dir.file("shard.tar"));
  auto options = ResolveOptions(o);
  REQUIRE(options.ok());
  REQUIRE(options->kinds[0] == SourceKind::kTar);
  return *options;
}

// dir/shard.tar (12 samples) with its index, read with a per-record limit that refuses sample 4
// alone.
ResolvedOptions IndexedTarWithARefusedSample(const TempDir& dir) {
  IndexTarShard(WriteTarShard(dir, 12, /*grow_sample=*/4));
  ResolvedOptions options = TarOptions(dir);
  options.max_held_record_bytes = 1500;
  return options;
}

// The items a lazy start over the file gives with `window` records passed over, each lazy one
// materialized as the pipeline would.
std::vector<Given> ReadThroughIndex(const SourceContext& ctx, RecordSource& materializer,
                                    uint64_t window_until, size_t* lazy = nullptr) {
  LazyWindow window{0, window_until};
  auto index = RecordIndexSource::Open(ctx, 0, &window);
  REQUIRE(index != nullptr);
  std::vector<Given> got;
  for (;;) {
    WorkItem w;
    w.file = 0;
    if (!index->Read(&w)) break;
    ++window.produced;
    if (w.lazy_length > 0) {
      if (lazy != nullptr) ++*lazy;
      materializer.Materialize(&w);
      CHECK(w.lazy_length == 0);
    }
    got.push_back(GivenOf(w));
  }
  return got;
}

// A tar shard's index stands in for reading it as a TFRecord's does: its samples before the window
// closes come lazy (where the reader would place them, as long as the reader would make them,
// with no payload read), read one by one from their offset when used, then the rest of the file is
// read from the next sample on: item for item what reading the file gives, other ranks' samples
// passed over too.
TEST_CASE("ATarIndexGivesLazySamplesUntilTheWindowClosesThenReadsTheRest") {
  TempDir dir;
  const std::string tar = WriteTarShard(dir, 12);
  IndexTarShard(tar);
  const ResolvedOptions options = TarOptions(dir);
  PipelineStats stats;
  RecordSource materializer(options, &stats, nullptr, nullptr, nullptr);
  for (RecordShard shard : {RecordShard{}, RecordShard{1, 2}}) {
    SourceContext ctx{&options, &stats, nullptr, nullptr, nullptr, shard};
    FileReaderSource reader(ctx, 0, /*fill_cache=*/false);
    const std::vector<Given> want = ReadGiven(reader);
    REQUIRE(want.size() == (shard.count == 2 ? 6u : 12u));
    size_t lazy = 0;
    CHECK(ReadThroughIndex(ctx, materializer, 5, &lazy) == want);
    CHECK(lazy == 5);
  }
  CHECK(stats.index_fallbacks == 0);
}

// A shard rewritten under its index (sample 4's image grew): the samples before it still come
// lazy, and from sample 4 on the file is read: nothing lost or doubled, the fallback counted.
TEST_CASE("AStaleTarIndexFallsBackToReadingAtTheFirstSampleThatDiffers") {
  TempDir dir;
  const std::string tar = WriteTarShard(dir, 12);
  IndexTarShard(tar);
  WriteTarShard(dir, 12, /*grow_sample=*/4);
  const ResolvedOptions options = TarOptions(dir);
  PipelineStats stats;
  RecordSource materializer(options, &stats, nullptr, nullptr, nullptr);
  SourceContext ctx{&options, &stats, nullptr, nullptr, nullptr, RecordShard{}};
  FileReaderSource reader(ctx, 0, /*fill_cache=*/false);
  const std::vector<Given> want = ReadGiven(reader);
  REQUIRE(want.size() == 12);
  size_t lazy = 0;
  CHECK(ReadThroughIndex(ctx, materializer, 8, &lazy) == want);
  CHECK(lazy == 4);
  CHECK(stats.index_fallbacks == 1);
}

// A sample over max_held_record_bytes is the same bad record (code, message, offset, length)
// whether the file's reader meets it or a lazy sample is materialized, and the lazy start
// measures it as the reader does.
TEST_CASE("ATarSampleOverTheLimitIsTheSameBadRecordFromTheReaderAndTheIndex") {
  TempDir dir;
  const ResolvedOptions options = IndexedTarWithARefusedSample(dir);
  PipelineStats stats;
  RecordSource materializer(options, &stats, nullptr, nullptr, nullptr);
  SourceContext ctx{&options, &stats, nullptr, nullptr, nullptr, RecordShard{}};
  FileReaderSource reader(ctx, 0, /*fill_cache=*/false);
  const std::vector<Given> want = ReadGiven(reader);
  REQUIRE(want.size() == 12);
  REQUIRE(want[4].kind == WorkKind::kBadRecord);
  CHECK(want[4].code == StatusCode::kResourceExhausted);
  CHECK(ReadThroughIndex(ctx, materializer, 8) == want);
  CHECK(stats.index_fallbacks == 0);
}

// An index of a shard that has grown since (samples appended after its last entry, e.g. a shard
// indexed while it was written) stands in for the samples it lists, and the rest are read: none
// is lost.
TEST_CASE("SamplesAfterTheLastEntryOfATarIndexAreReadNotLost") {
  TempDir dir;
  const std::string tar = WriteTarShard(dir, 12);
  auto built = BuildTarIndex(tar);
  REQUIRE(built.ok());
  built->resize(9);
  REQUIRE(WriteTarIndex(IndexPathFor(tar), *built).ok());
  const ResolvedOptions options = TarOptions(dir);
  PipelineStats stats;
  RecordSource materializer(options, &stats, nullptr, nullptr, nullptr);
  SourceContext ctx{&options, &stats, nullptr, nullptr, nullptr, RecordShard{}};
  FileReaderSource reader(ctx, 0, /*fill_cache=*/false);
  const std::vector<Given> want = ReadGiven(reader);
  REQUIRE(want.size() == 12);
  for (uint64_t window : {5, 12}) {
    size_t lazy = 0;
    CHECK(ReadThroughIndex(ctx, materializer, window, &lazy) == want);
    CHECK(lazy == std::min<size_t>(window, 9));
  }
}

// Bytes this process has had from read(2) and pread(2) so far (/proc/self/io rchar), page cache
// hits included: what reading cost, whichever thread read.
uint64_t BytesReadSoFar() {
  const std::string io = testing::ReadAll("/proc/self/io");
  const size_t at = io.find("rchar: ");
  REQUIRE(at != std::string::npos);
  return std::stoull(io.substr(at + 7));
}

// What a source gives for the file, and what reading it cost.
std::vector<Given> ReadGivenCounting(Source& source, uint64_t* bytes_read) {
  const uint64_t before = BytesReadSoFar();
  std::vector<Given> given = ReadGiven(source);
  *bytes_read = BytesReadSoFar() - before;
  return given;
}

// A TFRecord file of n records (record i is bytes + i bytes of one letter) and its index, which
// is returned.
std::vector<IndexEntry> WriteIndexedTFRecord(const std::string& path, int n, size_t bytes) {
  std::vector<std::string> records;
  for (int i = 0; i < n; ++i)
    records.push_back(std::string(bytes + i, static_cast<char>('a' + i % 26)));
  std::vector<IndexEntry> entries = testing::WriteTFRecordFile(path, records);
  REQUIRE(WriteRecordIndex(IndexPathFor(path), entries).ok());
  return entries;
}

// One of `ranks` ranks sharing file 0 (record-level sharding): what reading the whole file gives
// it, what the file's index gives it, and what each cost.
struct RankRead {
  std::vector<Given> want;  // FileReaderSource's
  std::vector<Given> got;   // RecordIndexSource's, its lazy window closed
  uint64_t want_bytes = 0;  // read for want
  uint64_t got_bytes = 0;   // read for got
  uint64_t fallbacks = 0;
  int64_t read_buffers_after = 0;  // Pool::kReadBuffers once both sources are gone
};

RankRead ReadAsRank(const ResolvedOptions& options, IoPool* io, int rank, int ranks) {
  RankRead r;
  PipelineStats stats;
  SourceContext ctx{&options, &stats, io, nullptr, nullptr, RecordShard{rank, ranks}};
  {
    FileReaderSource reader(ctx, 0, /*fill_cache=*/false);
    r.want = ReadGivenCounting(reader, &r.want_bytes);
  }
  {
    // Opening it reads the index, or builds one from the file's headers.
    const uint64_t before = BytesReadSoFar();
    const LazyWindow closed;
    auto index = RecordIndexSource::Open(ctx, 0, &closed);
    REQUIRE(index != nullptr);
    r.got = ReadGiven(*index);
    r.got_bytes = BytesReadSoFar() - before;
  }
  r.fallbacks = stats.index_fallbacks;
  r.read_buffers_after = stats.pool(Pool::kReadBuffers).bytes;
  return r;
}

// Three ranks share one tar shard: each reads the others' samples' headers only (to number the
// samples as they do) and only its own samples' bytes, read ahead on the pool or not, and gets
// item for item what reading the whole file gives it; with its `.idx`, or without, when opening
// it builds the index from the shard's headers. Reading the file with read-ahead reads every
// payload.
TEST_CASE("RanksSharingATarShardReadOnlyTheirOwnSamplesWithItsIndexOrOneBuiltOnOpen") {
  TempDir dir;
  const std::string tar = WriteTarShard(dir, 24, -1, 64 << 10);
  auto size = GetFileSize(tar);
  REQUIRE(size.ok());
  const ResolvedOptions options = TarOptions(dir);
  IoPool pool(2);
  for (bool indexed : {false, true}) {
    if (indexed) IndexTarShard(tar);
    for (IoPool* io : {static_cast<IoPool*>(nullptr), &pool}) {
      for (int rank = 0; rank < 3; ++rank) {
        INFO("rank " << rank << (io ? " read ahead" : "") << (indexed ? ", indexed" : ""));
        const RankRead r = ReadAsRank(options, io, rank, 3);
        REQUIRE(r.want.size() == 8);
        CHECK(r.got == r.want);
        if (io != nullptr) CHECK(r.want_bytes >= *size);
        // A third of the payloads, the headers (twice without the index: to build it, then to
        // check it), the index and the end of the archive.
        CHECK(r.got_bytes < *size / 2);
        CHECK(r.fallbacks == 0);
        CHECK(r.read_buffers_after == 0);
      }
    }
  }
}

// The same for a TFRecord file, with its index or without: the other ranks' frames are found and
// checked from their 12-byte headers, their data not read, whether frames are larger than the
// checker's window or many fit in one (where reading windows would read the whole file).
TEST_CASE("RanksSharingATFRecordFileReadOnlyTheirOwnRecordsWithItsIndexOrOneBuiltOnOpen") {
  for (size_t bytes : {size_t{100} << 10, size_t{3000}}) {
    for (bool indexed : {false, true}) {
      TempDir dir;
      const std::string path = dir.file("shard-0.tfrecord");
      WriteIndexedTFRecord(path, 24, bytes);
      if (!indexed) REQUIRE(std::filesystem::remove(IndexPathFor(path)));
      auto size = GetFileSize(path);
      REQUIRE(size.ok());
      const ResolvedOptions options = Resolved(dir);
      IoPool pool(2);
      for (int rank = 0; rank < 3; ++rank) {
        INFO("rank " << rank << ", records of " << bytes << " bytes"
                     << (indexed ? ", indexed" : ""));
        const RankRead r = ReadAsRank(options, &pool, rank, 3);
        REQUIRE(r.want.size() == 8);
        CHECK(r.got == r.want);
        CHECK(r.want_bytes >= *size);
        CHECK(r.got_bytes < *size / 2);
        CHECK(r.read_buffers_after == 0);
      }
    }
  }
}

// What reading file 0 whole gives.
std::vector<Given> ReadWhole(const SourceContext& ctx) {
  FileReaderSource reader(ctx, 0, /*fill_cache=*/false);
  return ReadGiven(reader);
}

// A lazy start over file 0 that passes over window_until records, its lazy items left unread (each
// where reading the file whole, `want`, places it): how many came lazy, the items after them, and
// the bytes read, opening the index included.
struct LazyStart {
  size_t lazy = 0;
  std::vector<Given> rest;
  uint64_t bytes_read = 0;
};

LazyStart StartLazily(const SourceContext& ctx, const std::vector<Given>& want,
                      uint64_t window_until) {
  LazyStart r;
  const uint64_t before = BytesReadSoFar();
  LazyWindow window{0, window_until};
  auto index = RecordIndexSource::Open(ctx, 0, &window);
  REQUIRE(index != nullptr);
  for (;;) {
    WorkItem w;
    w.file = 0;
    if (!index->Read(&w)) break;
    ++window.produced;
    if (w.lazy_length > 0) {
      ++r.lazy;
      CHECK(w.offset == want[w.record].offset);
      CHECK(w.length == want[w.record].length);
      continue;
    }
    r.rest.push_back(GivenOf(w));
  }
  r.bytes_read = BytesReadSoFar() - before;
  return r;
}

// A resumed stream over a shard without its `.idx` passes over the samples before its start point
// through an index built on open: they come lazy, their payloads unread, and the rest of the shard
// is read as the reader reads it.
TEST_CASE("AResumedStreamPassesOverAnUnindexedShardsSamplesWithoutReadingThem") {
  TempDir dir;
  const std::string tar = WriteTarShard(dir, 24, -1, 64 << 10);
  auto size = GetFileSize(tar);
  REQUIRE(size.ok());
  const ResolvedOptions options = TarOptions(dir);
  PipelineStats stats;
  SourceContext ctx{&options, &stats, nullptr, nullptr, nullptr, RecordShard{}};
  const std::vector<Given> want = ReadWhole(ctx);
  REQUIRE(want.size() == 24);
  const LazyStart started = StartLazily(ctx, want, 20);
  CHECK(started.lazy == 20);
  CHECK(started.rest == std::vector<Given>(want.begin() + 20, want.end()));
  // Four payloads, and the passed-over samples' headers twice (to build the index, then to check
  // it).
  CHECK(started.bytes_read < *size / 2);
  CHECK(stats.index_fallbacks == 0);
}

// A resumed stream that passes over a few records of a file without its `.idx` builds the index
// only as far as those records: the rest is read once, as the reader reads it, not scanned for
// headers first (which, for records smaller than a header read, reads the file twice).
TEST_CASE("ALazyStartBuildsAnUnindexedFilesIndexOnlyAsFarAsItPassesOver") {
  TempDir dir;
  const std::string path = dir.file("shard-0.tfrecord");
  WriteIndexedTFRecord(path, 300, 3000);
  REQUIRE(std::filesystem::remove(IndexPathFor(path)));
  WriteTarShard(dir, 300);
  IoPool pool(1);
  for (const ResolvedOptions& options : {Resolved(dir), TarOptions(dir)}) {
    INFO(options.files[0]);
    auto size = GetFileSize(options.files[0]);
    REQUIRE(size.ok());
    PipelineStats stats;
    SourceContext ctx{&options, &stats, &pool, nullptr, nullptr, RecordShard{}};
    const std::vector<Given> want = ReadWhole(ctx);
    REQUIRE(want.size() == 300);
    const LazyStart started = StartLazily(ctx, want, 5);
    CHECK(started.lazy == 5);
    CHECK(started.rest == std::vector<Given>(want.begin() + 5, want.end()));
    INFO("read " << started.bytes_read << " of " << *size);
    CHECK(started.bytes_read < *size + *size / 5);
  }
}

// A file cut short (a writer killed mid-record) gets an index built up to the cut: ranks sharing it
// pass over the others' records before it unread, and from the cut on the file is read as its
// reader reads it, so the damage is the same bad record, in the same rank, as reading the file.
TEST_CASE("AFileCutShortGetsAnIndexBuiltUpToTheCutAndTheDamageReportedAsTheReaderDoes") {
  TempDir dir;
  const std::string path = dir.file("shard-0.tfrecord");
  const std::vector<IndexEntry> entries = WriteIndexedTFRecord(path, 12, 64 << 10);
  REQUIRE(std::filesystem::remove(IndexPathFor(path)));
  std::filesystem::resize_file(path, entries[9].offset + 100);
  const std::string tar = WriteTarShard(dir, 12, -1, 64 << 10);
  auto built = BuildTarIndex(tar);
  REQUIRE(built.ok());
  std::filesystem::resize_file(tar, (*built)[9].members[0].offset + 100);
  IoPool pool(1);
  for (const ResolvedOptions& options : {Resolved(dir), TarOptions(dir)}) {
    auto size = GetFileSize(options.files[0]);
    REQUIRE(size.ok());
    bool damage_seen = false;
    for (int rank = 0; rank < 3; ++rank) {
      INFO(options.files[0] << ", rank " << rank);
      const RankRead r = ReadAsRank(options, &pool, rank, 3);
      CHECK(r.got == r.want);
      for (const Given& g : r.got) {
        if (g.kind != WorkKind::kBadRecord) continue;
        damage_seen = true;
        CHECK(g.code == StatusCode::kDataLoss);
        CHECK_THAT(g.message, Catch::Contains(options.files[0]));
      }
      CHECK(r.got_bytes < *size / 2);
      CHECK(r.fallbacks == 0);
      CHECK(r.read_buffers_after == 0);
    }
    CHECK(damage_seen);
  }
}

// A sample over max_held_record_bytes is the same refusal (code, message, offset, length) read
// through the index of a shard the ranks share as read from the file, and the decoded cache keeps
// its tombstone either way.
TEST_CASE("ASampleOverTheLimitIsRefusedAlikeThroughTheIndexOfASharedShard") {
  TempDir dir;
  const ResolvedOptions options = IndexedTarWithARefusedSample(dir);
  IoPool pool(1);
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const RankRead r = ReadAsRank(options, &pool, rank, 2);
    REQUIRE(r.want.size() == 6);
    CHECK(r.got == r.want);
    if (rank == 0) {
      REQUIRE(r.got[2].kind == WorkKind::kBadRecord);
      CHECK(r.got[2].code == StatusCode::kResourceExhausted);
    }
  }
  PipelineStats stats;
  DecodedCache decoded(1, 0, 2, 1 << 20, &stats);
  SourceContext ctx{&options, &stats, &pool, nullptr, &decoded, RecordShard{0, 2}};
  const LazyWindow closed;
  auto index = RecordIndexSource::Open(ctx, 0, &closed);
  REQUIRE(index != nullptr);
  CHECK(ReadGiven(*index).size() == 6);
  CHECK(decoded.Find(0, 4) != nullptr);
}

// A record of this rank damaged after the index was written (its data, not its frame header) is
// the same bad record the file's reader reports, and the records after it still come; the other
// ranks never read it.
TEST_CASE("ADamagedRecordReadThroughTheIndexIsTheBadRecordTheReaderReports") {
  TempDir dir;
  const std::string path = dir.file("shard-0.tfrecord");
  const std::vector<IndexEntry> entries = WriteIndexedTFRecord(path, 12, 3000);
  std::string bytes = testing::ReadAll(path);
  bytes[entries[4].offset + kTFRecordHeaderBytes + 10] ^= 0x40;
  testing::WriteAll(path, bytes);
  const ResolvedOptions options = Resolved(dir);
  IoPool pool(1);
  for (int rank = 0; rank < 3; ++rank) {
    INFO("rank " << rank);
    const RankRead r = ReadAsRank(options, &pool, rank, 3);
    REQUIRE(r.want.size() == 4);
    CHECK(r.got == r.want);
    if (rank == 1) {
      REQUIRE(r.got[1].kind == WorkKind::kBadRecord);
      CHECK_THAT(r.got[1].message, Catch::Contains("data checksum mismatch"));
      CHECK(r.got[1].offset == entries[4].offset);
    }
  }
}

// A shard rewritten under its index: every rank finds the same first sample that differs, falls
// back to reading the file from there, and the ranks still share the samples out exactly as
// reading the file does.
TEST_CASE("RanksSharingAStaleTarIndexAllFallBackAtTheSameSample") {
  TempDir dir;
  const std::string tar = WriteTarShard(dir, 12);
  IndexTarShard(tar);
  WriteTarShard(dir, 12, /*grow_sample=*/4);
  const ResolvedOptions options = TarOptions(dir);
  IoPool pool(1);
  for (int rank = 0; rank < 3; ++rank) {
    INFO("rank " << rank);
    const RankRead r = ReadAsRank(options, &pool, rank, 3);
    REQUIRE(r.want.size() == 4);
    CHECK(r.got == r.want);
    CHECK(r.fallbacks == 1);
    CHECK(r.read_buffers_after == 0);
  }
}

// An epoch of RecordSource for rank `rank` of 3 (record-level sharding over one file): its items
// and the bytes read for them. lazy: the records a resumed stream would pass over.
std::vector<Given> ReadEpochAsRank(RecordSource& source, int64_t epoch, uint64_t* bytes_read,
                                   uint64_t lazy = 0) {
  const uint64_t before = BytesReadSoFar();
  source.StartEpoch(epoch);
  source.SetLazyRecords(lazy);
  std::vector<Given> given;
  for (;;) {
    WorkItem w;
    bool end = false;
    source.Next(&w, &end);
    if (end) break;
    given.push_back(GivenOf(w));
  }
  *bytes_read = BytesReadSoFar() - before;
  return given;
}

// With a RECORDS cache, ranks sharing a shard fill it with their own samples read through its
// index (or one built on open) in the first epoch (not reading the others' payloads) and serve the
// second from it, reading nothing; both epochs give what reading the file gives. A stale index (the
// shard rewritten) falls back mid-file and the cache still gets the whole file's samples. So does
// a resumed stream's first epoch, whose records before its start point come whole, not lazy (the
// cache keeps them), and still only this rank's.
TEST_CASE("RanksSharingAShardFillTheRecordCacheThroughItsIndexOrOneBuiltOnOpen") {
  for (const uint64_t lazy : {0, 10})
    for (const std::string index : {"indexed", "stale", "built on open"}) {
      const bool stale = index == "stale";
      TempDir dir;
      const std::string tar = WriteTarShard(dir, 24, -1, 64 << 10);
      if (index != "built on open") IndexTarShard(tar);
      if (stale) WriteTarShard(dir, 24, /*grow_sample=*/13, 64 << 10);
      auto size = GetFileSize(tar);
      REQUIRE(size.ok());
      ResolvedOptions options = TarOptions(dir);
      options.shard_count = 3;
      IoPool pool(2);
      for (int rank = 0; rank < 3; ++rank) {
        INFO("rank " << rank << ", " << index << ", lazy " << lazy);
        options.shard_index = rank;
        const std::vector<Given> want = ReadAsRank(options, &pool, rank, 3).want;
        REQUIRE(want.size() == 8);
        PipelineStats stats;
        RecordCache cache(1, 1 << 30, &stats);
        RecordSource source(options, &stats, &cache, nullptr, &pool);
        uint64_t first = 0;
        uint64_t second = 0;
        CHECK(ReadEpochAsRank(source, 0, &first, lazy) == want);
        REQUIRE(cache.Find(0) != nullptr);
        CHECK(cache.Find(0)->size() == 8);
        CHECK(ReadEpochAsRank(source, 1, &second) == want);
        if (!stale) CHECK(first < *size / 2);
        CHECK(second < 4096);
        CHECK(stats.index_fallbacks == (stale ? 1u : 0u));
      }
    }
}

// A lazy start over an interleave of files without their `.idx` (cycle_length 4): each file's
// index is built from its headers alone, so the records past the start point that a file built
// entries for (the window's records left are those of the whole cycle) cost their headers, not a
// second read; every file is read about once, and the epoch is the unresumed one's.
TEST_CASE("ALazyStartOverAnInterleaveOfUnindexedFilesReadsThemAboutOnce") {
  TempDir dir;
  uint64_t total = 0;
  for (int f = 0; f < 4; ++f) {
    const std::string path = dir.file("shard-" + std::to_string(f) + ".tfrecord");
    WriteIndexedTFRecord(path, 300, 3000);
    REQUIRE(std::filesystem::remove(IndexPathFor(path)));
    total += *GetFileSize(path);
  }
  ResolvedOptions options = Resolved(dir);
  options.cycle_length = 4;
  PipelineStats stats;
  RecordSource whole(options, &stats, nullptr, nullptr, nullptr);
  uint64_t whole_bytes = 0;
  const std::vector<Given> want = ReadEpochAsRank(whole, 0, &whole_bytes);
  REQUIRE(want.size() == 1200);
  RecordSource resumed(options, &stats, nullptr, nullptr, nullptr);
  uint64_t resumed_bytes = 0;
  const std::vector<Given> got = ReadEpochAsRank(resumed, 0, &resumed_bytes, /*lazy=*/600);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < 600; ++i) {
    INFO("item " << i);
    CHECK(got[i].bytes.empty());  // lazy: not read
    CHECK(got[i].record == want[i].record);
    CHECK(got[i].offset == want[i].offset);
  }
  CHECK(std::vector<Given>(got.begin() + 600, got.end()) ==
        std::vector<Given>(want.begin() + 600, want.end()));
  INFO("read " << resumed_bytes << " resumed, " << whole_bytes << " whole, of " << total);
  CHECK(whole_bytes >= total);
  CHECK(resumed_bytes < total / 2 + total / 10);
}

// A rank filling the RECORDS cache through a TFRecord file's index keeps its refusals (records
// over the per-record limit), replayed from the cache the next epoch; one of its records damaged
// keeps the file out of the cache, its reservation given back, and the next epoch reads it again.
TEST_CASE("ARankFillingTheRecordCacheThroughTheIndexKeepsRefusalsAndDropsADamagedFile") {
  for (bool damaged : {false, true}) {
    INFO((damaged ? "damaged" : "refused"));
    TempDir dir;
    const std::string path = dir.file("shard-0.tfrecord");
    const std::vector<IndexEntry> entries = WriteIndexedTFRecord(path, 12, 3000);
    ResolvedOptions options = Resolved(dir);
    options.shard_count = 3;
    options.shard_index = 1;
    if (damaged) {
      std::string bytes = testing::ReadAll(path);
      bytes[entries[4].offset + kTFRecordHeaderBytes + 10] ^= 0x40;
      testing::WriteAll(path, bytes);
    } else {
      options.max_held_record_bytes = 3003;  // rank 1's records 4, 7 and 10
    }
    IoPool pool(1);
    const std::vector<Given> want = ReadAsRank(options, &pool, 1, 3).want;
    REQUIRE(want.size() == 4);
    REQUIRE(want[1].kind == WorkKind::kBadRecord);
    PipelineStats stats;
    RecordCache cache(1, 1 << 30, &stats);
    RecordSource source(options, &stats, &cache, nullptr, &pool);
    uint64_t first = 0;
    uint64_t second = 0;
    CHECK(ReadEpochAsRank(source, 0, &first) == want);
    CHECK(ReadEpochAsRank(source, 1, &second) == want);
    if (damaged) {
      CHECK(cache.Find(0) == nullptr);
      CHECK(stats.pool(Pool::kRecordCache).bytes == 0);
      CHECK(second > 0);
    } else {
      REQUIRE(cache.Find(0) != nullptr);
      CHECK(cache.Find(0)->size() == 4);
      CHECK(second < 4096);
    }
  }
}

// A rank's source left before the end of its file gives back its ranges' read-ahead and buffer.
TEST_CASE("ARankLeavingAnIndexedShardEarlyGivesBackItsReadBuffers") {
  TempDir dir;
  const std::string tar = WriteTarShard(dir, 12);
  IndexTarShard(tar);
  const ResolvedOptions options = TarOptions(dir);
  IoPool pool(1);
  PipelineStats stats;
  SourceContext ctx{&options, &stats, &pool, nullptr, nullptr, RecordShard{0, 2}};
  {
    const LazyWindow closed;
    auto index = RecordIndexSource::Open(ctx, 0, &closed);
    REQUIRE(index != nullptr);
    WorkItem w;
    REQUIRE(index->Read(&w));
    REQUIRE(w.kind == WorkKind::kRecord);
    CHECK(stats.pool(Pool::kReadBuffers).bytes > 0);
  }
  CHECK(stats.pool(Pool::kReadBuffers).bytes == 0);
}

size_t OpenDescriptors() {
  return static_cast<size_t>(std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                                           std::filesystem::directory_iterator()));
}

// Once the window closes and the rest of the shard is read, the checker's descriptor (and its
// buffer) is given back: the rest's reader is the only one open.
TEST_CASE("ReadingTheRestOfATarShardClosesTheIndexChecker") {
  TempDir dir;
  const std::string tar = WriteTarShard(dir, 12);
  IndexTarShard(tar);
  const ResolvedOptions options = TarOptions(dir);
  PipelineStats stats;
  SourceContext ctx{&options, &stats, nullptr, nullptr, nullptr, RecordShard{}};
  LazyWindow window{0, 3};
  const size_t before = OpenDescriptors();
  auto index = RecordIndexSource::Open(ctx, 0, &window);
  REQUIRE(index != nullptr);
  CHECK(OpenDescriptors() == before + 1);  // the checker's
  for (;;) {
    WorkItem w;
    w.file = 0;
    REQUIRE(index->Read(&w));
    ++window.produced;
    if (w.lazy_length == 0) break;  // the first sample read from the rest of the shard
  }
  CHECK(window.produced == 4);
  CHECK(OpenDescriptors() == before + 1);  // the rest's reader's
}

// Each kind reads its own index format: a TFRecord index beside a tar shard, or a tar index beside
// a TFRecord file, is not an index of that file.
// An index in the other kind's format beside a file is not its index: one built from the file's
// headers stands in for it, item for item what reading the file gives.
TEST_CASE("AnIndexOfTheOtherKindGivesWayToOneBuiltFromTheHeaders") {
  TempDir dir;
  const std::string tar = WriteTarShard(dir, 4);
  testing::WriteAll(IndexPathFor(tar), FormatRecordIndex({{0, 1024}, {1024, 1024}}));
  auto shards = WriteTestShards(dir, 1, 4);
  auto tar_index = BuildTarIndex(tar);
  REQUIRE(tar_index.ok());
  REQUIRE(WriteTarIndex(IndexPathFor(shards.paths[0]), *tar_index).ok());
  for (const ResolvedOptions& options : {TarOptions(dir), Resolved(dir)}) {
    INFO(options.files[0]);
    PipelineStats stats;
    RecordSource materializer(options, &stats, nullptr, nullptr, nullptr);
    SourceContext ctx{&options, &stats, nullptr, nullptr, nullptr, RecordShard{}};
    FileReaderSource reader(ctx, 0, /*fill_cache=*/false);
    const std::vector<Given> want = ReadGiven(reader);
    REQUIRE(want.size() == 4);
    size_t lazy = 0;
    CHECK(ReadThroughIndex(ctx, materializer, 3, &lazy) == want);
    CHECK(lazy == 3);
    CHECK(stats.index_fallbacks == 0);
  }
}

}  // namespace
}  // namespace sluice
