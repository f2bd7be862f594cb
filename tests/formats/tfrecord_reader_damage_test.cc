// Damaged TFRecord files: flipped bytes, truncation, lengths over the limit or not yet backed by
// bytes, and I/O errors, each reported as a status naming the file and the record offset.
#include "formats/tfrecord_reader.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "formats/crc32c.h"
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

// A crafted header declaring 2^64 - 5 bytes with a valid length CRC is corrupt, and its length is
// not reported as the record's: callers sum record lengths (the shuffle buffer's byte share), and
// such a value would wrap the sum.
TEST_CASE("CorruptLengthNear2To64IsNotReportedAsTheRecordLength") {
  std::string header(8, '\0');
  const uint64_t crafted = ~uint64_t{0} - 4;
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>(crafted >> (8 * i));
  const uint32_t masked = crc32c::Mask(crc32c::Value(header));
  for (int i = 0; i < 4; ++i) header.push_back(static_cast<char>(masked >> (8 * i)));
  auto reader = MemoryReader(header + "tail");
  ReadAll all = ReadUntilError(reader.get());
  CHECK(all.status.code() == StatusCode::kDataLoss);
  CHECK_THAT(all.status.message(),
             Catch::Contains("(length " + std::to_string(crafted) + " over the limit of"));
  CHECK(reader->record_length() == 0);
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

}  // namespace
}  // namespace sluice
