#include "formats/file.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace sluice {
namespace {

using testing::TempDir;

std::vector<std::string> ListDir(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Reads everything through Read(n) calls of the given size.
Result<std::string> Drain(SequentialFile* file, size_t chunk) {
  std::string out;
  std::string scratch(chunk, '\0');
  while (true) {
    size_t got = 0;
    RETURN_IF_ERROR(file->Read(chunk, scratch.data(), &got));
    if (got == 0) return out;
    out.append(scratch.data(), got);
  }
}

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 131 + (i >> 9));
  return s;
}

TEST_CASE("SequentialFileReadsEveryByteThenEndOfFile") {
  TempDir dir;
  const std::string contents = Pattern(3 << 20);
  testing::WriteAll(dir.file("a"), contents);
  for (size_t chunk : {size_t{1} << 10, size_t{1} << 20, size_t{8} << 20}) {
    auto file = OpenSequentialFile(dir.file("a"));
    REQUIRE(file.ok());
    CHECK((*file)->name() == dir.file("a"));
    auto read = Drain(file->get(), chunk);
    REQUIRE(read.ok());
    CHECK(*read == contents);
  }
}

TEST_CASE("OpeningAMissingFileIsNotFoundNamingThePath") {
  TempDir dir;
  auto file = OpenSequentialFile(dir.file("missing"));
  REQUIRE_FALSE(file.ok());
  CHECK(file.status().code() == StatusCode::kNotFound);
  CHECK_THAT(file.status().message(), Catch::Contains(dir.file("missing")));
}

TEST_CASE("ReadingADirectoryIsAnErrorNamingThePath") {
  TempDir dir;
  auto file = OpenSequentialFile(dir.path().string());
  if (file.ok()) {  // Linux lets a directory be opened O_RDONLY; read(2) fails with EISDIR.
    size_t got = 0;
    char buf[16];
    Status s = (*file)->Read(sizeof(buf), buf, &got);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.message(), Catch::Contains(dir.path().string()));
  }
}

TEST_CASE("MemoryFileFaultInjectionDeliversBytesBeforeTheOffsetThenFails") {
  auto file = NewMemoryFile("mem.tfrecord", "0123456789", 4);
  char buf[16];
  size_t got = 0;
  REQUIRE(file->Read(3, buf, &got).ok());
  CHECK(std::string(buf, got) == "012");
  REQUIRE(file->Read(16, buf, &got).ok());
  CHECK(std::string(buf, got) == "3");  // cut short at the failing offset
  Status s = file->Read(16, buf, &got);
  CHECK(got == 0);
  CHECK(s.code() == StatusCode::kUnavailable);
  CHECK_THAT(s.message(), Catch::Contains("mem.tfrecord") && Catch::Contains("offset 4"));
  CHECK_FALSE(file->Read(16, buf, &got).ok());  // and stays failed
}

TEST_CASE("MemoryFileWithoutFaultReadsToEnd") {
  auto file = NewMemoryFile("m", Pattern(1000));
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{4096}}) {
    auto again = NewMemoryFile("m", Pattern(1000));
    auto read = Drain(again.get(), chunk);
    REQUIRE(read.ok());
    CHECK(*read == Pattern(1000));
  }
  auto past_end = NewMemoryFile("m", "abc", 100);  // an offset never reached never fails
  auto read = Drain(past_end.get(), 2);
  REQUIRE(read.ok());
  CHECK(*read == "abc");
}

TEST_CASE("UncommittedAtomicFileLeavesNoFileAndNoTemporary") {
  TempDir dir;
  {
    auto file = NewAtomicFile(dir.file("out"));
    REQUIRE(file.ok());
    REQUIRE((*file)->Append(Pattern(3 << 20)).ok());  // more than the buffer: bytes hit the disk
    CHECK(ListDir(dir.path()).size() == 1);           // only the temporary
    CHECK_FALSE(std::filesystem::exists(dir.file("out")));
  }
  CHECK(ListDir(dir.path()).empty());
}

TEST_CASE("CommittedAtomicFileAppearsWithEveryByteAndNoTemporary") {
  TempDir dir;
  // Small appends that fill the buffer, one larger than the buffer, and small ones again.
  std::string expected;
  auto file = NewAtomicFile(dir.file("out"));
  REQUIRE(file.ok());
  for (int i = 0; i < 5000; ++i) {
    std::string piece = Pattern(static_cast<size_t>(i % 500));
    expected += piece;
    REQUIRE((*file)->Append(piece).ok());
  }
  std::string big = Pattern(2 << 20);
  expected += big;
  REQUIRE((*file)->Append(big).ok());
  REQUIRE((*file)->Append("tail").ok());
  expected += "tail";
  CHECK((*file)->size() == expected.size());
  CHECK_FALSE(std::filesystem::exists(dir.file("out")));
  REQUIRE((*file)->Commit().ok());
  CHECK(ListDir(dir.path()) == std::vector<std::string>{"out"});
  CHECK(testing::ReadAll(dir.file("out")) == expected);
  CHECK_FALSE((*file)->Append("more").ok());
  CHECK_FALSE((*file)->Commit().ok());
  file->reset();
  CHECK(std::filesystem::exists(dir.file("out")));  // destroying a committed file keeps it
}

TEST_CASE("AtomicFileReplacesAnExistingFileOnlyOnCommit") {
  TempDir dir;
  testing::WriteAll(dir.file("out"), "old");
  {
    auto file = NewAtomicFile(dir.file("out"));
    REQUIRE(file.ok());
    REQUIRE((*file)->Append("new").ok());
  }
  CHECK(testing::ReadAll(dir.file("out")) == "old");
  REQUIRE(WriteFileAtomically(dir.file("out"), "new").ok());
  CHECK(testing::ReadAll(dir.file("out")) == "new");
  CHECK(ListDir(dir.path()) == std::vector<std::string>{"out"});
}

TEST_CASE("TwoAtomicFilesForOnePathUseDistinctTemporaries") {
  TempDir dir;
  auto a = NewAtomicFile(dir.file("out"));
  auto b = NewAtomicFile(dir.file("out"));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE((*a)->Append("a").ok());
  REQUIRE((*b)->Append("b").ok());
  REQUIRE((*a)->Commit().ok());
  REQUIRE((*b)->Commit().ok());
  CHECK(testing::ReadAll(dir.file("out")) == "b");
  CHECK(ListDir(dir.path()) == std::vector<std::string>{"out"});
}

TEST_CASE("AtomicFileInAMissingDirectoryIsAnErrorNamingThePath") {
  TempDir dir;
  auto file = NewAtomicFile(dir.file("no/such/out"));
  REQUIRE_FALSE(file.ok());
  CHECK(file.status().code() == StatusCode::kNotFound);
  CHECK_THAT(file.status().message(), Catch::Contains(dir.file("no/such/out")));
}

TEST_CASE("WholeFileHelpersRoundTripAndReportMissingFiles") {
  TempDir dir;
  for (size_t size : {size_t{0}, size_t{1}, size_t{4096}, size_t{1} << 20}) {
    INFO(size);
    std::string contents = Pattern(size);
    REQUIRE(WriteFileAtomically(dir.file("f"), contents).ok());
    auto size_read = GetFileSize(dir.file("f"));
    REQUIRE(size_read.ok());
    CHECK(*size_read == size);
    auto read = ReadFileToString(dir.file("f"));
    REQUIRE(read.ok());
    CHECK(*read == contents);
  }
  auto missing = ReadFileToString(dir.file("missing"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK_THAT(missing.status().message(), Catch::Contains(dir.file("missing")));
  auto missing_size = GetFileSize(dir.file("missing"));
  REQUIRE_FALSE(missing_size.ok());
  CHECK(missing_size.status().code() == StatusCode::kNotFound);
  CHECK_FALSE(GetFileSize(dir.path().string()).ok());
}

TEST_CASE("ReadFileToStringReadsFilesWhoseSizeStatDoesNotKnow") {
  auto read = ReadFileToString("/proc/self/status");
  REQUIRE(read.ok());
  CHECK_THAT(*read, Catch::Contains("Name:"));
}

}  // namespace
}  // namespace sluice
