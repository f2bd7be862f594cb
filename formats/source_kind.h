// What kind of file a data set's file is: a TFRecord shard, a WebDataset tar shard, or one image.
#pragma once

#include <string_view>

namespace sluice {

enum class SourceKind {
  kTFRecord,  // TFRecord frames of tf.train.Example (plain, GZIP or ZLIB)
  kTar,       // WebDataset: a tar (or gzipped tar) of samples grouped by key
  kImage,     // one image file (JPEG, PNG or WebP): one sample
};

// From the file's name: .tar, .tar.gz and .tgz are kTar; .jpg, .jpeg, .png, .webp (any case)
// kImage; anything else kTFRecord.
SourceKind DetectSourceKind(std::string_view path);

// "tfrecord", "tar", "image".
std::string_view SourceKindName(SourceKind kind);

}  // namespace sluice
