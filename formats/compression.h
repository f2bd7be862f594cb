// Whole-stream compression of TFRecord files, as TensorFlow writes them: GZIP (a gzip member) or
// ZLIB (a zlib stream), both deflate. Detection looks at the first bytes of a file.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "formats/file.h"
#include "formats/status.h"

namespace sluice {

enum class Compression { kNone, kGzip, kZlib };

std::string_view CompressionName(Compression c);  // "none", "gzip", "zlib"
// Accepts "", "none", "gzip", "zlib" (case-insensitive; TensorFlow's "GZIP"/"ZLIB" too).
Result<Compression> ParseCompression(std::string_view name);

// Decides from a file's first bytes: a TFRecord header whose length CRC matches → none; the gzip
// magic 1f 8b → gzip; a valid zlib header (CMF/FLG check) → zlib. An empty file is none.
// The TFRecord check comes first: a plain file's length bytes may spell either magic.
// DetectCompression reads anything else as none (so a reader reports the damage at offset 0);
// DetectFileCompression makes it InvalidArgument naming the path.
Compression DetectCompression(std::string_view head);
Result<Compression> DetectFileCompression(const std::string& path);

// Inflates `base` (gzip, possibly several concatenated members, or zlib). Corrupt compressed data
// is DataLoss naming the file and the compressed offset; a stream cut short is DataLoss too.
std::unique_ptr<SequentialFile> NewInflatingFile(std::unique_ptr<SequentialFile> base);

// Deflates everything appended into `base` as gzip or zlib; Commit() ends the stream and commits
// base. REQUIRES: c != kNone. level: zlib's 0–9, or -1 for its default (6).
std::unique_ptr<WritableFile> NewDeflatingFile(std::unique_ptr<WritableFile> base, Compression c,
                                               int level = -1);

}  // namespace sluice
