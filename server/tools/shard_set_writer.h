// Writes a stream of records into a set of TFRecord shards named like TensorFlow's ImageNet
// ("train-00003-of-00016.tfrecord"), each with its .idx. Shards appear under their names only when
// complete, and a set that is not Finish()ed is removed again, so a failed or interrupted run leaves
// nothing half-written. Not thread-safe: feed it from one (serial, in-order) stage.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "formats/compression.h"
#include "formats/status.h"
#include "formats/tfrecord_writer.h"

namespace sluice {

struct ShardSetOptions {
  std::string dir;
  std::string prefix = "train";
  int shards = 1;
  Compression compression = Compression::kNone;
  // Without it, an existing shard of the same name is an error rather than replaced.
  bool overwrite = false;
};

std::string ShardFileName(const std::string& prefix, int shard, int shards);

class ShardSetWriter {
 public:
  // items: how many records the caller may write; item i goes to shard i * shards / items, so
  // shards get contiguous, near-equal runs even when some items are skipped.
  static Result<std::unique_ptr<ShardSetWriter>> Create(const ShardSetOptions& options,
                                                        uint64_t items);
  ~ShardSetWriter();
  ShardSetWriter(const ShardSetWriter&) = delete;
  ShardSetWriter& operator=(const ShardSetWriter&) = delete;

  // REQUIRES: item indexes increase from call to call and stay below `items`.
  Status Write(uint64_t item, std::string_view record);
  // Closes every shard (empty ones included, so the "-of-N" set is whole).
  Status Finish();

  std::vector<std::string> paths() const;
  uint64_t records() const { return records_; }
  uint64_t bytes() const { return bytes_; }

 private:
  explicit ShardSetWriter(const ShardSetOptions& options, uint64_t items);
  Status OpenUpTo(int shard);
  std::string PathOf(int shard) const;

  const ShardSetOptions options_;
  const uint64_t items_;
  int current_ = -1;  // shard being written, -1 before the first
  std::unique_ptr<TFRecordWriter> writer_;
  std::vector<std::string> committed_;  // shard paths closed so far
  uint64_t records_ = 0;
  uint64_t bytes_ = 0;
  bool finished_ = false;
};

}  // namespace sluice

namespace sluice {

class Progress;

// Makes record `item` into *record. A non-OK status means the item is not written (see
// WriteShardSet). Called concurrently from several threads.
using MakeRecordFn = std::function<Status(uint64_t item, std::string* record)>;
// Told, in item order, of each item whose MakeRecordFn failed; returns false to abort the set.
using SkipFn = std::function<bool(uint64_t item, const Status& why)>;

// Makes items [0, items) in parallel on oneTBB (at most a few per thread in flight, so memory stays
// bounded) and writes them in item order into a ShardSetWriter. Returns the first write error, or
// Cancelled when on_skip aborted; either way nothing of the set is left behind.
Status WriteShardSet(const ShardSetOptions& options, uint64_t items, const MakeRecordFn& make,
                     const SkipFn& on_skip, Progress* progress, uint64_t* records_written);

}  // namespace sluice
