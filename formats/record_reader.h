// The records of one file, whatever kind of file it is (formats/source_kind.h): the interface the
// pipeline's FileReaderSource reads through (opened by formats/record_reader_factory.h). Every kind
// hands on its samples as tf.train.Example wire bytes with the keys of formats/image_example.h (the
// image under image/encoded, the label under the dataset's label key), so the parse, caches,
// shuffle and decode after it are the same for all of them; a tar sample's other members and an
// image file's name ride along as features.
#pragma once

#include <cstdint>
#include <string>

#include "formats/status.h"

namespace sluice {

class RecordReader {
 public:
  virtual ~RecordReader() = default;

  // Copies the next record into *record (its capacity reused); *end_of_file at a clean end.
  // Errors name "<file>:<offset>"; after one that can_continue() says is final, every later call
  // returns the same status. ResourceExhausted: a record over the per-record limit (refused, not
  // held; the next call reads the one after it).
  virtual Status ReadRecordInto(std::string* record, bool* end_of_file) = 0;
  // ReadRecordInto for a record nobody wants (another shard's): the same checks and errors,
  // holding as little of it as the kind allows.
  virtual Status SkipRecord(bool* end_of_file) = 0;
  // Offset of the record last returned or reported (its first byte: a TFRecord frame, a tar
  // sample's first header, 0 for an image file).
  virtual uint64_t record_offset() const = 0;
  // Data length of the record last returned or reported, as the file declares it (0 when unknown).
  virtual uint64_t record_length() const = 0;
  // False once the reader hit an error it cannot step past.
  virtual bool can_continue() const = 0;
  // After a clean end: what about the file deserves a warning though nothing in it was refused
  // (a tar shard without its end-of-archive marker); empty when nothing does.
  virtual std::string warning() const { return {}; }
};

}  // namespace sluice
