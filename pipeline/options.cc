#include "pipeline/options.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include "formats/image_example.h"
#include "pipeline/file_list.h"

namespace sluice {
namespace {

// Sets `*out` to the tunable's value (`given`, or `fallback` when unset) and checks its bounds.
template <typename T>
Status Take(Tunable t, int64_t given, int64_t fallback, T* out) {
  const int64_t value = ValueOrDefault(t, given, fallback);
  RETURN_IF_ERROR(CheckTunable(t, value));
  *out = static_cast<T>(value);
  return Status::OK();
}

template <typename T>
Status Take(Tunable t, int64_t given, T* out) {
  return Take(t, given, Spec(t).default_value, out);
}

// The least decode share a job runs with: one sequential decode of an image as large as its output
// (for the DECODED cache, as large as the images it keeps): libjpeg's tables and row buffers
// (kDecodeTablesBytes, as JpegDecoder's estimate counts them) and twice the pixels (the decoded
// rows, and the image or crop they become). A smaller share would refuse every image; larger ones
// are a matter of the data (a 12-megapixel progressive photo needs ~40 MB, refused under that).
int64_t MinDecodeShareBytes(const ResolvedOptions& r) {
  constexpr int64_t kDecodeTablesBytes = int64_t{256} << 10;
  const int64_t side = r.cache == CacheKind::kDecoded ? r.decoded_short_side : 0;
  const int64_t pixels = std::max<int64_t>(int64_t{r.height} * r.width, side * side);
  return kDecodeTablesBytes + 2 * pixels * 3;
}

// What every decode thread keeps for the transform list: the resampled image that per-pixel ops
// and the output conversion work on, and a blur's float rows.
int64_t TransformScratchBytes(const ResolvedOptions& r) {
  if (r.transforms.writes_slot_directly()) return 0;
  const int64_t image = int64_t{r.height} * r.width * 3;
  bool blur = false;
  for (const PixelOp& op : r.transforms.pixel) blur |= op.kind == PixelOp::Kind::kGaussianBlur;
  // The policies' affine ops warp through a copy of the image.
  return r.threads * (image * 2 + (blur ? image * static_cast<int64_t>(sizeof(float)) : 0));
}

// Sets records_budget_bytes, max_held_record_bytes, decode_budget_bytes and shuffle_budget_bytes
// from what the budget leaves after the batch pool, the cache and the read buffers;
// ResourceExhausted when that is under a sixteenth of the budget, or the decode share under
// MinDecodeShareBytes.
Status SplitMemoryBudget(ResolvedOptions* options) {
  ResolvedOptions& r = *options;
  // The batch pool is the one fixed cost: every batch being filled, waiting in the prefetch queue
  // or held by the consumer. It must leave room for the rest within the budget.
  // With equal shares, one more batch's worth: the copies of an epoch's first samples that pad it.
  const int buffers = r.prefetch + kBatchPoolExtra + (r.equalizes() ? 1 : 0);
  // Each slot also reserves its record's features (BatchBuffer::bytes()).
  const int64_t batch_bytes = static_cast<int64_t>(r.batch_image_bytes()) +
                              r.features.slot_bytes() * static_cast<int64_t>(r.batch_size);
  int64_t pool_bytes = batch_bytes * buffers;
  int64_t cache_bytes = r.cache == CacheKind::kNone ? 0 : r.cache_budget_bytes;
  int64_t read_bytes = kReadBytesPerOpenFile * r.cycle_length;
  const int64_t rest =
      r.memory_budget_bytes - pool_bytes - cache_bytes - read_bytes - TransformScratchBytes(r);
  // A quarter for decoding: a 12-megapixel progressive photo needs ~40 MB of coefficients, so the
  // default dataset budget decodes several at once, and a small budget refuses bombs early.
  r.decode_budget_bytes = rest / 4;
  // A quarter for the shuffle buffer when there is one: as much as one record may be, so it
  // always holds at least one; small records fill it by count long before bytes.
  r.shuffle_budget_bytes = r.shuffle_buffer > 0 ? rest / 4 : 0;
  r.records_budget_bytes = rest - r.decode_budget_bytes - r.shuffle_budget_bytes;
  r.max_held_record_bytes = r.records_budget_bytes / 2;
  if (rest < r.memory_budget_bytes / 16) {
    return ResourceExhausted(
        "memory_budget_bytes = " + std::to_string(r.memory_budget_bytes) + " cannot hold " +
        std::to_string(buffers) + " batches of " + std::to_string(r.batch_size) + "x" +
        std::to_string(r.height) + "x" + std::to_string(r.width) + "x3 " +
        std::string(DTypeName(r.transforms.output.dtype)) +
        (r.features.empty() ? std::string()
                            : " with " + std::to_string(r.features.slot_bytes()) +
                                  " bytes of features a sample (max_feature_bytes " +
                                  std::to_string(r.features.max_feature_bytes) + " and the " +
                                  "fixed-size ones)") +
        " (" + std::to_string(pool_bytes) + " bytes)" +
        (cache_bytes ? " plus a cache of " + std::to_string(cache_bytes) + " bytes" : "") +
        " and read buffers of " + std::to_string(read_bytes) + " bytes and the transforms' " +
        "scratch of " + std::to_string(TransformScratchBytes(r)) +
        " bytes with room for records in flight; raise the budget or lower batch_size, image "
        "size, prefetch" +
        std::string(r.features.empty() ? "" : ", max_feature_bytes") + " or the cache budget");
  }
  const int64_t floor = MinDecodeShareBytes(r);
  if (r.decode_budget_bytes < floor) {
    return ResourceExhausted(
        "memory_budget_bytes = " + std::to_string(r.memory_budget_bytes) + " leaves " +
        std::to_string(r.decode_budget_bytes) + " bytes for decoding, under the " +
        std::to_string(floor) + " bytes one decode of a " + std::to_string(r.height) + "x" +
        std::to_string(r.width) + " image needs" +
        (r.cache == CacheKind::kDecoded
             ? " (at the DECODED cache's short side " + std::to_string(r.decoded_short_side) + ")"
             : std::string()) +
        "; raise memory_budget_bytes by " + std::to_string(4 * (floor - r.decode_budget_bytes)) +
        " bytes or more");
  }
  return Status::OK();
}

// The name of the folder that holds `path` (std::filesystem's parent_path().filename()).
std::string_view FolderName(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return {};
  std::string_view parent = path.substr(0, slash);
  while (!parent.empty() && parent.back() == '/') parent.remove_suffix(1);
  const size_t start = parent.rfind('/');
  return start == std::string_view::npos ? parent : parent.substr(start + 1);
}

// A file list's files sorted by path (as ExpandGlobs sorts) with their labels, and the list's
// size and modification time when it was read.
struct ParsedFileList {
  std::vector<std::string> files;
  std::vector<int64_t> labels;
  struct stat list_stat {};
};

// The list `o.file_list` (or `list`) names, as an absolute path: the key of frozen lists.
std::string AbsoluteListPath(const std::string& list) {
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(list, ec);
  return ec ? list : absolute.lexically_normal().string();
}

bool SameStat(const struct stat& a, const struct stat& b) {
  return a.st_size == b.st_size && a.st_mtim.tv_sec == b.st_mtim.tv_sec &&
         a.st_mtim.tv_nsec == b.st_mtim.tv_nsec && a.st_ino == b.st_ino;
}

// Reads and checks `list`: a listed file that does not exist fails (as tf.data's would), naming
// it and its line; so does one listed twice.
Result<ParsedFileList> ParseFileList(const std::string& list, ListLabels labels) {
  ParsedFileList parsed;
  // Stat first: a list replaced while it is read is then seen as changed by the next stream.
  if (::stat(list.c_str(), &parsed.list_stat) != 0) return ErrnoStatus(errno, "stat", list);
  ASSIGN_OR_RETURN(std::vector<ListedFile> listed, ReadFileList(list, labels));
  for (const ListedFile& f : listed) {
    struct stat st {};
    if (::stat(f.path.c_str(), &st) != 0) {
      return ErrnoStatus(errno, "stat", f.path)
          .WithContext(list + ":" + std::to_string(f.line) + ": path");
    }
    if (!S_ISREG(st.st_mode)) {
      return InvalidArgument(list + ":" + std::to_string(f.line) + ": path: '" + f.path +
                             "' is not a regular file");
    }
  }
  std::stable_sort(listed.begin(), listed.end(),
                   [](const ListedFile& a, const ListedFile& b) { return a.path < b.path; });
  for (size_t i = 1; i < listed.size(); ++i) {
    if (listed[i].path == listed[i - 1].path) {
      return InvalidArgument(list + ":" + std::to_string(listed[i].line) + ": path: '" +
                             listed[i].path + "' is listed twice (also line " +
                             std::to_string(listed[i - 1].line) + ")");
    }
  }
  parsed.files.reserve(listed.size());
  parsed.labels.reserve(listed.size());
  for (ListedFile& f : listed) {
    parsed.files.push_back(std::move(f.path));
    parsed.labels.push_back(f.label);
  }
  return parsed;
}

// The lists FreezeFileList kept, by absolute path and whether labels were read: one per
// file_list dataset of the server's configuration, so bounded by it.
struct FrozenList {
  ParsedFileList parsed;
  bool warned = false;  // that the list changed since
};
std::mutex frozen_lists_mu;
using FrozenListKey = std::pair<std::string, ListLabels>;
std::map<FrozenListKey, std::shared_ptr<FrozenList>>& FrozenLists() {  // GUARDED_BY frozen_lists_mu
  static auto* lists = new std::map<FrozenListKey, std::shared_ptr<FrozenList>>();
  return *lists;
}

// The frozen parse of `list`, or null; warns once when the list changed since it was frozen.
std::shared_ptr<const FrozenList> FindFrozenList(const std::string& list, ListLabels labels) {
  const std::string key = AbsoluteListPath(list);
  std::lock_guard<std::mutex> lock(frozen_lists_mu);
  auto it = FrozenLists().find({key, labels});
  if (it == FrozenLists().end()) return nullptr;
  FrozenList& frozen = *it->second;
  if (!frozen.warned) {
    struct stat now {};
    if (::stat(key.c_str(), &now) != 0 || !SameStat(now, frozen.parsed.list_stat)) {
      frozen.warned = true;
      std::fprintf(stderr,
                   "sluice: WARNING: file_list %s changed since the server read it at start-up; "
                   "its files and labels as first read are served (restart the server to serve "
                   "the list as it is now)\n",
                   key.c_str());
    }
  }
  return it->second;
}

// The files of o.file_list with their labels: the list's frozen parse (FreezeFileList), else the
// list as it is now.
Status ResolveFileList(const v1::PipelineOptions& o, ResolvedOptions* r) {
  if (!o.files().empty()) {
    return InvalidArgument(
        "file_list: give files or file_list, not both (a list labels its files itself; file "
        "patterns are labelled by folder name)");
  }
  if (o.format() != v1::SOURCE_FORMAT_AUTO && o.format() != v1::SOURCE_FORMAT_IMAGE_FILES) {
    return InvalidArgument("file_list: lists image files; format " +
                           v1::SourceFormat_Name(o.format()) + " cannot go with it");
  }
  const ListLabels labels = o.unlabeled() ? ListLabels::kIgnore : ListLabels::kRead;
  if (std::shared_ptr<const FrozenList> frozen = FindFrozenList(o.file_list(), labels)) {
    r->files = frozen->parsed.files;
    r->file_labels = frozen->parsed.labels;
  } else {
    ASSIGN_OR_RETURN(ParsedFileList parsed, ParseFileList(o.file_list(), labels));
    r->files = std::move(parsed.files);
    r->file_labels = std::move(parsed.labels);
  }
  r->kinds.assign(r->files.size(), SourceKind::kImage);
  return Status::OK();
}

// The one path `pattern` names when nothing in it is a wildcard to glob() (as ExpandGlobs calls
// it): its backslash escapes removed. nullopt when it has an unescaped * ? [ { or a leading ~.
std::optional<std::string> LiteralPath(std::string_view pattern) {
  std::string path;
  path.reserve(pattern.size());
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\') {
      if (++i == pattern.size()) return std::nullopt;
      path += pattern[i];
    } else if (c == '*' || c == '?' || c == '[' || c == '{' || (c == '~' && i == 0)) {
      return std::nullopt;
    } else {
      path += c;
    }
  }
  return path;
}

// The name of a transform op that moves pixels in a way BoxMap does not model (it follows crops,
// resizes and flips only), or nullptr: rotate and the policies' shears, translates and rotations.
const char* PixelMovingOpName(const v1::TransformOp& op) {
  switch (op.op_case()) {
    case v1::TransformOp::kRotate:
      return "rotate";
    case v1::TransformOp::kTrivialAugmentWide:
      return "trivial_augment_wide";
    case v1::TransformOp::kRandAugment:
      return "rand_augment";
    default:
      return nullptr;
  }
}

// What unlabeled and boxes cannot go with: a num_classes or label_offset (there are no labels),
// mixup or cutmix, which mix labels (and give a mixed image no one set of boxes), and with boxes,
// ops that move pixels where the boxes would not follow.
Status CheckUnlabeledAndBoxes(const v1::PipelineOptions& o) {
  if (o.boxes().enabled()) {
    for (int i = 0; i < o.transforms_size(); ++i) {
      const char* name = PixelMovingOpName(o.transforms(i));
      if (name == nullptr) continue;
      return InvalidArgument("transforms[" + std::to_string(i) + "]." + name +
                             " with boxes.enabled: it moves pixels (rotations, shears or "
                             "translations) and boxes follow crops, resizes and flips only");
    }
  }
  if (o.unlabeled() && o.num_classes() != 0) {
    return InvalidArgument("num_classes = " + std::to_string(o.num_classes()) +
                           " with unlabeled: true: an unlabeled dataset has no classes");
  }
  if (o.unlabeled() && o.label_offset() != 0) {
    return InvalidArgument("label_offset = " + std::to_string(o.label_offset()) +
                           " with unlabeled: true: an unlabeled dataset has no label to offset");
  }
  if (!o.unlabeled() && !o.boxes().enabled()) return Status::OK();
  for (int i = 0; i < o.transforms_size(); ++i) {
    const v1::TransformOp& op = o.transforms(i);
    if (op.op_case() != v1::TransformOp::kMixup && op.op_case() != v1::TransformOp::kCutmix) {
      continue;
    }
    const std::string what =
        "transforms[" + std::to_string(i) + "]." + (op.has_mixup() ? "mixup" : "cutmix");
    if (o.unlabeled()) {
      return InvalidArgument(what +
                             " with unlabeled: true: it mixes labels, and an unlabeled "
                             "dataset has none");
    }
    return InvalidArgument(what + " with boxes.enabled: a mixed image has no one set of boxes");
  }
  return Status::OK();
}

// When every file is an image file: a feature they cannot carry that every record must have (a
// SCALAR or FIXED one without a default, a MULTI_HOT one without allow_missing) would skip every
// record, so it is refused. An image file's record holds its image, its file name and (unless
// unlabeled) its label; a LIST feature is an empty row and boxes are none.
Status CheckFeaturesOnImageFiles(const v1::PipelineOptions& o, const ResolvedOptions& r) {
  if (r.features.columns.empty() || r.kinds.empty()) return Status::OK();
  for (SourceKind kind : r.kinds) {
    if (kind != SourceKind::kImage) return Status::OK();
  }
  for (size_t i = 0; i < r.features.columns.size(); ++i) {
    const FeatureColumn& c = r.features.columns[i];
    if (c.key == r.image_key || c.key == kImageFilenameKey ||
        (!r.unlabeled && c.key == r.label_key)) {
      continue;
    }
    const bool required =
        c.shape == FeatureShape::kMultiHot
            ? !c.allow_missing
            : c.shape != FeatureShape::kList && !c.default_value && !c.default_bytes;
    if (!required) continue;
    return InvalidArgument(
        "features[" + std::to_string(i) + "] ('" + c.key + "') on " +
        (o.file_list().empty() ? std::string("files") : "file_list " + o.file_list()) +
        " of image files only: image files carry no feature but their label; " +
        (c.shape == FeatureShape::kMultiHot ? "set allow_missing" : "give a default") +
        " or use a TFRecord/tar source");
  }
  return Status::OK();
}

}  // namespace

Status ResolveSources(const v1::PipelineOptions& o, ResolvedOptions* r) {
  r->kinds.clear();
  r->file_labels.clear();
  r->classes.clear();
  bool images = false;
  for (const std::string& path : r->files) {
    SourceKind kind = DetectSourceKind(path);
    switch (o.format()) {
      case v1::SOURCE_FORMAT_TFRECORD: kind = SourceKind::kTFRecord; break;
      case v1::SOURCE_FORMAT_WEBDATASET: kind = SourceKind::kTar; break;
      case v1::SOURCE_FORMAT_IMAGE_FILES: kind = SourceKind::kImage; break;
      default: break;
    }
    images = images || kind == SourceKind::kImage;
    r->kinds.push_back(kind);
  }
  if (!images) return Status::OK();
  // Views into r->files: one label lookup per file, no string per file (1.28M for ImageNet).
  std::vector<std::string_view> folders(r->files.size());
  std::vector<std::string_view> names;
  for (size_t i = 0; i < r->files.size(); ++i) {
    if (r->kinds[i] != SourceKind::kImage) continue;
    folders[i] = FolderName(r->files[i]);
    if (names.empty() || names.back() != folders[i]) names.push_back(folders[i]);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  r->classes.assign(names.begin(), names.end());
  r->file_labels.assign(r->files.size(), -1);
  for (size_t i = 0; i < r->files.size(); ++i) {
    if (r->kinds[i] != SourceKind::kImage) continue;
    r->file_labels[i] = std::lower_bound(names.begin(), names.end(), folders[i]) - names.begin();
  }
  return Status::OK();
}

Result<std::vector<std::string>> ExpandGlobs(const std::vector<std::string>& patterns) {
  std::vector<std::string> files;
  for (const std::string& pattern : patterns) {
    if (std::optional<std::string> path = LiteralPath(pattern)) {
      files.push_back(std::move(*path));
      continue;
    }
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

Status CheckLiteralPathsExist(const std::vector<std::string>& patterns) {
  for (const std::string& pattern : patterns) {
    const std::optional<std::string> path = LiteralPath(pattern);
    std::error_code ec;
    if (path && !std::filesystem::exists(*path, ec)) {
      return NotFound("no file matches '" + pattern + "'");
    }
  }
  return Status::OK();
}

Status FreezeFileList(const std::string& list, ListLabels labels) {
  auto frozen = std::make_shared<FrozenList>();
  ASSIGN_OR_RETURN(frozen->parsed, ParseFileList(list, labels));
  std::lock_guard<std::mutex> lock(frozen_lists_mu);
  FrozenLists()[{AbsoluteListPath(list), labels}] = std::move(frozen);
  return Status::OK();
}

Result<ResolvedOptions> ResolveOptions(const v1::PipelineOptions& o, int job_consumers) {
  ResolvedOptions r;
  r.job_consumers = job_consumers;
  if (!o.file_list().empty()) {
    RETURN_IF_ERROR(ResolveFileList(o, &r));
  } else {
    if (o.files().empty()) return InvalidArgument("files: no file pattern given (nor a file_list)");
    ASSIGN_OR_RETURN(r.files, ExpandGlobs({o.files().begin(), o.files().end()}));
    RETURN_IF_ERROR(ResolveSources(o, &r));
  }
  switch (o.compression()) {
    case v1::COMPRESSION_NONE: r.compression = Compression::kNone; break;
    case v1::COMPRESSION_GZIP: r.compression = Compression::kGzip; break;
    case v1::COMPRESSION_ZLIB: r.compression = Compression::kZlib; break;
    default: break;
  }
  r.image_key = o.image_key().empty() ? std::string(kImageEncodedKey) : o.image_key();
  r.label_key = o.label_key().empty() ? std::string(kImageLabelKey) : o.label_key();
  r.label_offset = o.label_offset();
  r.unlabeled = o.unlabeled();
  ASSIGN_OR_RETURN(r.features, CompileFeatureSchema(o));
  RETURN_IF_ERROR(CheckUnlabeledAndBoxes(o));
  RETURN_IF_ERROR(CheckFeaturesOnImageFiles(o, r));
  if (r.unlabeled) {
    // No label is read, so none is written for image files either (their folder or list line).
    r.file_labels.clear();
    r.classes.clear();
  }

  const int64_t n_files = static_cast<int64_t>(r.files.size());
  RETURN_IF_ERROR(Take(Tunable::kCycleLength, o.interleave().cycle_length(),
                       std::min(n_files, Spec(Tunable::kCycleLength).default_value),
                       &r.cycle_length));
  RETURN_IF_ERROR(Take(Tunable::kBlockLength, o.interleave().block_length(), &r.block_length));
  r.shuffle_files = !o.no_shuffle_files();

  r.seed = o.seed();
  RETURN_IF_ERROR(Take(Tunable::kShuffleBuffer, o.shuffle().buffer_size(), &r.shuffle_buffer));
  r.shuffle_seed = o.shuffle().seed() != 0 ? o.shuffle().seed() : r.seed;
  r.reshuffle_each_epoch = !o.shuffle().no_reshuffle_each_epoch();

  r.mode = o.mode() == v1::MODE_EVAL ? PipelineMode::kEval : PipelineMode::kTrain;
  RETURN_IF_ERROR(Take(Tunable::kImageHeight, o.image_height(), &r.height));
  RETURN_IF_ERROR(Take(Tunable::kImageWidth, o.image_width(), r.height, &r.width));
  RETURN_IF_ERROR(Take(Tunable::kBatchSize, o.batch_size(), &r.batch_size));
  r.drop_remainder = o.drop_remainder();
  RETURN_IF_ERROR(Take(Tunable::kPrefetch, o.prefetch(), &r.prefetch));
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  RETURN_IF_ERROR(Take(Tunable::kThreads, o.threads(), cores, &r.threads));
  RETURN_IF_ERROR(Take(Tunable::kEpochs, o.epochs(), &r.epochs));

  RETURN_IF_ERROR(Take(Tunable::kShardCount, o.shard().count(), &r.shard_count));
  r.shard_index = o.shard().index();
  RETURN_IF_ERROR(CheckRange("shard.index", r.shard_index, 0, r.shard_count - 1));
  r.shard_consumers = o.shard().consumers() == 0 ? r.shard_count : o.shard().consumers();
  if (r.shard_consumers < 1 || r.shard_consumers > r.shard_count ||
      r.shard_count % r.shard_consumers != 0) {
    return InvalidArgument("shard.consumers " + std::to_string(o.shard().consumers()) +
                           " does not divide shard.count " + std::to_string(r.shard_count));
  }
  switch (o.equal_shares()) {
    case v1::EQUAL_SHARES_DROP:
      r.equal_shares = EqualShares::kDrop;
      break;
    case v1::EQUAL_SHARES_PAD:
      r.equal_shares = EqualShares::kPad;
      break;
    case v1::EQUAL_SHARES_OFF:
      r.equal_shares = EqualShares::kOff;
      break;
    case v1::EQUAL_SHARES_DEFAULT:
      r.equal_shares = r.mode == PipelineMode::kEval ? EqualShares::kPad : EqualShares::kDrop;
      break;
    default:
      return InvalidArgument("equal_shares = " + std::to_string(o.equal_shares()) +
                             " is not a sluice.v1.EqualShares");
  }

  r.error_policy = o.error_policy() == v1::ERROR_POLICY_FAIL ? ErrorPolicy::kFail
                                                             : ErrorPolicy::kSkip;
  RETURN_IF_ERROR(Take(Tunable::kMaxErrors, o.max_errors(), &r.max_errors));
  RETURN_IF_ERROR(Take(Tunable::kSkipWarnPercent, o.skip_warn_percent(), &r.skip_warn_percent));
  RETURN_IF_ERROR(CheckRange("num_classes", o.num_classes(), 0, INT32_MAX));
  // Files labelled by folder have as many classes as folders.
  r.num_classes = o.num_classes() != 0 ? o.num_classes() : static_cast<int>(r.classes.size());
  RETURN_IF_ERROR(Take(Tunable::kMaxPixels, o.max_pixels(), &r.max_pixels));
  r.fast_idct = !o.accurate_idct();
  r.alpha = o.alpha() == v1::ALPHA_COMPOSITE_WHITE   ? Alpha::kCompositeWhite
            : o.alpha() == v1::ALPHA_COMPOSITE_BLACK ? Alpha::kCompositeBlack
                                                     : Alpha::kDrop;
  r.autotune = !o.no_autotune();

  RETURN_IF_ERROR(
      Take(Tunable::kMemoryBudget, o.memory_budget_bytes(), &r.memory_budget_bytes));
  switch (o.cache().mode()) {
    case v1::CACHE_RECORDS: r.cache = CacheKind::kRecords; break;
    case v1::CACHE_DECODED: r.cache = CacheKind::kDecoded; break;
    default: r.cache = CacheKind::kNone; break;
  }
  r.cache_budget_bytes = o.cache().budget_bytes() > 0 ? o.cache().budget_bytes()
                                                       : r.memory_budget_bytes / 4;
  // The cache keeps images a little larger than the output (256 for 224) so that random crops
  // still have pixels to choose from.
  RETURN_IF_ERROR(Take(Tunable::kDecodedShortSide, o.cache().decoded_short_side(),
                       (std::max(r.height, r.width) * 256 + 223) / 224, &r.decoded_short_side));

  ASSIGN_OR_RETURN(r.transforms, CompileTransforms(o.transforms(), r.mode == PipelineMode::kEval,
                                                   r.height, r.width, r.num_classes));
  if (r.cache == CacheKind::kDecoded) {
    // The cache keeps images shrunk to decoded_short_side: the list's first op sees them at that
    // scale, which only ops that take fractions of the image (or resize it) do not notice.
    const GeometryOp& first = r.transforms.geometry.front();
    if (first.kind == GeometryOp::Kind::kCenterCrop ||
        first.kind == GeometryOp::Kind::kRandomCrop || first.kind == GeometryOp::Kind::kFlip) {
      return InvalidArgument(
          "cache.mode: CACHE_DECODED keeps images with their shorter side at decoded_short_side " +
          std::to_string(r.decoded_short_side) + ", and the transform list's first geometric op "
          "(a crop of absolute size, or a flip before one) would cut a different part of them "
          "than of the original: start the list with a preset, random_resized_crop or resize, or "
          "cache RECORDS instead");
    }
  }

  RETURN_IF_ERROR(SplitMemoryBudget(&r));
  return r;
}

}  // namespace sluice
