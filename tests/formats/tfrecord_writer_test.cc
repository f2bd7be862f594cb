#include "formats/tfrecord_writer.h"

#include <zlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "formats/crc32c.h"
#include "formats/record_index.h"
#include "formats/tfrecord_reader.h"
#include "tests/test_support.h"
#include "tests/zlib_test_util.h"

namespace sluice {
namespace {

using testing::TempDir;

constexpr size_t kOverhead = kTFRecordHeaderBytes + kTFRecordFooterBytes;

std::string Record(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& ch : s) ch = static_cast<char>('a' + rng() % 20);
  return s;
}

std::vector<std::string> Records() {
  std::vector<std::string> records = {"", "x", Record(5000, 1), ""};
  for (uint32_t i = 0; i < 200; ++i) records.push_back(Record(i * 13 % 700, i));
  records.push_back(Record(5 << 20, 2));  // larger than the reader's default 4 MiB buffer
  records.push_back("last");
  return records;
}

Status WriteShard(const std::string& path, const std::vector<std::string>& records,
                  const TFRecordWriterOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<TFRecordWriter> writer, TFRecordWriter::Create(path, options));
  for (const std::string& r : records) RETURN_IF_ERROR(writer->Write(r));
  return writer->Close();
}

Result<std::vector<std::string>> ReadShard(const std::string& path, size_t buffer_bytes) {
  TFRecordReaderOptions options;
  options.buffer_bytes = buffer_bytes;
  ASSIGN_OR_RETURN(std::unique_ptr<TFRecordReader> reader, TFRecordReader::Open(path, options));
  std::vector<std::string> out;
  while (true) {
    std::string_view record;
    bool eof = false;
    RETURN_IF_ERROR(reader->ReadRecord(&record, &eof));
    if (eof) return out;
    out.emplace_back(record);
  }
}

std::string Inflate(const std::string& data) { return testing::InflateWithZlib(data); }

const std::vector<Compression> kAllCompressions = {Compression::kNone, Compression::kGzip,
                                                   Compression::kZlib};

TEST_CASE("FrameLayoutIsLittleEndianLengthAndMaskedCrcs") {
  std::string frame;
  AppendTFRecordFrame("hello", &frame);
  REQUIRE(frame.size() == 5 + kOverhead);
  CHECK(frame.substr(0, 8) == std::string("\x05\0\0\0\0\0\0\0", 8));
  auto fixed32 = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(frame[at + i]);
    return v;
  };
  CHECK(fixed32(8) == crc32c::Mask(crc32c::Value(frame.data(), 8)));
  CHECK(frame.substr(12, 5) == "hello");
  CHECK(fixed32(17) == crc32c::Mask(crc32c::Value("hello")));
  // An empty record, byte for byte (CRCs computed independently of crc32c.cc).
  std::string empty;
  AppendTFRecordFrame("", &empty);
  CHECK(empty == std::string("\0\0\0\0\0\0\0\0\x29\x03\x98\x07\xd8\xea\x82\xa2", 16));
}

TEST_CASE("WriterThenReaderRoundTripsEveryCompression") {
  TempDir dir;
  const std::vector<std::string> records = Records();
  for (Compression c : kAllCompressions) {
    INFO(CompressionName(c));
    const std::string path = dir.file(std::string("shard.") + std::string(CompressionName(c)));
    TFRecordWriterOptions options;
    options.compression = c;
    REQUIRE(WriteShard(path, records, options).ok());
    auto detected = DetectFileCompression(path);
    REQUIRE(detected.ok());
    CHECK(*detected == c);
    for (size_t buffer : {size_t{1024}, size_t{4} << 20}) {
      INFO("buffer " << buffer);
      auto read = ReadShard(path, buffer);
      REQUIRE(read.ok());
      CHECK(*read == records);
    }
  }
}

TEST_CASE("CompressedShardsInflateToThePlainShard") {
  TempDir dir;
  const std::vector<std::string> records = {"alpha", "", Record(100000, 3)};
  std::string plain;
  for (const std::string& r : records) AppendTFRecordFrame(r, &plain);
  for (Compression c : kAllCompressions) {
    INFO(CompressionName(c));
    TFRecordWriterOptions options;
    options.compression = c;
    REQUIRE(WriteShard(dir.file("s"), records, options).ok());
    std::string written = testing::ReadAll(dir.file("s"));
    CHECK((c == Compression::kNone ? written : Inflate(written)) == plain);
  }
}

TEST_CASE("IndexEqualsFrameOffsetsAndBuildRecordIndex") {
  TempDir dir;
  const std::vector<std::string> records = Records();
  std::vector<IndexEntry> expected;
  uint64_t offset = 0;
  for (const std::string& r : records) {
    expected.push_back({offset, r.size() + kOverhead});
    offset += r.size() + kOverhead;
  }
  for (Compression c : kAllCompressions) {
    INFO(CompressionName(c));
    const std::string path = dir.file("shard");
    TFRecordWriterOptions options;
    options.compression = c;
    auto writer = TFRecordWriter::Create(path, options);
    REQUIRE(writer.ok());
    for (const std::string& r : records) REQUIRE((*writer)->Write(r).ok());
    CHECK((*writer)->records() == records.size());
    CHECK((*writer)->bytes() == offset);
    CHECK((*writer)->index() == expected);
    REQUIRE((*writer)->Close().ok());

    CHECK(testing::ReadAll(IndexPathFor(path)) == FormatRecordIndex(expected));
    auto read_index = ReadRecordIndex(IndexPathFor(path));
    REQUIRE(read_index.ok());
    CHECK(*read_index == expected);
    auto built = BuildRecordIndex(path);
    REQUIRE(built.ok());
    CHECK(*built == expected);
  }
}

TEST_CASE("UnclosedWriterLeavesNoShardNoIndexAndNoTemporary") {
  TempDir dir;
  for (Compression c : kAllCompressions) {
    TFRecordWriterOptions options;
    options.compression = c;
    auto writer = TFRecordWriter::Create(dir.file("shard"), options);
    REQUIRE(writer.ok());
    REQUIRE((*writer)->Write(Record(3 << 20, 4)).ok());
  }
  CHECK(std::filesystem::is_empty(dir.path()));
}

TEST_CASE("ClosedWriterLeavesExactlyTheShardAndItsIndex") {
  TempDir dir;
  REQUIRE(WriteShard(dir.file("shard"), {"a"}, {}).ok());
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"shard", "shard.idx"});
}

TEST_CASE("WriteIndexFalseWritesNoIndex") {
  TempDir dir;
  TFRecordWriterOptions options;
  options.write_index = false;
  REQUIRE(WriteShard(dir.file("shard"), {"a", "b"}, options).ok());
  CHECK(std::filesystem::exists(dir.file("shard")));
  CHECK_FALSE(std::filesystem::exists(dir.file("shard.idx")));
}

TEST_CASE("RewritingAShardReplacesItsIndex") {
  TempDir dir;
  REQUIRE(WriteShard(dir.file("shard"), {"one", "two", "three"}, {}).ok());
  REQUIRE(WriteShard(dir.file("shard"), {"only"}, {}).ok());
  auto index = ReadRecordIndex(dir.file("shard.idx"));
  REQUIRE(index.ok());
  CHECK(*index == std::vector<IndexEntry>{{0, 4 + kOverhead}});
}

TEST_CASE("EmptyShardIsAnEmptyFileWithAnEmptyIndex") {
  TempDir dir;
  REQUIRE(WriteShard(dir.file("shard"), {}, {}).ok());
  CHECK(testing::ReadAll(dir.file("shard")).empty());
  CHECK(testing::ReadAll(dir.file("shard.idx")).empty());
  auto read = ReadShard(dir.file("shard"), 1024);
  REQUIRE(read.ok());
  CHECK(read->empty());
}

TEST_CASE("WriteOrCloseAfterCloseIsFailedPrecondition") {
  TempDir dir;
  auto writer = TFRecordWriter::Create(dir.file("shard"));
  REQUIRE(writer.ok());
  REQUIRE((*writer)->Close().ok());
  CHECK((*writer)->Write("late").code() == StatusCode::kFailedPrecondition);
  CHECK((*writer)->Close().code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("WriterOverCallersFileWritesNoIndex") {
  TempDir dir;
  auto file = NewAtomicFile(dir.file("shard"));
  REQUIRE(file.ok());
  TFRecordWriter writer(std::move(*file));
  REQUIRE(writer.Write("abc").ok());
  REQUIRE(writer.Close().ok());
  std::string expected;
  AppendTFRecordFrame("abc", &expected);
  CHECK(testing::ReadAll(dir.file("shard")) == expected);
  CHECK_FALSE(std::filesystem::exists(dir.file("shard.idx")));
}

TEST_CASE("CreateInAMissingDirectoryIsAnErrorNamingThePath") {
  TempDir dir;
  auto writer = TFRecordWriter::Create(dir.file("missing/shard"));
  REQUIRE_FALSE(writer.ok());
  CHECK_THAT(writer.status().message(), Catch::Contains(dir.file("missing/shard")));
}

}  // namespace
}  // namespace sluice
