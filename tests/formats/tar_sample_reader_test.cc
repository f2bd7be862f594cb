#include "formats/tar_sample_reader.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "formats/example_scanner.h"
#include "formats/record_reader_factory.h"
#include "sluice/v1/example.pb.h"
#include "tests/test_proc_io.h"
#include "tests/test_support.h"
#include "tests/zlib_test_util.h"

namespace sluice {
namespace {

using testing::Gzip;
using testing::TempDir;
using testing::WriteAll;

// One tar header block. size_field: the 12 bytes of the size field (octal by default).
struct Header {
  std::string name;
  uint64_t size = 0;
  char type = '0';
  std::string prefix;
  bool base256 = false;
  bool signed_checksum = false;  // the checksum of old Sun tars: bytes summed as signed chars
  std::string name_bytes;        // when set, written as the name field as is (high-bit bytes)
};

std::string HeaderBlock(const Header& h) {
  std::string b(kTarBlockBytes, '\0');
  const std::string& name = h.name_bytes.empty() ? h.name : h.name_bytes;
  b.replace(0, std::min<size_t>(name.size(), 100), name.substr(0, 100));
  std::snprintf(b.data() + 100, 8, "%07o", 0644);
  std::snprintf(b.data() + 108, 8, "%07o", 0);
  std::snprintf(b.data() + 116, 8, "%07o", 0);
  if (h.base256) {
    b[124] = static_cast<char>(0x80);
    for (int i = 0; i < 8; ++i) b[135 - i] = static_cast<char>((h.size >> (8 * i)) & 0xff);
  } else {
    std::snprintf(b.data() + 124, 12, "%011llo", static_cast<unsigned long long>(h.size));
  }
  std::snprintf(b.data() + 136, 12, "%011o", 0);
  b[156] = h.type;
  b.replace(257, 8,
            std::string("ustar\0"
                        "00",
                        8));
  b.replace(345, h.prefix.size(), h.prefix);
  std::fill(b.begin() + 148, b.begin() + 156, ' ');
  long sum = 0;
  for (char c : b)
    sum += h.signed_checksum ? static_cast<signed char>(c) : static_cast<unsigned char>(c);
  std::snprintf(b.data() + 148, 8, "%06lo", static_cast<unsigned long>(sum & 0777777));
  b[154] = '\0';
  b[155] = ' ';
  return b;
}

std::string Padded(std::string data) {
  data.resize((data.size() + kTarBlockBytes - 1) / kTarBlockBytes * kTarBlockBytes, '\0');
  return data;
}

std::string Member(const std::string& name, const std::string& data, char type = '0') {
  Header h;
  h.name = name;
  h.size = data.size();
  h.type = type;
  return HeaderBlock(h) + Padded(data);
}

std::string PaxRecord(const std::string& key, const std::string& value) {
  const std::string body = " " + key + "=" + value + "\n";
  size_t n = body.size() + 1;
  while (std::to_string(n).size() + body.size() != n) ++n;
  return std::to_string(n) + body;
}

// A member named through a GNU 'L' header: a name of any length.
std::string LongNameMember(const std::string& name, const std::string& data) {
  Header l;
  l.name = "././@LongLink";
  l.type = 'L';
  l.size = name.size() + 1;
  return HeaderBlock(l) + Padded(name + std::string(1, '\0')) + Member("truncated.bin", data);
}

std::string EndBlocks() { return std::string(2 * kTarBlockBytes, '\0'); }

// A sample as read back: its features, bytes and int64s by key.
struct Sample {
  std::map<std::string, std::string> bytes;
  std::map<std::string, int64_t> ints;
  uint64_t offset = 0, length = 0;
};

Sample Parse(const std::string& record, const RecordReader& reader) {
  v1::Example e;
  REQUIRE(e.ParseFromString(record));
  Sample s;
  for (const auto& [key, f] : e.features().feature()) {
    if (f.has_bytes_list()) {
      REQUIRE(f.bytes_list().value_size() == 1);
      s.bytes[key] = f.bytes_list().value(0);
    } else {
      REQUIRE(f.int64_list().value_size() == 1);
      s.ints[key] = f.int64_list().value(0);
    }
  }
  s.offset = reader.record_offset();
  s.length = reader.record_length();
  return s;
}

std::unique_ptr<TarSampleReader> MemoryReader(const std::string& tar, RecordReaderOptions o = {},
                                              size_t buffer_bytes = 4096) {
  o.stream.buffer_bytes = buffer_bytes;
  return std::make_unique<TarSampleReader>(NewMemoryFile("shard.tar", tar), o);
}

// Every sample up to the end; REQUIREs each read to succeed.
std::vector<Sample> ReadAll(RecordReader* reader) {
  std::vector<Sample> out;
  std::string record;
  for (;;) {
    bool eof = false;
    Status s = reader->ReadRecordInto(&record, &eof);
    INFO(s.ToString());
    REQUIRE(s.ok());
    if (eof) return out;
    out.push_back(Parse(record, *reader));
  }
}

const std::string kJpeg = std::string("\xff\xd8\xff\xe0", 4) + std::string(700, 'j');

TEST_CASE("UstarMembersAreGroupedIntoSamplesByKeyInTarOrder") {
  const std::string tar = Member("a.jpg", kJpeg) + Member("a.cls", " 3\n") +
                          Member("a.json", "{\"x\": 1}") + Member("a.txt", "hello") +
                          Member("b.cls", "-7") + Member("b.jpg", "B") + EndBlocks();
  auto reader = MemoryReader(tar);
  const std::vector<Sample> got = ReadAll(reader.get());
  REQUIRE(got.size() == 2);
  CHECK(got[0].bytes.at("image/encoded") == kJpeg);
  CHECK(got[0].ints.at("image/class/label") == 3);
  CHECK(got[0].bytes.at("json") == "{\"x\": 1}");
  CHECK(got[0].bytes.at("txt") == "hello");
  CHECK(got[0].bytes.at("__key__") == "a");
  CHECK(got[0].bytes.size() == 4);  // the image, json, txt, __key__: cls only as the label
  CHECK(got[0].offset == 0);
  CHECK(got[0].length == kJpeg.size() + 3 + 8 + 5);
  CHECK(got[1].ints.at("image/class/label") == -7);
  CHECK(got[1].bytes.at("image/encoded") == "B");
  CHECK(got[1].offset == 9 * kTarBlockBytes);
  bool eof = false;
  std::string record;
  REQUIRE(reader->ReadRecordInto(&record, &eof).ok());
  CHECK(eof);  // and again after the end
}

TEST_CASE("ImageKeyTakesJpgThenJpegThenPngAndTheOthersRideAlongUnderTheirExtension") {
  RecordReaderOptions o;
  o.image_key = "img";
  o.label_key = "y";
  const std::string tar = Member("k.png", "P") + Member("k.JPEG", "E") + Member("k.Jpg", "J") +
                          Member("m.png", "P2") + Member("m.seg.png", "S") + EndBlocks();
  auto reader = MemoryReader(tar, o);
  const std::vector<Sample> got = ReadAll(reader.get());
  REQUIRE(got.size() == 2);
  CHECK(got[0].bytes.at("img") == "J");  // extensions compared lower-cased
  CHECK(got[0].bytes.at("jpeg") == "E");
  CHECK(got[0].bytes.at("png") == "P");
  CHECK(got[0].ints.empty());  // no cls: no label
  CHECK(got[1].bytes.at("img") == "P2");
  CHECK(got[1].bytes.at("seg.png") == "S");
}

// webp comes after jpg, jpeg and png: the image only of a sample that has none of them.
TEST_CASE("ImageKeyTakesWebpOnlyWithoutJpgJpegOrPng") {
  RecordReaderOptions o;
  o.image_key = "img";
  const std::string tar = Member("a.webp", "W") + Member("a.png", "P") + Member("b.WebP", "W2") +
                          Member("b.cls", "3") + Member("c.jpg", "J") + Member("c.webp", "W3") +
                          EndBlocks();
  auto reader = MemoryReader(tar, o);
  const std::vector<Sample> got = ReadAll(reader.get());
  REQUIRE(got.size() == 3);
  CHECK(got[0].bytes.at("img") == "P");
  CHECK(got[0].bytes.at("webp") == "W");
  CHECK(got[1].bytes.at("img") == "W2");  // extensions compared lower-cased
  CHECK(got[1].bytes.count("webp") == 0);
  CHECK(got[2].bytes.at("img") == "J");
  CHECK(got[2].bytes.at("webp") == "W3");
}

// An unlabeled dataset (PipelineOptions.unlabeled) scans with no label key: a sample without a
// cls is a whole sample, read as label 0; with a label key the same sample is refused.
TEST_CASE("SampleWithoutClsIsAnUnlabeledSample") {
  auto reader = MemoryReader(Member("a.jpg", kJpeg) + Member("a.txt", "caption") + EndBlocks());
  std::string record;
  bool eof = false;
  REQUIRE(reader->ReadRecordInto(&record, &eof).ok());
  REQUIRE_FALSE(eof);
  std::string_view image;
  int64_t label = -1;
  REQUIRE(ExampleScanner("image/encoded", "").Scan(record, &image, &label).ok());
  CHECK(image == kJpeg);
  CHECK(label == 0);
  Status labeled =
      ExampleScanner("image/encoded", "image/class/label").Scan(record, &image, &label);
  CHECK(labeled.code() == StatusCode::kInvalidArgument);
  CHECK(labeled.message().rfind("feature 'image/class/label' missing from record", 0) == 0);
}

// Unlabeled records (no label key): a cls is not a label, so "dog" (or a long cls) is not refused
// but rides along as bytes under "cls", as any other member; with a label key it is refused.
TEST_CASE("WithoutALabelKeyClsIsAnOrdinaryMemberNotALabel") {
  const std::string long_cls(5000, '7');
  const std::string tar = Member("a.jpg", kJpeg) + Member("a.cls", "dog") + Member("b.jpg", "B") +
                          Member("b.cls", long_cls) + Member("c.jpg", "C") + Member("c.cls", "3") +
                          EndBlocks();
  RecordReaderOptions unlabeled;
  unlabeled.label_key.clear();
  auto reader = MemoryReader(tar, unlabeled);
  const std::vector<Sample> got = ReadAll(reader.get());
  REQUIRE(got.size() == 3);
  CHECK(got[0].bytes.at("image/encoded") == kJpeg);
  CHECK(got[0].bytes.at("cls") == "dog");
  CHECK(got[0].ints.empty());
  CHECK(got[1].bytes.at("cls") == long_cls);
  CHECK(got[2].bytes.at("cls") == "3");
  CHECK(got[2].ints.empty());
  std::string_view image;
  int64_t label = -1;
  std::string record;
  bool eof = false;
  auto again = MemoryReader(tar, unlabeled);
  REQUIRE(again->ReadRecordInto(&record, &eof).ok());
  REQUIRE(ExampleScanner("image/encoded", "").Scan(record, &image, &label).ok());
  CHECK(label == 0);

  auto labeled = MemoryReader(tar);
  Status s = labeled->ReadRecordInto(&record, &eof);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("tar member 'a.cls' is not an integer label: 'dog'"));
}

TEST_CASE("SameKeyAfterAnotherKeyStartsANewSample") {
  const std::string tar =
      Member("a.jpg", "1") + Member("b.jpg", "2") + Member("a.cls", "1") + EndBlocks();
  auto reader = MemoryReader(tar);
  const std::vector<Sample> got = ReadAll(reader.get());
  REQUIRE(got.size() == 3);
  CHECK(got[2].bytes.at("__key__") == "a");
  CHECK(got[2].ints.at("image/class/label") == 1);
}

TEST_CASE("SplitSampleNameMatchesWebDatasetsBasePlusExt") {
  // (name, key, extension) as webdataset 1.0.2's base_plus_ext returns them; "-" for None.
  const std::vector<std::array<std::string, 3>> cases = {
      {"a.jpg", "a", "jpg"},
      {"a.b.c", "a", "b.c"},
      {"dir/a.jpg", "dir/a", "jpg"},
      {"dir.v1/key.seg.png", "dir.v1/key", "seg.png"},
      {"a/b/.c.jpg", "a/b/", "c.jpg"},
      {".hidden.jpg", "-", "-"},
      {"dir/.hidden", "dir/", "hidden"},
      {"a.d/b", "-", "-"},
      {"README", "-", "-"},
      {"a/b", "-", "-"},
      {"ab/c/.x", "ab/c/", "x"},
      {"x.", "x", ""},
      {"x/y.", "x/y", ""},
      {".a", "-", "-"},
      {"a..b", "a", ".b"},
      {"d/x.y/z.w", "d/x.y/z", "w"},
      {"__key__.jpg", "__key__", "jpg"},
      {"a/.b/c.d", "a/.b/c", "d"},
      {"/a.b", "/a", "b"},
      {"a/.b.c/d", "-", "-"},
  };
  for (const auto& [name, key, ext] : cases) {
    INFO(name);
    const auto split = SplitSampleName(name);
    if (key == "-") {
      CHECK(!split);
    } else {
      REQUIRE(split);
      CHECK(split->first == key);
      CHECK(split->second == ext);
    }
  }
  // tar_file_iterator's metadata tests, against Python's answers.
  const std::vector<std::pair<std::string, bool>> meta = {
      {"__key__", true},     {"__", true},         {"___", true},
      {"__a__/x.jpg", true}, {"__a__.jpg", false}, {"x/__a__", false},
      {"__/x.jpg", false},   {"____/x.jpg", true}, {"__a_/x.jpg", false}};
  for (const auto& [name, skipped] : meta) {
    INFO(name);
    CHECK(IsSampleMetadataName(name) == skipped);
  }
}

TEST_CASE("NoDotHiddenAndMetadataMembersAreSkippedWithoutEndingTheSample") {
  const std::string tar = Member("a.jpg", "1") + Member("README", "r") +
                          Member(".hidden.txt", "h") + Member("__meta__", "m") +
                          Member("__info__/x.txt", "i") + Member("a.cls", "2") + EndBlocks();
  auto reader = MemoryReader(tar);
  const std::vector<Sample> got = ReadAll(reader.get());
  REQUIRE(got.size() == 1);
  CHECK(got[0].bytes.size() == 2);  // image, __key__
  CHECK(got[0].ints.at("image/class/label") == 2);
}

TEST_CASE("DirectoriesLinksAndUnknownTypesAreSkipped") {
  Header dir;
  dir.name = "d/";
  dir.type = '5';
  Header old_dir;  // a V7 directory: a regular-file type whose name ends in a slash
  old_dir.name = "e.x/";
  old_dir.type = '\0';
  Header link;
  link.name = "a.lnk";
  link.type = '2';
  link.size = 999;  // links have no data whatever their size says
  const std::string tar = HeaderBlock(dir) + Member("d/a.jpg", "1") + HeaderBlock(old_dir) +
                          HeaderBlock(link) + Member("d/a.cls", "5") +
                          Member("v.jpg", std::string(600, 'v'), 'V') +  // unknown: data skipped
                          Member("d/b.jpg", "2") + EndBlocks();
  auto reader = MemoryReader(tar);
  const std::vector<Sample> got = ReadAll(reader.get());
  REQUIRE(got.size() == 2);
  CHECK(got[0].bytes.at("__key__") == "d/a");
  CHECK(got[0].ints.at("image/class/label") == 5);
  CHECK(got[1].bytes.at("image/encoded") == "2");
}

TEST_CASE("PaxPathAndSizeOverrideTheHeaderAndGlobalHeadersAreIgnored") {
  const std::string long_dir(150, 'd');
  const std::string data(1300, 'x');
  const std::string pax = PaxRecord("path", long_dir + "/k.jpg") +
                          PaxRecord("size", std::to_string(data.size())) +
                          PaxRecord("mtime", "1.5");
  Header x;
  x.name = "PaxHeaders/k.jpg";
  x.type = 'x';
  x.size = pax.size();
  Header file;
  file.name = "truncated-name.jpg";
  file.size = 0;  // the pax size is the real one
  Header g;
  g.name = "pax_global_header";
  g.type = 'g';
  const std::string global = PaxRecord("comment", "0123abcd");
  g.size = global.size();
  Header cls;  // the same key through the ustar prefix
  cls.prefix = long_dir;
  cls.name = "k.cls";
  cls.size = 1;
  const std::string tar = HeaderBlock(g) + Padded(global) + HeaderBlock(x) + Padded(pax) +
                          HeaderBlock(file) + Padded(data) + HeaderBlock(cls) + Padded("1") +
                          EndBlocks();
  auto reader = MemoryReader(tar);
  const std::vector<Sample> got = ReadAll(reader.get());
  REQUIRE(got.size() == 1);
  CHECK(got[0].bytes.at("__key__") == long_dir + "/k");
  CHECK(got[0].bytes.at("image/encoded") == data);
  CHECK(got[0].ints.at("image/class/label") == 1);
  CHECK(got[0].offset == 2 * kTarBlockBytes);  // the pax header's, after the global one
}

TEST_CASE("APaxKeywordRepeatedInOneHeaderKeepsItsLastValueAndTheFirstHeaderWinsAsTarfile") {
  const std::string data(1300, 'x');
  // One header: tarfile reads its records into a dict, so the last of a keyword counts.
  const std::string pax = PaxRecord("path", "first/k.jpg") + PaxRecord("size", "5") +
                          PaxRecord("path", "second/k.jpg") + PaxRecord("size", "1300");
  Header x;
  x.name = "PaxHeaders/k";
  x.type = 'x';
  x.size = pax.size();
  Header file;
  file.name = "truncated.jpg";
  // Two headers before one member: tarfile applies the outer one last, so its path wins; the
  // inner one's size still counts.
  const std::string outer = PaxRecord("path", "one/m.jpg");
  const std::string inner = PaxRecord("path", "two/m.jpg") + PaxRecord("size", "3");
  Header x1 = x, x2 = x;
  x1.size = outer.size();
  x2.size = inner.size();
  const std::string tar = HeaderBlock(x) + Padded(pax) + HeaderBlock(file) + Padded(data) +
                          HeaderBlock(x1) + Padded(outer) + HeaderBlock(x2) + Padded(inner) +
                          HeaderBlock(file) + Padded("abc") + EndBlocks();
  auto reader = MemoryReader(tar);
  const std::vector<Sample> got = ReadAll(reader.get());
  REQUIRE(got.size() == 2);
  CHECK(got[0].bytes.at("__key__") == "second/k");
  CHECK(got[0].bytes.at("image/encoded") == data);
  CHECK(got[1].bytes.at("__key__") == "one/m");
  CHECK(got[1].bytes.at("image/encoded") == "abc");
}

TEST_CASE("UstarPrefixAndGnuLongNamesNameTheMember") {
  const std::string long_name = std::string(120, 'n') + "/" + std::string(90, 'k') + ".jpg";
  Header l;
  l.name = "././@LongLink";
  l.type = 'L';
  l.size = long_name.size() + 1;
  Header file;
  file.name = long_name.substr(0, 100);
  file.size = 1;
  Header prefixed;
  prefixed.prefix = std::string(120, 'n');
  prefixed.name = std::string(90, 'k') + ".cls";
  prefixed.size = 1;
  const std::string tar = HeaderBlock(l) + Padded(long_name + '\0') + HeaderBlock(file) +
                          Padded("J") + HeaderBlock(prefixed) + Padded("4") + EndBlocks();
  auto reader = MemoryReader(tar);
  const std::vector<Sample> got = ReadAll(reader.get());
  REQUIRE(got.size() == 1);  // both names have the same key: one sample
  CHECK(got[0].bytes.at("__key__") == long_name.substr(0, long_name.size() - 4));
  CHECK(got[0].bytes.at("image/encoded") == "J");
  CHECK(got[0].ints.at("image/class/label") == 4);
}

TEST_CASE("Base256SizeAndSignedChecksumAreRead") {
  Header big;
  big.name = "a.bin";
  big.size = 2000;
  big.base256 = true;
  Header sun;
  sun.name = "a.txt";
  sun.name_bytes = "a.txt";
  sun.name_bytes += std::string(40, '\0');
  sun.name_bytes += "\xe9\xe9";  // high-bit bytes after the NUL: the signed sum differs
  sun.size = 2;
  sun.signed_checksum = true;
  const std::string tar = HeaderBlock(big) + Padded(std::string(2000, 'b')) + HeaderBlock(sun) +
                          Padded("tt") + EndBlocks();
  auto reader = MemoryReader(tar);
  const std::vector<Sample> got = ReadAll(reader.get());
  REQUIRE(got.size() == 1);
  CHECK(got[0].bytes.at("bin") == std::string(2000, 'b'));
  CHECK(got[0].bytes.at("txt") == "tt");
}

TEST_CASE("GzippedTarReadsTheSameSamplesWithUncompressedOffsets") {
  TempDir dir;
  const std::string tar = Member("a.jpg", kJpeg) + Member("a.cls", "1") + Member("b.jpg", "2") +
                          Member("b.cls", "x") + EndBlocks();
  WriteAll(dir.file("s.tar.gz"), Gzip(tar));
  auto reader = OpenRecordReader(dir.file("s.tar.gz"), SourceKind::kTar, {});
  REQUIRE(reader.ok());
  std::string record;
  bool eof = false;
  REQUIRE((*reader)->ReadRecordInto(&record, &eof).ok());
  CHECK(Parse(record, **reader).bytes.at("image/encoded") == kJpeg);
  Status s = (*reader)->ReadRecordInto(&record, &eof);
  CHECK(s.code() == StatusCode::kInvalidArgument);  // b's cls is not an integer
  const std::string where = dir.file("s.tar.gz") + ":" + std::to_string(7 * kTarBlockBytes) +
                            " (uncompressed): tar member 'b.cls' is not an integer label";
  CHECK(s.message().find(where) == 0);
  CHECK((*reader)->record_offset() == 5 * kTarBlockBytes);
  CHECK((*reader)->can_continue());
  REQUIRE((*reader)->ReadRecordInto(&record, &eof).ok());
  CHECK(eof);
}

TEST_CASE("BadHeaderChecksumIsFinalDataLossNamingItsOffset") {
  std::string tar =
      Member("a.jpg", "1") + Member("b.jpg", "2") + Member("c.jpg", "3") + EndBlocks();
  tar[4 * kTarBlockBytes + 3] ^= 0x20;  // c.jpg's header
  auto reader = MemoryReader(tar);
  std::string record;
  bool eof = false;
  REQUIRE(reader->ReadRecordInto(&record, &eof).ok());
  // b's last member is followed by damage: b may have had more members, so it is b's error.
  Status s = reader->ReadRecordInto(&record, &eof);
  CHECK(s.code() == StatusCode::kDataLoss);
  CHECK(s.message().find("shard.tar:2048: bad tar header checksum") == 0);
  CHECK(reader->record_offset() == 2 * kTarBlockBytes);
  CHECK(!reader->can_continue());
  CHECK(reader->SkipRecord(&eof).message() == s.message());
}

TEST_CASE("TruncatedShardIsDataLossOrACleanEndAtEveryCutPoint") {
  const std::string body = Member("a.jpg", std::string(700, 'a')) + Member("a.cls", "1") +
                           Member("b.jpg", std::string(1100, 'b')) + Member("c.jpg", "c");
  const std::string tar = body + EndBlocks();
  for (size_t cut = 0; cut < tar.size(); ++cut) {
    INFO("cut at " << cut);
    for (bool skip : {false, true}) {
      auto reader = MemoryReader(tar.substr(0, cut), {}, 512);
      std::vector<std::string> keys;
      Status last;
      for (;;) {
        std::string record;
        bool eof = false;
        last = skip ? reader->SkipRecord(&eof) : reader->ReadRecordInto(&record, &eof);
        if (!last.ok() || eof) break;
        keys.push_back(skip ? "?" : Parse(record, *reader).bytes.at("__key__"));
      }
      // Only a cut at a block boundary after a complete member reads as the end (tarfile's rule).
      // (A cut in the end marker leaves zeros: the end marker cut short, also the end.)
      const bool clean = cut == 0 || cut >= body.size() || cut == 3 * kTarBlockBytes ||
                         cut == 5 * kTarBlockBytes || cut == 9 * kTarBlockBytes;
      if (clean) {
        CHECK(last.ok());
        continue;
      }
      CHECK(last.code() == StatusCode::kDataLoss);
      CHECK(last.message().find("shard.tar:") == 0);
      CHECK(!reader->can_continue());
      // The samples before the damage, whole; the one it cuts is not handed on, nor the one
      // before a cut header (it may have had more members).
      const std::vector<std::string> all = {"a", "b", "c"};
      const size_t whole = cut < 6 * kTarBlockBytes ? 0 : cut < 10 * kTarBlockBytes ? 1 : 2;
      CHECK(keys.size() == whole);
      if (!skip) CHECK(std::equal(keys.begin(), keys.end(), all.begin()));
    }
  }
}

TEST_CASE("CutMidMemberAndMidHeaderNameWhatWasCut") {
  const std::string tar = Member("a.jpg", std::string(700, 'a')) + Member("b.jpg", "b");
  {
    auto reader = MemoryReader(tar.substr(0, 600));
    std::string record;
    bool eof = false;
    Status s = reader->ReadRecordInto(&record, &eof);
    CHECK(s.code() == StatusCode::kDataLoss);
    CHECK(s.message() ==
          "shard.tar:0: tar member 'a.jpg' cut short: it declares 700 bytes, the file ends after "
          "88");
  }
  {
    auto reader = MemoryReader(tar.substr(0, 3 * kTarBlockBytes + 100));
    std::string record;
    bool eof = false;
    Status s = reader->ReadRecordInto(&record, &eof);
    CHECK(s.message() ==
          "shard.tar:1536: tar header cut short: the file ends after 100 of its 512 bytes");
    CHECK(reader->record_offset() == 0);
  }
}

TEST_CASE("DamagedExtendedHeadersAreFinalDataLossNamingTheirOffset") {
  auto pax = [](const std::string& records) {
    Header x;
    x.name = "PaxHeaders/a.jpg";
    x.type = 'x';
    x.size = records.size();
    return HeaderBlock(x) + Padded(records);
  };
  const std::string first = Member("a.jpg", "1");  // one good sample before the damage
  struct Case {
    std::string name, tar, message;
  };
  const std::vector<Case> cases = {
      {"record length past the header", first + pax("99 path=b.jpg\n") + Member("b.jpg", "2"),
       "shard.tar:1024: pax header record at byte 0 does not parse"},
      {"record without '='", first + pax("9 pathxx\n") + Member("b.jpg", "2"),
       "shard.tar:1024: pax header record at byte 0 does not parse"},
      {"length digits past the record",
       first + pax("0000000000000000005 x=\n") + Member("b.jpg", "2"),
       "shard.tar:1024: pax header record at byte 0 does not parse"},
      {"size not a number", first + pax(PaxRecord("size", "12a")) + Member("b.jpg", "2"),
       "shard.tar:1024: pax header's size '12a' is not a number"},
      {"file ends after it", first + pax(PaxRecord("path", "b.jpg")),
       "shard.tar:2048: the file ends after an extended tar header, before the member header it "
       "extends"},
      {"end marker after it", first + pax(PaxRecord("path", "b.jpg")) + EndBlocks(),
       "shard.tar:2048: the end of the archive follows an extended tar header, before the member "
       "header it extends"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    auto reader = MemoryReader(c.tar);
    std::string record;
    bool eof = false;
    Status s = reader->ReadRecordInto(&record, &eof);
    CHECK(s.code() == StatusCode::kDataLoss);  // a's end is not known: a's error
    CHECK(s.message() == c.message);
    CHECK(reader->record_offset() == 0);
    CHECK(!reader->can_continue());
  }
}

TEST_CASE("IOErrorIsFinalAtEveryOffset") {
  const std::string tar =
      Member("a.jpg", std::string(700, 'a')) + Member("b.jpg", "b") + EndBlocks();
  // Up to the first zero block: the reader stops there, as tarfile does.
  for (size_t at = 0; at < 6 * kTarBlockBytes; at += 100) {
    INFO("fails at " << at);
    RecordReaderOptions o;
    o.stream.buffer_bytes = 1024;
    TarSampleReader reader(NewMemoryFile("shard.tar", tar, static_cast<int64_t>(at)), o);
    Status last;
    for (int i = 0; i < 4 && last.ok(); ++i) {
      std::string record;
      bool eof = false;
      last = reader.ReadRecordInto(&record, &eof);
      if (eof) break;
    }
    CHECK(last.code() == StatusCode::kUnavailable);
    CHECK(last.message().find("injected I/O error") != std::string::npos);
    CHECK(!reader.can_continue());
  }
}

TEST_CASE("MissingEndBlocksAfterACompleteMemberIsACleanEndWithAWarningNamingWhere") {
  const std::string tar = Member("a.jpg", "1") + Member("b.jpg", "2");
  auto reader = MemoryReader(tar);
  CHECK(ReadAll(reader.get()).size() == 2);
  CHECK(reader->warning() ==
        "no end-of-archive marker: the shard may be cut short at shard.tar:2048");
  TarSampleReader gzipped(NewInflatingFile(NewMemoryFile("shard.tar.gz", Gzip(tar))), {}, true);
  CHECK(ReadAll(&gzipped).size() == 2);
  CHECK(gzipped.warning() ==
        "no end-of-archive marker: the shard may be cut short at shard.tar.gz:2048 "
        "(uncompressed)");
  // With the marker, whole or cut within its zeros (as tarfile accepts it): no warning.
  for (const std::string& end :
       {EndBlocks(), std::string(kTarBlockBytes, '\0'), std::string(100, '\0')}) {
    auto marked = MemoryReader(tar + end);
    CHECK(ReadAll(marked.get()).size() == 2);
    CHECK(marked->warning().empty());
  }
}

TEST_CASE("EmptyFileAndEmptyTarHaveNoSamples") {
  for (const std::string& tar : {std::string(), EndBlocks(), std::string(10240, '\0')}) {
    auto reader = MemoryReader(tar);
    CHECK(ReadAll(reader.get()).empty());
    CHECK(reader->warning().empty());
  }
  // Bytes after the end marker are not read (tarfile stops there too).
  auto reader = MemoryReader(Member("a.jpg", "1") + EndBlocks() + "garbage");
  CHECK(ReadAll(reader.get()).size() == 1);
}

TEST_CASE("SampleOverTheLimitIsRefusedWithoutHoldingItAndTheNextSampleRead") {
  RecordReaderOptions o;
  o.stream.max_held_record_bytes = 1000;
  const std::string tar = Member("a.jpg", std::string(600, 'a')) +
                          Member("a.png", std::string(600, 'p')) + Member("b.jpg", "b") +
                          EndBlocks();
  for (bool skip : {false, true}) {
    auto reader = MemoryReader(tar, o, 512);
    std::string record;
    bool eof = false;
    Status s = skip ? reader->SkipRecord(&eof) : reader->ReadRecordInto(&record, &eof);
    CHECK(s.code() == StatusCode::kResourceExhausted);
    // Its key, names and a fixed cost per member counted with the data: 1 + 2 * 5 + 3 * 128 +
    // 1200 bytes.
    CHECK(s.message().find("sample 'a' at shard.tar:0 holds 1595 bytes (its data, names and "
                           "Example framing), over the limit of 1000") == 0);
    CHECK(reader->record_length() == 1200);
    CHECK(reader->can_continue());
    REQUIRE(reader->ReadRecordInto(&record, &eof).ok());
    CHECK(Parse(record, *reader).bytes.at("__key__") == "b");
  }
}

TEST_CASE("MemberNamesCountAgainstTheLimitSoEmptyMembersWithLongNamesAreRefused") {
  // 100 empty members of 20 KB names: no data, 2 MB of names.
  std::string tar;
  for (int i = 0; i < 100; ++i) {
    tar += LongNameMember("a.e" + std::to_string(i) + std::string(20000, 'x'), "");
  }
  tar += Member("b.jpg", "b") + EndBlocks();
  RecordReaderOptions o;
  o.stream.max_held_record_bytes = 1 << 20;
  for (bool skip : {false, true}) {
    auto reader = MemoryReader(tar, o);
    std::string record;
    bool eof = false;
    Status s = skip ? reader->SkipRecord(&eof) : reader->ReadRecordInto(&record, &eof);
    INFO(s.ToString());
    CHECK(s.code() == StatusCode::kResourceExhausted);
    CHECK(s.message().find("over the limit of 1048576 bytes") != std::string::npos);
    CHECK(reader->record_length() == 0);
    CHECK(record.capacity() < 4096);  // what it held was given back
    REQUIRE(reader->ReadRecordInto(&record, &eof).ok());
    CHECK(Parse(record, *reader).bytes.at("__key__") == "b");
  }
}

// The reading path keeps no member list: a sample refused for its names holds nothing of them
// (a list of them grew past the limit before). Index builders and checkers ask for the list, and
// it is charged to what the sample holds: kept whole within the limit, else dropped.
TEST_CASE("ARefusedSampleKeepsNoMembersAndAKeptListStaysWithinTheLimit") {
  // 100 empty members of 20 KB names: no data, 2 MB of names.
  std::string tar;
  for (int i = 0; i < 100; ++i) {
    tar += LongNameMember("a.e" + std::to_string(i) + std::string(20000, 'x'), "");
  }
  const uint64_t b_header = tar.size();
  tar += Member("b.jpg", "b") + EndBlocks();
  struct Case {
    bool keep;
    uint64_t max_held;
    bool refused;
    size_t kept;
  };
  for (const Case c : {Case{false, 1 << 20, true, 0}, Case{true, 1 << 20, true, 0},
                       Case{true, 4 << 20, false, 100}}) {
    INFO(c.keep << " " << c.max_held);
    RecordReaderOptions o;
    o.stream.max_held_record_bytes = c.max_held;
    o.keep_tar_members = c.keep;
    auto reader = MemoryReader(tar, o);
    bool eof = false;
    Status s = reader->SkipRecord(&eof);
    CHECK(s.code() == (c.refused ? StatusCode::kResourceExhausted : StatusCode::kOk));
    CHECK(reader->members_kept() == (c.kept > 0));
    CHECK(reader->members().size() == c.kept);
    if (c.kept == 0) CHECK(reader->members().capacity() == 0);
    if (c.kept > 0) {
      CHECK(reader->members()[99].name == "a.e99" + std::string(20000, 'x'));
      CHECK(reader->members()[99].padded_end() == b_header);
    }
    CHECK(reader->record_end() == b_header);
    REQUIRE(reader->SkipRecord(&eof).ok());
    CHECK(reader->record_offset() == b_header);
    CHECK(reader->members().size() == (c.keep ? 1u : 0u));
  }
  // Refused for its data, not its names: the list is kept.
  RecordReaderOptions o;
  o.stream.max_held_record_bytes = 1000;
  o.keep_tar_members = true;
  auto reader = MemoryReader(
      Member("a.jpg", std::string(600, 'a')) + Member("a.png", std::string(600, 'p')) + EndBlocks(),
      o);
  bool eof = false;
  CHECK(reader->SkipRecord(&eof).code() == StatusCode::kResourceExhausted);
  CHECK(reader->members_kept());
  CHECK(reader->members().size() == 2);
}

TEST_CASE("TheExampleItselfIsCheckedAgainstTheLimit") {
  // The sample holds little, but its image goes under a key of 3000 bytes.
  RecordReaderOptions o;
  o.image_key = std::string(3000, 'k');
  o.stream.max_held_record_bytes = 2000;
  auto reader = MemoryReader(Member("a.jpg", "1") + EndBlocks(), o);
  std::string record;
  bool eof = false;
  Status s = reader->ReadRecordInto(&record, &eof);
  CHECK(s.code() == StatusCode::kResourceExhausted);
  CHECK(s.message().find("sample 'a' at shard.tar:0 holds 30") == 0);
  CHECK(record.empty());
  REQUIRE(reader->ReadRecordInto(&record, &eof).ok());
  CHECK(eof);
}

TEST_CASE("ThousandsOfMembersOfOneSampleAreEachCheckedForARepeatedExtension") {
  std::string tar;
  constexpr int kMembers = 20000;
  for (int i = 0; i < kMembers; ++i) tar += Member("a.e" + std::to_string(i), "");
  auto reader = MemoryReader(tar + Member("b.jpg", "b") + EndBlocks());
  std::string record;
  bool eof = false;
  REQUIRE(reader->ReadRecordInto(&record, &eof).ok());
  CHECK(Parse(record, *reader).bytes.size() == kMembers + 1);  // and __key__
  auto repeated = MemoryReader(tar + Member("a.E7", "") + EndBlocks());
  Status s = repeated->ReadRecordInto(&record, &eof);
  CHECK(s.message() == "shard.tar:" + std::to_string(kMembers * kTarBlockBytes) +
                           ": tar member 'a.E7' repeats the extension 'e7' in sample 'a'");
}

TEST_CASE("ImageOrLabelKeyMayBeAnExtensionUnlessAnotherMemberWouldBeOverwritten") {
  SECTION("image_key jpg: the jpg is the image") {
    RecordReaderOptions o;
    o.image_key = "jpg";
    auto reader = MemoryReader(Member("s0.jpg", kJpeg) + Member("s0.cls", "1") +
                                   Member("s1.jpg", "J") + Member("s1.png", "P") + EndBlocks(),
                               o);
    const std::vector<Sample> got = ReadAll(reader.get());
    REQUIRE(got.size() == 2);
    CHECK(got[0].bytes.at("jpg") == kJpeg);
    CHECK(got[0].ints.at("image/class/label") == 1);
    CHECK(got[1].bytes.at("jpg") == "J");
    CHECK(got[1].bytes.at("png") == "P");
  }
  SECTION("image_key png: a png beside a jpg would be overwritten by the image") {
    RecordReaderOptions o;
    o.image_key = "png";
    auto reader = MemoryReader(
        Member("k.jpg", "J") + Member("k.png", "P") + Member("m.png", "M") + EndBlocks(), o);
    std::string record;
    bool eof = false;
    Status s = reader->ReadRecordInto(&record, &eof);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message() ==
          "shard.tar:1024: tar member 'k.png' has the image key 'png' as its extension, where "
          "the sample's 'jpg' is written");
    REQUIRE(reader->ReadRecordInto(&record, &eof).ok());
    CHECK(Parse(record, *reader).bytes.at("png") == "M");
  }
  SECTION("label_key json: only with a cls is the json overwritten") {
    RecordReaderOptions o;
    o.label_key = "json";
    auto reader = MemoryReader(
        Member("a.json", "{}") + Member("a.cls", "2") + Member("b.json", "{}") + EndBlocks(), o);
    std::string record;
    bool eof = false;
    Status s = reader->SkipRecord(&eof);
    CHECK(s.message() ==
          "shard.tar:0: tar member 'a.json' has the label key 'json' as its extension, where "
          "the sample's cls is written");
    REQUIRE(reader->ReadRecordInto(&record, &eof).ok());
    CHECK(Parse(record, *reader).bytes.at("json") == "{}");
  }
}

// A field of /proc/self/status in kB ("VmHWM", "VmRSS").
uint64_t StatusKb(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1));
  }
  FAIL("no " << field << " in /proc/self/status");
  return 0;
}

TEST_CASE("ALargeMemberIsReadStraightIntoTheRecordSoTheSampleIsHeldOnce") {
  TempDir dir;
  constexpr size_t kMiB = 1 << 20, kPayload = 48 * kMiB;
  {
    // Written a MiB at a time: this process never holds the payload before reading it.
    std::ofstream out(dir.file("big.tar"), std::ios::binary);
    Header h;
    h.name = "big.jpg";
    h.size = kPayload;
    out << HeaderBlock(h);
    const std::string chunk(kMiB, 'p');
    for (size_t i = 0; i < kPayload / kMiB; ++i) out << chunk;
    out << Member("big.cls", "3") << EndBlocks();
  }
  for (bool plain : {true, false}) {
    RecordReaderOptions o;
    o.stream.buffer_bytes = kMiB;
    o.stream.max_held_record_bytes = 64 * kMiB;
    if (!plain) o.stream.wrap_stream = [](std::unique_ptr<SequentialFile> f) { return f; };
    auto reader = OpenRecordReader(dir.file("big.tar"), SourceKind::kTar, o);
    REQUIRE(reader.ok());
    std::string record;
    // Peak RSS from here on (writing 5 to clear_refs resets VmHWM to the current RSS).
    std::ofstream("/proc/self/clear_refs") << "5";
    const uint64_t before_kb = StatusKb("VmRSS");
    bool eof = false;
    REQUIRE((*reader)->ReadRecordInto(&record, &eof).ok());
    const uint64_t peak_kb = StatusKb("VmHWM");
    CHECK(record.size() > kPayload);
    CHECK(record.size() < kPayload + 4096);
    // The record and the read buffer, not a second copy of the payload.
    CHECK(peak_kb - before_kb < (kPayload + 8 * kMiB) / 1024);
    const Sample got = Parse(record, **reader);
    CHECK(got.bytes.at("image/encoded") == std::string(kPayload, 'p'));
    CHECK(got.ints.at("image/class/label") == 3);
  }
}

TEST_CASE("BadOrRepeatedMembersAreTheSamplesInvalidArgumentAndTheNextSampleRead") {
  const std::string tar = Member("a.jpg", "1") + Member("a.cls", "1.5") + Member("b.jpg", "2") +
                          Member("b.JPG", "3") + Member("c.jpg", "4") +
                          Member("c.cls", "99999999999999999999") + Member("d.jpg", "5") +
                          EndBlocks();
  auto reader = MemoryReader(tar);
  std::string record;
  bool eof = false;
  Status s = reader->ReadRecordInto(&record, &eof);
  CHECK(s.message() == "shard.tar:1024: tar member 'a.cls' is not an integer label: '1.5'");
  s = reader->ReadRecordInto(&record, &eof);
  CHECK(s.message() ==
        "shard.tar:3072: tar member 'b.JPG' repeats the extension 'jpg' in sample "
        "'b'");
  CHECK(reader->record_offset() == 2048);
  s = reader->SkipRecord(&eof);
  CHECK(s.code() == StatusCode::kInvalidArgument);  // an int64 overflow
  REQUIRE(reader->ReadRecordInto(&record, &eof).ok());
  CHECK(Parse(record, *reader).bytes.at("image/encoded") == "5");
}

using testing::ReadChars;

TEST_CASE("SkippingSamplesOfAPlainFileReadsTheirHeadersOnly") {
  TempDir dir;
  const std::string payload(8 << 20, 'p');
  std::string tar;
  for (int i = 0; i < 8; ++i) {
    const std::string key = "s" + std::to_string(i);
    tar += Member(key + ".jpg", payload) + Member(key + ".cls", std::to_string(i));
  }
  WriteAll(dir.file("s.tar"), tar + EndBlocks());
  RecordReaderOptions o;
  o.stream.max_held_record_bytes = 0;  // as record counting opens it
  auto reader = OpenRecordReader(dir.file("s.tar"), SourceKind::kTar, o);
  REQUIRE(reader.ok());
  const uint64_t before = ReadChars();
  int samples = 0;
  for (;;) {
    bool eof = false;
    Status s = (*reader)->SkipRecord(&eof);
    REQUIRE((s.ok() || s.code() == StatusCode::kResourceExhausted));  // refused: nothing held
    if (s.ok() && eof) break;
    ++samples;
  }
  CHECK(samples == 8);
  CHECK(ReadChars() - before < (1 << 20));  // of 64 MiB
}

}  // namespace
}  // namespace sluice
