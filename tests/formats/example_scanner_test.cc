#include "formats/example_scanner.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "sluice/v1/example.pb.h"

namespace sluice {
namespace {

// Hand-written protobuf encoding, so the tests can produce every legal variant (unpacked lists,
// split messages, repeated keys, unknown fields) that TensorFlow's or another writer's bytes may
// hold, and check the scanner against protobuf's own parse of the same bytes.
void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void PutTag(std::string* out, uint32_t field, uint32_t wire_type) {
  PutVarint(out, (uint64_t{field} << 3) | wire_type);
}
void PutLen(std::string* out, uint32_t field, std::string_view data) {
  PutTag(out, field, 2);
  PutVarint(out, data.size());
  out->append(data);
}
void PutFixed32(std::string* out, uint32_t v) { out->append(reinterpret_cast<char*>(&v), 4); }

struct FeatureValues {
  FeatureKind kind = FeatureKind::kNone;
  std::vector<std::string> bytes;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  bool operator==(const FeatureValues&) const = default;
};

struct Encoder {
  std::mt19937 rng;
  bool Coin(int percent = 50) { return std::uniform_int_distribution<int>(0, 99)(rng) < percent; }

  void MaybeUnknown(std::string* out) {
    if (!Coin(15)) return;
    switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
      case 0: PutTag(out, 9, 0); PutVarint(out, rng()); break;
      case 1: PutLen(out, 10, "unknown"); break;
      case 2: PutTag(out, 11, 5); PutFixed32(out, rng()); break;
      default: PutTag(out, 12, 1); PutFixed32(out, rng()); PutFixed32(out, rng()); break;
    }
  }

  // One list message (BytesList/FloatList/Int64List) holding values[begin, end).
  std::string List(const FeatureValues& f, size_t begin, size_t end) {
    std::string list;
    MaybeUnknown(&list);
    bool packed = Coin();
    if (f.kind == FeatureKind::kBytes) {
      for (size_t i = begin; i < end; ++i) PutLen(&list, 1, f.bytes[i]);
    } else if (f.kind == FeatureKind::kInt64) {
      if (packed && end > begin) {
        std::string p;
        for (size_t i = begin; i < end; ++i) PutVarint(&p, static_cast<uint64_t>(f.ints[i]));
        PutLen(&list, 1, p);
      } else {
        for (size_t i = begin; i < end; ++i) {
          PutTag(&list, 1, 0);
          PutVarint(&list, static_cast<uint64_t>(f.ints[i]));
        }
      }
    } else if (f.kind == FeatureKind::kFloat) {
      if (packed && end > begin) {
        std::string p;
        for (size_t i = begin; i < end; ++i) {
          uint32_t bits;
          std::memcpy(&bits, &f.floats[i], 4);
          PutFixed32(&p, bits);
        }
        PutLen(&list, 1, p);
      } else {
        for (size_t i = begin; i < end; ++i) {
          uint32_t bits;
          std::memcpy(&bits, &f.floats[i], 4);
          PutTag(&list, 1, 5);
          PutFixed32(&list, bits);
        }
      }
    }
    MaybeUnknown(&list);
    return list;
  }

  size_t Size(const FeatureValues& f) {
    return f.kind == FeatureKind::kBytes ? f.bytes.size()
           : f.kind == FeatureKind::kInt64 ? f.ints.size()
                                           : f.floats.size();
  }

  // A Feature's fields; may start with a decoy of another kind that the real one clears, and may
  // split the values over several list fields, which protobuf concatenates.
  std::vector<std::string> FeatureFields(const FeatureValues& f) {
    std::vector<std::string> fields;
    if (Coin(20)) {
      FeatureValues decoy;
      decoy.kind = f.kind == FeatureKind::kInt64 ? FeatureKind::kBytes : FeatureKind::kInt64;
      decoy.bytes = {"decoy"};
      decoy.ints = {-7};
      std::string d;
      PutLen(&d, static_cast<uint32_t>(decoy.kind), List(decoy, 0, 1));
      fields.push_back(d);
    }
    size_t n = Size(f), begin = 0;
    do {
      size_t end = Coin(30) ? std::uniform_int_distribution<size_t>(begin, n)(rng) : n;
      std::string field;
      PutLen(&field, static_cast<uint32_t>(f.kind), List(f, begin, end));
      fields.push_back(field);
      begin = end;
    } while (begin < n);
    return fields;
  }

  std::string Entry(const std::string& key, const FeatureValues& f) {
    std::string entry;
    if (Coin(10)) PutLen(&entry, 1, "overwritten-key");
    PutLen(&entry, 1, key);
    MaybeUnknown(&entry);
    std::vector<std::string> fields = FeatureFields(f);
    // The Feature's fields go into one value message, or are spread over several (merged).
    std::string value;
    for (const std::string& field : fields) {
      value += field;
      if (Coin(25)) {
        PutLen(&entry, 2, value);
        value.clear();
      }
    }
    if (!value.empty() || Coin(50)) PutLen(&entry, 2, value);
    return entry;
  }

  FeatureValues RandomFeature() {
    FeatureValues f;
    f.kind = static_cast<FeatureKind>(std::uniform_int_distribution<int>(1, 3)(rng));
    int n = std::uniform_int_distribution<int>(0, 5)(rng);
    for (int i = 0; i < n; ++i) {
      if (f.kind == FeatureKind::kBytes) {
        std::string s(std::uniform_int_distribution<int>(0, 300)(rng), '\0');
        for (char& c : s) c = static_cast<char>(rng());
        f.bytes.push_back(s);
      } else if (f.kind == FeatureKind::kInt64) {
        int64_t v = static_cast<int64_t>((uint64_t{rng()} << 32) | rng());
        if (Coin()) v %= 1000;
        f.ints.push_back(v);
      } else {
        f.floats.push_back(std::uniform_real_distribution<float>(-1e6f, 1e6f)(rng));
      }
    }
    return f;
  }

  // An Example, and the features protobuf should see in it.
  std::string Example(std::map<std::string, FeatureValues>* expected) {
    std::vector<std::string> entries;
    int n = std::uniform_int_distribution<int>(0, 6)(rng);
    for (int i = 0; i < n; ++i) {
      std::string key = "key/" + std::to_string(std::uniform_int_distribution<int>(0, 7)(rng));
      if (Coin(20) && !expected->count(key)) {
        // An earlier entry for the same key, replaced by the later one.
        entries.push_back(Entry(key, RandomFeature()));
      }
      FeatureValues f = RandomFeature();
      entries.push_back(Entry(key, f));
      // A repeated key replaces the earlier entry wherever it was.
      (*expected)[key] = f;
    }
    std::string record;
    MaybeUnknown(&record);
    std::string features;
    for (const std::string& e : entries) {
      PutLen(&features, 1, e);
      MaybeUnknown(&features);
      if (Coin(20)) {
        PutLen(&record, 1, features);  // split Features: protobuf merges them
        features.clear();
      }
    }
    if (!features.empty() || Coin(70)) PutLen(&record, 1, features);
    MaybeUnknown(&record);
    return record;
  }
};

FeatureValues FromProto(const v1::Feature& f) {
  FeatureValues out;
  switch (f.kind_case()) {
    case v1::Feature::kBytesList:
      out.kind = FeatureKind::kBytes;
      out.bytes.assign(f.bytes_list().value().begin(), f.bytes_list().value().end());
      break;
    case v1::Feature::kInt64List:
      out.kind = FeatureKind::kInt64;
      out.ints.assign(f.int64_list().value().begin(), f.int64_list().value().end());
      break;
    case v1::Feature::kFloatList:
      out.kind = FeatureKind::kFloat;
      out.floats.assign(f.float_list().value().begin(), f.float_list().value().end());
      break;
    default: break;
  }
  return out;
}

FeatureValues FromView(const FeatureView& view) {
  struct Collect : FeatureValueVisitor {
    FeatureValues v;
    bool OnBytes(std::string_view s) override { v.bytes.emplace_back(s); return true; }
    bool OnInt64(int64_t x) override { v.ints.push_back(x); return true; }
    bool OnFloat(float x) override { v.floats.push_back(x); return true; }
  } collect;
  collect.v.kind = view.kind();
  REQUIRE(view.Visit(collect).ok());
  return collect.v;
}

std::map<std::string, FeatureValues> Scan(const std::string& record) {
  std::map<std::string, FeatureValues> out;
  Status s = ForEachFeature(record, [&](std::string_view key, const FeatureView& view) {
    out[std::string(key)] = FromView(view);
  });
  REQUIRE(s.ok());
  return out;
}

TEST_CASE("ScannerAgreesWithProtobufOnGeneratedExamples") {
  Encoder enc{std::mt19937(12345)};
  for (int i = 0; i < 3000; ++i) {
    std::map<std::string, FeatureValues> expected;
    std::string record = enc.Example(&expected);
    v1::Example parsed;
    REQUIRE(parsed.ParseFromString(record));
    std::map<std::string, FeatureValues> from_proto;
    for (const auto& [key, feature] : parsed.features().feature()) from_proto[key] = FromProto(feature);
    INFO("example " << i);
    // The encoder's own expectation, protobuf's parse and the scanner all agree.
    REQUIRE(from_proto == expected);
    REQUIRE(Scan(record) == from_proto);
  }
}

TEST_CASE("ScannerReadsProtobufSerializedExamples") {
  v1::Example ex;
  auto& map = *ex.mutable_features()->mutable_feature();
  map["image/encoded"].mutable_bytes_list()->add_value(std::string("\xff\xd8\xff\x00jpeg", 8));
  map["image/class/label"].mutable_int64_list()->add_value(417);
  map["image/class/label"].mutable_int64_list()->add_value(3);
  map["image/scores"].mutable_float_list()->add_value(0.25f);
  std::string record = ex.SerializeAsString();

  ExampleScanner scanner("image/encoded", "image/class/label");
  std::string_view image;
  int64_t label = -1;
  REQUIRE(scanner.Scan(record, &image, &label).ok());
  CHECK(image == std::string_view("\xff\xd8\xff\x00jpeg", 8));
  CHECK(label == 417);
  // The view points into the record: nothing was copied.
  CHECK(image.data() >= record.data());
  CHECK(image.data() < record.data() + record.size());

  FeatureView scores;
  bool found = false;
  REQUIRE(FeatureScanner::Find(record, "image/scores", &scores, &found).ok());
  REQUIRE(found);
  CHECK(scores.kind() == FeatureKind::kFloat);
  CHECK(scores.Count().value() == 1);
}

TEST_CASE("MissingOrWronglyTypedFeatureNamesTheKey") {
  v1::Example ex;
  auto& map = *ex.mutable_features()->mutable_feature();
  map["image/encoded"].mutable_bytes_list()->add_value("x");
  map["label"].mutable_bytes_list()->add_value("cat");
  std::string record = ex.SerializeAsString();
  std::string_view image;
  int64_t label;

  Status missing = ExampleScanner("image/encoded", "image/class/label").Scan(record, &image, &label);
  CHECK(missing.code() == StatusCode::kInvalidArgument);
  // Protobuf writes map entries in no fixed order.
  CHECK((missing.message() ==
             "feature 'image/class/label' missing from record; its keys: image/encoded, label" ||
         missing.message() ==
             "feature 'image/class/label' missing from record; its keys: label, image/encoded"));

  Status wrong = ExampleScanner("image/encoded", "label").Scan(record, &image, &label);
  CHECK(wrong.code() == StatusCode::kInvalidArgument);
  CHECK(wrong.message() == "feature 'label' is bytes_list, expected int64_list");

  map["empty"].mutable_int64_list();
  record = ex.SerializeAsString();
  Status empty = ExampleScanner("image/encoded", "empty").Scan(record, &image, &label);
  CHECK(empty.message() == "feature 'empty' has no value");
}

// PipelineOptions.unlabeled: the Augmenter scans with no label key. A record without a label, or
// with one of any kind (even under the empty key ""), gives label 0; the image is still required.
TEST_CASE("EmptyLabelKeyScansUnlabeledRecordsAsLabelZero") {
  v1::Example ex;
  auto& map = *ex.mutable_features()->mutable_feature();
  map["image/encoded"].mutable_bytes_list()->add_value("pixels");
  map[""].mutable_bytes_list()->add_value("not a label");
  map["image/class/label"].mutable_float_list()->add_value(3);
  std::string_view image;
  int64_t label = -1;
  const ExampleScanner unlabeled("image/encoded", "");
  REQUIRE(unlabeled.Scan(ex.SerializeAsString(), &image, &label).ok());
  CHECK(image == "pixels");
  CHECK(label == 0);
  map.erase("image/encoded");
  Status missing = unlabeled.Scan(ex.SerializeAsString(), &image, &label);
  CHECK(missing.code() == StatusCode::kInvalidArgument);
  CHECK(missing.message().rfind("feature 'image/encoded' missing from record", 0) == 0);
}

TEST_CASE("MalformedRecordIsDataLossWithByteOffset") {
  v1::Example ex;
  (*ex.mutable_features()->mutable_feature())["k"].mutable_int64_list()->add_value(1);
  std::string good = ex.SerializeAsString();
  // Every strict prefix of a record is malformed (a length runs past the end) except the empty
  // one, which is a valid empty Example; the scanner must say so, never read past the end.
  for (size_t cut = 1; cut < good.size(); ++cut) {
    std::string bad = good.substr(0, cut);
    v1::Example parsed;
    bool proto_ok = parsed.ParseFromString(bad);
    Status s = ForEachFeature(bad, [](std::string_view, const FeatureView&) {});
    INFO("cut at " << cut);
    CHECK(s.ok() == proto_ok);
    if (!s.ok()) {
      CHECK(s.code() == StatusCode::kDataLoss);
      CHECK(s.message().find("malformed tf.train.Example") != std::string::npos);
      CHECK(s.message().find("at byte ") != std::string::npos);
    }
  }
  // A varint that never ends.
  std::string runaway(12, '\xff');
  CHECK(ForEachFeature(runaway, [](std::string_view, const FeatureView&) {}).code() ==
        StatusCode::kDataLoss);
}

// Unknown groups (the deprecated wire types 3 and 4) are skipped as protobuf skips them, nested
// ones too; an end that does not match its start is malformed for both (found by
// tests/fuzz/example_scanner_fuzz).
TEST_CASE("UnknownGroupsAreSkippedLikeProtobufDoes") {
  v1::Example ex;
  (*ex.mutable_features()->mutable_feature())["k"].mutable_int64_list()->add_value(7);
  const std::string good = ex.SerializeAsString();
  // Field 12 as a group holding field 13 as a group holding a varint; then an empty group.
  const std::string groups = std::string("\x63\x6b\x08\x01\x6c\x64", 6) + "\x63\x64";
  struct Case {
    std::string record;
    bool ok;
  };
  const Case cases[] = {
      {groups + good, true},
      {good + groups, true},
      {"\x63\x6c" + good, false},  // starts group 12, ends group 13
      {"\x63" + good, false},       // never ends
      {"\x64" + good, false},       // an end without a start
  };
  for (const Case& c : cases) {
    v1::Example parsed;
    REQUIRE(parsed.ParseFromString(c.record) == c.ok);
    FeatureView view;
    bool found = false;
    const Status s = FeatureScanner::Find(c.record, "k", &view, &found);
    CHECK(s.ok() == c.ok);
    if (c.ok) {
      REQUIRE(found);
      CHECK(view.FirstInt64("k").value() == 7);
    } else {
      CHECK(s.code() == StatusCode::kDataLoss);
    }
  }
}

// A tag is read as protobuf reads one: up to 5 bytes with the bits past the 32nd dropped (here
// the 5th byte's 0x40 falls off, leaving field 8 as a varint), and longer ones refused.
TEST_CASE("TagsOfFiveBytesDropHighBitsAndLongerOnesAreRefused") {
  v1::Example ex;
  (*ex.mutable_features()->mutable_feature())["k"].mutable_int64_list()->add_value(7);
  const std::string good = ex.SerializeAsString();
  const std::string five = std::string("\xc0\x80\x80\x80\x40\x01", 6);
  const std::string six = std::string("\xc0\x80\x80\x80\x80\x00\x01", 7);
  for (const auto& [record, ok] : {std::pair{five + good, true}, std::pair{six + good, false}}) {
    v1::Example parsed;
    REQUIRE(parsed.ParseFromString(record) == ok);
    FeatureView view;
    bool found = false;
    CHECK(FeatureScanner::Find(record, "k", &view, &found).ok() == ok);
    CHECK(found == ok);
  }
}

TEST_CASE("EmptyRecordIsAnExampleWithoutFeatures") {
  int count = 0;
  REQUIRE(ForEachFeature("", [&](std::string_view, const FeatureView&) { ++count; }).ok());
  CHECK(count == 0);
}

TEST_CASE("DescribeKeysIsBoundedAndPrintable") {
  v1::Example ex;
  auto& map = *ex.mutable_features()->mutable_feature();
  for (int i = 0; i < 20; ++i) map["k" + std::to_string(i)].mutable_int64_list()->add_value(i);
  const std::string many = DescribeKeys(ex.SerializeAsString());
  CHECK(std::count(many.begin(), many.end(), ',') == 16);  // 16 keys, then ", ..."
  CHECK(many.ends_with(", ..."));

  v1::Example odd;
  (*odd.mutable_features()->mutable_feature())[std::string("a\x01") + std::string(100, 'b')]
      .mutable_int64_list();
  const std::string one = DescribeKeys(odd.SerializeAsString());
  CHECK(one == "a?" + std::string(62, 'b') + "...");
  CHECK(DescribeKeys("") == "(none)");
}

}  // namespace
}  // namespace sluice
