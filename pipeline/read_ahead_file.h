// Read-ahead for the files of the interleave cycle: a SequentialFile decorator whose base file is
// read (and, for a compressed shard whose base inflates, decompressed) on an IoPool thread in
// chunks, up to `chunks` of them ahead of the reader. While the source thread parses chunk k of
// every open file, the pool reads chunk k+1 of each of them in parallel.
//
// The bytes, and the errors, are those of the base file in the same order: an error is returned
// once every byte the base delivered before it has been read, with the base's own message, and
// again on every later call. The file lends its chunks (LendingSequentialFile), so TFRecordReader
// parses records in place instead of copying each chunk into its own buffer.
#pragma once

#include <cstddef>
#include <memory>

#include "formats/file.h"
#include "formats/tfrecord_reader.h"
#include "pipeline/io_pool.h"
#include "pipeline/options.h"
#include "pipeline/stats.h"

namespace sluice {

struct ReadAheadOptions {
  size_t chunk_bytes = kReadBufferBytes;  // asked of the base file per pool task
  int chunks = kReadAheadChunks;  // read ahead and not yet consumed, at most (at least 1)
  // When set, the chunk buffers (chunks x chunk_bytes, allocated at creation) are accounted here
  // for the file's lifetime.
  PoolCounters* memory = nullptr;
};

// Starts reading `base` ahead at once. The result is a LendingSequentialFile. `pool` (and
// options.memory) must outlive the file. Destroying the file cancels its queued read, or waits for
// the one running (at most one chunk of the base), so no pool thread touches it afterwards. The
// returned file is, like any SequentialFile, for one thread at a time.
std::unique_ptr<SequentialFile> NewReadAheadFile(std::unique_ptr<SequentialFile> base,
                                                 IoPool* pool, const ReadAheadOptions& options);

}  // namespace sluice
