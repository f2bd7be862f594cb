#include "formats/image_example.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "sluice/v1/example.pb.h"

namespace sluice {
namespace {

// The record as a protobuf message, serialized deterministically (map entries in key order):
// what EncodeImageExample wrote before it was built on ExampleBuilder.
std::string ProtobufDeterministic(const ImageRecord& r) {
  v1::Example example;
  auto& features = *example.mutable_features()->mutable_feature();
  auto bytes = [&](std::string_view key, std::string_view value) {
    features[std::string(key)].mutable_bytes_list()->add_value(value.data(), value.size());
  };
  auto int64 = [&](std::string_view key, int64_t value) {
    features[std::string(key)].mutable_int64_list()->add_value(value);
  };
  bytes(kImageEncodedKey, r.jpeg);
  int64(kImageLabelKey, r.label);
  bytes(kImageClassTextKey, r.class_text);
  int64(kImageHeightKey, r.height);
  int64(kImageWidthKey, r.width);
  bytes(kImageFormatKey, r.format);
  bytes(kImageFilenameKey, r.filename);
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    example.SerializeToCodedStream(&coded);
  }
  return out;
}

TEST_CASE("EncodedImageExampleIsProtobufsDeterministicSerializationByteForByte") {
  const std::string large(70000, '\xd8');  // lengths of three varint bytes
  struct Case {
    const char* what;
    ImageRecord record;
  };
  const Case cases[] = {
      {"a typical record", {"\xff\xd8jpeg", 7, "tench", 48, 64, "n01440764_1.JPEG"}},
      {"empty strings and zeros", {"", 0, "", 0, 0, "", ""}},
      {"a negative label (ten varint bytes)", {"x", -1, "c", 1, 1, "x"}},
      {"the largest label", {"x", INT64_MAX, "c", 1, 1, "x"}},
      {"a large image, PNG",
       {large, 999, std::string_view(large).substr(0, 300), 4000, 3000, "big.png", "PNG"}},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const std::string encoded = EncodeImageExample(c.record);
    CHECK(encoded == ProtobufDeterministic(c.record));
    v1::Example parsed;
    REQUIRE(parsed.ParseFromString(encoded));
    const auto& f = parsed.features().feature();
    CHECK(f.size() == 7);
    CHECK(f.at(std::string(kImageEncodedKey)).bytes_list().value(0) == c.record.jpeg);
    CHECK(f.at(std::string(kImageLabelKey)).int64_list().value(0) == c.record.label);
  }
}

}  // namespace
}  // namespace sluice
