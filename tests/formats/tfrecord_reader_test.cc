// Reading TFRecord files: records of every size, their offsets, starting at a frame, and a
// lending stream that gives the same records and errors as copying.
#include "formats/tfrecord_reader.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "formats/tfrecord_writer.h"
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

enum class Api { kView, kInto, kSkip };

// Reads to the end or a final error, stepping past data checksum mismatches and refused records.
Trace TraceReader(TFRecordReader* reader, const std::string* lender_bytes, Api api = Api::kView) {
  Trace t;
  std::string copy;
  for (int i = 0; i < 100000; ++i) {
    std::string_view record;
    bool eof = false;
    Status s = api == Api::kView   ? reader->ReadRecord(&record, &eof)
               : api == Api::kInto ? reader->ReadRecordInto(&copy, &eof)
                                   : reader->SkipRecord(&eof);
    if (api == Api::kInto) record = copy;
    if (api == Api::kSkip) record = "skipped";
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
  const size_t big = shard.size() - kOverhead - 4 - 20000 - kOverhead;  // record 121's frame
  const std::vector<Case> cases = {
      {"clean", shard, -1},
      {"truncated in a large record", shard.substr(0, big + kTFRecordHeaderBytes + 5000), -1},
      {"truncated in a large record's footer", shard.substr(0, big + kOverhead + 20000 - 2), -1},
      {"I/O error in a large record", shard, static_cast<int64_t>(big) + 7000},
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
      // ReadRecordInto, which streams a record larger than the buffer into the string instead,
      // gives the same, copying or lending.
      TFRecordReader into(NewMemoryFile("mem", c.contents, c.fail_at), options);
      const Trace copied = TraceReader(&into, nullptr, Api::kInto);
      INFO(c.what << ", buffer " << buffer << ", into a string");
      CHECK(copied.records == want.records);
      CHECK(copied.offsets == want.offsets);
      CHECK(copied.errors == want.errors);
      CHECK(copied.ended == want.ended);
      for (const auto& loans : loan_patterns) {
        TFRecordReader lent_into(std::make_unique<LendingMemoryFile>(c.contents, loans, c.fail_at),
                                 options);
        const Trace got = TraceReader(&lent_into, nullptr, Api::kInto);
        CHECK(got.records == want.records);
        CHECK(got.errors == want.errors);
        CHECK(lent_into.offset() == copying.offset());
      }
      // SkipRecord (another shard's records) checks each record the same, streaming a large one
      // through the buffer instead of assembling it: the same errors at the same offsets.
      for (const auto& loans : loan_patterns) {
        TFRecordReader skipping(std::make_unique<LendingMemoryFile>(c.contents, loans, c.fail_at),
                                options);
        const Trace got = TraceReader(&skipping, nullptr, Api::kSkip);
        CHECK(got.records.size() == want.records.size());
        CHECK(got.offsets == want.offsets);
        CHECK(got.errors == want.errors);
        CHECK(got.ended == want.ended);
        CHECK(skipping.offset() == copying.offset());
      }
      TFRecordReader skipping(NewMemoryFile("mem", c.contents, c.fail_at), options);
      const Trace skipped = TraceReader(&skipping, nullptr, Api::kSkip);
      CHECK(skipped.offsets == want.offsets);
      CHECK(skipped.errors == want.errors);
    }
  }
}

// With max_held_record_bytes under the 20000-byte record, that record alone turns into a
// ResourceExhausted naming its offset, size and the limit; the reader steps over it without
// holding it and reads on, through either API and any stream. Damage inside it stays final.
TEST_CASE("RecordOverTheHeldLimitIsRefusedFromItsLengthAndReadingGoesOn") {
  std::vector<std::string> records = {"first", RandomBytes(20000, 9), "last"};
  const std::string shard = Shard(records);
  const size_t big = records[0].size() + kOverhead;
  const std::string refused = "record at mem:" + std::to_string(big) +
                              " of 20000 bytes is over the limit of 10000 bytes that the memory "
                              "budget allows one record @" +
                              std::to_string(big);
  const std::string cut = shard.substr(0, big + kTFRecordHeaderBytes + 5000);
  for (size_t buffer : {size_t{16}, size_t{4096}, size_t{1} << 20}) {
    TFRecordReaderOptions options;
    options.buffer_bytes = buffer;
    options.max_held_record_bytes = 10000;
    for (Api api : {Api::kView, Api::kInto, Api::kSkip}) {
      for (const std::vector<size_t>& loans :
           std::vector<std::vector<size_t>>{{}, {1}, {100, 7, 3000}, {1 << 20}}) {
        INFO("buffer " << buffer << ", api " << static_cast<int>(api) << ", loans "
                       << loans.size());
        auto open = [&](const std::string& contents) -> std::unique_ptr<SequentialFile> {
          if (loans.empty()) return NewMemoryFile("mem", contents);
          return std::make_unique<LendingMemoryFile>(contents, loans, -1);
        };
        TFRecordReader reader(open(shard), options);
        const Trace t = TraceReader(&reader, nullptr, api);
        CHECK(t.records.size() == 2);
        if (api != Api::kSkip) CHECK(t.records == std::vector<std::string>{"first", "last"});
        CHECK(t.errors == std::vector<std::string>{refused});
        CHECK(t.ended);
        CHECK(reader.offset() == shard.size());

        TFRecordReader truncated(open(cut), options);
        const Trace tt = TraceReader(&truncated, nullptr, api);
        CHECK(tt.records.size() == 1);
        REQUIRE(tt.errors.size() == 1);
        CHECK(tt.errors[0].find("truncated record at mem:" + std::to_string(big)) == 0);
        CHECK_FALSE(truncated.can_continue());
      }
    }
  }
}

}  // namespace
}  // namespace sluice
