#include "formats/image_example.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "sluice/v1/example.pb.h"

namespace sluice {

std::string EncodeImageExample(const ImageRecord& r) {
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
  // Map entries in key order: the same record always has the same bytes (protobuf's default map
  // order varies between processes).
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    example.SerializeToCodedStream(&coded);
  }
  return out;
}

}  // namespace sluice
