#include "formats/record_reader_factory.h"

#include <utility>

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
    case SourceKind::kTar: {
      ASSIGN_OR_RETURN(std::unique_ptr<TarSampleReader> reader,
                       TarSampleReader::Open(path, options));
      return std::unique_ptr<RecordReader>(std::move(reader));
    }
    case SourceKind::kImage:
      break;
  }
  return Unimplemented(path + ": " + std::string(SourceKindName(kind)) +
                       " files cannot be read yet");
}

}  // namespace sluice
