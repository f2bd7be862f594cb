#include "pipeline/record_index_source.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "formats/file.h"

namespace sluice {

std::unique_ptr<RecordIndexSource> RecordIndexSource::Open(const SourceContext& ctx, uint32_t file,
                                                           const LazyWindow* window) {
  const std::optional<Compression>& compression = ctx.options->compression;
  const std::string& path = ctx.options->files[file];
  if (ctx.options->kinds[file] != SourceKind::kTFRecord) return nullptr;  // its `.idx` is not ours
  if (compression && *compression != Compression::kNone) return nullptr;
  Result<std::vector<IndexEntry>> index = ReadRecordIndex(IndexPathFor(path));
  if (!index.ok()) return nullptr;
  Result<uint64_t> size = GetFileSize(path);
  if (!size.ok()) return nullptr;
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
  return std::unique_ptr<RecordIndexSource>(
      new RecordIndexSource(ctx, file, window, std::move(*index), std::move(*checker)));
}

bool RecordIndexSource::Read(WorkItem* w) {
  if (rest_) return rest_->Read(w);
  if (done_) return false;
  if (window_->open()) {
    while (index_pos_ < index_.size()) {
      const IndexEntry& e = index_[index_pos_];
      // Records of other shards are numbered by their entries too: each one is checked.
      Status s = checker_.Check(index_, index_pos_);
      if (!s.ok()) {
        ctx_.stats->index_fallbacks.fetch_add(1, std::memory_order_relaxed);
        ctx_.stats->Warn(s.message() + "; reading " + ctx_.options->files[file_] + " from offset " +
                         std::to_string(e.offset) + " on instead");
        return ReadRest(w);
      }
      ++index_pos_;
      const uint64_t record = next_record_++;
      if (!ctx_.shard.Mine(record)) continue;
      w->record = record;
      w->offset = e.offset;
      w->lazy_length = e.length;
      w->length = e.length - kTFRecordHeaderBytes - kTFRecordFooterBytes;
      ctx_.CountRead();
      return true;
    }
    Finish();
    return false;
  }
  // Caught up with the start: read the rest of the file from the next record's frame.
  if (index_pos_ >= index_.size()) {
    Finish();
    return false;
  }
  return ReadRest(w);
}

bool RecordIndexSource::ReadRest(WorkItem* w) {
  rest_ = std::make_unique<FileReaderSource>(ctx_, file_, /*fill_cache=*/false,
                                             FileStart{index_[index_pos_].offset, next_record_});
  std::vector<IndexEntry>().swap(index_);
  return rest_->Read(w);
}

void RecordIndexSource::Finish() {
  done_ = true;
  ctx_.FileReadCleanly(file_, next_record_);
}

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
  if (!s.ok()) {
    std::string().swap(w->owned);
    w->kind = WorkKind::kBadRecord;
    w->status = s;
    return;
  }
  w->bytes = w->owned;
  stats->stage(Stage::kRead).bytes.fetch_add(w->owned.size(), std::memory_order_relaxed);
}

}  // namespace sluice
