#include "formats/image_file_reader.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "formats/record_reader_factory.h"
#include "sluice/v1/example.pb.h"
#include "tests/test_support.h"

namespace sluice {
namespace {

using testing::RandomBytes;
using testing::TempDir;
using testing::WriteAll;

v1::Example Parse(const std::string& record) {
  v1::Example e;
  REQUIRE(e.ParseFromString(record));
  return e;
}

TEST_CASE("ImageFileIsOneExampleWithItsBytesLabelAndPathThenEndOfFile") {
  TempDir dir;
  const std::string path = dir.file("cat.jpg");
  const std::string bytes = RandomBytes(5000, 7);
  WriteAll(path, bytes);
  RecordReaderOptions o;
  o.image_key = "jpeg";
  o.label_key = "cls";
  o.label = 3;
  auto reader = OpenRecordReader(path, SourceKind::kImage, o);
  REQUIRE(reader.ok());
  std::string record = "stale";
  bool eof = true;
  REQUIRE((*reader)->ReadRecordInto(&record, &eof).ok());
  REQUIRE_FALSE(eof);
  CHECK((*reader)->record_offset() == 0);
  CHECK((*reader)->record_length() == bytes.size());
  const v1::Example e = Parse(record);
  const auto& f = e.features().feature();
  CHECK(f.size() == 3);
  CHECK(f.at("jpeg").bytes_list().value(0) == bytes);
  CHECK(f.at("cls").int64_list().value(0) == 3);
  CHECK(f.at("image/filename").bytes_list().value(0) == path);
  REQUIRE((*reader)->ReadRecordInto(&record, &eof).ok());
  CHECK(eof);
  CHECK((*reader)->can_continue());
}

TEST_CASE("ImageFileWithoutLabelWritesNoLabelFeature") {
  TempDir dir;
  const std::string path = dir.file("x.png");
  WriteAll(path, "not really a png");  // what it is is the decoder's business
  RecordReaderOptions o;
  auto reader = ImageFileReader::Open(path, o);
  REQUIRE(reader.ok());
  std::string record;
  bool eof = false;
  REQUIRE((*reader)->ReadRecordInto(&record, &eof).ok());
  const v1::Example e = Parse(record);
  const auto& f = e.features().feature();
  CHECK(f.size() == 2);
  CHECK(f.count("image/class/label") == 0);
  CHECK(f.at("image/encoded").bytes_list().value(0) == "not really a png");
}

TEST_CASE("ImageFileOverPerRecordLimitIsResourceExhaustedThenEndOfFile") {
  TempDir dir;
  const std::string path = dir.file("big.jpg");
  WriteAll(path, RandomBytes(1001, 1));
  RecordReaderOptions o;
  o.stream.max_held_record_bytes = 1000;
  auto reader = ImageFileReader::Open(path, o);
  REQUIRE(reader.ok());
  // Unreadable from now on: a refusal that read the file would fail differently.
  REQUIRE(::chmod(path.c_str(), 0) == 0);
  std::string record;
  bool eof = false;
  const Status s = (*reader)->ReadRecordInto(&record, &eof);
  CHECK(s.code() == StatusCode::kResourceExhausted);
  CHECK(s.message().find(path) != std::string::npos);
  CHECK(s.message().find("1001") != std::string::npos);
  CHECK((*reader)->record_length() == 1001);
  CHECK((*reader)->can_continue());
  REQUIRE((*reader)->ReadRecordInto(&record, &eof).ok());
  CHECK(eof);
}

TEST_CASE("MissingImageFileFailsToOpenNamingThePath") {
  TempDir dir;
  const std::string path = dir.file("gone.jpg");
  auto reader = OpenRecordReader(path, SourceKind::kImage, RecordReaderOptions{});
  REQUIRE_FALSE(reader.ok());
  CHECK(reader.status().code() == StatusCode::kNotFound);
  CHECK(reader.status().message().find(path) != std::string::npos);
}

TEST_CASE("ImageFileThatShrankAfterOpenIsFinalDataLossNamingThePath") {
  TempDir dir;
  const std::string path = dir.file("short.jpg");
  WriteAll(path, RandomBytes(100, 2));
  auto reader = ImageFileReader::Open(path, RecordReaderOptions{});
  REQUIRE(reader.ok());
  REQUIRE(::truncate(path.c_str(), 50) == 0);
  std::string record;
  bool eof = false;
  const Status s = (*reader)->ReadRecordInto(&record, &eof);
  CHECK(s.code() == StatusCode::kDataLoss);
  CHECK(s.message().find(path) != std::string::npos);
  CHECK_FALSE((*reader)->can_continue());
  CHECK((*reader)->ReadRecordInto(&record, &eof).code() == StatusCode::kDataLoss);
}

TEST_CASE("SkippedImageFileIsNotReadAndEndsTheFile") {
  TempDir dir;
  const std::string path = dir.file("skip.jpg");
  WriteAll(path, RandomBytes(10, 3));
  auto reader = ImageFileReader::Open(path, RecordReaderOptions{});
  REQUIRE(reader.ok());
  REQUIRE(::chmod(path.c_str(), 0) == 0);
  bool eof = true;
  REQUIRE((*reader)->SkipRecord(&eof).ok());
  CHECK_FALSE(eof);
  REQUIRE((*reader)->SkipRecord(&eof).ok());
  CHECK(eof);
}

TEST_CASE("ImageFileStartingPastOffsetZeroIsRefused") {
  TempDir dir;
  const std::string path = dir.file("a.jpg");
  WriteAll(path, "x");
  RecordReaderOptions o;
  o.stream.start_offset = 16;
  auto reader = ImageFileReader::Open(path, o);
  REQUIRE_FALSE(reader.ok());
  CHECK(reader.status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
