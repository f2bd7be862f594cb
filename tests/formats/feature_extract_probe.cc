// The test API of the feature extractor (formats/sample_features.h): reads every record of a
// TFRecord file as the pipeline does, so tests/python/test_tf_parse_example_reference.py can
// compare it with tf.io.parse_example on the same records.
//
//   feature_extract_probe SPEC.json IN.tfrecord
//
// SPEC.json is a sluice.v1.PipelineOptions in protobuf's JSON form (only features, boxes and
// max_feature_bytes are read). stdout gets one JSON line per record: {"ok": true, "arrays":
// [{"name", "rows", "values"}, ...]} in FeatureSchema::arrays() order, or {"ok": false, "code",
// "error"}. Values: int64 as numbers, float32 as their IEEE bits (so NaNs and -0 compare), bytes
// as hex. Exit 0 when every record was read (refused or not), 2 on a bad spec or file.
#include <google/protobuf/util/json_util.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "formats/sample_features.h"
#include "formats/tfrecord_reader.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "feature_extract_probe: %s\n", message.c_str());
  return 2;
}

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

nlohmann::json Values(const sluice::ArrayInfo& info, const sluice::FeatureValues& a) {
  nlohmann::json values = nlohmann::json::array();
  if (info.type == sluice::FeatureType::kBytes) {
    size_t at = 0;
    for (uint32_t size : a.sizes) {
      values.push_back(Hex(std::string_view(a.data).substr(at, size)));
      at += size;
    }
  } else if (info.type == sluice::FeatureType::kInt64) {
    for (size_t i = 0; i + 8 <= a.data.size(); i += 8) {
      int64_t v;
      std::memcpy(&v, a.data.data() + i, 8);
      values.push_back(v);
    }
  } else {
    for (size_t i = 0; i + 4 <= a.data.size(); i += 4) {
      uint32_t bits;
      std::memcpy(&bits, a.data.data() + i, 4);
      values.push_back(bits);
    }
  }
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return Fail("usage: feature_extract_probe SPEC.json IN.tfrecord");
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) return Fail(std::string("cannot read ") + argv[1]);
  const std::string spec{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  sluice::v1::PipelineOptions options;
  const auto parsed = google::protobuf::util::JsonStringToMessage(spec, &options);
  if (!parsed.ok()) return Fail(std::string(argv[1]) + ": " + std::string(parsed.message()));
  sluice::Result<sluice::FeatureSchema> schema = sluice::CompileFeatureSchema(options);
  if (!schema.ok()) return Fail(schema.status().ToString());
  const std::vector<sluice::ArrayInfo> arrays = schema->arrays();
  const sluice::FeatureExtractor extract(*schema);

  sluice::Result<std::unique_ptr<sluice::TFRecordReader>> reader =
      sluice::TFRecordReader::Open(argv[2]);
  if (!reader.ok()) return Fail(reader.status().ToString());
  sluice::SampleFeatures features;
  for (;;) {
    std::string_view record;
    bool end = false;
    sluice::Status s = (*reader)->ReadRecord(&record, &end);
    if (!s.ok()) return Fail(s.ToString());
    if (end) break;
    nlohmann::json line;
    s = extract.Extract(record, &features);
    line["ok"] = s.ok();
    if (!s.ok()) {
      line["code"] = static_cast<int>(s.code());
      line["error"] = s.message();
    } else {
      nlohmann::json out = nlohmann::json::array();
      for (size_t i = 0; i < arrays.size(); ++i) {
        out.push_back({{"name", arrays[i].name},
                       {"rows", features.arrays[i].rows},
                       {"values", Values(arrays[i], features.arrays[i])}});
      }
      line["arrays"] = std::move(out);
    }
    std::printf("%s\n", line.dump().c_str());
  }
  return 0;
}
