#include "pipeline/record_cache_fill.h"

#include <utility>

namespace sluice {

void RecordCacheFill::Keep(uint64_t record, uint64_t offset, const std::string& bytes) {
  if (cache_ == nullptr) return;
  Add({record, offset, bytes, Status::OK(), bytes.size()}, static_cast<int64_t>(bytes.size()));
}

void RecordCacheFill::KeepRefused(const WorkItem& w) {
  if (cache_ == nullptr) return;
  Add({w.record, w.offset, std::string(), w.status, w.length},
      static_cast<int64_t>(w.status.message().size()));
}

void RecordCacheFill::Add(RecordCache::Record record, int64_t bytes) {
  if (!cache_->Reserve(bytes)) {
    Stop();
    return;
  }
  pending_bytes_ += bytes;
  pending_.push_back(std::move(record));
}

void RecordCacheFill::Finish(bool clean) {
  if (cache_ == nullptr) return;
  if (!clean) {
    Stop();
    return;
  }
  cache_->Commit(file_, std::move(pending_), pending_bytes_);
  pending_bytes_ = 0;
  cache_ = nullptr;
}

void RecordCacheFill::Stop() {
  if (cache_ == nullptr) return;
  cache_->Unreserve(pending_bytes_);
  std::vector<RecordCache::Record>().swap(pending_);
  pending_bytes_ = 0;
  cache_ = nullptr;
}

}  // namespace sluice
