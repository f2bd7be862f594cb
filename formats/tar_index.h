// Tar shard index files, in the format NVIDIA DALI's wds2idx writes (version "v1.2") and
// fn.readers.webdataset(index_paths=...) reads: a first line "v1.2 <samples>", then one line per
// sample listing each of its members as "<ext> <offset> <size> <name>" (space separated), where
// offset is the member's first data byte (after its header blocks, so a multiple of 512), size its
// data bytes, ext the part of the name after the first dot of its last path component (as
// written, not lower-cased) and name the member's whole path. For compressed shards the offsets
// are positions in the uncompressed stream. The index of "<shard>" lives at "<shard>.idx"
// (IndexPathFor), as a TFRecord shard's does (wds2idx's default name for the index of
// "shard.tar" is "shard.idx": it is looked for as "shard.tar.idx"); the two formats never parse as
// each other (a TFRecord index has no version line), so each file's index is read by the file's
// kind.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/record_reader_factory.h"
#include "formats/status.h"
#include "formats/tar_sample_reader.h"

namespace sluice {

inline constexpr std::string_view kTarIndexVersion = "v1.2";

struct TarIndexMember {
  std::string ext;
  uint64_t offset = 0;  // first data byte
  uint64_t size = 0;    // data bytes
  std::string name;
  bool operator==(const TarIndexMember&) const = default;
};

struct TarIndexSample {
  std::vector<TarIndexMember> members;  // at least one, in stream order
  // One past the padding of its last member's data.
  uint64_t padded_end() const;
  bool operator==(const TarIndexSample&) const = default;
};

std::string FormatTarIndex(const std::vector<TarIndexSample>& samples);
// Parses and checks the index describes a possible tar: the version line and exactly as many
// sample lines as it says; every offset a multiple of 512 with a header block before it; each
// member after the previous one's data and its header, and its padded data within the shard's
// shard_bytes (the uncompressed stream's, when known). Errors name the path and line (the version
// line is line 1).
Result<std::vector<TarIndexSample>> ParseTarIndex(
    std::string_view text, const std::string& path,
    uint64_t shard_bytes = std::numeric_limits<uint64_t>::max());

Status WriteTarIndex(const std::string& path, const std::vector<TarIndexSample>& samples);
// The most bytes an index of a shard of shard_bytes can have: every member takes a 512-byte
// header block of the shard, and a name too long for it (over 256 bytes) an extended header of a
// block and the name besides; its entry is the name, its extension (part of the name), two
// numbers of at most 20 digits and four separators, so at most twice the shard bytes the member
// takes. Plus the version line.
uint64_t MaxTarIndexBytes(uint64_t shard_bytes);
// Reads and parses the index at `path` of a shard of shard_bytes (uncompressed; the maximum when
// unknown): one larger than MaxTarIndexBytes is refused unread (DataLoss naming it).
Result<std::vector<TarIndexSample>> ReadTarIndex(const std::string& path, uint64_t shard_bytes);

// Whether TarSampleReader groups members into samples as the index does, from their names
// alone (no I/O): every name a sample member's (SplitSampleName matches, not metadata), its ext
// the one the reader gives it, one key within a sample and another than the sample before's.
// DALI's wds2idx groups otherwise: a member without an extension ("README"), "__x__" metadata
// and "dir/.hidden" are samples of its index, which then counts other samples than the reader
// reads. DataLoss naming the index and line if not.
Status CheckTarIndexGrouping(const std::vector<TarIndexSample>& samples,
                             const std::string& index_path);

// Where a reader may start to read sample i: 0 for the first, else just after the previous
// sample's last member (members the reader skips, such as folders, may lie between).
uint64_t TarSampleStart(const std::vector<TarIndexSample>& samples, size_t i);

// The samples TarSampleReader makes of a shard (any compression), each with its members as they
// lie (whatever their size or names), up to the first damage the reader cannot step past: damage
// says what it was, naming the shard and offset (OK: the shard read to its end, or max_samples
// found). Payloads are skipped, except a `cls`: read through a 64 KiB buffer, which holds small
// members' payloads too, or with headers_only from reads of a header block each, payloads seeked
// over whatever their size. What `sluice index` writes, and how a shard without its `.idx` gets
// one on open (pipeline/record_index_source.cc).
struct TarSamplesScan {
  std::vector<TarIndexSample> samples;
  Status damage;
};
TarSamplesScan ScanTarSamples(const std::string& shard_path,
                              size_t max_samples = std::numeric_limits<size_t>::max(),
                              bool headers_only = false);

// Reads a shard (any compression) and returns its index: the samples TarSampleReader makes of
// it, each with its members. A shard whose headers do not read cleanly (DataLoss) gets none, nor
// one with a member name the format cannot write (whitespace in it); a sample that is only wrong
// (InvalidArgument, e.g. a cls that is not a number) is indexed as it lies.
Result<std::vector<TarIndexSample>> BuildTarIndex(const std::string& shard_path);

// Whether an uncompressed shard still begins and ends as its index says, and groups its members
// as the reader does: from its names (CheckTarIndexGrouping), then from reads of its first and
// last samples' headers, of every inner sample with more than a header before one of its members
// (where members the index does not list lie, which the reader may make samples of; more than 16
// such samples fail), and of what follows the last: each must be exactly its entry, and the
// archive end after the last. What counting the shard's samples from its index asks
// (pipeline/record_counts.cc): a few reads, not one per member. It catches a shard rewritten with
// other samples or a different number of them, an index that groups members otherwise (DALI's
// wds2idx lists "README" or a leading "__meta__" as samples, skips "dir/.hidden") and an entry
// deleted from it, though not a shard whose inner samples alone changed in place (the lazy start
// checks every sample it passes, TarIndexChecker). DataLoss naming the index and line if not.
Status CheckTarIndexEnds(const std::string& shard_path, const std::vector<TarIndexSample>& samples,
                         const RecordReaderOptions& options);

// Checks an uncompressed shard against its index one sample after another, as a reader trusts
// them: reads the shard's headers from the start (payloads seeked over, except a `cls`) with the
// reader the pipeline uses, and each sample must be exactly its entry: the same members, names,
// data offsets and sizes. An index can parse and still lie (a stale index of a rewritten shard,
// samples merged or split, a member missing); this catches it at the first sample it touches.
// Not thread-safe.
class TarIndexChecker {
 public:
  // options: the pipeline's (keys, max_held_record_bytes), so the sizes it reports are the
  // reading path's; its stream options are replaced. index_name: what errors call the index (its
  // path, when empty).
  static Result<TarIndexChecker> Open(const std::string& shard_path,
                                      const RecordReaderOptions& options,
                                      std::string index_name = "");
  // Checks samples[i]. DataLoss naming the index, the line and what the shard holds instead.
  // REQUIRES: called with i = 0, 1, 2... in turn, the same samples each time, until one fails.
  Status Check(const std::vector<TarIndexSample>& samples, size_t i);
  // After a Check that passed: where the sample's first header is (the reader's record_offset)
  // and the length the reading path gives the sample (its Example's bytes, or for a sample it
  // refuses, its members' data bytes).
  uint64_t record_offset() const { return reader_->record_offset(); }
  uint64_t record_length() const { return length_; }

 private:
  TarIndexChecker(std::string index_name, std::unique_ptr<TarSampleReader> reader)
      : index_name_(std::move(index_name)), reader_(std::move(reader)) {}
  std::string index_name_;
  std::unique_ptr<TarSampleReader> reader_;
  uint64_t length_ = 0;
};

}  // namespace sluice
