// Opening TFRecord files: compression detected or given, plain files that look compressed, damage
// at the start, missing files, offsets in compressed shards, and WrapStream.
#include "formats/tfrecord_reader.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tests/formats/tfrecord_reader_test_support.h"
#include "tests/test_support.h"

namespace sluice {
namespace {

using testing::RandomBytes;
using testing::TempDir;
using tfrecord_testing::kOverhead;
using tfrecord_testing::MemoryReader;
using tfrecord_testing::ReadAll;
using tfrecord_testing::ReadUntilError;
using tfrecord_testing::Shard;

TEST_CASE("OpenReadsPlainFilesWhoseFirstBytesLookCompressed") {
  TempDir dir;
  // Lengths 0x178 and 0x8b1f start the file with a valid zlib header and the gzip magic.
  for (size_t length : {size_t{0x178}, size_t{0x8b1f}}) {
    const std::vector<std::string> records = {std::string(length, 'x'), "next"};
    testing::WriteAll(dir.file("plain"), Shard(records));
    auto reader = TFRecordReader::Open(dir.file("plain"));
    REQUIRE(reader.ok());
    ReadAll all = ReadUntilError(reader->get());
    REQUIRE(all.status.ok());
    CHECK(all.records == records);
  }
}

TEST_CASE("OpenReportsDamageAtTheStartOfAPlainFileAsACorruptRecord") {
  TempDir dir;
  struct Case {
    std::string contents;
    std::string message;
  };
  std::string damaged = Shard({"abc"});
  damaged[3] ^= 0x10;
  const std::vector<Case> cases = {
      {damaged, "corrupted record at " + dir.file("f") + ":0 (length checksum mismatch)"},
      {Shard({"abc"}).substr(0, 5),
       "truncated record at " + dir.file("f") + ":0 (expected 12 bytes, file ends after 5)"},
  };
  for (const Case& c : cases) {
    testing::WriteAll(dir.file("f"), c.contents);
    auto reader = TFRecordReader::Open(dir.file("f"));
    REQUIRE(reader.ok());
    ReadAll all = ReadUntilError(reader->get());
    CHECK(all.status.code() == StatusCode::kDataLoss);
    CHECK(all.status.message() == c.message);
  }
}

TEST_CASE("OpenMissingFileIsNotFoundNamingThePath") {
  TempDir dir;
  auto reader = TFRecordReader::Open(dir.file("missing"));
  REQUIRE_FALSE(reader.ok());
  CHECK(reader.status().code() == StatusCode::kNotFound);
  CHECK_THAT(reader.status().message(), Catch::Contains(dir.file("missing")));
}

TEST_CASE("CorruptRecordInCompressedShardNamesTheUncompressedOffset") {
  TempDir dir;
  const std::vector<std::string> records = {"first", "second", "third"};
  std::string damaged = Shard(records);
  const size_t second = records[0].size() + kOverhead;
  damaged[second + kTFRecordHeaderBytes] ^= 0x01;
  for (Compression c : {Compression::kGzip, Compression::kZlib}) {
    INFO(CompressionName(c));
    const std::string path = dir.file("shard");
    auto base = NewAtomicFile(path);
    REQUIRE(base.ok());
    auto file = NewDeflatingFile(std::move(*base), c);
    REQUIRE(file->Append(damaged).ok());
    REQUIRE(file->Commit().ok());

    auto reader = TFRecordReader::Open(path);
    REQUIRE(reader.ok());
    ReadAll all = ReadUntilError(reader->get());
    CHECK(all.records == std::vector<std::string>{"first"});
    CHECK(all.status.message() == "corrupted record at " + path + ":" + std::to_string(second) +
                                      " (uncompressed) (data checksum mismatch)");
    CHECK((*reader)->can_continue());
    all = ReadUntilError(reader->get());
    REQUIRE(all.status.ok());
    CHECK(all.records == std::vector<std::string>{"third"});
  }
}

TEST_CASE("ExplicitCompressionOptionOverridesDetection") {
  TempDir dir;
  const std::vector<std::string> records = {"a", "b"};
  testing::WriteAll(dir.file("plain"), Shard(records));
  TFRecordReaderOptions options;
  options.compression = Compression::kGzip;
  auto reader = TFRecordReader::Open(dir.file("plain"), options);
  REQUIRE(reader.ok());
  ReadAll all = ReadUntilError(reader->get());
  CHECK(all.status.code() == StatusCode::kDataLoss);
  CHECK_THAT(all.status.message(), Catch::Contains(dir.file("plain")));
}

TEST_CASE("OpenPassesTheInflatedStreamThroughWrapStream") {
  TempDir dir;
  const std::vector<std::string> records = {"one", RandomBytes(5000, 1), "three"};
  const std::string plain = Shard(records);
  for (Compression c : {Compression::kNone, Compression::kGzip, Compression::kZlib}) {
    INFO(CompressionName(c));
    const std::string path = dir.file("shard");
    auto base = NewAtomicFile(path);
    REQUIRE(base.ok());
    auto file = c == Compression::kNone ? std::move(*base) : NewDeflatingFile(std::move(*base), c);
    REQUIRE(file->Append(plain).ok());
    REQUIRE(file->Commit().ok());

    // The wrapper sees the uncompressed stream: here it reads it all and serves a copy.
    std::string seen;
    TFRecordReaderOptions options;
    options.wrap_stream = [&](std::unique_ptr<SequentialFile> stream) {
      char buf[1000];
      for (;;) {
        size_t got = 0;
        REQUIRE(stream->Read(sizeof(buf), buf, &got).ok());
        if (got == 0) break;
        seen.append(buf, got);
      }
      return NewMemoryFile(stream->name(), seen);
    };
    auto reader = TFRecordReader::Open(path, options);
    REQUIRE(reader.ok());
    CHECK(seen == plain);
    CHECK((*reader)->name() == path);
    ReadAll all = ReadUntilError(reader->get());
    REQUIRE(all.status.ok());
    CHECK(all.records == records);
  }
}

}  // namespace
}  // namespace sluice
