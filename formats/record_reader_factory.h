// Opens a data set's file as a RecordReader of its kind.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "formats/record_reader.h"
#include "formats/source_kind.h"
#include "formats/status.h"
#include "formats/tfrecord_reader.h"

namespace sluice {

struct RecordReaderOptions {
  // Buffer size, compression, per-record limit, read-ahead wrapping: every kind honours them
  // (compression: a TFRecord file's or a .tar.gz's).
  TFRecordReaderOptions stream;
  // The keys the records are written under (the pipeline's image_key and label_key). An empty
  // label_key: the records are unlabeled (PipelineOptions.unlabeled), and a tar sample's `cls`
  // is an ordinary member, not a label.
  std::string image_key = "image/encoded";
  std::string label_key = "image/class/label";
  // An image file's label (its class folder, or its line of a file list); nullopt: none written.
  std::optional<int64_t> label;
  // A tar shard's reader keeps each sample's members (TarSampleReader::members()), charged to
  // what the sample holds: for index builders and checkers; the reading path keeps none.
  bool keep_tar_members = false;
};

// Opens `path` as a file of `kind`. Errors name the path.
Result<std::unique_ptr<RecordReader>> OpenRecordReader(const std::string& path, SourceKind kind,
                                                       const RecordReaderOptions& options);

}  // namespace sluice
