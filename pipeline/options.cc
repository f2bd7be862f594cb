#include "pipeline/options.h"

#include <glob.h>

#include <algorithm>
#include <thread>

#include "formats/image_example.h"
#include "formats/jpeg_codec.h"

namespace sluice {
namespace {

Status OutOfRange(const char* field, int64_t value, int64_t lo, int64_t hi) {
  return InvalidArgument(std::string(field) + " = " + std::to_string(value) + " is outside [" +
                         std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

#define CHECK_RANGE(field, value, lo, hi) \
  if ((value) < (lo) || (value) > (hi)) return OutOfRange(field, value, lo, hi)

}  // namespace

Result<std::vector<std::string>> ExpandGlobs(const std::vector<std::string>& patterns) {
  std::vector<std::string> files;
  for (const std::string& pattern : patterns) {
    glob_t g{};
    int rc = glob(pattern.c_str(), GLOB_NOSORT | GLOB_BRACE | GLOB_TILDE, nullptr, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
      globfree(&g);
      return NotFound("no file matches '" + pattern + "'");
    }
    if (rc != 0) {
      globfree(&g);
      return IOError("cannot expand '" + pattern + "'");
    }
    for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
    globfree(&g);
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

Result<ResolvedOptions> ResolveOptions(const v1::PipelineOptions& o) {
  ResolvedOptions r;
  if (o.files().empty()) return InvalidArgument("files: no file pattern given");
  ASSIGN_OR_RETURN(r.files, ExpandGlobs({o.files().begin(), o.files().end()}));
  switch (o.compression()) {
    case v1::COMPRESSION_NONE: r.compression = Compression::kNone; break;
    case v1::COMPRESSION_GZIP: r.compression = Compression::kGzip; break;
    case v1::COMPRESSION_ZLIB: r.compression = Compression::kZlib; break;
    default: break;
  }
  r.image_key = o.image_key().empty() ? std::string(kImageEncodedKey) : o.image_key();
  r.label_key = o.label_key().empty() ? std::string(kImageLabelKey) : o.label_key();
  r.label_offset = o.label_offset();

  const int n_files = static_cast<int>(r.files.size());
  r.cycle_length = o.interleave().cycle_length() > 0 ? o.interleave().cycle_length()
                                                     : std::min(n_files, 8);
  CHECK_RANGE("interleave.cycle_length", r.cycle_length, 1, 1024);
  r.block_length = o.interleave().block_length() > 0 ? o.interleave().block_length() : 1;
  CHECK_RANGE("interleave.block_length", r.block_length, 1, 1 << 20);
  r.shuffle_files = !o.no_shuffle_files();

  r.seed = o.seed();
  r.shuffle_buffer = o.shuffle().buffer_size();
  CHECK_RANGE("shuffle.buffer_size", r.shuffle_buffer, 0, int64_t{1} << 26);
  r.shuffle_seed = o.shuffle().seed() != 0 ? o.shuffle().seed() : r.seed;
  r.reshuffle_each_epoch = !o.shuffle().no_reshuffle_each_epoch();

  r.mode = o.mode() == v1::MODE_EVAL ? PipelineMode::kEval : PipelineMode::kTrain;
  r.height = o.image_height() > 0 ? o.image_height() : 224;
  r.width = o.image_width() > 0 ? o.image_width() : r.height;
  CHECK_RANGE("image_height", r.height, 8, 4096);
  CHECK_RANGE("image_width", r.width, 8, 4096);
  r.batch_size = o.batch_size() > 0 ? o.batch_size() : 256;
  CHECK_RANGE("batch_size", r.batch_size, 1, 65536);
  r.drop_remainder = o.drop_remainder();
  r.prefetch = o.prefetch() > 0 ? o.prefetch() : 2;
  CHECK_RANGE("prefetch", r.prefetch, 1, 64);
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  r.threads = o.threads() > 0 ? o.threads() : cores;
  CHECK_RANGE("threads", r.threads, 1, 1024);
  r.epochs = o.epochs();
  CHECK_RANGE("epochs", r.epochs, 0, int64_t{1} << 40);

  r.shard_count = o.shard().count() > 0 ? o.shard().count() : 1;
  r.shard_index = o.shard().index();
  CHECK_RANGE("shard.count", r.shard_count, 1, 1 << 20);
  CHECK_RANGE("shard.index", r.shard_index, 0, r.shard_count - 1);

  r.error_policy = o.error_policy() == v1::ERROR_POLICY_FAIL ? ErrorPolicy::kFail
                                                             : ErrorPolicy::kSkip;
  r.max_errors = o.max_errors();
  CHECK_RANGE("max_errors", r.max_errors, 0, int64_t{1} << 50);
  r.max_pixels = o.max_pixels() > 0 ? o.max_pixels() : kDefaultMaxPixels;
  r.fast_idct = !o.accurate_idct();
  r.autotune = !o.no_autotune();

  r.memory_budget_bytes =
      o.memory_budget_bytes() > 0 ? o.memory_budget_bytes() : kDefaultMemoryBudget;
  switch (o.cache().mode()) {
    case v1::CACHE_RECORDS: r.cache = CacheKind::kRecords; break;
    case v1::CACHE_DECODED: r.cache = CacheKind::kDecoded; break;
    default: r.cache = CacheKind::kNone; break;
  }
  r.cache_budget_bytes = o.cache().budget_bytes() > 0 ? o.cache().budget_bytes()
                                                       : r.memory_budget_bytes / 4;
  r.decoded_short_side = o.cache().decoded_short_side() > 0
                             ? o.cache().decoded_short_side()
                             : (std::max(r.height, r.width) * 256 + 223) / 224;
  CHECK_RANGE("cache.decoded_short_side", r.decoded_short_side, 8, 8192);

  // The batch pool is the one fixed cost: every batch being filled, waiting in the prefetch queue
  // or held by the consumer. It must leave room for the rest within the budget.
  int64_t pool_bytes = static_cast<int64_t>(r.batch_image_bytes()) * (r.prefetch + kBatchPoolExtra);
  int64_t cache_bytes = r.cache == CacheKind::kNone ? 0 : r.cache_budget_bytes;
  int64_t read_bytes = kReadBytesPerOpenFile * r.cycle_length;
  r.records_budget_bytes = r.memory_budget_bytes - pool_bytes - cache_bytes - read_bytes;
  if (r.records_budget_bytes < r.memory_budget_bytes / 16) {
    return ResourceExhausted(
        "memory_budget_bytes = " + std::to_string(r.memory_budget_bytes) + " cannot hold " +
        std::to_string(r.prefetch + kBatchPoolExtra) + " batches of " +
        std::to_string(r.batch_size) + "x" + std::to_string(r.height) + "x" +
        std::to_string(r.width) + "x3 (" + std::to_string(pool_bytes) + " bytes)" +
        (cache_bytes ? " plus a cache of " + std::to_string(cache_bytes) + " bytes" : "") +
        " and read buffers of " + std::to_string(read_bytes) +
        " bytes with room for records in flight; raise the budget or lower batch_size, image "
        "size, prefetch or the cache budget");
  }
  return r;
}

}  // namespace sluice
