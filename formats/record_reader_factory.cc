#include "formats/record_reader_factory.h"

#include <utility>

#include "formats/image_file_reader.h"

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
    case SourceKind::kTar:
      break;
  }
  return Unimplemented(path + ": " + std::string(SourceKindName(kind)) +
                       " files cannot be read yet");
}

}  // namespace sluice
