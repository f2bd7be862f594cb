#include "pipeline/file_reader_source.h"

#include <string_view>
#include <utility>

#include "pipeline/read_ahead_file.h"

namespace sluice {

RecordReaderOptions RecordReaderOptionsFor(const ResolvedOptions& options, uint32_t file) {
  RecordReaderOptions rro;
  rro.image_key = options.image_key;
  // Unlabeled: no label is read (a tar sample's cls is then an ordinary member).
  rro.label_key = options.unlabeled ? std::string() : options.label_key;
  if (!options.file_labels.empty() && options.file_labels[file] >= 0) {
    rro.label = options.file_labels[file];
  }
  rro.stream.compression = options.compression;
  rro.stream.max_held_record_bytes = static_cast<uint64_t>(options.max_held_record_bytes);
  return rro;
}

FileReaderSource::FileReaderSource(const SourceContext& ctx, uint32_t file, bool fill_cache,
                                   FileStart start)
    : FileReaderSource(ctx, file, RecordCacheFill(fill_cache ? ctx.record_cache : nullptr, file),
                       start) {}

FileReaderSource::FileReaderSource(const SourceContext& ctx, uint32_t file, RecordCacheFill fill,
                                   FileStart start)
    : ctx_(ctx),
      file_(file),
      start_offset_(start.offset),
      next_record_(start.record),
      clean_(start.clean),
      fill_(std::move(fill)) {}

FileReaderSource::~FileReaderSource() {
  if (reader_) ctx_.stats->pool(Pool::kReadBuffers).Remove(kReadBufferBytes);
}

bool FileReaderSource::OpenReader(WorkItem* w) {
  const ResolvedOptions& options = *ctx_.options;
  RecordReaderOptions rro = RecordReaderOptionsFor(options, file_);
  TFRecordReaderOptions& ro = rro.stream;
  ro.buffer_bytes = kReadBufferBytes;
  ro.start_offset = start_offset_;
  if (ctx_.io_pool != nullptr) {
    // The read-ahead's chunks account themselves; the reader's buffer is added below.
    ro.wrap_stream = [this](std::unique_ptr<SequentialFile> stream) {
      ReadAheadOptions ra;
      ra.memory = &ctx_.stats->pool(Pool::kReadBuffers);
      return NewReadAheadFile(std::move(stream), ctx_.io_pool, ra);
    };
  }
  Result<std::unique_ptr<RecordReader>> reader =
      OpenRecordReader(options.files[file_], options.kinds[file_], rro);
  if (!reader.ok()) {
    clean_ = false;
    Finish();
    w->kind = WorkKind::kBadRecord;
    w->status = reader.status();
    w->offset = 0;
    return false;
  }
  reader_ = std::move(*reader);
  ctx_.stats->pool(Pool::kReadBuffers).Add(kReadBufferBytes);
  return true;
}

bool FileReaderSource::Read(WorkItem* w) {
  if (done_) return false;
  if (!reader_ && !OpenReader(w)) return true;  // w names the file that would not open
  for (;;) {
    const uint64_t index = next_record_;
    const bool mine = ctx_.shard.Mine(index);
    // A record of this shard goes straight into the item (held once however large); another
    // shard's is checked as it streams through the reader's buffer, never held.
    bool eof = false;
    Status s = mine ? reader_->ReadRecordInto(&w->owned, &eof) : reader_->SkipRecord(&eof);
    if (s.ok() && eof) {
      // Read as far as it goes, but maybe not all there was (a tar shard without its end
      // marker): said once, the records read stand.
      if (const std::string w = reader_->warning(); !w.empty()) {
        ctx_.stats->WarnOnce(ctx_.options->name + ": " + w);
      }
      Finish();
      return false;
    }
    ++next_record_;
    if (!s.ok()) {
      // A record over the per-record limit is refused the same way every time: the file stays
      // clean, and the caches replay the refusal without reading it again.
      const bool refused = s.code() == StatusCode::kResourceExhausted && reader_->can_continue();
      if (!refused) clean_ = false;
      const uint64_t offset = reader_->record_offset();
      const uint64_t length = reader_->record_length();
      if (!reader_->can_continue()) Finish();
      if (!mine) {
        if (done_) return false;
        continue;
      }
      std::string().swap(w->owned);  // whatever a damaged record left there
      w->kind = WorkKind::kBadRecord;
      w->status = s;
      w->record = index;
      w->offset = offset;
      w->length = length;
      if (refused) {
        KeepRefusedDecoded(ctx_, file_, *w);
        fill_.KeepRefused(*w);
      }
      return true;
    }
    if (!mine) continue;
    w->record = index;
    w->offset = reader_->record_offset();
    w->length = w->owned.size();
    w->bytes = w->owned;
    ctx_.CountRead();
    ctx_.stats->stage(Stage::kRead).bytes.fetch_add(w->owned.size(), std::memory_order_relaxed);
    fill_.Keep(index, w->offset, w->owned);
    return true;
  }
}

void KeepRefusedDecoded(const SourceContext& ctx, uint32_t file, const WorkItem& w) {
  if (ctx.decoded_cache == nullptr) return;
  CachedImage tombstone;
  tombstone.error = w.status.message();
  tombstone.code = w.status.code();
  tombstone.refused = true;
  tombstone.offset = w.offset;
  tombstone.length = w.length;
  ctx.decoded_cache->Insert(file, w.record, std::move(tombstone));
}

void FileReaderSource::Finish() {
  done_ = true;
  if (reader_) {
    ctx_.stats->pool(Pool::kReadBuffers).Remove(kReadBufferBytes);
    reader_.reset();
  }
  fill_.Finish(clean_);
  if (clean_) ctx_.FileReadCleanly(file_, next_record_);
}

}  // namespace sluice
