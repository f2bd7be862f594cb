// A TFRecord file of given records, written by the project's writer, for tests that need to know
// where its frames lie.
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "formats/record_index.h"
#include "formats/tfrecord_writer.h"

namespace sluice::testing {

// Writes `records` to path as a TFRecord file (uncompressed); returns its frames' index.
inline std::vector<IndexEntry> WriteTFRecordFile(const std::string& path,
                                                 const std::vector<std::string>& records) {
  auto writer = TFRecordWriter::Create(path);
  REQUIRE(writer.ok());
  for (const std::string& r : records) REQUIRE((*writer)->Write(r).ok());
  std::vector<IndexEntry> index = (*writer)->index();
  REQUIRE((*writer)->Close().ok());
  return index;
}

}  // namespace sluice::testing
