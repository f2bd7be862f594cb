#include "client/fan_in_stream.h"

#include <algorithm>
#include <utility>

namespace sluice {

FanInStream::FanInStream(const std::vector<std::string>& targets, const ClientOptions& options,
                         const v1::StreamRequest& request)
    : options_(options) {
  for (size_t i = 0; i < targets.size(); ++i) {
    streams_.push_back(
        std::make_unique<ServerStream>(targets[i], options_, request, [this] { Wake(); }));
  }
  done_.assign(streams_.size(), false);
}

FanInStream::~FanInStream() {
  kept_.Release();
  streams_.clear();
}

void FanInStream::WaitStarted() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] {
    return std::all_of(streams_.begin(), streams_.end(), [](auto& s) { return s->started(); });
  });
}

Status FanInStream::FirstError() {
  for (auto& s : streams_) {
    Status error;
    if (s->FailedEarly(&error)) return error;
  }
  return Status::OK();
}

Status FanInStream::Next(ReceivedBatch* batch, bool* end_of_sequence) {
  kept_.Release();
  batch->lease.Release();
  RETURN_IF_ERROR(Get(batch, end_of_sequence));
  kept_ = std::move(batch->lease);
  return Status::OK();
}

Status FanInStream::Take(ReceivedBatch* batch, bool* end_of_sequence) {
  kept_.Release();
  batch->lease.Release();
  if (!final_.ok()) return final_;
  int held = 0;
  for (const auto& s : streams_) held += s->leased();
  if (held >= options_.max_held) {
    return FailedPrecondition("holding " + std::to_string(held) +
                              " batches; release one or raise ClientOptions::max_held");
  }
  return Get(batch, end_of_sequence);
}

int64_t FanInStream::reconnects() const {
  int64_t n = 0;
  for (const auto& s : streams_) n += s->reconnects();
  return n;
}

uint64_t FanInStream::skipped_after_last_batch() const {
  uint64_t n = 0;
  for (const auto& s : streams_) n += s->skipped_after_last_batch();
  return n;
}

int64_t FanInStream::shared_memory_batches() const {
  int64_t n = 0;
  for (const auto& s : streams_) n += s->shared_batches();
  return n;
}

Status FanInStream::Get(ReceivedBatch* batch, bool* end_of_sequence) {
  *end_of_sequence = false;
  if (!final_.ok()) return final_;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    bool all_done = true;
    for (size_t k = 0; k < streams_.size(); ++k) {
      const size_t i = (next_ + k) % streams_.size();
      if (done_[i]) continue;
      ServerStream::Item item;
      bool done = false;
      Status s;
      if (streams_[i]->TryTake(&item, &batch->lease, &done, &s)) {
        next_ = (i + 1) % streams_.size();
        batch->meta = item.meta;
        batch->images = {item.arrays->image_data(), item.meta.image_bytes()};
        const BatchArrays& a = *item.arrays;
        batch->labels = {a.labels.data(), a.labels.size()};
        batch->valid = {a.valid.data(), a.valid.size()};
        batch->record_files = {a.record_files.data(), a.record_files.size()};
        batch->record_indexes = {a.record_indexes.data(), a.record_indexes.size()};
        batch->mixed_labels = {a.mixed_labels.data(), a.mixed_labels.size()};
        batch->label_weights = {a.label_weights.data(), a.label_weights.size()};
        batch->features = {a.features.data(), a.feature_count};
        batch->server = static_cast<int>(i);
        lock.unlock();  // releasing a lease may Wake() this stream
        return CheckFormat(batch, i);
      }
      if (done) {
        done_[i] = true;
        if (!s.ok()) {
          final_ = s;
          return final_;
        }
        continue;
      }
      all_done = false;
    }
    if (all_done) {
      *end_of_sequence = true;
      return Status::OK();
    }
    cv_.wait(lock);
  }
}

Status FanInStream::CheckFormat(ReceivedBatch* batch, size_t server) {
  const Format got{batch->meta.dtype, batch->meta.layout, !batch->mixed_labels.empty()};
  if (!format_) {
    format_ = got;
    format_server_ = server;
    return Status::OK();
  }
  if (got == *format_) return Status::OK();
  auto name = [](const Format& f) {
    return std::string(DTypeName(f.dtype)) + " " + std::string(LayoutName(f.layout)) +
           (f.mixed_labels ? " with mixed labels" : " without mixed labels");
  };
  batch->lease.Release();
  final_ = FailedPrecondition("batches of " + name(got) + " from " + streams_[server]->target() +
                              ", after batches of " + name(*format_) + " from " +
                              streams_[format_server_]->target() +
                              ": the servers of a stream must give one output (their transform "
                              "sets differ)");
  return final_;
}

void FanInStream::Wake() {
  { std::lock_guard<std::mutex> lock(mu_); }
  cv_.notify_all();
}

}  // namespace sluice
