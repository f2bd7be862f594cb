// `sluice inspect FILE...`: reads TFRecord shards end to end, verifying both CRCs of every record,
// and summarizes what is in them: records, bytes and damage per file, the feature keys and kinds,
// the label histogram and JPEG, PNG and WebP sizes (from headers only). Image files (given as
// files, labelled by folder as the pipeline labels them, or by --file-list) are one record each:
// their classes with their counts, and the paths of files that are neither JPEG, PNG nor WebP.
// WebDataset tar shards are read sample by sample, every header checksum verified. --unlabeled
// reads the files as the pipeline reads an unlabeled dataset's (no label; a --file-list of bare
// paths). A quoted pattern is expanded as the pipeline expands it. Exit status 1 when anything is
// corrupt or not an image, or a tar shard lacks its end-of-archive marker (it may be cut short) or
// has an index (`.idx`) that is not its own (stale, or not a tar index).
#include <fmt/format.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "formats/compression.h"
#include "formats/example_scanner.h"
#include "formats/file.h"
#include "formats/image_example.h"
#include "formats/jpeg_header.h"
#include "formats/png_codec.h"
#include "formats/record_index.h"
#include "formats/record_reader_factory.h"
#include "formats/source_kind.h"
#include "formats/tar_index.h"
#include "formats/tar_sample_reader.h"
#include "formats/tfrecord_reader.h"
#include "formats/webp_codec.h"
#include "pipeline/file_list.h"
#include "pipeline/options.h"
#include "server/commands.h"
#include "server/tools/progress.h"

namespace sluice {
namespace {

constexpr int kMaxProblemsShownPerFile = 20;
// Image files that could not be read kept as rows (named on stderr, listed in the JSON); the rest
// are counted.
constexpr uint64_t kMaxDamagedImageRows = 1000;

struct InspectOptions {
  std::vector<std::string> files;
  std::string file_list;
  bool json = false;
  std::string image_key{kImageEncodedKey};
  std::string label_key{kImageLabelKey};
  // As PipelineOptions.unlabeled: no label is read (a tar sample's cls is an ordinary member,
  // image files get no class from their folder) and --file-list lines are bare paths.
  bool unlabeled = false;
  std::string compression = "auto";
  int threads = 0;
};

struct SizeStats {
  uint64_t count = 0;
  int64_t min = std::numeric_limits<int64_t>::max();
  int64_t max = 0;
  double sum = 0;
  void Add(int64_t v) {
    ++count;
    min = std::min(min, v);
    max = std::max(max, v);
    sum += static_cast<double>(v);
  }
  void Merge(const SizeStats& o) {
    count += o.count;
    min = std::min(min, o.min);
    max = std::max(max, o.max);
    sum += o.sum;
  }
  double mean() const { return count ? sum / static_cast<double>(count) : 0; }
};

// What one file holds; files are inspected in parallel and merged in order.
struct FileReport {
  std::string path;
  std::string kind;  // SourceKindName
  std::string compression;
  uint64_t records = 0;     // a tar's samples
  uint64_t corrupt = 0;     // framing damage: CRC mismatch, truncation, unreadable
  uint64_t malformed = 0;   // records whose bytes are not a tf.train.Example
  uint64_t bytes = 0;       // size on disk
  uint64_t data_bytes = 0;  // sum of record lengths (uncompressed)
  // Doubts about a file read to its end without a bad record (a tar shard without its
  // end-of-archive marker, maybe cut short); in problems too.
  std::vector<std::string> warnings;
  std::vector<std::string> problems;
  uint64_t problems_not_shown = 0;
  std::optional<std::string> stopped;  // why reading ended before the end of the file
  // A tar shard's index (<shard>.idx): "none", "matches", or why it does not (also a warning).
  std::optional<std::string> index;

  std::map<std::string, FeatureKind> features;
  std::map<std::string, bool> mixed_kind;  // key seen with more than one kind
  std::map<int64_t, uint64_t> labels;
  uint64_t records_without_label = 0;
  SizeStats width, height, pixels;
  uint64_t jpeg_progressive = 0;
  uint64_t not_jpeg = 0;  // neither JPEG, PNG nor WebP (or a header that does not read)
  std::vector<std::string> not_images;  // image files that are neither JPEG, PNG nor WebP
  std::map<std::string, uint64_t> color_spaces;
  SizeStats png_width, png_height, png_pixels;
  uint64_t png_interlaced = 0;
  std::map<std::string, uint64_t> png_layouts;  // "RGBA 8-bit"
  SizeStats webp_width, webp_height, webp_pixels;
  uint64_t webp_lossless = 0, webp_alpha = 0, webp_animated = 0;

  void Problem(std::string message) {
    if (problems.size() < kMaxProblemsShownPerFile) {
      problems.push_back(std::move(message));
    } else {
      ++problems_not_shown;
    }
  }
};

void ScanRecord(std::string_view record, uint64_t offset, const InspectOptions& opt,
                FileReport* r) {
  FeatureView image, label;
  bool have_image = false, have_label = false;
  Status s = ForEachFeature(record, [&](std::string_view key, const FeatureView& v) {
    auto [it, inserted] = r->features.try_emplace(std::string(key), v.kind());
    if (!inserted && it->second != v.kind()) r->mixed_kind[it->first] = true;
    if (key == opt.image_key) {
      image = v;
      have_image = true;
    } else if (!opt.unlabeled && key == opt.label_key) {
      label = v;
      have_label = true;
    }
  });
  if (!s.ok()) {
    ++r->malformed;
    r->Problem(fmt::format("{} in record at {}:{}", s.message(), r->path, offset));
    return;
  }
  // Unlabeled: no label is looked for, so none is missing.
  if (!opt.unlabeled) {
    if (have_label && label.kind() == FeatureKind::kInt64) {
      Result<int64_t> value = label.FirstInt64(opt.label_key);
      if (value.ok()) {
        ++r->labels[*value];
      } else {
        ++r->records_without_label;
      }
    } else {
      ++r->records_without_label;
    }
  }
  if (have_image && image.kind() == FeatureKind::kBytes) {
    Result<std::string_view> bytes = image.FirstBytes(opt.image_key);
    if (!bytes.ok()) return;
    if (IsPng(*bytes)) {
      Result<PngHeader> png = ReadPngHeader(*bytes);
      if (!png.ok()) {
        ++r->not_jpeg;
        return;
      }
      r->png_width.Add(png->width);
      r->png_height.Add(png->height);
      r->png_pixels.Add(int64_t{png->width} * png->height);
      if (png->interlaced) ++r->png_interlaced;
      ++r->png_layouts[fmt::format("{} {}-bit", PngColorTypeName(png->color_type), png->bit_depth)];
      return;
    }
    if (IsWebp(*bytes)) {
      Result<WebpHeader> webp = ReadWebpHeader(*bytes);
      if (!webp.ok()) {
        ++r->not_jpeg;
        return;
      }
      r->webp_width.Add(webp->width);
      r->webp_height.Add(webp->height);
      r->webp_pixels.Add(int64_t{webp->width} * webp->height);
      if (webp->coding == WebpCoding::kLossless) ++r->webp_lossless;
      if (webp->has_alpha) ++r->webp_alpha;
      if (webp->animated) ++r->webp_animated;
      return;
    }
    Result<JpegHeader> header = ReadJpegHeader(*bytes);
    if (!header.ok()) {
      ++r->not_jpeg;
      return;
    }
    r->width.Add(header->width);
    r->height.Add(header->height);
    r->pixels.Add(int64_t{header->width} * header->height);
    if (header->progressive) ++r->jpeg_progressive;
    ++r->color_spaces[std::string(JpegColorSpaceName(header->color_space))];
  }
}

// Whether a tar shard's index is there and describes it exactly: the index the shard's own
// samples make (BuildTarIndex), compared line by line. "none", "matches", or "unusable" (does not
// parse as a tar index), "unchecked" (the shard does not read cleanly) or "stale", with *problem
// saying why.
std::string TarIndexState(const std::string& path, std::optional<std::string>* problem) {
  const std::string index_path = IndexPathFor(path);
  if (!GetFileSize(index_path).ok()) return "none";
  // A compressed shard's offsets are in its uncompressed stream, of a size not known here.
  Result<Compression> compression = DetectTarCompression(path);
  Result<uint64_t> shard_bytes = GetFileSize(path);
  Result<std::vector<TarIndexSample>> index = ReadTarIndex(
      index_path, compression.ok() && *compression == Compression::kNone && shard_bytes.ok()
                      ? *shard_bytes
                      : std::numeric_limits<uint64_t>::max());
  if (!index.ok()) {
    *problem = index.status().message();
    return "unusable";
  }
  Result<std::vector<TarIndexSample>> actual = BuildTarIndex(path);
  if (!actual.ok()) {
    *problem = index_path + " cannot be checked: " + actual.status().message();
    return "unchecked";
  }
  for (size_t i = 0; i < std::min(index->size(), actual->size()); ++i) {
    if ((*index)[i] != (*actual)[i]) {
      *problem = "stale tar index " + index_path + ":" + std::to_string(i + 2) + ": sample " +
                 std::to_string(i) + " is not the shard's (run `sluice index " + path + "`)";
      return "stale";
    }
  }
  if (index->size() != actual->size()) {
    *problem = "stale tar index " + index_path + ": " + std::to_string(index->size()) +
               " samples, the shard has " + std::to_string(actual->size()) +
               " (run `sluice index " + path + "`)";
    return "stale";
  }
  return "matches";
}

// A file of any kind (formats/source_kind.h) read as the pipeline reads it: a WebDataset tar
// shard's samples are its records, every header checksum verified; an image file is one record
// (formats/image_file_reader.h) holding `label` (nullopt: none), and any error reading it is
// final.
FileReport InspectFile(const std::string& path, SourceKind kind, std::optional<int64_t> label,
                       const InspectOptions& opt, Progress* progress) {
  FileReport r;
  r.path = path;
  r.kind = SourceKindName(kind);
  const bool image = kind == SourceKind::kImage;
  if (!image) {
    Result<uint64_t> size = GetFileSize(path);
    if (!size.ok()) {
      ++r.corrupt;
      r.stopped = size.status().message();
      return r;
    }
    r.bytes = *size;
  }
  RecordReaderOptions ro;
  ro.image_key = opt.image_key;
  // Unlabeled: as the pipeline reads such a dataset (pipeline/file_reader_source.cc).
  ro.label_key = opt.unlabeled ? std::string() : opt.label_key;
  ro.label = label;
  if (opt.compression != "auto") ro.stream.compression = ParseCompression(opt.compression).value();
  // An image file is one, opened or not (PrintHuman summarises image files by it).
  if (image) r.compression = "image";
  Result<std::unique_ptr<RecordReader>> reader = OpenRecordReader(path, kind, ro);
  if (!reader.ok()) {
    ++r.corrupt;
    r.stopped = reader.status().message();
    return r;
  }
  if (!image) {
    Result<Compression> detected = ro.stream.compression
                                       ? Result<Compression>(*ro.stream.compression)
                                   : kind == SourceKind::kTar ? DetectTarCompression(path)
                                                              : DetectFileCompression(path);
    r.compression = detected.ok() ? std::string(CompressionName(*detected)) : "unknown";
  }

  uint64_t last_offset = 0;
  std::string record;
  for (;;) {
    bool eof = false;
    Status s = (*reader)->ReadRecordInto(&record, &eof);
    uint64_t offset = (*reader)->record_offset() + (*reader)->record_length();
    if (progress && offset > last_offset) progress->Add(offset - last_offset);
    last_offset = std::max(last_offset, offset);
    if (s.ok()) {
      if (eof) {
        if (std::string w = (*reader)->warning(); !w.empty()) {
          r.warnings.push_back(w);
          r.Problem(std::move(w));
        }
        break;
      }
      ++r.records;
      r.data_bytes += (*reader)->record_length();
      ScanRecord(record, (*reader)->record_offset(), opt, &r);
      continue;
    }
    ++r.corrupt;
    if (!image && (*reader)->can_continue()) {
      r.Problem(s.message());
      continue;
    }
    r.stopped = s.message();
    break;
  }
  if (image) {
    r.bytes = r.data_bytes;
    if (r.not_jpeg > 0) r.not_images.push_back(path);
  }
  if (kind == SourceKind::kTar) {
    std::optional<std::string> problem;
    r.index = TarIndexState(path, &problem);
    if (problem) {
      r.warnings.push_back(*problem);
      r.Problem(std::move(*problem));
    }
  }
  return r;
}

struct Totals {
  uint64_t records = 0, corrupt = 0, malformed = 0, bytes = 0, data_bytes = 0, warnings = 0;
  FileReport merged;  // features, labels and JPEG statistics of all files
};

// Adds what r found to t (its problems and rows stay r's).
void MergeInto(const FileReport& r, Totals* t) {
  FileReport& m = t->merged;
  t->records += r.records;
  t->corrupt += r.corrupt;
  t->malformed += r.malformed;
  t->bytes += r.bytes;
  t->data_bytes += r.data_bytes;
  t->warnings += r.warnings.size();
  for (const auto& [key, kind] : r.features) {
    auto [it, inserted] = m.features.try_emplace(key, kind);
    if (!inserted && it->second != kind) m.mixed_kind[key] = true;
  }
  for (const auto& [key, mixed] : r.mixed_kind) m.mixed_kind[key] = mixed;
  for (const auto& [label, n] : r.labels) m.labels[label] += n;
  m.records_without_label += r.records_without_label;
  m.width.Merge(r.width);
  m.height.Merge(r.height);
  m.pixels.Merge(r.pixels);
  m.jpeg_progressive += r.jpeg_progressive;
  m.not_jpeg += r.not_jpeg;
  m.not_images.insert(m.not_images.end(), r.not_images.begin(), r.not_images.end());
  for (const auto& [cs, n] : r.color_spaces) m.color_spaces[cs] += n;
  m.png_width.Merge(r.png_width);
  m.png_height.Merge(r.png_height);
  m.png_pixels.Merge(r.png_pixels);
  m.png_interlaced += r.png_interlaced;
  for (const auto& [layout, n] : r.png_layouts) m.png_layouts[layout] += n;
  m.webp_width.Merge(r.webp_width);
  m.webp_height.Merge(r.webp_height);
  m.webp_pixels.Merge(r.webp_pixels);
  m.webp_lossless += r.webp_lossless;
  m.webp_alpha += r.webp_alpha;
  m.webp_animated += r.webp_animated;
}

void MergeInto(const Totals& o, Totals* t) {
  FileReport r = o.merged;
  r.records = o.records;
  r.corrupt = o.corrupt;
  r.malformed = o.malformed;
  r.bytes = o.bytes;
  r.data_bytes = o.data_bytes;
  MergeInto(r, t);
}

std::string KindOf(const FileReport& m, const std::string& key, FeatureKind kind) {
  return m.mixed_kind.count(key) ? "mixed" : std::string(FeatureKindName(kind));
}

nlohmann::json ToJson(const std::vector<FileReport>& reports, const Totals& t, double seconds,
                      const std::vector<std::string>& classes, bool unlabeled) {
  using nlohmann::json;
  json files = json::array();
  for (const FileReport& r : reports) {
    json f = {{"path", r.path},           {"kind", r.kind},
              {"records", r.records},     {"corrupt", r.corrupt},
              {"bytes", r.bytes},         {"data_bytes", r.data_bytes},
              {"malformed", r.malformed}, {"compression", r.compression}};
    if (r.stopped) f["stopped"] = *r.stopped;
    if (r.index) f["index"] = *r.index;
    json problems = r.problems;
    f["problems"] = problems;
    f["warnings"] = r.warnings;
    files.push_back(std::move(f));
  }
  json features = json::object();
  for (const auto& [key, kind] : t.merged.features) features[key] = KindOf(t.merged, key, kind);
  json labels = json::object();
  for (const auto& [label, n] : t.merged.labels) labels[std::to_string(label)] = n;
  const FileReport& m = t.merged;
  json jpeg = {{"count", m.width.count},
               {"not_jpeg", m.not_jpeg},
               {"progressive", m.jpeg_progressive},
               {"color_spaces", m.color_spaces}};
  if (m.width.count) {
    jpeg["width"] = {{"min", m.width.min}, {"mean", m.width.mean()}, {"max", m.width.max}};
    jpeg["height"] = {{"min", m.height.min}, {"mean", m.height.mean()}, {"max", m.height.max}};
    jpeg["mean_pixels"] = m.pixels.mean();
  }
  json class_list = json::array();
  for (size_t k = 0; k < classes.size(); ++k) {
    const auto n = m.labels.find(static_cast<int64_t>(k));
    class_list.push_back(
        {{"name", classes[k]}, {"label", k}, {"files", n == m.labels.end() ? 0 : n->second}});
  }
  json png = {
      {"count", m.png_width.count}, {"interlaced", m.png_interlaced}, {"layouts", m.png_layouts}};
  if (m.png_width.count) {
    png["width"] = {
        {"min", m.png_width.min}, {"mean", m.png_width.mean()}, {"max", m.png_width.max}};
    png["height"] = {
        {"min", m.png_height.min}, {"mean", m.png_height.mean()}, {"max", m.png_height.max}};
    png["mean_pixels"] = m.png_pixels.mean();
  }
  json webp = {{"count", m.webp_width.count},
               {"lossless", m.webp_lossless},
               {"alpha", m.webp_alpha},
               {"animated", m.webp_animated}};
  if (m.webp_width.count) {
    webp["width"] = {
        {"min", m.webp_width.min}, {"mean", m.webp_width.mean()}, {"max", m.webp_width.max}};
    webp["height"] = {
        {"min", m.webp_height.min}, {"mean", m.webp_height.mean()}, {"max", m.webp_height.max}};
    webp["mean_pixels"] = m.webp_pixels.mean();
  }
  return json{{"files", files},
              {"classes", class_list},
              {"not_images", m.not_images},
              {"records", t.records},
              {"corrupt", t.corrupt},
              {"malformed", t.malformed},
              {"warnings", t.warnings},
              {"bytes", t.bytes},
              {"data_bytes", t.data_bytes},
              {"features", features},
              {"unlabeled", unlabeled},
              {"labels", labels},
              {"records_without_label", m.records_without_label},
              {"jpeg", jpeg},
              {"png", png},
              {"webp", webp},
              {"seconds", seconds},
              {"bytes_per_sec", seconds > 0 ? t.bytes / seconds : 0.0}};
}

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  if (u == 0) return fmt::format("{:.0f} {}", b, units[u]);
  return fmt::format("{:.1f} {}", b, units[u]);
}

void PrintHuman(const std::vector<FileReport>& reports, const Totals& t, double seconds,
                const InspectOptions& opt, const std::vector<std::string>& classes,
                bool image_rows) {
  size_t width = 4;
  for (const FileReport& r : reports) width = std::max(width, r.path.size());
  fmt::print("{:<{}}  {:>10}  {:>8}  {:>10}  {}\n", "file", width, "records", "corrupt", "bytes",
             "compression");
  // A folder's images (one record each) are a row each only when there are few; damaged ones
  // are named on stderr, and files that are not images below.
  for (const FileReport& r : reports) {
    if (r.compression == "image" && !image_rows) continue;
    fmt::print("{:<{}}  {:>10}  {:>8}  {:>10}  {}\n", r.path, width, r.records, r.corrupt,
               HumanBytes(static_cast<double>(r.bytes)), r.compression);
  }
  fmt::print("{:<{}}  {:>10}  {:>8}  {:>10}\n", "total", width, t.records, t.corrupt,
             HumanBytes(static_cast<double>(t.bytes)));
  for (const FileReport& r : reports) {
    if (r.index) fmt::print("tar index {}: {}\n", IndexPathFor(r.path), *r.index);
  }
  if (t.malformed) fmt::print("records that are not a tf.train.Example: {}\n", t.malformed);

  const FileReport& m = t.merged;
  if (!m.features.empty()) {
    fmt::print("\nfeatures:\n");
    for (const auto& [key, kind] : m.features)
      fmt::print("  {:<28} {}\n", key, KindOf(m, key, kind));
  }
  if (!m.labels.empty()) {
    uint64_t lo = std::numeric_limits<uint64_t>::max(), hi = 0;
    for (const auto& [label, n] : m.labels) {
      lo = std::min(lo, n);
      hi = std::max(hi, n);
    }
    fmt::print("\nlabels ({}): {} classes, {}..{}, {}..{} records per class\n", opt.label_key,
               m.labels.size(), m.labels.begin()->first, m.labels.rbegin()->first, lo, hi);
    if (m.labels.size() <= 20) {
      for (const auto& [label, n] : m.labels) fmt::print("  {:>6}: {}\n", label, n);
    }
  }
  if (m.records_without_label && t.records) {
    fmt::print("records without an int64 '{}': {}\n", opt.label_key, m.records_without_label);
  }
  if (opt.unlabeled) fmt::print("\nlabels: none read (--unlabeled)\n");
  if (m.width.count) {
    fmt::print(
        "\nJPEG ({}): {} images, width {}..{} (mean {:.0f}), height {}..{} (mean {:.0f}), "
        "mean {:.0f} kpx, {} progressive\n",
        opt.image_key, m.width.count, m.width.min, m.width.max, m.width.mean(), m.height.min,
        m.height.max, m.height.mean(), m.pixels.mean() / 1000, m.jpeg_progressive);
    std::string spaces;
    for (const auto& [cs, n] : m.color_spaces) spaces += fmt::format(" {}={}", cs, n);
    fmt::print("  colour spaces:{}\n", spaces);
  }
  if (m.png_width.count) {
    fmt::print(
        "\nPNG ({}): {} images, width {}..{} (mean {:.0f}), height {}..{} (mean {:.0f}), "
        "mean {:.0f} kpx, {} interlaced\n",
        opt.image_key, m.png_width.count, m.png_width.min, m.png_width.max, m.png_width.mean(),
        m.png_height.min, m.png_height.max, m.png_height.mean(), m.png_pixels.mean() / 1000,
        m.png_interlaced);
    std::string layouts;
    for (const auto& [layout, n] : m.png_layouts) layouts += fmt::format(" {}={}", layout, n);
    fmt::print("  layouts:{}\n", layouts);
  }
  if (m.webp_width.count) {
    fmt::print(
        "\nWebP ({}): {} images, width {}..{} (mean {:.0f}), height {}..{} (mean {:.0f}), "
        "mean {:.0f} kpx, {} lossless, {} with alpha, {} animated{}\n",
        opt.image_key, m.webp_width.count, m.webp_width.min, m.webp_width.max, m.webp_width.mean(),
        m.webp_height.min, m.webp_height.max, m.webp_height.mean(), m.webp_pixels.mean() / 1000,
        m.webp_lossless, m.webp_alpha, m.webp_animated,
        m.webp_animated ? " (the pipeline refuses animations)" : "");
  }
  if (m.not_jpeg) {
    fmt::print("'{}' values that are neither JPEG, PNG nor WebP: {}\n", opt.image_key, m.not_jpeg);
  }
  if (!classes.empty()) {
    fmt::print("\nclasses (folder names in byte order): {}\n", classes.size());
    for (size_t k = 0; k < classes.size(); ++k) {
      const auto n = m.labels.find(static_cast<int64_t>(k));
      fmt::print("  {:>6}: {} ({} files)\n", k, classes[k], n == m.labels.end() ? 0 : n->second);
    }
  }
  if (!m.not_images.empty()) {
    fmt::print("\nfiles that are not images (neither JPEG, PNG nor WebP): {}\n",
               m.not_images.size());
    for (const std::string& path : m.not_images) fmt::print("  {}\n", path);
  }
  fmt::print("\nread {} in {:.3f} s ({}/s)\n", HumanBytes(static_cast<double>(t.bytes)), seconds,
             HumanBytes(seconds > 0 ? t.bytes / seconds : 0));
}

// The files to read: opt.files as given (kinds from their names; image files labelled by folder),
// or --file-list's entries with their labels; with --unlabeled, as the pipeline resolves an
// unlabeled dataset's (pipeline/options.cc): no labels, no classes, a list of bare paths.
Result<ResolvedOptions> ResolveInspected(const InspectOptions& opt) {
  ResolvedOptions r;
  if (opt.file_list.empty()) {
    // A quoted pattern is expanded as the pipeline expands it; a file that exists under the
    // name given (the shell's expansion, brackets and all) is that file.
    for (const std::string& given : opt.files) {
      Result<uint64_t> exists = GetFileSize(given);
      if (exists.ok()) {
        r.files.push_back(given);
        continue;
      }
      ASSIGN_OR_RETURN(std::vector<std::string> matched, ExpandGlobs({given}));
      r.files.insert(r.files.end(), matched.begin(), matched.end());
    }
    RETURN_IF_ERROR(ResolveSources(v1::PipelineOptions(), &r));
    if (opt.unlabeled) {
      r.file_labels.clear();
      r.classes.clear();
    }
    return r;
  }
  Result<std::vector<ListedFile>> listed =
      ReadFileList(opt.file_list, opt.unlabeled ? ListLabels::kIgnore : ListLabels::kRead);
  if (!listed.ok()) {
    // The server's error for the list (a dataset without unlabeled: true), and, when the line
    // lacks its label (not when its label is bad) in a list that reads as bare paths, what to
    // say here.
    const std::string& m = listed.status().message();
    const bool no_label = m.ends_with(": label: missing") ||
                          m.ends_with(": label: expected 2 fields \"path,label\", found 1");
    if (!opt.unlabeled && no_label && ReadFileList(opt.file_list, ListLabels::kIgnore).ok()) {
      return InvalidArgument(listed.status().message() +
                             " (a list of unlabeled files: give --unlabeled)");
    }
    return listed.status();
  }
  for (ListedFile& f : *listed) {
    r.files.push_back(std::move(f.path));
    if (!opt.unlabeled) r.file_labels.push_back(f.label);
  }
  r.kinds.assign(r.files.size(), SourceKind::kImage);
  return r;
}

int RunInspect(InspectOptions opt) {
  auto start = std::chrono::steady_clock::now();
  Result<ResolvedOptions> resolved = ResolveInspected(opt);
  if (!resolved.ok()) {
    fmt::print(stderr, "sluice inspect: {}\n", resolved.status().message());
    return 2;
  }
  opt.files = resolved->files;
  uint64_t total_bytes = 0;
  for (const std::string& f : opt.files) {
    Result<uint64_t> size = GetFileSize(f);
    if (size.ok()) total_bytes += *size;
  }
  // Rows: every file's when there are few; else only those that are not image files and the
  // damaged image files (the first kMaxDamagedImageRows). The other images' reports are merged as
  // they arrive, per thread: a folder of 1.28M images holds no report per image.
  const bool image_rows = opt.files.size() <= kMaxProblemsShownPerFile;
  std::mutex rows_mu;
  std::vector<std::pair<size_t, FileReport>> rows;  // guarded by rows_mu, with damaged_images
  uint64_t damaged_images = 0;
  tbb::enumerable_thread_specific<Totals> merged_images;
  {
    std::optional<tbb::global_control> threads;
    if (opt.threads > 0) {
      threads.emplace(tbb::global_control::max_allowed_parallelism, opt.threads);
    }
    Progress progress("inspect", total_bytes, "bytes");
    tbb::parallel_for(size_t{0}, opt.files.size(), [&](size_t i) {
      const bool image = resolved->kinds[i] == SourceKind::kImage;
      std::optional<int64_t> label;
      if (image && !resolved->file_labels.empty()) label = resolved->file_labels[i];
      FileReport report = InspectFile(opt.files[i], resolved->kinds[i], label, opt, &progress);
      if (image && !image_rows) {
        bool row = false;
        if (report.corrupt > 0 || report.malformed > 0) {
          std::lock_guard<std::mutex> lock(rows_mu);
          row = ++damaged_images <= kMaxDamagedImageRows;
        }
        if (!row) {
          MergeInto(report, &merged_images.local());
          return;
        }
      }
      std::lock_guard<std::mutex> lock(rows_mu);
      rows.emplace_back(i, std::move(report));
    });
  }
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<FileReport> reports;
  reports.reserve(rows.size());
  for (auto& [i, report] : rows) reports.push_back(std::move(report));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Totals totals;
  for (const FileReport& r : reports) MergeInto(r, &totals);
  for (const Totals& t : merged_images) MergeInto(t, &totals);

  for (const FileReport& r : reports) {
    for (const std::string& p : r.problems) fmt::print(stderr, "sluice inspect: {}\n", p);
    if (r.problems_not_shown) {
      fmt::print(stderr, "sluice inspect: ... and {} more problems in {}\n", r.problems_not_shown,
                 r.path);
    }
    if (r.stopped) {
      fmt::print(stderr, "sluice inspect: stopped reading {} after {} records: {}\n", r.path,
                 r.records, *r.stopped);
    }
  }
  if (damaged_images > kMaxDamagedImageRows) {
    fmt::print(stderr, "sluice inspect: ... and {} more image files that could not be read\n",
               damaged_images - kMaxDamagedImageRows);
  }
  if (opt.json) {
    fmt::print("{}\n", ToJson(reports, totals, seconds, resolved->classes, opt.unlabeled).dump());
  } else {
    PrintHuman(reports, totals, seconds, opt, resolved->classes, image_rows);
  }
  // A warning fails the check too: inspect verifies, and a shard that may be cut short is not
  // verified.
  return totals.corrupt > 0 || totals.malformed > 0 || totals.warnings > 0 ||
                 !totals.merged.not_images.empty()
             ? 1
             : 0;
}

}  // namespace

void RegisterInspectCommand(CLI::App& app, int* exit_code) {
  auto opt = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect",
      "Verify TFRecord shards, WebDataset tar shards or image files and summarize records, "
      "features, labels and image sizes");
  auto* files = cmd->add_option(
      "files", opt->files,
      "TFRecord files (plain, GZIP or ZLIB), WebDataset tar shards (.tar, .tar.gz, .tgz) or image "
      "files (.jpg/.jpeg/.png/.webp, labelled by folder); a quoted pattern ('train/*/*.jpg') is "
      "expanded as the pipeline expands it");
  auto* list = cmd->add_option("--file-list", opt->file_list,
                               "A CSV or JSON-lines list of image files and labels (with "
                               "--unlabeled: bare paths), instead");
  files->excludes(list);
  cmd->callback([opt, exit_code, files, list, cmd] {
    if (files->count() == 0 && list->count() == 0) {
      fmt::print(stderr, "sluice inspect: give files or --file-list\n{}", cmd->help());
      *exit_code = 2;
      return;
    }
    *exit_code = RunInspect(*opt);
  });
  cmd->add_flag("--json", opt->json, "Print one JSON object instead of tables");
  cmd->add_option("--image-key", opt->image_key, "Feature holding the encoded image")
      ->capture_default_str();
  auto* label_key =
      cmd->add_option("--label-key", opt->label_key, "Feature holding the int64 label")
          ->capture_default_str();
  cmd->add_flag("--unlabeled", opt->unlabeled,
                "The data has no labels (as PipelineOptions.unlabeled): none is read, a tar "
                "sample's cls is an ordinary member, image files get no class from their folder, "
                "and --file-list lines are bare paths (CSV \"path\", JSON lines without \"label\")")
      ->excludes(label_key);
  cmd->add_option("--compression", opt->compression, "auto (detect), none, gzip or zlib")
      ->check(CLI::IsMember({"auto", "none", "gzip", "zlib"}))
      ->capture_default_str();
  cmd->add_option("--threads", opt->threads, "Files read in parallel (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
}

}  // namespace sluice
