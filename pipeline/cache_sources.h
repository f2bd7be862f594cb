// The two cached kinds of Source: a file whose raw records the RECORDS cache holds (no I/O), and
// a file whose every record of this shard the DECODED cache holds (no I/O, no parse, no decode).
#pragma once

#include <cstdint>
#include <vector>

#include "pipeline/caches.h"
#include "pipeline/source.h"

namespace sluice {

class RecordCacheSource final : public Source {
 public:
  // records: RecordCache::Find's answer for the file; the cache outlives this.
  RecordCacheSource(const SourceContext& ctx, const std::vector<RecordCache::Record>* records)
      : ctx_(ctx), records_(*records) {}
  bool Read(WorkItem* w) override;

 private:
  const SourceContext& ctx_;
  const std::vector<RecordCache::Record>& records_;
  size_t pos_ = 0;
};

class DecodedCacheSource final : public Source {
 public:
  // REQUIRES: ctx.decoded_cache->Complete(file).
  DecodedCacheSource(const SourceContext& ctx, uint32_t file) : ctx_(ctx), file_(file) {}
  bool Read(WorkItem* w) override;

 private:
  const SourceContext& ctx_;
  const uint32_t file_;
  uint64_t next_record_ = 0;
};

}  // namespace sluice
