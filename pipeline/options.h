// PipelineOptions (proto/sluice/v1/config.proto) with every default applied, globs expanded and
// limits checked: what the pipeline actually runs with. Immutable once made.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/compression.h"
#include "formats/feature_schema.h"
#include "formats/png_codec.h"
#include "formats/source_kind.h"
#include "formats/status.h"
#include "pipeline/file_list.h"
#include "pipeline/transform_spec.h"
#include "pipeline/tunables.h"
#include "sluice/v1/config.pb.h"

namespace sluice {

enum class PipelineMode { kTrain, kEval };
enum class CacheKind { kNone, kRecords, kDecoded };
enum class ErrorPolicy { kSkip, kFail };
// v1::EqualShares resolved: DEFAULT is DROP in MODE_TRAIN, PAD in MODE_EVAL. It acts only on a
// sharded pipeline (shard_count > 1); see pipeline/equal_shares.h.
enum class EqualShares { kOff, kDrop, kPad };

struct ResolvedOptions {
  std::vector<std::string> files;  // sorted, unique
  std::vector<SourceKind> kinds;   // each file's kind (PipelineOptions.format, or its name)
  // Each file's label when any file is an image file (-1 for the files that are not): the index
  // of its folder's name in `classes`, or its file_list line's. Empty when no file is an image.
  std::vector<int64_t> file_labels;
  // Image files labelled by folder: the folder names in byte order, label k naming classes[k].
  std::vector<std::string> classes;
  std::optional<Compression> compression;  // nullopt: detect per file
  std::string image_key;
  std::string label_key;
  // PipelineOptions.unlabeled: label_key is not read, every label is 0 and batches carry none.
  bool unlabeled = false;
  // PipelineOptions.features, boxes and max_feature_bytes (CompileFeatureSchema).
  FeatureSchema features;
  int64_t label_offset = 0;
  int cycle_length = 1;
  int block_length = 1;
  bool shuffle_files = true;
  int64_t shuffle_buffer = 0;
  uint64_t shuffle_seed = 0;
  bool reshuffle_each_epoch = true;
  CacheKind cache = CacheKind::kNone;
  int64_t cache_budget_bytes = 0;
  int decoded_short_side = 0;
  PipelineMode mode = PipelineMode::kTrain;
  int height = 224;
  int width = 224;
  int batch_size = 256;
  bool drop_remainder = false;
  int prefetch = 2;
  int threads = 1;
  int64_t epochs = 0;  // 0: forever
  int shard_index = 0;
  int shard_count = 1;
  // Of shard_count, the shards that equal shares keep equal (shard.consumers; resolved, 0 → all):
  // this shard's peers are those congruent to shard_index modulo shard_count / shard_consumers.
  int shard_consumers = 1;
  EqualShares equal_shares = EqualShares::kDrop;
  // A shared job's consumers in lockstep (StreamRequest.num_consumers; 0: none): batch i of an
  // epoch goes to consumer i mod job_consumers, so equal shares make every epoch a multiple of
  // job_consumers batches. Not from PipelineOptions: the stream's request gives it.
  int job_consumers = 0;
  // Each batch carries every sample's file (index into files) and record number within it. Not
  // from PipelineOptions: a stream's request asks for it (StreamRequest.record_ids).
  bool record_ids = false;
  // PipelineOptions.transforms compiled for height x width (an empty list: mode's preset).
  TransformSpec transforms;
  ErrorPolicy error_policy = ErrorPolicy::kSkip;
  int64_t max_errors = 0;
  int skip_warn_percent = 10;  // of an epoch's records; more skips are logged loudly
  // Labels must be below it; 0: only negative labels are refused. PipelineOptions.num_classes,
  // else (0) the number of `classes` of files labelled by folder.
  int num_classes = 0;
  int64_t max_pixels = 0;
  bool fast_idct = true;
  Alpha alpha = Alpha::kDrop;  // what becomes of a PNG's or WebP's alpha (PipelineOptions.alpha)
  // Tune the decode parallelism between 1 and `threads` at run time (pipeline/autotuner.h).
  bool autotune = true;
  uint64_t seed = 0;
  int64_t memory_budget_bytes = 0;
  // What the budget leaves, after the batch pool, the read buffers and the cache, splits into:
  //  - records_budget_bytes for records between the reader and the batcher: the in-flight window
  //    (records_budget_bytes - max_held_record_bytes) and the record the source holds while it
  //    waits for room there;
  //  - max_held_record_bytes, the largest record held at all: a longer one is refused from its
  //    length field before its payload is read (TFRecordReaderOptions::max_held_record_bytes);
  //  - decode_budget_bytes for the decoders' own memory (libjpeg's buffers, the decoded rows),
  //    reserved per image from its header by every decode thread together (DecodeBudget);
  //  - with a shuffle buffer, shuffle_budget_bytes for the records it holds (ShuffleBuffer's byte
  //    share): at least one record of max_held_record_bytes.
  int64_t records_budget_bytes = 0;
  int64_t max_held_record_bytes = 0;
  int64_t decode_budget_bytes = 0;
  int64_t shuffle_budget_bytes = 0;
  // How logs name this pipeline (a server sets "dataset 'D', job 'J'"); not from PipelineOptions.
  std::string name = "pipeline";

  // The in-flight window's byte bound: the records share less the record the source holds while
  // it waits for room there.
  int64_t window_bytes() const { return records_budget_bytes - max_held_record_bytes; }
  // Bytes of one image in a batch: height x width x 3 values of the output dtype.
  size_t image_bytes() const {
    return static_cast<size_t>(height) * width * 3 * DTypeSize(transforms.output.dtype);
  }
  size_t batch_image_bytes() const { return image_bytes() * batch_size; }
  // Every epoch yields the same number of full batches in every shard, and a multiple of
  // job_consumers of them (padding or dropping).
  bool equalizes() const {
    return (shard_consumers > 1 || job_consumers > 0) && equal_shares != EqualShares::kOff;
  }
};

// Batch buffers beyond `prefetch`: the consumer's current batch, the ones being filled, and one
// for the compaction that follows a skipped record.
inline constexpr int kBatchPoolExtra = 4;
// Each open file of the interleave cycle reads through a buffer this large, and the I/O pool reads
// it ahead in chunks of the same size, kReadAheadChunks of them at most (one being parsed from
// while the next is read). What every open file may hold:
inline constexpr int64_t kReadBufferBytes = 1 << 20;
inline constexpr int kReadAheadChunks = 2;
inline constexpr int64_t kReadBytesPerOpenFile = kReadBufferBytes * (1 + kReadAheadChunks);
// Threads of an iterator's I/O pool: one per open file, at most this many. Reads from the page
// cache and inflation are fast next to decode, so a few threads keep a whole cycle ahead.
inline constexpr int kMaxIoThreads = 4;

// Applies defaults and checks bounds, both from the tunables table (pipeline/tunables.h), so each
// error reads "FIELD = VALUE is outside [MIN, MAX]". Errors name the field: InvalidArgument for
// values out of range, NotFound when a glob matches no file, ResourceExhausted when the batch pool
// alone would not fit the memory budget. job_consumers: ResolvedOptions::job_consumers (it changes
// what the budget must hold when it equalizes the epochs). REQUIRES: job_consumers >= 0.
Result<ResolvedOptions> ResolveOptions(const v1::PipelineOptions& options, int job_consumers = 0);

// Sets r->kinds (options.format, else each file's name) and, when any file is an image file,
// r->file_labels and r->classes by folder name: the names of the folders holding image files, in
// byte order (torchvision's ImageFolder sorts them so: UTF-8 keeps code point order), labelled
// 0..K-1. What ResolveOptions does for file patterns; `sluice inspect` labels the same way.
// REQUIRES: r->files set.
Status ResolveSources(const v1::PipelineOptions& options, ResolvedOptions* r);

// Expands glob patterns (sorted, duplicates removed). NotFound naming the first pattern that
// matches nothing. A pattern without a wildcard (an unescaped * ? [ { or a leading ~) is the one
// path it names, escapes removed, without looking at the file system: the server's start-up check
// turns its patterns into such escaped paths, and a file of them deleted since is then what any
// unreadable file is to the source (a bad record naming it), not a refused stream.
Result<std::vector<std::string>> ExpandGlobs(const std::vector<std::string>& patterns);

// NotFound ("no file matches 'P'") for the first pattern without a wildcard whose path does not
// exist: what a command given the patterns by a user checks up front (ExpandGlobs leaves a
// missing literal path to the source; a server's start-up check stats every file instead).
Status CheckLiteralPathsExist(const std::vector<std::string>& patterns);

// Reads `list` (a PipelineOptions.file_list) afresh and checks it as ResolveOptions does (its
// errors), then keeps that parse for the rest of the process: every later ResolveOptions of the
// same list (by absolute path) serves those files and labels whatever the list holds by then,
// and when the list's size or modification time has changed since, logs one warning naming it.
// A list never frozen is read by every ResolveOptions. The server's start-up check freezes every
// dataset's list (so a resuming client sees the file set it started with); freezing a list again
// replaces its parse. Holds one parse per list frozen and `labels` (an unlabeled dataset's
// ResolveOptions serves the list frozen with ListLabels::kIgnore). Thread-safe.
Status FreezeFileList(const std::string& list, ListLabels labels = ListLabels::kRead);

}  // namespace sluice
