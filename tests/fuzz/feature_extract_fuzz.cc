// FeatureExtractor over arbitrary bytes, with a schema that declares every shape and type, a
// multi-hot with and without allow_missing, boxes and a small max_feature_bytes (so its bound is
// reached). Whatever the bytes: no crash; an error is InvalidArgument or DataLoss; a record read
// has every array laid out as FeatureSchema::arrays() says (rows, values, sizes), 0/1 multi-hot
// rows, boxes inside [0, 1] with xmin <= xmax and ymin <= ymax, one label a box, and ragged values
// within max_feature_bytes; reading again into the same SampleFeatures gives the same result.
// Where protobuf parses the bytes (what TensorFlow runs), the extractor must not call them
// malformed, and each LIST array and the boxes' count must be what protobuf's message holds.
#include <google/protobuf/stubs/logging.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "formats/sample_features.h"
#include "sluice/v1/example.pb.h"
#include "tests/fuzz/fuzz_check.h"

namespace sluice {
namespace {

// Short keys, so mutations find them.
FeatureSchema MakeSchema() {
  FeatureSchema s;
  auto add = [&](const char* key, FeatureType type, FeatureShape shape, int32_t length = 0) {
    FeatureColumn c;
    c.key = c.name = key;
    c.type = type;
    c.shape = shape;
    c.length = length;
    s.columns.push_back(c);
    return &s.columns.back();
  };
  add("a", FeatureType::kInt64, FeatureShape::kList);
  add("b", FeatureType::kFloat, FeatureShape::kList);
  add("c", FeatureType::kBytes, FeatureShape::kList);
  add("d", FeatureType::kInt64, FeatureShape::kScalar)->default_value = -5;
  add("e", FeatureType::kFloat, FeatureShape::kScalar);
  add("f", FeatureType::kBytes, FeatureShape::kFixed, 2)->default_bytes = "zz";
  add("g", FeatureType::kFloat, FeatureShape::kFixed, 3)->default_value = 0.5;
  add("h", FeatureType::kInt64, FeatureShape::kMultiHot, 8)->allow_missing = true;
  add("i", FeatureType::kInt64, FeatureShape::kMultiHot, 4);
  s.boxes.enabled = true;
  s.boxes.xmin_key = "x0";
  s.boxes.ymin_key = "y0";
  s.boxes.xmax_key = "x1";
  s.boxes.ymax_key = "y1";
  s.boxes.label_key = "l";
  s.boxes.max_boxes = 16;
  s.max_feature_bytes = 512;
  return s;
}

size_t ValueBytes(FeatureType type) { return type == FeatureType::kInt64 ? 8 : 4; }

void CheckLayout(const FeatureSchema& schema, const SampleFeatures& out) {
  const std::vector<ArrayInfo> arrays = schema.arrays();
  FUZZ_CHECK(out.arrays.size() == arrays.size(), "%zu arrays", out.arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    const ArrayInfo& info = arrays[i];
    const FeatureValues& a = out.arrays[i];
    size_t row_values = 1;
    for (int32_t d : info.row_shape) row_values *= static_cast<size_t>(d);
    FUZZ_CHECK(info.ragged || a.rows == 1, "array %s: %u rows", info.name.c_str(), a.rows);
    const size_t values = static_cast<size_t>(a.rows) * row_values;
    if (info.type == FeatureType::kBytes) {
      FUZZ_CHECK(a.sizes.size() == values, "array %s: %zu sizes for %zu values",
                 info.name.c_str(), a.sizes.size(), values);
      size_t total = 0;
      for (uint32_t n : a.sizes) total += n;
      FUZZ_CHECK(total == a.data.size(), "array %s: sizes add to %zu of %zu bytes",
                 info.name.c_str(), total, a.data.size());
    } else {
      FUZZ_CHECK(a.sizes.empty(), "array %s: sizes on numbers", info.name.c_str());
      FUZZ_CHECK(a.data.size() == values * ValueBytes(info.type), "array %s: %zu bytes",
                 info.name.c_str(), a.data.size());
    }
  }
  for (size_t i = 0; i < schema.columns.size(); ++i) {
    if (schema.columns[i].shape != FeatureShape::kMultiHot) continue;
    const std::string& d = out.arrays[i].data;
    for (size_t k = 0; k < d.size(); k += 4) {
      float v;
      std::memcpy(&v, d.data() + k, 4);
      FUZZ_CHECK(v == 0 || v == 1, "multi-hot value %g", v);
    }
  }
  const FeatureValues& boxes = out.arrays[schema.boxes_index()];
  FUZZ_CHECK(out.arrays[schema.boxes_index() + 1].rows == boxes.rows, "box labels' rows");
  FUZZ_CHECK(boxes.rows <= static_cast<uint32_t>(schema.boxes.max_boxes), "%u boxes", boxes.rows);
  for (uint32_t r = 0; r < boxes.rows; ++r) {
    float b[4];
    std::memcpy(b, boxes.data.data() + r * 16, 16);
    for (float v : b) FUZZ_CHECK(v >= 0 && v <= 1, "box coordinate %g", v);
    FUZZ_CHECK(b[0] <= b[2] && b[1] <= b[3], "box %u inverted", r);
  }
  FUZZ_CHECK(out.ragged_bytes(schema) <= schema.max_feature_bytes, "%lld ragged bytes",
             static_cast<long long>(out.ragged_bytes(schema)));
}

bool SameValues(const SampleFeatures& a, const SampleFeatures& b) {
  if (a.arrays.size() != b.arrays.size()) return false;
  for (size_t i = 0; i < a.arrays.size(); ++i) {
    const FeatureValues &x = a.arrays[i], &y = b.arrays[i];
    if (x.rows != y.rows || x.data != y.data || x.sizes != y.sizes) return false;
  }
  return true;
}

// A LIST array against protobuf's feature of its key (absent: no rows).
void CheckList(const FeatureColumn& c, const FeatureValues& a, const v1::Features& features) {
  const auto it = features.feature().find(c.key);
  std::string want;
  uint32_t rows = 0;
  if (it != features.feature().end()) {
    const v1::Feature& f = it->second;
    for (int64_t v : f.int64_list().value()) want.append(reinterpret_cast<const char*>(&v), 8);
    for (float v : f.float_list().value()) want.append(reinterpret_cast<const char*>(&v), 4);
    for (const std::string& v : f.bytes_list().value()) want += v;
    rows = static_cast<uint32_t>(f.int64_list().value_size() + f.float_list().value_size() +
                                 f.bytes_list().value_size());
  }
  FUZZ_CHECK(a.rows == rows && a.data == want, "LIST '%s': %u rows, protobuf %u", c.key.c_str(),
             a.rows, rows);
}

}  // namespace
}  // namespace sluice

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  static const FeatureSchema schema = MakeSchema();
  static const FeatureExtractor extract(schema);
  const std::string_view record(reinterpret_cast<const char*>(data), size);

  SampleFeatures out;
  const Status s = extract.Extract(record, &out);
  FUZZ_CHECK(s.ok() || s.code() == StatusCode::kInvalidArgument ||
                 s.code() == StatusCode::kDataLoss,
             "%s", s.ToString().c_str());
  FUZZ_CHECK(s.ok() || !s.message().empty(), "an error without a message");
  if (s.ok()) CheckLayout(schema, out);
  SampleFeatures again = out;
  const Status s2 = extract.Extract(record, &again);
  FUZZ_CHECK(s2.ToString() == s.ToString(), "%s, then %s", s.ToString().c_str(),
             s2.ToString().c_str());
  if (s.ok()) FUZZ_CHECK(SameValues(out, again), "a second read differs");

  v1::Example example;
  if (!example.ParseFromArray(data, static_cast<int>(size))) return 0;
  FUZZ_CHECK(s.code() != StatusCode::kDataLoss, "protobuf parses what Extract calls malformed: %s",
             s.ToString().c_str());
  if (!s.ok()) return 0;
  for (size_t i = 0; i < schema.columns.size(); ++i) {
    if (schema.columns[i].ragged()) {
      CheckList(schema.columns[i], out.arrays[i], example.features());
    }
  }
  const auto& map = example.features().feature();
  const auto xmin = map.find(schema.boxes.xmin_key);
  const int n = xmin == map.end() ? 0 : xmin->second.float_list().value_size();
  FUZZ_CHECK(out.arrays[schema.boxes_index()].rows == static_cast<uint32_t>(n),
             "%u boxes, protobuf %d", out.arrays[schema.boxes_index()].rows, n);
  return 0;
}
