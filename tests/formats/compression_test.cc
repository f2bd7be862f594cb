#include "formats/compression.h"

#include <zlib.h>

#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "formats/tfrecord_writer.h"
#include "tests/test_support.h"
#include "tests/zlib_test_util.h"

namespace sluice {
namespace {

using testing::Gzip;
using testing::TempDir;
using testing::Zlib;

// Inflates everything with zlib directly (auto-detecting gzip or zlib); all input is consumed.
std::string ZlibInflate(std::string_view data) {
  bool consumed_all = false;
  std::string out = testing::InflateWithZlib(data, &consumed_all);
  CHECK(consumed_all);
  return out;
}

Result<std::string> InflateAll(std::string compressed, size_t chunk, int64_t fail_at = -1) {
  auto file = NewInflatingFile(NewMemoryFile("mem.gz", std::move(compressed), fail_at));
  std::string out, scratch(chunk, '\0');
  while (true) {
    size_t got = 0;
    RETURN_IF_ERROR(file->Read(chunk, scratch.data(), &got));
    if (got == 0) return out;
    out.append(scratch.data(), got);
  }
}

std::string RandomText(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  // Few distinct symbols: compressible, but not trivially.
  for (char& ch : s) ch = static_cast<char>('a' + rng() % 6);
  return s;
}

std::string Frame(std::string_view record) {
  std::string out;
  AppendTFRecordFrame(record, &out);
  return out;
}

TEST_CASE("ParseCompressionAcceptsTensorFlowSpellings") {
  struct Case {
    std::string_view name;
    Compression c;
  };
  for (const Case& c : std::vector<Case>{{"", Compression::kNone},
                                         {"none", Compression::kNone},
                                         {"NONE", Compression::kNone},
                                         {"gzip", Compression::kGzip},
                                         {"GZIP", Compression::kGzip},
                                         {"zlib", Compression::kZlib},
                                         {"ZLIB", Compression::kZlib}}) {
    INFO(c.name);
    auto parsed = ParseCompression(c.name);
    REQUIRE(parsed.ok());
    CHECK(*parsed == c.c);
  }
  auto bad = ParseCompression("snappy");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(bad.status().message(), Catch::Contains("snappy"));
  CHECK(CompressionName(Compression::kNone) == "none");
  CHECK(CompressionName(Compression::kGzip) == "gzip");
  CHECK(CompressionName(Compression::kZlib) == "zlib");
}

TEST_CASE("DetectionPrefersAValidTFRecordHeaderOverLookalikeMagic") {
  struct Case {
    const char* what;
    std::string head;
    Compression expected;
  };
  const std::string plain = Frame("hello") + Frame("world");
  // Records whose length's low bytes spell a valid zlib header (78 01, 78 9c, 78 da) or the gzip
  // magic (1f 8b): only the length CRC tells these plain files from compressed ones.
  const std::vector<Case> cases = {
      {"empty file", "", Compression::kNone},
      {"plain", plain, Compression::kNone},
      {"plain, empty record", Frame(""), Compression::kNone},
      {"plain, length 0x178 = 78 01", Frame(std::string(0x178, 'x')), Compression::kNone},
      {"plain, length 0x9c78 = 78 9c", Frame(std::string(0x9c78, 'x')), Compression::kNone},
      {"plain, length 0xda78 = 78 da", Frame(std::string(0xda78, 'x')), Compression::kNone},
      {"plain, length 0x8b1f = 1f 8b", Frame(std::string(0x8b1f, 'x')), Compression::kNone},
      {"gzip", Gzip(plain), Compression::kGzip},
      {"gzip of nothing", Gzip(""), Compression::kGzip},
      {"zlib level 1", Zlib(plain, 1), Compression::kZlib},
      {"zlib level 6", Zlib(plain, 6), Compression::kZlib},
      {"zlib level 9", Zlib(plain, 9), Compression::kZlib},
      {"unknown bytes read as plain", "not a shard at all", Compression::kNone},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    CHECK(DetectCompression(c.head) == c.expected);
    CHECK(DetectCompression(std::string_view(c.head).substr(0, 12)) == c.expected);
  }
  // The lookalikes really are valid zlib / gzip magic, so the cases above test the precedence.
  CHECK(DetectCompression(Frame(std::string(0x178, 'x')).substr(0, 2)) == Compression::kZlib);
  CHECK(DetectCompression(Frame(std::string(0x8b1f, 'x')).substr(0, 2)) == Compression::kGzip);
}

TEST_CASE("DetectFileCompressionRejectsUnknownBytesNamingThePath") {
  TempDir dir;
  struct Case {
    std::string contents;
    Compression expected;
  };
  const std::string plain = Frame("abc");
  for (const Case& c : std::vector<Case>{{"", Compression::kNone},
                                         {plain, Compression::kNone},
                                         {Gzip(plain), Compression::kGzip},
                                         {Zlib(plain), Compression::kZlib}}) {
    testing::WriteAll(dir.file("f"), c.contents);
    auto detected = DetectFileCompression(dir.file("f"));
    REQUIRE(detected.ok());
    CHECK(*detected == c.expected);
  }
  std::string damaged = plain;
  damaged[9] ^= 0x40;  // the length CRC no longer matches
  testing::WriteAll(dir.file("f"), damaged);
  auto unknown = DetectFileCompression(dir.file("f"));
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(unknown.status().message(), Catch::Contains(dir.file("f")));
  auto missing = DetectFileCompression(dir.file("missing"));
  CHECK(missing.status().code() == StatusCode::kNotFound);
}

TEST_CASE("InflatingFileReadsGzipAndZlibInAnyReadSize") {
  const std::string text = RandomText(300000, 1);
  for (const std::string& compressed : {Gzip(text), Zlib(text)}) {
    for (size_t chunk : {size_t{1}, size_t{13}, size_t{4096}, size_t{1} << 20}) {
      INFO("chunk " << chunk);
      auto out = InflateAll(compressed, chunk);
      REQUIRE(out.ok());
      CHECK(*out == text);
    }
  }
}

TEST_CASE("HighlyCompressibleStreamReadInSmallPiecesIsNotTruncated") {
  // 8 MiB of zeros deflate to a few KiB; inflate runs out of output long after all input is
  // consumed, which must not be mistaken for a stream cut short.
  const std::string zeros(8 << 20, '\0');
  for (size_t chunk : {size_t{1000}, size_t{65536}}) {
    auto out = InflateAll(Gzip(zeros), chunk);
    REQUIRE(out.ok());
    CHECK(*out == zeros);
  }
}

TEST_CASE("ConcatenatedGzipMembersReadAsOneStream") {
  const std::string a = RandomText(100000, 2), b = RandomText(5000, 3);
  auto out = InflateAll(Gzip(a) + Gzip("") + Gzip(b), 4096);
  REQUIRE(out.ok());
  CHECK(*out == a + b);
}

TEST_CASE("EmptyCompressedInputIsAnEmptyStream") {
  auto out = InflateAll("", 100);
  REQUIRE(out.ok());
  CHECK(out->empty());
}

TEST_CASE("TruncatedCompressedStreamIsDataLoss") {
  const std::string text = RandomText(200000, 4);
  for (const std::string& compressed : {Gzip(text), Zlib(text)}) {
    for (size_t cut : {size_t{1}, size_t{5}, compressed.size() / 2, compressed.size() - 4,
                       compressed.size() - 1}) {
      INFO("cut at " << cut << " of " << compressed.size());
      auto out = InflateAll(compressed.substr(0, cut), 4096);
      REQUIRE_FALSE(out.ok());
      CHECK(out.status().code() == StatusCode::kDataLoss);
      CHECK_THAT(out.status().message(), Catch::Contains("truncated compressed stream in mem.gz"));
    }
  }
}

TEST_CASE("CorruptDeflateDataIsDataLossNamingFileAndCompressedOffset") {
  const std::string text = RandomText(200000, 5);
  std::string compressed = Gzip(text);
  // Damage in the middle of the deflate data; the gzip CRC-32 and length catch whatever the
  // deflate decoder itself lets through.
  std::string damaged = compressed;
  for (size_t i = compressed.size() / 2; i < compressed.size() / 2 + 16; ++i) damaged[i] ^= 0x5a;
  auto out = InflateAll(damaged, 4096);
  REQUIRE_FALSE(out.ok());
  CHECK(out.status().code() == StatusCode::kDataLoss);
  CHECK_THAT(out.status().message(),
             Catch::Contains("corrupt compressed data in mem.gz at compressed offset"));

  std::string bad_trailer = compressed;
  bad_trailer[bad_trailer.size() - 6] ^= 1;  // the CRC-32 in the gzip trailer
  out = InflateAll(bad_trailer, 4096);
  REQUIRE_FALSE(out.ok());
  CHECK(out.status().code() == StatusCode::kDataLoss);
  CHECK_THAT(out.status().message(),
             Catch::Contains("compressed offset " + std::to_string(compressed.size() - 4)));
}

// The damage is found only at the gzip trailer, after every byte was inflated: a read of any
// size returns those bytes first and the error on the next call, so a reader sees the same
// records before the error whatever its buffer size (found by tests/fuzz/tfrecord_reader_fuzz).
TEST_CASE("BytesInflatedBeforeDamageComeBeforeTheErrorInAnyReadSize") {
  const std::string text = RandomText(50000, 7);
  std::string bad_trailer = Gzip(text);
  bad_trailer[bad_trailer.size() - 6] ^= 1;  // the CRC-32 in the gzip trailer
  for (size_t chunk : {size_t{100}, size_t{4096}, size_t{1} << 20}) {
    INFO("reads of " << chunk);
    auto file = NewInflatingFile(NewMemoryFile("mem.gz", bad_trailer));
    std::string out, scratch(chunk, '\0');
    Status status;
    for (;;) {
      size_t got = 0;
      status = file->Read(chunk, scratch.data(), &got);
      if (!status.ok() || got == 0) break;
      out.append(scratch.data(), got);
    }
    CHECK(status.code() == StatusCode::kDataLoss);
    CHECK(out == text);
    size_t got = 1;
    CHECK(file->Read(chunk, scratch.data(), &got).code() == StatusCode::kDataLoss);
    CHECK(got == 0);
  }
}

TEST_CASE("GarbageAfterAGzipMemberIsDataLoss") {
  auto out = InflateAll(Gzip("abc") + "not gzip", 4096);
  REQUIRE_FALSE(out.ok());
  CHECK(out.status().code() == StatusCode::kDataLoss);
  CHECK_THAT(out.status().message(), Catch::Contains("mem.gz"));
}

TEST_CASE("InflatingFilePassesOnIoErrorsOfTheBaseFile") {
  const std::string compressed = Gzip(RandomText(1 << 20, 6));
  auto out = InflateAll(compressed, 4096, static_cast<int64_t>(compressed.size() / 2));
  REQUIRE_FALSE(out.ok());
  CHECK(out.status().code() == StatusCode::kUnavailable);
  CHECK_THAT(out.status().message(), Catch::Contains("mem.gz"));
}

TEST_CASE("DeflatingFileWritesStreamsZlibReadsAsTensorFlowWritesThem") {
  TempDir dir;
  const std::string text = RandomText(3 << 20, 7);
  struct Case {
    Compression c;
    int level;
    std::string magic;  // first bytes of the file
  };
  for (const Case& c : std::vector<Case>{{Compression::kGzip, -1, "\x1f\x8b\x08"},
                                         {Compression::kZlib, -1, "\x78\x9c"},
                                         {Compression::kZlib, 1, "\x78\x01"},
                                         {Compression::kGzip, 0, "\x1f\x8b\x08"}}) {
    INFO(CompressionName(c.c) << " level " << c.level);
    const std::string path = dir.file("out");
    {
      auto base = NewAtomicFile(path);
      REQUIRE(base.ok());
      auto file = NewDeflatingFile(std::move(*base), c.c, c.level);
      for (size_t i = 0; i < text.size(); i += 100000) {
        REQUIRE(file->Append(std::string_view(text).substr(i, 100000)).ok());
      }
      CHECK(file->size() == text.size());
      CHECK(file->name() == path);
      REQUIRE(file->Commit().ok());
      CHECK_FALSE(file->Append("x").ok());
    }
    std::string written = testing::ReadAll(path);
    CHECK(written.substr(0, c.magic.size()) == c.magic);
    CHECK(DetectCompression(written) == c.c);
    CHECK(ZlibInflate(written) == text);
    auto ours = InflateAll(written, 1 << 16);
    REQUIRE(ours.ok());
    CHECK(*ours == text);
  }
}

TEST_CASE("UncommittedDeflatingFileLeavesNothingBehind") {
  TempDir dir;
  {
    auto base = NewAtomicFile(dir.file("out"));
    REQUIRE(base.ok());
    auto file = NewDeflatingFile(std::move(*base), Compression::kGzip);
    REQUIRE(file->Append(RandomText(1 << 20, 8)).ok());
  }
  CHECK(std::filesystem::is_empty(dir.path()));
}

TEST_CASE("InvalidCompressionLevelIsAnError") {
  TempDir dir;
  auto base = NewAtomicFile(dir.file("out"));
  REQUIRE(base.ok());
  auto file = NewDeflatingFile(std::move(*base), Compression::kZlib, 42);
  Status s = file->Append("abc");
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_FALSE(file->Commit().ok());
}

}  // namespace
}  // namespace sluice
