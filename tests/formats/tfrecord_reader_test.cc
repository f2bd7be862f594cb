#include "formats/tfrecord_reader.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/crc32c.h"
#include "formats/tfrecord_writer.h"
#include "tests/test_support.h"

namespace sluice {
namespace {

using testing::RandomBytes;

using testing::TempDir;

constexpr size_t kOverhead = kTFRecordHeaderBytes + kTFRecordFooterBytes;

std::string Shard(const std::vector<std::string>& records) {
  std::string out;
  for (const std::string& r : records) AppendTFRecordFrame(r, &out);
  return out;
}

std::unique_ptr<TFRecordReader> MemoryReader(std::string contents, size_t buffer_bytes = 4 << 20,
                                             int64_t fail_at = -1) {
  TFRecordReaderOptions options;
  options.buffer_bytes = buffer_bytes;
  return std::make_unique<TFRecordReader>(NewMemoryFile("mem", std::move(contents), fail_at),
                                          options);
}

// Reads until end of file or the first error; returns the records and that error (OK at EOF).
struct ReadAll {
  std::vector<std::string> records;
  Status status;
};
ReadAll ReadUntilError(TFRecordReader* reader) {
  ReadAll out;
  while (true) {
    std::string_view record;
    bool eof = false;
    out.status = reader->ReadRecord(&record, &eof);
    if (!out.status.ok() || eof) return out;
    out.records.emplace_back(record);
  }
}

TEST_CASE("EmptyFileHasZeroRecords") {
  auto reader = MemoryReader("");
  std::string_view record;
  bool eof = false;
  REQUIRE(reader->ReadRecord(&record, &eof).ok());
  CHECK(eof);
  REQUIRE(reader->ReadRecord(&record, &eof).ok());  // end of file stays end of file
  CHECK(eof);
  CHECK(reader->offset() == 0);

  TempDir dir;
  testing::WriteAll(dir.file("empty"), "");
  auto opened = TFRecordReader::Open(dir.file("empty"));
  REQUIRE(opened.ok());
  ReadAll all = ReadUntilError(opened->get());
  CHECK(all.status.ok());
  CHECK(all.records.empty());
}

TEST_CASE("RecordsOfEverySizeReadBackAcrossBufferBoundaries") {
  std::vector<std::string> records;
  for (uint32_t i = 0; i < 300; ++i) records.push_back(RandomBytes((i * 37) % 1000, i));
  records.push_back("");
  records.insert(records.begin(), "");
  const std::string shard = Shard(records);
  for (size_t buffer :
       {size_t{1}, size_t{16}, size_t{17}, size_t{100}, size_t{4096}, size_t{4} << 20}) {
    INFO("buffer " << buffer);
    auto reader = MemoryReader(shard, buffer);
    ReadAll all = ReadUntilError(reader.get());
    REQUIRE(all.status.ok());
    CHECK(all.records == records);
    CHECK(reader->offset() == shard.size());
  }
}

TEST_CASE("RecordLargerThanTheBufferGrowsIt") {
  const std::vector<std::string> records = {"small", RandomBytes(3 << 20, 1), "",
                                            RandomBytes(100, 2), RandomBytes(5 << 20, 3)};
  auto reader = MemoryReader(Shard(records), 1 << 16);
  ReadAll all = ReadUntilError(reader.get());
  REQUIRE(all.status.ok());
  CHECK(all.records == records);
}

TEST_CASE("OffsetsNameEachRecordsFrame") {
  const std::vector<std::string> records = {"a", "", "abcdef"};
  auto reader = MemoryReader(Shard(records), 16);
  uint64_t expected = 0;
  for (const std::string& r : records) {
    std::string_view record;
    bool eof = false;
    REQUIRE(reader->ReadRecord(&record, &eof).ok());
    REQUIRE_FALSE(eof);
    CHECK(record == r);
    CHECK(reader->record_offset() == expected);
    expected += r.size() + kOverhead;
    CHECK(reader->offset() == expected);
  }
}

TEST_CASE("StartOffsetReadsFromAFrameWithTheFilesOffsets") {
  TempDir dir;
  const std::vector<std::string> records = {RandomBytes(10, 1), RandomBytes(300, 2),
                                            RandomBytes(7, 3), RandomBytes(50, 4)};
  std::string shard = Shard(records);
  // Damage the data of the last record: the error must name its offset in the file.
  const uint64_t last = shard.size() - (50 + kOverhead);
  shard[last + kTFRecordHeaderBytes + 3] ^= 0x40;
  testing::WriteAll(dir.file("a.tfrecord"), shard);
  TFRecordReaderOptions o;
  o.start_offset = 10 + kOverhead;  // the second record's frame
  auto reader = TFRecordReader::Open(dir.file("a.tfrecord"), o);
  REQUIRE(reader.ok());
  std::string_view record;
  bool eof = false;
  REQUIRE((*reader)->ReadRecord(&record, &eof).ok());
  CHECK(record == records[1]);
  CHECK((*reader)->record_offset() == 10 + kOverhead);
  REQUIRE((*reader)->ReadRecord(&record, &eof).ok());
  CHECK(record == records[2]);
  Status s = (*reader)->ReadRecord(&record, &eof);
  CHECK(s.code() == StatusCode::kDataLoss);
  CHECK(s.message().find("a.tfrecord:" + std::to_string(last)) != std::string::npos);
}

TEST_CASE("StartOffsetIsRefusedForACompressedFile") {
  TempDir dir;
  TFRecordWriterOptions wo;
  wo.compression = Compression::kGzip;
  auto w = TFRecordWriter::Create(dir.file("a.tfrecord.gz"), wo);
  REQUIRE(w.ok());
  REQUIRE((*w)->Write("x").ok());
  REQUIRE((*w)->Write("y").ok());
  REQUIRE((*w)->Close().ok());
  TFRecordReaderOptions o;
  o.start_offset = 1 + kOverhead;
  auto reader = TFRecordReader::Open(dir.file("a.tfrecord.gz"), o);
  REQUIRE_FALSE(reader.ok());
  CHECK(reader.status().code() == StatusCode::kInvalidArgument);
}

// A damaged byte in the second of three records. Damage to the data or its CRC is stepped over;
// damage to the length or its CRC leaves nothing to trust after it.
TEST_CASE("FlippedByteInEachFieldIsDataLossNamingTheRecordOffset") {
  const std::vector<std::string> records = {"first record", "second record", "third"};
  const std::string shard = Shard(records);
  const uint64_t second = records[0].size() + kOverhead;
  const size_t data_bytes = records[1].size();
  struct Case {
    const char* field;
    size_t byte;  // within the second frame
    const char* reason;
    bool continues;
  };
  const std::vector<Case> cases = {
      {"length, low byte", 0, "length checksum mismatch", false},
      {"length, high byte", 7, "length checksum mismatch", false},
      {"length CRC", 8, "length checksum mismatch", false},
      {"length CRC, last byte", 11, "length checksum mismatch", false},
      {"data, first byte", 12, "data checksum mismatch", true},
      {"data, last byte", 12 + data_bytes - 1, "data checksum mismatch", true},
      {"data CRC", 12 + data_bytes, "data checksum mismatch", true},
      {"data CRC, last byte", 12 + data_bytes + 3, "data checksum mismatch", true},
  };
  const std::string message_prefix = "corrupted record at mem:" + std::to_string(second) + " (";
  for (const Case& c : cases) {
    for (size_t buffer : {size_t{16}, size_t{4096}}) {
      INFO(c.field << ", buffer " << buffer);
      std::string damaged = shard;
      damaged[second + c.byte] ^= 0x01;
      auto reader = MemoryReader(damaged, buffer);
      std::string_view record;
      bool eof = false;
      REQUIRE(reader->ReadRecord(&record, &eof).ok());
      CHECK(record == records[0]);

      Status s = reader->ReadRecord(&record, &eof);
      REQUIRE_FALSE(s.ok());
      CHECK(s.code() == StatusCode::kDataLoss);
      CHECK(s.message() == message_prefix + c.reason + ")");
      CHECK(reader->record_offset() == second);
      CHECK(reader->can_continue() == c.continues);

      Status next = reader->ReadRecord(&record, &eof);
      if (c.continues) {
        REQUIRE(next.ok());
        CHECK_FALSE(eof);
        CHECK(record == records[2]);
        REQUIRE(reader->ReadRecord(&record, &eof).ok());
        CHECK(eof);
      } else {
        CHECK(next.message() == s.message());  // final: every later call repeats it
        CHECK(reader->ReadRecord(&record, &eof).message() == s.message());
      }
    }
  }
}

TEST_CASE("TruncatedTrailingRecordIsDataLossAtEveryCutPoint") {
  const std::vector<std::string> records = {"complete", "cut somewhere in here"};
  const std::string shard = Shard(records);
  const size_t second = records[0].size() + kOverhead;
  const size_t frame = records[1].size() + kOverhead;
  for (size_t kept = 1; kept < frame; ++kept) {
    for (size_t buffer : {size_t{16}, size_t{4096}}) {
      INFO("kept " << kept << " of " << frame << ", buffer " << buffer);
      auto reader = MemoryReader(shard.substr(0, second + kept), buffer);
      ReadAll all = ReadUntilError(reader.get());
      CHECK(all.records == std::vector<std::string>{records[0]});
      CHECK(all.status.code() == StatusCode::kDataLoss);
      const size_t expected = kept < kTFRecordHeaderBytes ? kTFRecordHeaderBytes : frame;
      CHECK(all.status.message() == "truncated record at mem:" + std::to_string(second) +
                                        " (expected " + std::to_string(expected) +
                                        " bytes, file ends after " + std::to_string(kept) + ")");
      CHECK_FALSE(reader->can_continue());
    }
  }
}

TEST_CASE("LengthOverTheLimitIsRefusedBeforeAllocating") {
  TFRecordReaderOptions options;
  options.max_record_bytes = 10;
  TFRecordReader at_limit(NewMemoryFile("mem", Shard({std::string(10, 'x')})), options);
  ReadAll ok = ReadUntilError(&at_limit);
  REQUIRE(ok.status.ok());
  CHECK(ok.records.size() == 1);

  TFRecordReader over(NewMemoryFile("mem", Shard({"0123456789", std::string(11, 'x')})), options);
  ReadAll all = ReadUntilError(&over);
  CHECK(all.records.size() == 1);
  CHECK(all.status.code() == StatusCode::kDataLoss);
  CHECK(all.status.message() ==
        "corrupted record at mem:26 (length 11 over the limit of 10 bytes)");
  CHECK_FALSE(over.can_continue());

  // A header claiming 1 TiB with a valid length CRC and only a few bytes behind it: refused by
  // the default limit, not allocated.
  std::string header(8, '\0');
  const uint64_t huge = uint64_t{1} << 40;
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>(huge >> (8 * i));
  uint32_t masked = crc32c::Mask(crc32c::Value(header));
  for (int i = 0; i < 4; ++i) header.push_back(static_cast<char>(masked >> (8 * i)));
  auto reader = MemoryReader(header + "tail");
  ReadAll huge_all = ReadUntilError(reader.get());
  CHECK(huge_all.status.code() == StatusCode::kDataLoss);
  CHECK_THAT(huge_all.status.message(),
             Catch::Contains("mem:0 (length 1099511627776 over the limit of 2147483648 bytes)"));
}

// A length under the limit whose CRC holds (damage that happens to pass it, or a crafted header)
// but with little behind it: the buffer grows with the bytes that arrive, not to the announced
// 2 GiB, and the record is then reported truncated. Measured by the largest read the reader asks
// of its file, which is the room its buffer has.
TEST_CASE("AnnouncedLengthIsNotAllocatedBeforeItsBytesArrive") {
  class LargestRead : public SequentialFile {
   public:
    explicit LargestRead(std::unique_ptr<SequentialFile> base) : base_(std::move(base)) {}
    Status Read(size_t n, char* scratch, size_t* bytes_read) override {
      largest = std::max(largest, n);
      return base_->Read(n, scratch, bytes_read);
    }
    const std::string& name() const override { return base_->name(); }
    size_t largest = 0;

   private:
    std::unique_ptr<SequentialFile> base_;
  };
  std::string header(8, '\0');
  const uint64_t length = (uint64_t{2} << 30) - 1;
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>(length >> (8 * i));
  const uint32_t masked = crc32c::Mask(crc32c::Value(header));
  for (int i = 0; i < 4; ++i) header.push_back(static_cast<char>(masked >> (8 * i)));
  const std::string file = header + RandomBytes(3 << 20, 9);

  auto counting = std::make_unique<LargestRead>(NewMemoryFile("mem", file));
  LargestRead* reads = counting.get();
  TFRecordReaderOptions options;
  options.buffer_bytes = 1 << 16;
  TFRecordReader reader(std::move(counting), options);
  ReadAll all = ReadUntilError(&reader);
  CHECK(all.status.code() == StatusCode::kDataLoss);
  CHECK_THAT(all.status.message(), Catch::Contains("truncated record at mem:0"));
  CHECK(reads->largest <= 2 * file.size());
}

TEST_CASE("IoErrorIsFinalAndNamesTheFile") {
  const std::string shard = Shard({"one", "two", "three"});
  for (int64_t fail_at : {int64_t{0}, int64_t{5}, int64_t{20}, int64_t{25}}) {
    INFO("fail at " << fail_at);
    auto reader = MemoryReader(shard, 16, fail_at);
    ReadAll all = ReadUntilError(reader.get());
    CHECK(all.status.code() == StatusCode::kUnavailable);
    CHECK_THAT(all.status.message(), Catch::Contains("mem"));
    CHECK(all.records.size() == static_cast<size_t>(fail_at / 19));
    CHECK_FALSE(reader->can_continue());
    std::string_view record;
    bool eof = false;
    CHECK(reader->ReadRecord(&record, &eof).code() == StatusCode::kUnavailable);
  }
}

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

// A LendingSequentialFile over memory that lends in pieces whose sizes cycle through `loans`;
// with fail_at, the loan that reaches that offset ends there and the next call fails.
class LendingMemoryFile final : public LendingSequentialFile {
 public:
  LendingMemoryFile(std::string contents, std::vector<size_t> loans, int64_t fail_at)
      : contents_(std::move(contents)), loans_(std::move(loans)), fail_at_(fail_at) {}

  Status Lend(std::string_view* data) override {
    *data = {};
    size_t end = contents_.size();
    if (fail_at_ >= 0) {
      if (pos_ >= static_cast<size_t>(fail_at_)) {
        // Worded as NewMemoryFile's, to compare the two readers' messages.
        return IOError("read mem: injected I/O error at offset " + std::to_string(fail_at_));
      }
      end = std::min(end, static_cast<size_t>(fail_at_));
    }
    const size_t take = std::min(loans_[next_++ % loans_.size()], end - pos_);
    *data = std::string_view(contents_.data() + pos_, take);
    pos_ += take;
    return Status::OK();
  }
  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    std::string_view data;
    RETURN_IF_ERROR(Lend(&data));
    const size_t take = std::min(n, data.size());
    std::memcpy(scratch, data.data(), take);
    pos_ -= data.size() - take;
    *bytes_read = take;
    return Status::OK();
  }
  const std::string& name() const override { return name_; }
  const std::string& contents() const { return contents_; }

 private:
  std::string contents_;
  std::vector<size_t> loans_;
  int64_t fail_at_;
  size_t pos_ = 0;
  size_t next_ = 0;
  std::string name_ = "mem";
};

struct Trace {
  std::vector<std::string> records;
  std::vector<uint64_t> offsets;
  std::vector<std::string> errors;  // every error, with the record offset it names
  bool ended = false;
  bool in_place = false;            // some record was a view into the lender's bytes
};

// Reads to the end or a final error, stepping past data checksum mismatches.
Trace TraceReader(TFRecordReader* reader, const std::string* lender_bytes) {
  Trace t;
  for (int i = 0; i < 100000; ++i) {
    std::string_view record;
    bool eof = false;
    Status s = reader->ReadRecord(&record, &eof);
    if (!s.ok()) {
      t.errors.push_back(s.message() + " @" + std::to_string(reader->record_offset()));
      if (!reader->can_continue()) return t;
      continue;
    }
    if (eof) {
      t.ended = true;
      return t;
    }
    t.records.emplace_back(record);
    t.offsets.push_back(reader->record_offset());
    if (lender_bytes && record.data() >= lender_bytes->data() &&
        record.data() < lender_bytes->data() + lender_bytes->size()) {
      t.in_place = true;
    }
  }
  return t;
}

TEST_CASE("LendingStreamGivesTheSameRecordsAndErrorsAsCopying") {
  std::vector<std::string> records;
  for (uint32_t i = 0; i < 120; ++i) records.push_back(RandomBytes((i * 37) % 700, i));
  records.push_back("");
  records.push_back(RandomBytes(20000, 9));
  records.push_back("last");
  const std::string shard = Shard(records);
  const size_t third = records[0].size() + records[1].size() + 2 * kOverhead;
  std::string bad_data = shard;
  bad_data[third + kTFRecordHeaderBytes + 1] ^= 1;  // record 2's data: stepped past
  std::string bad_length = shard;
  bad_length[third + 2] ^= 1;                        // record 2's length: final
  struct Case {
    const char* what;
    std::string contents;
    int64_t fail_at;
  };
  const std::vector<Case> cases = {
      {"clean", shard, -1},
      {"data checksum", bad_data, -1},
      {"length checksum", bad_length, -1},
      {"truncated in a header", shard.substr(0, shard.size() - 28), -1},
      {"truncated in the data", shard.substr(0, shard.size() - 3), -1},
      {"I/O error at the start", shard, 0},
      {"I/O error in a record", shard, static_cast<int64_t>(third) + 5},
      {"I/O error at a record's start", shard, static_cast<int64_t>(third)},
      {"I/O error at the end", shard, static_cast<int64_t>(shard.size())},
      {"empty", "", -1},
  };
  const std::vector<std::vector<size_t>> loan_patterns = {
      {1}, {5}, {16}, {100, 7, 3000}, {4096}, {1 << 20}};
  for (const Case& c : cases) {
    for (size_t buffer : {size_t{16}, size_t{4096}, size_t{1} << 20}) {
      TFRecordReaderOptions options;
      options.buffer_bytes = buffer;
      TFRecordReader copying(NewMemoryFile("mem", c.contents, c.fail_at), options);
      const Trace want = TraceReader(&copying, nullptr);
      for (const auto& loans : loan_patterns) {
        INFO(c.what << ", buffer " << buffer << ", first loan " << loans[0]);
        auto file = std::make_unique<LendingMemoryFile>(c.contents, loans, c.fail_at);
        const LendingMemoryFile* lender = file.get();
        TFRecordReader lending(std::move(file), options);
        const Trace got = TraceReader(&lending, &lender->contents());
        CHECK(got.records == want.records);
        CHECK(got.offsets == want.offsets);
        CHECK(got.errors == want.errors);
        CHECK(got.ended == want.ended);
        CHECK(lending.offset() == copying.offset());
        if (loans[0] >= 4096 && !got.records.empty()) CHECK(got.in_place);
      }
    }
  }
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
