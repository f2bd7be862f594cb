#include "pipeline/cache_sources.h"

namespace sluice {

bool RecordCacheSource::Read(WorkItem* w) {
  if (pos_ >= records_.size()) return false;
  const RecordCache::Record& r = records_[pos_++];
  w->record = r.index;
  w->offset = r.offset;
  w->bytes = r.bytes;
  w->length = r.length;
  if (!r.refused.ok()) {
    w->kind = WorkKind::kBadRecord;
    w->status = r.refused;
    return true;
  }
  ctx_.CountRead();
  return true;
}

bool DecodedCacheSource::Read(WorkItem* w) {
  const auto total = static_cast<uint64_t>(ctx_.decoded_cache->RecordCount(file_));
  while (next_record_ < total) {
    const uint64_t record = next_record_++;
    if (!ctx_.shard.Mine(record)) continue;
    const CachedImage* image = ctx_.decoded_cache->Find(file_, record);
    w->record = record;
    w->offset = image->offset;
    w->length = image->length;
    if (image->refused) {
      w->kind = WorkKind::kBadRecord;
      w->status = Status(image->code, image->error);
      return true;
    }
    w->cached = image;
    ctx_.CountRead();
    return true;
  }
  return false;
}

}  // namespace sluice
