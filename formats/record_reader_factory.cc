#include "formats/record_reader_factory.h"

#include <utility>

namespace sluice {

Result<std::unique_ptr<RecordReader>> OpenRecordReader(const std::string& path, SourceKind kind,
                                                       const RecordReaderOptions& options) {
  switch (kind) {
    case SourceKind::kTFRecord: {
      ASSIGN_OR_RETURN(std::unique_ptr<TFRecordReader> reader,
                       TFRecordReader::Open(path, options.stream));
      return std::unique_ptr<RecordReader>(std::move(reader));
    }
    case SourceKind::kTar:
    case SourceKind::kImage:
      break;
  }
  return Unimplemented(path + ": " + std::string(SourceKindName(kind)) +
                       " files cannot be read yet");
}

}  // namespace sluice
