// The tf.train.Example layout Sluice writes for images: the keys of TensorFlow's ImageNet
// conversion script (build_imagenet_data.py), so tools written for ImageNet shards read ours.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice {

inline constexpr std::string_view kImageEncodedKey = "image/encoded";
inline constexpr std::string_view kImageLabelKey = "image/class/label";
inline constexpr std::string_view kImageClassTextKey = "image/class/text";
inline constexpr std::string_view kImageHeightKey = "image/height";
inline constexpr std::string_view kImageWidthKey = "image/width";
inline constexpr std::string_view kImageFormatKey = "image/format";
inline constexpr std::string_view kImageFilenameKey = "image/filename";

struct ImageRecord {
  std::string_view jpeg;  // the encoded image: a JPEG, or what `format` names
  int64_t label = 0;      // 0-based: line `label` of labels.txt
  std::string_view class_text;
  int height = 0;
  int width = 0;
  std::string_view filename;
  std::string_view format = "JPEG";  // image/format: "JPEG", "PNG" or "WEBP"
};

// Serializes one record as a tf.train.Example with all the keys above, built by ExampleBuilder:
// features in key order, so the same record always has the same bytes (those of protobuf's
// deterministic serialization).
std::string EncodeImageExample(const ImageRecord& record);

}  // namespace sluice
