// RecordSource with read-ahead on an IoPool against reading on the source thread alone: the same
// records, in the same order, with the same errors at the same file offsets, for plain, GZIP and
// ZLIB shards spanning many read-ahead chunks; read buffers accounted within their limit.
#include "pipeline/record_source.h"

#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "formats/compression.h"
#include "formats/file.h"
#include "formats/tfrecord_writer.h"
#include "pipeline/io_pool.h"
#include "tests/test_support.h"

namespace sluice {
namespace {

using testing::RandomBytes;
using testing::TempDir;

// One item as the source produced it.
struct Item {
  WorkKind kind;
  uint32_t file;
  uint64_t record;
  uint64_t offset;
  std::string bytes;
  std::string error;
  bool operator==(const Item&) const = default;
};

std::vector<Item> ReadEpoch(const ResolvedOptions& options, IoPool* pool, PipelineStats* stats) {
  RecordSource source(options, stats, nullptr, nullptr, pool);
  source.StartEpoch(0);
  std::vector<Item> items;
  for (;;) {
    WorkItem w;
    bool end = false;
    source.Next(&w, &end);
    if (end) break;
    items.push_back({w.kind, w.file, w.record, w.offset, std::string(w.bytes),
                     std::string(w.status.message())});
  }
  return items;
}

TEST_CASE("ReadAheadGivesTheSameRecordsAndErrorsAtTheSameOffsets") {
  for (Compression c : {Compression::kNone, Compression::kGzip, Compression::kZlib}) {
    INFO(CompressionName(c));
    TempDir dir;
    // Three shards of ~2.5 MB (several 1 MiB chunks each): the second has a record whose data
    // checksum fails (the reader steps past it), the third ends in the middle of a record.
    for (int f = 0; f < 3; ++f) {
      std::string stream;
      std::vector<size_t> starts;
      for (int r = 0; r < 300; ++r) {
        starts.push_back(stream.size());
        AppendTFRecordFrame(RandomBytes(4000 + 5000 * (r % 3), 1000 * f + r), &stream);
      }
      if (f == 1) stream[starts[170] + kTFRecordHeaderBytes + 10] ^= 0x40;
      if (f == 2) stream.resize(starts[250] + 100);
      const std::string path = dir.file("shard-" + std::to_string(f) + ".tfrecord");
      auto base = NewAtomicFile(path);
      REQUIRE(base.ok());
      auto file = c == Compression::kNone ? std::move(*base)
                                          : NewDeflatingFile(std::move(*base), c);
      REQUIRE(file->Append(stream).ok());
      REQUIRE(file->Commit().ok());
    }
    v1::PipelineOptions o;
    o.add_files(dir.file("shard-*.tfrecord"));
    o.mutable_interleave()->set_cycle_length(3);
    o.mutable_interleave()->set_block_length(2);
    o.set_seed(5);
    auto options = ResolveOptions(o);
    REQUIRE(options.ok());

    PipelineStats plain_stats;
    std::vector<Item> want = ReadEpoch(*options, nullptr, &plain_stats);
    PipelineStats stats;
    std::vector<Item> got;
    {
      IoPool pool(3);
      got = ReadEpoch(*options, &pool, &stats);
    }
    REQUIRE(want.size() == 300 + 300 + 251);
    CHECK(got.size() == want.size());
    for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
      INFO("item " << i << ": file " << want[i].file << " record " << want[i].record);
      REQUIRE(got[i] == want[i]);
    }
    int bad = 0;
    for (const Item& item : got) {
      if (item.kind != WorkKind::kBadRecord) continue;
      ++bad;
      CHECK(item.error.find(options->files[item.file] + ":" + std::to_string(item.offset)) !=
            std::string::npos);
    }
    CHECK(bad == 2);

    const PoolCounters& read = stats.pool(Pool::kReadBuffers);
    CHECK(read.bytes == 0);  // every file closed, every chunk given back
    CHECK(read.peak > 3 * kReadBufferBytes);  // the read-ahead chunks are counted...
    CHECK(read.peak <= 3 * kReadBytesPerOpenFile);  // ...within the limit the pipeline sets
  }
}

}  // namespace
}  // namespace sluice
