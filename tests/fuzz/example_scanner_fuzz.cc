// The zero-allocation Example scanner against protobuf's own parse of the same bytes (what
// TensorFlow runs): whenever protobuf accepts a record, the scanner must too and must see the
// same features — the same keys, kinds and values — and ExampleScanner::Scan must find the image
// and label exactly when protobuf's message holds them. (Protobuf may refuse what the scanner
// takes: invalid UTF-8 in a key, nesting past its depth limit.)
#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "formats/example_scanner.h"
#include "formats/image_example.h"
#include "sluice/v1/example.pb.h"
#include "tests/fuzz/fuzz_check.h"

namespace sluice {
namespace {

// A feature's values as comparable data: floats by their bits, so NaNs compare.
struct Values {
  FeatureKind kind = FeatureKind::kNone;
  std::vector<std::string> bytes;
  std::vector<uint32_t> floats;
  std::vector<int64_t> ints;
  bool operator==(const Values&) const = default;
};

Values FromProto(const v1::Feature& f) {
  Values v;
  switch (f.kind_case()) {
    case v1::Feature::kBytesList:
      v.kind = FeatureKind::kBytes;
      for (const std::string& s : f.bytes_list().value()) v.bytes.push_back(s);
      break;
    case v1::Feature::kFloatList:
      v.kind = FeatureKind::kFloat;
      for (float x : f.float_list().value()) {
        uint32_t bits;
        std::memcpy(&bits, &x, 4);
        v.floats.push_back(bits);
      }
      break;
    case v1::Feature::kInt64List:
      v.kind = FeatureKind::kInt64;
      for (int64_t x : f.int64_list().value()) v.ints.push_back(x);
      break;
    case v1::Feature::KIND_NOT_SET:
      break;
  }
  return v;
}

struct Collect : FeatureValueVisitor {
  Values* v;
  explicit Collect(Values* v) : v(v) {}
  bool OnBytes(std::string_view s) override {
    v->bytes.emplace_back(s);
    return true;
  }
  bool OnFloat(float x) override {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    v->floats.push_back(bits);
    return true;
  }
  bool OnInt64(int64_t x) override {
    v->ints.push_back(x);
    return true;
  }
};

}  // namespace
}  // namespace sluice

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  // Protobuf logs every key that is not UTF-8; the parse's result is what counts.
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  const std::string_view record(reinterpret_cast<const char*>(data), size);

  // The scanner, whatever protobuf makes of the bytes: no crash, and an error is DataLoss.
  std::map<std::string, Values> scanned;  // the last entry of each key, as protobuf keeps
  Status visit_status;
  const Status walk = ForEachFeature(record, [&](std::string_view key, const FeatureView& f) {
    Values v;
    v.kind = f.kind();
    Collect collect(&v);
    Status s = f.Visit(collect);
    if (!s.ok() && visit_status.ok()) visit_status = s;
    Result<size_t> count = f.Count();
    if (s.ok()) {
      FUZZ_CHECK(count.ok() && *count == v.bytes.size() + v.floats.size() + v.ints.size(),
                 "Count() disagrees with Visit()");
    }
    scanned[std::string(key)] = std::move(v);
  });
  FUZZ_CHECK(walk.ok() || walk.code() == StatusCode::kDataLoss, "%s", walk.ToString().c_str());
  const ExampleScanner scanner{std::string(kImageEncodedKey), std::string(kImageLabelKey)};
  std::string_view image;
  int64_t label = 0;
  const Status scan = scanner.Scan(record, &image, &label);

  v1::Example example;
  if (!example.ParseFromArray(data, static_cast<int>(size))) return 0;

  FUZZ_CHECK(walk.ok(), "protobuf parses the record, the scanner says %s", walk.ToString().c_str());
  FUZZ_CHECK(visit_status.ok(), "protobuf parses the record, a feature's values do not: %s",
             visit_status.ToString().c_str());
  const auto& features = example.features().feature();
  FUZZ_CHECK(scanned.size() == features.size(), "scanner sees %zu keys, protobuf %zu",
             scanned.size(), features.size());
  for (const auto& [key, feature] : features) {
    auto it = scanned.find(key);
    FUZZ_CHECK(it != scanned.end(), "key '%s' missing from the scan", key.c_str());
    const Values expected = FromProto(feature);
    FUZZ_CHECK(it->second == expected,
               "key '%s': scanner has %s with %zu/%zu/%zu values, protobuf %s with %zu/%zu/%zu",
               key.c_str(), std::string(FeatureKindName(it->second.kind)).c_str(),
               it->second.bytes.size(), it->second.floats.size(), it->second.ints.size(),
               std::string(FeatureKindName(expected.kind)).c_str(), expected.bytes.size(),
               expected.floats.size(), expected.ints.size());
    FeatureView view;
    bool found = false;
    FUZZ_CHECK(FeatureScanner::Find(record, key, &view, &found).ok() && found, "Find('%s') fails",
               key.c_str());
    FUZZ_CHECK(view.kind() == expected.kind, "Find('%s') gives another kind", key.c_str());
  }

  // Scan: the first image bytes and label when both are there with values, else InvalidArgument.
  const auto image_it = features.find(std::string(kImageEncodedKey));
  const auto label_it = features.find(std::string(kImageLabelKey));
  const bool has_image = image_it != features.end() && image_it->second.has_bytes_list() &&
                         image_it->second.bytes_list().value_size() > 0;
  const bool has_label = label_it != features.end() && label_it->second.has_int64_list() &&
                         label_it->second.int64_list().value_size() > 0;
  if (has_image && has_label) {
    FUZZ_CHECK(scan.ok(), "Scan fails on a record with image and label: %s",
               scan.ToString().c_str());
    FUZZ_CHECK(image == image_it->second.bytes_list().value(0), "Scan's image differs");
    FUZZ_CHECK(label == label_it->second.int64_list().value(0), "Scan's label differs");
  } else {
    FUZZ_CHECK(scan.code() == StatusCode::kInvalidArgument,
               "Scan of a record without image or label: %s", scan.ToString().c_str());
  }
  return 0;
}
