#include "pipeline/record_index_source.h"

#include <algorithm>
#include <limits>
#include <string_view>
#include <utility>

#include "formats/file.h"
#include "formats/tar_sample_reader.h"
#include "formats/tfrecord_reader.h"
#include "pipeline/read_ahead_file.h"

namespace sluice {
namespace {

// The next n bytes of a stream others read on from: a record's range of the ranges stream.
class RangeOfStream final : public SequentialFile {
 public:
  RangeOfStream(SequentialFile* base, uint64_t n) : base_(base), left_(n) {}

  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    *bytes_read = 0;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, left_));
    if (want == 0) return Status::OK();
    RETURN_IF_ERROR(base_->Read(want, scratch, bytes_read));
    left_ -= *bytes_read;
    return Status::OK();
  }

  const std::string& name() const override { return base_->name(); }

 private:
  SequentialFile* const base_;
  uint64_t left_;
};

uint64_t RecordEnd(const TFRecordReader& reader) { return reader.offset(); }
uint64_t RecordEnd(const TarSampleReader& reader) { return reader.record_end(); }

template <typename Reader>
IndexedRead ReadOne(Reader* reader, SourceKind kind, const std::string& path, uint64_t offset,
                    uint64_t length, std::string* record) {
  IndexedRead r;
  bool eof = false;
  r.status = reader->ReadRecordInto(record, &eof);
  r.final = !reader->can_continue();
  r.offset = reader->record_offset();
  r.length = reader->record_length();
  const char* what = kind == SourceKind::kTar ? "sample" : "record";
  if (r.status.ok() && eof) {
    r.status = DataLoss("no " + std::string(what) + " at " + path + ":" + std::to_string(offset) +
                        " (the file ends before the one its index promises there)");
    r.offset = offset;
    r.final = true;
  } else if (!r.final && RecordEnd(*reader) != offset + length) {
    // The file changed since its entry was checked (rewritten under the stream): nothing after
    // it can be trusted either.
    r.status = DataLoss(std::string(what) + " at " + path + ":" + std::to_string(r.offset) +
                        " ends at " + std::to_string(RecordEnd(*reader)) + ", its index entry at " +
                        std::to_string(offset + length));
    r.final = true;
  }
  return r;
}

}  // namespace

std::unique_ptr<SequentialFile> NewRangeOfStream(SequentialFile* base, uint64_t n) {
  return std::make_unique<RangeOfStream>(base, n);
}

IndexedRead ReadIndexedRecord(SourceKind kind, const std::string& path,
                              std::unique_ptr<SequentialFile> stream, RecordReaderOptions options,
                              uint64_t offset, uint64_t length, std::string* record) {
  options.stream.compression = Compression::kNone;
  options.stream.start_offset = offset;
  options.stream.wrap_stream = nullptr;
  // Enough for the record in one read; more only for a record that is larger.
  options.stream.buffer_bytes =
      static_cast<size_t>(std::clamp<uint64_t>(length, kTarBlockBytes, kReadBufferBytes));
  if (kind == SourceKind::kTar) {
    TarSampleReader reader(std::move(stream), options);
    return ReadOne(&reader, kind, path, offset, length, record);
  }
  TFRecordReader reader(std::move(stream), options.stream);
  return ReadOne(&reader, kind, path, offset, length, record);
}

std::unique_ptr<RecordIndexSource> RecordIndexSource::Open(const SourceContext& ctx, uint32_t file,
                                                           const LazyWindow* window,
                                                           bool fill_cache) {
  RecordCache* fill = fill_cache ? ctx.record_cache : nullptr;
  // A source filling the cache never gives lazy records, whatever the window: a lazy record holds
  // no bytes to keep.
  static const LazyWindow kClosed;
  if (fill != nullptr) window = &kClosed;
  const std::optional<Compression>& compression = ctx.options->compression;
  const std::string& path = ctx.options->files[file];
  const SourceKind kind = ctx.options->kinds[file];
  // Each kind reads its own format of `.idx`: one of the other kind does not parse as it.
  if (kind != SourceKind::kTFRecord && kind != SourceKind::kTar) return nullptr;
  if (compression && *compression != Compression::kNone) return nullptr;
  Result<uint64_t> size = GetFileSize(path);
  if (!size.ok()) return nullptr;
  // Without a usable `.idx` beside the file, the index is built from its headers now: what
  // `sluice index` would write, up to any damage the file's reader cannot step past (the rest of
  // the file, from there, is read as the reader reads it). Each header is its own read, payloads
  // seeked over whatever their size: the entries a stream uses are read again, and the others
  // (another rank's records; records past a lazy start's last, which is not known here) should
  // cost only their headers. A lazy start alone needs no more entries than the window has records
  // left (those of every file in the interleave cycle together); ranks sharing the file number
  // them all.
  const std::string built_name = path + " (its index built on open)";
  const uint64_t build_limit = ctx.shard.count > 1 || !window->open()
                                   ? std::numeric_limits<uint64_t>::max()
                                   : window->until - window->produced;
  if (kind == SourceKind::kTar) {
    if (!compression) {
      Result<Compression> detected = DetectTarCompression(path);
      if (!detected.ok() || *detected != Compression::kNone) return nullptr;
    }
    // An index of a larger version of the file, which would put samples past its end, does not
    // read.
    std::vector<TarIndexSample> samples;
    std::string index_name;
    if (Result<std::vector<TarIndexSample>> read = ReadTarIndex(IndexPathFor(path), *size);
        read.ok()) {
      samples = std::move(*read);
    } else {
      TarSamplesScan scan =
          ScanTarSamples(path, static_cast<size_t>(std::min<uint64_t>(build_limit, SIZE_MAX)),
                         /*headers_only=*/true);
      if (scan.samples.empty()) return nullptr;
      samples = std::move(scan.samples);
      index_name = built_name;
    }
    Result<TarIndexChecker> checker =
        TarIndexChecker::Open(path, RecordReaderOptionsFor(*ctx.options, file), index_name);
    if (!checker.ok()) return nullptr;
    std::vector<IndexEntry> index;
    index.reserve(samples.size());
    for (size_t i = 0; i < samples.size(); ++i) {
      const uint64_t start = TarSampleStart(samples, i);
      index.push_back(IndexEntry{start, samples[i].padded_end() - start});
    }
    // A tar index is only known to describe the shard up to its last sample.
    auto source = std::unique_ptr<RecordIndexSource>(
        new RecordIndexSource(ctx, file, window, std::move(index), /*tiles=*/false, fill));
    source->samples_ = std::move(samples);
    source->tar_checker_.emplace(std::move(*checker));
    source->AccountIndex();
    return source;
  }
  if (!compression && *size > 0) {
    Result<std::string> head =
        ReadFileRange(path, 0, std::min<uint64_t>(*size, kTFRecordHeaderBytes));
    if (!head.ok() || DetectCompression(*head) != Compression::kNone) return nullptr;
  }
  // An index of another version of the file would put frames in the wrong places.
  Result<std::vector<IndexEntry>> read = ReadRecordIndex(IndexPathFor(path));
  if (read.ok() && IndexEndsWithFile(*read, *size)) {
    // A rank sharing the file checks the other ranks' frames from their headers alone.
    Result<IndexedFrameChecker> checker =
        IndexedFrameChecker::Open(path, /*headers_only=*/ctx.shard.count > 1);
    if (!checker.ok()) return nullptr;
    auto source = std::unique_ptr<RecordIndexSource>(
        new RecordIndexSource(ctx, file, window, std::move(*read), /*tiles=*/true, fill));
    source->frame_checker_.emplace(std::move(*checker));
    source->AccountIndex();
    return source;
  }
  // Built from the headers just read, the entries need no check against them.
  Result<UniqueFd> fd = OpenForPositionalReads(path);
  if (!fd.ok()) return nullptr;
  FrameHeaderWalker walker(fd->get(), path, *size);
  std::vector<IndexEntry> index;
  IndexEntry frame;
  while (index.size() < build_limit && walker.Next(&frame)) index.push_back(frame);
  const bool tiles = walker.status().ok() && IndexEndsWithFile(index, *size);
  if (index.empty() && !tiles) return nullptr;
  auto source = std::unique_ptr<RecordIndexSource>(
      new RecordIndexSource(ctx, file, window, std::move(index), tiles, fill));
  source->AccountIndex();
  return source;
}

Status RecordIndexSource::Check(size_t i) {
  if (tar_checker_) return tar_checker_->Check(samples_, i);
  return frame_checker_ ? frame_checker_->Check(index_, i) : Status::OK();
}

bool RecordIndexSource::Read(WorkItem* w) {
  if (rest_) return rest_->Read(w);
  if (done_) return false;
  const bool lazy = window_->open();
  if (lazy || ctx_.shard.count > 1) {
    while (index_pos_ < index_.size()) {
      const IndexEntry& e = index_[index_pos_];
      // Records of other shards are numbered by their entries too: each one is checked, so every
      // rank falls back at the same entry of a lying index and they still share the records out
      // exactly once.
      Status s = Check(index_pos_);
      if (!s.ok()) {
        ctx_.stats->index_fallbacks.fetch_add(1, std::memory_order_relaxed);
        // Once a stream: ranks sharing the file meet the same stale entry every epoch.
        ctx_.stats->WarnOnce(s.message() + "; reading " + ctx_.options->files[file_] +
                             " from offset " + std::to_string(e.offset) + " on instead");
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
      if (!lazy) return ReadOwn(w, e);
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
  // record's frame. Nothing is left after the last entry of an index that tiles the file; what
  // follows one that does not (a tar archive's end or samples its index does not list, the damage
  // that ended a built index) is read as the file's reader reads it.
  if (index_pos_ >= index_.size() && tiles_) {
    Finish(clean_);
    return false;
  }
  return ReadRest(w);
}

bool RecordIndexSource::ReadOwn(WorkItem* w, const IndexEntry& e) {
  const std::string& path = ctx_.options->files[file_];
  const SourceKind kind = ctx_.options->kinds[file_];
  if (!ranges_) {
    // This rank's entries from here on (entry i is record i): the only bytes of the file it
    // reads from now.
    std::vector<FileRange> ranges;
    for (size_t i = index_pos_ - 1; i < index_.size(); ++i) {
      if (ctx_.shard.Mine(i)) ranges.push_back({index_[i].offset, index_[i].length});
    }
    Result<std::unique_ptr<SequentialFile>> file = OpenRangesFile(path, std::move(ranges));
    if (!file.ok()) {
      w->kind = WorkKind::kBadRecord;
      w->status = file.status();
      w->offset = e.offset;
      w->length = 0;
      Finish(/*clean=*/false);
      return true;
    }
    ranges_ = std::move(*file);
    if (ctx_.io_pool != nullptr) {
      ReadAheadOptions ra;
      ra.memory = &ctx_.stats->pool(Pool::kReadBuffers);
      ranges_ = NewReadAheadFile(std::move(ranges_), ctx_.io_pool, ra);
    }
    ctx_.stats->pool(Pool::kReadBuffers).Add(kReadBufferBytes);
    ranges_options_ = RecordReaderOptionsFor(*ctx_.options, file_);
  }
  const IndexedRead r = ReadIndexedRecord(kind, path, NewRangeOfStream(ranges_.get(), e.length),
                                          ranges_options_, e.offset, e.length, &w->owned);
  if (r.status.ok()) {
    w->offset = r.offset;
    w->length = w->owned.size();
    w->bytes = w->owned;
    ctx_.CountRead();
    ctx_.stats->stage(Stage::kRead).bytes.fetch_add(w->owned.size(), std::memory_order_relaxed);
    fill_.Keep(w->record, w->offset, w->owned);
    return true;
  }
  // As FileReaderSource reports it: a record over the per-record limit is refused the same way
  // every time (the file stays clean, the decoded cache replays the refusal); any other error is
  // the record's, and one the reader cannot step past ends the file.
  const bool refused = r.status.code() == StatusCode::kResourceExhausted && !r.final;
  if (!refused) clean_ = false;
  std::string().swap(w->owned);
  w->kind = WorkKind::kBadRecord;
  w->status = r.status;
  w->offset = r.offset;
  w->length = r.length;
  if (refused) {
    KeepRefusedDecoded(ctx_, file_, *w);
    fill_.KeepRefused(*w);
  }
  if (r.final) Finish(/*clean=*/false);
  return true;
}

bool RecordIndexSource::ReadRest(WorkItem* w) {
  const uint64_t start = index_pos_ < index_.size() ? index_[index_pos_].offset
                         : index_.empty()           ? 0
                                                    : index_.back().offset + index_.back().length;
  rest_ = std::make_unique<FileReaderSource>(ctx_, file_, std::move(fill_),
                                             FileStart{start, next_record_, clean_});
  Release();
  return rest_->Read(w);
}

void RecordIndexSource::AccountIndex() {
  index_bytes_ = static_cast<int64_t>(index_.capacity() * sizeof(IndexEntry) +
                                      samples_.capacity() * sizeof(TarIndexSample));
  for (const TarIndexSample& sample : samples_) {
    index_bytes_ += static_cast<int64_t>(sample.members.capacity() * sizeof(TarIndexMember));
    for (const TarIndexMember& m : sample.members) {
      index_bytes_ += static_cast<int64_t>(m.ext.capacity() + m.name.capacity());
    }
  }
  ctx_.stats->pool(Pool::kReadBuffers).Add(index_bytes_, 0);
}

void RecordIndexSource::Release() {
  ctx_.stats->pool(Pool::kReadBuffers).Remove(index_bytes_, 0);
  index_bytes_ = 0;
  if (ranges_) {
    ranges_.reset();
    ctx_.stats->pool(Pool::kReadBuffers).Remove(kReadBufferBytes);
  }
  // The index, the checkers' descriptors and buffers are not needed past here either.
  std::vector<IndexEntry>().swap(index_);
  std::vector<TarIndexSample>().swap(samples_);
  tar_checker_.reset();
  frame_checker_.reset();
}

void RecordIndexSource::Finish(bool clean) {
  done_ = true;
  Release();
  fill_.Finish(clean);
  if (clean) ctx_.FileReadCleanly(file_, next_record_);
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
  RecordReaderOptions options;
  options.stream.max_held_record_bytes = max_held_record_bytes;
  Result<std::unique_ptr<SequentialFile>> file = OpenSequentialFile(path, w->offset);
  if (!file.ok()) return FinishMaterializing(file.status(), stats, w);
  FinishMaterializing(ReadIndexedRecord(SourceKind::kTFRecord, path, std::move(*file), options,
                                        w->offset, length, &w->owned)
                          .status,
                      stats, w);
}

void MaterializeLazySample(const std::string& path, const RecordReaderOptions& options,
                           PipelineStats* stats, WorkItem* w) {
  const uint64_t length = w->lazy_length;
  w->lazy_length = 0;
  StageTimer timer(stats->stage(Stage::kRead));
  Result<std::unique_ptr<SequentialFile>> file = OpenSequentialFile(path, w->offset);
  if (!file.ok()) return FinishMaterializing(file.status(), stats, w);
  FinishMaterializing(ReadIndexedRecord(SourceKind::kTar, path, std::move(*file), options,
                                        w->offset, length, &w->owned)
                          .status,
                      stats, w);
}

}  // namespace sluice
