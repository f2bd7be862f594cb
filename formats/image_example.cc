#include "formats/image_example.h"

#include "formats/example_builder.h"

namespace sluice {

std::string EncodeImageExample(const ImageRecord& r) {
  ExampleBuilder builder;
  builder.AddBytes(kImageEncodedKey, r.jpeg);
  builder.AddInt64(kImageLabelKey, r.label);
  builder.AddBytes(kImageClassTextKey, r.class_text);
  builder.AddInt64(kImageHeightKey, r.height);
  builder.AddInt64(kImageWidthKey, r.width);
  builder.AddBytes(kImageFormatKey, r.format);
  builder.AddBytes(kImageFilenameKey, r.filename);
  std::string out;
  builder.Finish(&out);
  return out;
}

}  // namespace sluice
