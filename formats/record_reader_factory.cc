#include "formats/record_reader_factory.h"

#include <string>
#include <utility>

#include "formats/image_file_reader.h"
#include "formats/tar_sample_reader.h"

namespace sluice {

Result<std::unique_ptr<RecordReader>> OpenRecordReader(const std::string& path, SourceKind kind,
                                                       const RecordReaderOptions& options) {
  switch (kind) {
    case SourceKind::kTFRecord: {
      ASSIGN_OR_RETURN(std::unique_ptr<TFRecordReader> reader,
                       TFRecordReader::Open(path, options.stream));
      return std::unique_ptr<RecordReader>(std::move(reader));
    }
    case SourceKind::kImage: {
      ASSIGN_OR_RETURN(std::unique_ptr<ImageFileReader> reader,
                       ImageFileReader::Open(path, options));
      return std::unique_ptr<RecordReader>(std::move(reader));
    }
    case SourceKind::kTar: {
      ASSIGN_OR_RETURN(std::unique_ptr<TarSampleReader> reader,
                       TarSampleReader::Open(path, options));
      return std::unique_ptr<RecordReader>(std::move(reader));
    }
  }
  return InvalidArgument(path + ": unknown source kind " +
                         std::to_string(static_cast<int>(kind)));
}

}  // namespace sluice
