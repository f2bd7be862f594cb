#include "pipeline/record_index_source.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "formats/file.h"
#include "formats/tar_sample_reader.h"

namespace sluice {

std::unique_ptr<RecordIndexSource> RecordIndexSource::Open(const SourceContext& ctx, uint32_t file,
                                                           const LazyWindow* window) {
  const std::optional<Compression>& compression = ctx.options->compression;
  const std::string& path = ctx.options->files[file];
  const SourceKind kind = ctx.options->kinds[file];
  // Each kind reads its own format of `.idx`: one of the other kind does not parse as it.
  if (kind != SourceKind::kTFRecord && kind != SourceKind::kTar) return nullptr;
  if (compression && *compression != Compression::kNone) return nullptr;
  Result<uint64_t> size = GetFileSize(path);
  if (!size.ok()) return nullptr;
  if (kind == SourceKind::kTar) {
    if (!compression) {
      Result<Compression> detected = DetectTarCompression(path);
      if (!detected.ok() || *detected != Compression::kNone) return nullptr;
    }
    // An index of a larger version of the file, which would put samples past its end, does not
    // read.
    Result<std::vector<TarIndexSample>> samples = ReadTarIndex(IndexPathFor(path), *size);
    if (!samples.ok()) return nullptr;
    Result<TarIndexChecker> checker =
        TarIndexChecker::Open(path, RecordReaderOptionsFor(*ctx.options, file));
    if (!checker.ok()) return nullptr;
    std::vector<IndexEntry> index;
    index.reserve(samples->size());
    for (size_t i = 0; i < samples->size(); ++i) {
      const uint64_t start = TarSampleStart(*samples, i);
      index.push_back(IndexEntry{start, (*samples)[i].padded_end() - start});
    }
    auto source = std::unique_ptr<RecordIndexSource>(
        new RecordIndexSource(ctx, file, window, std::move(index)));
    source->samples_ = std::move(*samples);
    source->tar_checker_.emplace(std::move(*checker));
    return source;
  }
  Result<std::vector<IndexEntry>> index = ReadRecordIndex(IndexPathFor(path));
  if (!index.ok()) return nullptr;
  // An index of another version of the file would put frames in the wrong places.
  const uint64_t indexed = index->empty() ? 0 : index->back().offset + index->back().length;
  if (indexed != *size) return nullptr;
  if (!compression && *size > 0) {
    Result<std::string> head =
        ReadFileRange(path, 0, std::min<uint64_t>(*size, kTFRecordHeaderBytes));
    if (!head.ok() || DetectCompression(*head) != Compression::kNone) return nullptr;
  }
  Result<IndexedFrameChecker> checker = IndexedFrameChecker::Open(path);
  if (!checker.ok()) return nullptr;
  auto source = std::unique_ptr<RecordIndexSource>(
      new RecordIndexSource(ctx, file, window, std::move(*index)));
  source->frame_checker_.emplace(std::move(*checker));
  return source;
}

Status RecordIndexSource::Check(size_t i) {
  return tar_checker_ ? tar_checker_->Check(samples_, i) : frame_checker_->Check(index_, i);
}

bool RecordIndexSource::Read(WorkItem* w) {
  if (rest_) return rest_->Read(w);
  if (done_) return false;
  if (window_->open()) {
    while (index_pos_ < index_.size()) {
      const IndexEntry& e = index_[index_pos_];
      // Records of other shards are numbered by their entries too: each one is checked.
      Status s = Check(index_pos_);
      if (!s.ok()) {
        ctx_.stats->index_fallbacks.fetch_add(1, std::memory_order_relaxed);
        ctx_.stats->Warn(s.message() + "; reading " + ctx_.options->files[file_] + " from offset " +
                         std::to_string(e.offset) + " on instead");
        return ReadRest(w);
      }
      // Checking the next entry needs only where this one ends: its names are not kept.
      if (tar_checker_ && index_pos_ > 0) {
        std::vector<TarIndexMember>().swap(samples_[index_pos_ - 1].members);
      }
      ++index_pos_;
      const uint64_t record = next_record_++;
      if (!ctx_.shard.Mine(record)) continue;
      w->record = record;
      if (tar_checker_) {
        // Where and how long the reading path would have it: from the sample's first header.
        w->offset = tar_checker_->record_offset();
        w->lazy_length = e.offset + e.length - w->offset;
        w->length = tar_checker_->record_length();
      } else {
        w->offset = e.offset;
        w->lazy_length = e.length;
        w->length = e.length - kTFRecordHeaderBytes - kTFRecordFooterBytes;
      }
      ctx_.CountRead();
      return true;
    }
  }
  // Caught up with the start, or through the index: read the rest of the file from the next
  // record's frame. A TFRecord index tiles the file, so nothing is left after its last entry; a
  // tar index is only known to describe the shard up to its last sample, and what follows (the
  // end of the archive, or samples the index does not list) is read as the file's reader reads it.
  if (index_pos_ >= index_.size() && !tar_checker_) {
    Finish();
    return false;
  }
  return ReadRest(w);
}

bool RecordIndexSource::ReadRest(WorkItem* w) {
  const uint64_t start = index_pos_ < index_.size() ? index_[index_pos_].offset
                         : index_.empty()           ? 0
                                                    : index_.back().offset + index_.back().length;
  rest_ = std::make_unique<FileReaderSource>(ctx_, file_, /*fill_cache=*/false,
                                             FileStart{start, next_record_});
  std::vector<IndexEntry>().swap(index_);
  std::vector<TarIndexSample>().swap(samples_);
  // The checkers' descriptors and buffers are not needed past the window either.
  tar_checker_.reset();
  frame_checker_.reset();
  return rest_->Read(w);
}

void RecordIndexSource::Finish() {
  done_ = true;
  ctx_.FileReadCleanly(file_, next_record_);
}

namespace {

// A lazy item read (s OK: w->owned holds it) or not: then a bad record holding nothing.
void FinishMaterializing(const Status& s, PipelineStats* stats, WorkItem* w) {
  if (!s.ok()) {
    std::string().swap(w->owned);
    w->kind = WorkKind::kBadRecord;
    w->status = s;
    return;
  }
  w->bytes = w->owned;
  stats->stage(Stage::kRead).bytes.fetch_add(w->owned.size(), std::memory_order_relaxed);
}

}  // namespace

void MaterializeLazyRecord(const std::string& path, uint64_t max_held_record_bytes,
                           PipelineStats* stats, WorkItem* w) {
  const uint64_t length = w->lazy_length;
  w->lazy_length = 0;
  StageTimer timer(stats->stage(Stage::kRead));
  // The frame, read from its offset as the file's reader would (both CRCs checked, a record over
  // the limit refused from its length field), into the item: held once.
  TFRecordReaderOptions ro;
  ro.compression = Compression::kNone;
  ro.start_offset = w->offset;
  ro.buffer_bytes = std::min<uint64_t>(length, kReadBufferBytes);
  ro.max_held_record_bytes = max_held_record_bytes;
  Result<std::unique_ptr<TFRecordReader>> reader = TFRecordReader::Open(path, ro);
  Status s = reader.status();
  if (s.ok()) {
    bool eof = false;
    s = (*reader)->ReadRecordInto(&w->owned, &eof);
    if (s.ok() && eof) {
      s = DataLoss("truncated record at " + path + ":" + std::to_string(w->offset) +
                   " (the record index promises a frame there)");
    } else if (s.ok() && (*reader)->offset() != w->offset + length) {
      // The frame changed since its entry was checked (a file rewritten under the stream).
      s = DataLoss("record at " + path + ":" + std::to_string(w->offset) + " is " +
                   std::to_string((*reader)->offset() - w->offset) + " bytes, its index entry " +
                   std::to_string(length));
    }
  }
  FinishMaterializing(s, stats, w);
}

void MaterializeLazySample(const std::string& path, const RecordReaderOptions& options,
                           PipelineStats* stats, WorkItem* w) {
  const uint64_t length = w->lazy_length;
  w->lazy_length = 0;
  StageTimer timer(stats->stage(Stage::kRead));
  // The sample, read from its first header as the file's reader would (every header checked, a
  // sample over max_held_record_bytes refused), into the item: held once.
  RecordReaderOptions ro = options;
  ro.stream.compression = Compression::kNone;
  ro.stream.start_offset = w->offset;
  ro.stream.buffer_bytes =
      static_cast<size_t>(std::clamp<uint64_t>(length, kTarBlockBytes, kReadBufferBytes));
  ro.stream.wrap_stream = nullptr;
  Result<std::unique_ptr<TarSampleReader>> reader = TarSampleReader::Open(path, ro);
  Status s = reader.status();
  if (s.ok()) {
    bool eof = false;
    s = (*reader)->ReadRecordInto(&w->owned, &eof);
    const uint64_t end = (*reader)->record_end();
    if (s.ok() && eof) {
      s = DataLoss("no sample at " + path + ":" + std::to_string(w->offset) +
                   " (the tar index promises one there)");
    } else if ((s.ok() || (*reader)->can_continue()) && end != w->offset + length) {
      // The sample changed since its entry was checked (a file rewritten under the stream).
      s = DataLoss("sample at " + path + ":" + std::to_string(w->offset) + " ends at " +
                   std::to_string(end) + ", its index entry at " +
                   std::to_string(w->offset + length));
    }
  }
  FinishMaterializing(s, stats, w);
}

}  // namespace sluice
