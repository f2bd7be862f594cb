#include "formats/image_file_reader.h"

#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <new>
#include <string>

#include "formats/example_scanner.h"
#include "formats/record_reader_factory.h"
#include "sluice/v1/example.pb.h"
#include "tests/test_proc_io.h"
#include "tests/test_support.h"

// The bytes this test process holds through operator new, and the most it held since
// ResetPeak: what shows whether a reader holds an image's bytes once or twice.
namespace {
std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> peak_bytes{0};

void* Track(void* p) {
  if (p == nullptr) throw std::bad_alloc();
  const int64_t now = live_bytes += static_cast<int64_t>(malloc_usable_size(p));
  int64_t peak = peak_bytes.load();
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now)) {
  }
  return p;
}

void Untrack(void* p) {
  if (p == nullptr) return;
  live_bytes -= static_cast<int64_t>(malloc_usable_size(p));
  std::free(p);
}

// Returns the bytes held now, from which the next peak counts.
int64_t ResetPeak() {
  peak_bytes = live_bytes.load();
  return peak_bytes;
}
}  // namespace

void* operator new(size_t n) { return Track(std::malloc(n == 0 ? 1 : n)); }
void* operator new[](size_t n) { return Track(std::malloc(n == 0 ? 1 : n)); }
void operator delete(void* p) noexcept { Untrack(p); }
void operator delete[](void* p) noexcept { Untrack(p); }
void operator delete(void* p, size_t) noexcept { Untrack(p); }
void operator delete[](void* p, size_t) noexcept { Untrack(p); }

namespace sluice {
namespace {

using testing::RandomBytes;
using testing::ReadChars;
using testing::TempDir;
using testing::WriteAll;

constexpr size_t kMiB = size_t{1} << 20;

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

// The file is read straight into the record (its image feature written last): one copy of a
// 32 MiB image held, not a temporary and the record; the record still parses and scans.
TEST_CASE("LargeImageFileIsHeldOnceReadStraightIntoTheRecord") {
  TempDir dir;
  const std::string path = dir.file("big.png");
  const size_t size = 32 * kMiB;
  WriteAll(path, RandomBytes(size, 9));
  RecordReaderOptions o;
  o.label = 12345;
  auto reader = ImageFileReader::Open(path, o);
  REQUIRE(reader.ok());
  std::string record;
  bool eof = false;
  const int64_t held = ResetPeak();
  REQUIRE((*reader)->ReadRecordInto(&record, &eof).ok());
  const int64_t peak = peak_bytes.load() - held;
  CHECK(peak >= static_cast<int64_t>(size));
  CHECK(peak < static_cast<int64_t>(size + size / 8));
  CHECK(record.capacity() < size + 4096);

  const v1::Example e = Parse(record);
  const auto& f = e.features().feature();
  CHECK(f.size() == 3);
  CHECK(f.at("image/encoded").bytes_list().value(0) == testing::ReadAll(path));
  CHECK(f.at("image/class/label").int64_list().value(0) == 12345);
  CHECK(f.at("image/filename").bytes_list().value(0) == path);
  std::string_view image;
  int64_t label = 0;
  REQUIRE(ExampleScanner("image/encoded", "image/class/label").Scan(record, &image, &label).ok());
  CHECK(image.size() == size);
  CHECK(label == 12345);
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
  WriteAll(path, RandomBytes(kMiB + 1, 1));
  RecordReaderOptions o;
  o.stream.max_held_record_bytes = kMiB;
  auto reader = ImageFileReader::Open(path, o);
  REQUIRE(reader.ok());
  std::string record;
  bool eof = false;
  const uint64_t before = ReadChars();
  const Status s = (*reader)->ReadRecordInto(&record, &eof);
  CHECK(ReadChars() - before < kMiB / 16);  // the refusal did not read the file
  CHECK(s.code() == StatusCode::kResourceExhausted);
  CHECK(s.message().find(path) != std::string::npos);
  CHECK(s.message().find(std::to_string(kMiB + 1)) != std::string::npos);
  CHECK((*reader)->record_length() == kMiB + 1);
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
  WriteAll(path, RandomBytes(kMiB, 3));
  auto reader = ImageFileReader::Open(path, RecordReaderOptions{});
  REQUIRE(reader.ok());
  const uint64_t before = ReadChars();
  bool eof = true;
  REQUIRE((*reader)->SkipRecord(&eof).ok());
  CHECK_FALSE(eof);
  REQUIRE((*reader)->SkipRecord(&eof).ok());
  CHECK(eof);
  CHECK(ReadChars() - before < kMiB / 16);
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
